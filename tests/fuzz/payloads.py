"""Generated worker payloads (JSON-RPC envelopes and SSE streams of A2A results in both
versions, with every part sometimes wrong) and the checks of what reaches the client, shared
by the worker-answer properties (test_worker_answers.py, test_rest_worker_answers.py).

Shapes: docs/protocol.md §3 (objects), §3.4 / §3.5 (results on the wire), §7 (streams), §2
(states); docs/field-cases.md F01, F03, F06, F08, F09, F16, F17.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.oracles import CANONICAL, INTERRUPTED, TERMINAL, fold, must_refuse, respelled
from tests.fuzz.strategies import deep_text, value_text
from tests.support.scripted_worker import Raw, Sse

T = "@T@"  # the example's task id, filled in when the example runs
_ids = itertools.count()


def next_task_id() -> str:
    """A task id no other example of this process uses (the ledger outlives examples)."""
    return f"t-fuzz-{next(_ids)}"

DOCUMENTED_STATES = st.sampled_from([
    "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED", "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED", "TASK_STATE_REJECTED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
    "TASK_STATE_UNSPECIFIED", "submitted", "working", "completed", "failed", "canceled", "rejected",
    "input-required", "auth-required", "unknown", "TASK_STATE_CANCELLED", "cancelled",
    "input_required", "INPUT_REQUIRED", "Input-Required", "Working", "Completed", "",
])
NEAR_STATES = st.sampled_from(["CANCELLED", "WORKING", " working", "completed\n", "Task-State-Failed", "auth required"])
OUTSIDE_STATES = st.sampled_from(["paused", "done", "TASK_STATE_DONE", "faıled", "ſubmitted", "TASK_STATE_COMPLETED\u0000",
                                  "TASK_STATE_", "task_state", "ＷＯＲＫＩＮＧ"])
STATE_SPELLINGS = st.one_of(*[DOCUMENTED_STATES] * 8, NEAR_STATES, OUTSIDE_STATES)
STATE_VALUES = st.one_of(*[STATE_SPELLINGS] * 9, st.sampled_from([None, 5, 0, True, [], {}, ["completed"]]))

CLIENTS = {
    # name: (method, version, streaming, params)
    "GetTask": ("GetTask", "1.0", False, {"id": T, "historyLength": 1}),
    "SendMessage": ("SendMessage", "1.0", False,
                    {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
    "tasks/get": ("tasks/get", "0.3", False, {"id": T}),
    "message/send": ("message/send", "0.3", False,
                     {"message": {"kind": "message", "messageId": "m-1", "role": "user",
                                  "parts": [{"kind": "text", "text": "hi"}]}}),
    "SendStreamingMessage": ("SendStreamingMessage", "1.0", True,
                             {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
    "message/stream": ("message/stream", "0.3", True,
                       {"message": {"kind": "message", "messageId": "m-1", "role": "user",
                                    "parts": [{"kind": "text", "text": "hi"}]}}),
}
CLIENT_IDS = st.sampled_from([1, 7, 0, -3, "c-1", "", "ü🙂", 1.5, 2**70, None])


# ------------------------------------------------------------------------------ worker payloads

@st.composite
def status_value(draw: st.DrawFn) -> Any:
    shape = draw(st.sampled_from(["state"] * 8 + ["empty", "string", "null", "list", "extra"]))
    if shape == "state":
        return {"state": draw(STATE_VALUES)}
    if shape == "empty":
        return {}
    if shape == "string":
        return draw(STATE_SPELLINGS)
    if shape == "null":
        return None
    if shape == "list":
        return [{"state": "TASK_STATE_COMPLETED"}]
    return {"state": draw(STATE_VALUES), "timestamp": "2026-01-01T00:00:00Z",
            "message": {"messageId": "m-2", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}}


@st.composite
def task_value(draw: st.DrawFn, v03: bool, odd_ids: bool = True) -> dict[str, Any]:
    task: dict[str, Any] = {}
    ident = draw(st.sampled_from(["same"] * 6 + ["other"] + (["absent", "number", "empty"] if odd_ids else [])))
    if ident != "absent":
        task["id"] = {"same": T, "other": T + "-other", "number": 5, "empty": ""}[ident]
    if draw(st.integers(0, 9)) != 4:
        task["contextId"] = "c-" + T
    if draw(st.integers(0, 9)) != 4:
        task["status"] = draw(status_value())
    if v03 and draw(st.integers(0, 9)) != 4:
        task["kind"] = "task"
    if draw(st.integers(0, 4)) == 2:
        task["artifacts"] = draw(st.sampled_from([
            [{"artifactId": "a-1", "parts": [{"text": "x"}]}], [], "junk", [{"artifactId": ["a"], "parts": 7}],
            [{"artifactId": "a-1", "parts": []}, {"artifactId": "a-1", "parts": [{"text": "y"}]}]]))
    if draw(st.integers(0, 4)) == 2:
        task["metadata"] = json.loads(draw(value_text(6)))
    return task


@st.composite
def status_update_value(draw: st.DrawFn, v03: bool, odd_ids: bool = True) -> dict[str, Any]:
    upd: dict[str, Any] = {"contextId": "c-" + T, "status": draw(status_value())}
    ident = draw(st.sampled_from([T, T, T, T + "-other"] + ([9, None, "", "absent"] if odd_ids else [])))
    if ident != "absent":
        upd["taskId"] = ident
    if v03:
        upd["kind"] = "status-update"
    if draw(st.booleans()):
        upd["final"] = draw(st.sampled_from([True, False, "yes", None]))
    return upd


@st.composite
def artifact_update_value(draw: st.DrawFn, v03: bool) -> dict[str, Any]:
    upd: dict[str, Any] = {"taskId": T, "contextId": "c-" + T,
                           "artifact": draw(st.sampled_from([{"artifactId": "a-1", "parts": [{"text": "x"}]},
                                                             {"artifactId": 5}, "junk", {"parts": []}]))}
    if v03:
        upd["kind"] = "artifact-update"
    for flag in ("append", "lastChunk"):
        if draw(st.booleans()):
            upd[flag] = draw(st.booleans())
    return upd


MESSAGE_V10 = {"messageId": "m-9", "role": "ROLE_AGENT", "parts": [{"text": "direct"}]}
MESSAGE_V03 = {"kind": "message", "messageId": "m-9", "role": "agent", "parts": [{"kind": "text", "text": "direct"}]}
ODD_RESULTS = st.sampled_from([[], ["x"], "TASK_STATE_COMPLETED", None, 0, True, {}, {"task": []},
                               {"task": "t"}, {"statusUpdate": None}, [{"id": T, "status": {"state": "completed"}}]])


@st.composite
def unary_result(draw: st.DrawFn, client: str) -> Any:
    method, version, _, _ = CLIENTS[client]
    v03 = version == "0.3"
    kind = draw(st.sampled_from(["task"] * 6 + ["message", "odd", "wrapped", "status"]))
    if kind == "task":
        task = draw(task_value(v03))
        return {"task": task} if method == "SendMessage" else task
    if kind == "message":
        return {"message": MESSAGE_V10} if method == "SendMessage" else MESSAGE_V03 if v03 else MESSAGE_V10
    if kind == "wrapped":  # the other version's shape
        task = draw(task_value(v03))
        return task if method == "SendMessage" else {"task": task}
    if kind == "status":
        upd = draw(status_update_value(v03))
        return upd if v03 else {"statusUpdate": upd}
    return draw(ODD_RESULTS)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


ERRORS = st.one_of(
    *[st.fixed_dictionaries({"code": st.sampled_from([-32001, -32002, -32004, -32603, -32000, 404, 0]),
                             "message": st.text(max_size=8)},
                            optional={"data": st.sampled_from([None, [], [{"@type": "x"}], "d", {"k": 1}])})] * 3,
    st.fixed_dictionaries({"code": st.sampled_from([-32001, -32603, -32000, 404, 0]), "message": st.text(max_size=8)},
                          optional={"data": st.sampled_from([None, [], [{"@type": "x"}], "d", {"k": 1}])}),
    st.sampled_from([{"code": "-32001", "message": "x"}, {"code": 1.5, "message": "x"}, {"code": -32001},
                     {"message": "no code"}, {"code": [-32001], "message": "x"}, {"code": None, "message": None},
                     {}, 5, "boom", [], True]),
)


@st.composite
def envelope_body(draw: st.DrawFn, client: str, raw_id: bytes) -> bytes:
    """A worker's JSON-RPC answer as bytes: mostly a proper envelope, with every part of it
    sometimes wrong."""
    members: list[tuple[str, str]] = []
    if draw(st.integers(0, 9)) != 4:
        members.append(("jsonrpc", draw(st.sampled_from(['"2.0"'] * 30 + ['"1.0"', "2", "null"]))))
    ident = draw(st.sampled_from(["echo"] * 8 + ["other", "null", "absent", "string", "object"]))
    if ident != "absent":
        members.append(("id", {"echo": raw_id.decode(), "other": "424242", "null": "null",
                               "string": '"someone else"', "object": '{"x":1}'}[ident]))
    what = draw(st.sampled_from(["result"] * 7 + ["error", "error", "both", "neither", "error-null", "dup-result"]))
    if what in ("result", "both", "error-null", "dup-result"):
        result = dumps(draw(unary_result(client)))
        if draw(st.integers(0, 7)) == 3:  # nested deep inside the result (metadata)
            result = '{"metadata":' + draw(deep_text(280)) + "," + result[1:] if result.startswith("{") and result != "{}" else result
        if what == "dup-result":
            members.append(("result", dumps(draw(unary_result(client)))))
        members.append(("result", result))
    if what in ("error", "both"):
        members.append(("error", dumps(draw(ERRORS))))
    if what == "error-null":
        members.append(("error", "null"))
    members = draw(st.permutations(members))
    return ("{" + ",".join(f'"{k}":{v}' for k, v in members) + "}").encode()


@st.composite
def broken(draw: st.DrawFn, good: bytes) -> bytes:
    """``good`` made unreadable in one of the ways workers manage it."""
    how = draw(st.sampled_from(["truncate", "bad-utf8", "bom", "nan", "huge", "html", "empty", "trailing"]))
    if how == "truncate":
        return good[: draw(st.integers(0, max(0, len(good) - 1)))]
    if how == "bad-utf8":
        at = good.find(b'"', good.find(b"result") + 9)
        at = at if at > 0 else len(good) // 2
        return good[:at + 1] + b"\xff\xfe" + good[at + 1:]
    if how == "bom":
        return b"\xef\xbb\xbf" + good
    if how == "nan":
        return good.replace(b'"jsonrpc"', b'"n":NaN,"jsonrpc"', 1) if b'"jsonrpc"' in good else b"NaN"
    if how == "huge":
        return good.replace(b'"jsonrpc"', b'"n":1e400,"jsonrpc"', 1) if b'"jsonrpc"' in good else b"1e400"
    if how == "html":
        return b"<html><body>502 Bad Gateway</body></html>"
    if how == "empty":
        return b""
    return good + b"}"


@st.composite
def unary_answer(draw: st.DrawFn, client: str, raw_id: bytes) -> Raw:
    body = draw(envelope_body(client, raw_id))
    if draw(st.integers(0, 5)) == 3:
        body = draw(broken(body))
    status = draw(st.sampled_from([200] * 12 + [201, 204, 302, 400, 404, 401, 500, 502, 503]))
    ctype = draw(st.sampled_from(["application/json"] * 6 + ["application/json; charset=utf-8", "text/plain",
                                                             "application/a2a+json", "text/html"]))
    headers = {"content-type": ctype}
    if status == 302:
        headers["location"] = "http://127.0.0.1:1/elsewhere"
    return Raw(status, headers, b"" if status == 204 else body)


@st.composite
def stream_result(draw: st.DrawFn, v03: bool) -> Any:
    kind = draw(st.sampled_from(["task", "status", "status", "status", "artifact", "message", "odd"]))
    odd_ids = draw(st.integers(0, 9)) == 4  # ids that are no string: test_a_status_update_without_a_task_id_ends_the_stream_as_32006
    if kind == "task":
        task = draw(task_value(v03, odd_ids))
        return task if v03 else {"task": task}
    if kind == "status":
        upd = draw(status_update_value(v03, odd_ids))
        return upd if v03 else {"statusUpdate": upd}
    if kind == "artifact":
        upd = draw(artifact_update_value(v03))
        return upd if v03 else {"artifactUpdate": upd}
    if kind == "message":
        return MESSAGE_V03 if v03 else {"message": MESSAGE_V10}
    return draw(ODD_RESULTS)


@st.composite
def stream_answer(draw: st.DrawFn, client: str, raw_id: bytes) -> Raw | Sse:
    """A worker's SSE answer as raw steps (bytes): a first Task, then events, some of them
    junk, in any of the SSE framings; or, sometimes, a plain JSON answer instead (F09)."""
    _, version, _, _ = CLIENTS[client]
    v03 = version == "0.3"
    if draw(st.integers(0, 9)) == 4:
        return draw(unary_answer(client, raw_id))
    eol = draw(st.sampled_from(["\n"] * 6 + ["\r\n", "\r"]))
    frames: list[bytes] = []
    first = {"id": T, "contextId": "c-" + T, "status": {"state": "TASK_STATE_SUBMITTED" if not v03 else "submitted"}}
    results = [({**first, "kind": "task"} if v03 else {"task": first})]
    results += draw(st.lists(stream_result(v03), min_size=0, max_size=5))
    if draw(st.booleans()):  # the task's end
        end = {"taskId": T, "contextId": "c-" + T, "status": {"state": draw(DOCUMENTED_STATES)}}
        results.append({**end, "kind": "status-update", "final": True} if v03 else {"statusUpdate": end})
    for result in results:
        step = draw(st.sampled_from(["event"] * 30 + ["junk-line", "comment", "no-data", "not-json", "error-event",
                                                      "wrong-id", "multi-line", "event-name", "no-envelope"]))
        envelope = {"jsonrpc": "2.0", "id": "@ID@", "result": result}
        data = dumps(envelope).replace('"@ID@"', raw_id.decode())
        if step == "junk-line":
            frames.append(f"foo: bar{eol}x{eol}".encode())
        elif step == "comment":
            frames.append(f": ping{eol}{eol}".encode())
        elif step == "no-data":
            frames.append(f"event: message{eol}id: 3{eol}{eol}".encode())
        elif step == "not-json":
            frames.append(f"data: not-json {draw(st.sampled_from(['{', '[1,', 'x', '']))}{eol}{eol}".encode())
            continue
        elif step == "error-event":
            err = dumps({"jsonrpc": "2.0", "id": "@ID@", "error": draw(ERRORS)}).replace('"@ID@"', raw_id.decode())
            frames.append(f"event: error{eol}data: {err}{eol}{eol}".encode())
        elif step == "wrong-id":
            data = dumps({**envelope, "id": draw(st.sampled_from(["other", 99, None, [1]]))})
        elif step == "multi-line":
            data = data.replace(",", f",{eol}data: ", 2)
        elif step == "event-name":
            frames.append(f"event: {draw(st.sampled_from(['message', 'error', 'x']))}{eol}".encode())
        elif step == "no-envelope":
            data = dumps(result)
        frames.append(f"data: {data}{eol}{eol}".encode())
    body = b"".join(frames)
    if draw(st.integers(0, 7)) == 3:  # the last event cut off by EOF (F08 (i)), or mid-JSON
        body = body.rstrip(b"\r\n") if draw(st.booleans()) else body[: max(0, len(body) - draw(st.integers(1, 20)))]
    if draw(st.integers(0, 9)) == 4:
        body = b"\xef\xbb\xbf" + body
    ctype = draw(st.sampled_from(["text/event-stream"] * 8 + ["text/event-stream; charset=utf-8", "Text/Event-Stream"]))
    return Sse([body] if body else [], headers={"content-type": ctype})



# ------------------------------------------------------------------------------ checks

def worker_doc(doc: Any) -> dict[str, Any] | None:
    """A worker's JSON-RPC response as a JSON-RPC reader takes it: an object with exactly one
    of ``result`` / ``error`` (an ``"error": null`` next to a result is no error), else None."""
    if not isinstance(doc, dict):
        return None
    if "error" in doc and doc["error"] is None and "result" in doc:
        doc = {k: v for k, v in doc.items() if k != "error"}
    if ("result" in doc) == ("error" in doc):
        return None
    return doc


def located(result: Any, version: str) -> tuple[str, dict[str, Any]] | None:
    """The Task or status update a result unambiguously is (docs/protocol.md §3.4, §3.5,
    §11 pitfall 3): a one-member ``task`` / ``statusUpdate`` wrapper (v1.0), a bare Task
    (``id`` and ``status``, no other ``kind``), or a v0.3 object with its ``kind``."""
    if not isinstance(result, dict):
        return None
    if len(result) == 1:
        (key, inner), = result.items()
        if key in ("task", "statusUpdate") and isinstance(inner, dict):
            return ("task" if key == "task" else "status"), inner
        return None
    kind = result.get("kind")
    if kind == "task" or (kind is None and "id" in result and "status" in result and "taskId" not in result):
        return "task", result
    if kind == "status-update":
        return "status", result
    return None


def unknown_state_inside(result: Any, version: str) -> bool:
    """True when the result is a Task or status update whose state no reading exists for."""
    found = located(result, version)
    if found is None:
        return False
    _, obj = found
    if "status" not in obj:
        return False
    status = obj["status"]
    if not isinstance(status, dict):
        return True  # a status that is no object has no state to read (tests/proxy/test_hostile.py)
    return must_refuse(status.get("state"))


def doubtful_state_inside(value: Any) -> bool:
    """True when some ``status`` inside ``value`` is no object or holds a state with no
    reading."""
    if isinstance(value, dict):
        if "status" in value and (not isinstance(value["status"], dict)
                                  or fold(value["status"].get("state")) == "?"):
            return True
        return any(doubtful_state_inside(v) for v in value.values())
    if isinstance(value, list):
        return any(doubtful_state_inside(v) for v in value)
    return False


def check_result(worker: Any, client: Any, version: str) -> None:
    """The client's result is the worker's with at most the states re-spelled (to the same
    state); a Task or status update carries its state in the client's version's canonical
    spelling (F01; v1.0 may keep an empty one, ProtoJSON's zero value), and its end-of-stream
    flag as F17 (a) says: a v0.3 status update always has ``final``, true exactly for a
    terminal or interrupted state; a v1.0 one never has it."""
    assert respelled(worker, client, version), f"worker sent {worker!r}\nclient got {client!r}"
    found = located(client, version)
    if found is None or not isinstance(found[1].get("status"), dict):
        return
    kind, obj = found
    status = obj["status"]
    if "state" in status:
        # v1.0 may keep an empty or null state: ProtoJSON reads both as the zero value
        assert status["state"] in CANONICAL[version] or (version != "0.3" and status["state"] in ("", None)), status
    if kind == "status" and version.startswith("0.3"):
        assert obj.get("final") is (fold(status.get("state")) in TERMINAL | INTERRUPTED), obj
    if kind == "status" and version == "1.0":
        assert "final" not in obj, obj


def unbound_state(doc: dict[str, Any] | None, version: str) -> bool:
    """True for a stream event holding a Task or status update whose task id is no
    non-empty string: it cannot be recorded, so it is refused (-32006) and ends the stream
    (test_a_status_update_without_a_task_id_ends_the_stream_as_32006)."""
    found = located(doc.get("result"), version) if isinstance(doc, dict) else None
    if found is None:
        return False
    value = found[1].get("id" if found[0] == "task" else "taskId")
    return not (isinstance(value, str) and value)


def valid_error(err: Any) -> bool:
    """A JSON-RPC 2.0 Error object: an integer ``code`` and a string ``message``."""
    return isinstance(err, dict) and isinstance(err.get("code"), int) and not isinstance(err.get("code"), bool) \
        and isinstance(err.get("message"), str)


def valid_envelope(doc: dict[str, Any]) -> bool:
    """A worker response (already one of result / error) the gateway may use (docs/protocol.md
    §6.3, what the gateway takes from a worker): ``"jsonrpc": "2.0"`` and, for an error, an
    error object. A wrong or missing ``id`` is the gateway's to fix (F16); anything else is an
    invalid agent response."""
    return doc.get("jsonrpc") == "2.0" and ("error" not in doc or valid_error(doc["error"]))


def gateway_error(doc: dict[str, Any]) -> int | None:
    err = doc.get("error")
    return err.get("code") if isinstance(err, dict) else None
