"""The settings an exchange runs with and the summary it leaves for the request's log line."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.a2a.version import Binding
from gateway.invariants.model import Mode


@dataclass(frozen=True, slots=True)
class Policy:
    """The configuration an exchange judges by (from ``GatewayConfig`` and the upstream's).

    ``fail_open``: an unavailable ledger means "relay unchecked" (observe mode, or
    ``ledger.on_unavailable: forward``). ``allow_stale``, ``required_skill`` and
    ``skill_key`` are the card admission settings; ``heartbeat_seconds`` the silence after
    which a live task is probed. The stream settings are seconds (``drain_seconds``,
    ``resubscribe_backoff_seconds``), a count (``resubscribe_attempts``) and bytes
    (``max_event_bytes``); ``max_json_depth`` bounds the nesting of a worker's JSON.
    ``replay``: delivered task events get gateway event ids and go into the replay window
    (docs/resume.md §1).
    """

    upstream: str
    mode: Mode = Mode.ENFORCE
    fail_open: bool = False
    allow_stale: bool = False
    required_skill: str | None = None
    skill_key: str | None = None
    heartbeat_seconds: float = 30.0
    drain_seconds: float = 2.0
    resubscribe_attempts: int = 3
    resubscribe_backoff_seconds: float = 0.2
    max_event_bytes: int = 8 * 1024 * 1024
    max_json_depth: int = 128
    replay: bool = True


@dataclass(slots=True)
class Summary:
    """What the request's log line and ``a2a_gateway_requests_total`` say about an exchange.

    ``outcome`` is a bounded label (``ok``, ``rejected``, ``upstream_error``, …); ``events``
    and ``close_reason`` are set for streams (``close_reason`` ``None``: no stream was
    relayed); ``binding`` is the client's (the ``binding`` label); ``bridge`` is
    ``"<client version>-><worker version>"`` for a bridged request (docs/bridge.md §3), else
    ``None``; ``tenant`` is the request's A2A tenant (docs/callers.md §1; a metric label only
    for the tenants ``admin.metric_tenants`` names).
    """

    method: str
    outcome: str = "ok"
    task_id: str | None = None
    context_id: str | None = None
    events: int = 0
    close_reason: str | None = None
    binding: Binding = Binding.JSONRPC
    bridge: str | None = None
    tenant: str = ""
