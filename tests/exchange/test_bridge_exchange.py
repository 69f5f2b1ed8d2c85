"""The version bridge's exchanges as transcripts (gateway/exchange/bridge.py): no sockets.

Each test feeds a client request of one A2A version and a scripted worker of the other to
:class:`BridgedJsonRpcExchange` / :class:`BridgedRestExchange` (gateway/offline.py
performs the commands) and checks both edges: what the exchange sends the worker (in the
worker's version: method name or REST path, body, ``A2A-Version``), and what the client gets
back (in its own version). Expected values are written out by hand, never computed with the
bridge's own converters. docs/bridge.md §3."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.a2a import jsonrpc, rest
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.exchange.bridge import BridgedJsonRpcExchange, BridgedRestExchange, worker_version
from gateway.exchange.commands import Open, Post, Respond
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.model import Policy
from gateway.offline import Ledger, Offline
from gateway.invariants.admission import CardView
from gateway.invariants.model import TaskRecord
from gateway.a2a.states import TaskState
from gateway.proxy.driver import bridged_headers
from tests.exchange.test_rest_exchange import RestOffline

V03, V10 = ProtocolVersion.V0_3, ProtocolVersion.V1_0
JSONRPC, REST = Binding.JSONRPC, Binding.REST
CARD = CardView(doc={"capabilities": {"streaming": True, "pushNotifications": True}}, fresh=True,
                reachable=True, etag=None)
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
PROBE = "a2a-gateway-probe"

# --- client payloads, each in its own version -------------------------------------------------

V03_MSG = {"kind": "message", "messageId": "m-1", "role": "user", "parts": [{"kind": "text", "text": "go"}]}
V10_MSG = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}
R03_MSG = {"messageId": "m-1", "role": "ROLE_USER", "content": [{"text": "go"}]}


def t10(tid: str, state: str, **extra: Any) -> dict[str, Any]:
    return {"id": tid, "contextId": "c-1", "status": {"state": state}, **extra}


def t03(tid: str, state: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "task", "id": tid, "contextId": "c-1", "status": {"state": state}, **extra}


def su10(tid: str, state: str) -> dict[str, Any]:
    return {"statusUpdate": {"taskId": tid, "contextId": "c-1", "status": {"state": state}}}


def su03(tid: str, state: str, final: bool) -> dict[str, Any]:
    return {"kind": "status-update", "taskId": tid, "contextId": "c-1", "status": {"state": state}, "final": final}


def ok(result: Any, req_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "result": result}


def terminal_ledger(tid: str, state: TaskState = TaskState.COMPLETED) -> Ledger:
    ledger = Ledger()
    ledger.put(TaskRecord("w", tid, "c-1", state, Offline().now - 5.0, terminal_status={"state": state.value}), 0)
    return ledger


# --- drivers ----------------------------------------------------------------------------------

def rpc(method: str, params: Any, worker: list[dict[str, Any]], to: ProtocolVersion, *, req_id: Any = 1,
        ledger: Ledger | None = None) -> Offline:
    body = jsonrpc.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
    req = jsonrpc.parse_request(body)
    info = jsonrpc.lookup_method(method)
    assert isinstance(req, jsonrpc.Request) and info is not None
    ex = BridgedJsonRpcExchange(req, body, info, CARD, Policy("w", resubscribe_attempts=2), to)
    book = Offline("w", ledger or Ledger(), req_id=req_id)
    book.worker.extend(worker)
    book.exchange = ex  # type: ignore[attr-defined]
    book.run(ex.run())
    return book


def rst(verb: str, path: str, body: Any, worker: list[dict[str, Any]], to: ProtocolVersion, *,
        header: str | None, query: str = "", ledger: Ledger | None = None) -> RestOffline:
    """A REST request; ``header`` is the client's A2A-Version (``None`` for a v0.3 client),
    ``query`` its raw query string."""
    call = rest.match(verb, path, header)
    assert call is not None
    call = type(call)(call.operation, call.version, call.base, call.task_id, call.config_id,
                      rest.carried_query(query.encode()))
    raw = b"" if body is None else orjson.dumps(body)
    doc = orjson.loads(raw) if raw else None
    ex = BridgedRestExchange(call, verb, raw, rest.request_params(call, doc), CARD,
                             Policy("w", resubscribe_attempts=2), to, query=query, doc=doc)
    book = RestOffline("w", ledger or Ledger())
    book.worker.extend(worker)
    book.exchange = ex  # type: ignore[attr-defined]
    book.run(ex.run())
    return book


def sent(book: Offline) -> list[Post | Open]:
    return [c for c in book.commands if type(c) in (Post, Open)]


def sent_json(cmd: Post | Open) -> Any:
    return orjson.loads(cmd.body) if cmd.body else None


def respond(book: Offline) -> Respond:
    [r] = [c for c in book.commands if type(c) is Respond]
    return r


def client_docs(book: Offline) -> list[Any]:
    return [o.doc for o in book.outputs if o.doc is not None]


def bridged(book: Offline) -> list[tuple[str, ...]]:
    return [c.labels for c in book.counts if c.metric == "bridged"]


# ============================================================================ worker_version

@pytest.mark.parametrize(("client", "binding", "speaks", "expected"), [
    (V03, JSONRPC, set(), None),                                  # nothing known: never bridged
    (V03, JSONRPC, {(V03, JSONRPC)}, None),                       # speaks the client's version
    (V03, JSONRPC, {(V10, JSONRPC)}, V10),
    (V10, JSONRPC, {(V03, JSONRPC)}, V03),
    (V10, REST, {(V03, REST)}, V03),
    (V03, REST, {(V10, REST)}, V10),
    (V03, JSONRPC, {(V03, JSONRPC), (V10, JSONRPC)}, None),       # both: proxied as it is
    (V03, REST, {(V10, JSONRPC)}, None),                          # never changes the binding
    (V10, JSONRPC, {(V03, REST)}, None),
    (V10, JSONRPC, {(V03, JSONRPC), (V10, REST)}, V03),           # per binding
    (V10, REST, {(V03, JSONRPC), (V10, REST)}, None),
])
def test_worker_version(client, binding, speaks, expected):
    assert worker_version(client, binding, speaks) is expected


# ============================================================================ bridged_headers

class TestBridgedHeaders:
    def test_a2a_version_is_replaced(self):
        out = bridged_headers([(b"host", b"x"), (b"a2a-version", b"0.3")], "1.0")
        assert out == [(b"host", b"x"), (b"a2a-version", b"1.0")]

    def test_a2a_version_is_removed_for_a_v03_worker(self):
        out = bridged_headers([(b"a2a-version", b"1.0"), (b"accept", b"*/*")], "")
        assert out == [(b"accept", b"*/*")]

    def test_a_missing_a2a_version_is_added_for_a_v10_worker(self):
        assert bridged_headers([], "1.0") == [(b"a2a-version", b"1.0")]

    def test_v03_extensions_header_is_copied_under_the_v10_name(self):
        out = bridged_headers([(b"x-a2a-extensions", b"urn:a, urn:b")], "1.0")
        assert out == [(b"x-a2a-extensions", b"urn:a, urn:b"), (b"a2a-extensions", b"urn:a, urn:b"),
                       (b"a2a-version", b"1.0")]

    def test_v10_extensions_header_is_copied_under_the_v03_name(self):
        out = bridged_headers([(b"a2a-extensions", b"urn:a"), (b"a2a-version", b"1.0")], "")
        assert out == [(b"a2a-extensions", b"urn:a"), (b"x-a2a-extensions", b"urn:a")]

    @pytest.mark.parametrize("version", ["", "0.3"])
    def test_a_v03_version_string_reads_the_v03_name(self, version):
        out = bridged_headers([(b"a2a-extensions", b"urn:a")], version)
        assert (b"x-a2a-extensions", b"urn:a") in out

    def test_the_wanted_name_already_present_is_not_copied_over(self):
        headers = [(b"a2a-extensions", b"urn:new"), (b"x-a2a-extensions", b"urn:old")]
        assert bridged_headers(headers, "1.0") == [*headers, (b"a2a-version", b"1.0")]
        assert bridged_headers(headers, "") == headers

    def test_no_extensions_header_adds_none(self):
        out = bridged_headers([(b"content-type", b"application/json")], "")
        assert out == [(b"content-type", b"application/json")]


# ============================================================================ JSON-RPC

class TestJsonRpcV03ClientToV10Worker:
    def test_send_goes_as_sendmessage_with_a2a_version_10_and_the_answer_comes_back_v03(self):
        book = rpc("message/send", {"message": V03_MSG}, [{"answer": ok({"task": t10("t-1", "TASK_STATE_WORKING")})}],
                   V10, req_id="r-1")
        [post] = sent(book)
        assert type(post) is Post and post.a2a_version == "1.0" and post.target is None
        assert sent_json(post) == {"jsonrpc": "2.0", "id": "r-1", "method": "SendMessage",
                                   "params": {"message": V10_MSG, "configuration": {"returnImmediately": False}}}
        r = respond(book)
        assert (r.status, r.media) == (200, "json")
        assert orjson.loads(r.body) == ok(t03("t-1", "working"), "r-1")
        assert bridged(book) == [("jsonrpc", "0.3", "1.0")]
        assert book.value.bridge == "0.3->1.0" and book.value.outcome == "ok"
        assert book.ledger.get("w", "t-1").state is TaskState.WORKING

    def test_a_canonical_answer_is_still_re_encoded_not_relayed(self):
        book = rpc("tasks/get", {"id": "t-1"}, [{"answer": ok(t10("t-1", "TASK_STATE_CANCELED"))}], V10)
        [post] = sent(book)
        assert sent_json(post)["method"] == "GetTask" and sent_json(post)["params"] == {"id": "t-1"}
        r = respond(book)
        assert r.body != r.relay.content
        assert orjson.loads(r.body)["result"] == t03("t-1", "canceled")

    def test_a_worker_error_gets_v03_data(self):
        error = {"code": -32001, "message": "no such task",
                 "data": [{"@type": ERROR_INFO, "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org",
                           "metadata": {"taskId": "t-9"}}]}
        book = rpc("tasks/get", {"id": "t-9"}, [{"answer": {"jsonrpc": "2.0", "id": 1, "error": error}}], V10)
        assert client_docs(book) == [{"jsonrpc": "2.0", "id": 1,
                                      "error": {"code": -32001, "message": "no such task", "data": {"taskId": "t-9"}}}]

    def test_stream_events_carry_final_for_the_v03_client(self):
        book = rpc("message/stream", {"message": V03_MSG}, [
            {"open": True},
            {"events": [{"task": t10("t-2", "TASK_STATE_SUBMITTED")}, su10("t-2", "TASK_STATE_WORKING"),
                        su10("t-2", "TASK_STATE_INPUT_REQUIRED")]},
            {"end": True}], V10)
        [open_] = sent(book)
        assert type(open_) is Open and open_.a2a_version == "1.0"
        assert sent_json(open_)["method"] == "SendStreamingMessage"
        assert [d["result"] for d in client_docs(book)] == [
            t03("t-2", "submitted"), su03("t-2", "working", False), su03("t-2", "input-required", True)]

    def test_a_cut_stream_is_probed_and_resubscribed_in_v10(self):
        book = rpc("message/stream", {"message": V03_MSG}, [
            {"open": True}, {"events": [{"task": t10("t-3", "TASK_STATE_WORKING")}]}, {"cut": True},
            {"answer": ok(t10("t-3", "TASK_STATE_WORKING"), PROBE)},
            {"open": True}, {"events": [{"task": t10("t-3", "TASK_STATE_WORKING")},
                                        su10("t-3", "TASK_STATE_COMPLETED")]}, {"end": True},
        ], V10, req_id=5)
        first, probe, again = sent(book)
        assert (type(probe), probe.a2a_version, type(again), again.a2a_version) == (Post, "1.0", Open, "1.0")
        assert sent_json(probe) == {"jsonrpc": "2.0", "id": PROBE, "method": "GetTask",
                                    "params": {"id": "t-3", "historyLength": 0}}
        assert sent_json(again) == {"jsonrpc": "2.0", "id": 5, "method": "SubscribeToTask", "params": {"id": "t-3"}}
        assert [d["result"] for d in client_docs(book)] == [t03("t-3", "working"), su03("t-3", "completed", True)]
        assert [c.labels for c in book.counts if c.metric == "resubscribes"] == [("resubscribed",)]

    def test_a_cut_stream_whose_probe_says_terminal_ends_with_a_v03_snapshot(self):
        book = rpc("message/stream", {"message": V03_MSG}, [
            {"open": True}, {"events": [{"task": t10("t-3", "TASK_STATE_WORKING")}]}, {"cut": True},
            {"answer": ok(t10("t-3", "TASK_STATE_FAILED"), PROBE)},
        ], V10)
        assert [d["result"] for d in client_docs(book)] == [t03("t-3", "working"), t03("t-3", "failed")]
        assert [type(c) for c in sent(book)] == [Open, Post]

    def test_follow_up_to_a_terminal_task_is_refused_in_v03_without_a_post(self):
        book = rpc("message/send", {"message": {**V03_MSG, "taskId": "t-5", "contextId": "c-1"}}, [], V10,
                   ledger=terminal_ledger("t-5"))
        assert sent(book) == []
        [doc] = client_docs(book)
        assert doc["id"] == 1 and doc["error"]["code"] == -32004
        assert "t-5" in doc["error"]["message"] and "new task" in doc["error"]["message"]
        assert "data" not in doc["error"]  # the gateway's v0.3 refusals carry no ErrorInfo
        assert bridged(book) == [("jsonrpc", "0.3", "1.0")]


class TestJsonRpcV10ClientToV03Worker:
    def test_send_goes_as_message_send_without_a2a_version(self):
        book = rpc("SendMessage", {"message": V10_MSG}, [{"answer": ok(t03("t-1", "submitted"))}], V03)
        [post] = sent(book)
        assert post.a2a_version == ""
        assert sent_json(post) == {"jsonrpc": "2.0", "id": 1, "method": "message/send",
                                   "params": {"message": V03_MSG, "configuration": {"blocking": True}}}
        assert client_docs(book) == [ok({"task": t10("t-1", "TASK_STATE_SUBMITTED")})]
        assert bridged(book) == [("jsonrpc", "1.0", "0.3")]

    def test_a_worker_error_gets_v10_error_info(self):
        error = {"code": -32002, "message": "cannot cancel", "data": {"taskId": "t-2"}}
        book = rpc("CancelTask", {"id": "t-2"}, [{"answer": {"jsonrpc": "2.0", "id": 1, "error": error}}], V03)
        assert sent_json(sent(book)[0])["method"] == "tasks/cancel"
        assert client_docs(book)[-1]["error"] == {
            "code": -32002, "message": "cannot cancel",
            "data": [{"@type": ERROR_INFO, "reason": "TASK_NOT_CANCELABLE", "domain": "a2a-protocol.org",
                      "metadata": {"taskId": "t-2"}}]}

    def test_list_tasks_is_refused_without_a_post(self):
        book = rpc("ListTasks", {}, [], V03, req_id="l-1")
        assert sent(book) == []
        [doc] = client_docs(book)
        assert doc["id"] == "l-1" and doc["error"]["code"] == -32004
        assert doc["error"]["data"][0]["reason"] == "UNSUPPORTED_OPERATION"
        assert book.value.outcome == "not_bridged"
        assert bridged(book) == [("jsonrpc", "1.0", "0.3")]

    def test_a_cut_stream_is_probed_and_resubscribed_in_v03(self):
        book = rpc("SendStreamingMessage", {"message": V10_MSG}, [
            {"open": True}, {"events": [t03("t-3", "working")]}, {"end": True},
            {"answer": ok(t03("t-3", "working"), PROBE)},
            {"open": True}, {"events": [t03("t-3", "working"), su03("t-3", "completed", True)]}, {"end": True},
        ], V03, req_id=7)
        first, probe, again = sent(book)
        assert sent_json(first)["method"] == "message/stream"
        assert (probe.a2a_version, again.a2a_version) == ("", "")
        assert sent_json(probe) == {"jsonrpc": "2.0", "id": PROBE, "method": "tasks/get",
                                    "params": {"id": "t-3", "historyLength": 0}}
        assert sent_json(again) == {"jsonrpc": "2.0", "id": 7, "method": "tasks/resubscribe",
                                    "params": {"id": "t-3"}}
        assert [d["result"] for d in client_docs(book)] == [{"task": t10("t-3", "TASK_STATE_WORKING")},
                                                           su10("t-3", "TASK_STATE_COMPLETED")]

    def test_final_is_dropped_and_events_after_terminal_are_not_delivered(self):
        book = rpc("SendStreamingMessage", {"message": V10_MSG}, [
            {"open": True}, {"events": [t03("t-4", "working"), su03("t-4", "canceled", True),
                                        su03("t-4", "completed", True)]}, {"end": True}], V03)
        assert [d["result"] for d in client_docs(book)] == [{"task": t10("t-4", "TASK_STATE_WORKING")},
                                                           su10("t-4", "TASK_STATE_CANCELED")]
        assert book.ledger.get("w", "t-4").state is TaskState.CANCELED

    def test_unknown_state_is_refused_32006(self):
        book = rpc("GetTask", {"id": "t-6"}, [{"answer": ok(t03("t-6", "paused"))}], V03, req_id="g")
        [doc] = client_docs(book)
        assert doc["id"] == "g" and doc["error"]["code"] == -32006 and "result" not in doc


class TestSubscribeStartsWithTheTask:
    """docs/bridge.md §3.2: a v1.0 subscribe starts with the current Task (SPEC §3.1.6); a v0.3
    worker's ``tasks/resubscribe`` need not send it (a2a-sdk 0.3 sends nothing before the next
    event), so the gateway asks ``tasks/get`` first, judges it as every probe, and sends that
    Task as the first event once the worker's stream is open (issue #27)."""

    def test_get_task_first_then_the_task_then_the_workers_events(self):
        book = rpc("SubscribeToTask", {"id": "t-3"}, [
            {"answer": ok(t03("t-3", "working"), PROBE)},
            {"open": True}, {"events": [su03("t-3", "completed", True)]}, {"end": True},
        ], V03, req_id=7)
        probe, subscribe = sent(book)
        assert (type(probe), probe.a2a_version, probe.reason) == (Post, "", "subscribe_snapshot")
        assert sent_json(probe) == {"jsonrpc": "2.0", "id": PROBE, "method": "tasks/get",
                                    "params": {"id": "t-3", "historyLength": 0}}
        assert type(subscribe) is Open and sent_json(subscribe) == {
            "jsonrpc": "2.0", "id": 7, "method": "tasks/resubscribe", "params": {"id": "t-3"}}
        assert client_docs(book) == [ok({"task": t10("t-3", "TASK_STATE_WORKING")}, 7),
                                     ok(su10("t-3", "TASK_STATE_COMPLETED"), 7)]
        assert [c.labels for c in book.counts if c.metric == "forced_gets"] == [("subscribe_snapshot",)]
        assert book.ledger.get("w", "t-3").state is TaskState.COMPLETED

    def test_the_workers_own_first_task_is_not_repeated(self):
        """@a2a-js/sdk 0.3 does send the Task first: the client still gets one."""
        book = rpc("SubscribeToTask", {"id": "t-3"}, [
            {"answer": ok(t03("t-3", "working"), PROBE)},
            {"open": True}, {"events": [t03("t-3", "working"), su03("t-3", "completed", True)]}, {"end": True},
        ], V03)
        assert [d["result"] for d in client_docs(book)] == [{"task": t10("t-3", "TASK_STATE_WORKING")},
                                                           su10("t-3", "TASK_STATE_COMPLETED")]

    def test_a_workers_first_task_that_moved_on_is_delivered(self):
        book = rpc("SubscribeToTask", {"id": "t-3"}, [
            {"answer": ok(t03("t-3", "submitted"), PROBE)},
            {"open": True}, {"events": [t03("t-3", "working")]}, {"end": True},
        ], V03)
        assert [d["result"] for d in client_docs(book)][:2] == [{"task": t10("t-3", "TASK_STATE_SUBMITTED")},
                                                               {"task": t10("t-3", "TASK_STATE_WORKING")}]

    def test_a_task_the_probe_finds_terminal_is_refused_without_subscribing(self):
        book = rpc("SubscribeToTask", {"id": "t-3"}, [{"answer": ok(t03("t-3", "canceled"), PROBE)}], V03)
        assert [type(c) for c in sent(book)] == [Post]
        r = respond(book)
        assert (r.status, r.media) == (200, "json")  # a v1.0 refusal of a stream is plain JSON (F17 (b))
        [doc] = client_docs(book)
        assert doc["error"]["code"] == -32004 and "t-3" in doc["error"]["message"]
        assert book.value.outcome == "rejected"
        assert book.ledger.get("w", "t-3").state is TaskState.CANCELED

    def test_no_task_from_the_probe_subscribes_as_before(self):
        missing = {"jsonrpc": "2.0", "id": PROBE, "error": {"code": -32001, "message": "Task not found"}}
        book = rpc("SubscribeToTask", {"id": "t-3"}, [
            {"answer": missing}, {"open": True}, {"events": [su03("t-3", "completed", True)]}, {"end": True},
        ], V03)
        assert [type(c) for c in sent(book)] == [Post, Open]
        assert [d["result"] for d in client_docs(book)] == [su10("t-3", "TASK_STATE_COMPLETED")]

    def test_a_subscription_the_worker_refuses_gets_its_error_and_no_snapshot(self):
        refusal = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Task not found"}}
        book = rpc("SubscribeToTask", {"id": "t-3"}, [
            {"answer": ok(t03("t-3", "input-required"), PROBE)}, {"answer": refusal},
            {"answer": ok(t03("t-3", "input-required"), PROBE)},  # F05 (c): does the error hide a terminal task?
        ], V03)
        r = respond(book)
        assert r.media == "json"
        assert [d["error"]["code"] for d in client_docs(book)] == [-32001]

    def test_rest_gets_the_v03_task_and_sends_a_stream_response(self):
        book = rst("POST", "/acme/tasks/t-3:subscribe", None, [
            {"body": t10("t-3", "TASK_STATE_WORKING")},
            {"open": True}, {"events": [{"statusUpdate": {"taskId": "t-3", "contextId": "c-1", "final": True,
                                                          "status": {"state": "TASK_STATE_CANCELLED"}}}]},
            {"end": True},
        ], V03, header="1.0")
        assert [(c.method, c.target, c.a2a_version) for c in sent(book)] == [
            ("GET", "/acme/v1/tasks/t-3?historyLength=0", ""), ("POST", "/acme/v1/tasks/t-3:subscribe", "")]
        assert client_docs(book) == [{"task": t10("t-3", "TASK_STATE_WORKING")}, su10("t-3", "TASK_STATE_CANCELED")]

    @pytest.mark.parametrize(("method", "to"), [("tasks/resubscribe", V10), ("SubscribeToTask", None)],
                             ids=["v0.3-client-to-v1.0-worker", "not-bridged"])
    def test_workers_that_send_the_task_themselves_get_no_get_task(self, method, to):
        """A v1.0 worker sends the Task first itself (a2a-sdk 1.3, @a2a-js/sdk 1.3)."""
        first = t10("t-3", "TASK_STATE_WORKING")
        worker = [{"open": True}, {"events": [{"task": first}]}, {"end": True}]
        if to is None:
            body = jsonrpc.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": "t-3"}})
            req = jsonrpc.parse_request(body)
            info = jsonrpc.lookup_method(method)
            ex = JsonRpcExchange(req, body, info, CARD, Policy("w", resubscribe_attempts=0))
            book = Offline("w", Ledger(), req_id=1)
            book.worker.extend(worker)
            book.run(ex.run())
        else:
            book = rpc(method, {"id": "t-3"}, worker, to)
        assert type(sent(book)[0]) is Open  # no GetTask of the gateway's own first
        assert "subscribe_snapshot" not in [c.reason for c in sent(book)]
        first_event = client_docs(book)[0]["result"]
        assert first_event == ({"task": first} if to is None else t03("t-3", "working"))  # the worker's own


# ============================================================================ REST

class TestRestV03ClientToV10Worker:
    def test_send_drops_v1_keeps_base_and_speaks_v10(self):
        book = rst("POST", "/acme/v1/message:send", {"message": R03_MSG, "configuration": {"blocking": True}},
                   [{"body": {"task": t10("t-1", "TASK_STATE_CANCELED")}}], V10, header=None)
        [post] = sent(book)
        assert (post.method, post.target, post.a2a_version) == ("POST", "/acme/message:send", "1.0")
        assert sent_json(post) == {"message": V10_MSG, "configuration": {"returnImmediately": False}}
        r = respond(book)
        assert (r.status, r.media) == (200, "json")
        assert orjson.loads(r.body) == {"task": t10("t-1", "TASK_STATE_CANCELLED")}  # PROTO03's double L
        assert bridged(book) == [("rest", "0.3", "1.0")]

    def test_the_query_is_carried_without_a2a_version(self):
        book = rst("GET", "/v1/tasks/t-1", None, [{"body": t10("t-1", "TASK_STATE_WORKING")}], V10, header=None,
                   query="historyLength=3&A2A-Version=0.3&tenant=x")
        [post] = sent(book)
        assert (post.method, post.target, post.body) == ("GET", "/tasks/t-1?historyLength=3&tenant=x", b"")

    def test_a_v10_error_becomes_a_v03_body_and_status(self):
        error = {"error": {"code": 404, "status": "NOT_FOUND", "message": "gone",
                           "details": [{"@type": ERROR_INFO, "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org"}]}}
        book = rst("GET", "/v1/tasks/t-9", None, [{"body": error, "status": 404}], V10, header=None)
        assert [(c.method, c.target) for c in sent(book)] == [("GET", "/tasks/t-9")]
        r = respond(book)
        assert r.status == 404
        assert orjson.loads(r.body) == {"code": -32001, "message": "gone", "type": "TaskNotFoundError"}

    def test_a_not_cancelable_error_keeps_the_v03_status(self):
        error = {"error": {"code": 400, "status": "FAILED_PRECONDITION", "message": "done",
                           "details": [{"@type": ERROR_INFO, "reason": "TASK_NOT_CANCELABLE",
                                        "domain": "a2a-protocol.org"}]}}
        book = rst("POST", "/v1/tasks/t-9:cancel", None, [{"body": error, "status": 400}], V10, header=None)
        r = respond(book)
        assert orjson.loads(r.body)["type"] == "TaskNotCancelableError"
        assert r.status == 409  # the v0.3 mapping (v1.0 would say 400)

    def test_a_cut_stream_is_probed_and_resubscribed_on_v10_paths(self):
        book = rst("POST", "/acme/v1/message:stream", {"message": R03_MSG}, [
            {"open": True}, {"events": [{"task": t10("t-3", "TASK_STATE_WORKING")}]}, {"cut": True},
            {"body": t10("t-3", "TASK_STATE_WORKING")},
            {"open": True}, {"events": [{"task": t10("t-3", "TASK_STATE_WORKING")},
                                        su10("t-3", "TASK_STATE_CANCELED")]}, {"end": True},
        ], V10, header=None, query="tenant=x&A2A-Version=0.3")
        first, probe, again = sent(book)
        assert (first.method, first.target, first.a2a_version) == ("POST", "/acme/message:stream?tenant=x", "1.0")
        assert (probe.method, probe.target, probe.a2a_version) == ("GET", "/acme/tasks/t-3?historyLength=0&tenant=x",
                                                                   "1.0")
        assert (again.method, again.target, again.a2a_version) == ("POST", "/acme/tasks/t-3:subscribe?tenant=x",
                                                                   "1.0")
        assert client_docs(book) == [
            {"task": t10("t-3", "TASK_STATE_WORKING")},
            {"statusUpdate": {"taskId": "t-3", "contextId": "c-1", "status": {"state": "TASK_STATE_CANCELLED"},
                              "final": True}}]

    def test_a_subscribe_405_falls_back_to_get_on_the_worker_path(self):
        book = rst("POST", "/v1/message:stream", {"message": R03_MSG}, [
            {"open": True}, {"events": [{"task": t10("t-3", "TASK_STATE_WORKING")}]}, {"end": True},
            {"body": t10("t-3", "TASK_STATE_WORKING")},
            {"raw": b"", "status": 405},
            {"open": True}, {"events": [su10("t-3", "TASK_STATE_COMPLETED")]}, {"end": True},
        ], V10, header=None)
        cmds = sent(book)
        assert [(c.method, c.target, c.a2a_version) for c in cmds[2:]] == [
            ("POST", "/tasks/t-3:subscribe", "1.0"), ("GET", "/tasks/t-3:subscribe", "1.0")]
        assert client_docs(book)[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


class TestRestV10ClientToV03Worker:
    def test_send_adds_v1_below_the_base_without_a2a_version(self):
        book = rst("POST", "/acme/message:send", {"message": V10_MSG},
                   [{"body": {"task": t10("t-1", "TASK_STATE_CANCELLED")}}], V03, header="1.0")
        [post] = sent(book)
        assert (post.method, post.target, post.a2a_version) == ("POST", "/acme/v1/message:send", "")
        assert sent_json(post) == {"message": R03_MSG, "configuration": {"blocking": True}}
        assert orjson.loads(respond(book).body) == {"task": t10("t-1", "TASK_STATE_CANCELED")}
        assert bridged(book) == [("rest", "1.0", "0.3")]

    def test_the_query_is_carried_without_a2a_version(self):
        book = rst("GET", "/tasks/t-1", None, [{"body": t10("t-1", "TASK_STATE_WORKING")}], V03, header="1.0",
                   query="A2A-Version=1.0&historyLength=2")
        assert [(c.method, c.target) for c in sent(book)] == [("GET", "/v1/tasks/t-1?historyLength=2")]

    def test_a_v03_error_becomes_a_v10_status_body(self):
        error = {"code": -32001, "message": "nope", "type": "TaskNotFoundError"}
        book = rst("GET", "/tasks/t-9", None, [{"body": error, "status": 404}], V03, header="1.0")
        r = respond(book)
        assert r.status == 404
        assert orjson.loads(r.body) == {"error": {
            "code": 404, "status": "NOT_FOUND", "message": "nope",
            "details": [{"@type": ERROR_INFO, "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org",
                         "metadata": {}}]}}
        assert book.value.outcome == "worker_error"

    def test_list_tasks_is_refused_without_a_post(self):
        book = rst("GET", "/tasks", None, [], V03, header="1.0", query="pageSize=5")
        assert sent(book) == []
        r = respond(book)
        doc = orjson.loads(r.body)
        assert r.status == 400 and doc["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"
        assert book.value.outcome == "not_bridged"
        assert bridged(book) == [("rest", "1.0", "0.3")]

    def test_a_cut_stream_is_probed_and_resubscribed_on_v03_paths(self):
        book = rst("POST", "/acme/message:stream", {"message": V10_MSG}, [
            {"open": True}, {"events": [{"task": t10("t-3", "TASK_STATE_WORKING")}]}, {"cut": True},
            {"body": t10("t-3", "TASK_STATE_WORKING")},
            {"open": True}, {"events": [{"task": t10("t-3", "TASK_STATE_WORKING")},
                                        {"statusUpdate": {"taskId": "t-3", "contextId": "c-1", "final": True,
                                                          "status": {"state": "TASK_STATE_CANCELLED"}}}]},
            {"end": True},
        ], V03, header="1.0")
        first, probe, again = sent(book)
        assert [(c.method, c.target, c.a2a_version) for c in (first, probe, again)] == [
            ("POST", "/acme/v1/message:stream", ""), ("GET", "/acme/v1/tasks/t-3?historyLength=0", ""),
            ("POST", "/acme/v1/tasks/t-3:subscribe", "")]
        assert client_docs(book) == [{"task": t10("t-3", "TASK_STATE_WORKING")}, su10("t-3", "TASK_STATE_CANCELED")]

    def test_a_follow_up_to_a_terminal_task_is_refused_in_v10_form(self):
        msg = {**V10_MSG, "taskId": "t-5", "contextId": "c-1"}
        book = rst("POST", "/message:send", {"message": msg}, [], V03, header="1.0", ledger=terminal_ledger("t-5"))
        assert sent(book) == []
        r = respond(book)
        doc = orjson.loads(r.body)
        assert r.status == 400
        assert doc["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"
        assert doc["error"]["details"][0]["metadata"] == {"taskId": "t-5"}


# ============================================================================ task generations (A2A v1.1 draft)
# docs/resume.md §3.5, docs/bridge.md §1.11: v0.3 has no generation, currentGeneration or
# ifGenerationMatch.

class TestGenerationsAcrossTheBridge:
    def test_jsonrpc_current_generation_is_dropped_towards_a_v03_worker(self):
        book = rpc("GetTask", {"id": "t-1", "currentGeneration": "5"},
                   [{"answer": ok(t03("t-1", "working"))}], V03)
        [post] = sent(book)
        assert sent_json(post)["params"] == {"id": "t-1"}
        assert client_docs(book) == [ok(t10("t-1", "TASK_STATE_WORKING"))]

    def test_rest_current_generation_rides_the_carried_query_to_a_v03_worker(self):
        book = rst("GET", "/tasks/t-1", None, [{"body": t10("t-1", "TASK_STATE_WORKING")}], V03, header="1.0",
                   query="currentGeneration=5")
        [post] = sent(book)
        assert (post.method, post.target) == ("GET", "/v1/tasks/t-1?currentGeneration=5")

    @pytest.mark.parametrize("binding", [JSONRPC, REST])
    def test_if_generation_match_is_dropped_towards_a_v03_worker(self, binding):
        params = {"message": {**V10_MSG, "taskId": "t-1"}, "configuration": {"ifGenerationMatch": "3"}}
        if binding is JSONRPC:
            book: Offline = rpc("SendMessage", params, [{"answer": ok(t03("t-1", "working"))}], V03)
            configuration = sent_json(sent(book)[0])["params"]["configuration"]
        else:
            book = rst("POST", "/message:send", params, [{"body": {"task": t10("t-1", "TASK_STATE_WORKING")}}],
                       V03, header="1.0")
            configuration = sent_json(sent(book)[0])["configuration"]
        assert configuration == {"blocking": True}

    def test_a_v10_workers_generations_never_reach_the_engine_of_a_v03_client(self):
        ledger = Ledger()
        book = rpc("message/send", {"message": V03_MSG}, [{"answer": ok({"task": t10("t-1", "TASK_STATE_WORKING",
                                                                                      generation="3")})}],
                   V10, ledger=ledger)
        assert client_docs(book) == [ok(t03("t-1", "working"))]
        record = ledger.get("w", "t-1")
        assert record is not None and record.generation is None

    def test_a_generation_mismatch_reaches_a_v03_rest_client_as_an_internal_error(self):
        error = {"error": {"code": 409, "status": "ABORTED", "message": "mismatch",
                           "details": [{"@type": ERROR_INFO, "reason": "TASK_GENERATION_MISMATCH",
                                        "domain": "a2a-protocol.org", "metadata": {"currentGeneration": "5"}}]}}
        book = rst("GET", "/v1/tasks/t-9", None, [{"body": error, "status": 409}], V10, header=None)
        r = respond(book)
        assert orjson.loads(r.body) == {"code": -32010, "message": "mismatch", "type": "InternalError"}
        assert r.status == 500  # v0.3 names no such error: it reads back as -32603
