"""Card governs admission, task events govern disposition. Pure.

Two independent axes (issue "Agent Card authority"; docs/protocol.md §4;
docs/field-cases.md F10, F11):

* :func:`admit` — may a request that creates a *new* task (or needs a capability) go to the
  worker, judged against the upstream's Agent Card? Never consulted for existing tasks.
* :func:`forced_get_reason` — before an action that needs an *existing* task alive, must the
  gateway first ask the worker ``GetTask`` because its record may be stale? Never changes a
  task's state by itself: only the worker's answer does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.a2a import jsonrpc
from gateway.a2a.card import capability, skill_ids
from gateway.a2a.jsonrpc import Operation
from gateway.invariants.model import Exchange, TaskRecord

_PUSH = (Operation.PUSH_CREATE, Operation.PUSH_GET, Operation.PUSH_LIST, Operation.PUSH_DELETE)
CARD_UNAVAILABLE = "card_unavailable"


@dataclass(frozen=True, slots=True)
class CardView:
    """What the shell knows of an upstream's Agent Card right now.

    ``doc`` is the last good card (``None`` if none was ever fetched); ``fresh`` is True when
    it was fetched or revalidated within its TTL; ``reachable`` is False after the last fetch
    attempt failed; ``etag`` identifies the card version; ``generation`` counts the card
    changes the ledger observed for the upstream (docs/field-cases.md F20; ``None``: not known);
    ``problem``: why the last fetch gave no card, when it did not (``invalid (bad_signature)``,
    ``unreachable (timeout)``), for the refusal's message.
    """

    doc: dict[str, Any] | None
    fresh: bool
    reachable: bool
    etag: str | None
    generation: int | None = None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is not admitted: the A2A error to answer, and a metric-safe reason."""

    code: int
    message: str
    reason: str


def admit(
    ex: Exchange,
    params: Any,
    card: CardView,
    *,
    allow_stale: bool,
    required_skill: str | None,
    skill_key: str | None,
) -> Refusal | None:
    """Judge a request against the upstream's card; ``None`` means admitted.

    * A new task (message without ``taskId``) needs a known card that is fresh, or — with
      ``allow_stale`` — any last good card; otherwise :data:`CARD_UNAVAILABLE` (the shell
      answers it as a transport-class error).
    * Streaming needs ``capabilities.streaming`` (-32004); push-config methods need
      ``capabilities.pushNotifications`` (-32003).
    * A required skill (config, or named in message metadata under ``skill_key``) must be
      advertised (-32004, the message names the skill).

    Requests on existing tasks are only checked for capabilities, never refused for card
    freshness or skills.
    """
    new_task = ex.operation in (Operation.SEND, Operation.STREAM) and ex.task_id is None
    doc = card.doc
    if new_task and (doc is None or not (card.fresh or allow_stale)):
        if doc is None:
            why = f"is {card.problem}" if card.problem else "never fetched"
        else:
            why = "unreachable and stale"
        return Refusal(jsonrpc.INTERNAL_ERROR,
                       f"agent card of upstream {ex.upstream} {why}; new tasks are not admitted",
                       CARD_UNAVAILABLE)
    if doc is None:
        return None
    streaming = ex.operation in (Operation.STREAM, Operation.SUBSCRIBE)
    if streaming and not capability(doc, "streaming"):
        return Refusal(jsonrpc.UNSUPPORTED_OPERATION,
                       "the agent card does not declare capabilities.streaming", "no_streaming")
    if ex.operation in _PUSH and not capability(doc, "pushNotifications"):
        return Refusal(jsonrpc.PUSH_NOTIFICATION_NOT_SUPPORTED,
                       "the agent card does not declare capabilities.pushNotifications",
                       "no_push_notifications")
    if new_task:
        wanted = [s for s in (required_skill, _metadata_skill(params, skill_key)) if s]
        advertised = skill_ids(doc) if wanted else set()
        for skill in wanted:
            if skill not in advertised:
                return Refusal(jsonrpc.UNSUPPORTED_OPERATION,
                               f"skill {skill!r} is not advertised by the agent card of "
                               f"upstream {ex.upstream}", "skill_not_advertised")
    return None


def _metadata_skill(params: Any, key: str | None) -> str | None:
    if key is None or not isinstance(params, dict):
        return None
    for holder in (jsonrpc.request_message(params), params):
        meta = holder.get("metadata") if isinstance(holder, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get(key), str):
            return str(meta[key])
    return None


def forced_get_reason(
    record: TaskRecord | None,
    card: CardView,
    *,
    needs_resync: bool,
    now: float,
    heartbeat_seconds: float,
) -> str | None:
    """Why the gateway must ask ``GetTask`` before acting on this task, or ``None``.

    Reasons, in order: ``restart`` (``needs_resync``: the gateway was down while the task was
    live), the reason the record says a ``GetTask`` is owed for (``record.pending_get``:
    ``generation_gap`` — the worker's task generation jumped, so events were missed —, or
    ``generation_regression`` — it went back; A2A v1.1 draft, docs/resume.md §3.2),
    ``card_unreachable``, ``etag_changed`` (the card changed since the task's last
    observation: a later card generation than the task's, even when the ETag came back to the
    recorded one, docs/field-cases.md F20; the ETags compared where either generation is not
    known), ``heartbeat_gap`` (no observation for longer than the interval). A terminal or
    unknown task needs none: nothing about it can be refreshed into life. No reason, no poll.
    The worker's Task answer to the ``GetTask`` clears an owed reason (the engine does).

    Args:
        needs_resync: the ledger's restart flag kept beside ``record`` (set at start-up for a
            task live while the gateway was down, cleared by the next store of the record;
            :class:`gateway.exchange.commands.Loaded`).
        now: wall-clock seconds since the epoch (comparable with ``record.observed_at``).
    """
    if record is None or record.terminal:
        return None
    if needs_resync:
        return "restart"
    if record.pending_get is not None:
        return record.pending_get
    if not card.reachable:
        return "card_unreachable"
    if record.card_generation is not None and card.generation is not None:
        if card.generation > record.card_generation:
            return "etag_changed"
    elif record.card_etag and card.etag and record.card_etag != card.etag:
        return "etag_changed"
    if now - record.observed_at > heartbeat_seconds:
        return "heartbeat_gap"
    return None
