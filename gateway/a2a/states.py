"""TaskState: the one normalization boundary for every taskState spelling.

Implements docs/protocol.md §2 (TaskState table, terminal and interrupted classes) and the
docs/field-cases.md unknown-state policy. Pure: stdlib only.

Every spelling seen on the wire maps to one canonical :class:`TaskState` (the v1.0 ProtoJSON
name). Clients get the state back in their own protocol version's spelling via
:func:`spell_state`. A string outside the alias table raises :class:`UnknownStateError`; the
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

from gateway.a2a.version import ProtocolVersion
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
_V10 = ProtocolVersion.V1_0
_V03 = ProtocolVersion.V0_3


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


def normalize_state(raw: object, version: ProtocolVersion) -> Normalized:
    """Map any known spelling of a task state to its canonical :class:`TaskState`.

    Args:
        raw: the wire value of ``status.state``; ``None`` or ``""`` (ProtoJSON omits the zero
            enum) mean unspecified.
        version: the protocol version of the exchange, which decides what is canonical.

    Returns:
        :class:`Normalized` with the state, the spelling family (``None`` if canonical) and the
        re-spelling a client of ``version`` gets instead (``None``: forward ``raw`` as sent).
        Every verbatim spelling is one precomputed dict lookup (the engine relies on it).

    Raises:
        UnknownStateError: a non-string, or a string outside the alias table (``"paused"``).
    """
    exact = _EXACT_V10 if version is _V10 else _EXACT_V03 if version is _V03 else _EXACT_OTHER
    if isinstance(raw, str):
        norm = exact.get(raw)
        if norm is not None:
            return norm
        folded = _folded(raw)
        return Normalized(folded.state, folded.family, spell_state(folded.state, version))
    if raw is None:
        return exact[None]
    raise UnknownStateError(raw)


def _exact(raw: str | None, version: ProtocolVersion) -> Normalized:
    """The verbatim-table part of :func:`normalize_state` (``raw`` is a table spelling, or
    ``None`` / ``""``)."""
    if raw is None or raw == "":
        state, family = TaskState.UNSPECIFIED, None
    elif raw in _FROM_V10:
        state, family = _FROM_V10[raw], None if version is _V10 else "v10_enum"
    elif raw in _FROM_V03:
        state, family = _FROM_V03[raw], None if version is _V03 else "v03_kebab"
    else:
        state, family = TaskState.CANCELED, "v03_grpc"  # _DOUBLE_L
    spelled = spell_state(state, version)
    keep = raw == spelled or (raw in (None, "") and version is not _V03)
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


def spell_state(state: TaskState, version: ProtocolVersion) -> str:
    """Spell a canonical state for a client of ``version``.

    v1.0 gets the ProtoJSON name (``TASK_STATE_INPUT_REQUIRED``); v0.3 gets kebab-case
    (``input-required``; unspecified is ``unknown``). docs/protocol.md §2.
    """
    if version is _V03:
        return _V03_SPELLING[state]
    return state.value


# Every spelling normalize_state takes verbatim (no case or separator folding).
TABLE_SPELLINGS: tuple[str, ...] = (*_FROM_V10, *_FROM_V03, *_DOUBLE_L)
# normalize_state's verbatim spellings (and absent / empty), precomputed per exchange version
# with their re-spelling: one dict lookup.
_EXACT_V10 = {raw: _exact(raw, _V10) for raw in (None, "", *TABLE_SPELLINGS)}
_EXACT_V03 = {raw: _exact(raw, _V03) for raw in _EXACT_V10}
_EXACT_OTHER = {raw: _exact(raw, None) for raw in _EXACT_V10}  # type: ignore[arg-type]
