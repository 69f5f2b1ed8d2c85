"""A stream whose every event is refused ends with the refusal, through the real gateway
(docs/protocol.md §7, issue #27).

The worker ignores ``message.taskId`` on a follow-up and answers with a new task (fasta2a
2.1.1 does). Unary, the gateway refuses that answer with -32006 ``task_id_mismatch``; streamed,
it drops every event (each is about another task than the stream's), and once the worker's
stream ends the client gets that same refusal — code, message and error body as the unary
answer carries them — as one error event in its binding's and version's form, instead of
HTTP 200 and an empty stream. JSON-RPC and REST, v1.0 and v0.3 clients; a scripted worker
behind a real gateway (tests/proxy/conftest.py), a raw HTTP client.
"""

from __future__ import annotations

import uuid

from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from tests.proxy.conftest import Harness, frames
from tests.support.scripted_worker import Data, Event

V1 = {"A2A-Version": "1.0"}
SSE_ACCEPT = {"accept": "text/event-stream"}
REFUSAL = "invalid agent response: task_id_mismatch: payload for t-2 on exchange of t-1"
REQUESTS = "a2a_gateway_requests_total"


@dataclass(frozen=True)
class Form:
    """One binding and version: how the client asks, how the worker answers."""

    name: str
    binding: str  # "jsonrpc" | "rest"
    version: str  # "1.0" | "0.3"

    @property
    def headers(self) -> dict[str, str]:
        return V1 if self.version == "1.0" else {}

    def state(self, canonical: str) -> str:
        """``canonical`` (``working``) as this form's worker spells it."""
        if self.binding == "jsonrpc" and self.version == "0.3":
            return canonical.replace("_", "-")
        return "TASK_STATE_" + canonical.upper()

    def task(self, tid: str, state: str) -> dict[str, Any]:
        """A Task of context c-1 as this form's stream event and send answer carry it
        (JSON-RPC v0.3: the bare Task with ``kind``; the others ``{"task": …}``)."""
        body = {"id": tid, "contextId": "c-1", "status": {"state": self.state(state)}}
        if self.binding == "jsonrpc" and self.version == "0.3":
            return {"kind": "task", **body}
        return {"task": body}

    def status(self, tid: str, state: str) -> dict[str, Any]:
        update: dict[str, Any] = {"taskId": tid, "contextId": "c-1", "status": {"state": self.state(state)}}
        if self.version == "0.3":
            update["final"] = state == "completed"
        if self.binding == "jsonrpc" and self.version == "0.3":
            return {"kind": "status-update", **update}
        return {"statusUpdate": update}

    def message(self, task_id: str | None = None) -> dict[str, Any]:
        if self.binding == "jsonrpc" and self.version == "0.3":
            msg: dict[str, Any] = {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user",
                                   "parts": [{"kind": "text", "text": "more"}]}
        elif self.binding == "rest" and self.version == "0.3":
            msg = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "content": [{"text": "more"}]}
        else:
            msg = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "more"}]}
        if task_id:
            msg.update(taskId=task_id, contextId="c-1")
        return {"message": msg}


FORMS = [Form("jsonrpc-v1.0", "jsonrpc", "1.0"), Form("jsonrpc-v0.3", "jsonrpc", "0.3"),
         Form("rest-v1.0", "rest", "1.0"), Form("rest-v0.3", "rest", "0.3")]
METHODS = {("jsonrpc", "1.0"): ("SendMessage", "SendStreamingMessage"),
           ("jsonrpc", "0.3"): ("message/send", "message/stream")}
PATHS = {"1.0": ("/message:send", "/message:stream"), "0.3": ("/v1/message:send", "/v1/message:stream")}


class Client:
    """Sends a form's unary and streaming sends through the gateway, scripting the worker."""

    def __init__(self, h: Harness, form: Form) -> None:
        self.h, self.form = h, form

    def unary(self, answer: dict[str, Any], task_id: str | None = None, req_id: Any = "u-1") -> tuple[int, Any]:
        """A send; the worker answers ``answer``. Returns (HTTP status, JSON body)."""
        f, h = self.form, self.h
        if f.binding == "jsonrpc":
            method = METHODS[(f.binding, f.version)][0]
            h.worker.on(method, json_result=answer)
            r = h.rpc({"jsonrpc": "2.0", "id": req_id, "method": method, "params": f.message(task_id)},
                      headers=f.headers)
            return r.status_code, r.json()
        path = PATHS[f.version][0]
        h.worker.on_path("POST", path, json_body=answer)
        r, raw = h.rest("POST", path, json=f.message(task_id), headers=f.headers)
        return r.status_code, orjson.loads(raw)

    def stream(self, events: list[Any], task_id: str | None = None, req_id: Any = "s-1") -> tuple[Any, bytes]:
        """A streaming send; the worker streams ``events`` and ends. Returns (response, body)."""
        f, h = self.form, self.h
        if f.binding == "jsonrpc":
            method = METHODS[(f.binding, f.version)][1]
            h.worker.on(method, sse=[Event(result=e) for e in events])
            return h.stream({"jsonrpc": "2.0", "id": req_id, "method": method, "params": f.message(task_id)},
                            headers=f.headers)
        path = PATHS[f.version][1]
        h.worker.on_path("POST", path, sse=[Data(e) for e in events])
        return h.rest("POST", path, json=f.message(task_id), headers={**f.headers, **SSE_ACCEPT})

    def worker_calls(self, streaming: bool) -> int:
        f, h = self.form, self.h
        if f.binding == "jsonrpc":
            return len(h.worker.calls(METHODS[(f.binding, f.version)][int(streaming)]))
        return len(h.worker.path_calls("POST", PATHS[f.version][int(streaming)]))


def unary_error(form: Form, status: int, body: Any) -> Any:
    """The error of a unary refusal as the stream's error event carries it: JSON-RPC the
    error response (the ids differ: compared without), REST the whole error body."""
    if form.binding == "jsonrpc":
        assert status == 200 and "result" not in body
        return {k: v for k, v in body.items() if k != "id"}
    assert status >= 400
    return body


@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
def test_a_follow_up_answered_with_a_new_task_gets_the_unary_refusal_as_an_error_event(
        h: Harness, form: Form) -> None:
    client = Client(h, form)
    # the task the client follows up on: its first send asked for input
    status, body = client.unary(form.task("t-1", "input_required"))
    assert status == 200, body
    # unary: the worker answers the follow-up with another task — refused with -32006
    status, body = client.unary(form.task("t-2", "completed"), task_id="t-1")
    refusal = unary_error(form, status, body)
    assert REFUSAL in orjson.dumps(refusal).decode()
    before = h.metric(REQUESTS, outcome="invalid_agent_response")

    # streamed: every event the worker sends is about t-2
    resp, raw = client.stream([form.task("t-2", "working"), form.status("t-2", "completed")],
                              task_id="t-1", req_id="s-1")

    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream"), raw
    got = [f for f in frames(raw) if f["data"] is not None]
    assert len(got) == 1, f"want one error event, got {got}"
    [event] = got
    assert event["event"] == "error", raw
    if form.binding == "jsonrpc":
        assert event["data"]["id"] == "s-1"  # the client's id, as on every event
        assert {k: v for k, v in event["data"].items() if k != "id"} == refusal
        assert event["data"]["error"]["code"] == -32006
    else:
        assert event["data"] == refusal  # the REST error body of the client's version
    assert client.worker_calls(streaming=True) == 1  # the worker was asked, through the gateway
    assert h.metric(REQUESTS, outcome="invalid_agent_response") == before + 1
    assert h.divergences("task_id_mismatch") == 3  # the unary answer and both stream events
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", "t-1"))
    assert stored.record.state.value == "TASK_STATE_INPUT_REQUIRED"
    assert h.on_gateway_loop(h.runtime.ledger.get("worker", "t-2")) is None


@pytest.mark.parametrize("form", FORMS[:1] + FORMS[2:3], ids=["jsonrpc-v1.0", "rest-v1.0"])
def test_a_stream_that_delivered_its_task_first_is_not_refused_at_its_end(h: Harness, form: Form) -> None:
    """The partial case, as before: the worker first told the client about its own task
    (input required again), then went on with another one; the client got t-1's state and the
    stream ends there, with the refused events counted, not sent."""
    client = Client(h, form)
    assert client.unary(form.task("t-1", "input_required"))[0] == 200
    resp, raw = client.stream([form.status("t-1", "input_required"), form.task("t-2", "working"),
                               form.status("t-2", "completed")], task_id="t-1")
    got = [f for f in frames(raw) if f["data"] is not None]
    assert [f["event"] for f in got] == [None], raw
    data = got[0]["data"]["result"] if form.binding == "jsonrpc" else got[0]["data"]
    assert data["statusUpdate"]["taskId"] == "t-1"
    assert h.divergences("task_id_mismatch") == 2
