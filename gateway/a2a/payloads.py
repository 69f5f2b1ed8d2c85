"""Find the task-bearing object inside an A2A result, in either protocol version.

Implements docs/protocol.md §3.4-3.5 and §11 pitfall 3 (result wrapping differs): v1.0
``SendMessage`` answers ``{"task":…}`` or ``{"message":…}``; ``GetTask``/``CancelTask`` answer
a bare Task; a v1.0 stream event is a StreamResponse (``task`` | ``message`` | ``statusUpdate``
| ``artifactUpdate``); v0.3 answers a bare object carrying ``kind``. Pure: stdlib only.

:func:`locate` returns an :class:`Item` that points at the inner object and knows where its
state and ids live; nothing here mutates its input.
"""

from __future__ import annotations

import enum
from typing import Any

from gateway.a2a.version import ProtocolVersion


class Kind(enum.StrEnum):
    """What one result or stream event carries; also the ``kind`` label of SSE metrics."""

    TASK = "task"
    MESSAGE = "message"
    STATUS = "status"
    ARTIFACT = "artifact"
    OTHER = "other"


# v1.0 StreamResponse members, in the order they are tried.
_WRAPPERS = (
    ("task", Kind.TASK),
    ("message", Kind.MESSAGE),
    ("statusUpdate", Kind.STATUS),
    ("artifactUpdate", Kind.ARTIFACT),
)
_WRAPPER_KINDS = dict(_WRAPPERS)
_V03_KINDS = {
    "task": Kind.TASK,
    "message": Kind.MESSAGE,
    "status-update": Kind.STATUS,
    "artifact-update": Kind.ARTIFACT,
}
_EVENT_KINDS = ("status-update", "artifact-update")
_TASK = Kind.TASK
_STATUS = Kind.STATUS


class Item:
    """A located payload.

    ``obj`` is the inner object (the Task, the status/artifact update event, the Message);
    ``wrapper`` is the v1.0 StreamResponse member name that held it, or ``None`` when the
    result was the object itself (bare Task, v0.3 ``kind`` objects). ``task_id`` (``id`` of a
    Task, ``taskId`` of events and messages) and ``context_id`` (``contextId``) are each a
    non-empty string or ``None``, read once when the item is made.

    A plain ``__slots__`` class, not a frozen dataclass: the engine makes one per observation,
    and a frozen dataclass (plus the ids as properties) cost it about a fifth of its throughput.
    Read-only by convention.
    """

    __slots__ = ("context_id", "kind", "obj", "task_id", "wrapper")

    def __init__(self, kind: Kind, obj: dict[str, Any], wrapper: str | None) -> None:
        self.kind = kind
        self.obj = obj
        self.wrapper = wrapper
        self.task_id = task_id_of(kind, obj)
        self.context_id = context_id_of(obj)

    def __repr__(self) -> str:
        return f"Item({self.kind!r}, {self.obj!r}, {self.wrapper!r})"

    @property
    def status(self) -> dict[str, Any] | None:
        """The ``status`` object of a Task or status update (``None`` if absent or not an object)."""
        if self.kind is not _TASK and self.kind is not _STATUS:
            return None
        status = self.obj.get("status")
        return status if isinstance(status, dict) else None

    @property
    def raw_state(self) -> object:
        """``status.state`` exactly as sent (``None`` when missing)."""
        status = self.status
        return None if status is None else status.get("state")


def locate(result: object) -> Item:
    """Classify a JSON-RPC ``result`` or a REST stream payload into an :class:`Item`."""
    return Item(*classify(result))


def classify(result: object) -> tuple[Kind, dict[str, Any], str | None]:
    """:func:`locate` without the :class:`Item`: ``(kind, obj, wrapper)`` (the engine leaves
    messages and other payloads there, before making an item)."""
    if not isinstance(result, dict):
        return Kind.OTHER, {}, None
    if len(result) == 1:  # the usual StreamResponse / SendMessageResponse: one wrapper member
        for member in result:
            kind = _WRAPPER_KINDS.get(member)
            if kind is not None:
                inner = result[member]
                if isinstance(inner, dict):
                    return kind, inner, member
    if "id" not in result:  # a wrapper next to other members (a stray ``kind``) still counts
        for member, kind in _WRAPPERS:
            inner = result.get(member)
            if isinstance(inner, dict):
                return kind, inner, member
    elif "status" in result and result.get("kind") not in _EVENT_KINDS:
        return Kind.TASK, result, None  # id and status: a Task (a ``"kind": "message"`` too)
    v03 = result.get("kind")
    if isinstance(v03, str) and v03 in _V03_KINDS:
        return _V03_KINDS[v03], result, None
    if "taskId" in result and "status" in result:
        return Kind.STATUS, result, None
    if "taskId" in result and "artifact" in result:
        return Kind.ARTIFACT, result, None
    if "messageId" in result and "parts" in result:
        return Kind.MESSAGE, result, None
    return Kind.OTHER, result, None


def task_id_of(kind: Kind, obj: dict[str, Any]) -> str | None:
    """The ``task_id`` of a located ``(kind, obj)`` (:class:`Item`)."""
    value = obj.get("id" if kind is _TASK else "taskId")
    return value if isinstance(value, str) and value else None


def context_id_of(obj: dict[str, Any]) -> str | None:
    """The ``context_id`` of a located object (:class:`Item`)."""
    value = obj.get("contextId")
    return value if isinstance(value, str) and value else None


def rebuild(item: Item, obj: dict[str, Any], result: object) -> dict[str, Any]:
    """Return a new result equal to ``result`` with the located object replaced by ``obj``."""
    if item.wrapper is not None and isinstance(result, dict):
        return {**result, item.wrapper: obj}
    return obj


def with_state(obj: dict[str, Any], state: str) -> dict[str, Any]:
    """A copy of a Task or status update whose ``status.state`` is ``state``."""
    status = obj.get("status")
    status = dict(status) if isinstance(status, dict) else {}
    status["state"] = state
    return {**obj, "status": status}


def artifact_of(item: Item) -> dict[str, Any] | None:
    """The ``artifact`` object of an artifact update, if it is an object with an id."""
    art = item.obj.get("artifact")
    if isinstance(art, dict) and isinstance(art.get("artifactId"), str):
        return art
    return None


def parts_count(artifact: dict[str, Any]) -> int:
    """Number of ``parts`` of an artifact (0 if missing or malformed)."""
    parts = artifact.get("parts")
    return len(parts) if isinstance(parts, list) else 0


def flag(obj: dict[str, Any], name: str) -> bool:
    """A boolean member of an update event (``append``, ``lastChunk``); absent means false."""
    return obj.get(name) is True


_INT64_MAX = 2**63 - 1


def generation_of(obj: dict[str, Any]) -> int | None:
    """The task ``generation`` a Task, status update or artifact update carries (A2A v1.1
    draft, SPEC11 §3.2.7; docs/resume.md §3.1), or ``None`` when it carries none.

    ProtoJSON writes an int64 as a decimal string (``"5"``) and parsers read numbers too, so
    both count, as does an integral float (``5.0``). The value must be 1 … 2**63-1: ``0`` (the
    proto3 default, meaning "not implemented"), a negative, a boolean or anything else is
    ``None``, exactly like an absent member.
    """
    value = obj.get("generation")
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not (len(value) <= 19 and value.isascii() and value.isdigit()):  # 2**63-1 has 19 digits
            return None
        value = int(value)
    elif isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    elif not isinstance(value, int):
        return None
    return value if 1 <= value <= _INT64_MAX else None


def snapshot_result(task: dict[str, Any], version: ProtocolVersion) -> dict[str, Any]:
    """A Task as one stream event's ``result`` in ``version``'s shape (docs/protocol.md §11
    pitfall 3): ``{"task": Task}`` for v1.0, the Task with ``"kind": "task"`` for v0.3."""
    if version is ProtocolVersion.V1_0:
        return {"task": task}
    return task if "kind" in task else {**task, "kind": "task"}
