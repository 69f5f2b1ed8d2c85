"""Record and verdict types of the invariant engine. Pure: stdlib only.

The shell reads a :class:`TaskRecord` from the ledger, the engine returns an :class:`Outcome`
(what to do with the payload, the new record to store, findings to count), and the shell stores
the record with compare-and-set before it forwards anything (docs/architecture.md, convention 2: the engine never touches
storage").
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from gateway.a2a.jsonrpc import Operation
from gateway.a2a.states import Spelling, TaskState, spelling_of
from gateway.a2a.version import Binding, ProtocolVersion


class Mode(enum.StrEnum):
    """``enforce`` applies verdicts; ``observe`` computes them but forwards traffic unchanged."""

    ENFORCE = "enforce"
    OBSERVE = "observe"


class Action(enum.StrEnum):
    """What the shell does with one payload."""

    FORWARD = "forward"  # send it (possibly rewritten)
    DROP = "drop"  # do not deliver this stream event
    REJECT = "reject"  # answer with ``error`` instead (unary) / error event then close (stream)


DIVERGENCE_KINDS = (
    "unknown_state",
    "terminal_regression",
    "event_after_terminal",
    "artifact_after_terminal",
    "artifact_after_last_chunk",
    "task_id_mismatch",
    "context_id_mismatch",
    "reused_task_id",
    "jsonrpc_id_mismatch",
    "stale_record",
    "generation_regression",
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the engine noticed; a value, never an exception (docs/architecture.md, convention 6).

    ``category`` is ``divergence`` (``kind`` in :data:`DIVERGENCE_KINDS`), ``normalization``
    (``kind`` is a spelling family), ``rejection`` (``kind`` is the local-rejection reason) or
    ``limit`` (a worker's payload past a bound of the record's; ``kind`` names the bound).
    ``detail`` is for logs only (may name task ids); never a metric label.
    """

    category: str
    kind: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """What the ledger keeps per artifact (docs/field-cases.md F06, F18, F19): sealed by
    ``lastChunk``, how many parts it has, and ``digest``, the fold of the parts the gateway
    showed (:func:`gateway.invariants.artifacts.fold`: 16 bytes over their content, whatever
    the version). Once the artifact is frozen (sealed, or its task terminal) an answer that
    shows anything else is corrected against them. ``None``: the gateway does not know the
    whole content (only ``parts`` bounds it then)."""

    sealed: bool = False
    parts: int = 0
    digest: bytes | None = None


MAX_CALLERS = 16
"""The most callers a record keeps (docs/callers.md §2): the 16 most recently first seen."""

MAX_ARTIFACTS = 256
"""The most artifacts a record keeps per task, and so the most a client is shown of one task
(docs/field-cases.md F18): an artifact update creating one more is not delivered and a snapshot
is cut to the artifacts the record holds, counted as the worker reaching the bound
``max_artifacts_per_task`` (``a2a_gateway_limits_reached_total``)."""

Shown = tuple[int, bytes]
"""What one stream delivered of one artifact: its parts count and their fold (``digest``)."""

NO_ARTIFACTS: Mapping[str, ArtifactRecord] = MappingProxyType({})  # shared by artifact-less records
NO_SHOWN: Mapping[str, Shown] = MappingProxyType({})  # shared by streams that delivered no artifact
# Interned small ArtifactRecord values (frozen, so sharing one instance is invisible).
_ARTIFACT_RECORDS = {(sealed, parts): ArtifactRecord(sealed, parts)
                     for sealed in (False, True) for parts in range(64)}


_new_artifact = object.__new__
_set_sealed, _set_parts, _set_digest = (ArtifactRecord.__dict__[name].__set__
                                        for name in ("sealed", "parts", "digest"))


def artifact_record(sealed: bool, parts: int, digest: bytes | None = None) -> ArtifactRecord:
    """``ArtifactRecord(sealed, parts, digest)``: shared for the common small part counts
    without a digest, else built by writing its slots (one per delivered artifact update)."""
    if digest is None:
        known = _ARTIFACT_RECORDS.get((sealed, parts))
        if known is not None:
            return known
    record = _new_artifact(ArtifactRecord)
    _set_sealed(record, sealed)
    _set_parts(record, parts)
    _set_digest(record, digest)
    return record


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """The ledger's record of one task, keyed by (``upstream``, ``tenant``, ``task_id``).

    ``state`` is canonical. ``terminal_status`` is the status object (v1.0 spelling) recorded
    when the task first became terminal; it wins over anything the worker says later.
    ``observed_at`` is wall-clock seconds since the epoch. ``card_etag`` is the upstream's
    Agent Card ETag in force at the last observation. Task state only: the ledger keeps its
    compare-and-set version and the ``needs_resync`` restart flag beside the record, never in
    it (:class:`gateway.ledger.base.Stored`).

    ``generation`` is the task's generation as the worker reports it (A2A v1.1 draft,
    SPEC11 §3.2.7; docs/resume.md §3.1): ``None`` while the worker never sent one, the highest one
    seen (≥ 1) while it does, ``0`` once it showed it does not implement them for this task (a
    0 or absent generation after one ≥ 1); from then on generations are not used. ``pending_get``
    is a ``GetTask`` the gateway owes the worker before the next action on the task, and why
    (``generation_gap``, ``generation_regression``; docs/resume.md §3.2): the next task action
    is preceded by one, whose Task answer clears it.

    ``tenant`` is the A2A tenant the task lives in (``""``: none, its own namespace;
    docs/callers.md §1): task ids are unique only within a tenant. ``callers`` are the keyed
    fingerprints of the callers seen on the task, oldest first, at most
    :data:`MAX_CALLERS` (docs/callers.md §2); opaque strings, never shown.

    ``card_generation`` is the upstream's card generation the task was last observed under
    (docs/field-cases.md F20): the ledger counts every observed change of the upstream's Agent
    Card, so a later generation — even one whose ETag came back to the recorded one — owes a
    ``GetTask`` before an action that needs the task alive. ``None``: not known (a record
    written before generations, or while the ledger could not say).
    """

    upstream: str
    task_id: str
    context_id: str | None
    state: TaskState
    observed_at: float
    terminal_status: Mapping[str, Any] | None = None
    poisoned: bool = False
    artifacts: Mapping[str, ArtifactRecord] = field(default_factory=lambda: NO_ARTIFACTS)
    card_etag: str | None = None
    generation: int | None = None
    pending_get: str | None = None
    tenant: str = ""
    callers: tuple[str, ...] = ()
    card_generation: int | None = None

    @property
    def terminal(self) -> bool:
        """True once the task reached completed, failed, canceled or rejected."""
        return self.state.is_terminal


_RECORD_FIELDS = (
    "upstream", "task_id", "context_id", "state", "observed_at",
    "terminal_status", "poisoned", "artifacts", "card_etag", "generation", "pending_get",
    "tenant", "callers", "card_generation",
)
if tuple(f.name for f in fields(TaskRecord)) != _RECORD_FIELDS:  # pragma: no cover
    raise RuntimeError("TaskRecord fields changed: update _RECORD_FIELDS and build_record")


def _record_builder() -> Any:
    new = object.__new__
    (s_upstream, s_task_id, s_context_id, s_state, s_observed_at,
     s_terminal_status, s_poisoned, s_artifacts, s_card_etag, s_generation, s_pending_get,
     s_tenant, s_callers, s_card_generation) = (
        TaskRecord.__dict__[name].__set__ for name in _RECORD_FIELDS)

    def build_record(
        upstream: str,
        task_id: str,
        context_id: str | None,
        state: TaskState,
        observed_at: float,
        terminal_status: Mapping[str, Any] | None,
        poisoned: bool,
        artifacts: Mapping[str, ArtifactRecord],
        card_etag: str | None,
        generation: int | None,
        pending_get: str | None,
        tenant: str = "",
        callers: tuple[str, ...] = (),
        card_generation: int | None = None,
    ) -> TaskRecord:
        """``TaskRecord(...)`` with every field given, positionally, at about half the cost.

        The frozen dataclass ``__init__`` goes through ``object.__setattr__`` per field; this
        writes the slots directly. The result is an ordinary, equal, frozen :class:`TaskRecord`.
        """
        record = new(TaskRecord)
        s_upstream(record, upstream)
        s_task_id(record, task_id)
        s_context_id(record, context_id)
        s_state(record, state)
        s_observed_at(record, observed_at)
        s_terminal_status(record, terminal_status)
        s_poisoned(record, poisoned)
        s_artifacts(record, artifacts)
        s_card_etag(record, card_etag)
        s_generation(record, generation)
        s_pending_get(record, pending_get)
        s_tenant(record, tenant)
        s_callers(record, callers)
        s_card_generation(record, card_generation)
        return record

    return build_record


build_record = _record_builder()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking, as the pure core sees it (docs/callers.md §2): ``fingerprint`` is the
    keyed fingerprint recorded on a task the worker answers this caller about (``None``:
    callers are not told apart), ``matches`` every fingerprint of the caller under the
    secrets in force (the recorded one among them). Opaque strings, made by the shell."""

    fingerprint: str | None = None
    matches: frozenset[str] = frozenset()


NO_CALLER = Caller()
"""Callers not told apart: every local answer goes to anyone (replay, tests, ``callers.enabled: false``)."""


@dataclass(frozen=True, slots=True)
class Exchange:
    """The client request a payload belongs to.

    ``task_id`` is the task the request names (``params.id`` or ``params.message.taskId``, the
    REST path's ``{id}``), or ``None`` for a request that may create a new task. ``card_etag``
    is the upstream's Agent Card ETag in force; it is written into every record the exchange
    produces. ``binding`` is the client's binding; with ``version`` it decides ``spelling``,
    how states are spelled for the client (:func:`~gateway.a2a.states.spelling_of`).

    ``tenant`` is the request's A2A tenant (``""``: none), part of every ledger key it
    touches (docs/callers.md §1). ``caller`` is the keyed fingerprint the gateway records for
    the caller on a task (``None``: callers are not told apart, every local answer goes to
    anyone), ``caller_matches`` every fingerprint of the caller under the secrets in force,
    ``caller`` included: a record that holds any of them has seen this caller
    (docs/callers.md §2, §3). ``card_generation`` is the upstream's card generation in force
    (docs/field-cases.md F20; ``None``: not known), written into every record the exchange
    produces (never lowering the one recorded).
    """

    upstream: str
    operation: Operation
    version: ProtocolVersion
    task_id: str | None
    mode: Mode = Mode.ENFORCE
    card_etag: str | None = None
    binding: Binding = Binding.JSONRPC
    tenant: str = ""
    caller: str | None = None
    caller_matches: frozenset[str] = frozenset()
    card_generation: int | None = None
    spelling: Spelling = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spelling", spelling_of(self.version, self.binding))


@dataclass(frozen=True, slots=True)
class StreamState:
    """Per-stream facts the engine carries between events of one SSE stream.

    ``generation`` is the last task generation this stream carried (``None``: none yet): one
    stream's events arrive in order, so only a step back *on the same stream* is a regression
    (docs/resume.md §3.2).

    ``shown`` is, per artifact, what this stream delivered of it (:data:`Shown`: parts count
    and their fold), for the artifacts whose whole content it delivered (from their creation, a
    replace, a Task snapshot, or the record's view it continued); at most :data:`MAX_ARTIFACTS`.
    The record takes it with each delivered update, and it is what the record freezes when the
    task ends (docs/field-cases.md F18, F19): each stream folds its own deliveries, so two
    streams of one task never fold one chunk twice.
    """

    task_id: str | None = None
    context_id: str | None = None
    terminal: bool = False
    generation: int | None = None
    shown: Mapping[str, Shown] = field(default_factory=lambda: NO_SHOWN)


def _stream_builder() -> Callable[[str | None, str | None, bool, int | None, Mapping[str, Shown]], StreamState]:
    new = object.__new__
    setters = tuple(StreamState.__dict__[f.name].__set__ for f in fields(StreamState))
    if tuple(f.name for f in fields(StreamState)) != ("task_id", "context_id", "terminal", "generation",
                                                       "shown"):  # pragma: no cover
        raise RuntimeError("StreamState fields changed: update stream_state")
    s_task_id, s_context_id, s_terminal, s_generation, s_shown = setters

    def stream_state(task_id: str | None, context_id: str | None, terminal: bool, generation: int | None,
                     shown: Mapping[str, Shown]) -> StreamState:
        """``StreamState(...)`` with every field given, at about half the cost (as
        :func:`build_record`): the engine makes one per artifact event."""
        state = new(StreamState)
        s_task_id(state, task_id)
        s_context_id(state, context_id)
        s_terminal(state, terminal)
        s_generation(state, generation)
        s_shown(state, shown)
        return state

    return stream_state


stream_state = _stream_builder()


@dataclass(frozen=True, slots=True)
class Clock:
    """The time of an observation: wall-clock seconds since the epoch."""

    wall: float


@dataclass(slots=True)
class Outcome:
    """The engine's verdict on one payload.

    ``result`` is the payload to deliver (the original object when nothing changed);
    ``error`` is set with :attr:`Action.REJECT` as ``(code, message)``, and with
    :attr:`Action.DROP` for a stream event refused for its identity (another task or context):
    what a unary answer would have been refused with, which ends a stream that delivered
    nothing else (docs/protocol.md §7); ``record`` is the new
    ledger record to store (``None``: no change); ``close`` asks a stream to end after this
    payload.
    """

    action: Action
    result: Any
    stream: StreamState | None = None
    record: TaskRecord | None = None
    findings: list[Finding] = field(default_factory=list)
    error: tuple[int, str] | None = None
    close: bool = False

