"""docs/field-cases.md through the real gateway: a scripted worker replays each case's input under
real uvicorn, a real HTTP client talks to the gateway, and each test asserts the case's
"correct gateway behaviour". Test names carry the case id."""

from __future__ import annotations

import uuid

import asyncio
import logging
from typing import Any

import httpx
import orjson
import pytest

from gateway.a2a.states import TaskState
from gateway.invariants.engine import CORRECTED_KEY
from tests.proxy.conftest import Harness, frames
from tests.support.objects import artifact_update, status_update, task
from tests.support.scripted_worker import Event, Gate, Sse
from tests.support.servers import await_until, wait_until

V1 = {"A2A-Version": "1.0"}


def send_msg(req_id: Any, text: str = "hi", task_id: str | None = None, method: str = "SendMessage") -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": f"m-{req_id}-{uuid.uuid4().hex[:8]}", "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id:
        message.update(taskId=task_id, contextId=task_id.replace("t-", "c-"))
    return {"jsonrpc": "2.0", "id": req_id, "method": method, "params": {"message": message}}


def send_msg_v03(req_id: Any, task_id: str | None = None, method: str = "message/send") -> dict[str, Any]:
    message: dict[str, Any] = {"kind": "message", "messageId": f"m-{req_id}-{uuid.uuid4().hex[:8]}", "role": "user",
                               "parts": [{"kind": "text", "text": "hi"}]}
    if task_id:
        message["taskId"] = task_id
    return {"jsonrpc": "2.0", "id": req_id, "method": method, "params": {"message": message}}


def results(raw: bytes) -> list[Any]:
    """The ``result`` of every data frame, in order."""
    return [f["data"]["result"] for f in frames(raw) if isinstance(f["data"], dict) and "result" in f["data"]]


def complete_task(h: Harness, tid: str) -> None:
    """Make the gateway's ledger hold ``tid`` as completed: a GetTask answered COMPLETED."""
    h.worker.on("GetTask", json_result=task(tid, "TASK_STATE_COMPLETED"))
    r = h.rpc({"jsonrpc": "2.0", "id": "setup", "method": "GetTask", "params": {"id": tid}}, headers=V1)
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


# ---------------------------------------------------------------------------------- F01

INPUT_REQUIRED_SPELLINGS = ["input_required", "input-required", "INPUT_REQUIRED", "Input-Required",
                            "TASK_STATE_INPUT_REQUIRED"]
WORKING_SPELLINGS = ["Working", "working", "TASK_STATE_WORKING"]


@pytest.mark.parametrize("spelling", INPUT_REQUIRED_SPELLINGS + WORKING_SPELLINGS)
def test_f01_every_spelling_reaches_a_v10_client_canonical(h: Harness, spelling: str) -> None:
    """A v1.0 client gets TASK_STATE_*; the counter moves once per non-canonical input only."""
    expected = "TASK_STATE_WORKING" if spelling.lower() == "working" or "WORKING" in spelling else "TASK_STATE_INPUT_REQUIRED"
    msg = {"messageId": "m-1", "role": "ROLE_AGENT", "parts": [{"text": "Which date?"}]}
    h.worker.on("GetTask", json_result={"id": "t-1", "contextId": "c-1",
                                        "status": {"state": spelling, "message": msg}})
    r = h.rpc({"jsonrpc": "2.0", "id": "g-1", "method": "GetTask", "params": {"id": "t-1"}}, headers=V1)
    body = r.json()
    assert r.status_code == 200 and body["id"] == "g-1"
    assert body["result"]["status"]["state"] == expected
    assert body["result"]["status"]["message"] == msg
    counted = h.metric("a2a_gateway_state_normalizations_total")
    assert counted == (0 if spelling == expected else 1)


@pytest.mark.parametrize("spelling,family", [("input_required", "underscore"), ("Input-Required", "case_variant"),
                                             ("input-required", "v03_kebab"), ("INPUT_REQUIRED", "case_variant")])
def test_f01_counter_is_labelled_by_family_never_by_raw_string(h: Harness, spelling: str, family: str) -> None:
    h.worker.on("GetTask", json_result=task("t-1", spelling))
    h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}, headers=V1)
    assert h.metric("a2a_gateway_state_normalizations_total", family=family) == 1
    text = h.http.get(h.admin.url + "/metrics").text
    assert spelling not in text.replace("TASK_STATE_INPUT_REQUIRED", "")


@pytest.mark.parametrize("spelling", INPUT_REQUIRED_SPELLINGS)
def test_f01_v03_client_gets_kebab_case(h: Harness, spelling: str) -> None:
    h.worker.on("tasks/get", json_result={"kind": "task", **task("t-1", spelling)})
    r = h.rpc({"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"id": "t-1"}})
    result = r.json()["result"]
    assert result["status"]["state"] == "input-required"
    assert result["kind"] == "task"
    assert h.metric("a2a_gateway_state_normalizations_total") == (0 if spelling == "input-required" else 1)


def test_f01_normalized_interrupted_task_still_accepts_a_follow_up(h: Harness) -> None:
    h.worker.on("GetTask", json_result=task("t-1", "input_required"))
    h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}, headers=V1)
    h.worker.on("SendMessage", json_result={"task": task("t-1", "TASK_STATE_WORKING")})
    r = h.rpc(send_msg(2, "Tuesday", task_id="t-1"), headers=V1)
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert len(h.worker.calls("SendMessage")) == 1


# ---------------------------------------------------------------------------------- F03

@pytest.mark.parametrize("first_status", [{}, {"state": "TASK_STATE_UNSPECIFIED"}, {"state": "unknown"}])
def test_f03_unspecified_first_event_neither_terminal_nor_closing(h: Harness, first_status: dict[str, Any]) -> None:
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-3", "contextId": "c-3", "status": first_status}}),
        Event(result=status_update("t-3", "TASK_STATE_WORKING")),
        Event(result=status_update("t-3", "TASK_STATE_COMPLETED")),
    ])
    r, raw = h.stream(send_msg(3, method="SendStreamingMessage"), headers=V1)
    got = results(raw)
    assert len(got) == 3
    assert got[0]["task"]["id"] == "t-3"
    assert [g["statusUpdate"]["status"]["state"] for g in got[1:]] == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert h.divergences("unknown_state") == 0


def test_f03_v03_client_sees_unknown_with_final_false(h: Harness) -> None:
    h.worker.on("message/stream", sse=[
        Event(result={"kind": "task", "id": "t-3", "contextId": "c-3", "status": {}}),
        Event(result={"kind": "status-update", "taskId": "t-3", "contextId": "c-3",
                      "status": {"state": "unknown"}, "final": False}),
        Event(result={"kind": "status-update", "taskId": "t-3", "contextId": "c-3",
                      "status": {"state": "completed"}, "final": True}),
    ])
    _, raw = h.stream(send_msg_v03("s-3", method="message/stream"))
    got = results(raw)
    assert [g["status"]["state"] for g in got] == ["unknown", "unknown", "completed"]
    assert got[1]["final"] is False


def test_f03_unknown_state_in_enforce_mode_is_refused_with_32006_and_closes(h: Harness) -> None:
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": task("t-3", "paused")}),
        Event(result=status_update("t-3", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.stream(send_msg("s-1", method="SendStreamingMessage"), headers=V1)
    fs = frames(raw)
    assert len(fs) == 1
    assert fs[0]["event"] == "error"
    assert fs[0]["data"]["id"] == "s-1"
    assert fs[0]["data"]["error"]["code"] == -32006
    assert h.divergences("unknown_state") == 1


def test_f03_unknown_state_unary_answer_becomes_32006_with_client_id(h: Harness) -> None:
    h.worker.on("GetTask", json_result=task("t-3", "paused"))
    r = h.rpc({"jsonrpc": "2.0", "id": "g-3", "method": "GetTask", "params": {"id": "t-3"}}, headers=V1)
    assert r.status_code == 200
    assert r.json()["id"] == "g-3" and r.json()["error"]["code"] == -32006
    assert "result" not in r.json()


def test_f03_unknown_state_in_observe_mode_is_forwarded_unchanged_and_counted(make_harness: Any) -> None:
    h = make_harness(mode="observe")
    h.worker.on("GetTask", json_result=task("t-3", "paused"))
    r = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-3"}}, headers=V1)
    assert r.json()["result"]["status"]["state"] == "paused"
    assert h.metric("a2a_gateway_divergences_total", kind="unknown_state", action="observed") == 1


# ---------------------------------------------------------------------------------- F04

def _f04_script(h: Harness) -> Gate:
    gate = Gate()
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": task("t-4", "TASK_STATE_WORKING")}),
        Event(result=artifact_update("t-4", "a-0", "early output", lastChunk=True)),
        gate,
        Event(result=status_update("t-4", "TASK_STATE_CANCELED")),
        Event(result=artifact_update("t-4", "a-4", "late output")),
        Event(result=status_update("t-4", "TASK_STATE_COMPLETED")),
    ])
    h.worker.on("CancelTask", json_result=task("t-4", "TASK_STATE_CANCELED"))
    return gate


async def _f04_run(h: Harness, gate: Gate) -> tuple[httpx.Response, list[Any]]:
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        body = orjson.dumps(send_msg(4, method="SendStreamingMessage"))
        hdrs = {"content-type": "application/json", "accept": "text/event-stream", **V1}
        async with client.stream("POST", h.gateway.url + "/", content=body, headers=hdrs) as stream:
            raw = b""
            chunks = stream.aiter_raw()
            while len(results(raw)) < 2:
                raw += await chunks.__anext__()
            cancel = await client.post(h.gateway.url + "/", headers=V1, json={
                "jsonrpc": "2.0", "id": "k-1", "method": "CancelTask", "params": {"id": "t-4"}})
            gate.release()
            async for chunk in chunks:
                raw += chunk
    return cancel, results(raw)


async def test_f04_canceled_wins_late_output_and_completed_never_delivered(h: Harness) -> None:
    gate = _f04_script(h)
    cancel, got = await _f04_run(h, gate)
    assert cancel.json() == {"jsonrpc": "2.0", "id": "k-1", "result": task("t-4", "TASK_STATE_CANCELED")}
    assert [next(iter(g)) for g in got] == ["task", "artifactUpdate", "statusUpdate"]
    assert got[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    await await_until(lambda: h.divergences("event_after_terminal") == 2)
    await await_until(lambda: h.divergences("terminal_regression") == 1)
    assert h.divergences("artifact_after_terminal") == 1


async def test_f04_later_get_task_reports_canceled_without_late_artifact(h: Harness, caplog: Any) -> None:
    gate = _f04_script(h)
    await _f04_run(h, gate)
    await await_until(lambda: h.divergences("terminal_regression") == 1)
    early = {"artifactId": "a-0", "parts": [{"text": "early output"}]}
    late = {"artifactId": "a-4", "parts": [{"text": "late output"}]}
    h.worker.on("GetTask", json_result=task("t-4", "TASK_STATE_COMPLETED", artifacts=[early, late]))
    logger = logging.getLogger("a2a_gateway")
    logger.addHandler(caplog.handler)
    try:
        r = h.rpc({"jsonrpc": "2.0", "id": "g-4", "method": "GetTask", "params": {"id": "t-4"}}, headers=V1)
    finally:
        logger.removeHandler(caplog.handler)
    result = r.json()["result"]
    assert result["status"]["state"] == "TASK_STATE_CANCELED"
    assert result["artifacts"] == [early]
    assert result["metadata"][CORRECTED_KEY]["workerState"] == "TASK_STATE_COMPLETED"
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING and rec.getMessage() == "divergence"]
    assert any(getattr(rec, "task_id", None) == "t-4" for rec in warnings)


async def test_f04_observe_mode_forwards_everything_but_counts(make_harness: Any) -> None:
    h = make_harness(mode="observe")
    gate = _f04_script(h)
    _, got = await _f04_run(h, gate)
    assert len(got) == 5
    assert h.metric("a2a_gateway_divergences_total", kind="terminal_regression", action="observed") == 1


# ---------------------------------------------------------------------------------- F05

def test_f05a_follow_up_to_terminal_task_is_answered_by_gateway(h: Harness) -> None:
    complete_task(h, "t-5")
    r = h.rpc(send_msg(11, "one more thing", task_id="t-5"), headers=V1)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert r.json()["id"] == 11
    assert err["code"] == -32004
    assert "t-5" in err["message"] and "new task" in err["message"]
    assert err["data"] == [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "UNSUPPORTED_OPERATION",
                            "domain": "a2a-protocol.org", "metadata": {"taskId": "t-5"}}]
    assert h.worker.calls("SendMessage") == []
    assert h.metric("a2a_gateway_local_rejections_total", method="SendMessage", reason="terminal_task") == 1


def test_f05_list_answer_keeps_a_terminal_task_terminal_and_the_follow_up_refused(h: Harness) -> None:
    """A ListTasks answer that shows a recorded-terminal task as working again is corrected
    like a GetTask snapshot; a task first seen in a list is tracked like any observation."""
    complete_task(h, "t-5")
    listed = {"tasks": [task("t-5", "Working"), task("t-6", "working")], "nextPageToken": ""}
    h.worker.on("ListTasks", json_result=listed)
    r = h.rpc({"jsonrpc": "2.0", "id": "l", "method": "ListTasks", "params": {}}, headers=V1)
    tasks = r.json()["result"]["tasks"]
    assert [t["status"]["state"] for t in tasks] == ["TASK_STATE_COMPLETED", "TASK_STATE_WORKING"]
    assert tasks[0]["metadata"][CORRECTED_KEY]["reason"] == "terminal_regression"
    assert h.divergences("terminal_regression") == 1
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", "t-6"))
    assert stored is not None and stored.record.state is TaskState.WORKING
    r = h.rpc(send_msg(12, task_id="t-5"), headers=V1)
    assert r.json()["error"]["code"] == -32004 and h.worker.calls("SendMessage") == []


def test_f05b_subscribe_to_terminal_task_gets_plain_json_not_a_stream(h: Harness) -> None:
    complete_task(h, "t-5")
    r, raw = h.stream({"jsonrpc": "2.0", "id": 12, "method": "SubscribeToTask", "params": {"id": "t-5"}}, headers=V1)
    assert r.headers["content-type"] == "application/json"
    assert orjson.loads(raw)["error"]["code"] == -32004
    assert h.worker.calls("SubscribeToTask") == []


@pytest.mark.parametrize("body", [send_msg_v03(13, task_id="t-5"),
                                  {"jsonrpc": "2.0", "id": 14, "method": "tasks/resubscribe", "params": {"id": "t-5"}}])
def test_f05d_v03_forms_get_32004_too(h: Harness, body: dict[str, Any]) -> None:
    complete_task(h, "t-5")
    r = h.rpc(body)
    if body["method"] == "tasks/resubscribe":  # F17 (b): a v0.3 stream refusal is a stream
        assert r.headers["content-type"].startswith("text/event-stream")
        [frame] = frames(r.content)
        doc = frame["data"]
    else:
        assert r.headers["content-type"] == "application/json"
        doc = r.json()
    assert doc["error"]["code"] == -32004
    assert doc["id"] == body["id"]
    assert h.worker.calls(body["method"]) == []


@pytest.mark.parametrize("method", ["message/stream", "tasks/resubscribe"])
def test_f17b_v03_streaming_refusal_is_one_sse_error_event(h: Harness, method: str) -> None:
    complete_task(h, "t-5")
    params = ({"id": "t-5"} if method == "tasks/resubscribe" else
              {"message": {"kind": "message", "messageId": "m-9", "role": "user", "taskId": "t-5",
                           "parts": [{"kind": "text", "text": "more"}]}})
    r, raw = h.stream({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    [frame] = frames(raw)
    assert frame["data"]["id"] == "s-1"
    assert frame["data"]["error"]["code"] == -32004
    assert "new task" in frame["data"]["error"]["message"]
    assert h.worker.calls(method) == []


@pytest.mark.parametrize("worker_code", [-32602, -32001, -32603])
def test_f05c_worker_error_on_terminal_task_is_rewritten_after_get_task(h: Harness, worker_code: int) -> None:
    h.worker.on("SendMessage", json_error={"code": worker_code, "message": "task in terminal state"})
    h.worker.on("GetTask", json_result=task("t-5", "TASK_STATE_COMPLETED"))
    r = h.rpc(send_msg(11, task_id="t-5"), headers=V1)
    assert r.json()["error"]["code"] == -32004
    assert r.json()["id"] == 11
    assert len(h.worker.calls("GetTask")) == 1
    assert h.metric("a2a_gateway_error_rewrites_total", from_code=str(worker_code), to_code="-32004") == 1


def test_f05c_subscribe_32001_is_rewritten_when_task_is_terminal(h: Harness) -> None:
    h.worker.on("SubscribeToTask", json_error={"code": -32001, "message": "no active execution"})
    h.worker.on("GetTask", json_result=task("t-5", "TASK_STATE_FAILED"))
    r, raw = h.stream({"jsonrpc": "2.0", "id": 12, "method": "SubscribeToTask", "params": {"id": "t-5"}}, headers=V1)
    assert orjson.loads(raw)["error"]["code"] == -32004


def test_f05c_worker_error_left_alone_when_task_is_live(h: Harness) -> None:
    h.worker.on("SendMessage", json_error={"code": -32602, "message": "bad part"})
    h.worker.on("GetTask", json_result=task("t-5", "TASK_STATE_INPUT_REQUIRED"))
    r = h.rpc(send_msg(11, task_id="t-5"), headers=V1)
    assert r.json()["error"] == {"code": -32602, "message": "bad part"}


def test_f05e_reused_task_id_in_new_stream_is_refused_and_not_merged(h: Harness) -> None:
    complete_task(h, "t-5")
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": task("t-5", "TASK_STATE_WORKING")}),
        Event(result=artifact_update("t-5", "a-5", "reused")),
    ])
    _, raw = h.stream(send_msg("s-5", method="SendStreamingMessage"), headers=V1)
    fs = frames(raw)
    assert len(fs) == 1 and fs[0]["event"] == "error"
    assert fs[0]["data"]["error"]["code"] == -32006 and fs[0]["data"]["id"] == "s-5"
    assert h.divergences("reused_task_id") == 1
    r = h.rpc(send_msg(15, task_id="t-5"), headers=V1)
    assert r.json()["error"]["code"] == -32004


# ---------------------------------------------------------------------------------- F06

def test_f06_sealed_artifact_update_dropped_and_append_creates(h: Harness) -> None:
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": task("t-6", "TASK_STATE_WORKING")}),
        Event(result=artifact_update("t-6", "a-6", "Hel")),
        Event(result=artifact_update("t-6", "a-6", "lo", append=True, lastChunk=True)),
        Event(result=artifact_update("t-6", "a-6", "!!", append=True)),
        Event(result=artifact_update("t-6", "a-7", "x", append=True)),
        Event(result=status_update("t-6", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.stream(send_msg(6, method="SendStreamingMessage"), headers=V1)
    got = results(raw)
    texts = [g["artifactUpdate"]["artifact"]["parts"][0]["text"] for g in got if "artifactUpdate" in g]
    assert texts == ["Hel", "lo", "x"]
    assert got[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert h.divergences("artifact_after_last_chunk") == 1
    buggy = [{"artifactId": "a-6", "parts": [{"text": "Hel"}, {"text": "lo"}, {"text": "!!"}]},
             {"artifactId": "a-7", "parts": [{"text": "x"}]}]
    h.worker.on("GetTask", json_result=task("t-6", "TASK_STATE_COMPLETED", artifacts=buggy))
    view = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-6"}}, headers=V1).json()
    assert view["result"]["artifacts"] == [
        {"artifactId": "a-6", "parts": [{"text": "Hel"}, {"text": "lo"}]},
        {"artifactId": "a-7", "parts": [{"text": "x"}]},
    ]


def test_f06_event_for_another_task_or_context_is_refused(h: Harness) -> None:
    other_ctx = status_update("t-6", "TASK_STATE_WORKING")
    other_ctx["statusUpdate"]["contextId"] = "c-other"
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": task("t-6", "TASK_STATE_WORKING")}),
        Event(result=status_update("t-99", "TASK_STATE_COMPLETED")),
        Event(result=other_ctx),
        Event(result=status_update("t-6", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.stream(send_msg(6, method="SendStreamingMessage"), headers=V1)
    got = results(raw)
    assert len(got) == 2
    assert got[-1]["statusUpdate"]["taskId"] == "t-6"
    assert h.divergences("task_id_mismatch") == 1
    assert h.divergences("context_id_mismatch") == 1


# ---------------------------------------------------------------------------------- F08 (i)

def test_f08i_dangling_last_frame_gives_exactly_one_terminal_event(h: Harness) -> None:
    first = b'data: {"jsonrpc":"2.0","id":8,"result":{"task":{"id":"t-8","contextId":"c-8","status":{"state":"TASK_STATE_WORKING"}}}}\n\n'
    last = b'data: {"jsonrpc":"2.0","id":8,"result":{"statusUpdate":{"taskId":"t-8","contextId":"c-8","status":{"state":"TASK_STATE_COMPLETED"}}}}'
    h.worker.on("SendStreamingMessage", sse=[first, last])
    _, raw = h.stream(send_msg(8, method="SendStreamingMessage"), headers=V1)
    states = [g.get("statusUpdate", {}).get("status", {}).get("state") for g in results(raw)]
    assert states.count("TASK_STATE_COMPLETED") == 1
    assert raw.endswith(b"\n\n")
    # each block is one event: the gateway's event id (docs/resume.md §1.1), then its data
    assert all(block.startswith(b"id: ") and block.count(b"\ndata: ") == 1 for block in raw.split(b"\n\n") if block)


def test_f08i_truncated_json_at_eof_becomes_an_error_event_not_a_state(h: Harness) -> None:
    first = b'data: {"jsonrpc":"2.0","id":8,"result":{"task":{"id":"t-8","contextId":"c-8","status":{"state":"TASK_STATE_WORKING"}}}}\n\n'
    h.worker.on("SendStreamingMessage", sse=[first, b'data: {"jsonrpc":"2.0","id":8,"res'])
    _, raw = h.stream(send_msg(8, method="SendStreamingMessage"), headers=V1)
    fs = frames(raw)
    assert len(fs) == 2
    assert fs[1]["event"] == "error" and fs[1]["data"]["error"]["code"] == -32603
    assert fs[1]["data"]["id"] == 8


# ---------------------------------------------------------------------------------- F09

F09_EVENT_2 = orjson.dumps({"jsonrpc": "2.0", "id": "s-1", "result": status_update("t-9", "TASK_STATE_WORKING")})


@pytest.mark.parametrize("method,params", [
    ("SendStreamingMessage", send_msg("s-1", method="SendStreamingMessage")["params"]),
    ("message/stream", send_msg_v03("s-2", method="message/stream")["params"]),
    ("SubscribeToTask", {"id": "t-9"}),
    ("tasks/resubscribe", {"id": "t-9"}),
])
async def test_f09_streaming_methods_relay_incrementally(h: Harness, method: str, params: dict[str, Any]) -> None:
    gate = Gate()
    half = len(F09_EVENT_2) // 2
    h.worker.on(method, sse=[
        Event(result={"task": task("t-9", "TASK_STATE_WORKING")}),
        b": ping\n\n",
        gate,
        b"id: 2\nevent: message\nretry: 3000\ndata: " + F09_EVENT_2[:half],
        F09_EVENT_2[half:] + b"\n\n",
        Event(result=status_update("t-9", "TASK_STATE_COMPLETED")),
    ])
    headers = {"content-type": "application/json", "accept": "text/event-stream", **V1}
    body = orjson.dumps({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params})
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        async with client.stream("POST", h.gateway.url + "/", content=body, headers=headers) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert "content-length" not in r.headers
            raw = b""
            chunks = r.aiter_raw()
            while not results(raw):
                raw += await chunks.__anext__()
            assert not gate.is_set()  # event 1 arrived before the worker sent event 2
            gate.release()
            async for chunk in chunks:
                raw += chunk
    fs = frames(raw)
    data = [f for f in fs if f["data"] is not None]
    assert len(data) == 3
    assert [f["comment"] for f in fs if f["comment"]] == ["ping"]
    expected = "working" if "/" in method else "TASK_STATE_WORKING"  # each client in its own spelling
    assert data[1]["data"]["result"]["statusUpdate"]["status"]["state"] == expected
    assert all(f["data"]["id"] == "s-1" for f in data)


def test_f09_non_json_event_ends_stream_with_32006(h: Harness) -> None:
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": task("t-9", "TASK_STATE_WORKING")}),
        b"data: not-json\n\n",
        Event(result=status_update("t-9", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.stream(send_msg("s-1", method="SendStreamingMessage"), headers=V1)
    fs = frames(raw)
    assert len(fs) == 2
    assert fs[1]["data"]["error"]["code"] == -32006 and fs[1]["data"]["id"] == "s-1"


def test_f09_plain_json_error_to_streaming_request_keeps_client_id(h: Harness) -> None:
    h.worker.on("SendStreamingMessage", json_error={"code": -32009, "message": "version"}, id="worker-own-id")
    r, raw = h.stream(send_msg("s-1", method="SendStreamingMessage"), headers=V1)
    assert r.headers["content-type"] == "application/json"
    doc = orjson.loads(raw)
    assert doc["id"] == "s-1" and doc["error"]["code"] == -32009


def test_f09_event_over_size_cap_closes_stream_with_error(make_harness: Any) -> None:
    h = make_harness(limits={"max_event_bytes": 2048})
    big = {"task": task("t-9", "TASK_STATE_WORKING", metadata={"blob": "x" * 4096})}
    h.worker.on("SendStreamingMessage", sse=[Event(result={"task": task("t-9", "TASK_STATE_WORKING")}), Event(result=big)])
    _, raw = h.stream(send_msg("s-1", method="SendStreamingMessage"), headers=V1)
    fs = frames(raw)
    assert fs[-1]["event"] == "error"
    assert h.metric("a2a_gateway_upstream_errors_total", reason="event_too_large") == 1


# ---------------------------------------------------------------------------------- F15

@pytest.mark.parametrize("raw,code,want_id", [
    (b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":', -32700, None),
    (b'{"id":2,"method":"GetTask","params":{"id":"t-15"}}', -32600, 2),
    (b'{"jsonrpc":"2.0","id":{"x":1},"method":"GetTask","params":{"id":"t-15"}}', -32600, None),
    (b'{"jsonrpc":"2.0","id":4,"method":"GetTask","params":["t-15"]}', -32602, 4),
    (b'{"jsonrpc":"2.0","id":5,"method":"tasks/frobnicate","params":{}}', -32601, 5),
    (b'[{"jsonrpc":"2.0","id":6,"method":"GetTask","params":{"id":"t-15"}}]', -32600, None),
    (b'{"jsonrpc":"2.0","id":"7","method":"GetTask","params":7}', -32602, "7"),
])
def test_f15_malformed_input_answered_by_gateway(h: Harness, raw: bytes, code: int, want_id: Any) -> None:
    r = h.rpc(raw)
    assert r.status_code == 200
    doc = r.json()
    assert doc["error"]["code"] == code
    assert doc["id"] == want_id and type(doc["id"]) is type(want_id)
    assert h.rpc_calls() == []


def test_f15_cancel_of_known_completed_task_is_32002(h: Harness) -> None:
    complete_task(h, "t-15")
    r = h.rpc({"jsonrpc": "2.0", "id": 6, "method": "CancelTask", "params": {"id": "t-15"}}, headers=V1)
    err = r.json()["error"]
    assert err["code"] == -32002 and err["data"][0]["reason"] == "TASK_NOT_CANCELABLE"
    assert h.worker.calls("CancelTask") == []


@pytest.mark.parametrize("worker_code", [-32004, -32603])
def test_f15_worker_cancel_error_rewritten_to_32002(h: Harness, worker_code: int) -> None:
    h.worker.on("CancelTask", json_error={"code": worker_code, "message": "nope"})
    h.worker.on("GetTask", json_result=task("t-15", "TASK_STATE_COMPLETED"))
    r = h.rpc({"jsonrpc": "2.0", "id": 6, "method": "CancelTask", "params": {"id": "t-15"}}, headers=V1)
    assert r.json()["error"]["code"] == -32002
    assert h.metric("a2a_gateway_error_rewrites_total", from_code=str(worker_code), to_code="-32002") == 1


@pytest.mark.parametrize("req_id", ["7", 7])
@pytest.mark.parametrize("status,body", [
    (500, b"Traceback (most recent call last):\n  File secret.py\nKeyError: 'db_password'"),
    (200, b"<html>oops</html>"),
])
def test_f15_worker_500_or_non_json_becomes_32603_with_client_id(h: Harness, req_id: Any, status: int, body: bytes) -> None:
    h.worker.on("GetTask", raw=(status, {"content-type": "text/html"}, body))
    r = h.rpc({"jsonrpc": "2.0", "id": req_id, "method": "GetTask", "params": {"id": "t-15"}}, headers=V1)
    doc = r.json()
    assert r.status_code == 502
    assert doc["id"] == req_id and type(doc["id"]) is type(req_id)
    assert doc["error"]["code"] == -32603
    assert "Traceback" not in r.text and "db_password" not in r.text and "oops" not in r.text


def test_f15_body_over_cap_is_413(make_harness: Any) -> None:
    h = make_harness(limits={"max_body_bytes": 1024})
    r = h.rpc(send_msg(1, "x" * 4096), headers=V1)
    assert r.status_code == 413
    assert h.rpc_calls() == []


@pytest.mark.parametrize("raw_id", [b"1e5", b"1.50", b"-0"])
def test_f15_numeric_id_comes_back_as_written_in_the_gateways_own_errors(h: Harness, raw_id: bytes) -> None:
    r = h.rpc(b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"GetTask","params":"t-15"}', headers=V1)
    assert r.json()["error"]["code"] == -32602
    assert r.content.startswith(b'{"jsonrpc":"2.0","id":' + raw_id + b",")
    assert h.rpc_calls() == []


def test_f15_body_nested_past_max_json_depth_is_32600_with_client_id(h: Harness) -> None:
    deep = b"[" * 200 + b"]" * 200
    r = h.rpc(b'{"jsonrpc":"2.0","id":"d-15","method":"GetTask","params":{"id":"t-15","x":' + deep + b"}}",
              headers=V1)
    assert (r.status_code, r.json()["id"], r.json()["error"]["code"]) == (200, "d-15", -32600)
    assert h.rpc_calls() == []


@pytest.mark.parametrize("req_id", [None, 9])
def test_f16_worker_answer_without_an_id_gets_the_clients(h: Harness, req_id: Any) -> None:
    h.worker.on("GetTask", raw=(200, {"content-type": "application/json"},
                                orjson.dumps({"jsonrpc": "2.0", "result": task("t-16", "TASK_STATE_WORKING")})))
    r = h.rpc({"jsonrpc": "2.0", "id": req_id, "method": "GetTask", "params": {"id": "t-16"}}, headers=V1)
    doc = r.json()
    assert "id" in doc and doc["id"] == req_id and doc["result"]["id"] == "t-16"
    assert h.metric("a2a_gateway_divergences_total", kind="jsonrpc_id_mismatch") == 1


def test_f06_stream_status_update_without_task_id_is_refused(h: Harness) -> None:
    update = status_update("t-06", "TASK_STATE_COMPLETED")
    del update["statusUpdate"]["taskId"]
    h.worker.on("SendStreamingMessage", sse=[Event(result={"task": task("t-06", "TASK_STATE_WORKING")}),
                                             Event(result=update)])
    _, raw = h.stream(send_msg(1, method="SendStreamingMessage"), headers=V1)
    events = [f for f in frames(raw) if f["data"] is not None]
    assert events[-1]["data"]["error"]["code"] == -32006 and b"TASK_STATE_COMPLETED" not in raw
    assert h.metric("a2a_gateway_divergences_total", kind="task_id_mismatch") == 1


def test_upstream_refused_is_transport_error_not_a_state(make_harness: Any) -> None:
    from tests.support.servers import free_port

    h = make_harness(upstream={"url": f"http://127.0.0.1:{free_port()}/"})
    r = h.rpc({"jsonrpc": "2.0", "id": "x", "method": "GetTask", "params": {"id": "t-1"}}, headers=V1)
    assert r.status_code == 502
    assert r.json()["id"] == "x" and r.json()["error"]["code"] == -32603
    assert "result" not in r.json()
    assert h.metric("a2a_gateway_upstream_errors_total", reason="connect") == 1


def test_upstream_read_timeout_is_504(make_harness: Any) -> None:
    h = make_harness(upstream={"timeouts": {"read": 0.3}})
    gate = Gate(timeout=5)
    h.worker.on("SendStreamingMessage", sse=[gate])
    r, raw = h.stream(send_msg(1, method="SendStreamingMessage"), headers=V1)
    gate.release()
    fs = frames(raw)
    assert fs and fs[-1]["event"] == "error" and fs[-1]["data"]["error"]["code"] == -32603
    assert h.metric("a2a_gateway_upstream_errors_total", reason="timeout") == 1


# ---------------------------------------------------------------------------------- F16

async def test_f16_ids_and_message_fields_pass_untouched_and_never_cross(h: Harness) -> None:
    gates = {"m-a": Gate(), "m-b": Gate()}

    def per_client(req: Any) -> Sse:
        mid = req.params["message"]["messageId"]
        return Sse([
            Event(result={"kind": "task", "id": "t-16", "contextId": "c-16", "status": {"state": "working"},
                          "metadata": {"for": mid}}),
            gates[mid],
            Event(result={"kind": "status-update", "taskId": "t-16", "contextId": "c-16",
                          "status": {"state": "input-required"}, "final": True, "metadata": {"for": mid}}),
        ])

    h.worker.on("message/stream", handler=per_client, times=2)

    def request(mid: str) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": "req-77", "method": "message/stream", "params": {"message": {
            "kind": "message", "messageId": mid, "role": "user", "taskId": "t-16", "contextId": "c-16",
            "referenceTaskIds": ["t-15"], "parts": [{"kind": "text", "text": "Tuesday"}],
            "metadata": {"trace": "abc"}}}}

    async def client_run(mid: str) -> list[Any]:
        headers = {"accept": "text/event-stream", "A2A-Extensions": "https://ext.example/x"}
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            async with client.stream("POST", h.gateway.url + "/", json=request(mid), headers=headers) as r:
                raw = b""
                async for chunk in r.aiter_raw():
                    raw += chunk
        return [f["data"] for f in frames(raw)]

    task_a = asyncio.ensure_future(client_run("m-a"))
    task_b = asyncio.ensure_future(client_run("m-b"))
    await await_until(lambda: len(h.worker.calls("message/stream")) == 2)
    for g in gates.values():
        g.release()
    got_a, got_b = await task_a, await task_b
    for mid, got in (("m-a", got_a), ("m-b", got_b)):
        assert len(got) == 2
        assert all(d["id"] == "req-77" for d in got)
        assert all(d["result"]["metadata"]["for"] == mid for d in got)
    for call in h.worker.calls("message/stream"):
        assert call.params == request(call.params["message"]["messageId"])["params"]
        assert call.headers["a2a-extensions"] == "https://ext.example/x"
        assert "a2a-version" not in call.headers


def test_gateway_never_adds_a2a_version_and_forwards_it_untouched(h: Harness) -> None:
    h.worker.on("tasks/get", json_result={"kind": "task", **task("t-1", "working")})
    h.worker.on("GetTask", json_result=task("t-1", "TASK_STATE_WORKING"))
    h.rpc({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "t-1"}})
    h.rpc({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "t-1"}},
          headers={"A2A-Version": "1.0", "Authorization": "Bearer s3cret"})
    assert "a2a-version" not in h.worker.calls("tasks/get")[0].headers
    v1 = h.worker.calls("GetTask")[0].headers
    assert v1["a2a-version"] == "1.0" and v1["authorization"] == "Bearer s3cret"


def test_unknown_custom_method_passes_through_unchanged(h: Harness) -> None:
    h.worker.on("acme.Frobnicate", json_result={"answer": 42, "status": {"state": "paused"}})
    r = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "acme.Frobnicate", "params": [1, 2]})
    assert r.json() == {"jsonrpc": "2.0", "id": 1, "result": {"answer": 42, "status": {"state": "paused"}}}
    assert h.worker.calls("acme.Frobnicate")[0].params == [1, 2]


def test_metrics_endpoint_exposes_divergences_by_kind(make_harness: Any) -> None:
    h = make_harness(admin={"tracked_refresh_seconds": 0.2})
    complete_task(h, "t-5")
    h.rpc(send_msg(1, task_id="t-5"), headers=V1)
    text = h.http.get(h.admin.url + "/metrics").text
    assert 'a2a_gateway_local_rejections_total{action="enforced",method="SendMessage",reason="terminal_task",upstream="worker"} 1.0' in text
    # the tracked-task gauge is refreshed from the ledger in the background, not by a scrape
    wait_until(lambda: 'a2a_gateway_tracked_tasks{state="TASK_STATE_COMPLETED"} 1.0'
               in h.http.get(h.admin.url + "/metrics").text)
    wait_until(lambda: h.http.get(h.admin.url + "/readyz").status_code == 200)


def test_client_that_abandons_a_blocking_call_releases_the_worker_request(make_harness: Any) -> None:
    """A blocking SendMessage may take minutes; when the client hangs up, the gateway closes
    its worker request instead of holding it until the read timeout — for a send with no
    retry key (here: ``messageId`` keys off; a keyed one runs on, docs/retries.md §2)."""
    import socket

    h = make_harness(upstream={"retries": {"message_id_keys": False}})
    gate = Gate(timeout=10)
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": task("t-x", "TASK_STATE_COMPLETED")}})
    h.worker.on("SendMessage", sse=[gate, body], headers={"content-type": "application/json"})
    payload = orjson.dumps(send_msg(1))
    sock = socket.create_connection(("127.0.0.1", h.gateway.port))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    wait_until(lambda: gate.reached.is_set())
    sock.close()
    wait_until(lambda: h.worker.stream_closed.is_set())
    gate.release()
    wait_until(lambda: h.metric("a2a_gateway_requests_total", method="SendMessage", outcome="client_disconnected") == 1)


def test_client_that_abandons_a_keyed_send_leaves_its_outcome_for_the_retry(h: Harness) -> None:
    """A keyed SendMessage (its ``messageId``) whose client hangs up runs on to the worker's
    answer (docs/retries.md §2): the retry gets that task, and the worker saw one send."""
    import socket

    gate = Gate(timeout=10)
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": task("t-kept", "TASK_STATE_COMPLETED")}})
    h.worker.on("SendMessage", sse=[gate, body], headers={"content-type": "application/json"})
    h.worker.on("GetTask", json_result=task("t-kept", "TASK_STATE_COMPLETED"))
    request = send_msg(1)
    payload = orjson.dumps(request)
    sock = socket.create_connection(("127.0.0.1", h.gateway.port))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    wait_until(lambda: gate.reached.is_set())
    sock.close()
    gate.release()
    wait_until(lambda: h.metric("a2a_gateway_requests_total", method="SendMessage") == 1)
    retry = httpx.post(h.gateway.url + "/", json={**request, "id": 2}, headers=V1, trust_env=False, timeout=10)
    assert retry.json()["result"]["task"]["id"] == "t-kept"
    assert len(h.worker.calls("SendMessage")) == 1


def test_worker_cookies_are_relayed_but_never_kept_or_replayed(h: Harness) -> None:
    """A proxy is shared by many clients: a worker's Set-Cookie goes to the client that got it
    and is never stored by the gateway and sent upstream for someone else."""
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": task("t-c", "TASK_STATE_WORKING")})
    h.worker.on("GetTask", raw=(200, {"content-type": "application/json",
                                      "set-cookie": "session=alice-secret; Path=/"}, answer))
    first = httpx.post(h.gateway.url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                                  "params": {"id": "t-c"}}, headers=V1, trust_env=False)
    assert first.headers["set-cookie"].startswith("session=alice-secret")
    h.worker.on("GetTask", json_result=task("t-c", "TASK_STATE_WORKING"))
    httpx.post(h.gateway.url + "/", json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                                          "params": {"id": "t-c"}}, headers=V1, trust_env=False)
    assert "cookie" not in h.worker.calls("GetTask")[1].headers
