"""What every proxy handler shares: config, ledger, upstream client, metrics, logger, the
card caches and the routing table.

``Runtime.ledger`` is the task ledger wrapped in an
:class:`~gateway.proxy.instrumented.InstrumentedLedger`: every call of the gateway is timed
(``a2a_gateway_ledger_operation_duration_seconds``), failures counted
(``a2a_gateway_ledger_errors_total``) and raised as :class:`~gateway.errors.LedgerError`.
What a failure means for a request (fail closed, or relay unchecked with
``ledger.on_unavailable: forward`` and in observe mode: :attr:`Runtime.fail_open`) is the
exchange's decision (:mod:`gateway.exchange.judge`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.config import GatewayConfig, UpstreamConfig
from gateway.errors import LedgerError
from gateway.exchange.model import Policy
from gateway.invariants.model import Mode
from gateway.invariants.timeline import TimelineEntry
from gateway.ledger.base import TaskLedger
from gateway.observability.metrics import Metrics
from gateway.observability.reporter import RECENT_DIVERGENCES, Reporter
from gateway.observability.tracing import Tracing
from gateway.proxy.auth import JwtVerifier
from gateway.proxy.callers import CallerKeys
from gateway.proxy.card import CardCache
from gateway.proxy.forward import BodyBudget, Router, Signal
from gateway.proxy.instrumented import InstrumentedLedger
from gateway.proxy.transport import UpstreamClient
from gateway.push.relay import PushRelay

if TYPE_CHECKING:
    from gateway.proxy.limits import Limiter
    from gateway.proxy.retries import Retries
    from gateway.proxy.signing import CardSigner



class OpenStreams:
    """The tasks with a client stream open through this process, as ``(upstream, tenant,
    task_id)`` keys with how many streams each (the driver opens and closes them; the sweep
    passes over them: docs/sweep.md §2). Bounded by the open streams themselves."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[tuple[str, str, str], int] = {}

    def opened(self, key: tuple[str, str, str]) -> None:
        """A client stream of ``key``'s task is open (its head is sent)."""
        self._open[key] = self._open.get(key, 0) + 1

    def closed(self, key: tuple[str, str, str]) -> None:
        """One client stream of ``key``'s task ended."""
        left = self._open.get(key, 0) - 1
        if left > 0:
            self._open[key] = left
        else:
            self._open.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._open

    def __len__(self) -> int:
        return len(self._open)


@dataclass
class Runtime:
    """Shared state of one gateway process."""

    config: GatewayConfig
    ledger: TaskLedger
    client: UpstreamClient
    metrics: Metrics
    log: logging.Logger
    draining: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    drain_expired: Signal = dataclasses.field(default_factory=Signal)
    """Set when ``listen.shutdown_grace_seconds`` ran out after SIGTERM: open streams end (a
    :class:`~gateway.proxy.forward.Signal`: each stream watches it with a callback, no task)."""
    cards: dict[str, CardCache] = dataclasses.field(default_factory=dict)
    streams: OpenStreams = dataclasses.field(default_factory=OpenStreams)
    """The tasks with a client stream open through this process (the sweep skips them)."""
    tracing: Tracing | None = None
    """The span maker when tracing is on (docs/observability.md §1); ``None``: off, no span is built."""
    divergences: collections.deque[dict[str, Any]] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=RECENT_DIVERGENCES))
    """The latest divergences of this process, newest last (the status page's; fed by the reporters)."""
    router: Router = dataclasses.field(default_factory=lambda: Router(()))
    reload_hooks: list[Callable[[GatewayConfig], None]] = dataclasses.field(default_factory=list)
    """Called with the new config on every reload (SIGHUP) before it is applied (the
    listener's TLS certificate is re-read by one, :mod:`gateway.server`)."""
    callers: CallerKeys | None = None
    """Who is asking (docs/callers.md §2); ``None``: callers are not told apart."""
    auth: JwtVerifier | None = None
    """Bearer JWT checking (``auth.jwt``, docs/callers.md §5); ``None``: off."""
    push: PushRelay | None = None
    """The push relay (docs/push.md; set by :func:`gateway.app.build_app`); ``None``: none."""
    retries: Retries | None = None
    """Safe retries' keys (docs/retries.md; set by :func:`gateway.app.build_app`)."""
    bodies: BodyBudget | None = None
    """The client request bodies held at once (``limits.max_inflight_body_bytes``; set by
    :func:`gateway.app.build_app`); ``None``: unbounded."""
    signer: CardSigner | None = None
    """The gateway's Agent Card signatures (``card.signing``, docs/protocol.md §4.5); ``None``:
    served cards are not signed."""
    limiter: Limiter | None = None
    """The fair-share limits (docs/limits.md; set by :func:`gateway.app.build_app`)."""
    _policies: dict[tuple[int, float], Policy] = dataclasses.field(default_factory=dict)
    _reporters: dict[str, Reporter] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.ledger, InstrumentedLedger):
            self.ledger = InstrumentedLedger(self.ledger, self.metrics, self.log)

    @property
    def ledger_down(self) -> str | None:
        """Why the ledger could not be written at the last write or probe (``None``: it could): a
        failed ledger call sets it, a write that succeeds clears it
        (:class:`~gateway.proxy.instrumented.InstrumentedLedger`, and the probe every
        ``ledger.probe_interval_seconds``, :func:`gateway.app.build_app`); ``/readyz`` is 503
        while it is set and ``ledger.on_unavailable`` is ``reject``."""
        ledger = self.ledger
        return ledger.down if isinstance(ledger, InstrumentedLedger) else None

    @ledger_down.setter
    def ledger_down(self, reason: str | None) -> None:
        if isinstance(self.ledger, InstrumentedLedger):
            self.ledger.down = reason

    def apply_config(self, config: GatewayConfig) -> set[str]:
        """Put ``config`` in force: routing, policies, one card cache per upstream.

        Requests already running keep the route and upstream they started with; a card cache
        whose upstream URL and card settings did not change is kept (with its card). The listen
        address, the admin listener, the ledger and its replay window cannot change while running:
        they keep their old values (a warning says so). Returns the names of the upstreams whose cache was kept.
        """
        old = getattr(self, "config", None)
        kept_keys = ("listen", "admin", "ledger", "replay_window", "timeline", "tracing", "callers", "auth",
                     "log", "card")
        changed = [key for key in kept_keys if old is not None and getattr(old, key) != getattr(config, key)]
        if old is not None and old.limits.max_answer_bytes != config.limits.max_answer_bytes:
            changed.append("limits.max_answer_bytes")  # the upstream clients' read bound, set at start
        if changed:
            self.log.warning("config_needs_restart", extra={"keys": changed})
            limits = config.limits.model_copy(update={"max_answer_bytes": old.limits.max_answer_bytes})
            config = config.model_copy(update={**{key: getattr(old, key) for key in kept_keys},
                                               "limits": limits})
        kept: set[str] = set()
        fresh: dict[str, CardCache] = {}
        for index, upstream in enumerate(config.upstreams):
            current = self.cards.get(upstream.name)
            same = current is not None and (current.upstream.url, current.upstream.card) == (
                upstream.url, upstream.card)
            if current is not None and same:
                current.upstream = upstream
                fresh[upstream.name] = current
                kept.add(upstream.name)
            else:
                fresh[upstream.name] = self._new_card_cache(upstream, f"upstreams[{index}]")
        self.config = config
        self._policies, self._reporters = {}, {}
        self.cards = fresh
        self.router = Router(config.upstreams)
        return kept

    def card_cache(self, upstream: UpstreamConfig) -> CardCache:
        """The card cache of ``upstream``. A request that started before a reload removed or
        replaced its upstream keeps working with a cache of its own (not kept)."""
        cache = self.cards.get(upstream.name)
        if cache is None or cache.upstream.url != upstream.url:
            cache = self._new_card_cache(upstream)
        return cache

    def card_status(self) -> dict[str, dict[str, Any]]:
        """:meth:`CardCache.status` of every upstream under the config in force, by upstream
        name (no I/O), e.g. ``{"echo": {"card": "ok", "admitting_new_tasks": True,
        "reason": None, "retry_in_s": None}}`` — for a readiness body."""
        return {name: cache.status() for name, cache in self.cards.items()}

    def cards_known(self) -> bool:
        """Whether every upstream under the config in force has had a good Agent Card fetched
        (:meth:`CardCache.holds_card`; no I/O): ``/readyz`` answers 503 until then."""
        return all(cache.holds_card() for cache in self.cards.values())

    def policy(self, upstream: UpstreamConfig, heartbeat_seconds: float) -> Policy:
        """The :class:`~gateway.exchange.model.Policy` exchanges on ``upstream`` run with
        under the config in force (built once per upstream and heartbeat interval)."""
        key = (id(upstream), heartbeat_seconds)
        policy = self._policies.get(key)
        if policy is None or policy.upstream != upstream.name:
            cfg = self.config
            policy = self._policies[key] = Policy(
                upstream=upstream.name, mode=self.mode, fail_open=self.fail_open,
                allow_stale=upstream.card.on_unreachable == "allow_stale",
                required_skill=upstream.card.required_skill,
                skill_key=cfg.admission.skill_metadata_key, heartbeat_seconds=heartbeat_seconds,
                drain_seconds=cfg.limits.post_terminal_drain_seconds,
                resubscribe_attempts=cfg.streams.resubscribe_attempts,
                resubscribe_backoff_seconds=cfg.streams.resubscribe_backoff_seconds,
                max_event_bytes=cfg.limits.max_event_bytes,
                max_json_depth=cfg.limits.max_json_depth, replay=self.replay)
        return policy

    def reporter(self, upstream: str) -> Reporter:
        """The :class:`~gateway.observability.reporter.Reporter` of ``upstream`` (one per
        upstream under the config in force)."""
        reporter = self._reporters.get(upstream)
        if reporter is None:
            reporter = self._reporters[upstream] = Reporter(
                self.metrics, self.log, upstream=upstream, mode=self.mode, backend=self.ledger.backend,
                recent=self.divergences, tenants=frozenset(self.config.admin.metric_tenants))
        return reporter

    def _new_card_cache(self, upstream: UpstreamConfig, where: str | None = None) -> CardCache:
        """A card cache for ``upstream``; ``where``: its YAML path (``upstreams[0]``), for the
        config errors of its trusted card keys.

        Raises:
            ConfigError: a trusted card key file (``card.trust``) does not load.
        """
        callers = self.config.callers
        ledger, name = self.ledger, upstream.name

        def observe(variant: str, etag: str) -> Awaitable[int]:
            """The upstream's card generation after this card (docs/field-cases.md F20)."""
            return ledger.observe_card(name, variant, etag)

        return CardCache(self.client, self.metrics, self.log, upstream,
                         max_json_depth=self.config.limits.max_json_depth,
                         identity_header=callers.header.lower()
                         if callers.enabled and callers.identity == "header" else None,
                         observe=observe, signer=self.signer, where=where)

    def begin_drain(self) -> None:
        """Shutdown has begun: readiness turns 503 at once; after
        ``listen.shutdown_grace_seconds`` open streams are ended cleanly (call in the loop)."""
        if self.draining.is_set():
            return
        grace = self.config.listen.shutdown_grace_seconds
        self.log.info("draining", extra={"grace_s": grace})
        self.draining.set()
        asyncio.get_running_loop().call_later(grace, self.drain_expired.set)

    @property
    def mode(self) -> Mode:
        """The configured :class:`Mode`."""
        return Mode(self.config.mode)

    @property
    def replay(self) -> bool:
        """True when delivered task events get gateway event ids and go into the replay window
        (``replay_window.enabled``, in enforce mode: observe mode relays the worker's ids; docs/resume.md §1)."""
        return self.config.replay_window.enabled and self.mode is Mode.ENFORCE

    @property
    def fail_open(self) -> bool:
        """True when an unavailable ledger means "relay unchecked" rather than "refuse"."""
        return self.mode is Mode.OBSERVE or self.config.ledger.on_unavailable == "forward"

    async def keep_timeline(self, upstream: str, task_id: str, entry: TimelineEntry, *, tenant: str = "") -> None:
        """Keep ``entry`` in the task's timeline, timed now (docs/observability.md §2), unless
        ``timeline.enabled`` is off. A failure is counted and logged by the instrumented ledger
        (``operation="append_timeline"``) and goes no further: the timeline explains, it
        decides nothing."""
        if not self.config.timeline.enabled:
            return
        try:
            await self.ledger.append_timeline(upstream, task_id, dataclasses.replace(entry, at=time.time()),
                                              tenant=tenant)
        except LedgerError:
            pass
