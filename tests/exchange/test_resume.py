"""Event ids and resuming with ``Last-Event-ID`` as transcripts (docs/resume.md §1): no
sockets, no event loop. Each test runs the exchange the gateway runs against a scripted worker
(gateway/offline.py), whose memory ledger keeps the replay window, and reads back
the commands, the frames the client received (with their SSE ids) and what was counted.
"""

from __future__ import annotations

from typing import Any

from gateway.a2a import jsonrpc
from gateway.a2a.bridge import Dialect
from gateway.errors import LedgerError
from gateway.exchange import window
from gateway.exchange.commands import AppendEvent, Emit, Open, Post, Read, ReadWindow, Store, StoreAndAppend
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.model import Policy
from gateway.ledger.memory import MemoryLedger
from gateway.offline import Ledger, Offline
from gateway.invariants.admission import CardView
from gateway.invariants.model import Mode

CARD = CardView(doc={"capabilities": {"streaming": True}}, fresh=True, reachable=True, etag=None)
SEND = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}


def play(method: str, params: Any, worker: list[dict[str, Any]], *, ledger: Ledger | None = None,
         last_event_id: str | None = None, req_id: Any = 1, **policy: Any) -> Offline:
    """Run one whole exchange against ``worker``'s acts; returns the offline driver."""
    body = jsonrpc.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
    req = jsonrpc.parse_request(body)
    info = jsonrpc.lookup_method(method)
    assert isinstance(req, jsonrpc.Request) and info is not None
    ex = JsonRpcExchange(req, body, info, CARD, Policy("w", resubscribe_attempts=1, **policy))
    ex.last_event_id = last_event_id
    offline = Offline("w", ledger or Ledger(), req_id=req_id)
    offline.worker.extend(worker)
    gen = ex.run()
    done = offline.run(gen)
    while not done:  # when the script runs out, the worker closes its stream (a Read gets its end)
        assert type(offline.commands[-1]) is Read, f"unscripted worker call {offline.commands[-1]!r}"
        offline.worker.append({"end": True})
        done = offline.resume(gen)
    return offline


def task(tid: str, state: str, artifacts: list[Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": tid, "contextId": "c-1", "status": {"state": state}}
    if artifacts is not None:
        doc["artifacts"] = artifacts
    return doc


def status(tid: str, state: str) -> dict[str, Any]:
    return {"statusUpdate": {"taskId": tid, "contextId": "c-1", "status": {"state": state}}}


def chunk(tid: str, n: int, *, last: bool = False) -> dict[str, Any]:
    return {"artifactUpdate": {"taskId": tid, "contextId": "c-1", "append": n > 1, "lastChunk": last,
                               "artifact": {"artifactId": "a-1", "parts": [{"text": f"chunk {n}"}]}}}


def frames(book: Offline) -> list[tuple[str | None, Any]]:
    """(SSE id, result or error) of every event the client received."""
    return [(o.id, o.doc.get("result", o.doc.get("error"))) for o in book.outputs if o.frame and o.doc is not None]


def counted(book: Offline, metric: str) -> list[tuple[tuple[str, ...], int]]:
    return [(c.labels, c.amount) for c in book.counts if c.metric == metric]


def gone(tid: str) -> list[dict[str, Any]]:
    """The worker's stream is cut; its GetTask says the task is still working; the resubscribe
    finds the worker gone (the client's stream then ends with an error event)."""
    return [{"cut": True}, {"answer": {"jsonrpc": "2.0", "id": "p", "result": task(tid, "TASK_STATE_WORKING")}},
            {"fail": "connect"}]


def first_stream(ledger: Ledger, tid: str = "t-1") -> Offline:
    """A SendStreamingMessage whose worker sends the task, three chunks, then the stream is
    cut from the client's side (the test stops reading; the task stays WORKING)."""
    return play("SendStreamingMessage", SEND, [
        {"open": True},
        {"events": [{"task": task(tid, "TASK_STATE_WORKING")}, chunk(tid, 1), chunk(tid, 2), chunk(tid, 3)]},
        {"end": True},
        {"answer": {"jsonrpc": "2.0", "id": "p", "result": task(tid, "TASK_STATE_WORKING")}},
        {"fail": "connect"},  # the resubscribe after the worker's end: the worker is gone now
    ], ledger=ledger)


class TestEventIds:
    def test_each_delivered_task_event_is_stored_in_the_window_before_it_is_queued_with_its_id(self):
        book = first_stream(ledger := Ledger())
        got = frames(book)
        assert [i for i, _ in got[:4]] == ["1", "2", "3", "4"]
        kinds = [type(c) for c in book.commands if type(c) in (Store, StoreAndAppend, AppendEvent, Emit)]
        assert kinds[:2] == [StoreAndAppend, Emit]  # ledger record and window in one write, then the client
        stored = ledger.windows[("w", "", "t-1")]
        assert [e.lineage for e in stored] == ["1"] * 4
        assert window.decode(stored[1].payload, Dialect.V1_0, 10) == (got[1][1], False)

    def test_the_workers_own_event_ids_are_not_relayed(self):
        raw = jsonrpc.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": task("t-1", "TASK_STATE_COMPLETED")}})
        book = play("SendStreamingMessage", SEND, [{"open": True}, {"bytes": b"id: worker-7\ndata: " + raw + b"\n\n"}])
        assert [i for i, _ in frames(book)] == ["1"]

    def test_with_the_window_off_nothing_is_kept_and_the_workers_ids_go_through(self):
        raw = jsonrpc.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": task("t-1", "TASK_STATE_COMPLETED")}})
        book = play("SendStreamingMessage", SEND, [{"open": True}, {"bytes": b"id: worker-7\ndata: " + raw + b"\n\n"}],
                    replay=False)
        assert [i for i, _ in frames(book)] == ["worker-7"]
        assert not any(type(c) is AppendEvent for c in book.commands)

    def test_a_direct_message_reply_has_no_task_and_no_id(self):
        message = {"message": {"messageId": "r-1", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}}
        book = play("SendStreamingMessage", SEND, [{"open": True}, {"events": [message]}, {"end": True}])
        assert frames(book) == [(None, message)]


class TestResume:
    def test_the_missed_events_come_from_the_window_then_the_live_stream_in_the_same_lineage(self):
        ledger = Ledger()
        first_stream(ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True},
            {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}, chunk("t-1", 4),
                        chunk("t-1", 5, last=True), status("t-1", "TASK_STATE_COMPLETED")]},
        ], ledger=ledger, last_event_id="2", req_id=9)
        got = frames(book)
        assert got[0] == ("3", chunk("t-1", 2)) and got[1] == ("4", chunk("t-1", 3))
        # the live part: the worker's Task snapshot, then the rest; new ids, the same lineage
        assert [i for i, _ in got[2:]] == ["5", "6", "7", "8"]
        assert got[-1][1] == status("t-1", "TASK_STATE_COMPLETED")
        assert {e.lineage for e in ledger.windows[("w", "", "t-1")]} == {"1"}
        assert all(o.doc["id"] == 9 for o in book.outputs if o.doc)  # the new request's own id
        opened = [c for c in book.commands if type(c) is Open]
        assert len(opened) == 1 and jsonrpc.loads(opened[0].body)["method"] == "SubscribeToTask"
        assert counted(book, "resumes") == [(("resumed",), 1)]
        assert counted(book, "replayed_events") == [((), 2)]

    def test_the_newest_id_replays_nothing_and_goes_live(self):
        ledger = Ledger()
        first_stream(ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True}, {"events": [status("t-1", "TASK_STATE_COMPLETED")]}], ledger=ledger, last_event_id="4")
        assert frames(book) == [("5", status("t-1", "TASK_STATE_COMPLETED"))]

    def test_a_resumed_stream_can_be_resumed_again(self):
        ledger = Ledger()
        first_stream(ledger)
        play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True}, {"events": [chunk("t-1", 4)]}, *gone("t-1")], ledger=ledger, last_event_id="4")
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True}, {"events": [status("t-1", "TASK_STATE_COMPLETED")]}], ledger=ledger, last_event_id="3")
        assert [r for _, r in frames(book)] == [chunk("t-1", 3), chunk("t-1", 4), status("t-1", "TASK_STATE_COMPLETED")]

    def test_another_client_streams_events_are_not_replayed(self):
        ledger = Ledger()
        first_stream(ledger)
        play("SubscribeToTask", {"id": "t-1"}, [  # a second client, without the header
            {"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}, chunk("t-1", 4)]},
            *gone("t-1")], ledger=ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True}, {"events": [status("t-1", "TASK_STATE_COMPLETED")]}], ledger=ledger, last_event_id="3")
        assert [i for i, _ in frames(book)] == ["4", "7"]  # chunk 3, then live: not the other lineage's 5 and 6

    def test_an_id_the_window_does_not_hold_is_a_counted_gap_answered_with_a_snapshot_first(self):
        ledger = Ledger()
        first_stream(ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-1", "TASK_STATE_WORKING")}},
            {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}, status("t-1", "TASK_STATE_COMPLETED")]},
        ], ledger=ledger, last_event_id="expired-17")
        got = frames(book)
        assert [r for _, r in got] == [{"task": task("t-1", "TASK_STATE_WORKING")}, status("t-1", "TASK_STATE_COMPLETED")]
        assert [i for i, _ in got] == ["5", "6"]  # the snapshot starts a new lineage
        assert ledger.windows[("w", "", "t-1")][-1].lineage == "5"
        assert counted(book, "resumes") == [(("gap",), 1)]
        probes = [c for c in book.commands if type(c) is Post]
        assert len(probes) == 1 and jsonrpc.loads(probes[0].body)["method"] == "GetTask"

    def test_a_terminal_task_is_answered_from_the_window_alone(self):
        ledger = Ledger()
        play("SendStreamingMessage", SEND, [
            {"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}, chunk("t-1", 1, last=True),
                                        status("t-1", "TASK_STATE_COMPLETED")]}], ledger=ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [], ledger=ledger, last_event_id="1")
        assert frames(book) == [("2", chunk("t-1", 1, last=True)), ("3", status("t-1", "TASK_STATE_COMPLETED"))]
        assert not any(type(c) in (Open, Post) for c in book.commands)  # nothing reached the worker

    def test_a_terminal_task_whose_window_ends_early_gets_a_snapshot_from_the_worker(self):
        ledger = Ledger()
        first_stream(ledger)
        play("SubscribeToTask", {"id": "t-1"}, [  # another client sees the end
            {"open": True}, {"events": [status("t-1", "TASK_STATE_COMPLETED")]}], ledger=ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-1", "TASK_STATE_COMPLETED")}},
        ], ledger=ledger, last_event_id="3")
        got = frames(book)
        assert [r for _, r in got] == [chunk("t-1", 3), {"task": task("t-1", "TASK_STATE_COMPLETED")}]
        assert not any(type(c) is Open for c in book.commands)
        again = play("SubscribeToTask", {"id": "t-1"}, [], ledger=ledger, last_event_id=got[-1][0])
        assert again.outputs[0].doc["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION  # that was the end

    def test_f05_the_id_of_a_terminal_tasks_last_event_is_refused_as_a_subscribe_without_it(self):
        """Nothing is left to send: refused as any subscribe to a terminal task (F05), without
        asking the worker and without growing the window (an EventSource's reconnect ends)."""
        ledger = Ledger()
        play("SendStreamingMessage", SEND, [
            {"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}, status("t-1", "TASK_STATE_COMPLETED")]}],
            ledger=ledger)
        for _ in range(2):
            book = play("SubscribeToTask", {"id": "t-1"}, [], ledger=ledger, last_event_id="2")
            assert [o.doc["error"]["code"] for o in book.outputs] == [jsonrpc.UNSUPPORTED_OPERATION]
            assert not any(type(c) in (Open, Post) for c in book.commands)
        assert len(ledger.windows[("w", "", "t-1")]) == 2

    def test_a_subscription_the_worker_refuses_still_gets_the_replay_first(self):
        """The task ended while no client was connected; the worker refuses the subscribe. The
        window's events still go out, then the cut-stream handling finds the end (a GetTask)."""
        ledger = Ledger()
        first_stream(ledger)
        refusal = {"jsonrpc": "2.0", "id": 2, "error": {"code": jsonrpc.UNSUPPORTED_OPERATION, "message": "terminal"}}
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"answer": refusal},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-1", "TASK_STATE_COMPLETED")}},
        ], ledger=ledger, last_event_id="2")
        got = [r for _, r in frames(book)]
        assert got == [chunk("t-1", 2), chunk("t-1", 3), {"task": task("t-1", "TASK_STATE_COMPLETED")}]

    def test_without_the_header_a_subscribe_is_relayed_as_before(self):
        ledger = Ledger()
        first_stream(ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}]}, *gone("t-1")],
            ledger=ledger)
        assert not any(type(c) is ReadWindow for c in book.commands)
        assert frames(book)[0] == ("5", {"task": task("t-1", "TASK_STATE_WORKING")})

    def test_a_v03_client_resumes_a_stream_a_v10_client_began_in_its_own_form(self):
        ledger = Ledger()
        first_stream(ledger)
        book = play("tasks/resubscribe", {"id": "t-1"}, [
            {"open": True}, {"events": [{"kind": "status-update", "taskId": "t-1", "contextId": "c-1",
                                         "status": {"state": "completed"}, "final": True}]}],
            ledger=ledger, last_event_id="3")
        got = frames(book)
        assert got[0][0] == "4"
        assert got[0][1]["kind"] == "artifact-update" and got[0][1]["artifact"]["parts"][0]["kind"] == "text"
        assert got[-1][1]["status"]["state"] == "completed"

    def test_the_header_on_a_task_the_gateway_does_not_know_is_a_plain_subscribe(self):
        book = play("SubscribeToTask", {"id": "t-9"}, [
            {"open": True}, {"events": [{"task": task("t-9", "TASK_STATE_COMPLETED")}]}], last_event_id="3")
        assert [r for _, r in frames(book)] == [{"task": task("t-9", "TASK_STATE_COMPLETED")}]
        assert counted(book, "resumes") == []


class TestWindowFailure:
    def test_a_window_that_cannot_be_written_ends_the_stream_with_an_error(self):
        ledger = _FailingWindow()
        book = play("SendStreamingMessage", SEND, [
            {"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}]}], ledger=ledger)
        got = frames(book)
        assert len(got) == 1 and got[0][1]["code"] == jsonrpc.INTERNAL_ERROR  # nothing delivered unstored

    def test_fail_open_delivers_without_an_id_and_counts_it_unchecked(self):
        book = play("SendStreamingMessage", SEND, [
            {"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_COMPLETED")}]}],
            ledger=_FailingWindow(), fail_open=True, mode=Mode.ENFORCE)
        assert frames(book) == [(None, {"task": task("t-1", "TASK_STATE_COMPLETED")})]
        assert counted(book, "unchecked") == [((), 1)]


    def test_fail_open_relays_a_resume_whose_window_cannot_be_read_as_a_plain_subscribe(self):
        ledger = _UnreadableWindow()
        first_stream(ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True}, {"events": [status("t-1", "TASK_STATE_COMPLETED")]}],
            ledger=ledger, last_event_id="2", fail_open=True)
        assert [r for _, r in frames(book)] == [status("t-1", "TASK_STATE_COMPLETED")]
        assert counted(book, "unchecked") == [((), 1)]

    def test_without_fail_open_it_is_the_ledger_error_answer(self):
        ledger = _UnreadableWindow()
        first_stream(ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [], ledger=ledger, last_event_id="2")
        assert book.outputs[0].status == 503 and not any(type(c) is Open for c in book.commands)


    def test_a_resume_that_finds_the_gateway_at_capacity_says_so_after_the_replay(self):
        """No pooled connection for the live subscription: the window's events still go out,
        then the capacity error at once — no GetTask, no resubscribes that would wait on the
        pool again, and never "the stream was lost"."""
        ledger = Ledger()
        first_stream(ledger)
        book = play("SubscribeToTask", {"id": "t-1"}, [{"fail": "pool"}], ledger=ledger, last_event_id="2")
        got = frames(book)
        assert [r for _, r in got[:2]] == [chunk("t-1", 2), chunk("t-1", 3)]
        assert got[-1][1]["code"] == jsonrpc.INTERNAL_ERROR and got[-1][1]["message"].startswith("gateway at capacity")
        assert not any(type(c) is Post for c in book.commands)


class TestGapWithGenerations:
    def test_a_live_snapshot_past_the_gap_snapshots_generation_is_delivered(self):
        ledger = Ledger()
        first_stream(ledger)
        newer = {**task("t-1", "TASK_STATE_WORKING"), "generation": 6,
                 "artifacts": [{"artifactId": "a-9", "parts": [{"text": "new"}]}]}
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": {**task("t-1", "TASK_STATE_WORKING"), "generation": 5}}},
            {"events": [{"task": newer}, status("t-1", "TASK_STATE_COMPLETED")]},
        ], ledger=ledger, last_event_id="gone")
        got = [r for _, r in frames(book)]
        assert [g["task"].get("generation") if "task" in g else "status" for g in got] == [5, 6, "status"]


class _UnreadableMemory(MemoryLedger):
    async def events_after(self, *args: Any, **kwargs: Any) -> Any:
        raise LedgerError("window unavailable")


class _FailingMemory(MemoryLedger):
    async def append_event(self, *args: Any, **kwargs: Any) -> tuple[str, str]:
        raise LedgerError("window unavailable")


def _UnreadableWindow() -> Ledger:  # noqa: N802 - read as a ledger class in the tests
    return Ledger(_UnreadableMemory(run_id=""))


def _FailingWindow() -> Ledger:  # noqa: N802
    return Ledger(_FailingMemory(run_id=""))


class TestSnapshotAfterACut:
    """The unchanged snapshot a resubscribe starts with is dropped (F08 (ii)); with
    generations (docs/resume.md §3.2) one that moved on is the news of what happened in between."""

    def _cut_then(self, snapshot: dict[str, Any]) -> list[Any]:
        working = {**task("t-1", "TASK_STATE_WORKING"), "generation": 2}
        book = play("SendStreamingMessage", SEND, [
            {"open": True}, {"events": [{"task": working}]}, {"cut": True},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": working}},
            {"open": True}, {"events": [{"task": snapshot}, status("t-1", "TASK_STATE_COMPLETED")]}])
        return [r for _, r in frames(book)]

    def test_f08ii_a_resubscribe_snapshot_of_the_same_generation_is_dropped(self):
        got = self._cut_then({**task("t-1", "TASK_STATE_WORKING"), "generation": 2})
        assert [next(iter(r)) for r in got] == ["task", "statusUpdate"]

    def test_f08ii_a_resubscribe_snapshot_whose_generation_moved_on_is_delivered(self):
        got = self._cut_then({**task("t-1", "TASK_STATE_WORKING"), "generation": 5})
        assert [next(iter(r)) for r in got] == ["task", "task", "statusUpdate"]
        assert got[1]["task"]["generation"] == 5
