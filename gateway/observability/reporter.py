"""The exchange layer's report commands, turned into metrics and log lines.

An exchange (:mod:`gateway.exchange`) reports what it saw as data —
:class:`~gateway.exchange.commands.Count`, :class:`~gateway.exchange.commands.Found`,
:class:`~gateway.exchange.commands.Degraded`, :class:`~gateway.exchange.commands.Log` — and
the driver hands each one here; this is the one place that turns them into
``a2a_gateway_*`` series and log lines. Label values come from the exchange's bounded sets;
task ids go to logs only.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from gateway.config import OTHER_TENANT
from gateway.exchange.commands import Count, Degraded, Found, Log
from gateway.exchange.model import Summary
from gateway.invariants.model import Mode
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import Tracing

_BACKEND_METRICS = frozenset({"ledger_conflicts"})
"""Counters labelled by ledger backend instead of upstream."""

LIMIT_OF_REASON = {"answer_too_large": "max_answer_bytes", "event_too_large": "max_event_bytes",
                   "nesting_too_deep": "max_json_depth"}
"""``upstream_errors`` reasons that are a worker's answer stopped by a bound (the limits.* key)."""

RECENT_DIVERGENCES = 50
"""How many of the latest divergences a process keeps for the status page (docs/observability.md §3)."""


class Reporter:
    """Feeds reports of exchanges on one upstream into ``metrics`` and ``log``.

    Args:
        upstream: the ``upstream`` label of every series.
        mode: the exchange's mode; divergences and rejections are labelled ``enforced`` or
            ``observed`` by it.
        backend: the ledger backend's name (the label of ledger counters).
        recent: where the latest divergences go (``{"at", "upstream", "kind", "task_id",
            "tenant", "detail", "action"}``, a bounded deque shared by the process's reporters; ``None``:
            nowhere).
        tenants: the tenants counted by name in ``a2a_gateway_tenant_requests_total``
            (``admin.metric_tenants``); empty: that metric has no series.
    """

    __slots__ = ("_action", "_backend", "_log", "_metrics", "_mode", "_recent", "_tenants", "_upstream")

    def __init__(self, metrics: Metrics, log: logging.Logger, *, upstream: str, mode: Mode,
                 backend: str, recent: deque[dict[str, Any]] | None = None,
                 tenants: frozenset[str] = frozenset()) -> None:
        self._recent = recent
        self._tenants = tenants
        self._metrics = metrics
        self._log = log
        self._upstream = upstream
        self._mode = mode
        self._action = "observed" if mode is Mode.OBSERVE else "enforced"
        self._backend = backend

    def report(self, cmd: Any, operation: str = "", span: Any = None) -> None:
        """Count or log one report; ``operation`` labels rejections that name no method.
        ``span``: the request's server span when tracing is on (findings become its events)."""
        if type(cmd) is Count:
            first = self._backend if cmd.metric in _BACKEND_METRICS else self._upstream
            getattr(self._metrics, cmd.metric).labels(first, *cmd.labels).inc(cmd.amount)
            if cmd.metric == "upstream_errors" and cmd.labels[0] in LIMIT_OF_REASON:
                self.limit_reached(LIMIT_OF_REASON[cmd.labels[0]], "worker")
        elif type(cmd) is Found:
            self._found(cmd, cmd.method or operation)
            if span is not None:
                Tracing.findings(span, cmd.findings, cmd.task_id, self._action)
        elif type(cmd) is Degraded:
            self._metrics.degraded.labels(self._upstream, cmd.reason).set(cmd.value)
        elif type(cmd) is Log:
            getattr(self._log, cmd.level)(cmd.event, extra=dict(cmd.fields))

    def limit_reached(self, limit: str, side: str) -> None:
        """A bound stopped a request (``side`` ``client``) or a worker's answer (``worker``):
        ``a2a_gateway_limits_reached_total{limit, side}`` and a ``limit_reached`` warning
        (repeats are held back by the log's repeat window, ``log.repeat_window_seconds``)."""
        self._metrics.limits_reached.labels(self._upstream, limit, side).inc()
        self._log.warning("limit_reached", extra={"upstream": self._upstream, "limit": limit, "side": side})

    def request(self, summary: Summary, duration_s: float, trace_id: str | None = None) -> None:
        """``a2a_gateway_requests_total`` / ``a2a_gateway_request_duration_seconds``; for a
        relayed stream also its ``stream_closed`` line (``events``, ``reason``, and
        ``trace_id``, the request's trace in 32 hex digits, when tracing is on). The
        ``request`` line itself is :mod:`gateway.observability.access`'s."""
        s, upstream = summary, self._upstream
        self._metrics.requests.labels(upstream, s.binding, s.method, s.outcome).inc()
        self._metrics.duration.labels(upstream, s.binding, s.method).observe(duration_s)
        if self._tenants:
            tenant = s.tenant if not s.tenant or s.tenant in self._tenants else OTHER_TENANT
            self._metrics.tenant_requests.labels(upstream, tenant, s.outcome).inc()
        fields = {"upstream": upstream, "binding": s.binding.value, "method": s.method, "task_id": s.task_id,
                  "context_id": s.context_id, "duration_s": round(duration_s, 6)}
        if s.bridge is not None:
            fields["bridge"] = s.bridge
        if trace_id is not None:
            fields["trace_id"] = trace_id
        if s.close_reason is not None:
            self._log.info("stream_closed", extra={**fields, "events": s.events, "reason": s.close_reason})

    def _found(self, cmd: Found, method: str) -> None:
        m, upstream, action = self._metrics, self._upstream, self._action
        for f in cmd.findings:
            if f.category == "normalization":
                m.normalizations.labels(upstream, f.kind).inc()
            elif f.category == "divergence":
                m.divergences.labels(upstream, f.kind, action).inc()
                if self._recent is not None:
                    self._recent.append({"at": time.time(), "upstream": upstream, "kind": f.kind,
                                         "task_id": cmd.task_id, "tenant": cmd.tenant, "detail": f.detail,
                                         "action": action})
                self._log.warning(
                    "divergence",
                    extra={"upstream": upstream, "kind": f.kind, "detail": f.detail,
                           "task_id": cmd.task_id, "action": action},
                )
            elif f.category == "rejection":
                m.rejections.labels(upstream, method, f.kind, action).inc()
            elif f.category == "limit":  # a worker's payload past a bound of the record's (its kind)
                self.limit_reached(f.kind, "worker")
