"""Property 3 over REST: whatever a worker answers a REST call with, the client gets JSON (or
an SSE stream of JSON events), never an invented task state, and every answer the gateway
cannot read becomes an error of the gateway's own in the client's version's REST form.

Fixed client requests (docs/protocol.md §1.3): ``GET /tasks/{id}`` and ``POST /message:send``
(v1.0), ``GET /v1/tasks/{id}`` (v0.3), ``POST /message:stream`` (v1.0) and ``POST
/v1/message:stream`` (v0.3). The worker answers with the payloads of tests/fuzz/payloads.py
written the REST way — bare results and StreamResponses, ProtoJSON states, ``google.rpc.Status``
and v0.3 ``{code, message, type}`` errors, with every HTTP status class — and broken in the
same ways as over JSON-RPC.

What must hold (docs/protocol.md §1.5, §6.1, §6.3, §7, §11 pitfalls 6 and 8):

* a worker's own answer the gateway can read is passed on: a 2xx result with at most its
  states re-spelled for the client (v0.3 REST spells ``TASK_STATE_CANCELLED``) and the F17 (a)
  ``final`` flag — or refused as an invalid agent response (-32006: an unknown state, another
  task) —, a 4xx error as it came, a 5xx that is an A2A error as it came;
* anything else (no JSON, a redirect, a 5xx that is no A2A error) is a transport-class error
  of the gateway's own: HTTP 502/504 with a ``google.rpc.Status`` (v1.0) or ``{code,
  message, type}`` (v0.3) body — an HTTP 500 only ever carries such a JSON body (-32006 is
  HTTP 500 in v1.0.1, docs/protocol.md §6.1), never a bare server error;
* a 4xx that is not JSON is relayed as it is (a 401 challenge), an empty 2xx too (an
  ``Empty`` answer);
* in a stream every event's data is JSON, results in the worker's order and only re-spelled,
  worker error events relayed, the gateway's own error event last.

Examples: 150 unary, 150 streamed (``A2A_FUZZ_EXAMPLES`` for more).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz.conftest import fuzz, running_harness
from tests.fuzz.oracles import fold, respelled, sse_events
from tests.fuzz.payloads import (
    T,
    check_result,
    doubtful_state_inside,
    dumps,
    located,
    next_task_id,
    status_update_value,
    stream_result,
    task_value,
    unbound_state,
    unknown_state_inside,
)
from tests.fuzz.support import INVALID, Reply, loads_or_invalid, send_raw, sse_frames, too_deep
from tests.proxy.conftest import Harness
from tests.support.scripted_worker import Raw, ReceivedRequest, Sse, default_card

# name: (verb, path, client version, wire form, streaming)
CLIENTS = {
    "get": ("GET", "/tasks/" + T, "1.0", "1.0", False),
    "get-v03": ("GET", "/v1/tasks/" + T, None, "0.3-rest", False),
    "send": ("POST", "/message:send", "1.0", "1.0", False),
    "stream": ("POST", "/message:stream", "1.0", "1.0", True),
    "stream-v03": ("POST", "/v1/message:stream", None, "0.3-rest", True),
}
SEND_BODY = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"

STATUS_ERRORS = st.one_of(
    st.builds(lambda http, name, reason: {"error": {"code": http, "status": name, "message": "worker says no",
                                                    "details": [{"@type": ERROR_INFO, "reason": reason,
                                                                 "domain": "a2a-protocol.org"}]}},
              st.sampled_from([400, 404, 409, 500]), st.sampled_from(["NOT_FOUND", "FAILED_PRECONDITION", "INTERNAL"]),
              st.sampled_from(["TASK_NOT_FOUND", "UNSUPPORTED_OPERATION", "INTERNAL_ERROR", 5, "NOPE"])),
    st.builds(lambda code, name: {"code": code, "message": "x", "type": name},
              st.sampled_from([-32001, -32002, -32603, 7]), st.sampled_from(["TaskNotFoundError", "InternalError", "X"])),
    st.sampled_from([{"error": "boom"}, {"error": {}}, {"message": "no"}, [], "e", {"detail": "Not Found"}]),
)


@st.composite
def rest_result(draw: st.DrawFn, client: str) -> Any:
    verb, _, _, form, _ = CLIENTS[client]
    kind = draw(st.sampled_from(["task"] * 6 + ["message", "wrapped", "status", "odd"]))
    if kind == "task":
        task = draw(task_value(False))
        return task if verb == "GET" else {"task": task}
    if kind == "wrapped":
        task = draw(task_value(False))
        return {"task": task} if verb == "GET" else task
    if kind == "message":
        return {"message": {"messageId": "m-9", "role": "ROLE_AGENT", "parts": [{"text": "direct"}]}}
    if kind == "status":
        return {"statusUpdate": draw(status_update_value(False, False))}
    return draw(st.sampled_from([[], "x", 0, None, {}, {"task": []}, {"tasks": [{"id": T, "status": {"state": "x"}}]}]))


@st.composite
def rest_answer(draw: st.DrawFn, client: str) -> Raw:
    status = draw(st.sampled_from([200] * 10 + [201, 204, 302, 400, 401, 404, 409, 500, 502, 503]))
    if 200 <= status < 300:
        body = dumps(draw(rest_result(client))).encode()
    else:
        body = dumps(draw(STATUS_ERRORS)).encode()
    how = draw(st.sampled_from(["as is"] * 8 + ["text", "truncated", "empty", "bom", "huge", "deep"]))
    if how == "text":
        body = b"<html>no</html>"
    elif how == "truncated":
        body = body[: draw(st.integers(0, max(0, len(body) - 1)))]
    elif how == "empty":
        body = b""
    elif how == "bom":
        body = b"\xef\xbb\xbf" + body
    elif how == "huge" and body.startswith(b"{") and body != b"{}":
        body = b'{"n":1e400,' + body[1:]
    elif how == "deep" and body.startswith(b"{") and body != b"{}":
        from tests.fuzz.strategies import deep_text

        body = b'{"metadata":' + draw(deep_text(250)).encode() + b"," + body[1:]
    ctype = draw(st.sampled_from(["application/json"] * 5 + ["application/a2a+json", "text/plain",
                                                             "application/problem+json"]))
    headers = {"content-type": ctype}
    if status == 302:
        headers["location"] = "http://10.0.0.7:8080/internal"
    return Raw(status, headers, b"" if status == 204 else body)


@st.composite
def rest_stream(draw: st.DrawFn, client: str) -> Raw | Sse:
    if draw(st.integers(0, 9)) == 4:
        return draw(rest_answer("send"))
    first = {"task": {"id": T, "contextId": "c-" + T, "status": {"state": "TASK_STATE_SUBMITTED"}}}
    frames = [b"data: " + dumps(first).encode() + b"\n\n"]
    for _ in range(draw(st.integers(0, 4))):
        step = draw(st.sampled_from(["event"] * 12 + ["error", "error-named", "not-json", "array", "comment"]))
        if step == "event":
            result = draw(stream_result(False))
            frames.append(b"data: " + dumps(result).encode() + b"\n\n")
        elif step == "error":
            frames.append(b"data: " + dumps(draw(STATUS_ERRORS.filter(lambda e: isinstance(e, dict)))).encode() + b"\n\n")
        elif step == "error-named":
            frames.append(b"event: error\ndata: " + dumps(draw(STATUS_ERRORS)).encode() + b"\n\n")
        elif step == "not-json":
            frames.append(b"data: {nope\n\n")
        elif step == "array":
            frames.append(b"data: [1]\n\n")
        else:
            frames.append(b": ping\n\n")
    if draw(st.booleans()):
        end = {"taskId": T, "contextId": "c-" + T, "status": {"state": draw(st.sampled_from(
            ["TASK_STATE_COMPLETED", "TASK_STATE_CANCELLED", "TASK_STATE_FAILED", "completed"]))}}
        frames.append(b"data: " + dumps({"statusUpdate": end}).encode() + b"\n\n")
    return Sse([b"".join(frames)])


# ------------------------------------------------------------------------------ the harness

class Scripted:
    """The module worker's catch-all answer: the example's answer for the client's path, a
    card for card fetches, a 404 Status for anything else (a gateway probe)."""

    def __init__(self, h: Harness) -> None:
        import re

        self.answer: Any = None
        self.path: str | None = None
        h.worker.on_path("*", re.compile(r".*", re.DOTALL), handler=self, times=None)

    def __call__(self, req: ReceivedRequest) -> Any:
        if req.path.endswith("/.well-known/agent-card.json"):
            return Raw(200, {"content-type": "application/json"}, json.dumps(default_card()).encode())
        if req.path == self.path and "historyLength=0" not in req.query:
            return self.answer
        return Raw(404, {"content-type": "application/json"},
                   b'{"error":{"code":404,"status":"NOT_FOUND","message":"no such task"}}')


@pytest.fixture(scope="module")
def fh() -> Iterator[Harness]:
    with running_harness(streams={"resubscribe_attempts": 0}) as h:
        yield h


@pytest.fixture(scope="module")
def scripted(fh: Harness) -> Scripted:
    return Scripted(fh)


def ask(h: Harness, scripted: Scripted, client: str, answer: Raw | Sse) -> tuple[Reply, Raw | Sse, str]:
    verb, path, version, _, streaming = CLIENTS[client]
    tid = next_task_id()
    if isinstance(answer, Raw):
        answer = Raw(answer.status, answer.headers, answer.body.replace(T.encode(), tid.encode()))
    else:
        answer = Sse([s.replace(T.encode(), tid.encode()) for s in answer.steps])
    scripted.answer, scripted.path = answer, path.replace(T, tid)
    headers = {"content-type": "application/json"} if verb == "POST" else {}
    if version is not None:
        headers["A2A-Version"] = version
    if streaming:
        headers["accept"] = "text/event-stream"
    body = json.dumps(SEND_BODY).encode() if verb == "POST" else None
    return send_raw(h, verb, path.replace(T, tid).encode(), body, headers), answer, tid


# ------------------------------------------------------------------------------ the oracles

def own_error(reply: Reply, form: str) -> Any:
    """The gateway's own REST error in the client's form (docs/protocol.md §1.5, §6.3);
    returns the A2A code it stands for, if it says."""
    assert reply.media == "application/json", (reply.status, reply.headers, reply.body[:300])
    doc = loads_or_invalid(reply.body)
    assert isinstance(doc, dict), reply.body[:300]
    if form == "0.3-rest":
        assert isinstance(doc.get("code"), int) and isinstance(doc.get("message"), str), reply.body[:300]
        return doc["code"]
    err = doc.get("error")
    assert isinstance(err, dict) and err.get("code") == reply.status and isinstance(err.get("status"), str) \
        and isinstance(err.get("message"), str), reply.body[:300]
    reasons = [d.get("reason") for d in err.get("details", []) if isinstance(d, dict)]
    return {"INVALID_AGENT_RESPONSE": -32006, "INTERNAL_ERROR": -32603}.get(reasons[0] if reasons else "", -32603)


def a2a_error_body(doc: Any) -> bool:
    """A REST error body an A2A reader takes as one: a ``google.rpc.Status`` (an ``error``
    object) or a v0.3 body with a known ``code`` or ``type`` (docs/protocol.md §1.5)."""
    if not isinstance(doc, dict):
        return False
    if isinstance(doc.get("error"), dict):
        return True
    return doc.get("code") in (-32001, -32002, -32003, -32004, -32005, -32006, -32007, -32700, -32600, -32601,
                               -32602, -32603) or doc.get("type") in ("TaskNotFoundError", "InternalError")


def check_unary(reply: Reply, sent: Raw, verb: str, form: str, tid: str) -> None:
    """The unary rules (also for a streaming call the worker answered without SSE, F09)."""
    ctype = sent.headers["content-type"].split(";")[0].strip().lower()
    json_type = ctype == "application/json" or ctype.endswith("+json")
    doc_in = loads_or_invalid(sent.body)
    if 400 <= sent.status < 500 and not json_type:
        event("4xx relayed")
        assert (reply.status, reply.body) == (sent.status, sent.body)
        return
    if 200 <= sent.status < 300 and not sent.body.strip():
        event("empty 2xx relayed")
        assert (reply.status, reply.body) == (sent.status, sent.body)
        return
    if (300 <= sent.status < 400 or doc_in is INVALID or too_deep(sent.body)
            or (sent.status >= 500 and not a2a_error_body(doc_in))):
        event("unreadable")
        assert reply.status in (502, 504), (reply.status, reply.body[:300])
        assert "location" not in reply.headers
        own_error(reply, form)
        return
    if sent.status >= 400:
        event(f"worker error {sent.status}")
        assert (reply.status, reply.body) == (sent.status, sent.body), reply.body[:300]
        return
    assert reply.status != 500 or own_error(reply, form) == -32006, (reply.status, reply.body[:300])
    if reply.status == sent.status:
        event("result")
        doc_out = loads_or_invalid(reply.body)
        assert not unknown_state_inside(doc_in, form), reply.body[:300]
        check_result(doc_in, doc_out, form)
        return
    event("refused")
    assert own_error(reply, form) == -32006 and reply.status == (500 if form == "1.0" else 502), reply.body[:300]
    found = located(doc_in, form)
    if found is None:
        assert doubtful_state_inside(doc_in), doc_in
    elif not unknown_state_inside(doc_in, form):
        key = "id" if found[0] == "task" else "taskId"
        assert verb == "GET" and found[1].get(key) not in (None, "", tid), doc_in  # another task (F06)


@fuzz(150)
@given(data=st.data(), client=st.sampled_from(["get", "get-v03", "send"]))
def test_rest_unary_worker_answers(fh: Harness, scripted: Scripted, data: st.DataObject, client: str) -> None:
    answer = data.draw(rest_answer(client), label="worker answer")
    reply, sent, tid = ask(fh, scripted, client, answer)
    assert isinstance(sent, Raw)
    verb, _, _, form, _ = CLIENTS[client]
    check_unary(reply, sent, verb, form, tid)


@fuzz(150)
@given(data=st.data(), client=st.sampled_from(["stream", "stream-v03"]))
def test_rest_streamed_worker_answers(fh: Harness, scripted: Scripted, data: st.DataObject, client: str) -> None:
    answer = data.draw(rest_stream(client), label="worker answer")
    reply, sent, tid = ask(fh, scripted, client, answer)
    _, _, _, form, _ = CLIENTS[client]
    if isinstance(sent, Raw):
        event("plain answer")
        check_unary(reply, sent, "POST", form, tid)
        return
    assert reply.status == 200 and reply.media == "text/event-stream", (reply.status, reply.body[:300])
    worker = sse_events(b"".join(sent.steps))
    got = [(f.event, loads_or_invalid(f.data)) for f in sse_frames(reply.body) if f.data is not None]
    assert all(doc is not INVALID for _, doc in got), reply.body[:400]
    items = []  # the worker's events as the REST binding reads them (docs/protocol.md §7)
    for ev in worker:
        doc = ev.doc
        if not isinstance(doc, dict) or unbound_state({"result": doc}, form):  # a state bound to no task id
            items.append(("junk", doc))
        elif ev.event == "error" or (len(doc) == 1 and isinstance(doc.get("error"), dict)):
            items.append(("error", doc))
        else:
            items.append(("result", doc))
    j, ended = 0, False
    for n, (name, doc) in enumerate(got):
        assert not ended, f"an event after the end: {reply.body[:600]!r}"
        match = next((k for k in range(j, len(items)) if items[k][0] != "junk" and (
            items[k][1] == doc if items[k][0] == "error" else respelled(items[k][1], doc, form))), None)
        if match is not None and (name == "error") == (items[match][0] == "error"):
            for k in range(j, match):  # what the gateway let pass without relaying it
                assert items[k][0] == "result" and not unknown_state_inside(items[k][1], form), (items[k], reply.body[:600])
            if items[match][0] == "result":
                check_result(items[match][1], doc, form)
                found = located(doc, form)
                state = found[1].get("status", {}).get("state") if found and isinstance(found[1].get("status"), dict) else None
                ended = fold(state) in ("COMPLETED", "FAILED", "CANCELED", "REJECTED") or (
                    form == "0.3-rest" and found is not None and found[0] == "status"
                    and fold(state) in ("INPUT_REQUIRED", "AUTH_REQUIRED"))
            j = match + 1
            continue
        event("gateway error event")
        assert name == "error" and n == len(got) - 1, (name, doc, reply.body[:600])
        if form == "0.3-rest":
            assert isinstance(doc.get("code"), int) and isinstance(doc.get("message"), str), doc
        else:
            assert isinstance(doc.get("error"), dict) and isinstance(doc["error"].get("message"), str), doc
