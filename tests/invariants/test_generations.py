"""Task generations (A2A v1.1 draft, SPEC11 §3.2.7) in the invariant engine and in
``forced_get_reason``: plain-dict transcripts through the judge loop
(:class:`~tests.invariants.playbook.Playbook`). Expected values come from docs/resume.md §3
and the draft, not from the engine: initialised to 1, +1 per state or artifact change, each
event carries the generation after its mutation, 0 or absent means "not implemented".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gateway.a2a.states import TaskState
from gateway.invariants.admission import CardView, forced_get_reason
from gateway.invariants.model import DIVERGENCE_KINDS, Action, Mode, StreamState, TaskRecord
from tests.invariants.payloads import artifact_update, status_update, task
from tests.invariants.playbook import UPSTREAM, Playbook, exchange, kinds

NEW = {"message": {"messageId": "m-0", "role": "ROLE_USER", "parts": [{"text": "go"}]}}
GAP, REGRESSION = "generation_gap", "generation_regression"
CARD = CardView(doc={}, fresh=True, reachable=True, etag=None)


def gen(payload: dict[str, Any], value: Any) -> dict[str, Any]:
    """``payload`` (a Task, or a StreamResponse wrapping one event) carrying ``generation``."""
    if len(payload) == 1 and next(iter(payload)) in ("task", "statusUpdate", "artifactUpdate"):
        member, inner = next(iter(payload.items()))
        return {member: {**inner, "generation": value}}
    return {**payload, "generation": value}


def follow_up(tid: str = "t-1") -> dict[str, Any]:
    return {"message": {"messageId": "m-9", "role": "ROLE_USER", "taskId": tid,
                        "parts": [{"text": "more"}]}}


def owed(book: Playbook, tid: str = "t-1") -> str | None:
    """What ``forced_get_reason`` says before the next action on ``tid`` (the card fresh, no
    restart, no heartbeat gap)."""
    record = book.record(tid)
    now = record.observed_at if record is not None else 0.0
    return forced_get_reason(record, CARD, needs_resync=False, now=now, heartbeat_seconds=30.0)


def working_stream(book: Playbook, *generations: Any, tid: str = "t-1") -> list[Any]:
    """A new ``SendStreamingMessage`` stream: the Task with the first generation, then one
    WORKING status update per further generation. Returns the outcomes."""
    stream = book.open(exchange("SendStreamingMessage", NEW))
    first, *rest = generations
    outs = [stream.event(gen({"task": task(tid, "c-1", "TASK_STATE_WORKING")}, first))]
    outs += [stream.event(gen(status_update(tid, "c-1", "TASK_STATE_WORKING"), g)) for g in rest]
    return outs


@pytest.fixture
def book() -> Playbook:
    return Playbook()


class TestGap:
    def test_consecutive_generations_owe_nothing(self, book):
        outs = working_stream(book, 1, 2, 3, 4)
        assert [o.action for o in outs] == [Action.FORWARD] * 4
        assert book.record("t-1").generation == 4
        assert book.record("t-1").pending_get is None
        assert owed(book) is None
        assert book.all_findings == []

    def test_a_jump_owes_a_get_task_and_the_event_is_still_delivered(self, book):
        outs = working_stream(book, 1, 2, 4)
        assert [o.action for o in outs] == [Action.FORWARD] * 3
        assert outs[-1].result["statusUpdate"]["generation"] == 4  # relayed as the worker sent it
        assert book.record("t-1").generation == 4
        assert book.record("t-1").pending_get == GAP
        assert owed(book) == GAP
        assert kinds(book.all_findings, "divergence") == []  # a gap is no worker lie

    @pytest.mark.parametrize("values", [("1", "2", "4"), (1, "2", 4.0), ("01", "2", "4")])
    def test_protojson_string_generations_count_like_numbers(self, book, values):
        working_stream(book, *values)
        assert book.record("t-1").generation == 4
        assert owed(book) == GAP

    def test_an_artifact_update_that_jumps_is_a_gap_too(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW))
        stream.event(gen({"task": task("t-1", "c-1", "TASK_STATE_WORKING")}, 1))
        out = stream.event(gen(artifact_update("t-1", "c-1", "a-1", ["x"]), 3))
        assert out.action is Action.FORWARD
        assert book.record("t-1").artifacts["a-1"].parts == 1
        assert owed(book) == GAP

    def test_the_first_generation_seen_is_the_baseline(self, book):
        book.seed(TaskRecord(UPSTREAM, "t-1", "c-1", TaskState.WORKING, 1.0))  # written before generations
        stream = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        stream.event(gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), 7))
        assert book.record("t-1").generation == 7 and owed(book) is None

    def test_a_task_snapshot_sets_the_baseline_without_a_gap_check(self, book):
        working_stream(book, 1, 2)
        out = book.answer(exchange("GetTask", {"id": "t-1"}), gen(task("t-1", "c-1", "TASK_STATE_WORKING"), 9))
        assert out.action is Action.FORWARD
        assert book.record("t-1").generation == 9 and owed(book) is None
        # and the next event is judged against the snapshot's generation
        stream = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        stream.event(gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), 10))
        assert owed(book) is None

    def test_the_get_task_answer_clears_what_is_owed(self, book):
        working_stream(book, 1, 2, 4)
        assert owed(book) == GAP
        book.answer(exchange("GetTask", {"id": "t-1"}), gen(task("t-1", "c-1", "TASK_STATE_WORKING"), 4))
        assert book.record("t-1").pending_get is None and owed(book) is None

    def test_a_stream_snapshot_as_new_as_the_record_clears_it_too(self, book):
        working_stream(book, 1, 2, 4)
        stream = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        stream.event(gen({"task": task("t-1", "c-1", "TASK_STATE_WORKING")}, 5))
        assert owed(book) is None

    def test_a_snapshot_older_than_the_gap_leaves_it_owed(self, book):
        working_stream(book, 1, 2, 6)
        stream = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        stream.event(gen({"task": task("t-1", "c-1", "TASK_STATE_WORKING")}, 5))
        assert owed(book) is not None  # 5 < 6: it is even a regression
        assert book.record("t-1").generation == 6

    def test_a_lagging_streams_snapshot_older_than_the_record_leaves_the_gap_owed(self, book):
        """Not a step back on its own stream (2 → 4), but older than the record's 6: it
        cannot stand for the events the gap lost."""
        working_stream(book, 1, 2)
        ahead = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        behind = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        snapshot = {"task": task("t-1", "c-1", "TASK_STATE_WORKING")}
        ahead.event(gen(snapshot, 2))
        behind.event(gen(snapshot, 2))
        for g in (3, 6):
            ahead.event(gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), g))
        assert owed(book) == GAP
        out = behind.event(gen(snapshot, 4))
        assert out.findings == [] and owed(book) == GAP

    def test_a_gap_on_the_terminal_event_owes_nothing(self, book):
        working_stream(book, 1, 2)
        stream = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        out = stream.event(gen(status_update("t-1", "c-1", "TASK_STATE_COMPLETED"), 9))
        assert out.action is Action.FORWARD and out.close
        record = book.record("t-1")
        assert record.terminal and record.generation == 9 and record.pending_get is None
        assert owed(book) is None  # a terminal task is never polled back to life

    def test_a_dropped_sealed_artifact_update_still_counts_as_seen(self, book):
        """An update to a sealed artifact is not delivered (F06), but it was no missed event:
        the one after it is no gap."""
        stream = book.open(exchange("SendStreamingMessage", NEW))
        stream.event(gen({"task": task("t-1", "c-1", "TASK_STATE_WORKING")}, 1))
        stream.event(gen(artifact_update("t-1", "c-1", "a-1", ["x"], last=True), 2))
        dropped = stream.event(gen(artifact_update("t-1", "c-1", "a-1", ["y"]), 3))
        assert dropped.action is Action.DROP
        assert kinds(dropped.findings, "divergence") == ["artifact_after_last_chunk"]
        assert book.record("t-1").generation == 3
        assert stream.state.generation == 3  # the stream carried it too
        stream.event(gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), 4))
        assert owed(book) is None


class TestRegression:
    def test_a_step_back_on_a_stream_is_counted_owes_a_get_task_and_is_delivered(self, book):
        outs = working_stream(book, 1, 2, 3, 2)
        assert outs[-1].action is Action.FORWARD
        assert kinds(outs[-1].findings, "divergence") == [REGRESSION]
        record = book.record("t-1")
        assert record.generation == 3  # the highest seen
        assert record.pending_get == REGRESSION and owed(book) == REGRESSION
        assert REGRESSION in DIVERGENCE_KINDS

    def test_a_unary_task_answer_below_the_record_is_one(self, book):
        working_stream(book, 1, 2, 3)
        out = book.answer(exchange("SendMessage", follow_up()),
                          {"task": gen(task("t-1", "c-1", "TASK_STATE_WORKING"), 2)})
        assert out.action is Action.FORWARD
        assert kinds(out.findings, "divergence") == [REGRESSION]
        assert owed(book) == REGRESSION

    def test_a_get_task_answer_below_the_record_is_counted_but_owes_nothing_more(self, book):
        """The GetTask answer is the GetTask: asking again would ask the same worker."""
        working_stream(book, 1, 2, 3, 2)
        assert owed(book) == REGRESSION
        out = book.answer(exchange("GetTask", {"id": "t-1"}), gen(task("t-1", "c-1", "TASK_STATE_WORKING"), 2))
        assert kinds(out.findings, "divergence") == [REGRESSION]
        assert book.record("t-1").generation == 2  # the worker's answer is the new baseline
        assert owed(book) is None
        later = book.answer(exchange("SendMessage", follow_up()),
                            {"task": gen(task("t-1", "c-1", "TASK_STATE_WORKING"), 3)})
        assert later.findings == [] and owed(book) is None  # judged against 2, not the 3 it stepped back from

    def test_a_get_task_answer_as_new_as_the_record_clears_a_regression(self, book):
        working_stream(book, 1, 2, 3, 2)
        out = book.answer(exchange("GetTask", {"id": "t-1"}), gen(task("t-1", "c-1", "TASK_STATE_WORKING"), 3))
        assert out.findings == [] and owed(book) is None

    def test_a_subscribe_snapshot_below_the_record_is_one(self, book):
        working_stream(book, 1, 2, 3)
        stream = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        out = stream.event(gen({"task": task("t-1", "c-1", "TASK_STATE_WORKING")}, 1))
        assert kinds(out.findings, "divergence") == [REGRESSION]
        assert owed(book) == REGRESSION

    def test_a_concurrent_stream_repeating_older_events_is_no_regression(self, book):
        """Every stream of a task gets its events (SPEC §3.5.2): two subscribers start from
        the same snapshot, and the one read second repeats, in order, what the record already
        holds. Each stream is compared with itself."""
        working_stream(book, 1, 2)
        first = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        second = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        snapshot = gen({"task": task("t-1", "c-1", "TASK_STATE_WORKING")}, 2)
        first.event(snapshot)
        second.event(snapshot)
        for g in (3, 4, 5):
            first.event(gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), g))
        outs = [second.event(gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), g)) for g in (3, 4, 5)]
        assert [o.action for o in outs] == [Action.FORWARD] * 3
        assert book.all_findings == []
        assert book.record("t-1").generation == 5 and owed(book) is None
        # but the lagging stream going back on itself is one
        back = second.event(gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), 4))
        assert kinds(back.findings, "divergence") == [REGRESSION]

    def test_equal_generations_are_nothing(self, book):
        outs = working_stream(book, 1, 2, 2, 2)
        assert book.all_findings == [] and [o.action for o in outs] == [Action.FORWARD] * 4
        assert book.record("t-1").generation == 2 and owed(book) is None

    def test_a_reason_once_owed_stays_until_a_task_answer(self, book):
        working_stream(book, 1, 2, 5, 3)  # a gap, then a step back
        assert kinds(book.all_findings, "divergence") == [REGRESSION]
        assert owed(book) == GAP


class TestNotImplemented:
    @pytest.mark.parametrize("value", [None, 0, "0", -1, "-3", True, "5a", 2.5, "", [], {}])
    def test_a_worker_without_generations_behaves_as_before(self, book, value):
        stream = book.open(exchange("SendStreamingMessage", NEW))
        first = {"task": task("t-1", "c-1", "TASK_STATE_WORKING")}
        events = [first if value is None else gen(first, value)]
        events += [status_update("t-1", "c-1", "TASK_STATE_WORKING") if value is None
                   else gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), value) for _ in range(3)]
        outs = [stream.event(e) for e in events]
        assert [o.action for o in outs] == [Action.FORWARD] * 4
        assert book.all_findings == []
        record = book.record("t-1")
        assert record.generation is None and record.pending_get is None and owed(book) is None

    @pytest.mark.parametrize("value", [None, 0, "0"])
    def test_a_generation_that_disappears_switches_them_off_for_the_task(self, book, value):
        """SPEC11 §3.2.7: a 0 (absent in ProtoJSON) means the server does not implement
        generations; the client MUST NOT use them for the rest of the interaction."""
        working_stream(book, 1, 2, 5)
        assert owed(book) == GAP
        stream = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        update = status_update("t-1", "c-1", "TASK_STATE_WORKING")
        stream.event(update if value is None else gen(update, value))
        record = book.record("t-1")
        assert record.generation == 0 and record.pending_get is None and owed(book) is None
        for later in (9, 3):  # neither a gap nor a regression any more
            stream.event(gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), later))
        assert book.record("t-1").generation == 0 and owed(book) is None
        assert kinds(book.all_findings, "divergence") == []


class TestUnchanged:
    def test_terminal_absorption_is_unchanged_by_generations(self, book):
        """F04: events after a terminal state are not delivered, whatever their generation."""
        stream = book.open(exchange("SendStreamingMessage", NEW))
        stream.event(gen({"task": task("t-1", "c-1", "TASK_STATE_WORKING")}, 1))
        stream.event(gen(status_update("t-1", "c-1", "TASK_STATE_CANCELED"), 2))
        late = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        out = late.event(gen(status_update("t-1", "c-1", "TASK_STATE_COMPLETED"), 3))
        assert out.action is Action.FORWARD  # corrected to the recorded CANCELED, then closed
        assert out.result["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert kinds(out.findings, "divergence") == ["terminal_regression"]
        record = book.record("t-1")
        assert record.state is TaskState.CANCELED and record.generation == 2

    def test_observe_mode_keeps_the_ledger_change_and_forwards_the_original(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW, mode=Mode.OBSERVE))
        stream.event(gen({"task": task("t-1", "c-1", "TASK_STATE_WORKING")}, 1))
        payload = gen(status_update("t-1", "c-1", "TASK_STATE_WORKING"), 3)
        out = stream.event(payload)
        assert out.result is payload
        assert owed(book) == GAP

    def test_the_stream_carries_its_last_generation(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW))
        stream.event(gen({"task": task("t-1", "c-1", "TASK_STATE_WORKING")}, "4"))
        assert stream.state == StreamState("t-1", "c-1", False, 4)


class TestForcedGetReason:
    LIVE = TaskRecord("w", "t-1", "c-1", TaskState.WORKING, 1000.0, generation=4)

    def reason(self, record: TaskRecord, card: CardView = CARD, **kw: Any) -> str | None:
        return forced_get_reason(record, card, needs_resync=kw.get("needs_resync", False),
                                 now=kw.get("now", 1001.0), heartbeat_seconds=30.0)

    @pytest.mark.parametrize("why", [GAP, REGRESSION])
    def test_the_owed_reason_is_the_reason(self, why):
        assert self.reason(dataclasses.replace(self.LIVE, pending_get=why)) == why

    def test_nothing_owed_no_poll(self):
        assert self.reason(self.LIVE) is None

    def test_restart_comes_first_then_what_is_owed_then_the_card_and_the_heartbeat(self):
        owing = dataclasses.replace(self.LIVE, pending_get=GAP)
        unreachable = CardView(doc=None, fresh=False, reachable=False, etag=None)
        assert self.reason(owing, needs_resync=True) == "restart"
        assert self.reason(owing, unreachable, now=99_999.0) == GAP
        assert self.reason(self.LIVE, unreachable) == "card_unreachable"
        assert self.reason(self.LIVE, now=99_999.0) == "heartbeat_gap"

    def test_a_terminal_task_is_never_polled_whatever_is_owed(self):
        done = dataclasses.replace(self.LIVE, state=TaskState.COMPLETED, pending_get=GAP)
        assert self.reason(done) is None
