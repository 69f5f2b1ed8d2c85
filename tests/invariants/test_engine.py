"""gateway.invariants.engine, fed transcripts the way the proxy feeds it.

Each test is a short transcript: client requests, unary worker answers and SSE events go through
:class:`~tests.invariants.playbook.Playbook`, which stores ``outcome.record`` and carries
``outcome.stream`` like the proxy. Expected values come from docs/field-cases.md (F01, F03,
F04, F05, F06, the unknown-state policy) and docs/protocol.md, not from the engine.
"""

from __future__ import annotations

import pytest

from gateway.a2a.states import TaskState
from gateway.invariants import engine
from gateway.invariants.model import (
    Action,
    ArtifactRecord,
    Mode,
    StreamState,
    TaskRecord,
)
from tests.invariants.payloads import (
    artifact_update,
    status_update,
    task,
    text_parts,
    v03_artifact_update,
    v03_status_update,
    v03_task,
)
from tests.invariants.playbook import UPSTREAM, Playbook, exchange, kinds

INVALID_AGENT_RESPONSE = -32006
UNSUPPORTED_OPERATION = -32004
TASK_NOT_CANCELABLE = -32002

NEW_STREAM = {"message": {"messageId": "m-0", "role": "ROLE_USER", "parts": [{"text": "go"}]}}
NEW_STREAM_V03 = {"message": {"kind": "message", "messageId": "m-0", "role": "user",
                              "parts": [{"kind": "text", "text": "go"}]}}


def follow_up(tid: str, ctx: str) -> dict:
    return {"message": {"messageId": "m-9", "role": "ROLE_USER", "taskId": tid, "contextId": ctx,
                        "parts": [{"text": "one more thing"}]}}


def follow_up_v03(tid: str, ctx: str) -> dict:
    return {"message": {"kind": "message", "messageId": "m-9", "role": "user", "taskId": tid,
                        "contextId": ctx, "parts": [{"kind": "text", "text": "one more thing"}]}}


@pytest.fixture
def book() -> Playbook:
    return Playbook()


# --------------------------------------------------------------------------------------------
# F01 — the input-required spelling family
# --------------------------------------------------------------------------------------------

F01_QUESTION = {"messageId": "m-1", "role": "ROLE_AGENT", "parts": [{"text": "Which date?"}]}


class TestF01Normalization:
    @pytest.mark.parametrize(("raw", "family"), [
        ("input_required", "underscore"),
        ("input-required", "v03_kebab"),
        ("INPUT_REQUIRED", "case_variant"),
        ("Input-Required", "case_variant"),
    ])
    def test_f01_v10_client_gets_the_protojson_name(self, book, raw, family):
        """A v1.0 GetTask answer in any alias reaches the client as TASK_STATE_INPUT_REQUIRED."""
        answer = task("t-1", "c-1", raw)
        answer["status"]["message"] = F01_QUESTION
        out = book.answer(exchange("GetTask", {"id": "t-1"}), answer)
        assert out.action is Action.FORWARD
        assert out.result["status"] == {"state": "TASK_STATE_INPUT_REQUIRED",
                                        "message": F01_QUESTION}
        assert out.result["id"] == "t-1" and out.result["contextId"] == "c-1"
        assert kinds(out.findings, "normalization") == [family]
        assert kinds(out.findings, "divergence") == []

    def test_f01_canonical_v10_spelling_is_not_counted_and_not_rewritten(self, book):
        answer = task("t-1", "c-1", "TASK_STATE_INPUT_REQUIRED")
        out = book.answer(exchange("GetTask", {"id": "t-1"}), answer)
        assert out.action is Action.FORWARD
        assert out.result is answer
        assert out.findings == []

    @pytest.mark.parametrize(("raw", "family"), [
        ("input_required", "underscore"),
        ("INPUT_REQUIRED", "case_variant"),
        ("Input-Required", "case_variant"),
        ("TASK_STATE_INPUT_REQUIRED", "v10_enum"),
        ("input-required", None),
    ])
    def test_f01_v03_client_gets_kebab_case_with_kind_task(self, book, raw, family):
        answer = v03_task("t-1", "c-1", raw)
        out = book.answer(exchange("tasks/get", {"id": "t-1"}), answer)
        assert out.action is Action.FORWARD
        assert out.result["kind"] == "task"
        assert out.result["status"]["state"] == "input-required"
        assert kinds(out.findings, "normalization") == ([family] if family else [])

    @pytest.mark.parametrize(("raw", "family"), [
        ("Working", "case_variant"), ("working", "v03_kebab"), ("TASK_STATE_WORKING", None)])
    def test_f01_working_family_for_a_v10_client(self, book, raw, family):
        out = book.answer(exchange("GetTask", {"id": "t-1"}), task("t-1", "c-1", raw))
        assert out.result["status"]["state"] == "TASK_STATE_WORKING"
        assert kinds(out.findings, "normalization") == ([family] if family else [])

    def test_f01_send_message_answer_is_respelled_inside_its_task_wrapper(self, book):
        """SendMessage answers {"task": …}; the wrapper survives the rewrite."""
        out = book.answer(exchange("SendMessage", NEW_STREAM),
                          {"task": task("t-1", "c-1", "input-required")})
        assert out.result == {"task": task("t-1", "c-1", "TASK_STATE_INPUT_REQUIRED")}

    def test_f01_stream_status_update_is_respelled(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-1", "c-1", "TASK_STATE_SUBMITTED")})
        out = stream.event(status_update("t-1", "c-1", "input_required"))
        assert out.action is Action.FORWARD
        assert out.result == status_update("t-1", "c-1", "TASK_STATE_INPUT_REQUIRED")
        assert kinds(out.findings, "normalization") == ["underscore"]

    @pytest.mark.parametrize("raw", ["input_required", "input-required", "INPUT_REQUIRED",
                                     "Input-Required", "TASK_STATE_INPUT_REQUIRED"])
    def test_f01_follow_up_send_message_is_forwarded(self, book, raw):
        """The state stays non-terminal, so a follow-up SendMessage for t-1 is not rejected."""
        book.answer(exchange("GetTask", {"id": "t-1"}), task("t-1", "c-1", raw))
        assert book.record("t-1").state is TaskState.INPUT_REQUIRED
        out = book.request(exchange("SendMessage", follow_up("t-1", "c-1")))
        assert out.action is Action.FORWARD
        assert out.findings == []

    def test_f01_double_l_cancel_is_recorded_as_canceled(self, book):
        out = book.answer(exchange("CancelTask", {"id": "t-1"}),
                          task("t-1", "c-1", "TASK_STATE_CANCELLED"))
        assert out.result["status"]["state"] == "TASK_STATE_CANCELED"
        assert kinds(out.findings, "normalization") == ["v03_grpc"]
        assert book.record("t-1").state is TaskState.CANCELED


# --------------------------------------------------------------------------------------------
# F03 — unspecified is not terminal; the unknown-state policy
# --------------------------------------------------------------------------------------------


class TestF03Unspecified:
    @pytest.mark.parametrize("first_state", [None, "TASK_STATE_UNSPECIFIED", "unknown"])
    def test_f03_all_three_events_are_delivered_and_only_the_last_closes(self, book, first_state):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        outs = [
            stream.event({"task": task("t-3", "c-3", first_state)}),
            stream.event(status_update("t-3", "c-3", "TASK_STATE_WORKING")),
            stream.event(status_update("t-3", "c-3", "TASK_STATE_COMPLETED")),
        ]
        assert [o.action for o in outs] == [Action.FORWARD] * 3
        assert [o.close for o in outs] == [False, False, True]
        assert book.record("t-3").state is TaskState.COMPLETED

    def test_f03_empty_status_is_forwarded_as_sent_to_a_v10_client(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        first = {"task": task("t-3", "c-3")}
        out = stream.event(first)
        assert out.result == {"task": {"id": "t-3", "contextId": "c-3", "status": {}}}
        assert out.findings == []
        assert book.record("t-3").state is TaskState.UNSPECIFIED

    def test_f03_unspecified_never_erases_a_known_state(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-3", "c-3", "TASK_STATE_WORKING")})
        out = stream.event(status_update("t-3", "c-3", None))
        assert out.action is Action.FORWARD
        assert not out.close
        assert book.record("t-3").state is TaskState.WORKING

    def test_f03_unspecified_snapshot_does_not_unseal_a_terminal_task(self, book):
        book.answer(exchange("GetTask", {"id": "t-3"}), task("t-3", "c-3", "TASK_STATE_COMPLETED"))
        book.answer(exchange("GetTask", {"id": "t-3"}), task("t-3", "c-3"))
        assert book.record("t-3").state is TaskState.COMPLETED

    def test_f03_unspecified_task_does_not_block_a_follow_up(self, book):
        book.answer(exchange("GetTask", {"id": "t-3"}), task("t-3", "c-3"))
        out = book.request(exchange("SendMessage", follow_up("t-3", "c-3")))
        assert out.action is Action.FORWARD

    def test_f03_v03_client_sees_unknown(self, book):
        stream = book.open(exchange("message/stream", NEW_STREAM_V03))
        first = stream.event(v03_task("t-3", "c-3"))
        assert first.action is Action.FORWARD
        assert first.result["status"]["state"] == "unknown"
        assert first.result["kind"] == "task"
        assert not first.close
        working = stream.event(v03_status_update("t-3", "c-3", "working", final=False))
        done = stream.event(v03_status_update("t-3", "c-3", "completed", final=True))
        assert (working.action, working.close) == (Action.FORWARD, False)
        assert (done.action, done.close) == (Action.FORWARD, True)


class TestWhereAStreamCloses:
    """docs/field-cases.md: the cases only require closing on terminal states (our choice)."""

    @pytest.mark.parametrize("state", ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING",
                                       "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"])
    def test_a_non_terminal_state_keeps_the_stream_open(self, book, state):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        out = stream.event({"task": task("t-3", "c-3", state)})
        assert (out.action, out.close) == (Action.FORWARD, False)
        assert not stream.state.terminal

    @pytest.mark.parametrize("state", ["TASK_STATE_COMPLETED", "TASK_STATE_FAILED",
                                       "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
                                       "TASK_STATE_CANCELLED"])
    def test_a_terminal_state_closes_the_stream(self, book, state):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-3", "c-3", "TASK_STATE_WORKING")})
        out = stream.event(status_update("t-3", "c-3", state))
        assert (out.action, out.close) == (Action.FORWARD, True)
        assert stream.state.terminal

    def test_a_unary_answer_never_asks_to_close(self, book):
        out = book.answer(exchange("GetTask", {"id": "t-3"}), task("t-3", "c-3", "completed"))
        assert out.close is False
        assert out.stream is None


class TestUnknownStatePolicy:
    @pytest.mark.parametrize("raw", ["paused", 3, {"state": "x"}])
    def test_unknown_state_in_a_unary_answer_is_refused_in_enforce_mode(self, book, raw):
        answer = task("t-3", "c-3")
        answer["status"]["state"] = raw
        out = book.answer(exchange("GetTask", {"id": "t-3"}), answer)
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == INVALID_AGENT_RESPONSE
        assert kinds(out.findings, "divergence") == ["unknown_state"]
        assert book.record("t-3") is None  # nothing guessed into the ledger

    def test_f03_unknown_first_event_ends_the_stream_with_an_error(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        out = stream.event({"task": task("t-3", "c-3", "paused")})
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == INVALID_AGENT_RESPONSE
        assert out.close
        assert kinds(out.findings, "divergence") == ["unknown_state"]

    def test_unknown_state_is_forwarded_unchanged_in_observe_mode(self, book):
        answer = task("t-3", "c-3", "paused")
        out = book.answer(exchange("GetTask", {"id": "t-3"}, mode=Mode.OBSERVE), answer)
        assert out.action is Action.FORWARD
        assert out.result is answer
        assert out.error is None
        assert kinds(out.findings, "divergence") == ["unknown_state"]

    def test_unknown_state_in_observe_mode_does_not_close_a_stream(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM, mode=Mode.OBSERVE))
        event = {"task": task("t-3", "c-3", "paused")}
        out = stream.event(event)
        assert (out.action, out.result, out.close) == (Action.FORWARD, event, False)
        assert kinds(out.findings, "divergence") == ["unknown_state"]

    def test_unknown_state_in_a_v03_answer_is_refused(self, book):
        out = book.answer(exchange("tasks/get", {"id": "t-3"}), v03_task("t-3", "c-3", "paused"))
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == INVALID_AGENT_RESPONSE

    def test_unknown_state_error_message_names_task_and_value(self, book):
        out = book.answer(exchange("GetTask", {"id": "t-3"}), task("t-3", "c-3", "paused"))
        assert out.error is not None
        assert "t-3" in out.error[1] and "paused" in out.error[1]


# --------------------------------------------------------------------------------------------
# F04 — Completed overwrites Canceled and output keeps coming
# --------------------------------------------------------------------------------------------


class F04:
    """The F04 transcript: an open stream for t-4 with one early artifact, then CancelTask."""

    def __init__(self) -> None:
        self.book = Playbook()
        self.stream = self.book.open(exchange("SendStreamingMessage", NEW_STREAM))
        self.stream.event({"task": task("t-4", "c-4", "TASK_STATE_WORKING")})
        self.stream.event(artifact_update("t-4", "c-4", "a-3", ["early output"], last=True))
        self.cancel_ex = exchange("CancelTask", {"id": "t-4"})
        self.admission = self.book.request(self.cancel_ex)
        self.cancel = self.book.answer(self.cancel_ex, task("t-4", "c-4", "TASK_STATE_CANCELED"))

    def stream_tail(self):
        return [
            self.stream.event(status_update("t-4", "c-4", "TASK_STATE_CANCELED")),
            self.stream.event(artifact_update("t-4", "c-4", "a-4", ["late output"])),
            self.stream.event(status_update("t-4", "c-4", "TASK_STATE_COMPLETED")),
        ]

    def later_get(self, method: str = "GetTask", result=None):
        if result is None:
            result = task("t-4", "c-4", "TASK_STATE_COMPLETED", artifacts=[
                {"artifactId": "a-3", "parts": text_parts(["early output"])},
                {"artifactId": "a-4", "parts": text_parts(["late output"])},
            ])
        return self.book.answer(exchange(method, {"id": "t-4"}), result)


class TestF04CancelThenCompleted:
    def test_f04_cancel_answer_says_canceled_and_is_recorded(self):
        f = F04()
        assert f.admission.action is Action.FORWARD
        assert f.cancel.action is Action.FORWARD
        assert f.cancel.result["status"]["state"] == "TASK_STATE_CANCELED"
        assert f.book.record("t-4").state is TaskState.CANCELED

    def test_f04_stream_delivers_canceled_and_then_closes(self):
        canceled, _, _ = F04().stream_tail()
        assert canceled.action is Action.FORWARD
        assert canceled.result == status_update("t-4", "c-4", "TASK_STATE_CANCELED")
        assert canceled.close

    def test_f04_late_artifact_is_not_delivered(self):
        _, artifact, _ = F04().stream_tail()
        assert artifact.action is Action.DROP
        assert sorted(kinds(artifact.findings)) == ["artifact_after_terminal",
                                                    "event_after_terminal"]

    def test_f04_late_completed_is_not_delivered_and_counts_a_regression(self):
        f = F04()
        _, _, completed = f.stream_tail()
        assert completed.action is Action.DROP
        assert sorted(kinds(completed.findings)) == ["event_after_terminal", "terminal_regression"]
        record = f.book.record("t-4")
        assert record.state is TaskState.CANCELED
        assert record.poisoned

    def test_f04_stream_counts_two_events_after_terminal_and_one_regression(self):
        found = [k for o in F04().stream_tail() for k in kinds(o.findings)]
        assert found.count("event_after_terminal") == 2
        assert found.count("terminal_regression") == 1

    def test_f04_late_artifact_is_not_merged_into_the_record(self):
        f = F04()
        f.stream_tail()
        assert set(f.book.record("t-4").artifacts) == {"a-3"}

    def test_f04_later_get_task_keeps_reporting_canceled_without_the_late_artifact(self):
        f = F04()
        f.stream_tail()
        out = f.later_get()
        assert out.action is Action.FORWARD
        assert out.result["status"]["state"] == "TASK_STATE_CANCELED"
        assert [a["artifactId"] for a in out.result["artifacts"]] == ["a-3"]
        assert out.result["artifacts"][0]["parts"] == text_parts(["early output"])
        assert engine.CORRECTED_KEY in out.result["metadata"]
        # the stream already counted a-4 and poisoned the task: one lie, one count
        assert "artifact_after_terminal" not in kinds(out.findings, "divergence")
        assert f.book.record("t-4").state is TaskState.CANCELED

    def test_f04_corrected_snapshot_keeps_the_worker_metadata(self):
        f = F04()
        f.stream_tail()
        answer = task("t-4", "c-4", "TASK_STATE_COMPLETED", metadata={"trace": "abc"})
        out = f.later_get(result=answer)
        assert out.result["metadata"]["trace"] == "abc"
        assert engine.CORRECTED_KEY in out.result["metadata"]

    def test_f04_every_later_read_is_corrected(self):
        f = F04()
        f.stream_tail()
        f.later_get()
        again = f.later_get()
        assert again.result["status"]["state"] == "TASK_STATE_CANCELED"
        assert [a["artifactId"] for a in again.result["artifacts"]] == ["a-3"]

    def test_f04_v03_client_reads_canceled(self):
        f = F04()
        f.stream_tail()
        out = f.later_get("tasks/get", v03_task("t-4", "c-4", "completed"))
        assert out.result["status"]["state"] == "canceled"
        assert out.result["kind"] == "task"

    def test_f04_get_task_without_a_stream_is_corrected_too(self):
        """Even if the stream never showed the regression, GetTask may not move CANCELED."""
        f = F04()
        out = f.later_get()
        assert out.result["status"]["state"] == "TASK_STATE_CANCELED"
        assert "terminal_regression" in kinds(out.findings)
        assert [a["artifactId"] for a in out.result["artifacts"]] == ["a-3"]

    def test_f04_observe_mode_forwards_late_events_but_keeps_canceled(self):
        book = Playbook()
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM, mode=Mode.OBSERVE))
        stream.event({"task": task("t-4", "c-4", "TASK_STATE_WORKING")})
        book.answer(exchange("CancelTask", {"id": "t-4"}, mode=Mode.OBSERVE),
                    task("t-4", "c-4", "TASK_STATE_CANCELED"))
        stream.event(status_update("t-4", "c-4", "TASK_STATE_CANCELED"))
        late = status_update("t-4", "c-4", "TASK_STATE_COMPLETED")
        out = stream.event(late)
        assert (out.action, out.result, out.close) == (Action.FORWARD, late, False)
        assert "terminal_regression" in kinds(out.findings)
        assert book.record("t-4").state is TaskState.CANCELED
    def test_f04_variant_late_artifact_stays_out_of_get_task_without_a_regression(self):
        f = F04()
        f.stream.event(status_update("t-4", "c-4", "TASK_STATE_CANCELED"))
        f.stream.event(artifact_update("t-4", "c-4", "a-4", ["late output"]))
        out = f.later_get(result=task("t-4", "c-4", "TASK_STATE_CANCELED", artifacts=[
            {"artifactId": "a-3", "parts": text_parts(["early output"])},
            {"artifactId": "a-4", "parts": text_parts(["late output"])},
        ]))
        assert [a["artifactId"] for a in out.result["artifacts"]] == ["a-3"]
    def test_f04_the_whole_case_counts_one_regression(self):
        f = F04()
        outs = f.stream_tail() + [f.later_get()]
        found = [k for o in outs for k in kinds(o.findings)]
        assert found.count("terminal_regression") == 1
        assert found.count("event_after_terminal") == 2


# --------------------------------------------------------------------------------------------
# F05 — operations on a terminal task
# --------------------------------------------------------------------------------------------


def completed_t5(book: Playbook) -> None:
    book.answer(exchange("GetTask", {"id": "t-5"}), task("t-5", "c-5", "TASK_STATE_COMPLETED"))


class TestF05TerminalTask:
    @pytest.mark.parametrize(("method", "params"), [
        ("SendMessage", follow_up("t-5", "c-5")),
        ("SendStreamingMessage", follow_up("t-5", "c-5")),
        ("SubscribeToTask", {"id": "t-5"}),
        ("message/send", follow_up_v03("t-5", "c-5")),
        ("message/stream", follow_up_v03("t-5", "c-5")),
        ("tasks/resubscribe", {"id": "t-5"}),
    ])
    def test_f05_message_and_subscribe_on_a_terminal_task_are_refused_with_32004(
            self, book, method, params):
        completed_t5(book)
        out = book.request(exchange(method, params))
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == UNSUPPORTED_OPERATION
        assert "task t-5 is terminal" in out.error[1]  # F05's reply text
        assert [(f.category, f.kind) for f in out.findings] == [("rejection", "terminal_task")]

    @pytest.mark.parametrize("method", ["CancelTask", "tasks/cancel"])
    def test_f05_cancel_of_a_terminal_task_is_refused_with_32002(self, book, method):
        """F15 last row / docs/protocol.md §2: TaskNotCancelable, not UnsupportedOperation."""
        completed_t5(book)
        out = book.request(exchange(method, {"id": "t-5"}))
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == TASK_NOT_CANCELABLE
        assert "task t-5 is terminal" in out.error[1]

    @pytest.mark.parametrize("method", ["SendMessage", "CancelTask", "SubscribeToTask"])
    def test_f05_observe_mode_forwards_but_counts(self, book, method):
        completed_t5(book)
        params = follow_up("t-5", "c-5") if method == "SendMessage" else {"id": "t-5"}
        out = book.request(exchange(method, params, mode=Mode.OBSERVE))
        assert out.action is Action.FORWARD
        assert out.error is None
        assert kinds(out.findings, "rejection") == ["terminal_task"]

    @pytest.mark.parametrize("method", ["GetTask", "tasks/get"])
    def test_f05_reading_a_terminal_task_is_allowed(self, book, method):
        completed_t5(book)
        out = book.request(exchange(method, {"id": "t-5"}))
        assert out.action is Action.FORWARD
        assert out.findings == []

    def test_f05_a_new_task_in_the_same_context_is_allowed(self, book):
        """Follow-ups start a new task (no taskId) in the same contextId (docs/protocol.md §2)."""
        completed_t5(book)
        params = {"message": {"messageId": "m-2", "role": "ROLE_USER", "contextId": "c-5",
                              "referenceTaskIds": ["t-5"], "parts": [{"text": "again"}]}}
        assert book.request(exchange("SendMessage", params)).action is Action.FORWARD

    @pytest.mark.parametrize("state", ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED",
                                       "TASK_STATE_AUTH_REQUIRED", None])
    def test_f05_a_live_task_admits_every_action(self, book, state):
        book.answer(exchange("GetTask", {"id": "t-5"}), task("t-5", "c-5", state))
        for method, params in [("SendMessage", follow_up("t-5", "c-5")),
                               ("CancelTask", {"id": "t-5"}),
                               ("SubscribeToTask", {"id": "t-5"})]:
            assert book.request(exchange(method, params)).action is Action.FORWARD

    def test_f05_an_unknown_task_is_forwarded(self, book):
        assert book.request(exchange("SendMessage", follow_up("t-x", "c-x"))).action \
            is Action.FORWARD

    @pytest.mark.parametrize("state", ["TASK_STATE_FAILED", "TASK_STATE_CANCELED",
                                       "TASK_STATE_REJECTED"])
    def test_f05_every_terminal_state_refuses_messages(self, book, state):
        book.answer(exchange("GetTask", {"id": "t-5"}), task("t-5", "c-5", state))
        out = book.request(exchange("SendMessage", follow_up("t-5", "c-5")))
        assert out.error is not None and out.error[0] == UNSUPPORTED_OPERATION

    def test_f05_e_reused_id_in_a_new_stream_is_refused_with_32006(self, book):
        completed_t5(book)
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        out = stream.event({"task": task("t-5", "c-5", "TASK_STATE_WORKING")})
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == INVALID_AGENT_RESPONSE
        assert out.close
        assert kinds(out.findings, "divergence") == ["reused_task_id"]

    def test_f05_e_reused_id_does_not_reopen_or_merge(self, book):
        completed_t5(book)
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-5", "c-5", "TASK_STATE_WORKING")})
        late = stream.event(artifact_update("t-5", "c-5", "a-50", ["new run"]))
        assert late.action is not Action.FORWARD
        record = book.record("t-5")
        assert record.state is TaskState.COMPLETED
        assert "a-50" not in record.artifacts

    def test_f05_e_reused_id_in_a_unary_answer_is_refused(self, book):
        completed_t5(book)
        out = book.answer(exchange("SendMessage", NEW_STREAM),
                          {"task": task("t-5", "c-5", "TASK_STATE_WORKING")})
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == INVALID_AGENT_RESPONSE
        assert kinds(out.findings, "divergence") == ["reused_task_id"]

    def test_f05_e_reused_id_in_observe_mode_is_forwarded_and_counted(self, book):
        completed_t5(book)
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM, mode=Mode.OBSERVE))
        event = {"task": task("t-5", "c-5", "TASK_STATE_WORKING")}
        out = stream.event(event)
        assert (out.action, out.result, out.close) == (Action.FORWARD, event, False)
        assert kinds(out.findings, "divergence") == ["reused_task_id"]


def ex_for(method: str, task_id: str | None):
    if method in ("SendMessage", "SendStreamingMessage", "message/send", "message/stream"):
        params = follow_up(task_id, "c") if task_id else NEW_STREAM
    else:
        params = {"id": task_id} if task_id else {}
    return exchange(method, params)


class TestWantsTerminalProbe:
    """F05 (c), F15: which worker errors may hide a terminal task and deserve a GetTask probe."""

    @pytest.mark.parametrize(("method", "code", "expected"), [
        # cancel: anything but -32002 among the suspect codes
        ("CancelTask", -32004, True),
        ("CancelTask", -32603, True),
        ("CancelTask", -32602, True),
        ("CancelTask", -32001, True),
        ("tasks/cancel", -32004, True),
        ("CancelTask", -32002, False),
        # messages: F05 (c) -32602 / -32001; -32004 is already right
        ("SendMessage", -32602, True),
        ("SendMessage", -32001, True),
        ("SendMessage", -32603, True),
        ("message/send", -32602, True),
        ("SendStreamingMessage", -32602, True),
        ("SendMessage", -32004, False),
        # subscribe: F05 (c) -32001
        ("SubscribeToTask", -32001, True),
        ("tasks/resubscribe", -32001, True),
        ("SubscribeToTask", -32004, False),
        # codes that say nothing about terminal state
        ("SendMessage", -32006, False),
        ("SendMessage", -32009, False),
        ("SendMessage", -32700, False),
        ("SendMessage", "-32602", False),
        ("SendMessage", None, False),
        # not a task action
        ("GetTask", -32001, False),
        ("tasks/get", -32602, False),
        ("ListTasks", -32603, False),
    ])
    def test_probe_truth_table(self, method, code, expected):
        assert engine.wants_terminal_probe(ex_for(method, "t-5"), code) is expected

    @pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
    def test_no_probe_for_a_request_that_names_no_task(self, method):
        assert engine.wants_terminal_probe(ex_for(method, None), -32602) is False

    def test_terminal_error_spells_the_state_for_the_client(self):
        record = TaskRecord(UPSTREAM, "t-5", "c-5", TaskState.COMPLETED, 1.0)
        code, message = engine.terminal_error(ex_for("tasks/cancel", "t-5"), record)
        assert code == TASK_NOT_CANCELABLE
        assert "completed" in message and "TASK_STATE_" not in message
        code, message = engine.terminal_error(ex_for("SendMessage", "t-5"), record)
        assert code == UNSUPPORTED_OPERATION
        assert "TASK_STATE_COMPLETED" in message and "t-5" in message


# --------------------------------------------------------------------------------------------
# F06 — chunks after lastChunk, and what append means
# --------------------------------------------------------------------------------------------

F06_EVENTS = [
    artifact_update("t-6", "c-6", "a-6", ["Hel"]),
    artifact_update("t-6", "c-6", "a-6", ["lo"], append=True, last=True),
    artifact_update("t-6", "c-6", "a-6", ["!!"], append=True),
    artifact_update("t-6", "c-6", "a-7", ["x"], append=True),
    status_update("t-6", "c-6", "TASK_STATE_COMPLETED"),
]
F06_EVENTS_V03 = [
    v03_artifact_update("t-6", "c-6", "a-6", ["Hel"]),
    v03_artifact_update("t-6", "c-6", "a-6", ["lo"], append=True, last=True),
    v03_artifact_update("t-6", "c-6", "a-6", ["!!"], append=True),
    v03_artifact_update("t-6", "c-6", "a-7", ["x"], append=True),
    v03_status_update("t-6", "c-6", "completed", final=True),
]


def run_f06(book: Playbook, events=F06_EVENTS, method="SendStreamingMessage"):
    stream = book.open(exchange(method, NEW_STREAM))
    return [stream.event(e) for e in events]


class TestF06Artifacts:
    def test_f06_events_1_2_4_5_are_forwarded_and_3_is_dropped(self, book):
        outs = run_f06(book)
        assert [o.action for o in outs] == [Action.FORWARD, Action.FORWARD, Action.DROP,
                                            Action.FORWARD, Action.FORWARD]
        assert [o.result for o in outs if o.action is Action.FORWARD] == \
            [F06_EVENTS[i] for i in (0, 1, 3, 4)]
        assert kinds(outs[2].findings, "divergence") == ["artifact_after_last_chunk"]
        assert [o.close for o in outs] == [False, False, False, False, True]

    def test_f06_record_holds_two_artifacts_sealed_a6_with_two_parts(self, book):
        run_f06(book)
        arts = book.record("t-6").artifacts
        assert set(arts) == {"a-6", "a-7"}
        assert (arts["a-6"].sealed, arts["a-6"].parts) == (True, 2)
        assert arts["a-6"].digest is not None  # sealed by the stream that delivered all of it
        assert arts["a-7"].parts == 1
        assert not arts["a-7"].sealed

    def test_f06_v03_client_sees_the_same_sequence(self, book):
        outs = run_f06(book, F06_EVENTS_V03, "message/stream")
        assert [o.action for o in outs] == [Action.FORWARD, Action.FORWARD, Action.DROP,
                                            Action.FORWARD, Action.FORWARD]
        assert outs[3].result["kind"] == "artifact-update"
        assert outs[3].result["artifact"]["parts"] == [{"kind": "text", "text": "x"}]
    def test_f06_v03_artifact_updates_are_forwarded_unchanged(self, book):
        stream = book.open(exchange("message/stream", NEW_STREAM_V03))
        event = v03_artifact_update("t-6", "c-6", "a-6", ["Hel"])
        out = stream.event(event)
        assert out.action is Action.FORWARD
        assert out.result == event
        assert "status" not in out.result

    def test_f06_v10_artifact_updates_are_forwarded_unchanged(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        event = artifact_update("t-6", "c-6", "a-6", ["Hel"])
        assert stream.event(event).result == event

    def test_f06_append_false_on_an_unsealed_id_replaces_it_whole(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event(artifact_update("t-6", "c-6", "a-8", ["one", "two"]))
        stream.event(artifact_update("t-6", "c-6", "a-8", ["three"], append=True))
        out = stream.event(artifact_update("t-6", "c-6", "a-8", ["fresh"], append=False))
        assert out.action is Action.FORWARD
        replaced = book.record("t-6").artifacts["a-8"]
        assert (replaced.sealed, replaced.parts) == (False, 1)

    def test_f06_append_true_adds_parts(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event(artifact_update("t-6", "c-6", "a-8", ["one"]))
        stream.event(artifact_update("t-6", "c-6", "a-8", ["two", "three"], append=True))
        assert book.record("t-6").artifacts["a-8"].parts == 3

    def test_f06_replace_after_last_chunk_is_dropped_too(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event(artifact_update("t-6", "c-6", "a-8", ["done"], last=True))
        out = stream.event(artifact_update("t-6", "c-6", "a-8", ["redo"], append=False))
        assert out.action is Action.DROP
        assert kinds(out.findings, "divergence") == ["artifact_after_last_chunk"]

    def test_f06_later_get_task_cuts_a_sealed_artifact_back(self, book):
        """The gateway's GetTask answer holds a-6 with exactly [Hel, lo] and a-7 with [x]."""
        run_f06(book)
        snapshot = task("t-6", "c-6", "TASK_STATE_COMPLETED", artifacts=[
            {"artifactId": "a-6", "parts": text_parts(["Hel", "lo", "!!"])},
            {"artifactId": "a-7", "parts": text_parts(["x"])},
        ])
        out = book.answer(exchange("GetTask", {"id": "t-6"}), snapshot)
        assert out.action is Action.FORWARD
        assert out.result["artifacts"] == [
            {"artifactId": "a-6", "parts": text_parts(["Hel", "lo"])},
            {"artifactId": "a-7", "parts": text_parts(["x"])},
        ]
        assert kinds(out.findings, "divergence") == ["artifact_after_last_chunk"]

    def test_f06_get_task_before_completion_cuts_a_sealed_artifact_back(self, book):
        run_f06(book, F06_EVENTS[:4])
        snapshot = task("t-6", "c-6", "TASK_STATE_WORKING", artifacts=[
            {"artifactId": "a-6", "parts": text_parts(["Hel", "lo", "!!"])}])
        out = book.answer(exchange("GetTask", {"id": "t-6"}), snapshot)
        assert out.result["artifacts"] == [
            {"artifactId": "a-6", "parts": text_parts(["Hel", "lo"])}]
        sealed = book.record("t-6").artifacts["a-6"]
        assert (sealed.sealed, sealed.parts) == (True, 2)

    def test_f06_two_artifacts_never_share_an_id(self, book):
        snapshot = task("t-6", "c-6", "TASK_STATE_WORKING", artifacts=[
            {"artifactId": "a-9", "parts": text_parts(["Hel"])},
            {"artifactId": "a-9", "parts": text_parts(["lo"])},
        ])
        out = book.answer(exchange("GetTask", {"id": "t-6"}), snapshot)
        assert out.result["artifacts"] == [
            {"artifactId": "a-9", "parts": text_parts(["Hel", "lo"])}]

    def test_f06_a_snapshot_that_agrees_is_forwarded_as_is(self, book):
        run_f06(book)
        snapshot = task("t-6", "c-6", "TASK_STATE_COMPLETED", artifacts=[
            {"artifactId": "a-6", "parts": text_parts(["Hel", "lo"])},
            {"artifactId": "a-7", "parts": text_parts(["x"])},
        ])
        out = book.answer(exchange("GetTask", {"id": "t-6"}), snapshot)
        assert out.result is snapshot
        assert out.findings == []


# --------------------------------------------------------------------------------------------
# Identity: a payload for another task or context
# --------------------------------------------------------------------------------------------


class TestIdentity:
    def test_event_for_another_task_on_a_bound_stream_is_dropped(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-1", "c-1", "TASK_STATE_WORKING")})
        out = stream.event(status_update("t-2", "c-1", "TASK_STATE_COMPLETED"))
        assert out.action is Action.DROP
        assert not out.close
        assert kinds(out.findings, "divergence") == ["task_id_mismatch"]
        assert book.record("t-2") is None
        assert book.record("t-1").state is TaskState.WORKING

    @pytest.mark.parametrize("task_id", [None, 9, ""])
    def test_stream_update_without_a_task_id_is_refused_and_ends_the_stream(self, book, task_id):
        """It could not be recorded: never delivered (a terminal state the ledger would not
        hold), refused with -32006, the stream closed."""
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-1", "c-1", "TASK_STATE_WORKING")})
        update = status_update("t-1", "c-1", "TASK_STATE_COMPLETED")
        update["statusUpdate"]["taskId"] = task_id
        out = stream.event(update)
        assert (out.action, out.close) == (Action.REJECT, True)
        assert out.error is not None and out.error[0] == INVALID_AGENT_RESPONSE
        assert kinds(out.findings, "divergence") == ["task_id_mismatch"]
        assert book.record("t-1").state is TaskState.WORKING

    def test_subscribe_stream_is_bound_to_the_requested_task(self, book):
        stream = book.open(exchange("SubscribeToTask", {"id": "t-1"}))
        out = stream.event({"task": task("t-2", "c-2", "TASK_STATE_WORKING")})
        assert out.action is Action.DROP
        assert kinds(out.findings, "divergence") == ["task_id_mismatch"]

    def test_event_for_another_context_on_a_bound_stream_is_dropped(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-1", "c-1", "TASK_STATE_WORKING")})
        out = stream.event(status_update("t-1", "c-9", "TASK_STATE_COMPLETED"))
        assert out.action is Action.DROP
        assert kinds(out.findings, "divergence") == ["context_id_mismatch"]
        assert book.record("t-1").state is TaskState.WORKING

    def test_get_task_answer_for_another_task_is_refused(self, book):
        out = book.answer(exchange("GetTask", {"id": "t-1"}),
                          task("t-2", "c-2", "TASK_STATE_COMPLETED"))
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == INVALID_AGENT_RESPONSE
        assert kinds(out.findings, "divergence") == ["task_id_mismatch"]
        assert book.record("t-2") is None

    def test_get_task_answer_with_another_context_is_refused(self, book):
        book.answer(exchange("GetTask", {"id": "t-1"}), task("t-1", "c-1", "TASK_STATE_WORKING"))
        out = book.answer(exchange("GetTask", {"id": "t-1"}),
                          task("t-1", "c-9", "TASK_STATE_COMPLETED"))
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == INVALID_AGENT_RESPONSE
        assert kinds(out.findings, "divergence") == ["context_id_mismatch"]
        assert book.record("t-1").state is TaskState.WORKING

    def test_identity_mismatch_in_observe_mode_is_forwarded_and_counted(self, book):
        answer = task("t-2", "c-2", "TASK_STATE_WORKING")
        out = book.answer(exchange("GetTask", {"id": "t-1"}, mode=Mode.OBSERVE), answer)
        assert (out.action, out.result, out.error) == (Action.FORWARD, answer, None)
        assert kinds(out.findings, "divergence") == ["task_id_mismatch"]


# --------------------------------------------------------------------------------------------
# Concurrent streams of one task (SPEC §3.5.2)
# --------------------------------------------------------------------------------------------

T1, T2, T3 = "2026-11-29T20:45:01.000Z", "2026-11-29T20:45:02.000Z", "2026-11-29T20:45:03.000Z"


class TestConcurrentStreams:
    def _two_streams(self, book: Playbook):
        first = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        first.event({"task": task("t-c", "c-c", "TASK_STATE_WORKING")})
        second = book.open(exchange("SubscribeToTask", {"id": "t-c"}))
        second.event({"task": task("t-c", "c-c", "TASK_STATE_WORKING")})
        first.event(status_update("t-c", "c-c", "TASK_STATE_COMPLETED", timestamp=T3))
        return second

    def test_an_earlier_event_on_a_concurrent_stream_is_not_a_regression(self, book):
        second = self._two_streams(book)
        out = second.event(status_update("t-c", "c-c", "TASK_STATE_WORKING", timestamp=T2))
        assert out.action is Action.FORWARD
        assert not out.close
        assert "terminal_regression" not in kinds(out.findings)
        assert not book.record("t-c").poisoned

    def test_the_concurrent_stream_then_delivers_the_terminal_state_and_closes(self, book):
        second = self._two_streams(book)
        second.event(status_update("t-c", "c-c", "TASK_STATE_WORKING", timestamp=T2))
        out = second.event(status_update("t-c", "c-c", "TASK_STATE_COMPLETED", timestamp=T3))
        assert (out.action, out.close) == (Action.FORWARD, True)

    def test_a_later_contradicting_event_is_a_regression(self, book):
        second = self._two_streams(book)
        out = second.event(status_update("t-c", "c-c", "TASK_STATE_FAILED",
                                         timestamp="2026-11-29T20:45:09.000Z"))
        # this stream has not seen the end yet: it gets the recorded truth, then closes
        assert (out.action, out.close) == (Action.FORWARD, True)
        assert out.result["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert "terminal_regression" in kinds(out.findings)
        assert book.record("t-c").poisoned

    def test_a_timestamp_without_zone_does_not_crash_the_engine(self, book):
        second = self._two_streams(book)
        out = second.event(status_update("t-c", "c-c", "TASK_STATE_WORKING",
                                         timestamp="2026-11-29T20:45:02"))
        assert out.action is Action.FORWARD


# --------------------------------------------------------------------------------------------
# ListTasks
# --------------------------------------------------------------------------------------------


class TestListTasks:
    """A ListTasks answer is judged task by task, each as a GetTask answer for it
    (gateway/exchange/judge.py ``judge_list``)."""

    def test_every_task_of_a_list_is_normalized(self, book):
        result = {"tasks": [task("t-1", "c-1", "working"),
                            task("t-2", "c-2", "TASK_STATE_COMPLETED"),
                            task("t-3", "c-3", "Input-Required")],
                  "nextPageToken": "", "pageSize": 3, "totalSize": 3}
        out = book.answer(exchange("ListTasks", {}), result)
        assert out.action is Action.FORWARD
        assert [t["status"]["state"] for t in out.result["tasks"]] == [
            "TASK_STATE_WORKING", "TASK_STATE_COMPLETED", "TASK_STATE_INPUT_REQUIRED"]
        assert {k: v for k, v in out.result.items() if k != "tasks"} == \
            {"nextPageToken": "", "pageSize": 3, "totalSize": 3}
        assert kinds(book.all_findings, "normalization") == ["v03_kebab", "case_variant"]
        assert [book.record(t).state for t in ("t-1", "t-2", "t-3")] == [
            TaskState.WORKING, TaskState.COMPLETED, TaskState.INPUT_REQUIRED]  # observed, stored

    def test_a_canonical_list_is_forwarded_as_is(self, book):
        result = {"tasks": [task("t-1", "c-1", "TASK_STATE_WORKING")], "nextPageToken": ""}
        out = book.answer(exchange("ListTasks", {}), result)
        assert out.result is result
        assert book.all_findings == []

    def test_a_poisoned_task_is_listed_with_its_recorded_terminal_status(self, book):
        book.seed(TaskRecord(UPSTREAM, "t-5", "c-5", TaskState.COMPLETED, 1.0))
        result = {"tasks": [task("t-4", "c-4", "TASK_STATE_WORKING"), task("t-5", "c-5", "Working")]}
        out = book.answer(exchange("ListTasks", {}), result)
        assert out.action is Action.FORWARD
        listed = out.result["tasks"]
        assert listed[0] is result["tasks"][0]
        assert listed[1]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert listed[1]["metadata"][engine.CORRECTED_KEY]["reason"] == "terminal_regression"
        assert "terminal_regression" in kinds(book.all_findings, "divergence")
        assert book.record("t-5").state is TaskState.COMPLETED

    def test_an_unknown_state_in_a_list_is_refused(self, book):
        result = {"tasks": [task("t-1", "c-1", "TASK_STATE_WORKING"), task("t-2", "c-2", "paused")]}
        out = book.answer(exchange("ListTasks", {}), result)
        assert out.action is Action.REJECT
        assert out.error is not None and out.error[0] == INVALID_AGENT_RESPONSE
        assert kinds(book.all_findings, "divergence") == ["unknown_state"]

    def test_observe_mode_forwards_the_list_unchanged(self, book):
        result = {"tasks": [task("t-1", "c-1", "working")]}
        out = book.answer(exchange("ListTasks", {}, mode=Mode.OBSERVE), result)
        assert out.result is result
        assert kinds(book.all_findings, "normalization") == ["v03_kebab"]

    @pytest.mark.parametrize("result", [None, {}, {"tasks": "none"}, []])
    def test_a_result_without_a_task_list_is_forwarded(self, book, result):
        out = book.answer(exchange("ListTasks", {}), result)
        assert (out.action, out.result) == (Action.FORWARD, result) and book.all_findings == []


# --------------------------------------------------------------------------------------------
# Payloads the engine does not judge
# --------------------------------------------------------------------------------------------


class TestPassThrough:
    def test_a_direct_message_answer_is_forwarded_untouched(self, book):
        result = {"message": {"messageId": "m-1", "role": "ROLE_AGENT",
                              "parts": [{"text": "direct reply"}]}}
        out = book.answer(exchange("SendMessage", NEW_STREAM), result)
        assert (out.action, out.result, out.findings, out.record) == \
            (Action.FORWARD, result, [], None)

    def test_an_unrecognized_result_is_forwarded_untouched(self, book):
        result = {"configs": [], "nextPageToken": ""}
        out = book.answer(exchange("ListTaskPushNotificationConfigs", {"taskId": "t-1"}), result)
        assert (out.action, out.result, out.findings) == (Action.FORWARD, result, [])

    def test_payload_task_id_reads_both_shapes(self):
        assert engine.payload_task_id(status_update("t-1", "c-1", "working")) == "t-1"
        assert engine.payload_task_id(v03_task("t-2", "c-2", "working")) == "t-2"
        assert engine.payload_task_id({"configs": []}) is None

    def test_the_record_carries_upstream_context_and_clock(self, book):
        book.answer(exchange("GetTask", {"id": "t-1"}, upstream="worker-b"),
                    task("t-1", "c-1", "TASK_STATE_WORKING"))
        record = book.record("t-1", upstream="worker-b")
        assert (record.upstream, record.task_id, record.context_id) == ("worker-b", "t-1", "c-1")
        assert record.observed_at == 1_780_000_000.0 + book.tick
        assert book.record("t-1") is None  # another upstream's t-1 is another task

    def test_first_terminal_status_is_kept_with_its_timestamp(self, book):
        book.answer(exchange("GetTask", {"id": "t-1"}),
                    task("t-1", "c-1", "completed"))
        record = book.record("t-1")
        assert record.terminal
        assert record.terminal_status["state"] == "TASK_STATE_COMPLETED"

    def test_stream_state_binds_task_and_context_from_the_first_event(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-1", "c-1", "TASK_STATE_SUBMITTED")})
        assert stream.state == StreamState(task_id="t-1", context_id="c-1", terminal=False)
