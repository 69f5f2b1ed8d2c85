"""TaskState: the one normalization boundary for every taskState spelling.

Implements docs/protocol.md §2 (TaskState table, terminal and interrupted classes) and the
docs/field-cases.md unknown-state policy. Pure: stdlib only.

Every spelling seen on the wire maps to one canonical :class:`TaskState` (the v1.0 ProtoJSON
name). Clients get the state back in their own wire form's spelling via :func:`spell_state`: a
:class:`Spelling` per protocol version and binding (v0.3 REST spells states like v0.3 gRPC, not
like v0.3 JSON-RPC). A string outside the alias table raises :class:`UnknownStateError`; the
gateway never guesses.

Spelling families (the ``family`` label of the normalization counter; a small fixed set, never
the raw string):

=============  ====================================================================
``v10_enum``   a v1.0 ProtoJSON name (``TASK_STATE_WORKING``) in a v0.3 exchange
``v03_kebab``  a v0.3 JSON-RPC name (``input-required``, ``unknown``) in a v1.0 exchange
``underscore`` lower-case with underscores (``input_required``): Python enum member names
``case_variant`` any other letter-case or separator variant (``Working``, ``INPUT_REQUIRED``)
``v03_grpc``   the double-l cancel spellings (``TASK_STATE_CANCELLED``, ``cancelled``)
=============  ====================================================================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import UnknownStateError


class TaskState(enum.StrEnum):
    """Canonical task state: the v1.0 ProtoJSON enum name (docs/protocol.md §2)."""

    UNSPECIFIED = "TASK_STATE_UNSPECIFIED"
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    REJECTED = "TASK_STATE_REJECTED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"

    @property
    def is_terminal(self) -> bool:
        """True for completed, failed, canceled and rejected: absorbing states."""
        return self._value_ in _TERMINAL_VALUES  # plain str: no Enum.__hash__ call

    @property
    def is_interrupted(self) -> bool:
        """True for input-required and auth-required."""
        return self._value_ in _INTERRUPTED_VALUES


def moves_on(recorded: TaskState, seen: TaskState) -> bool:
    """True when a task recorded in ``recorded`` can have come to ``seen`` along the task
    lifecycle (docs/protocol.md §2) through steps the gateway did not see — progress, not a
    contradiction (docs/field-cases.md F22): out of an unspecified or submitted state to any
    other; from working or an interrupted state to working, an interrupted or a terminal state.
    Never out of a terminal state, and never back to submitted (or to unspecified)."""
    if recorded is seen:
        return True
    if recorded.is_terminal or seen is TaskState.UNSPECIFIED:
        return False
    if seen is TaskState.SUBMITTED:
        return recorded is TaskState.UNSPECIFIED
    return True


TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
INTERRUPTED_STATES = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})
_TERMINAL_VALUES = frozenset(s.value for s in TERMINAL_STATES)
_INTERRUPTED_VALUES = frozenset(s.value for s in INTERRUPTED_STATES)

_V03_SPELLING: dict[TaskState, str] = {
    TaskState.UNSPECIFIED: "unknown",
    TaskState.SUBMITTED: "submitted",
    TaskState.WORKING: "working",
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.CANCELED: "canceled",
    TaskState.INPUT_REQUIRED: "input-required",
    TaskState.REJECTED: "rejected",
    TaskState.AUTH_REQUIRED: "auth-required",
}
_FROM_V03 = {v: k for k, v in _V03_SPELLING.items()}
_FROM_V10 = {s.value: s for s in TaskState}
_DOUBLE_L = {"TASK_STATE_CANCELLED", "cancelled", "CANCELLED", "Cancelled"}
# Keys: upper-case, separators folded to "_", "TASK_STATE_" prefix removed.
_FOLDED = {s.value.removeprefix("TASK_STATE_"): s for s in TaskState}
_FOLDED["UNKNOWN"] = TaskState.UNSPECIFIED
_FOLDED["CANCELLED"] = TaskState.CANCELED

FAMILIES = ("v10_enum", "v03_kebab", "underscore", "case_variant", "v03_grpc")


class Spelling(enum.Enum):
    """How a wire form spells task states (the columns of docs/protocol.md §2).

    ``V1_0``: v1.0 ProtoJSON names, both bindings (``TASK_STATE_CANCELED``). ``V0_3``: v0.3
    JSON-RPC kebab-case (``input-required``). ``V0_3_PROTO``: the v0.3 REST and gRPC enum names
    (docs/protocol.md §11 pitfall 11), ProtoJSON like v1.0 but ``TASK_STATE_CANCELLED``.
    """

    V1_0 = "1.0"
    V0_3 = "0.3"
    V0_3_PROTO = "0.3-proto"


def spelling_of(version: ProtocolVersion, binding: Binding = Binding.JSONRPC) -> Spelling:
    """The :class:`Spelling` of ``version`` on ``binding``."""
    if version is not ProtocolVersion.V0_3:
        return Spelling.V1_0
    return Spelling.V0_3 if binding is Binding.JSONRPC else Spelling.V0_3_PROTO


_V10 = Spelling.V1_0
_V03 = Spelling.V0_3
_V03P = Spelling.V0_3_PROTO
_BY_VERSION: dict[ProtocolVersion | Spelling, Spelling] = {ProtocolVersion.V1_0: _V10, ProtocolVersion.V0_3: _V03,
               _V10: _V10, _V03: _V03, _V03P: _V03P}


@dataclass(frozen=True, slots=True)
class Normalized:
    """Result of :func:`normalize_state`.

    ``family`` is ``None`` when the input was already the canonical spelling of the exchange's
    protocol version (or absent), otherwise one of :data:`FAMILIES`. ``respelled`` is the
    spelling a client of that version must get instead of the input (:func:`spell_state`), or
    ``None`` when the input can be forwarded as sent (it is that spelling; or, in v1.0, absent
    or empty: ProtoJSON omits the zero enum).
    """

    state: TaskState
    family: str | None
    respelled: str | None = None


def normalize_state(raw: object, version: ProtocolVersion | Spelling) -> Normalized:
    """Map any known spelling of a task state to its canonical :class:`TaskState`.

    Args:
        raw: the wire value of ``status.state``; ``None`` or ``""`` (ProtoJSON omits the zero
            enum) mean unspecified.
        version: the exchange's wire form, which decides what is canonical: a
            :class:`Spelling`, or a protocol version (its JSON-RPC spelling).

    Returns:
        :class:`Normalized` with the state, the spelling family (``None`` if canonical) and the
        re-spelling a client of ``version`` gets instead (``None``: forward ``raw`` as sent).
        Every verbatim spelling is one precomputed dict lookup (the engine relies on it).

    Raises:
        UnknownStateError: a non-string, or a string outside the alias table (``"paused"``).
    """
    exact = _EXACT[version]
    if isinstance(raw, str):
        norm = exact.get(raw)
        if norm is not None:
            return norm
        folded = _folded(raw)
        return Normalized(folded.state, folded.family, spell_state(folded.state, version))
    if raw is None:
        return exact[None]
    raise UnknownStateError(raw)


def _exact(raw: str | None, spelling: Spelling) -> Normalized:
    """The verbatim-table part of :func:`normalize_state` (``raw`` is a table spelling, or
    ``None`` / ``""``)."""
    spelled_here = raw in (None, "")
    if raw is None or raw == "":
        state = TaskState.UNSPECIFIED
    elif raw in _FROM_V10:
        state = _FROM_V10[raw]
    elif raw in _FROM_V03:
        state = _FROM_V03[raw]
    else:
        state = TaskState.CANCELED  # _DOUBLE_L
    spelled = spell_state(state, spelling)
    if raw is None or raw == "" or raw == spelled:
        family = None
    elif raw in _FROM_V10:
        family = "v10_enum"
    elif raw in _FROM_V03:
        family = "v03_kebab"
    else:
        family = "v03_grpc"
    keep = raw == spelled or (spelled_here and spelling is not _V03)
    return Normalized(state, family, None if keep else spelled)


def _folded(raw: str) -> Normalized:
    """The letter-case and separator variants of :func:`normalize_state`."""
    if not raw.isascii():  # "faıled" must not fold into FAILED: lookalikes are unknown
        raise UnknownStateError(raw)
    folded = raw.strip().upper().replace("-", "_").replace(" ", "_").removeprefix("TASK_STATE_")
    state = _FOLDED.get(folded)
    if state is None:
        raise UnknownStateError(raw)
    if folded == "CANCELLED":
        return Normalized(state, "v03_grpc")
    if raw.islower() and "_" in raw and "-" not in raw:
        return Normalized(state, "underscore")
    return Normalized(state, "case_variant")


def spell_state(state: TaskState, version: ProtocolVersion | Spelling) -> str:
    """Spell a canonical state for a client of ``version`` (a :class:`Spelling`, or a protocol
    version: its JSON-RPC spelling).

    v1.0 gets the ProtoJSON name (``TASK_STATE_INPUT_REQUIRED``); v0.3 JSON-RPC gets kebab-case
    (``input-required``; unspecified is ``unknown``); v0.3 REST the v0.3 enum name
    (``TASK_STATE_CANCELLED``). docs/protocol.md §2.
    """
    spelling = _BY_VERSION[version]
    if spelling is _V03:
        return _V03_SPELLING[state]
    if spelling is _V03P and state is TaskState.CANCELED:
        return "TASK_STATE_CANCELLED"
    return state.value


# Every spelling normalize_state takes verbatim (no case or separator folding).
TABLE_SPELLINGS: tuple[str, ...] = (*_FROM_V10, *_FROM_V03, *_DOUBLE_L)
# normalize_state's verbatim spellings (and absent / empty), precomputed per spelling with
# their re-spelling: one dict lookup (a protocol version reads as its JSON-RPC spelling).
_EXACT: dict[ProtocolVersion | Spelling, dict[str | None, Normalized]] = {
    key: {raw: _exact(raw, spelling) for raw in (None, "", *TABLE_SPELLINGS)}
    for key, spelling in _BY_VERSION.items()
}
