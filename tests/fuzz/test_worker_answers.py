"""Property 3: whatever a worker answers, the client gets a JSON-RPC answer carrying its own
id, never an HTTP 500, and never a task state the worker did not send.

A fixed client request — v1.0 ``GetTask`` / ``SendMessage`` / ``SendStreamingMessage`` and
their v0.3 twins ``tasks/get`` / ``message/send`` / ``message/stream`` — is answered by the
scripted worker with a generated body: valid results with odd state spellings (docs/protocol.md
§2, docs/field-cases.md F01), unknown states (F03), statuses and results of the wrong shape,
other task ids, error objects of odd shapes, envelopes without ``jsonrpc`` or with another id
(F16), both or neither of ``result`` / ``error``, non-JSON, truncated JSON, invalid UTF-8, a
BOM, huge numbers, duplicate members, deep nesting, odd HTTP statuses; streams with junk
lines, comments, events without ``data:``, non-JSON data, mixed valid and invalid events,
wrong ids, CR / CRLF line ends and a last event cut off by EOF (F08 (i), F09).

What must hold (docs/field-cases.md F09, F15, F16, the unknown-state policy; docs/protocol.md
§6, §7):

* no HTTP 500; a 5xx only as a transport-class answer (502/504 with -32603) to a worker that
  answered 5xx, 3xx or something no JSON-RPC reader understands; a worker's own 4xx that is
  not JSON is relayed as it is (the 401 of tests/proxy/test_card_authority.py);
* otherwise every document the client gets — the answer, or each SSE event — is a JSON-RPC
  2.0 response with the client's id, whatever id the worker used;
* a worker answer or event the gateway cannot read becomes an error (-32603 unary,
  -32006 in a stream; -32006 for an unknown state in both), never a result;
* every result the client gets is one the worker sent, in the worker's order, with at most its
  states re-spelled canonically for the client's version (never another state) and the v0.3
  ``final`` flag set; nothing follows a terminal event or the gateway's own error event.

Task ids are fresh per example (the ledger would otherwise carry one example's terminal state
into the next, F04). Examples: 200 unary, 200 streamed (``A2A_FUZZ_EXAMPLES`` for more).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz.conftest import fuzz, running_harness
from tests.fuzz.oracles import CANONICAL, INTERRUPTED, TERMINAL, fold, must_accept, respelled, sse_events, states_in
from tests.fuzz.payloads import (
    CLIENT_IDS,
    CLIENTS,
    MESSAGE_V10,
    T,
    check_result,
    doubtful_state_inside,
    dumps,
    gateway_error,
    located,
    next_task_id,
    stream_answer,
    unary_answer,
    unbound_state,
    unknown_state_inside,
    valid_envelope,
    worker_doc,
)
from tests.fuzz.support import (
    INVALID,
    PROBE_ID,
    ClientId,
    Reply,
    check_jsonrpc_reply,
    loads_or_invalid,
    too_deep,
    send,
)
from tests.proxy.conftest import Harness
from tests.support.scripted_worker import Raw, ReceivedRequest, Sse, default_card

# ------------------------------------------------------------------------------ the harness

@pytest.fixture(scope="module")
def fh() -> Iterator[Harness]:
    """Resubscribing after a cut stream is switched off (``resubscribe_attempts: 0``): the
    answers here are the worker's alone, and a cut stream ends with the gateway's error event
    at once instead of after backoff sleeps."""
    with running_harness(streams={"resubscribe_attempts": 0}) as h:
        yield h


class Scripted:
    """The catch-all answer of the module's worker: the example's answer for the client's
    request, a card for card fetches, an error for anything else (a gateway probe)."""

    def __init__(self, h: Harness) -> None:
        self.answer: Any = None
        import re
        h.worker.on_path("*", re.compile(r".*", re.DOTALL), handler=self, times=None)

    def __call__(self, req: ReceivedRequest) -> Any:
        if req.path.endswith("/.well-known/agent-card.json"):
            return Raw(200, {"content-type": "application/json"}, orjson.dumps(default_card()))
        if isinstance(req.json, dict) and req.json.get("method") in CLIENTS and req.json.get("id") != PROBE_ID:
            return self.answer
        return Raw(200, {"content-type": "application/json"},
                   b'{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"no such task"}}')


@pytest.fixture(scope="module")
def scripted(fh: Harness) -> Scripted:
    return Scripted(fh)


def fill(answer: Raw | Sse, tid: str) -> Raw | Sse:
    if isinstance(answer, Raw):
        return Raw(answer.status, answer.headers, answer.body.replace(T.encode(), tid.encode()))
    return Sse([s.replace(T.encode(), tid.encode()) for s in answer.steps], headers=answer.headers)


def ask(h: Harness, scripted: Scripted, client: str, client_id: Any, answer: Raw | Sse) -> tuple[Reply, Raw | Sse, str]:
    method, version, streaming, params = CLIENTS[client]
    tid = next_task_id()
    scripted.answer = fill(answer, tid)
    request = {"jsonrpc": "2.0", "id": client_id, "method": method, "params": params}
    body = json.dumps(request).replace(T, tid).encode()
    headers = {"content-type": "application/json", "A2A-Version": version}
    if streaming:
        headers["accept"] = "text/event-stream"
    return send(h, "POST", b"/", body, headers), scripted.answer, tid


def raw_id_of(client_id: Any) -> bytes:
    return json.dumps(client_id).encode()


# ------------------------------------------------------------------------------ the oracles

@fuzz(200)
@given(data=st.data(), client=st.sampled_from(["GetTask", "SendMessage", "tasks/get", "message/send"]),
       client_id=CLIENT_IDS)
def test_unary_worker_answers(fh: Harness, scripted: Scripted, data: st.DataObject, client: str, client_id: Any) -> None:
    raw_id = raw_id_of(client_id)
    answer = data.draw(unary_answer(client, raw_id), label="worker answer")
    reply, sent, tid = ask(fh, scripted, client, client_id, answer)
    assert isinstance(sent, Raw)
    check_unary(reply, sent, client, client_id, tid)


def check_unary(reply: Reply, sent: Raw, client: str, client_id: Any, tid: str) -> None:
    """The unary rules (also for a streaming request the worker answered with plain JSON)."""
    _, version, _, _ = CLIENTS[client]
    want = ClientId(client_id, raw_id_of(client_id))
    assert reply.status != 500, reply.body[:300]
    ctype = sent.headers["content-type"].split(";")[0].strip().lower()
    if 400 <= sent.status < 500 and not (ctype == "application/json" or ctype.endswith("+json")):
        event("worker 4xx relayed")
        assert (reply.status, reply.body) == (sent.status, sent.body)  # relayed as it is
        return
    parsed = worker_doc(loads_or_invalid(sent.body))
    readable = (parsed is not None and (200 <= sent.status < 300 or 400 <= sent.status < 500)
                and sent.status != 204 and not too_deep(sent.body)  # past limits.max_json_depth: unusable
                and valid_envelope(parsed))  # no JSON-RPC 2.0 response: an invalid agent response
    (doc,) = check_jsonrpc_reply(reply, want)
    if not readable:
        event("unreadable worker answer")
        assert "error" in doc and gateway_error(doc) in (-32603, -32006), reply.body[:300]
        assert reply.status in (200, 502, 504)
        return
    assert reply.status < 500, reply.body[:300]
    if "error" in parsed:
        event("worker error")
        assert doc.get("error") == parsed["error"], (parsed, doc)  # relayed, with the client's id
        return
    result = parsed["result"]
    if unknown_state_inside(result, version):
        event("unknown state")
        assert gateway_error(doc) == -32006, reply.body[:300]
        return
    if "error" in doc:
        event(f"refused {gateway_error(doc)}")
        assert gateway_error(doc) == -32006, reply.body[:300]  # an invalid agent response
        found = located(result, version)
        if found is None:  # a shape the docs do not pin down: refusing a doubtful state in it is fair
            assert doubtful_state_inside(result), (result, doc)
        else:  # F06 identity: a task read answered with another task
            key = "id" if found[0] == "task" else "taskId"
            assert client in ("GetTask", "tasks/get") and isinstance(found[1].get(key), str) \
                and found[1][key] not in ("", tid), (result, doc)
        return
    event("result")
    found = located(result, version)
    if found is not None and isinstance(found[1].get("status"), dict):
        raw_state = found[1]["status"].get("state")
        assert must_accept(raw_state) or fold(raw_state) != "?", raw_state
    check_result(result, doc["result"], version)


@fuzz(200)
@given(data=st.data(), client=st.sampled_from(["SendStreamingMessage", "message/stream"]), client_id=CLIENT_IDS)
def test_streamed_worker_answers(fh: Harness, scripted: Scripted, data: st.DataObject, client: str,
                                 client_id: Any) -> None:
    raw_id = raw_id_of(client_id)
    answer = data.draw(stream_answer(client, raw_id), label="worker answer")
    reply, sent, tid = ask(fh, scripted, client, client_id, answer)
    _, version, _, _ = CLIENTS[client]
    want = ClientId(client_id, raw_id)
    assert reply.status != 500, reply.body[:300]
    if isinstance(sent, Raw):  # answered with plain JSON (F09): the unary rules (v0.3: as one SSE event, F17 (b))
        event("plain JSON answer")
        check_unary(reply, sent, client, client_id, tid)
        return

    assert reply.status == 200 and reply.media == "text/event-stream", (reply.status, reply.headers, reply.body[:300])
    worker = sse_events(b"".join(sent.steps))
    docs = check_jsonrpc_reply(reply, want)
    # what the worker sent, in order: ("result", r) / ("error", e) / ("junk", None)
    items = []
    for ev in worker:
        wdoc = worker_doc(ev.doc) if ev.doc is not INVALID else None
        # an invalid agent response ends the stream: no JSON-RPC 2.0 response, or a state or
        # artifact bound to no task id (it could not be recorded)
        if wdoc is None or not valid_envelope(wdoc) or unbound_state(wdoc, version):
            items.append(("junk", None, ev.dangling))
        elif "error" in wdoc:
            items.append(("error", wdoc["error"], ev.dangling))
        else:
            items.append(("result", wdoc["result"], ev.dangling))
    j = 0
    terminal_seen = False
    for n, cdoc in enumerate(docs):
        assert not terminal_seen, f"an event after the terminal one: {reply.body[:600]!r}"
        if "result" in cdoc:
            while j < len(items) and not (items[j][0] == "result" and respelled(items[j][1], cdoc["result"], version)):
                assert items[j][0] != "junk" or items[j][2], (
                    f"a result relayed after a junk event: {items[j]!r} / {reply.body[:600]!r}")
                assert items[j][0] != "result" or not unknown_state_inside(items[j][1], version), (
                    f"an event with an unknown state was skipped, not refused: {items[j]!r}")
                j += 1
            assert j < len(items), f"result not sent by the worker (or out of order): {cdoc['result']!r}\n" \
                                   f"worker: {b''.join(sent.steps)[:800]!r}"
            check_result(items[j][1], cdoc["result"], version)
            found = located(cdoc["result"], version)
            if found is not None and isinstance(found[1].get("status"), dict):
                state = fold(found[1]["status"].get("state"))
                if state in TERMINAL:
                    terminal_seen = True
                if version == "0.3" and state in INTERRUPTED and found[0] == "status":
                    terminal_seen = True  # a v0.3 stream ends at an interrupted status (F17 (a))
            j += 1
            continue
        later_errors = [k for k in range(j, len(items)) if items[k][0] == "error" and items[k][1] == cdoc["error"]]
        if later_errors:
            j = later_errors[0] + 1  # a worker error event, relayed with the client's id
            continue
        event(f"gateway error event {gateway_error(cdoc)}")
        assert gateway_error(cdoc) in (-32006, -32603), cdoc
        assert n == len(docs) - 1, f"events after the gateway's error event: {reply.body[:600]!r}"
    event(f"{len(docs)} events")


# ------------------------------------------------------------------------------ defects found
# Each is one shrunk example of a defect class the properties above found (all fixed): the
# properties cover them too now; these pin the exact case.

V1_JSON = {"content-type": "application/json", "A2A-Version": "1.0"}
WORKING_TASK = b'{"id":"@T@","contextId":"c-@T@","status":{"state":"TASK_STATE_WORKING"}}'


def rpc_body(req_id: Any, method: str, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}).encode()


def test_a_redirect_with_a_json_body_is_refused_not_relayed(fh: Harness, scripted: Scripted) -> None:
    """Found by the fuzz suite (it was relayed, Location and all, sending the client round the
    gateway). Worker: ``HTTP 302``, ``Location: http://10.0.0.7:8080/internal``, body
    ``{"jsonrpc":"2.0","id":1,"result":<a WORKING Task>}``: -32603 with HTTP 502, no Location,
    as with an empty body and as REST does."""
    body = b'{"jsonrpc":"2.0","id":1,"result":' + WORKING_TASK + b"}"
    answer = Raw(302, {"content-type": "application/json", "location": "http://10.0.0.7:8080/internal"}, body)
    reply, _, _ = ask(fh, scripted, "GetTask", 1, answer)
    assert "location" not in reply.headers, reply.headers
    assert reply.status == 502 and orjson.loads(reply.body)["error"]["code"] == -32603, reply.body


MALFORMED_ENVELOPES = {
    "no-jsonrpc": (1, b'{"id":1,"result":' + WORKING_TASK + b"}"),
    "jsonrpc-1.0": (1, b'{"jsonrpc":"1.0","id":1,"result":' + WORKING_TASK + b"}"),
    "error-code-string": (1, b'{"jsonrpc":"2.0","id":1,"error":{"code":"-32001","message":"x"}}'),
    "error-no-message": (1, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32001}}'),
    "error-number": (1, b'{"jsonrpc":"2.0","id":1,"error":5}'),
    "no-id-for-null-id": (None, b'{"jsonrpc":"2.0","result":' + WORKING_TASK + b"}"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_ENVELOPES))
def test_a_malformed_worker_envelope_is_refused_or_its_id_put_in(fh: Harness, scripted: Scripted, case: str) -> None:
    """Found by the fuzz suite (each was relayed byte for byte). Client: ``GetTask`` (v1.0).
    Worker: the body of ``MALFORMED_ENVELOPES[case]`` with HTTP 200. The client gets a JSON-RPC
    2.0 response with its id: a missing id is put in; anything else that is no JSON-RPC 2.0
    response is an invalid agent response, -32603 with HTTP 502 (docs/protocol.md §6.3)."""
    client_id, body = MALFORMED_ENVELOPES[case]
    reply, _, tid = ask(fh, scripted, "GetTask", client_id, Raw(200, {"content-type": "application/json"}, body))
    (doc,) = check_jsonrpc_reply(reply, ClientId(client_id, raw_id_of(client_id)))
    if case == "no-id-for-null-id":
        assert reply.status == 200 and doc["result"]["id"] == tid
    else:
        assert reply.status == 502 and gateway_error(doc) == -32603, reply.body


def test_a_malformed_worker_error_event_ends_the_stream_as_32006(fh: Harness, scripted: Scripted) -> None:
    """Found by the fuzz suite (relayed with the client's id put in). Worker SSE: a Task
    snapshot, then ``event: error`` / ``data: {"jsonrpc":"2.0","id":1,"error":{"code":"-32001",
    "message":"x"}}``: the snapshot, then an -32006 error event, and the stream ends."""
    first = b'data: {"jsonrpc":"2.0","id":1,"result":{"task":' + WORKING_TASK + b"}}\n\n"
    bad = b'event: error\ndata: {"jsonrpc":"2.0","id":1,"error":{"code":"-32001","message":"x"}}\n\n'
    reply, _, _ = ask(fh, scripted, "SendStreamingMessage", 1, Sse([first + bad]))
    docs = check_jsonrpc_reply(reply, ClientId(1, b"1"))
    assert "result" in docs[0] and gateway_error(docs[-1]) == -32006 and len(docs) == 2, reply.body


@pytest.mark.parametrize("task_id", ["absent", None, 9, ""])
def test_a_status_update_without_a_task_id_ends_the_stream_as_32006(fh: Harness, scripted: Scripted,
                                                                     task_id: Any) -> None:
    """Found by the fuzz suite (the update was relayed but never recorded: a terminal state
    reached the client while the ledger kept the task WORKING). Worker SSE for
    ``SendStreamingMessage`` (v1.0): ``{"task": <t, WORKING>}``, then ``{"statusUpdate":
    {"contextId": "c-t", "status": {"state": "TASK_STATE_COMPLETED"}}}`` with ``taskId`` as the
    parameter says. The update cannot be recorded, so it is refused: the snapshot, then an
    -32006 error event (a ``task_id_mismatch`` divergence), and the stream ends."""
    update: dict[str, Any] = {"contextId": "c-" + T, "status": {"state": "TASK_STATE_COMPLETED"}}
    if task_id != "absent":
        update["taskId"] = task_id
    first = b'data: {"jsonrpc":"2.0","id":1,"result":{"task":' + WORKING_TASK + b"}}\n\n"
    last = b'data: {"jsonrpc":"2.0","id":1,"result":{"statusUpdate":' + dumps(update).encode() + b"}}\n\n"
    reply, _, tid = ask(fh, scripted, "SendStreamingMessage", 1, Sse([first + last]))
    docs = check_jsonrpc_reply(reply, ClientId(1, b"1"))
    assert [states_in(d.get("result")) for d in docs] == [["TASK_STATE_WORKING"], []], reply.body
    assert gateway_error(docs[-1]) == -32006 and "task_id_mismatch" in docs[-1]["error"]["message"], reply.body
    assert tid in reply.body.decode()


def test_a_message_stream_on_a_known_task_is_the_whole_reply(fh: Harness, scripted: Scripted) -> None:
    """Found by the fuzz suite (it was taken for a cut stream: probed, resubscribed, or ended
    with a -32603 'stream lost' event). 1. ``GetTask t`` answered WORKING (the ledger now
    knows t). 2. ``SendStreamingMessage`` with ``message.taskId: t``; the worker streams one
    event, ``{"message": {…}}``, and closes — a complete stream (docs/protocol.md §7, Shape):
    the client gets exactly the Message, and nothing goes upstream but its request."""
    reply, _, tid = ask(fh, scripted, "GetTask", 1, Raw(200, {"content-type": "application/json"},
                                                         b'{"jsonrpc":"2.0","id":1,"result":' + WORKING_TASK + b"}"))
    assert orjson.loads(reply.body)["result"]["id"] == tid
    message = b'data: {"jsonrpc":"2.0","id":2,"result":{"message":' + orjson.dumps(MESSAGE_V10) + b"}}\n\n"
    scripted.answer = Sse([message])
    before = len(fh.worker.requests)
    params = {"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "more"}], "taskId": tid}}
    reply = send(fh, "POST", b"/", rpc_body(2, "SendStreamingMessage", params),
                 {**V1_JSON, "accept": "text/event-stream"})
    docs = check_jsonrpc_reply(reply, ClientId(2, b"2"))
    assert docs == [{"jsonrpc": "2.0", "id": 2, "result": {"message": MESSAGE_V10}}], reply.body
    assert [r.method for r in fh.worker.requests[before:] if "/.well-known/" not in r.path] == ["SendStreamingMessage"]


@pytest.mark.parametrize("client", ["GetTask", "tasks/get"])
def test_big_integers_in_a_rewritten_payload_stay_exact(fh: Harness, scripted: Scripted, client: str) -> None:
    """Found by the fuzz suite (orjson read them as floats: 1.8446744073709552e+19 reached the
    client). Worker: ``{"jsonrpc":"2.0","id":1,"result":{"id":t,"contextId":"c-t","status":
    {"state": S},"metadata":{"n":18446744073709551616}}}`` with S a spelling the gateway
    re-spells for the client (``working`` for v1.0, ``Working`` for v0.3): the state re-spelled
    and ``"n":18446744073709551616``, exactly."""
    state = "working" if client == "GetTask" else "Working"
    body = ('{"jsonrpc":"2.0","id":1,"result":{"id":"@T@","contextId":"c-@T@","status":{"state":"' + state +
            '"},"metadata":{"n":18446744073709551616}}}').encode()
    reply, _, _ = ask(fh, scripted, client, 1, Raw(200, {"content-type": "application/json"}, body))
    (doc,) = check_jsonrpc_reply(reply, ClientId(1, b"1"))
    assert doc["result"]["status"]["state"] in CANONICAL["1.0" if client == "GetTask" else "0.3"]
    assert b'"n":18446744073709551616' in reply.body, reply.body
