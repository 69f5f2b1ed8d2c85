"""The exchange layer as transcripts (gateway/exchange/): no sockets, no event loop.

Each test feeds a JSON-RPC request and a scripted worker (gateway/offline.py) to the
exchange the gateway runs and reads back the commands, what the client received and what was
reported. Field cases are named after docs/field-cases.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.states import TaskState
from gateway.a2a.version import ProtocolVersion
from gateway.exchange.commands import Count, Emit, EndStream, Load, Log, Open, Post, Read, Respond, Store, StoreAndAppend
from gateway.exchange.judge import judge, touch
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.model import Policy
from gateway.offline import Ledger, Offline
from gateway.invariants.admission import CardView
from gateway.invariants.model import Exchange, Mode, TaskRecord

CARD = CardView(doc={"capabilities": {"streaming": True}}, fresh=True, reachable=True, etag=None)
V10_SEND = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}
V03_SEND = {"message": {"kind": "message", "messageId": "m-1", "role": "user",
                        "parts": [{"kind": "text", "text": "go"}]}}


def play(method: str, params: Any, worker: list[dict[str, Any]], *, ledger: Ledger | None = None,
         mode: Mode = Mode.ENFORCE, req_id: Any = 1) -> Offline:
    """Run one whole exchange against ``worker``'s acts; returns the offline driver."""
    body = jsonrpc.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
    req = jsonrpc.parse_request(body)
    info = jsonrpc.lookup_method(method)
    assert isinstance(req, jsonrpc.Request) and info is not None
    ex = JsonRpcExchange(req, body, info, CARD, Policy("w", mode=mode, resubscribe_attempts=2))
    offline = Offline("w", ledger or Ledger(), req_id=req_id)
    offline.worker.extend(worker)
    offline.gen = ex.run()  # type: ignore[attr-defined]  kept for tests that resume it
    offline.run(offline.gen)  # type: ignore[attr-defined]
    return offline


def results(offline: Offline) -> list[Any]:
    return [o.doc.get("result", o.doc.get("error")) for o in offline.outputs if o.doc is not None]


def counted(offline: Offline, metric: str) -> list[tuple[str, ...]]:
    return [c.labels for c in offline.counts if c.metric == metric]


def task(tid: str, state: str) -> dict[str, Any]:
    return {"id": tid, "contextId": "c-1", "status": {"state": state}}


def status(tid: str, state: str) -> dict[str, Any]:
    return {"statusUpdate": {"taskId": tid, "contextId": "c-1", "status": {"state": state}}}


class TestWriteBeforeForward:
    def test_each_event_is_loaded_judged_and_stored_before_it_is_queued(self):
        book = play("SendStreamingMessage", V10_SEND,
                    [{"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}]}, {"end": True}])
        kinds = [type(c) for c in book.commands if type(c) in (Open, Load, Store, StoreAndAppend, Emit, EndStream)]
        assert kinds[:4] == [Open, Load, StoreAndAppend, Emit]  # the record and the window in one write
        assert book.ledger.get("w", "t-1") is not None


class TestCutStream:
    """F08 (ii): a worker stream that ends before its task did is never passed off as done."""

    def test_cut_then_terminal_get_task_sends_one_last_snapshot_and_closes(self):
        book = play("SendStreamingMessage", V10_SEND, [
            {"open": True}, {"events": [{"task": task("t-2", "TASK_STATE_WORKING")}]}, {"cut": True},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-2", "TASK_STATE_COMPLETED")}},
        ])
        assert results(book) == [{"task": task("t-2", "TASK_STATE_WORKING")},
                                 {"task": task("t-2", "TASK_STATE_COMPLETED")}]
        assert counted(book, "resubscribes") == [("terminal_snapshot",)]
        assert counted(book, "forced_gets") == [("upstream_eof",)]
        assert [type(c) for c in book.commands].count(Open) == 1  # no resubscribe

    def test_cut_then_live_task_resubscribes_and_drops_the_repeated_snapshot(self):
        book = play("SendStreamingMessage", V10_SEND, [
            {"open": True}, {"events": [{"task": task("t-3", "TASK_STATE_WORKING")}]}, {"end": True},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-3", "TASK_STATE_WORKING")}},
            {"open": True}, {"events": [{"task": task("t-3", "TASK_STATE_WORKING")},
                                        status("t-3", "TASK_STATE_COMPLETED")]}, {"end": True},
        ])
        assert results(book) == [{"task": task("t-3", "TASK_STATE_WORKING")},
                                 status("t-3", "TASK_STATE_COMPLETED")]
        opens = [c for c in book.commands if type(c) is Open]
        assert len(opens) == 2 and b'"SubscribeToTask"' in opens[1].body
        assert counted(book, "resubscribes") == [("resubscribed",)]

    def test_the_probe_and_the_resubscribe_say_why_and_the_timeline_keeps_the_course(self):
        """docs/observability.md §1.2, §2.1: the gateway's own requests carry their reason (the
        driver's client spans), and the timeline holds the first state, the probe and the end —
        not the repeated snapshot the resubscribe started with."""
        book = play("SendStreamingMessage", V10_SEND, [
            {"open": True}, {"events": [{"task": task("t-3", "TASK_STATE_WORKING")}]}, {"end": True},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-3", "TASK_STATE_WORKING")}},
            {"open": True}, {"events": [{"task": task("t-3", "TASK_STATE_WORKING")},
                                        status("t-3", "TASK_STATE_COMPLETED")]}, {"end": True},
        ])
        own = [(type(c).__name__, c.reason) for c in book.commands if type(c) in (Post, Open)]
        assert own == [("Open", None), ("Post", "upstream_eof"), ("Open", "resubscribe")]
        course = [(tid, e.direction, e.state, e.forced_get) for tid, e in book.timeline]
        assert course == [("t-3", "event", "TASK_STATE_WORKING", None),
                          ("t-3", "probe", "TASK_STATE_WORKING", "upstream_eof"),
                          ("t-3", "event", "TASK_STATE_COMPLETED", None)]

    def test_a_worker_that_stays_away_is_given_up_on_with_an_error_event(self):
        unreachable = {"fail": "connect"}
        book = play("SendStreamingMessage", V10_SEND, [
            {"open": True}, {"events": [{"task": task("t-4", "TASK_STATE_WORKING")}]}, {"cut": True},
            unreachable, unreachable, unreachable, unreachable,  # 2 attempts: probe + resubscribe each
        ])
        last = book.outputs[-1]
        assert last.event == "error" and last.doc["error"]["code"] == jsonrpc.INTERNAL_ERROR
        assert "could not be resumed" in last.doc["error"]["message"]
        assert counted(book, "resubscribes") == [("gave_up",)]
        assert [type(c) for c in book.commands].count(Post) == 2


TERMINAL_SPELLINGS = [
    ("TASK_STATE_COMPLETED", ["completed", "COMPLETED", "Completed", "TASK_STATE_COMPLETED"]),
    ("TASK_STATE_FAILED", ["failed", "FAILED", "TASK_STATE_FAILED"]),
    ("TASK_STATE_CANCELED", ["canceled", "cancelled", "TASK_STATE_CANCELLED", "TASK_STATE_CANCELED"]),
    ("TASK_STATE_REJECTED", ["rejected", "Rejected", "TASK_STATE_REJECTED"]),
]
CASES = [(canonical, raw) for canonical, raws in TERMINAL_SPELLINGS for raw in raws]
ABSENT = object()


class TestEndOfStreamSignal:
    """F17 (a): every terminal state × spelling × final true/false/absent × both versions."""

    @pytest.mark.parametrize("final", [True, False, ABSENT], ids=["final-true", "final-false", "final-absent"])
    @pytest.mark.parametrize(("canonical", "raw"), CASES)
    def test_v03_client_gets_final_true_and_its_stream_ends(self, canonical, raw, final):
        event = {"kind": "status-update", "taskId": "t-5", "contextId": "c-1", "status": {"state": raw}}
        if final is not ABSENT:
            event["final"] = final
        book = play("message/stream", V03_SEND, [
            {"open": True}, {"events": [{"kind": "task", **task("t-5", "working")}, event]}])
        [*_, last] = results(book)
        assert last["final"] is True
        assert last["status"]["state"] == canonical.removeprefix("TASK_STATE_").lower()
        assert EndStream() in book.commands  # the client's stream ended; the worker's still open

    @pytest.mark.parametrize("final", [True, False], ids=["final-true", "final-false"])
    @pytest.mark.parametrize(("canonical", "raw"), CASES)
    def test_v10_client_never_gets_final(self, canonical, raw, final):
        event = {"statusUpdate": {"taskId": "t-6", "contextId": "c-1", "status": {"state": raw}, "final": final}}
        book = play("SendStreamingMessage", V10_SEND, [
            {"open": True}, {"events": [{"task": task("t-6", "TASK_STATE_WORKING")}, event]}])
        [*_, last] = results(book)
        assert "final" not in last["statusUpdate"]
        assert last["statusUpdate"]["status"]["state"] == canonical
        assert EndStream() in book.commands

    def test_v03_final_true_on_working_does_not_end_the_clients_stream_early(self):
        working = {"kind": "status-update", "taskId": "t-7", "contextId": "c-1",
                   "status": {"state": "working"}, "final": True}
        done = {**working, "status": {"state": "completed"}, "final": False}
        book = play("message/stream", V03_SEND, [
            {"open": True}, {"events": [{"kind": "task", **task("t-7", "working")}, working, done]}])
        finals = [r.get("final") for r in results(book)[1:]]
        assert finals == [False, True]
        assert [f.kind for f in book.findings].count("final_flag") == 2

    @pytest.mark.parametrize("state", ["working", "submitted"])
    def test_v03_non_final_status_always_carries_final_false(self, state):
        """a2a-sdk 0.3 clients refuse a status-update without ``final``."""
        event = {"kind": "status-update", "taskId": "t-8", "contextId": "c-1", "status": {"state": state}}
        book = play("message/stream", V03_SEND, [
            {"open": True}, {"events": [{"kind": "task", **task("t-8", "working")}, event]}, {"end": True}])
        assert results(book)[1]["final"] is False

    @pytest.mark.parametrize("raw", ["input-required", "INPUT_REQUIRED", "auth-required"])
    def test_v03_interrupted_status_is_final_and_ends_the_clients_stream(self, raw):
        """v0.3 clients wait for the close, not for ``final``: the gateway ends the stream even
        while the worker holds its socket (no act after the event: the worker is silent)."""
        event = {"kind": "status-update", "taskId": "t-9", "contextId": "c-1",
                 "status": {"state": raw}, "final": False}
        book = play("message/stream", V03_SEND, [
            {"open": True}, {"events": [{"kind": "task", **task("t-9", "working")}, event]}])
        assert results(book)[1]["final"] is True
        assert book.commands[-1] == EndStream() and book.value.close_reason == "interrupted"

    def test_v10_interrupted_status_leaves_the_stream_to_the_worker(self):
        event = status("t-10", "TASK_STATE_INPUT_REQUIRED")
        book = play("SendStreamingMessage", V10_SEND, [
            {"open": True}, {"events": [{"task": task("t-10", "TASK_STATE_WORKING")}, event]}])
        assert type(book.commands[-1]) is Read  # still reading: the worker decides


class TestStreamingRefusals:
    """F17 (b): a refusal of a streaming call in the form the client's version reads."""

    def _terminal_ledger(self) -> Ledger:
        ledger = Ledger()
        book = play("GetTask", {"id": "t-9"}, [
            {"answer": {"jsonrpc": "2.0", "id": 1, "result": task("t-9", "TASK_STATE_COMPLETED")}}],
            ledger=ledger)
        assert book.ledger.get("w", "t-9").terminal
        return ledger

    @pytest.mark.parametrize(("method", "params"), [
        ("tasks/resubscribe", {"id": "t-9"}),
        ("message/stream", {"message": {**V03_SEND["message"], "taskId": "t-9"}}),
    ])
    def test_v03_gets_one_sse_error_event(self, method, params):
        book = play(method, params, [], ledger=self._terminal_ledger(), req_id="r-1")
        [respond] = [c for c in book.commands if type(c) is Respond]
        assert (respond.status, respond.media) == (200, "sse")
        [out] = book.outputs
        assert out.doc["id"] == "r-1" and out.doc["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION
        assert "new task" in out.doc["error"]["message"]

    def test_a_workers_own_json_refusal_reaches_a_v03_client_as_one_sse_event(self):
        refusal = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32004, "message": "Task is terminal"}}
        book = play("tasks/resubscribe", {"id": "t-x"}, [{"answer": refusal}])
        [respond] = [c for c in book.commands if type(c) is Respond]
        assert (respond.status, respond.media) == (200, "sse") and respond.relay is not None
        assert book.outputs[0].doc == refusal

    @pytest.mark.parametrize(("method", "params"), [
        ("SubscribeToTask", {"id": "t-9"}),
        ("SendStreamingMessage", {"message": {**V10_SEND["message"], "taskId": "t-9"}}),
    ])
    def test_v10_gets_plain_json(self, method, params):
        book = play(method, params, [], ledger=self._terminal_ledger())
        [respond] = [c for c in book.commands if type(c) is Respond]
        assert (respond.status, respond.media) == (200, "json")
        assert book.outputs[0].doc["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION
        assert not [c for c in book.commands if type(c) in (Post, Open)]


NOW = Offline().now


def _input_required(tid: str) -> Ledger:
    """A task waiting for input, as the ledger holds it after its first reply."""
    ledger = Ledger()
    ledger.put(TaskRecord("w", tid, "c-1", TaskState.INPUT_REQUIRED, NOW - 1.0), 0)
    return ledger


class TestEveryEventRefused:
    """A worker that answers a follow-up to task t-1 with a new task t-2 (fasta2a 2.1.1 does,
    issue #27): unary, the client gets -32006 ``task_id_mismatch``; streamed, every event is
    dropped, and when the worker's stream ends with nothing delivered the client gets the same
    refusal as an error event — never an empty stream (docs/protocol.md §7)."""

    REFUSAL = "invalid agent response: task_id_mismatch: payload for t-2 on exchange of t-1"

    def _follow_up(self, version: ProtocolVersion) -> tuple[str, dict[str, Any]]:
        if version is ProtocolVersion.V1_0:
            return "SendStreamingMessage", {"message": {**V10_SEND["message"], "taskId": "t-1", "contextId": "c-1"}}
        return "message/stream", {"message": {**V03_SEND["message"], "taskId": "t-1", "contextId": "c-1"}}

    def test_unary_is_refused_with_32006(self):
        """The reference: what the streamed reply must say too."""
        book = play("SendMessage", self._follow_up(ProtocolVersion.V1_0)[1], [
            {"answer": {"jsonrpc": "2.0", "id": 1, "result": {"task": task("t-2", "TASK_STATE_COMPLETED")}}}],
            ledger=_input_required("t-1"))
        [out] = book.outputs
        assert (out.doc["error"]["code"], out.doc["error"]["message"]) == (-32006, self.REFUSAL)
        assert book.value.outcome == "invalid_agent_response"

    @pytest.mark.parametrize("version", [ProtocolVersion.V1_0, ProtocolVersion.V0_3], ids=["v1.0", "v0.3"])
    def test_a_stream_of_refused_events_ends_with_the_refusal(self, version):
        method, params = self._follow_up(version)
        t2 = task("t-2", "TASK_STATE_WORKING" if version is ProtocolVersion.V1_0 else "working")
        first = {"task": t2} if version is ProtocolVersion.V1_0 else {"kind": "task", **t2}
        last = (status("t-2", "TASK_STATE_COMPLETED") if version is ProtocolVersion.V1_0 else
                {"kind": "status-update", "taskId": "t-2", "contextId": "c-1", "status": {"state": "completed"},
                 "final": True})
        book = play(method, params, [{"open": True}, {"events": [first, last]}, {"end": True}],
                    ledger=_input_required("t-1"), req_id="f-1")
        [out] = book.outputs
        assert out.frame and out.event == "error"
        assert out.doc["id"] == "f-1" and "result" not in out.doc
        assert (out.doc["error"]["code"], out.doc["error"]["message"]) == (-32006, self.REFUSAL)
        if version is ProtocolVersion.V1_0:
            assert out.doc["error"]["data"][0]["reason"] == "INVALID_AGENT_RESPONSE"
        else:
            assert "data" not in out.doc["error"]  # v0.3 error objects carry no ErrorInfo
        assert (book.value.outcome, book.value.close_reason) == ("invalid_agent_response", "refused")
        assert [f.kind for f in book.findings] == ["task_id_mismatch", "task_id_mismatch"]
        assert book.ledger.get("w", "t-2") is None and book.ledger.get("w", "t-1").state is TaskState.INPUT_REQUIRED
        assert [type(c) for c in book.commands].count(Post) == 0  # no probe, no resubscribe: nothing was cut

    def test_a_cut_after_refused_events_is_refused_too(self):
        """The worker's connection drops instead of ending: the same — the reply was refused."""
        book = play(*self._follow_up(ProtocolVersion.V1_0), [
            {"open": True}, {"events": [{"task": task("t-2", "TASK_STATE_WORKING")}]}, {"cut": True}],
            ledger=_input_required("t-1"))
        [out] = book.outputs
        assert out.event == "error" and out.doc["error"]["message"] == self.REFUSAL

    def test_a_subscribe_answered_with_another_task_is_refused(self):
        ledger = Ledger()
        ledger.put(TaskRecord("w", "t-1", "c-1", TaskState.WORKING, NOW - 1.0), 0)
        book = play("SubscribeToTask", {"id": "t-1"}, [
            {"open": True}, {"events": [{"task": task("t-2", "TASK_STATE_WORKING")}]}, {"end": True}], ledger=ledger)
        [out] = book.outputs
        assert out.event == "error" and out.doc["error"]["message"] == self.REFUSAL

    def test_refused_events_after_delivered_ones_end_the_stream_as_before(self):
        """The partial case, unchanged: the client was told its task's state (here the worker
        asked for input again) and the stream ends there; the refused events are counted and
        logged as divergences, not sent."""
        book = play(*self._follow_up(ProtocolVersion.V1_0), [
            {"open": True}, {"events": [status("t-1", "TASK_STATE_INPUT_REQUIRED"),
                                        {"task": task("t-2", "TASK_STATE_WORKING")},
                                        status("t-2", "TASK_STATE_COMPLETED")]}, {"end": True}],
            ledger=_input_required("t-1"))
        assert results(book) == [status("t-1", "TASK_STATE_INPUT_REQUIRED")]
        assert book.value.outcome == "ok"
        assert [f.kind for f in book.findings] == ["task_id_mismatch", "task_id_mismatch"]

    def test_refused_events_after_a_delivered_working_state_are_handled_as_a_cut(self):
        """The partial case, unchanged: the client last heard "working", so the worker's end is
        a cut (F08 (ii)): probe, resubscribe, and an error event when that fails."""
        book = play(*self._follow_up(ProtocolVersion.V1_0), [
            {"open": True}, {"events": [status("t-1", "TASK_STATE_WORKING"),
                                        {"task": task("t-2", "TASK_STATE_WORKING")}]}, {"end": True},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-1", "TASK_STATE_INPUT_REQUIRED")}},
            {"fail": "connect"},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-1", "TASK_STATE_INPUT_REQUIRED")}},
            {"fail": "connect"},
        ], ledger=_input_required("t-1"))
        assert results(book)[0] == status("t-1", "TASK_STATE_WORKING")
        assert book.outputs[-1].event == "error" and book.outputs[-1].doc["error"]["code"] == jsonrpc.INTERNAL_ERROR
        assert counted(book, "resubscribes") == [("gave_up",)]

    def test_observe_mode_forwards_the_events(self):
        book = play(*self._follow_up(ProtocolVersion.V1_0), [
            {"open": True}, {"events": [{"task": task("t-2", "TASK_STATE_WORKING")},
                                        status("t-2", "TASK_STATE_COMPLETED")]}, {"end": True}],
            ledger=_input_required("t-1"), mode=Mode.OBSERVE)
        assert results(book) == [{"task": task("t-2", "TASK_STATE_WORKING")}, status("t-2", "TASK_STATE_COMPLETED")]
        assert all(o.event != "error" for o in book.outputs)


def _flagged_ledger(tid: str) -> Ledger:
    """A live task recorded before a restart: mark_resync flagged it (the record is unchanged)."""
    ledger = Ledger()
    ledger.put(TaskRecord("w", tid, "c-1", TaskState.WORKING, NOW - 1.0), 0)
    assert ledger.mark_resync() == 1
    return ledger


def _sent(tid: str, state: str) -> dict[str, Any]:
    return {"answer": {"jsonrpc": "2.0", "id": 1, "result": {"task": task(tid, state)}}}


class TestRestartResync:
    """The restart flag sits beside the record (Loaded.needs_resync): the next action on the task
    does one forced GetTask, and every store clears the flag."""

    def test_next_action_after_a_restart_asks_get_task_first_then_never_again(self):
        ledger = _flagged_ledger("t-r")
        params = {"message": {**V10_SEND["message"], "taskId": "t-r"}}
        book = play("SendMessage", params, [
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-r", "TASK_STATE_WORKING")}},
            _sent("t-r", "TASK_STATE_WORKING")], ledger=ledger)
        assert counted(book, "forced_gets") == [("restart",)]
        posts = [c for c in book.commands if type(c) is Post]
        assert b'"GetTask"' in posts[0].body and b'"SendMessage"' in posts[1].body
        stores = [c for c in book.commands if type(c) is Store]
        assert [c.expected_version for c in stores] == [1]  # the GetTask answer; then no news
        assert ledger.resync == set() and ledger.versions[("w", "", "t-r")] == 2
        book = play("SendMessage", params, [_sent("t-r", "TASK_STATE_COMPLETED")], ledger=ledger)
        assert counted(book, "forced_gets") == []  # resynced: no wasted poll
        assert ledger.get("w", "t-r").state is TaskState.COMPLETED and ledger.versions[("w", "", "t-r")] == 3

    def test_the_flag_is_cleared_even_when_the_worker_gives_no_task(self):
        ledger = _flagged_ledger("t-u")
        record = ledger.get("w", "t-u")
        params = {"message": {**V10_SEND["message"], "taskId": "t-u"}}
        book = play("SendMessage", params, [{"fail": "connect"}, _sent("t-u", "TASK_STATE_WORKING")],
                    ledger=ledger)
        assert counted(book, "forced_gets") == [("restart",)]
        first_store = next(c for c in book.commands if type(c) is Store)
        assert first_store == Store(record, 1)  # the record stored unchanged: only the flag goes
        assert ledger.resync == set()

    def test_a_payload_that_only_moves_the_time_still_clears_the_flag(self):
        ledger = _flagged_ledger("t-v")
        ex = Exchange("w", Operation.GET, ProtocolVersion.V1_0, "t-v")
        offline = Offline("w", ledger, now=NOW - 0.5)  # less than OBSERVATION_WRITE_SECONDS later
        assert offline.run(judge(Policy("w"), ex, None, task("t-v", "TASK_STATE_WORKING")))
        assert [type(c) for c in offline.commands if type(c) in (Load, Store)] == [Load, Store]
        assert ledger.resync == set()

    def test_a_ping_leaves_a_flagged_record_to_its_forced_get_task(self):
        ledger = _flagged_ledger("t-w")
        offline = Offline("w", ledger, now=NOW + 60.0)
        assert offline.run(touch("t-w"))
        assert not [c for c in offline.commands if type(c) is Store]
        assert ledger.resync == {("w", "", "t-w")}
        ledger.flag("w", "t-w", False)
        assert Offline("w", ledger, now=NOW + 60.0).run(touch("t-w"))
        assert ledger.get("w", "t-w").observed_at == NOW + 60.0 and ledger.versions[("w", "", "t-w")] == 2


def test_count_commands_name_real_metrics():
    """Every Count an exchange yields names an attribute of Metrics (checked by the sink)."""
    from gateway.observability.metrics import Metrics
    from prometheus_client import CollectorRegistry

    metrics = Metrics(CollectorRegistry())
    for name in ("upstream_errors", "forced_gets", "resubscribes", "error_rewrites", "rejections",
                 "sse_events", "unchecked", "ledger_conflicts"):
        assert hasattr(metrics, name), name
    assert Count("sse_events", ("task",)).labels == ("task",)


class TestReviewFindings:
    """Regressions found in review of the exchange layer, each pinned."""

    def test_observe_mode_relays_a_v03_interrupted_status_unchanged_and_keeps_reading(self):
        event = {"kind": "status-update", "taskId": "t-o", "contextId": "c-1",
                 "status": {"state": "input-required"}, "final": False}
        book = play("message/stream", V03_SEND, [
            {"open": True}, {"events": [{"kind": "task", **task("t-o", "working")}, event]}],
            mode=Mode.OBSERVE)
        assert results(book)[1]["final"] is False  # observe forwards the worker's bytes
        assert type(book.commands[-1]) is Read  # and leaves the stream to the worker

    def test_a_probe_between_answer_and_response_does_not_change_the_relayed_headers(self):
        """The Respond names the answer whose headers go along, not whatever came last."""
        error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom"}}
        book = play("CancelTask", {"id": "t-h"}, [
            {"answer": error},
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-h", "TASK_STATE_WORKING")}},
        ])
        [respond] = [c for c in book.commands if type(c) is Respond]
        assert respond.relay is not None and orjson.loads(respond.relay.content) == error
        assert [type(c) for c in book.commands].count(Post) == 2  # the answer, then the probe

    def test_a_terminal_probe_answer_that_is_not_an_object_is_no_snapshot(self):
        """The ledger turned terminal (another stream) while this one was cut, and the worker's
        GetTask result is not an object: no snapshot is made of it; the stream gives up cleanly."""
        book = play("SendStreamingMessage", V10_SEND, [
            {"open": True}, {"events": [{"task": task("t-s", "TASK_STATE_WORKING")}]}, {"cut": True}])
        assert type(book.commands[-1]) is Post  # waiting for the probe's answer
        working = book.ledger.get("w", "t-s")
        done = dataclasses.replace(working, state=TaskState.COMPLETED,
                                   terminal_status={"state": "TASK_STATE_COMPLETED"})
        book.ledger.put(done, book.ledger.versions[("w", "", "t-s")])
        book.worker.extend([{"answer": {"jsonrpc": "2.0", "id": "p", "result": "completed"}},
                            {"fail": "connect"}, {"fail": "connect"}, {"fail": "connect"}])
        book.resume(book.gen)
        assert book.outputs[-1].event == "error"
        assert all(o.doc.get("result", {}).get("task", {}).get("status", {}).get("state")
                   != "TASK_STATE_COMPLETED" for o in book.outputs if o.doc)


class TestF22ProgressIsNoDivergence:
    """docs/field-cases.md F22: the forced GetTask before an action finds the task in a state
    the gateway had not seen: progress along the lifecycle is a debug line, a contradiction a
    ``stale_record`` divergence."""

    @staticmethod
    def _recorded(state: TaskState) -> Ledger:
        ledger = Ledger()
        ledger.put(TaskRecord("w", "t-22", "c-1", state, NOW - 1.0), 0)
        ledger.mark_resync()  # the gateway restarted: the next action asks GetTask first
        return ledger

    def test_f22_submitted_then_completed_is_progress(self):
        params = {"message": {**V10_SEND["message"], "taskId": "t-22"}}
        book = play("SendMessage", params, [
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-22", "TASK_STATE_COMPLETED")}}],
            ledger=self._recorded(TaskState.SUBMITTED))
        assert counted(book, "forced_gets") == [("restart",)]
        assert results(book)[0]["code"] == -32004  # now known completed: answered by the gateway
        assert [f.kind for f in book.findings if f.category == "divergence"] == []
        [moved] = [c for c in book.commands if type(c) is Log and c.event == "task_moved_on"]
        assert dict(moved.fields)["recorded"] == "TASK_STATE_SUBMITTED" and moved.level == "debug"

    def test_f22_working_then_submitted_is_a_stale_record(self):
        params = {"message": {**V10_SEND["message"], "taskId": "t-22"}}
        book = play("SendMessage", params, [
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-22", "TASK_STATE_SUBMITTED")}},
            _sent("t-22", "TASK_STATE_WORKING")], ledger=self._recorded(TaskState.WORKING))
        assert [f.kind for f in book.findings if f.category == "divergence"] == ["stale_record"]
        assert not [c for c in book.commands if type(c) is Log and c.event == "task_moved_on"]
