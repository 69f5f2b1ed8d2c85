"""The REST exchange as transcripts (gateway/exchange/rest.py): no sockets, no event loop.

Each test feeds a REST request (verb, path, body) and a scripted worker to the exchange the
gateway runs (gateway/offline.py performs its commands; the worker's stream events
here are bare StreamResponses, as REST sends them) and reads back the commands, what the
client received and what was reported. Field cases are named after docs/field-cases.md."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.a2a import jsonrpc, rest
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.sse import encode_event
from gateway.a2a.states import TaskState
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import LedgerError
from gateway.exchange.commands import (
    Answer, Emit, EndStream, Load, Log, Open, Post, Read, Respond, StartStream, Store, StoreAndAppend,
)
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.model import Policy
from gateway.offline import Ledger, Offline
from gateway.exchange.rest import RestExchange
from gateway.invariants.admission import CardView
from gateway.invariants.engine import CORRECTED_KEY
from gateway.invariants.model import Mode, TaskRecord

CARD = CardView(doc={"capabilities": {"streaming": True, "pushNotifications": True}}, fresh=True,
                reachable=True, etag=None)
NO_STREAMING = CardView(doc={"capabilities": {}}, fresh=True, reachable=True, etag=None)
NO_CARD = CardView(doc=None, fresh=False, reachable=False, etag=None)
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


class RestOffline(Offline):
    """:class:`Offline` with REST worker acts: ``{"body": <JSON>, "status": N}`` (or
    ``{"raw": bytes, "status": N, "json": bool}``) answers a Post / Open; ``{"events": [...]}``
    is one read of bare StreamResponses (``{"error": …}`` items go out as ``event: error``);
    ``{"bytes": b"…"}`` is one read of exactly these bytes. ``ledger_down``: every Load fails."""

    ledger_down: bool = False

    def _perform(self, cmd: Any) -> Any:
        if type(cmd) is Load and self.ledger_down:
            self._exc = LedgerError("ledger unavailable: disk gone")
            return None
        return super()._perform(cmd)

    def _act(self, kind: type, act: dict[str, Any]) -> Any:
        status = act.get("status", 200)
        if kind is not Read and "body" in act:
            return Answer(status, orjson.dumps(act["body"]))
        if kind is not Read and "raw" in act:
            return Answer(status, act["raw"], act.get("json", True))
        if kind is Read and "events" in act:
            return b"".join(encode_event(orjson.dumps(e), event="error" if "error" in e else None)
                            for e in act["events"])
        if kind is Read and "bytes" in act:
            return act["bytes"]
        return super()._act(kind, act)


def play(verb: str, path: str, body: Any = None, worker: list[dict[str, Any]] = (), *,
         ledger: Ledger | None = None, mode: Mode = Mode.ENFORCE, version: str | None = "1.0",
         card: CardView = CARD, ledger_down: bool = False) -> RestOffline:
    """Run one whole REST exchange against ``worker``'s acts; returns the offline driver."""
    call = rest.match(verb, path, version)
    assert call is not None, (verb, path)
    raw = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
    doc = orjson.loads(raw) if raw else None
    ex = RestExchange(call, verb, raw, rest.request_params(call, doc), card,
                      Policy("w", mode=mode, resubscribe_attempts=2))
    offline = RestOffline("w", ledger or Ledger())
    offline.ledger_down = ledger_down
    offline.worker.extend(worker)
    offline.exchange = ex  # type: ignore[attr-defined]
    offline.gen = ex.run()  # type: ignore[attr-defined]
    offline.run(offline.gen)  # type: ignore[attr-defined]
    return offline


def task(tid: str, state: str, **extra: Any) -> dict[str, Any]:
    return {"id": tid, "contextId": "c-1", "status": {"state": state}, **extra}


def status(tid: str, state: str) -> dict[str, Any]:
    return {"statusUpdate": {"taskId": tid, "contextId": "c-1", "status": {"state": state}}}


def send(task_id: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}
    if task_id:
        msg.update(taskId=task_id, contextId="c-1")
    return {"message": msg}


def status_body(http: int, reason: str) -> dict[str, Any]:
    return {"error": {"code": http, "status": "X", "message": "worker says no",
                      "details": [{"@type": ERROR_INFO, "reason": reason, "domain": "a2a-protocol.org"}]}}


def responds(book: Offline) -> list[Respond]:
    return [c for c in book.commands if type(c) is Respond]


def worker_cmds(book: Offline) -> list[Post | Open]:
    return [c for c in book.commands if type(c) in (Post, Open)]


def counted(book: Offline, metric: str) -> list[tuple[str, ...]]:
    return [c.labels for c in book.counts if c.metric == metric]


def data(book: Offline) -> list[Any]:
    """What the client's stream carried: each frame's JSON (errors included), in order."""
    return [o.doc for o in book.outputs if o.frame and o.doc is not None]


def terminal_ledger(tid: str = "t-5", state: TaskState = TaskState.COMPLETED) -> Ledger:
    ledger = Ledger()
    ledger.put(TaskRecord("w", tid, "c-1", state, Offline().now - 5.0,
                          terminal_status={"state": state.value}), 0)
    return ledger


def assert_refusal(respond: Respond, http: int, reason: str, task_id: str | None = None) -> dict[str, Any]:
    assert (respond.status, respond.media, respond.relay) == (http, "json", None)
    doc = orjson.loads(respond.body)
    assert doc["error"]["code"] == http
    [info] = doc["error"]["details"]
    assert info["@type"] == ERROR_INFO and info["reason"] == reason
    assert info["metadata"] == ({"taskId": task_id} if task_id else {})
    return doc


class TestWireForm:
    def test_the_clients_request_goes_on_as_it_came(self):
        body = orjson.dumps(send()) + b" "
        book = play("POST", "/acme/message:send", body, [{"body": {"task": task("t-1", "TASK_STATE_WORKING")}}])
        [post] = worker_cmds(book)
        assert post == Post(body, "POST", None)  # None: the client's own path and query
        [respond] = responds(book)
        assert (respond.status, respond.media) == (200, "raw") and respond.relay is not None
        assert respond.body == respond.relay.content  # nothing changed: the worker's own bytes

    @pytest.mark.parametrize(("verb", "path"), [("GET", "/tasks/t-1"), ("GET", "/tasks"),
                                                 ("DELETE", "/tasks/t-1/pushNotificationConfigs/p-1")])
    def test_bodiless_requests_keep_their_verb(self, verb, path):
        book = play(verb, path, None, [{"body": {}}])
        assert worker_cmds(book) == [Post(b"", verb, None)]

    def test_a_respelled_answer_is_re_encoded_and_keeps_the_workers_status_and_headers(self):
        book = play("GET", "/tasks/t-1", None, [{"body": task("t-1", "working"), "status": 203}])
        [respond] = responds(book)
        assert (respond.status, respond.media) == (203, "raw") and respond.relay.status == 203
        assert orjson.loads(respond.body) == task("t-1", "TASK_STATE_WORKING")
        assert [f.kind for f in book.findings] == ["v03_kebab"]

    def test_an_empty_2xx_answer_is_relayed_as_it_is(self):
        book = play("DELETE", "/tasks/t-1/pushNotificationConfigs/p-1", None, [{"raw": b"", "status": 204}])
        [respond] = responds(book)
        assert (respond.status, respond.body, respond.media) == (204, b"", "raw")

    def test_the_summary_names_the_binding_the_operation_and_the_ids(self):
        book = play("POST", "/message:send", send("t-1"), [{"body": {"task": task("t-1", "TASK_STATE_WORKING")}}])
        s = book.value
        assert (s.binding, s.method, s.task_id, s.context_id, s.outcome) == (
            Binding.REST, "SendMessage", "t-1", "c-1", "ok")
        ex = book.exchange.ex
        assert (ex.binding, ex.operation, ex.version, ex.task_id) == (Binding.REST, Operation.SEND,
                                                                      ProtocolVersion.V1_0, "t-1")

    def test_a_new_tasks_ids_come_from_the_answer(self):
        book = play("POST", "/message:send", send(), [{"body": {"task": task("t-2", "TASK_STATE_SUBMITTED")}}])
        assert (book.value.task_id, book.value.context_id) == ("t-2", "c-1")
        assert book.ledger.get("w", "t-2").state is TaskState.SUBMITTED


class TestWorkerAnswers:
    def test_f03_unknown_state_is_500_invalid_agent_response(self):
        book = play("GET", "/tasks/t-3", None, [{"body": task("t-3", "paused")}])
        [respond] = responds(book)
        assert_refusal(respond, 500, "INVALID_AGENT_RESPONSE")
        assert book.value.outcome == "invalid_agent_response"
        assert book.ledger.get("w", "t-3") is None

    @pytest.mark.parametrize(("status", "raw", "reason"), [
        (500, b"Traceback: secret", "status"), (503, b"", "status"), (200, b"<html>", "invalid_response"),
        (502, b'{"detail": "x"}', "status"), (500, b'["error"]', "status"),
    ])
    def test_f15_a_broken_answer_is_a_502_status_without_the_workers_body(self, status, raw, reason):
        book = play("GET", "/tasks/t-1", None, [{"raw": raw, "status": status}])
        [respond] = responds(book)
        doc = orjson.loads(respond.body)
        assert respond.status == 502 and doc["error"]["code"] == 502 and doc["error"]["status"] == "UNAVAILABLE"
        assert raw not in respond.body or not raw
        assert counted(book, "upstream_errors") == [(reason,)]
        assert book.value.outcome == "upstream_error"

    @pytest.mark.parametrize(("fail", "http", "name"), [("connect", 502, "UNAVAILABLE"),
                                                         ("timeout", 504, "DEADLINE_EXCEEDED")])
    def test_f15_a_transport_failure_is_502_or_504(self, fail, http, name):
        book = play("POST", "/tasks/t-1:cancel", None, [{"fail": fail}])
        [respond] = responds(book)
        assert respond.status == http
        err = orjson.loads(respond.body)["error"]
        assert (err["code"], err["status"]) == (http, name) and err["message"].startswith("upstream error: ")
        assert "details" not in err and book.value.outcome == "upstream_error"

    def test_a_workers_5xx_status_body_is_relayed(self):
        err = status_body(500, "INTERNAL_ERROR")
        book = play("GET", "/tasks/t-1", None, [{"body": err, "status": 500}])
        [respond] = responds(book)
        assert (respond.status, orjson.loads(respond.body), respond.media) == (500, err, "raw")

    def test_a_non_json_4xx_is_relayed_untouched(self):
        book = play("GET", "/tasks/t-1", None, [{"raw": b"forbidden", "status": 403, "json": False}])
        [respond] = responds(book)
        assert (respond.status, respond.body, respond.media) == (403, b"forbidden", "raw")
        assert book.value.outcome == "upstream_status"

    def test_observe_mode_forwards_an_unknown_state(self):
        book = play("GET", "/tasks/t-3", None, [{"body": task("t-3", "paused")}], mode=Mode.OBSERVE)
        [respond] = responds(book)
        assert respond.status == 200 and orjson.loads(respond.body)["status"]["state"] == "paused"
        assert [f.kind for f in book.findings] == ["unknown_state"]


class TestTerminalTask:
    """F05: actions on a task the ledger holds as terminal are answered here, in Status form."""

    @pytest.mark.parametrize(("verb", "path", "body", "reason"), [
        ("POST", "/message:send", send("t-5"), "UNSUPPORTED_OPERATION"),
        ("POST", "/message:stream", send("t-5"), "UNSUPPORTED_OPERATION"),
        ("POST", "/tasks/t-5:cancel", None, "TASK_NOT_CANCELABLE"),
        ("POST", "/tasks/t-5:subscribe", None, "UNSUPPORTED_OPERATION"),
        ("GET", "/tasks/t-5:subscribe", None, "UNSUPPORTED_OPERATION"),
    ])
    def test_f05_refused_without_forwarding(self, verb, path, body, reason):
        book = play(verb, path, body, [], ledger=terminal_ledger())
        assert worker_cmds(book) == []
        assert StartStream() not in book.commands  # a refused stream opens no event stream
        [respond] = responds(book)
        doc = assert_refusal(respond, 400, reason, "t-5")
        assert "TASK_STATE_COMPLETED" in doc["error"]["message"]
        assert book.value.outcome == "rejected"
        assert [(f.category, f.kind) for f in book.findings] == [("rejection", "terminal_task")]

    @pytest.mark.parametrize("path", ["/v1/tasks/t-5:cancel", "/acme/v1/tasks/t-5:subscribe"])
    def test_f05d_v03_refusal_spells_the_state_with_two_ls(self, path):
        book = play("POST", path, None, [], ledger=terminal_ledger(state=TaskState.CANCELED), version=None)
        [respond] = responds(book)
        doc = orjson.loads(respond.body)
        assert "TASK_STATE_CANCELLED" in doc["message"] and doc["code"] in (-32002, -32004)
        assert respond.status == (409 if path.endswith(":cancel") else 400)

    def test_observe_mode_forwards_and_keeps_the_finding(self):
        book = play("POST", "/tasks/t-5:cancel", None, [{"body": task("t-5", "TASK_STATE_COMPLETED")}],
                    ledger=terminal_ledger(), mode=Mode.OBSERVE)
        assert worker_cmds(book) == [Post(b"", "POST", None)]
        assert [f.kind for f in book.findings] == ["terminal_task"]

    @pytest.mark.parametrize(("status", "body", "code"), [
        (404, status_body(404, "TASK_NOT_FOUND"), "-32001"),
        (400, status_body(400, "INVALID_PARAMS"), "-32602"),
        (400, {"error": {"code": 400, "message": "no details"}}, "-32602"),
        (500, status_body(500, "INTERNAL_ERROR"), "-32603"),
    ])
    def test_f05c_worker_error_rewritten_after_a_get_on_the_clients_road(self, status, body, code):
        book = play("POST", "/acme/rest/message:send", send("t-5"), [
            {"body": body, "status": status},
            {"body": task("t-5", "TASK_STATE_COMPLETED")},
        ])
        first, probe = worker_cmds(book)
        assert first.target is None and first.method == "POST"
        assert probe == Post(b"", "GET", "/acme/rest/tasks/t-5?historyLength=0")
        [respond] = responds(book)
        assert_refusal(respond, 400, "UNSUPPORTED_OPERATION", "t-5")
        assert counted(book, "error_rewrites") == [(code, "-32004")]
        assert book.value.outcome == "rewritten"
        assert book.ledger.get("w", "t-5").terminal

    def test_f05c_cancel_error_rewritten_to_task_not_cancelable(self):
        book = play("POST", "/tasks/t-5:cancel", None, [
            {"body": status_body(404, "TASK_NOT_FOUND"), "status": 404},
            {"body": task("t-5", "TASK_STATE_REJECTED")},
        ])
        [respond] = responds(book)
        assert_refusal(respond, 400, "TASK_NOT_CANCELABLE", "t-5")
        assert counted(book, "error_rewrites") == [("-32001", "-32002")]

    @pytest.mark.parametrize("probe", [
        {"body": task("t-5", "TASK_STATE_WORKING")},
        {"fail": "connect"},
        {"raw": b"not json", "status": 404, "json": False},
        {"body": status_body(404, "TASK_NOT_FOUND"), "status": 404},
    ], ids=["live", "unreachable", "non-json", "not-found"])
    def test_f05c_worker_error_relayed_when_the_probe_does_not_confirm(self, probe):
        err = status_body(400, "INVALID_PARAMS")
        book = play("POST", "/message:send", send("t-5"), [{"body": err, "status": 400}, probe])
        [respond] = responds(book)
        assert (respond.status, respond.media, orjson.loads(respond.body)) == (400, "raw", err)
        assert respond.relay is not None and orjson.loads(respond.relay.content) == err
        assert counted(book, "error_rewrites") == []
        assert book.value.outcome == "worker_error"

    def test_f05c_a_worker_already_saying_the_right_thing_is_not_probed(self):
        err = status_body(400, "TASK_NOT_CANCELABLE")
        book = play("POST", "/tasks/t-5:cancel", None, [{"body": err, "status": 400}])
        assert len(worker_cmds(book)) == 1
        assert orjson.loads(responds(book)[0].body) == err

    def test_f05_regression_a_get_answering_working_is_corrected_to_the_recorded_state(self):
        book = play("GET", "/tasks/t-5", None, [{"body": task("t-5", "Working")}], ledger=terminal_ledger())
        [respond] = responds(book)
        view = orjson.loads(respond.body)
        assert view["status"]["state"] == "TASK_STATE_COMPLETED"
        assert view["metadata"][CORRECTED_KEY]["workerState"] == "TASK_STATE_WORKING"
        assert book.ledger.get("w", "t-5").state is TaskState.COMPLETED

    def test_a_flagged_record_is_probed_first_over_rest(self):
        ledger = Ledger()
        ledger.put(TaskRecord("w", "t-r", "c-1", TaskState.WORKING, Offline().now - 1.0), 0)
        assert ledger.mark_resync() == 1
        book = play("POST", "/acme/message:send", send("t-r"), [
            {"body": task("t-r", "TASK_STATE_COMPLETED")},  # the restart's forced GetTask
        ], ledger=ledger)
        [probe] = worker_cmds(book)
        assert probe == Post(b"", "GET", "/acme/tasks/t-r?historyLength=0")
        assert counted(book, "forced_gets") == [("restart",)]
        assert_refusal(responds(book)[0], 400, "UNSUPPORTED_OPERATION", "t-r")


class TestAdmission:
    def test_no_push_capability_is_400_push_notification_not_supported(self):
        card = CardView(doc={"capabilities": {}}, fresh=True, reachable=True, etag=None)
        book = play("DELETE", "/tasks/t-1/pushNotificationConfigs/p-1", None, [], card=card)
        assert worker_cmds(book) == []
        assert_refusal(responds(book)[0], 400, "PUSH_NOTIFICATION_NOT_SUPPORTED")

    def test_no_streaming_capability_is_400_unsupported_operation(self):
        book = play("POST", "/message:stream", send(), [], card=NO_STREAMING)
        assert worker_cmds(book) == []
        assert_refusal(responds(book)[0], 400, "UNSUPPORTED_OPERATION")
        assert book.value.outcome == "not_admitted"

    def test_no_card_refuses_a_new_task_with_503(self):
        book = play("POST", "/message:send", send(), [], card=NO_CARD)
        [respond] = responds(book)
        doc = orjson.loads(respond.body)
        assert respond.status == 503 and doc["error"]["code"] == 503 and doc["error"]["status"] == "UNAVAILABLE"

    def test_ledger_unavailable_is_503(self):
        book = play("POST", "/tasks/t-1:cancel", None, [], ledger_down=True)
        assert worker_cmds(book) == []
        [respond] = responds(book)
        assert respond.status == 503 and orjson.loads(respond.body)["error"]["status"] == "UNAVAILABLE"
        assert book.value.outcome == "ledger_error"
        assert any(type(c) is Log and c.event == "ledger_error" for c in book.commands)


class TestStream:
    def test_each_bare_event_is_judged_and_stored_before_it_is_queued(self):
        book = play("POST", "/message:stream", send(), [
            {"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}]}, {"end": True}])
        kinds = [type(c) for c in book.commands if type(c) in (Open, Load, Store, StoreAndAppend, Emit, EndStream)]
        assert kinds[:4] == [Open, Load, StoreAndAppend, Emit]  # the record and the window in one write
        assert worker_cmds(book)[0] == Open(orjson.dumps(send()), "POST", None)

    def test_an_unchanged_event_keeps_the_workers_text_a_changed_one_is_re_encoded(self):
        text = b'{"task": {"id":"t-1","contextId":"c-1","status":{"state":"TASK_STATE_WORKING"}}}'
        book = play("POST", "/message:stream", send(), [
            {"open": True}, {"bytes": b"data: " + text + b"\n\n"},
            {"events": [status("t-1", "completed")]}])
        frames = [c.frame for c in book.commands if type(c) is Emit]
        assert frames[0] == b"id: 1\ndata: " + text + b"\n\n"  # the gateway's event id (docs/resume.md §1.1)
        assert orjson.loads(frames[1].removeprefix(b"id: 2\ndata: ")) == status("t-1", "TASK_STATE_COMPLETED")
        assert EndStream() in book.commands

    def test_f03_unknown_state_ends_the_stream_with_a_status_error_event(self):
        book = play("POST", "/message:stream", send(), [
            {"open": True}, {"events": [{"task": task("t-3", "TASK_STATE_WORKING")}, status("t-3", "paused"),
                                        status("t-3", "TASK_STATE_COMPLETED")]}])
        assert [o.event for o in book.outputs] == [None, "error"]
        err = book.outputs[-1].doc["error"]
        assert err["code"] == 500 and err["details"][0]["reason"] == "INVALID_AGENT_RESPONSE"
        assert book.value.close_reason == "refused"

    def test_f04_events_after_the_terminal_one_are_read_but_never_delivered(self):
        book = play("POST", "/message:stream", send(), [
            {"open": True}, {"events": [{"task": task("t-4", "TASK_STATE_WORKING")},
                                        status("t-4", "TASK_STATE_CANCELED"),
                                        status("t-4", "TASK_STATE_COMPLETED")]}, {"end": True}])
        assert data(book) == [{"task": task("t-4", "TASK_STATE_WORKING")}, status("t-4", "TASK_STATE_CANCELED")]
        assert {f.kind for f in book.findings if f.category == "divergence"} == {"event_after_terminal",
                                                                                 "terminal_regression"}
        assert book.ledger.get("w", "t-4").state is TaskState.CANCELED

    def test_a_workers_error_event_is_relayed_as_an_error_event(self):
        err = status_body(500, "INTERNAL_ERROR")
        book = play("POST", "/message:stream", send(), [
            {"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_WORKING")}, err,
                                        status("t-1", "TASK_STATE_COMPLETED")]}])
        assert [(o.event, o.doc) for o in book.outputs[1:]] == [("error", err),
                                                                (None, status("t-1", "TASK_STATE_COMPLETED"))]
        assert counted(book, "sse_events")[1] == ("error",)

    def test_f09_a_non_json_event_ends_the_stream(self):
        book = play("POST", "/message:stream", send(), [
            {"open": True}, {"bytes": b"data: not-json\n\n"}])
        [out] = book.outputs
        assert out.event == "error" and out.doc["error"]["details"][0]["reason"] == "INVALID_AGENT_RESPONSE"

    def test_f09_a_plain_json_4xx_answer_to_a_stream_is_relayed(self):
        err = status_body(400, "VERSION_NOT_SUPPORTED")
        book = play("POST", "/message:stream", send(), [{"body": err, "status": 400}])
        [respond] = responds(book)
        assert (respond.status, respond.media, orjson.loads(respond.body)) == (400, "raw", err)
        assert StartStream() not in book.commands

    def test_f09_a_plain_json_result_to_a_stream_is_judged(self):
        book = play("GET", "/tasks/t-1:subscribe", None, [{"body": {"task": task("t-1", "completed")}}])
        [respond] = responds(book)
        assert orjson.loads(respond.body) == {"task": task("t-1", "TASK_STATE_COMPLETED")}
        assert book.ledger.get("w", "t-1").terminal

    def test_f17_v03_interrupted_status_ends_the_clients_stream_with_final(self):
        book = play("POST", "/v1/message:stream", send(), [
            {"open": True}, {"events": [{"task": task("t-9", "working")}, status("t-9", "input-required")]}],
            version=None)
        assert data(book)[-1]["statusUpdate"] == {"taskId": "t-9", "contextId": "c-1", "final": True,
                                                  "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}
        assert book.value.close_reason == "interrupted"

    @pytest.mark.parametrize(("path", "version"), [("/message:stream", "1.0"), ("/v1/message:stream", None)],
                             ids=["v1.0", "v0.3"])
    def test_a_stream_whose_every_event_is_refused_ends_with_the_refusal(self, path, version):
        """Issue #27: a follow-up to t-1 answered with a new task t-2 (fasta2a does) is refused
        unary with -32006; streamed, the client gets the same refusal as an error event in its
        version's REST error form, not an empty stream."""
        ledger = Ledger()
        ledger.put(TaskRecord("w", "t-1", "c-1", TaskState.INPUT_REQUIRED, Offline().now - 1.0), 0)
        book = play("POST", path, send("t-1"), [
            {"open": True}, {"events": [{"task": task("t-2", "TASK_STATE_WORKING")},
                                        status("t-2", "TASK_STATE_COMPLETED")]}, {"end": True}],
            ledger=ledger, version=version)
        [out] = book.outputs
        message = "invalid agent response: task_id_mismatch: payload for t-2 on exchange of t-1"
        assert out.event == "error"
        if version == "1.0":
            err = out.doc["error"]
            assert (err["code"], err["message"], err["details"][0]["reason"]) == (500, message,
                                                                                   "INVALID_AGENT_RESPONSE")
        else:
            assert out.doc == {"code": -32006, "message": message, "type": "InvalidAgentResponseError"}
        assert (book.value.outcome, book.value.close_reason) == ("invalid_agent_response", "refused")
        assert book.ledger.get("w", "t-2") is None


class TestCutStream:
    """F08 (ii): the probe and the resubscribe go on the client's road (base, ``/v1``)."""

    @pytest.mark.parametrize(("path", "version", "base"), [
        ("/message:stream", "1.0", ""), ("/acme/rest/message:stream", "1.0", "/acme/rest"),
        ("/v1/message:stream", None, "/v1"), ("/acme/v1/message:stream", None, "/acme/v1"),
        ("/v1/message:stream", "1.0", "/v1"),
    ])
    def test_cut_then_live_task_probes_and_resubscribes_dropping_the_repeated_snapshot(self, path, version, base):
        book = play("POST", path, send(), [
            {"open": True}, {"events": [{"task": task("t-3", "TASK_STATE_WORKING")}]}, {"end": True},
            {"body": task("t-3", "TASK_STATE_WORKING")},
            {"open": True}, {"events": [{"task": task("t-3", "TASK_STATE_WORKING")},
                                        status("t-3", "TASK_STATE_COMPLETED")]}, {"end": True},
        ], version=version)
        first, probe, resubscribe = worker_cmds(book)
        assert first.target is None
        assert probe == Post(b"", "GET", f"{base}/tasks/t-3?historyLength=0")
        assert resubscribe == Open(b"", "POST", f"{base}/tasks/t-3:subscribe")
        got = data(book)
        assert [next(iter(g)) for g in got] == ["task", "statusUpdate"]
        assert got[-1]["statusUpdate"]["status"] == {"state": "TASK_STATE_COMPLETED"}
        assert counted(book, "resubscribes") == [("resubscribed",)]
        assert counted(book, "forced_gets") == [("upstream_eof",)]

    def test_cut_then_terminal_get_sends_one_last_bare_task_snapshot(self):
        book = play("POST", "/acme/message:stream", send(), [
            {"open": True}, {"events": [{"task": task("t-2", "TASK_STATE_WORKING")}]}, {"cut": True},
            {"body": task("t-2", "completed")},
        ])
        assert data(book) == [{"task": task("t-2", "TASK_STATE_WORKING")},
                              {"task": task("t-2", "TASK_STATE_COMPLETED")}]
        assert [type(c) for c in worker_cmds(book)] == [Open, Post]
        assert counted(book, "resubscribes") == [("terminal_snapshot",)]

    def test_a_subscribe_cut_is_resumed_with_post(self):
        book = play("GET", "/tasks/t-6:subscribe", None, [
            {"open": True}, {"events": [{"task": task("t-6", "TASK_STATE_WORKING")}]}, {"end": True},
            {"body": task("t-6", "TASK_STATE_WORKING")},
            {"open": True}, {"events": [status("t-6", "TASK_STATE_FAILED")]},
        ])
        first, _, again = worker_cmds(book)
        assert first == Open(b"", "GET", None) and again == Open(b"", "POST", "/tasks/t-6:subscribe")
        assert data(book)[-1] == status("t-6", "TASK_STATE_FAILED")

    def test_a_worker_that_stays_away_is_given_up_on_with_a_status_error_event(self):
        down = {"fail": "connect"}
        book = play("POST", "/message:stream", send(), [
            {"open": True}, {"events": [{"task": task("t-4", "TASK_STATE_WORKING")}]}, {"cut": True},
            down, down, down, down,
        ])
        last = book.outputs[-1]
        assert last.event == "error" and last.doc["error"]["code"] == 500
        assert "could not be resumed" in last.doc["error"]["message"]
        assert counted(book, "resubscribes") == [("gave_up",)]

    def test_a_resubscribe_answered_with_json_counts_as_a_failed_attempt(self):
        busy = {"body": status_body(503, "INTERNAL_ERROR"), "status": 503}
        book = play("POST", "/message:stream", send(), [
            {"open": True}, {"events": [{"task": task("t-4", "TASK_STATE_WORKING")}]}, {"end": True},
            {"body": task("t-4", "TASK_STATE_WORKING")}, busy,
            {"body": task("t-4", "TASK_STATE_WORKING")}, busy,
        ])
        assert [c.method for c in worker_cmds(book)] == ["POST", "GET", "POST", "GET", "POST"]
        assert book.outputs[-1].event == "error"


class TestOneRecordWhateverTheBinding:
    def _rpc(self, method: str, params: Any, worker: list[dict[str, Any]], ledger: Ledger) -> Offline:
        body = jsonrpc.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        req = jsonrpc.parse_request(body)
        info = jsonrpc.lookup_method(method)
        ex = JsonRpcExchange(req, body, info, CARD, Policy("w"))
        book = Offline("w", ledger, req_id=1)
        book.worker.extend(worker)
        book.run(ex.run())
        return book

    def test_terminal_via_jsonrpc_refuses_rest_actions(self):
        ledger = Ledger()
        self._rpc("GetTask", {"id": "t-5"}, [
            {"answer": {"jsonrpc": "2.0", "id": 1, "result": task("t-5", "TASK_STATE_COMPLETED")}}], ledger)
        for verb, path, body in (("POST", "/message:send", send("t-5")), ("POST", "/tasks/t-5:cancel", None),
                                 ("GET", "/tasks/t-5:subscribe", None)):
            book = play(verb, path, body, [], ledger=ledger)
            assert worker_cmds(book) == [] and responds(book)[0].status == 400

    @pytest.mark.parametrize("method,params,code", [
        ("SendMessage", send("t-5"), jsonrpc.UNSUPPORTED_OPERATION),
        ("CancelTask", {"id": "t-5"}, jsonrpc.TASK_NOT_CANCELABLE),
        ("SubscribeToTask", {"id": "t-5"}, jsonrpc.UNSUPPORTED_OPERATION),
        ("message/send", {"message": {"kind": "message", "messageId": "m", "role": "user", "taskId": "t-5",
                                      "parts": [{"kind": "text", "text": "x"}]}}, jsonrpc.UNSUPPORTED_OPERATION),
    ])
    def test_terminal_via_a_rest_stream_refuses_jsonrpc_actions(self, method, params, code):
        ledger = Ledger()
        play("POST", "/message:stream", send(), [
            {"open": True}, {"events": [{"task": task("t-5", "TASK_STATE_WORKING")},
                                        status("t-5", "TASK_STATE_COMPLETED")]}], ledger=ledger)
        assert ledger.get("w", "t-5").terminal
        book = self._rpc(method, params, [], ledger)
        assert not [c for c in book.commands if type(c) in (Post, Open)]
        assert book.outputs[0].doc["error"]["code"] == code
