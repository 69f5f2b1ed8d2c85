"""The task timeline: what the gateway judged about one task, entry by entry (docs/observability.md §2).

Pure: stdlib only. An exchange builds a :class:`TimelineEntry` where its verdict is known
(:func:`payload_entry` for a worker payload, :func:`request_entry` for a client request the
ledger was checked for) and asks the driver to keep it
(:class:`~gateway.exchange.commands.AppendTimeline`); the ledger keeps a bounded history per
task. An entry holds no message body, no header and nothing about the caller: the direction,
the states (as received and canonical), the verdict, the findings and — for the gateway's own
``GetTask`` — why it was sent.

Not every payload is an entry: one that changed nothing the timeline shows (the same state
again, forwarded unchanged, no finding — the artifact chunks and ``WORKING`` updates of a long
stream) is left out, so the bounded history keeps what explains a task's course.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.a2a.payloads import locate
from gateway.invariants.model import Action, Exchange, Finding, Outcome, TaskRecord

DIRECTIONS = ("request", "answer", "event", "probe", "push")
"""Where an observation came from: the client's request, the worker's answer to it, one event
of a worker stream, the worker's answer to a ``GetTask`` of the gateway's own, a push
notification the worker posted to the gateway's callback or its delivery to the client's
webhook (docs/push.md §2, §3)."""

VERDICTS = ("forwarded", "rewritten", "dropped", "rejected", "answered_locally", "dead_lettered")
"""What the gateway did with it: sent on as it was, sent on changed (a state re-spelled, a
terminal status restored, a worker error rewritten), not delivered (an event after a terminal
state), refused with an error to the client, answered by the gateway itself without asking the
worker (an action on a terminal task), given up on (a push notification not delivered to the
client's webhook after ``push.max_attempts`` attempts)."""


ROUTINE_PROBES = frozenset({"sweep"})
"""``forced_get`` reasons of a ``GetTask`` sent on a schedule rather than because something
happened (the proactive sweep, docs/sweep.md): such a probe is an entry only when it changed
something, like any payload — else every heartbeat of a silent task would be one, pushing its
history out of the per-task bound. Every other probe is an entry: its reason explains it."""


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One observation of a task the gateway judged.

    ``at`` is wall-clock seconds since the epoch (set by the driver when the entry is kept).
    ``method`` is the A2A v1.0 method name (``SendMessage``, ``GetTask``…), ``binding`` and
    ``version`` the client's (``jsonrpc`` / ``rest``, ``1.0`` / ``0.3``). ``direction`` is one of
    :data:`DIRECTIONS`, ``verdict`` one of :data:`VERDICTS`. ``state_received`` is the state as
    the worker spelled it (``None``: the payload carried none, or a request), ``state`` the
    canonical state the ledger holds after it. ``findings`` are ``(category, kind, detail)``
    (:class:`~gateway.invariants.model.Finding`). ``forced_get`` is the reason of a forced
    ``GetTask`` (``restart``, ``heartbeat_gap``, ``upstream_eof``…), ``error`` the A2A error the
    client was answered with (``"-32004 …"``), when there was one.
    """

    direction: str
    verdict: str
    method: str = ""
    binding: str = ""
    version: str = ""
    state_received: str | None = None
    state: str | None = None
    findings: tuple[tuple[str, str, str], ...] = ()
    forced_get: str | None = None
    error: str | None = None
    at: float = 0.0

    def to_doc(self) -> dict[str, Any]:
        """The entry as JSON-ready data (the form the ledger stores and the admin API shows);
        findings as ``{"category", "kind", "detail"}`` objects."""
        return {"at": self.at, "direction": self.direction, "verdict": self.verdict,
                "method": self.method, "binding": self.binding, "version": self.version,
                "state_received": self.state_received, "state": self.state,
                "findings": [{"category": c, "kind": k, "detail": d} for c, k, d in self.findings],
                "forced_get": self.forced_get, "error": self.error}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> TimelineEntry:
        """The entry :meth:`to_doc` gave. Raises ``KeyError`` / ``TypeError`` / ``ValueError``
        on a document of another shape."""
        findings = tuple((str(f["category"]), str(f["kind"]), str(f.get("detail", "")))
                         for f in doc.get("findings") or ())
        return cls(direction=str(doc["direction"]), verdict=str(doc["verdict"]),
                   method=str(doc.get("method", "")), binding=str(doc.get("binding", "")),
                   version=str(doc.get("version", "")), state_received=_opt(doc.get("state_received")),
                   state=_opt(doc.get("state")), findings=findings,
                   forced_get=_opt(doc.get("forced_get")), error=_opt(doc.get("error")),
                   at=float(doc.get("at", 0.0)))


def _opt(value: Any) -> str | None:
    return None if value is None else str(value)


def _findings(findings: list[Finding] | tuple[Finding, ...]) -> tuple[tuple[str, str, str], ...]:
    return tuple((f.category, f.kind, f.detail) for f in findings)


def _base(ex: Exchange, direction: str, verdict: str, **kw: Any) -> TimelineEntry:
    return TimelineEntry(direction, verdict, method=str(ex.operation.value), binding=str(ex.binding.value),
                         version=str(ex.version.value), **kw)


def payload_entry(ex: Exchange, direction: str, before: TaskRecord | None, outcome: Outcome,
                  result: Any, *, forced_get: str | None = None) -> TimelineEntry | None:
    """The entry for a worker payload ``result`` judged as ``outcome`` over the record
    ``before``, or ``None`` when it is not worth one (see the module docstring); its
    ``state_received`` is the state as the payload spelled it."""
    after = outcome.record.state if outcome.record is not None else (before.state if before else None)
    action = outcome.action
    if action is Action.DROP:
        verdict = "dropped"
    elif action is Action.REJECT:
        verdict = "rejected"
    else:
        verdict = "forwarded" if outcome.result is result else "rewritten"
    moved = before is None or after is not before.state
    explained = forced_get is not None and forced_get not in ROUTINE_PROBES
    if not (moved or outcome.findings or verdict != "forwarded" or explained):
        return None
    refused = outcome.error is not None and action is Action.REJECT  # a dropped event answered nothing
    error = f"{outcome.error[0]} {outcome.error[1]}" if refused and outcome.error else None
    raw_state = locate(result).raw_state
    return _base(ex, direction, verdict,
                 state_received=raw_state if isinstance(raw_state, str) else None,
                 state=after.value if after is not None else None,
                 findings=_findings(outcome.findings), forced_get=forced_get, error=error)


def request_entry(ex: Exchange, record: TaskRecord | None, admission: Outcome) -> TimelineEntry | None:
    """The entry for a client's task action checked against ``record``
    (:func:`~gateway.invariants.engine.check_request` gave ``admission``): a refusal answered
    locally, or (observe mode) a finding forwarded anyway; ``None`` for an action let through
    with nothing to say."""
    refused = admission.action is Action.REJECT and admission.error is not None
    if not (refused or admission.findings):
        return None
    error = f"{admission.error[0]} {admission.error[1]}" if refused and admission.error else None
    return _base(ex, "request", "answered_locally" if refused else "forwarded",
                 state=record.state.value if record is not None else None,
                 findings=_findings(admission.findings), error=error)


def rewrite_entry(ex: Exchange, record: TaskRecord, worker_code: object, code: int,
                  message: str) -> TimelineEntry:
    """The entry for a worker error to an action on a terminal task, rewritten to ``code``
    after a confirming ``GetTask`` (docs/field-cases.md F05 (c), F15)."""
    detail = f"worker error {worker_code} rewritten to {code}: task is {record.state.value}"
    return _base(ex, "answer", "rewritten", state=record.state.value,
                 findings=(("rewrite", "terminal_task", detail),), error=f"{code} {message}")
