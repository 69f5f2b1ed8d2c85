"""gateway.a2a.states: every taskState spelling maps to one canonical state (docs/protocol.md §2).

Expectations come from the docs/protocol.md §2 table and docs/field-cases.md F01/F03 and the
unknown-state policy, not from the implementation's tables.
"""

from __future__ import annotations

import pytest

from gateway.a2a.states import (
    FAMILIES,
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    ProtocolVersion,
    TaskState,
    UnknownStateError,
    moves_on,
    normalize_state,
    spell_state,
)

V10 = ProtocolVersion.V1_0
V03 = ProtocolVersion.V0_3

# docs/protocol.md §2, written out by hand: (v1.0 ProtoJSON name, v0.3 JSON-RPC name).
SPELLINGS = [
    ("TASK_STATE_UNSPECIFIED", "unknown"),
    ("TASK_STATE_SUBMITTED", "submitted"),
    ("TASK_STATE_WORKING", "working"),
    ("TASK_STATE_COMPLETED", "completed"),
    ("TASK_STATE_FAILED", "failed"),
    ("TASK_STATE_CANCELED", "canceled"),
    ("TASK_STATE_INPUT_REQUIRED", "input-required"),
    ("TASK_STATE_REJECTED", "rejected"),
    ("TASK_STATE_AUTH_REQUIRED", "auth-required"),
]


class TestF01InputRequiredFamily:
    """F01: every input-required spelling is INPUT_REQUIRED, labelled with a fixed family."""

    @pytest.mark.parametrize(
        ("raw", "family"),
        [
            ("input_required", "underscore"),
            ("input-required", "v03_kebab"),
            ("INPUT_REQUIRED", "case_variant"),
            ("Input-Required", "case_variant"),
            ("TASK_STATE_INPUT_REQUIRED", None),
        ],
    )
    def test_f01_input_required_spellings_in_a_v10_exchange(self, raw, family):
        """A v1.0 exchange: only TASK_STATE_INPUT_REQUIRED is canonical (family None)."""
        norm = normalize_state(raw, V10)
        assert norm.state is TaskState.INPUT_REQUIRED
        assert norm.family == family

    @pytest.mark.parametrize(
        ("raw", "family"),
        [
            ("input_required", "underscore"),
            ("input-required", None),
            ("INPUT_REQUIRED", "case_variant"),
            ("Input-Required", "case_variant"),
            ("TASK_STATE_INPUT_REQUIRED", "v10_enum"),
        ],
    )
    def test_f01_input_required_spellings_in_a_v03_exchange(self, raw, family):
        """A v0.3 exchange: only input-required is canonical; the v1.0 name is v10_enum."""
        norm = normalize_state(raw, V03)
        assert norm.state is TaskState.INPUT_REQUIRED
        assert norm.family == family

    @pytest.mark.parametrize("raw", ["input_required", "input-required", "INPUT_REQUIRED",
                                     "Input-Required", "TASK_STATE_INPUT_REQUIRED"])
    def test_f01_input_required_stays_interrupted_not_terminal(self, raw):
        """Whatever the spelling, input-required never reads as terminal (follow-ups allowed)."""
        state = normalize_state(raw, V10).state
        assert not state.is_terminal
        assert state.is_interrupted


class TestF01WorkingFamily:
    @pytest.mark.parametrize(
        ("raw", "version", "family"),
        [
            ("Working", V10, "case_variant"),
            ("working", V10, "v03_kebab"),
            ("TASK_STATE_WORKING", V10, None),
            ("Working", V03, "case_variant"),
            ("working", V03, None),
            ("TASK_STATE_WORKING", V03, "v10_enum"),
        ],
    )
    def test_f01_working_spellings(self, raw, version, family):
        """Working / working / TASK_STATE_WORKING all mean WORKING; family depends on version."""
        norm = normalize_state(raw, version)
        assert norm.state is TaskState.WORKING
        assert norm.family == family


class TestDoubleLCancel:
    @pytest.mark.parametrize("raw", ["TASK_STATE_CANCELLED", "cancelled"])
    @pytest.mark.parametrize("version", [V10, V03])
    def test_double_l_cancel_is_canceled_in_the_v03_grpc_family(self, raw, version):
        """docs/protocol.md §2: v0.3 gRPC spelled CANCELLED (two Ls); it is CANCELED, v03_grpc."""
        norm = normalize_state(raw, version)
        assert norm.state is TaskState.CANCELED
        assert norm.family == "v03_grpc"

    def test_double_l_cancel_is_terminal(self):
        """Terminal detection must accept the double-l spelling (docs/protocol.md §11 pitfall 4)."""
        assert normalize_state("TASK_STATE_CANCELLED", V10).state.is_terminal


class TestCanonicalSpellings:
    @pytest.mark.parametrize(("v10", "v03"), SPELLINGS)
    def test_v10_name_is_canonical_in_v10_and_v10_enum_in_v03(self, v10, v03):
        """The ProtoJSON name carries no family in a v1.0 exchange and v10_enum in a v0.3 one."""
        assert normalize_state(v10, V10).family is None
        assert normalize_state(v10, V03).family == "v10_enum"
        assert normalize_state(v10, V10).state == normalize_state(v10, V03).state

    @pytest.mark.parametrize(("v10", "v03"), SPELLINGS)
    def test_v03_name_is_canonical_in_v03_and_v03_kebab_in_v10(self, v10, v03):
        """The v0.3 JSON-RPC name carries no family in v0.3 and v03_kebab in v1.0."""
        assert normalize_state(v03, V03).family is None
        assert normalize_state(v03, V10).family == "v03_kebab"

    @pytest.mark.parametrize(("v10", "v03"), SPELLINGS)
    def test_both_version_spellings_name_the_same_state(self, v10, v03):
        """Row by row, the v1.0 and v0.3 names of docs/protocol.md §2 normalize to one state."""
        assert normalize_state(v10, V10).state is normalize_state(v03, V03).state
        assert normalize_state(v10, V10).state.value == v10

    def test_families_are_a_small_fixed_set(self):
        """F01: the counter label is one of a fixed set, never the raw string."""
        assert set(FAMILIES) == {"v10_enum", "v03_kebab", "underscore", "case_variant", "v03_grpc"}


class TestUnspecified:
    @pytest.mark.parametrize("raw", [None, "", "TASK_STATE_UNSPECIFIED", "unknown"])
    @pytest.mark.parametrize("version", [V10, V03])
    def test_absent_empty_unspecified_and_unknown_mean_unspecified(self, raw, version):
        """F03: ProtoJSON omits the zero enum; UNSPECIFIED and v0.3 unknown are known values."""
        assert normalize_state(raw, version).state is TaskState.UNSPECIFIED

    @pytest.mark.parametrize("raw", [None, ""])
    @pytest.mark.parametrize("version", [V10, V03])
    def test_absent_state_is_not_counted_as_a_spelling(self, raw, version):
        """An omitted state is not a non-canonical spelling: family None."""
        assert normalize_state(raw, version).family is None

    def test_unspecified_is_neither_terminal_nor_interrupted(self):
        """F03: unspecified never counts as terminal (the Python SDK's bug)."""
        assert not TaskState.UNSPECIFIED.is_terminal
        assert not TaskState.UNSPECIFIED.is_interrupted


class TestUnknownStrings:
    @pytest.mark.parametrize("raw", ["paused", "TASK_STATE_PAUSED", "done", "complete", 3, 0, {},
                                     [], True, 1.5, "   "])
    @pytest.mark.parametrize("version", [V10, V03])
    def test_values_outside_the_alias_table_raise(self, raw, version):
        """Unknown-state policy: the gateway never guesses; it raises UnknownStateError."""
        with pytest.raises(UnknownStateError) as info:
            normalize_state(raw, version)
        assert info.value.raw == raw

    def test_unknown_state_error_is_a_value_error_naming_the_value(self):
        """The error message names the offending value, for logs."""
        with pytest.raises(ValueError, match="paused"):
            normalize_state("paused", V10)


class TestSpellState:
    @pytest.mark.parametrize(("v10", "v03"), SPELLINGS)
    def test_v10_client_gets_the_protojson_name(self, v10, v03):
        """docs/protocol.md §2: v1.0 clients get TASK_STATE_*."""
        assert spell_state(TaskState(v10), V10) == v10

    @pytest.mark.parametrize(("v10", "v03"), SPELLINGS)
    def test_v03_client_gets_kebab_case(self, v10, v03):
        """docs/protocol.md §2: v0.3 clients get kebab-case; unspecified is 'unknown'."""
        assert spell_state(TaskState(v10), V03) == v03

    @pytest.mark.parametrize("state", list(TaskState))
    @pytest.mark.parametrize("version", [V10, V03])
    def test_spelling_round_trips_as_canonical(self, state, version):
        """Re-normalizing a state spelled for a version gives it back with family None."""
        norm = normalize_state(spell_state(state, version), version)
        assert norm.state is state
        assert norm.family is None

    def test_there_are_nine_states(self):
        """docs/protocol.md §2 lists nine states, enum numbers 0..8."""
        assert len(TaskState) == 9


class TestRespelled:
    """normalize_state also says how the client's version spells the state, when the input is
    not that spelling (the engine rewrites the object with it)."""

    @pytest.mark.parametrize(("v10", "v03"), SPELLINGS)
    def test_the_versions_own_spelling_is_forwarded_as_sent(self, v10, v03):
        assert normalize_state(v10, V10).respelled is None
        assert normalize_state(v03, V03).respelled is None

    @pytest.mark.parametrize(("v10", "v03"), SPELLINGS)
    def test_the_other_versions_spelling_is_respelled(self, v10, v03):
        assert normalize_state(v03, V10).respelled == v10
        assert normalize_state(v10, V03).respelled == v03

    @pytest.mark.parametrize(("raw", "version", "respelled"), [
        ("Working", V03, "working"),
        ("INPUT_REQUIRED", V10, "TASK_STATE_INPUT_REQUIRED"),
        ("input_required", V03, "input-required"),
        ("TASK_STATE_CANCELLED", V10, "TASK_STATE_CANCELED"),
        ("cancelled", V03, "canceled"),
        ("Cancelled", V10, "TASK_STATE_CANCELED"),
    ])
    def test_variants_are_respelled(self, raw, version, respelled):
        assert normalize_state(raw, version).respelled == respelled

    @pytest.mark.parametrize("raw", [None, ""])
    def test_an_absent_state_stays_absent_in_v10_and_is_unknown_in_v03(self, raw):
        """ProtoJSON omits the zero enum; v0.3 spells unspecified 'unknown'."""
        assert normalize_state(raw, V10).respelled is None
        assert normalize_state(raw, V03).respelled == "unknown"


class TestClasses:
    def test_terminal_set(self):
        """docs/protocol.md §2: completed, failed, canceled and rejected are terminal."""
        assert TERMINAL_STATES == {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED,
                                   TaskState.REJECTED}
        assert {s for s in TaskState if s.is_terminal} == TERMINAL_STATES

    def test_interrupted_set(self):
        """docs/protocol.md §2: input-required and auth-required are interrupted."""
        assert INTERRUPTED_STATES == {TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED}
        assert {s for s in TaskState if s.is_interrupted} == INTERRUPTED_STATES

    @pytest.mark.parametrize("state", [TaskState.UNSPECIFIED, TaskState.SUBMITTED,
                                       TaskState.WORKING])
    def test_active_states_are_neither_terminal_nor_interrupted(self, state):
        """Submitted and working are active; unspecified is invalid but not terminal."""
        assert not state.is_terminal
        assert not state.is_interrupted

    def test_protocol_version_values_are_major_minor(self):
        """A2A-Version is Major.Minor (docs/protocol.md §5)."""
        assert ProtocolVersion("1.0") is V10
        assert ProtocolVersion("0.3") is V03


class TestMovesOn:
    """docs/field-cases.md F22: which unseen state changes are progress."""

    S = TaskState

    @pytest.mark.parametrize(("recorded", "seen"), [
        (S.SUBMITTED, S.COMPLETED), (S.SUBMITTED, S.WORKING), (S.SUBMITTED, S.INPUT_REQUIRED),
        (S.WORKING, S.CANCELED), (S.WORKING, S.FAILED), (S.WORKING, S.INPUT_REQUIRED),
        (S.INPUT_REQUIRED, S.WORKING), (S.AUTH_REQUIRED, S.COMPLETED), (S.INPUT_REQUIRED, S.AUTH_REQUIRED),
        (S.UNSPECIFIED, S.SUBMITTED), (S.UNSPECIFIED, S.WORKING), (S.WORKING, S.WORKING),
    ])
    def test_progress(self, recorded, seen):
        assert moves_on(recorded, seen)

    @pytest.mark.parametrize(("recorded", "seen"), [
        (S.WORKING, S.SUBMITTED), (S.INPUT_REQUIRED, S.SUBMITTED), (S.COMPLETED, S.WORKING),
        (S.CANCELED, S.COMPLETED), (S.FAILED, S.SUBMITTED), (S.WORKING, S.UNSPECIFIED),
    ])
    def test_contradictions(self, recorded, seen):
        assert not moves_on(recorded, seen)
