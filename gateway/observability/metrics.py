"""Every Prometheus metric of the gateway, built on an injected ``CollectorRegistry``.

Names carry the ``a2a_gateway_`` prefix, base units and ``_total`` on counters. Label values
come from bounded sets (method names fall back to ``other``); task, context and request ids go
to logs, never to labels (docs/architecture.md, convention 10).

=====================================================  =========================================
metric                                                 labels
=====================================================  =========================================
``a2a_gateway_requests_total``                         upstream, binding, method, outcome
``a2a_gateway_request_duration_seconds``               upstream, binding, method
``a2a_gateway_tenant_requests_total``                  upstream, tenant, outcome (only with admin.metric_tenants)
``a2a_gateway_upstream_errors_total``                  upstream, reason
``a2a_gateway_limited_total``                          upstream, limit (docs/limits.md)
``a2a_gateway_bridged_requests_total``                 upstream, binding, client_version, worker_version
``a2a_gateway_sse_events_total``                       upstream, kind
``a2a_gateway_state_normalizations_total``             upstream, family
``a2a_gateway_divergences_total``                      upstream, kind, action
``a2a_gateway_local_rejections_total``                 upstream, method, reason, action
``a2a_gateway_local_answer_skipped_total``             upstream, reason
``a2a_gateway_auth_failures_total``                    upstream, binding, reason
``a2a_gateway_error_rewrites_total``                   upstream, from_code, to_code
``a2a_gateway_forced_get_total``                       upstream, reason
``a2a_gateway_sweep_total``                            upstream, outcome
``a2a_gateway_card_fetches_total``                     upstream, outcome
``a2a_gateway_upstream_degraded``                      upstream, reason
``a2a_gateway_card_local_urls_total``                  upstream
``a2a_gateway_card_signatures_stripped_total``         upstream
``a2a_gateway_card_served_verbatim``                   upstream
``a2a_gateway_card_unguarded_interfaces``              upstream, binding
``a2a_gateway_card_worker_signature``                  upstream, signature
``a2a_gateway_card_signature_checks_total``            upstream, result
``a2a_gateway_card_jwks_fetches_total``                upstream, outcome
``a2a_gateway_card_signing_key_info``                  kid, algorithm, role
``a2a_gateway_card_served_signed``                     upstream, kid
``a2a_gateway_stream_resubscribes_total``              upstream, outcome
``a2a_gateway_resumes_total``                          upstream, outcome
``a2a_gateway_replayed_events_total``                  upstream
``a2a_gateway_config_reloads_total``                   outcome
``a2a_gateway_tracked_tasks``                          state
``a2a_gateway_ledger_operation_duration_seconds``      backend, operation
``a2a_gateway_ledger_errors_total``                    backend, operation
``a2a_gateway_ledger_conflicts_total``                 backend
``a2a_gateway_unchecked_total``                        upstream
``a2a_gateway_open_connections``                       (none)
``a2a_gateway_open_streams``                           upstream
``a2a_gateway_connections_refused_total``              reason
``a2a_gateway_build_info``                             version
``a2a_gateway_push_received_total``                    upstream
``a2a_gateway_push_refused_total``                     upstream, reason
``a2a_gateway_push_delivered_total``                   upstream
``a2a_gateway_push_delivery_failures_total``           upstream, reason
``a2a_gateway_push_dead_lettered_total``               upstream
``a2a_gateway_push_outbox_depth``                      (none)
``a2a_gateway_push_webhooks_refused_total``            upstream, reason
=====================================================  =========================================
"""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway import __version__
from gateway.a2a.states import TaskState

WORKER_SIGNATURE_STATES = ("verified", "unverified", "unsigned", "invalid", "unchecked")
"""The states of ``a2a_gateway_card_worker_signature``."""

M = TypeVar("M", Counter, Gauge, Histogram)

_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Labelled(Generic[M]):
    """A labelled metric whose children are kept in a dict by label values.

    prometheus_client's ``labels()`` validates and takes a lock on every call (about 1.5 µs,
    several times per request); label values here come from bounded sets, so the dict stays
    small. Only positional label values, as everywhere in the gateway.
    """

    __slots__ = ("metric", "_children")

    def __init__(self, metric: M) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        """The child for these label values (created on first use)."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class Metrics:
    """The gateway's metric objects, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Labelled(Counter(
            "a2a_gateway_requests_total",
            "Client requests handled, by upstream, binding, method and outcome",
            ["upstream", "binding", "method", "outcome"],
            registry=registry,
        ))
        self.duration = Labelled(Histogram(
            "a2a_gateway_request_duration_seconds",
            "Time from request start to the last byte sent to the client",
            ["upstream", "binding", "method"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        ))
        self.tenant_requests = Labelled(Counter(
            "a2a_gateway_tenant_requests_total",
            "A2A requests by tenant and outcome, for the tenants admin.metric_tenants names "
            "(other: any other tenant; empty: no tenant); no series without that list",
            ["upstream", "tenant", "outcome"],
            registry=registry,
        ))
        self.upstream_errors = Labelled(Counter(
            "a2a_gateway_upstream_errors_total",
            "Transport failures talking to a worker, by reason",
            ["upstream", "reason"],
            registry=registry,
        ))
        self.bridged = Labelled(Counter(
            "a2a_gateway_bridged_requests_total",
            "Client requests translated to the other A2A protocol version the worker speaks "
            "(docs/bridge.md), by binding and direction",
            ["upstream", "binding", "client_version", "worker_version"],
            registry=registry,
        ))
        self.limited = Labelled(Counter(
            "a2a_gateway_limited_total",
            "Requests answered HTTP 429 by a fair-share limit (docs/limits.md), by limit "
            "(<scope>.<limit>: caller.requests_per_second, tenant.live_tasks, upstream.open_streams, ...)",
            ["upstream", "limit"],
            registry=registry,
        ))
        self.limits_reached = Labelled(Counter(
            "a2a_gateway_limits_reached_total",
            "Requests (side client) and worker answers (side worker) stopped by a configured bound, "
            "by limit (the limits.* key; max_artifacts_per_task: the artifacts a task's record keeps)",
            ["upstream", "limit", "side"],
            registry=registry,
        ))
        self.sse_events = Labelled(Counter(
            "a2a_gateway_sse_events_total",
            "SSE events received from workers, by payload kind",
            ["upstream", "kind"],
            registry=registry,
        ))
        self.normalizations = Labelled(Counter(
            "a2a_gateway_state_normalizations_total",
            "Non-canonical taskState spellings rewritten, by spelling family; family "
            "final_flag: a v0.3 end-of-stream flag set or a v1.0 one removed",
            ["upstream", "family"],
            registry=registry,
        ))
        self.divergences = Labelled(Counter(
            "a2a_gateway_divergences_total",
            "Worker behaviour that contradicts A2A task invariants, by kind; action is "
            "enforced (corrected or refused) or observed (forwarded unchanged)",
            ["upstream", "kind", "action"],
            registry=registry,
        ))
        self.rejections = Labelled(Counter(
            "a2a_gateway_local_rejections_total",
            "Client requests answered by the gateway without forwarding, by reason",
            ["upstream", "method", "reason", "action"],
            registry=registry,
        ))
        self.local_answer_skipped = Labelled(Counter(
            "a2a_gateway_local_answer_skipped_total",
            "Local answers from the ledger not given because the caller was not seen on the "
            "task (the request went to the worker instead; docs/callers.md §3), by reason",
            ["upstream", "reason"],
            registry=registry,
        ))
        self.auth_failures = Labelled(Counter(
            "a2a_gateway_auth_failures_total",
            "Requests refused by the gateway's caller authentication before reaching the "
            "worker (docs/callers.md §5), by reason (missing, invalid, expired, audience, "
            "issuer, unknown_key, jwks_unavailable)",
            ["upstream", "binding", "reason"],
            registry=registry,
        ))
        self.error_rewrites = Labelled(Counter(
            "a2a_gateway_error_rewrites_total",
            "Worker JSON-RPC error codes rewritten to the code the spec requires",
            ["upstream", "from_code", "to_code"],
            registry=registry,
        ))
        self.forced_gets = Labelled(Counter(
            "a2a_gateway_forced_get_total",
            "GetTask calls the gateway sent to a worker before acting on a task, by reason",
            ["upstream", "reason"],
            registry=registry,
        ))
        self.retries = Labelled(Counter(
            "a2a_gateway_retries",
            "Sends that came again under a retry key already taken, by outcome (replayed, waited, "
            "attached, conflict, in_progress, unknown; docs/retries.md §4)",
            ["upstream", "outcome"],
            registry=registry,
        ))
        self.sweeps = Labelled(Counter(
            "a2a_gateway_sweep_total",
            "Live tasks the proactive sweep took up, by outcome (unchanged, changed, not_found, "
            "error, not_due, open_stream; docs/sweep.md §3)",
            ["upstream", "outcome"],
            registry=registry,
        ))
        self.card_fetches = Labelled(Counter(
            "a2a_gateway_card_fetches_total",
            "Agent Card fetches and revalidations, by outcome (fresh, not_modified, changed, "
            "unreachable, invalid)",
            ["upstream", "outcome"],
            registry=registry,
        ))
        self.degraded = Labelled(Gauge(
            "a2a_gateway_upstream_degraded",
            "1 while an upstream is degraded (reason card_unreachable, card_invalid, stream_lost)",
            ["upstream", "reason"],
            registry=registry,
            multiprocess_mode="livemax",  # serve --workers: degraded if any live worker says so
        ))
        self.card_local_urls = Labelled(Counter(
            "a2a_gateway_card_local_urls_total",
            "Cards advertising an unspecified, loopback or link-local URL (never routed to)",
            ["upstream"],
            registry=registry,
        ))
        self.card_signatures_stripped = Labelled(Counter(
            "a2a_gateway_card_signatures_stripped_total",
            "Signed cards served rewritten with their signatures removed (card.signed: strip)",
            ["upstream"],
            registry=registry,
        ))
        self.card_served_verbatim = Labelled(Gauge(
            "a2a_gateway_card_served_verbatim",
            "1 while an upstream's signed card is served verbatim (card.signed: verbatim): it "
            "names the worker's own URLs, so clients that follow it bypass the gateway",
            ["upstream"],
            registry=registry,
            multiprocess_mode="livemax",  # serve --workers: as a2a_gateway_upstream_degraded
        ))
        self.card_unguarded = Labelled(Gauge(
            "a2a_gateway_card_unguarded_interfaces",
            "Interfaces with a binding the gateway does not guard (gRPC, custom) advertised in "
            "an upstream's served card, by binding (0 once dropped or gone)",
            ["upstream", "binding"],
            registry=registry,
            multiprocess_mode="livemax",  # serve --workers: as a2a_gateway_upstream_degraded
        ))
        self.card_worker_signature = Labelled(Gauge(
            "a2a_gateway_card_worker_signature",
            "1 for the state of the signatures on an upstream's last fetched card: verified, "
            "unverified (card.trust.signatures: optional accepted it unverified), unsigned, "
            "invalid (refused), unchecked (no verification configured); 0 for the others",
            ["upstream", "signature"],
            registry=registry,
            multiprocess_mode="livemax",  # serve --workers: as a2a_gateway_upstream_degraded
        ))
        self.card_signature_checks = Labelled(Counter(
            "a2a_gateway_card_signature_checks_total",
            "Worker card signature checks, by result (verified, unsigned, bad_signature, "
            "unknown_kid, key_fetch_failed)",
            ["upstream", "result"],
            registry=registry,
        ))
        self.card_jwks_fetches = Labelled(Counter(
            "a2a_gateway_card_jwks_fetches_total",
            "Fetches of a JWKS trusted for an upstream's card signatures, by outcome (ok, failed)",
            ["upstream", "outcome"],
            registry=registry,
        ))
        self.card_signing_key = Labelled(Gauge(
            "a2a_gateway_card_signing_key_info",
            "1 for each key the gateway signs served Agent Cards with (role current, or previous "
            "during a rotation) or publishes only (role published)",
            ["kid", "algorithm", "role"],
            registry=registry,
            multiprocess_mode="livemax",
        ))
        self.card_served_signed = Labelled(Gauge(
            "a2a_gateway_card_served_signed",
            "1 while an upstream's served card is signed by the gateway with the key kid "
            "(card.signing; two during a rotation), 0 when it is served unsigned",
            ["upstream", "kid"],
            registry=registry,
            multiprocess_mode="livemax",
        ))
        self.resubscribes = Labelled(Counter(
            "a2a_gateway_stream_resubscribes_total",
            "Upstream streams cut before their task ended, by what the gateway did "
            "(resubscribed, terminal_snapshot, gave_up)",
            ["upstream", "outcome"],
            registry=registry,
        ))
        self.resumes = Labelled(Counter(
            "a2a_gateway_resumes_total",
            "Resubscribes with Last-Event-ID, by outcome: resumed (the id was in the replay "
            "window) or gap (it was not: the client got the task's snapshot first)",
            ["upstream", "outcome"],
            registry=registry,
        ))
        self.replayed_events = Labelled(Counter(
            "a2a_gateway_replayed_events_total",
            "Events sent again from the replay window to clients that resumed with Last-Event-ID",
            ["upstream"],
            registry=registry,
        ))
        self.config_reloads = Labelled(Counter(
            "a2a_gateway_config_reloads_total",
            "Config reloads on SIGHUP, by outcome (applied, refused)",
            ["outcome"],
            registry=registry,
        ))
        self.tracked_tasks = Labelled(Gauge(
            "a2a_gateway_tracked_tasks",
            "Tasks held in the ledger, by state (refreshed in the background)",
            ["state"],
            registry=registry,
            multiprocess_mode="livemostrecent",  # the shared ledger's count, from the last refresh
        ))
        self.ledger_duration = Labelled(Histogram(
            "a2a_gateway_ledger_operation_duration_seconds",
            "Time of one ledger operation",
            ["backend", "operation"],
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1),
            registry=registry,
        ))
        self.ledger_errors = Labelled(Counter(
            "a2a_gateway_ledger_errors_total",
            "Ledger operations that failed",
            ["backend", "operation"],
            registry=registry,
        ))
        self.ledger_conflicts = Labelled(Counter(
            "a2a_gateway_ledger_conflicts_total",
            "Compare-and-set races lost (and retried) on a task record",
            ["backend"],
            registry=registry,
        ))
        self.unchecked = Labelled(Counter(
            "a2a_gateway_unchecked_total",
            "Payloads relayed without checks because the ledger was unavailable "
            "(ledger.on_unavailable: forward, or observe mode)",
            ["upstream"],
            registry=registry,
        ))
        self.open_connections = Gauge(
            "a2a_gateway_open_connections",
            "Client connections open on the traffic port (idle keep-alive ones and streams "
            "included; listen.max_connections bounds them)",
            registry=registry,
            multiprocess_mode="livesum",  # serve --workers: the sum over the live workers
        )
        self.open_streams = Labelled(Gauge(
            "a2a_gateway_open_streams",
            "SSE streams of A2A calls open to clients, by upstream (from the stream's head to its "
            "end; each holds a pooled connection to the worker, upstreams[].pool.max_connections "
            "bounds them per process)",
            ["upstream"],
            registry=registry,
            multiprocess_mode="livesum",  # serve --workers: the sum over the live workers
        ))
        self.connections_refused = Labelled(Counter(
            "a2a_gateway_connections_refused_total",
            "Client connections the traffic port closed at a bound, by reason "
            "(max_connections: answered 503 at accept; header_timeout: no whole request head "
            "within listen.header_timeout_seconds, answered 408; header_too_large: a head past "
            "listen.max_header_bytes, answered 431; body_too_large: a chunk size past "
            "limits.max_body_bytes, answered 413; malformed: a request the parser refused, "
            "answered 400; body_timeout: no whole body within listen.body_timeout_seconds, "
            "answered 408)",
            ["reason"],
            registry=registry,
        ))
        for reason in ("max_connections", "header_timeout", "header_too_large", "body_too_large",
                       "malformed", "body_timeout"):  # every series from the start
            self.connections_refused.labels(reason)
        self.log_dropped = Counter(
            "a2a_gateway_log_dropped_total",
            "Log lines dropped because log.max_queued_lines were already waiting for stderr "
            "(a pipe nobody reads, a stuck log shipper); the event loop never waits for stderr",
            registry=registry,
        )
        # --- the push relay (docs/push.md) ---
        self.push_received = Labelled(Counter(
            "a2a_gateway_push_received_total",
            "Push notifications workers posted to the gateway's callback URLs",
            ["upstream"], registry=registry))
        self.push_refused = Labelled(Counter(
            "a2a_gateway_push_refused_total",
            "Push notifications from workers that are not delivered, by reason (token, too_large, "
            "malformed, task_mismatch, invariant: the engine refused or absorbed it, outbox_full, "
            "ledger)",
            ["upstream", "reason"], registry=registry))
        self.push_delivered = Labelled(Counter(
            "a2a_gateway_push_delivered_total",
            "Push notifications the client's webhook answered 2xx",
            ["upstream"], registry=registry))
        self.push_delivery_failures = Labelled(Counter(
            "a2a_gateway_push_delivery_failures_total",
            "Failed delivery attempts to clients' webhooks, by reason (status, transport, "
            "refused_address); each is retried until push.max_attempts",
            ["upstream", "reason"], registry=registry))
        self.push_dead_lettered = Labelled(Counter(
            "a2a_gateway_push_dead_lettered_total",
            "Push notifications given up after push.max_attempts delivery attempts",
            ["upstream"], registry=registry))
        self.push_outbox_depth = Gauge(
            "a2a_gateway_push_outbox_depth",
            "Push notifications waiting in the outbox (as last read by this process)",
            registry=registry, multiprocess_mode="livemax")
        self.push_webhooks_refused = Labelled(Counter(
            "a2a_gateway_push_webhooks_refused_total",
            "Push configs refused at creation because their webhook URL is not allowed "
            "(reason: scheme, address, unresolvable, limit, ambiguous)",
            ["upstream", "reason"], registry=registry))
        build = Gauge(
            "a2a_gateway_build_info", "Build information", ["version"], registry=registry,
            multiprocess_mode="livemax",
        )
        build.labels(version=__version__).set(1)

    def set_card_unguarded(self, upstream: str, counts: dict[str, int]) -> None:
        """Set ``a2a_gateway_card_unguarded_interfaces`` of ``upstream`` to ``counts`` (binding
        → number); every binding of that upstream set before and absent now reads 0."""
        for values in list(self.card_unguarded._children):
            if values[0] == upstream and values[1] not in counts:
                self.card_unguarded.labels(*values).set(0)
        for binding, count in counts.items():
            self.card_unguarded.labels(upstream, binding).set(count)

    def set_worker_signature(self, upstream: str, state: str) -> None:
        """Set ``a2a_gateway_card_worker_signature`` of ``upstream``: 1 for ``state``, 0 for the
        other states."""
        for each in WORKER_SIGNATURE_STATES:
            self.card_worker_signature.labels(upstream, each).set(int(each == state))

    def set_tracked(self, counts: dict[str, int]) -> None:
        """Set ``a2a_gateway_tracked_tasks`` for every state (absent states read 0)."""
        for state in TaskState:
            self.tracked_tasks.labels(state.value).set(counts.get(state.value, 0))
