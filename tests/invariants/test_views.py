"""One view of a task, as transcripts of the pure core (docs/field-cases.md F18, F19): what a
stream refused never comes back through another answer. Each payload goes through the judge
loop the gateway runs (tests/invariants/playbook.py)."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.a2a.bridge import J03, V1
from gateway.invariants import engine
from gateway.invariants.artifacts import EMPTY, LIMIT, fold, part_content
from gateway.invariants.model import MAX_ARTIFACTS, Action
from tests.invariants.payloads import (
    artifact_update,
    status_update,
    task,
    text_parts,
    v03_artifact_update,
    v03_status_update,
    v03_task,
)
from tests.invariants.playbook import Playbook, exchange, kinds

NEW_STREAM = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}
NEW_STREAM_V03 = {"message": {"kind": "message", "messageId": "m-1", "role": "user",
                              "parts": [{"kind": "text", "text": "go"}]}}


@pytest.fixture
def book() -> Playbook:
    return Playbook()


def follow_up(tid: str) -> dict:
    return {"message": {"messageId": "m-2", "role": "ROLE_USER", "taskId": tid, "parts": [{"text": "yes"}]}}


def get(book: Playbook, tid: str, answer: dict, method: str = "GetTask"):
    return book.answer(exchange(method, {"id": tid}), answer)


def arts(*entries: tuple[str, list[str]]) -> list[dict]:
    return [{"artifactId": aid, "parts": text_parts(texts)} for aid, texts in entries]


def note(result: dict) -> dict:
    return result.get("metadata", {}).get(engine.CORRECTED_KEY, {})


class TestFold:
    def test_the_fold_does_not_depend_on_the_chunks(self):
        parts = text_parts(["a", "b", "c"])
        assert fold(fold(EMPTY, parts[:1], V1), parts[1:], V1) == fold(EMPTY, parts, V1)

    def test_the_fold_is_the_same_in_every_version(self):
        """A part read into v1.0 form: v0.3 ``kind`` tags and file / data wrappers fold alike
        (docs/bridge.md §1.3)."""
        v1 = [{"text": "a"}, {"url": "https://x/y", "mediaType": "text/plain"}, {"data": {"k": [1, 2]}}]
        v03 = [{"kind": "text", "text": "a"}, {"kind": "file", "file": {"uri": "https://x/y", "mimeType": "text/plain"}},
               {"kind": "data", "data": {"k": [1, 2]}}]
        assert fold(EMPTY, v1, V1) == fold(EMPTY, v03, J03)
        assert [part_content(p, V1) for p in v1] == [part_content(p, J03) for p in v03]

    def test_content_tells_parts_apart(self):
        assert fold(EMPTY, [{"text": "a"}], V1) != fold(EMPTY, [{"text": "b"}], V1)
        assert fold(EMPTY, [{"text": "ab"}], V1) != fold(EMPTY, text_parts(["a", "b"]), V1)
        assert fold(EMPTY, [{"text": "1"}], V1) != fold(EMPTY, [{"data": 1}], V1)


# --------------------------------------------------------------------------------------------
# F18 — a sealed artifact rewritten in a later turn
# --------------------------------------------------------------------------------------------

def f18_turns(book: Playbook) -> list:
    one = book.open(exchange("SendStreamingMessage", NEW_STREAM))
    outs = [one.event({"task": task("t-18", "c-18", "TASK_STATE_SUBMITTED")}),
            one.event(artifact_update("t-18", "c-18", "a-3", ["draft one", "draft two"], last=True)),
            one.event(status_update("t-18", "c-18", "TASK_STATE_INPUT_REQUIRED"))]
    two = book.open(exchange("SendStreamingMessage", follow_up("t-18")))
    outs += [two.event(artifact_update("t-18", "c-18", "a-3", ["more"], append=True)),
             two.event(artifact_update("t-18", "c-18", "a-3", ["new one", "new two"], append=False)),
             two.event(status_update("t-18", "c-18", "TASK_STATE_COMPLETED"))]
    return outs


class TestF18SealedRewrite:
    def test_f18_both_updates_of_turn_two_are_dropped(self, book):
        outs = f18_turns(book)
        assert [o.action for o in outs] == [Action.FORWARD] * 3 + [Action.DROP, Action.DROP, Action.FORWARD]
        assert kinds(outs[3].findings + outs[4].findings) == ["artifact_after_last_chunk"] * 2
        sealed = book.record("t-18").artifacts["a-3"]
        assert (sealed.sealed, sealed.parts) == (True, 2)
        assert sealed.digest == fold(EMPTY, text_parts(["draft one", "draft two"]), V1)

    def test_f18_get_task_withholds_the_rewrite(self, book):
        f18_turns(book)
        out = get(book, "t-18", task("t-18", "c-18", "TASK_STATE_COMPLETED", artifacts=arts(("a-3", ["new one", "new two"]))))
        assert out.action is Action.FORWARD
        assert out.result["artifacts"] == []
        assert note(out.result) == {"reason": "artifact_after_last_chunk", "workerState": "TASK_STATE_COMPLETED",
                                    "artifacts": ["a-3"]}
        assert kinds(out.findings, "divergence") == ["artifact_after_last_chunk"]

    def test_f18_get_task_cuts_the_append_back(self, book):
        f18_turns(book)
        out = get(book, "t-18", task("t-18", "c-18", "TASK_STATE_COMPLETED",
                                     artifacts=arts(("a-3", ["draft one", "draft two", "more"]))))
        assert out.result["artifacts"] == arts(("a-3", ["draft one", "draft two"]))
        assert note(out.result)["artifacts"] == ["a-3"]

    def test_f18_an_answer_that_agrees_is_the_workers_own(self, book):
        f18_turns(book)
        answer = task("t-18", "c-18", "TASK_STATE_COMPLETED", artifacts=arts(("a-3", ["draft one", "draft two"])))
        out = get(book, "t-18", answer)
        assert out.result is answer and out.findings == []

    def test_f18_the_digest_holds_across_versions(self, book):
        """Sealed on a v0.3 stream, checked on a v1.0 GetTask (and the other way)."""
        one = book.open(exchange("message/stream", NEW_STREAM_V03))
        one.event(v03_task("t-18", "c-18", "submitted"))
        one.event(v03_artifact_update("t-18", "c-18", "a-3", ["draft"], last=True))
        one.event(v03_status_update("t-18", "c-18", "completed", final=True))
        same = get(book, "t-18", task("t-18", "c-18", "TASK_STATE_COMPLETED", artifacts=arts(("a-3", ["draft"]))))
        assert same.findings == [] and "metadata" not in same.result
        other = get(book, "t-18", v03_task("t-18", "c-18", "completed", artifacts=[
            {"artifactId": "a-3", "parts": [{"kind": "text", "text": "redraft"}]}]), method="tasks/get")
        assert other.result["artifacts"] == [] and note(other.result)["artifacts"] == ["a-3"]

    def test_f18_a_second_stream_repeating_the_sealed_artifact_delivers_it(self, book):
        """Two streams of one task: the one behind delivers the sealing update too when it
        shows exactly what was sealed (its fold from its own deliveries); anything else stays
        refused — also a chunk on the way to it, which cannot be told from a rewrite."""
        one = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        one.event({"task": task("t-18", "c-18", "TASK_STATE_WORKING")})
        two = book.open(exchange("SubscribeToTask", {"id": "t-18"}))
        two.event({"task": task("t-18", "c-18", "TASK_STATE_WORKING")})
        one.event(artifact_update("t-18", "c-18", "a-3", ["x", "y"], last=True))
        out = two.event(artifact_update("t-18", "c-18", "a-3", ["x", "y"], last=True))
        assert out.action is Action.FORWARD and out.findings == []
        again = two.event(artifact_update("t-18", "c-18", "a-3", ["z"], append=True))
        assert again.action is Action.DROP and kinds(again.findings) == ["artifact_after_last_chunk"]
        one.event(artifact_update("t-18", "c-18", "a-4", ["p"]))
        one.event(artifact_update("t-18", "c-18", "a-4", ["q"], append=True, last=True))
        part = two.event(artifact_update("t-18", "c-18", "a-4", ["p"]))
        assert part.action is Action.DROP and kinds(part.findings) == ["artifact_after_last_chunk"]

    def test_f18_the_live_answer_is_corrected_and_the_record_kept(self, book):
        one = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        one.event({"task": task("t-18", "c-18", "TASK_STATE_WORKING")})
        one.event(artifact_update("t-18", "c-18", "a-3", ["x"], last=True))
        before = book.record("t-18").artifacts["a-3"]
        out = get(book, "t-18", task("t-18", "c-18", "TASK_STATE_WORKING", artifacts=arts(("a-3", ["y"]), ("a-4", ["z"]))))
        assert out.result["artifacts"] == arts(("a-4", ["z"]))
        assert note(out.result)["artifacts"] == ["a-3"]
        assert book.record("t-18").artifacts["a-3"] == before


class TestArtifactBound:
    def test_an_artifact_past_the_bound_is_not_delivered(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-1", "c-1", "TASK_STATE_WORKING")})
        for i in range(MAX_ARTIFACTS):
            assert stream.event(artifact_update("t-1", "c-1", f"a-{i}", ["x"])).action is Action.FORWARD
        out = stream.event(artifact_update("t-1", "c-1", "a-more", ["x"]))
        assert out.action is Action.DROP
        assert [(f.category, f.kind) for f in out.findings] == [("limit", LIMIT)]
        assert len(book.record("t-1").artifacts) == MAX_ARTIFACTS
        assert stream.event(artifact_update("t-1", "c-1", "a-0", ["y"], append=True)).action is Action.FORWARD
        snap = get(book, "t-1", task("t-1", "c-1", "TASK_STATE_WORKING", artifacts=arts(("a-0", ["x", "y"]), ("a-more", ["x"]))))
        assert snap.result["artifacts"] == arts(("a-0", ["x", "y"]))
        assert note(snap.result) == {"reason": LIMIT, "workerState": "TASK_STATE_WORKING", "artifacts": ["a-more"]}
        assert len(book.record("t-1").artifacts) == MAX_ARTIFACTS


# --------------------------------------------------------------------------------------------
# F19 — content after a terminal state
# --------------------------------------------------------------------------------------------

def f19_stream(book: Playbook) -> list:
    stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
    return [stream.event({"task": task("t-19", "c-19", "TASK_STATE_WORKING")}),
            stream.event(artifact_update("t-19", "c-19", "a-25", ["part one"])),
            stream.event(status_update("t-19", "c-19", "TASK_STATE_COMPLETED")),
            stream.event(artifact_update("t-19", "c-19", "a-25", ["part two"], append=True)),
            stream.event(artifact_update("t-19", "c-19", "a-26", ["late"]))]


class TestF19AfterTerminal:
    def test_f19_the_terminal_state_freezes_what_the_stream_delivered(self, book):
        outs = f19_stream(book)
        assert [o.action for o in outs] == [Action.FORWARD] * 3 + [Action.DROP] * 2
        frozen = book.record("t-19").artifacts["a-25"]
        assert (frozen.sealed, frozen.parts) == (False, 1)
        assert frozen.digest == fold(EMPTY, text_parts(["part one"]), V1)

    @pytest.mark.parametrize("method", ["GetTask", "tasks/get"])
    def test_f19_get_task_shows_only_what_was_delivered(self, book, method):
        f19_stream(book)
        if method == "GetTask":
            answer = task("t-19", "c-19", "TASK_STATE_COMPLETED",
                          artifacts=arts(("a-25", ["part one", "part two"]), ("a-26", ["late"])))
        else:
            answer = v03_task("t-19", "c-19", "completed", artifacts=[
                {"artifactId": "a-25", "parts": [{"kind": "text", "text": t} for t in ("part one", "part two")]},
                {"artifactId": "a-26", "parts": [{"kind": "text", "text": "late"}]}])
        out = get(book, "t-19", answer, method)
        assert [a["artifactId"] for a in out.result["artifacts"]] == ["a-25"]
        assert [p["text"] for p in out.result["artifacts"][0]["parts"]] == ["part one"]
        assert sorted(note(out.result)["artifacts"]) == ["a-25", "a-26"]

    def test_f19_the_list_answer_is_corrected_alike(self, book):
        f19_stream(book)
        listed = {"tasks": [task("t-19", "c-19", "TASK_STATE_COMPLETED", artifacts=arts(("a-25", ["part one", "part two"])))]}
        out = book.answer(exchange("ListTasks", {}), listed)
        assert out.result["tasks"][0]["artifacts"] == arts(("a-25", ["part one"]))

    def test_f19_a_stream_behind_catches_up_but_never_past_what_was_frozen(self, book):
        """Another stream (or a push) of the task, behind the one that recorded COMPLETED."""
        one = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        one.event({"task": task("t-19", "c-19", "TASK_STATE_WORKING")})
        two = book.open(exchange("SubscribeToTask", {"id": "t-19"}))
        two.event({"task": task("t-19", "c-19", "TASK_STATE_WORKING")})
        one.event(artifact_update("t-19", "c-19", "a-25", ["p1"]))
        one.event(artifact_update("t-19", "c-19", "a-25", ["p2"], append=True))
        one.event(status_update("t-19", "c-19", "TASK_STATE_COMPLETED"))
        assert two.event(artifact_update("t-19", "c-19", "a-25", ["p1"])).action is Action.FORWARD
        assert two.event(artifact_update("t-19", "c-19", "a-25", ["p2"], append=True)).action is Action.FORWARD
        past = two.event(artifact_update("t-19", "c-19", "a-25", ["p3"], append=True))
        assert past.action is Action.DROP and kinds(past.findings) == ["artifact_after_terminal"]
        assert book.record("t-19").poisoned

    def test_f19_a_terminal_snapshot_freezes_what_it_shows(self, book):
        first = get(book, "t-19", task("t-19", "c-19", "TASK_STATE_COMPLETED", artifacts=arts(("a-1", ["x", "y"]))))
        assert first.findings == []
        assert book.record("t-19").artifacts["a-1"].digest == fold(EMPTY, text_parts(["x", "y"]), V1)
        other = get(book, "t-19", task("t-19", "c-19", "TASK_STATE_COMPLETED", artifacts=arts(("a-1", ["x", "z"]))))
        assert other.result["artifacts"] == [] and kinds(other.findings) == ["artifact_after_terminal"]
        longer = get(book, "t-19", task("t-19", "c-19", "TASK_STATE_COMPLETED", artifacts=arts(("a-1", ["x", "y", "w"]))))
        assert longer.result["artifacts"] == arts(("a-1", ["x", "y"]))

    def test_f19_a_later_turn_continues_the_records_view(self, book):
        """A stream appending to an artifact it never showed whole (an earlier turn's, or one
        first seen in an answer) continues the record's view: what it freezes is exact."""
        get(book, "t-19", task("t-19", "c-19", "TASK_STATE_INPUT_REQUIRED", artifacts=arts(("a-1", ["x"]))))
        turn = book.open(exchange("SendStreamingMessage", follow_up("t-19")))
        turn.event(artifact_update("t-19", "c-19", "a-1", ["y"], append=True))
        turn.event(status_update("t-19", "c-19", "TASK_STATE_COMPLETED"))
        frozen = book.record("t-19").artifacts["a-1"]
        assert (frozen.parts, frozen.digest) == (2, fold(EMPTY, text_parts(["x", "y"]), V1))
        out = get(book, "t-19", task("t-19", "c-19", "TASK_STATE_COMPLETED", artifacts=arts(("a-1", ["x", "q"]))))
        assert out.result["artifacts"] == [] and note(out.result)["artifacts"] == ["a-1"]

    def test_f19_an_answer_racing_a_stream_leaves_the_count_only(self, book):
        """A unary answer that shows a known artifact otherwise than the record may be ahead of
        (or behind) a stream's chunks: the record takes its part count, not its fold; only the
        part count bounds what is frozen after a stream continuing from it."""
        get(book, "t-19", task("t-19", "c-19", "TASK_STATE_INPUT_REQUIRED", artifacts=arts(("a-1", ["x"]))))
        turn = book.open(exchange("SendStreamingMessage", follow_up("t-19")))
        get(book, "t-19", task("t-19", "c-19", "TASK_STATE_WORKING", artifacts=arts(("a-1", ["x", "y"]))))
        assert book.record("t-19").artifacts["a-1"].digest is None
        turn.event(artifact_update("t-19", "c-19", "a-1", ["y"], append=True))  # already in that answer
        turn.event(status_update("t-19", "c-19", "TASK_STATE_COMPLETED"))
        frozen = book.record("t-19").artifacts["a-1"]
        assert (frozen.parts, frozen.digest) == (3, None)
        out = get(book, "t-19", task("t-19", "c-19", "TASK_STATE_COMPLETED", artifacts=arts(("a-1", ["x", "y"]))))
        assert out.result["artifacts"] == arts(("a-1", ["x", "y"])) and out.findings == []


# --------------------------------------------------------------------------------------------
# F21 — a completed task whose id the worker reuses
# --------------------------------------------------------------------------------------------

def f21_completed(book: Playbook) -> None:
    stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
    stream.event({"task": task("t-21", "c-21", "TASK_STATE_WORKING")})
    stream.event(artifact_update("t-21", "c-21", "a-1", ["the answer"]))
    stream.event(status_update("t-21", "c-21", "TASK_STATE_COMPLETED"))


class TestF21ReusedId:
    def test_f21_the_new_send_is_a_reused_id_not_a_context_mismatch(self, book):
        f21_completed(book)
        out = book.answer(exchange("SendMessage", NEW_STREAM), {"task": task("t-21", "c-99", "TASK_STATE_WORKING")})
        assert out.action is Action.REJECT and out.error[0] == -32006
        assert kinds(out.findings) == ["reused_task_id"]
        assert book.record("t-21").poisoned and book.record("t-21").context_id == "c-21"

    @pytest.mark.parametrize("method", ["GetTask", "tasks/get"])
    def test_f21_get_task_answers_the_recorded_task(self, book, method):
        f21_completed(book)
        worker = task("t-21", "c-99", "TASK_STATE_WORKING", artifacts=arts(("a-1", ["the answer"]), ("a-9", ["new"])),
                      history=[{"messageId": "m-9", "role": "ROLE_USER", "parts": text_parts(["theirs"])}],
                      metadata={"theirs": True})
        if method == "tasks/get":
            worker = {"kind": "task", **worker, "status": {"state": "working"}}
        out = get(book, "t-21", worker, method)
        assert out.action is Action.FORWARD
        completed = "TASK_STATE_COMPLETED" if method == "GetTask" else "completed"
        assert out.result["contextId"] == "c-21" and out.result["status"]["state"] == completed
        assert [a["artifactId"] for a in out.result["artifacts"]] == ["a-1"]
        assert "history" not in out.result and list(out.result["metadata"]) == [engine.CORRECTED_KEY]
        assert note(out.result)["reason"] == "reused_task_id" and note(out.result)["artifacts"] == ["a-9"]
        assert kinds(out.findings) == ["reused_task_id"]
        again = get(book, "t-21", worker, method)
        assert again.result == out.result and again.findings == []  # one lie, one count

    def test_f21_a_list_answer_is_corrected_alike(self, book):
        f21_completed(book)
        out = book.answer(exchange("ListTasks", {}), {"tasks": [task("t-21", "c-99", "TASK_STATE_WORKING")]})
        listed = out.result["tasks"][0]
        assert listed["contextId"] == "c-21" and listed["status"]["state"] == "TASK_STATE_COMPLETED"

    def test_f21_another_caller_is_refused(self, book):
        f21_completed(book)
        stranger = dataclasses.replace(exchange("GetTask", {"id": "t-21"}), caller="fp-other",
                                       caller_matches=frozenset({"fp-other"}))
        out = book.answer(stranger, task("t-21", "c-99", "TASK_STATE_WORKING"))
        assert out.action is Action.REJECT and out.error[0] == -32006

    def test_f21_a_live_task_in_another_context_is_still_a_mismatch(self, book):
        stream = book.open(exchange("SendStreamingMessage", NEW_STREAM))
        stream.event({"task": task("t-21", "c-21", "TASK_STATE_WORKING")})
        out = get(book, "t-21", task("t-21", "c-99", "TASK_STATE_WORKING"))
        assert out.action is Action.REJECT and kinds(out.findings) == ["context_id_mismatch"]


# --------------------------------------------------------------------------------------------
# F20 — a task remembers the card generation it was last observed under
# --------------------------------------------------------------------------------------------

class TestF20CardGeneration:
    def test_f20_each_observation_records_the_card_generation_never_lowering_it(self, book):
        under = lambda generation: dataclasses.replace(exchange("GetTask", {"id": "t-20"}),  # noqa: E731
                                                       card_generation=generation)
        get_ex = under(1)
        book.answer(get_ex, task("t-20", "c-20", "TASK_STATE_INPUT_REQUIRED"))
        assert book.record("t-20").card_generation == 1
        book.answer(under(3), task("t-20", "c-20", "TASK_STATE_INPUT_REQUIRED"))
        assert book.record("t-20").card_generation == 3
        # a replica whose card cache is behind observes it: the task was seen under 3 at least
        book.answer(under(2), task("t-20", "c-20", "TASK_STATE_WORKING"))
        assert book.record("t-20").card_generation == 3
        book.answer(under(None), task("t-20", "c-20", "TASK_STATE_WORKING"))  # not known: kept
        assert book.record("t-20").card_generation == 3
