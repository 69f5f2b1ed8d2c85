"""docs/field-cases.md over the REST (HTTP+JSON) binding, through the real gateway: the twins of
tests/proxy/test_field_cases.py with a scripted worker that serves REST paths, plus the
cross-binding cases (one ledger record per task, whatever the binding) and the REST base
(tenant, the worker's REST prefix) that the gateway's own probe and resubscribe keep.

REST facts pinned here (docs/protocol.md §1.3, §6, §7): refusals are ``google.rpc.Status``
bodies with the error's HTTP status; stream events are bare StreamResponses; the gateway's
probe is ``GET {base}/tasks/{id}?historyLength=0`` and its resubscribe
``POST {base}/tasks/{id}:subscribe``; ``/v1/...`` without ``A2A-Version: 1.x`` is v0.3, whose
states are spelled ``TASK_STATE_*`` with ``TASK_STATE_CANCELLED``."""

from __future__ import annotations

import uuid

import logging
import re
from typing import Any

import httpx
import orjson
import pytest

from gateway.invariants.engine import CORRECTED_KEY
from tests.proxy.conftest import Harness, frames
from tests.support.objects import artifact_update, status_update, task
from tests.support.scripted_worker import Data, Gate, default_card
from tests.support.servers import await_until, free_port, wait_until

V1 = {"A2A-Version": "1.0"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
SSE_ACCEPT = {"accept": "text/event-stream"}


# ------------------------------------------------------------------------------ helpers

def message(text: str = "hi", task_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """A v1.0 REST send body: ``{"message": …}``."""
    msg: dict[str, Any] = {"messageId": f"m-{text}-{uuid.uuid4().hex[:8]}", "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id:
        msg.update(taskId=task_id, contextId=task_id.replace("t-", "c-"))
    return {"message": msg, **extra}


def status_body(http: int, status: str, reason: str, message_text: str = "worker says no") -> dict[str, Any]:
    """A worker's ``google.rpc.Status`` error body."""
    return {"error": {"code": http, "status": status, "message": message_text,
                      "details": [{"@type": ERROR_INFO, "reason": reason, "domain": "a2a-protocol.org"}]}}


def events(raw: bytes) -> list[Any]:
    """The data of every non-error SSE frame (bare StreamResponses), in order."""
    return [f["data"] for f in frames(raw) if f["data"] is not None and f["event"] != "error"]


def assert_status_error(body: Any, http: int, reason: str, *, status: str | None = None,
                        task_id: str | None = None) -> None:
    """``body`` is a gateway ``google.rpc.Status`` refusal with ``http`` and ``reason``."""
    err = body["error"]
    assert err["code"] == http
    if status is not None:
        assert err["status"] == status
    assert isinstance(err["message"], str) and err["message"]
    [info] = err["details"]
    assert info["@type"] == ERROR_INFO and info["reason"] == reason
    assert info["domain"] == "a2a-protocol.org"
    if task_id is not None:
        assert info["metadata"] == {"taskId": task_id}


def worker_saw(h: Harness, http_method: str, path: str) -> list[Any]:
    """Requests the worker got for ``http_method path`` (path without query)."""
    return h.worker.path_calls(http_method, path)


def forwarded(h: Harness) -> list[tuple[str, str]]:
    """Every request the worker got other than card fetches, as (method, path)."""
    return [(r.http_method, r.path) for r in h.rpc_calls()]


def rest_get_completed(h: Harness, tid: str, *, base: str = "", headers: dict[str, str] | None = None,
                       state: str = "TASK_STATE_COMPLETED", tenant: str = "") -> None:
    """Make the ledger hold ``tid`` (of ``tenant``) as terminal through a REST
    ``GET {base}/tasks/{tid}``."""
    h.worker.on_path("GET", f"{base}/tasks/{tid}", json_body=task(tid, state))
    r, raw = h.rest("GET", f"{base}/tasks/{tid}", headers=V1 if headers is None else headers)
    assert r.status_code == 200, raw
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", tid, tenant=tenant))
    assert stored is not None and stored.record.terminal


def rpc_complete(h: Harness, tid: str) -> None:
    """Make the ledger hold ``tid`` as COMPLETED through a JSON-RPC GetTask."""
    h.worker.on("GetTask", json_result=task(tid, "TASK_STATE_COMPLETED"))
    r = h.rpc({"jsonrpc": "2.0", "id": "setup", "method": "GetTask", "params": {"id": tid}}, headers=V1)
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


# ------------------------------------------------------------------------------ F01

# (worker's spelling, what a v1.0 client gets, the normalization family counted; None: canonical)
V10_SPELLINGS = [
    ("input_required", "TASK_STATE_INPUT_REQUIRED", "underscore"),
    ("input-required", "TASK_STATE_INPUT_REQUIRED", "v03_kebab"),
    ("INPUT_REQUIRED", "TASK_STATE_INPUT_REQUIRED", "case_variant"),
    ("Input-Required", "TASK_STATE_INPUT_REQUIRED", "case_variant"),
    ("TASK_STATE_INPUT_REQUIRED", "TASK_STATE_INPUT_REQUIRED", None),
    ("Working", "TASK_STATE_WORKING", "case_variant"),
    ("working", "TASK_STATE_WORKING", "v03_kebab"),
    ("TASK_STATE_WORKING", "TASK_STATE_WORKING", None),
    ("TASK_STATE_CANCELLED", "TASK_STATE_CANCELED", "v03_grpc"),
]


@pytest.mark.parametrize("spelling,expected,family", V10_SPELLINGS)
def test_f01_rest_every_spelling_reaches_a_v10_client_canonical(h: Harness, spelling: str, expected: str,
                                                                family: str | None) -> None:
    """A v1.0 REST client gets TASK_STATE_*; the counter moves once per non-canonical input,
    labelled by spelling family, never by the raw string."""
    msg = {"messageId": "m-1", "role": "ROLE_AGENT", "parts": [{"text": "Which date?"}]}
    h.worker.on_path("GET", "/tasks/t-1", json_body={"id": "t-1", "contextId": "c-1",
                                                     "status": {"state": spelling, "message": msg}})
    r, raw = h.rest("GET", "/tasks/t-1", headers=V1)
    body = orjson.loads(raw)
    assert r.status_code == 200
    assert body["status"]["state"] == expected
    assert body["status"]["message"] == msg
    assert "jsonrpc" not in body  # the REST answer is the bare Task
    assert h.metric("a2a_gateway_state_normalizations_total") == (0 if family is None else 1)
    if family is not None:
        assert h.metric("a2a_gateway_state_normalizations_total", family=family) == 1


@pytest.mark.parametrize("spelling,expected", [
    ("canceled", "TASK_STATE_CANCELLED"), ("TASK_STATE_CANCELED", "TASK_STATE_CANCELLED"),
    ("Cancelled", "TASK_STATE_CANCELLED"), ("TASK_STATE_CANCELLED", "TASK_STATE_CANCELLED"),
    ("input-required", "TASK_STATE_INPUT_REQUIRED"), ("TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED"),
])
def test_f01_rest_v03_client_gets_the_v03_enum_spelling(h: Harness, spelling: str, expected: str) -> None:
    """``/v1/...`` without ``A2A-Version`` is v0.3 REST: states spelled as v0.3 gRPC, with
    ``TASK_STATE_CANCELLED`` (two Ls); never kebab-case."""
    h.worker.on_path("GET", "/v1/tasks/t-1", json_body=task("t-1", spelling))
    r, raw = h.rest("GET", "/v1/tasks/t-1")
    assert r.status_code == 200
    assert orjson.loads(raw)["status"]["state"] == expected
    assert h.metric("a2a_gateway_state_normalizations_total") == (0 if spelling == expected else 1)


def test_f01_rest_v1_base_with_a2a_version_10_is_a_v10_call(h: Harness) -> None:
    """With ``A2A-Version: 1.0`` a ``/v1`` segment is part of the base URL: v1.0 spelling, and the
    road of the call is kept for the worker."""
    h.worker.on_path("GET", "/v1/tasks/t-1", json_body=task("t-1", "cancelled"))
    r, raw = h.rest("GET", "/v1/tasks/t-1", headers=V1)
    assert orjson.loads(raw)["status"]["state"] == "TASK_STATE_CANCELED"


def test_f01_rest_stream_events_are_respelled_bare_stream_responses(h: Harness) -> None:
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-1", "working")}),
        Data(status_update("t-1", "Input-Required")),
    ])
    r, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    assert r.headers["content-type"].startswith("text/event-stream")
    got = events(raw)
    assert got == [{"task": task("t-1", "TASK_STATE_WORKING")}, status_update("t-1", "TASK_STATE_INPUT_REQUIRED")]
    assert h.metric("a2a_gateway_state_normalizations_total") == 2


def test_f01_rest_v03_stream_spells_cancelled_with_two_ls(h: Harness) -> None:
    h.worker.on_path("POST", "/v1/message:stream", sse=[
        Data({"task": task("t-1", "TASK_STATE_WORKING")}),
        Data(status_update("t-1", "canceled")),
    ])
    _, raw = h.rest("POST", "/v1/message:stream", json=message(), headers=SSE_ACCEPT)
    got = events(raw)
    assert got[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELLED"
    assert got[-1]["statusUpdate"]["final"] is True  # the v0.3 proto's TaskStatusUpdateEvent has final


# ------------------------------------------------------------------------------ F03

def test_f03_rest_unknown_state_unary_is_500_invalid_agent_response(h: Harness) -> None:
    h.worker.on_path("GET", "/tasks/t-3", json_body=task("t-3", "paused"))
    r, raw = h.rest("GET", "/tasks/t-3", headers=V1)
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("application/json")
    doc = orjson.loads(raw)
    assert_status_error(doc, 500, "INVALID_AGENT_RESPONSE", status="INTERNAL")
    assert set(doc) == {"error"}  # the worker's task is not passed on, nor a JSON-RPC envelope
    assert h.on_gateway_loop(h.runtime.ledger.get("worker", "t-3")) is None
    assert h.divergences("unknown_state") == 1


def test_f03_rest_unknown_state_in_a_stream_is_an_error_event_and_the_end(h: Harness) -> None:
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-3", "TASK_STATE_WORKING")}),
        Data(status_update("t-3", "paused")),
        Data(status_update("t-3", "TASK_STATE_COMPLETED")),
    ])
    r, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 200
    fs = [f for f in frames(raw) if f["data"] is not None]
    assert len(fs) == 2
    assert fs[0]["data"] == {"task": task("t-3", "TASK_STATE_WORKING")}
    assert fs[1]["event"] == "error"
    assert_status_error(fs[1]["data"], 500, "INVALID_AGENT_RESPONSE")
    assert h.divergences("unknown_state") == 1


@pytest.mark.parametrize("first_status", [{}, {"state": "TASK_STATE_UNSPECIFIED"}])
def test_f03_rest_unspecified_first_event_is_neither_terminal_nor_closing(h: Harness,
                                                                         first_status: dict[str, Any]) -> None:
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": {"id": "t-3", "contextId": "c-3", "status": first_status}}),
        Data(status_update("t-3", "TASK_STATE_WORKING")),
        Data(status_update("t-3", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    got = events(raw)
    assert len(got) == 3 and got[0]["task"]["id"] == "t-3"
    assert [g["statusUpdate"]["status"]["state"] for g in got[1:]] == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert h.divergences("unknown_state") == 0


def test_f03_rest_unknown_state_in_observe_mode_is_forwarded_and_counted(make_harness: Any) -> None:
    h = make_harness(mode="observe")
    h.worker.on_path("GET", "/tasks/t-3", json_body=task("t-3", "paused"))
    r, raw = h.rest("GET", "/tasks/t-3", headers=V1)
    assert r.status_code == 200 and orjson.loads(raw)["status"]["state"] == "paused"
    assert h.metric("a2a_gateway_divergences_total", kind="unknown_state", action="observed") == 1


# ------------------------------------------------------------------------------ F04

def _f04_script(h: Harness) -> Gate:
    gate = Gate()
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-4", "TASK_STATE_WORKING")}),
        Data(artifact_update("t-4", "a-0", "early output", lastChunk=True)),
        gate,
        Data(status_update("t-4", "TASK_STATE_CANCELED")),
        Data(artifact_update("t-4", "a-4", "late output")),
        Data(status_update("t-4", "TASK_STATE_COMPLETED")),
    ])
    h.worker.on_path("POST", "/tasks/t-4:cancel", json_body=task("t-4", "TASK_STATE_CANCELED"))
    return gate


async def test_f04_rest_canceled_wins_late_events_dropped_and_counted(h: Harness) -> None:
    gate = _f04_script(h)
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        hdrs = {"content-type": "application/json", **SSE_ACCEPT, **V1}
        async with client.stream("POST", h.gateway.url + "/message:stream", content=orjson.dumps(message()),
                                 headers=hdrs) as stream:
            raw = b""
            chunks = stream.aiter_raw()
            while len(events(raw)) < 2:
                raw += await chunks.__anext__()
            cancel = await client.post(h.gateway.url + "/tasks/t-4:cancel", headers=V1)
            gate.release()
            async for chunk in chunks:
                raw += chunk
    assert cancel.status_code == 200 and cancel.json() == task("t-4", "TASK_STATE_CANCELED")
    got = events(raw)
    assert [next(iter(g)) for g in got] == ["task", "artifactUpdate", "statusUpdate"]
    assert got[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    await await_until(lambda: h.divergences("event_after_terminal") == 2)
    await await_until(lambda: h.divergences("terminal_regression") == 1)
    assert h.divergences("artifact_after_terminal") == 1
    early = {"artifactId": "a-0", "parts": [{"text": "early output"}]}
    late = {"artifactId": "a-4", "parts": [{"text": "late output"}]}
    h.worker.on_path("GET", "/tasks/t-4", json_body=task("t-4", "TASK_STATE_COMPLETED", artifacts=[early, late]))
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        view = (await client.get(h.gateway.url + "/tasks/t-4", headers=V1)).json()
    assert view["status"]["state"] == "TASK_STATE_CANCELED"
    assert view["artifacts"] == [early]
    assert view["metadata"][CORRECTED_KEY]["workerState"] == "TASK_STATE_COMPLETED"


def test_f04_rest_events_after_terminal_in_one_read_are_dropped(h: Harness) -> None:
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-4", "TASK_STATE_WORKING")}),
        Data(status_update("t-4", "TASK_STATE_FAILED")),
        Data(status_update("t-4", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    got = events(raw)
    assert got[-1] == status_update("t-4", "TASK_STATE_FAILED") and len(got) == 2
    wait_until(lambda: h.divergences("terminal_regression") == 1)
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", "t-4"))
    assert stored.record.state.value == "TASK_STATE_FAILED"


# ------------------------------------------------------------------------------ F05

def test_f05a_rest_follow_up_to_terminal_task_is_refused_without_forwarding(h: Harness) -> None:
    rest_get_completed(h, "t-5")
    h.worker.on_path("POST", "/message:send", json_body={"task": task("t-5", "TASK_STATE_WORKING")})
    r, raw = h.rest("POST", "/message:send", json=message("one more thing", task_id="t-5"), headers=V1)
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    body = orjson.loads(raw)
    assert_status_error(body, 400, "UNSUPPORTED_OPERATION", status="FAILED_PRECONDITION", task_id="t-5")
    assert "t-5" in body["error"]["message"] and "new task" in body["error"]["message"]
    assert worker_saw(h, "POST", "/message:send") == []
    assert h.metric("a2a_gateway_local_rejections_total", method="SendMessage", reason="terminal_task") == 1
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="rest",
                                method="SendMessage", outcome="rejected") == 1)


def test_f05a_rest_streaming_follow_up_to_terminal_task_is_400_json_not_a_stream(h: Harness) -> None:
    rest_get_completed(h, "t-5")
    r, raw = h.rest("POST", "/message:stream", json=message(task_id="t-5"), headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    assert_status_error(orjson.loads(raw), 400, "UNSUPPORTED_OPERATION", task_id="t-5")
    assert worker_saw(h, "POST", "/message:stream") == []


@pytest.mark.parametrize("verb", ["POST", "GET"])
def test_f05b_rest_subscribe_to_terminal_task_is_400_not_an_event_stream(h: Harness, verb: str) -> None:
    rest_get_completed(h, "t-5")
    r, raw = h.rest(verb, "/tasks/t-5:subscribe", headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert_status_error(orjson.loads(raw), 400, "UNSUPPORTED_OPERATION", task_id="t-5")
    assert worker_saw(h, verb, "/tasks/t-5:subscribe") == []
    assert h.metric("a2a_gateway_local_rejections_total", method="SubscribeToTask", reason="terminal_task") == 1


def test_f05_rest_cancel_of_terminal_task_is_400_task_not_cancelable(h: Harness) -> None:
    rest_get_completed(h, "t-5")
    r, raw = h.rest("POST", "/tasks/t-5:cancel", headers=V1)
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, "TASK_NOT_CANCELABLE", status="FAILED_PRECONDITION", task_id="t-5")
    assert worker_saw(h, "POST", "/tasks/t-5:cancel") == []


@pytest.mark.parametrize("verb,path,body,reason", [
    ("POST", "/v1/message:send", message(task_id="t-5"), "UNSUPPORTED_OPERATION"),
    ("POST", "/v1/message:stream", message(task_id="t-5"), "UNSUPPORTED_OPERATION"),
    ("POST", "/v1/tasks/t-5:cancel", None, "TASK_NOT_CANCELABLE"),
    ("POST", "/v1/tasks/t-5:subscribe", None, "UNSUPPORTED_OPERATION"),
    ("GET", "/v1/tasks/t-5:subscribe", None, "UNSUPPORTED_OPERATION"),
])
def test_f05d_rest_v03_actions_on_terminal_task_are_refused(h: Harness, verb: str, path: str, body: Any,
                                                           reason: str) -> None:
    """v0.3 REST refusals are in the v0.3 form: the A2A code and the error name at the top
    level (what @a2a-js/sdk 0.3 and a2a-sdk's v0.3 transport read), 409 for not cancelable."""
    rest_get_completed(h, "t-5", base="/v1", headers={}, state="canceled")
    r, raw = h.rest(verb, path, json=body, headers=SSE_ACCEPT)
    code, name, http = V03_ERRORS[reason]
    assert r.status_code == http and r.headers["content-type"] == "application/json"
    doc = orjson.loads(raw)
    assert (doc["code"], doc["type"]) == (code, name)
    assert "TASK_STATE_CANCELLED" in doc["message"] and "t-5" in doc["message"]  # the v0.3 REST spelling
    assert worker_saw(h, verb, path) == []


V03_ERRORS = {"UNSUPPORTED_OPERATION": (-32004, "UnsupportedOperationError", 400),
              "TASK_NOT_CANCELABLE": (-32002, "TaskNotCancelableError", 409)}


@pytest.mark.parametrize("worker_status,worker_body,from_code", [
    (404, status_body(404, "NOT_FOUND", "TASK_NOT_FOUND"), "-32001"),
    (400, status_body(400, "INVALID_ARGUMENT", "INVALID_PARAMS", "task in terminal state"), "-32602"),
    (404, {"error": {"code": 404, "status": "NOT_FOUND", "message": "no such task"}}, "-32001"),
    (500, status_body(500, "INTERNAL", "INTERNAL_ERROR"), "-32603"),
])
def test_f05c_rest_worker_error_on_terminal_task_is_rewritten_after_the_probe(
        h: Harness, worker_status: int, worker_body: dict[str, Any], from_code: str) -> None:
    h.worker.on_path("POST", "/message:send", json_body=worker_body, status=worker_status)
    h.worker.on_path("GET", "/tasks/t-5", json_body=task("t-5", "TASK_STATE_COMPLETED"))
    r, raw = h.rest("POST", "/message:send", json=message(task_id="t-5"), headers=V1)
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, "UNSUPPORTED_OPERATION", task_id="t-5")
    [probe] = worker_saw(h, "GET", "/tasks/t-5")
    assert probe.query == "historyLength=0" and probe.body == b""
    assert probe.headers.get("a2a-version") == "1.0"  # the client's headers go along
    assert h.metric("a2a_gateway_error_rewrites_total", from_code=from_code, to_code="-32004") == 1


def test_f05c_rest_cancel_error_on_terminal_task_is_rewritten_to_task_not_cancelable(h: Harness) -> None:
    h.worker.on_path("POST", "/tasks/t-5:cancel", json_body=status_body(404, "NOT_FOUND", "TASK_NOT_FOUND"),
                     status=404)
    h.worker.on_path("GET", "/tasks/t-5", json_body=task("t-5", "TASK_STATE_COMPLETED"))
    r, raw = h.rest("POST", "/tasks/t-5:cancel", headers=V1)
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, "TASK_NOT_CANCELABLE", task_id="t-5")
    assert h.metric("a2a_gateway_error_rewrites_total", from_code="-32001", to_code="-32002") == 1


def test_f05c_rest_subscribe_not_found_is_rewritten_when_task_is_terminal(h: Harness) -> None:
    h.worker.on_path("POST", "/tasks/t-5:subscribe", json_body=status_body(404, "NOT_FOUND", "TASK_NOT_FOUND"),
                     status=404)
    h.worker.on_path("GET", "/tasks/t-5", json_body=task("t-5", "TASK_STATE_FAILED"))
    r, raw = h.rest("POST", "/tasks/t-5:subscribe", headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    assert_status_error(orjson.loads(raw), 400, "UNSUPPORTED_OPERATION", task_id="t-5")


def test_f05c_rest_v03_probe_goes_to_the_v1_road(h: Harness) -> None:
    h.worker.on_path("POST", "/v1/message:send", json_body=status_body(404, "NOT_FOUND", "TASK_NOT_FOUND"),
                     status=404)
    h.worker.on_path("GET", "/v1/tasks/t-5", json_body=task("t-5", "TASK_STATE_CANCELLED"))
    r, raw = h.rest("POST", "/v1/message:send", json=message(task_id="t-5"))
    assert r.status_code == 400
    doc = orjson.loads(raw)
    assert (doc["code"], doc["type"]) == (-32004, "UnsupportedOperationError")
    assert "TASK_STATE_CANCELLED" in doc["message"]
    assert [p.query for p in worker_saw(h, "GET", "/v1/tasks/t-5")] == ["historyLength=0"]


def test_f05c_rest_worker_error_is_left_alone_when_the_task_is_live(h: Harness) -> None:
    worker_body = status_body(400, "INVALID_ARGUMENT", "INVALID_PARAMS", "bad part")
    h.worker.on_path("POST", "/message:send", json_body=worker_body, status=400)
    h.worker.on_path("GET", "/tasks/t-5", json_body=task("t-5", "TASK_STATE_INPUT_REQUIRED"))
    r, raw = h.rest("POST", "/message:send", json=message(task_id="t-5"), headers=V1)
    assert r.status_code == 400
    assert orjson.loads(raw) == worker_body
    assert len(worker_saw(h, "GET", "/tasks/t-5")) == 1
    assert h.metric("a2a_gateway_error_rewrites_total") == 0
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="rest",
                                method="SendMessage", outcome="worker_error") == 1)


def test_f05c_rest_worker_already_saying_unsupported_operation_is_not_probed(h: Harness) -> None:
    worker_body = status_body(400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION", "terminal")
    h.worker.on_path("POST", "/message:send", json_body=worker_body, status=400)
    r, raw = h.rest("POST", "/message:send", json=message(task_id="t-5"), headers=V1)
    assert r.status_code == 400 and orjson.loads(raw) == worker_body
    assert worker_saw(h, "GET", "/tasks/t-5") == []


def test_f05_rest_regression_get_answering_working_for_a_completed_task_is_corrected(h: Harness) -> None:
    rest_get_completed(h, "t-5")
    h.worker.on_path("GET", "/tasks/t-5", json_body=task("t-5", "Working"))
    r, raw = h.rest("GET", "/tasks/t-5", headers=V1)
    assert r.status_code == 200
    view = orjson.loads(raw)
    assert view["status"]["state"] == "TASK_STATE_COMPLETED"
    assert view["metadata"][CORRECTED_KEY]["workerState"] == "TASK_STATE_WORKING"
    assert h.divergences("terminal_regression") == 1
    r, raw = h.rest("POST", "/message:send", json=message(task_id="t-5"), headers=V1)
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, "UNSUPPORTED_OPERATION", task_id="t-5")
    assert worker_saw(h, "POST", "/message:send") == []


def test_f05e_rest_reused_task_id_in_a_new_stream_is_refused(h: Harness) -> None:
    rest_get_completed(h, "t-5")
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-5", "TASK_STATE_WORKING")}),
        Data(artifact_update("t-5", "a-5", "reused")),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    fs = [f for f in frames(raw) if f["data"] is not None]
    assert len(fs) == 1 and fs[0]["event"] == "error"
    assert_status_error(fs[0]["data"], 500, "INVALID_AGENT_RESPONSE")
    assert h.divergences("reused_task_id") == 1


# ------------------------------------------------------------------------------ F06

def test_f06_rest_sealed_artifact_update_dropped_and_append_creates(h: Harness) -> None:
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-6", "TASK_STATE_WORKING")}),
        Data(artifact_update("t-6", "a-6", "Hel")),
        Data(artifact_update("t-6", "a-6", "lo", append=True, lastChunk=True)),
        Data(artifact_update("t-6", "a-6", "!!", append=True)),
        Data(artifact_update("t-6", "a-7", "x", append=True)),
        Data(status_update("t-6", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    got = events(raw)
    texts = [g["artifactUpdate"]["artifact"]["parts"][0]["text"] for g in got if "artifactUpdate" in g]
    assert texts == ["Hel", "lo", "x"]
    assert got[-1] == status_update("t-6", "TASK_STATE_COMPLETED")
    assert h.divergences("artifact_after_last_chunk") == 1
    buggy = [{"artifactId": "a-6", "parts": [{"text": "Hel"}, {"text": "lo"}, {"text": "!!"}]},
             {"artifactId": "a-7", "parts": [{"text": "x"}]}]
    h.worker.on_path("GET", "/tasks/t-6", json_body=task("t-6", "TASK_STATE_COMPLETED", artifacts=buggy))
    _, raw = h.rest("GET", "/tasks/t-6", headers=V1)
    assert orjson.loads(raw)["artifacts"] == [
        {"artifactId": "a-6", "parts": [{"text": "Hel"}, {"text": "lo"}]},
        {"artifactId": "a-7", "parts": [{"text": "x"}]},
    ]


def test_f06_rest_event_for_another_task_or_context_is_refused(h: Harness) -> None:
    other_ctx = status_update("t-6", "TASK_STATE_WORKING")
    other_ctx["statusUpdate"]["contextId"] = "c-other"
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-6", "TASK_STATE_WORKING")}),
        Data(status_update("t-99", "TASK_STATE_COMPLETED")),
        Data(other_ctx),
        Data(status_update("t-6", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    got = events(raw)
    assert len(got) == 2 and got[-1]["statusUpdate"]["taskId"] == "t-6"
    assert h.divergences("task_id_mismatch") == 1
    assert h.divergences("context_id_mismatch") == 1
    assert h.on_gateway_loop(h.runtime.ledger.get("worker", "t-99")) is None


# ------------------------------------------------------------------------------ F08 (ii)

def _cut_stream(h: Harness, base: str = "") -> None:
    h.worker.on_path("POST", f"{base}/message:stream", sse=[
        Data({"task": task("t-9", "TASK_STATE_WORKING")}),
        Data(status_update("t-9", "TASK_STATE_WORKING")),
    ])


@pytest.mark.parametrize("base,headers", [("", V1), ("/acme/rest", V1), ("/v1", {}), ("/acme/v1", {})],
                         ids=["root", "tenant-and-prefix", "v03", "v03-tenant"])
def test_f08ii_rest_cut_stream_is_probed_and_resumed_on_the_same_road(h: Harness, base: str,
                                                                     headers: dict[str, str]) -> None:
    _cut_stream(h, base)
    h.worker.on_path("GET", f"{base}/tasks/t-9", json_body=task("t-9", "TASK_STATE_WORKING"))
    h.worker.on_path("POST", f"{base}/tasks/t-9:subscribe", sse=[
        Data({"task": task("t-9", "TASK_STATE_WORKING")}),
        Data(status_update("t-9", "TASK_STATE_COMPLETED")),
    ])
    r, raw = h.rest("POST", f"{base}/message:stream", json=message(), headers={**headers, **SSE_ACCEPT})
    assert r.status_code == 200
    got = events(raw)
    assert [next(iter(g)) for g in got] == ["task", "statusUpdate", "statusUpdate"]  # the repeated snapshot dropped
    assert got[-1]["statusUpdate"]["status"] == {"state": "TASK_STATE_COMPLETED"}
    assert got[-1]["statusUpdate"].get("final", True) is True  # v0.3: the proto's final flag, set
    assert [e for e in frames(raw) if e["event"] == "error"] == []
    [probe] = worker_saw(h, "GET", f"{base}/tasks/t-9")
    assert probe.query == "historyLength=0"
    [sub] = worker_saw(h, "POST", f"{base}/tasks/t-9:subscribe")
    assert sub.body == b""
    assert forwarded(h) == [("POST", f"{base}/message:stream"), ("GET", f"{base}/tasks/t-9"),
                            ("POST", f"{base}/tasks/t-9:subscribe")]
    assert h.metric("a2a_gateway_forced_get_total", reason="upstream_eof") == 1
    assert h.metric("a2a_gateway_stream_resubscribes_total", outcome="resubscribed") == 1


def test_f08ii_rest_cut_stream_of_a_finished_task_ends_with_its_snapshot(h: Harness) -> None:
    _cut_stream(h, "/acme/rest")
    h.worker.on_path("GET", "/acme/rest/tasks/t-9", json_body=task("t-9", "completed"))
    _, raw = h.rest("POST", "/acme/rest/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    got = events(raw)
    assert got[-1] == {"task": task("t-9", "TASK_STATE_COMPLETED")}
    assert worker_saw(h, "POST", "/acme/rest/tasks/t-9:subscribe") == []
    assert h.metric("a2a_gateway_stream_resubscribes_total", outcome="terminal_snapshot") == 1


def test_f08ii_rest_resubscribe_attempts_are_bounded_and_end_with_an_error_event(make_harness: Any) -> None:
    h = make_harness(streams={"resubscribe_attempts": 2, "resubscribe_backoff_seconds": 0})
    _cut_stream(h)
    h.worker.on_path("GET", "/tasks/t-9", json_body=task("t-9", "TASK_STATE_WORKING"), times=None)
    h.worker.on_path("POST", "/tasks/t-9:subscribe", json_body=status_body(503, "UNAVAILABLE", "INTERNAL_ERROR"),
                     status=503, times=None)
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    last = frames(raw)[-1]
    assert last["event"] == "error"
    assert last["data"]["error"]["code"] == 500 and "could not be resumed" in last["data"]["error"]["message"]
    assert len(worker_saw(h, "POST", "/tasks/t-9:subscribe")) == 2
    assert h.metric("a2a_gateway_stream_resubscribes_total", outcome="gave_up") == 1


def test_f08ii_rest_mount_with_a_prefix_and_a_worker_base_path(make_harness: Any) -> None:
    """The mount ``/agents/w`` → ``{worker}/svc``: a client's ``/agents/w/acme/rest/message:stream``
    reaches ``/svc/acme/rest/message:stream``, and the probe and resubscribe go to
    ``/svc/acme/rest/tasks/…`` — the upstream's base, then the call's own base."""
    h = make_harness(upstream={"prefix": "/agents/w"}, upstream_path="/svc", card=default_card())
    base = "/svc/acme/rest"
    _cut_stream(h, base)
    h.worker.on_path("GET", f"{base}/tasks/t-9", json_body=task("t-9", "TASK_STATE_WORKING"))
    h.worker.on_path("POST", f"{base}/tasks/t-9:subscribe", sse=[
        Data({"task": task("t-9", "TASK_STATE_WORKING")}),
        Data(status_update("t-9", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("POST", "/agents/w/acme/rest/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    assert events(raw)[-1] == status_update("t-9", "TASK_STATE_COMPLETED")
    assert forwarded(h) == [("POST", f"{base}/message:stream"), ("GET", f"{base}/tasks/t-9"),
                            ("POST", f"{base}/tasks/t-9:subscribe")]


def test_f08ii_rest_resubscribe_falls_back_to_get_on_405_with_its_own_accept(h: Harness) -> None:
    """A worker that takes ``:subscribe`` only as GET (the v0.3 proto's verb) answers the POST
    405: the gateway retries with GET. Its own probe asks for JSON and its resubscribe for
    SSE, whatever the client's Accept was."""
    _cut_stream(h)
    h.worker.on_path("GET", "/tasks/t-9", json_body=task("t-9", "TASK_STATE_WORKING"))
    h.worker.on_path("POST", "/tasks/t-9:subscribe", raw=(405, {"allow": "GET"}, b""))
    h.worker.on_path("GET", "/tasks/t-9:subscribe", sse=[
        Data({"task": task("t-9", "TASK_STATE_WORKING")}),
        Data(status_update("t-9", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    assert events(raw)[-1] == status_update("t-9", "TASK_STATE_COMPLETED")
    assert forwarded(h) == [("POST", "/message:stream"), ("GET", "/tasks/t-9"),
                            ("POST", "/tasks/t-9:subscribe"), ("GET", "/tasks/t-9:subscribe")]
    [probe] = worker_saw(h, "GET", "/tasks/t-9")
    [sub] = worker_saw(h, "GET", "/tasks/t-9:subscribe")
    assert probe.headers["accept"] == "application/json" and sub.headers["accept"] == "text/event-stream"
    assert "content-type" not in probe.headers


def test_f08ii_rest_subscribe_cut_is_resumed_with_post_subscribe(h: Harness) -> None:
    """A client's GET ``:subscribe`` that is cut is resumed with the gateway's own POST."""
    h.worker.on_path("GET", "/acme/tasks/t-9:subscribe", sse=[Data({"task": task("t-9", "TASK_STATE_WORKING")})])
    h.worker.on_path("GET", "/acme/tasks/t-9", json_body=task("t-9", "TASK_STATE_WORKING"))
    h.worker.on_path("POST", "/acme/tasks/t-9:subscribe", sse=[
        Data({"task": task("t-9", "TASK_STATE_WORKING")}),
        Data(status_update("t-9", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("GET", "/acme/tasks/t-9:subscribe", headers={**V1, **SSE_ACCEPT})
    assert events(raw) == [{"task": task("t-9", "TASK_STATE_WORKING")}, status_update("t-9", "TASK_STATE_COMPLETED")]
    assert len(worker_saw(h, "POST", "/acme/tasks/t-9:subscribe")) == 1


# ------------------------------------------------------------------------------ F09

async def test_f09_rest_stream_is_relayed_incrementally(h: Harness) -> None:
    gate = Gate()
    event_2 = orjson.dumps(status_update("t-9", "TASK_STATE_WORKING"))
    half = len(event_2) // 2
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-9", "TASK_STATE_WORKING")}),
        b": ping\n\n",
        gate,
        b"id: 2\nevent: message\nretry: 3000\ndata: " + event_2[:half],
        event_2[half:] + b"\n\n",
        Data(status_update("t-9", "TASK_STATE_COMPLETED")),
    ])
    hdrs = {"content-type": "application/json", **SSE_ACCEPT, **V1}
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        async with client.stream("POST", h.gateway.url + "/message:stream", content=orjson.dumps(message()),
                                 headers=hdrs) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert "content-length" not in r.headers
            raw = b""
            chunks = r.aiter_raw()
            while not events(raw):
                raw += await chunks.__anext__()
            assert not gate.is_set()  # event 1 arrived before the worker sent event 2
            gate.release()
            async for chunk in chunks:
                raw += chunk
    fs = frames(raw)
    assert [f["comment"] for f in fs if f["comment"]] == ["ping"]
    assert events(raw) == [{"task": task("t-9", "TASK_STATE_WORKING")}, status_update("t-9", "TASK_STATE_WORKING"),
                           status_update("t-9", "TASK_STATE_COMPLETED")]


def test_f09_rest_non_json_event_ends_the_stream_with_an_error_event(h: Harness) -> None:
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-9", "TASK_STATE_WORKING")}),
        b"data: not-json\n\n",
        Data(status_update("t-9", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    fs = [f for f in frames(raw) if f["data"] is not None]
    assert len(fs) == 2 and fs[1]["event"] == "error"
    assert_status_error(fs[1]["data"], 500, "INVALID_AGENT_RESPONSE")


@pytest.mark.parametrize("status,body", [
    (400, status_body(400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED", "version")),
    (404, status_body(404, "NOT_FOUND", "TASK_NOT_FOUND")),
])
def test_f09_rest_plain_json_4xx_answer_to_a_streaming_request_is_relayed_as_json(
        h: Harness, status: int, body: dict[str, Any]) -> None:
    h.worker.on_path("POST", "/message:stream", json_body=body, status=status)
    r, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    assert orjson.loads(raw) == body


def test_f09_rest_plain_json_result_to_a_streaming_request_is_judged_and_relayed(h: Harness) -> None:
    h.worker.on_path("POST", "/message:stream", json_body={"task": task("t-9", "completed")})
    r, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 200
    assert orjson.loads(raw) == {"task": task("t-9", "TASK_STATE_COMPLETED")}
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", "t-9"))
    assert stored.record.terminal


def test_f09_rest_worker_error_event_is_relayed_as_an_error_event(h: Harness) -> None:
    err = status_body(500, "INTERNAL", "INTERNAL_ERROR", "boom")
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-9", "TASK_STATE_WORKING")}),
        Data(err, event="error"),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    errors = [f for f in frames(raw) if f["event"] == "error"]
    assert errors and errors[0]["data"] == err


def test_f09_rest_event_over_size_cap_closes_the_stream_with_an_error(make_harness: Any) -> None:
    h = make_harness(limits={"max_event_bytes": 2048})
    big = {"task": task("t-9", "TASK_STATE_WORKING", metadata={"blob": "x" * 4096})}
    h.worker.on_path("POST", "/message:stream", sse=[Data({"task": task("t-9", "TASK_STATE_WORKING")}), Data(big)])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    last = frames(raw)[-1]
    assert last["event"] == "error"
    assert_status_error(last["data"], 500, "INVALID_AGENT_RESPONSE")
    assert h.metric("a2a_gateway_upstream_errors_total", reason="event_too_large") == 1


# ------------------------------------------------------------------------------ F15

@pytest.mark.parametrize("path,body", [
    ("/message:send", b'{"message":'), ("/message:send", b"[1,2]"), ("/message:send", b""),
    ("/message:send", b'"text"'), ("/message:send", b"\xff\xfe"), ("/message:stream", b'{"message":'),
    ("/v1/message:send", b"null"), ("/acme/tasks/t-1/pushNotificationConfigs", b"[]"),
], ids=["truncated", "array", "empty", "string", "not-utf8", "stream-truncated", "v03-null", "push-array"])
def test_f15_rest_malformed_json_body_is_400_never_forwarded(h: Harness, path: str, body: bytes) -> None:
    r, raw = h.rest("POST", path, content=body, headers=V1)
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert_status_error(orjson.loads(raw), 400, "INVALID_REQUEST", status="INVALID_ARGUMENT")
    assert forwarded(h) == []
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="rest", outcome="malformed") == 1)


def test_f15_rest_body_over_cap_is_413_never_forwarded(make_harness: Any) -> None:
    h = make_harness(limits={"max_body_bytes": 1024})
    r, raw = h.rest("POST", "/message:send", json=message("x" * 4096), headers=V1)
    assert r.status_code == 413
    doc = orjson.loads(raw)
    assert doc["error"]["code"] == 413 and "1024" in doc["error"]["message"]
    assert forwarded(h) == []
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="rest", method="SendMessage",
                                outcome="too_large") == 1)


def test_f15_rest_v03_malformed_and_oversized_bodies_get_the_v03_error_form(make_harness: Any) -> None:
    """The gateway's own refusals of a v0.3 REST call are in the v0.3 form, like its
    terminal-task refusals (docs/protocol.md §1.5)."""
    h = make_harness(limits={"max_body_bytes": 1024})
    r, raw = h.rest("POST", "/rest/v1/message:send", content=b"[1]")
    assert r.status_code == 400
    assert orjson.loads(raw) == {"code": -32600, "message": "request body must be a JSON object",
                                 "type": "InvalidRequestError"}
    r, raw = h.rest("POST", "/rest/v1/message:send", json=message("x" * 4096))
    assert r.status_code == 413 and orjson.loads(raw)["type"] == "InvalidRequestError"
    assert forwarded(h) == []


def test_rest_worker_redirect_is_a_502_that_says_so(h: Harness) -> None:
    """A redirect would send the client round the gateway: neither followed nor relayed, and
    the answer says what happened (a wrong REST path is the usual cause)."""
    h.worker.on_path("POST", "/message:send", raw=(307, {"location": "http://worker:9999/message:send/"}, b""))
    r, raw = h.rest("POST", "/message:send", json=message(), headers=V1)
    assert r.status_code == 502 and "location" not in r.headers
    assert "redirect" in orjson.loads(raw)["error"]["message"]


@pytest.mark.parametrize("status,ctype,body", [
    (500, "text/html", b"Traceback (most recent call last):\n  File secret.py\nKeyError: 'db_password'"),
    (200, "text/html", b"<html>oops</html>"),
    (502, "application/json", b'{"detail": "db_password"}'),
])
def test_f15_rest_worker_500_or_non_json_becomes_502_status(h: Harness, status: int, ctype: str, body: bytes) -> None:
    h.worker.on_path("GET", "/tasks/t-15", raw=(status, {"content-type": ctype}, body))
    r, raw = h.rest("GET", "/tasks/t-15", headers=V1)
    assert r.status_code == 502
    doc = orjson.loads(raw)
    assert doc["error"]["code"] == 502 and doc["error"]["status"] == "UNAVAILABLE"
    assert b"Traceback" not in raw and b"db_password" not in raw and b"oops" not in raw
    assert "task" not in doc and "status" not in doc


def test_f15_rest_worker_non_json_4xx_is_relayed_as_is(h: Harness) -> None:
    h.worker.on_path("GET", "/tasks/t-15", raw=(403, {"content-type": "text/plain"}, b"forbidden"))
    r, raw = h.rest("GET", "/tasks/t-15", headers=V1)
    assert r.status_code == 403 and raw == b"forbidden"
    assert r.headers["content-type"] == "text/plain"


def test_f15_rest_refused_connection_is_502_status_not_a_state(make_harness: Any) -> None:
    h = make_harness(upstream={"url": f"http://127.0.0.1:{free_port()}/"})
    for verb, path in (("GET", "/tasks/t-1"), ("POST", "/tasks/t-1:cancel"), ("POST", "/tasks/t-1:subscribe")):
        r, raw = h.rest(verb, path, headers={**V1, **SSE_ACCEPT})
        assert r.status_code == 502, path
        doc = orjson.loads(raw)
        assert doc["error"]["code"] == 502 and doc["error"]["status"] == "UNAVAILABLE"
        assert "task" not in doc
    assert h.metric("a2a_gateway_upstream_errors_total", reason="connect") == 3
    # a new task is not even admitted: the card was never fetched (HTTP 503, F11)
    r, raw = h.rest("POST", "/message:send", json=message(), headers=V1)
    assert r.status_code == 503 and orjson.loads(raw)["error"]["status"] == "UNAVAILABLE"


def test_f15_rest_worker_timeout_is_504_status(make_harness: Any) -> None:
    h = make_harness(upstream={"timeouts": {"read": 0.3}})
    gate = Gate(timeout=5)
    h.worker.on_path("GET", "/tasks/t-1", sse=[gate, b"{}"], headers={"content-type": "application/json"})
    r, raw = h.rest("GET", "/tasks/t-1", headers=V1)
    gate.release()
    assert r.status_code == 504
    doc = orjson.loads(raw)
    assert doc["error"]["code"] == 504 and doc["error"]["status"] == "DEADLINE_EXCEEDED"
    assert h.metric("a2a_gateway_upstream_errors_total", reason="timeout") == 1


def test_f15_rest_stream_idle_worker_ends_with_an_error_event(make_harness: Any) -> None:
    h = make_harness(upstream={"timeouts": {"read": 0.3}})
    gate = Gate(timeout=5)
    h.worker.on_path("POST", "/message:stream", sse=[gate])
    r, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    gate.release()
    fs = frames(raw)
    assert fs and fs[-1]["event"] == "error" and fs[-1]["data"]["error"]["code"] == 500
    assert h.metric("a2a_gateway_upstream_errors_total", reason="timeout") == 1


# ------------------------------------------------------------------------------ content types, verbs, paths

@pytest.mark.parametrize("state", ["TASK_STATE_WORKING", "working"], ids=["unchanged", "respelled"])
def test_rest_a2a_json_content_type_from_the_worker_is_passed_through(h: Harness, state: str) -> None:
    body = orjson.dumps(task("t-1", state))
    h.worker.on_path("GET", "/tasks/t-1", raw=(200, {"content-type": "application/a2a+json"}, body))
    r, raw = h.rest("GET", "/tasks/t-1", headers=V1)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/a2a+json"
    assert orjson.loads(raw) == task("t-1", "TASK_STATE_WORKING")
    assert int(r.headers["content-length"]) == len(raw)
    if state == "TASK_STATE_WORKING":
        assert raw == body  # nothing changed: the worker's own bytes


def test_rest_a2a_json_error_from_the_worker_is_passed_through(h: Harness) -> None:
    body = orjson.dumps(status_body(404, "NOT_FOUND", "TASK_NOT_FOUND"))
    h.worker.on_path("GET", "/tasks/t-1", raw=(404, {"content-type": "application/a2a+json"}, body))
    r, raw = h.rest("GET", "/tasks/t-1", headers=V1)
    assert r.status_code == 404 and r.headers["content-type"] == "application/a2a+json" and raw == body


@pytest.mark.parametrize("verb", ["GET", "POST"])
def test_rest_subscribe_works_with_both_verbs_and_reaches_the_worker_with_the_clients(h: Harness, verb: str) -> None:
    h.worker.on_path(verb, "/tasks/t-1:subscribe", sse=[
        Data({"task": task("t-1", "TASK_STATE_WORKING")}),
        Data(status_update("t-1", "TASK_STATE_COMPLETED")),
    ])
    r, raw = h.rest(verb, "/tasks/t-1:subscribe", headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert events(raw) == [{"task": task("t-1", "TASK_STATE_WORKING")}, status_update("t-1", "TASK_STATE_COMPLETED")]
    assert len(worker_saw(h, verb, "/tasks/t-1:subscribe")) == 1
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="rest", method="SubscribeToTask") == 1)


def test_rest_send_body_and_query_reach_the_worker_unchanged(h: Harness) -> None:
    body = orjson.dumps(message("hello", configuration={"returnImmediately": True}, metadata={"trace": "abc"}))
    h.worker.on_path("POST", "/acme/message:send", json_body={"task": task("t-1", "TASK_STATE_SUBMITTED")})
    h.worker.on_path("GET", "/acme/tasks/t-1", json_body=task("t-1", "TASK_STATE_SUBMITTED"))
    r, _ = h.rest("POST", "/acme/message:send", content=body, headers={**V1, "A2A-Extensions": "https://ext/x"})
    assert r.status_code == 200
    [sent] = worker_saw(h, "POST", "/acme/message:send")
    assert sent.body == body
    assert sent.headers["a2a-extensions"] == "https://ext/x" and sent.headers["a2a-version"] == "1.0"
    h.rest("GET", "/acme/tasks/t-1?historyLength=5", headers=V1)
    [got] = worker_saw(h, "GET", "/acme/tasks/t-1")
    assert got.query == "historyLength=5"


def test_rest_percent_encoded_task_id_is_one_record_and_probed_encoded(h: Harness) -> None:
    """``t%2F5`` is the task ``t/5``: its record is keyed by the decoded id; the gateway's own probe
    encodes it again so it stays one path segment."""
    h.worker.on_path("GET", re.compile(r"/tasks/t/5"), json_body=task("t/5", "TASK_STATE_COMPLETED"))
    r, raw = h.rest("GET", "/tasks/t%2F5", headers=V1)
    assert r.status_code == 200, raw
    assert h.on_gateway_loop(h.runtime.ledger.get("worker", "t/5")).record.terminal
    r, raw = h.rest("POST", "/tasks/t%2F5:cancel", headers=V1)
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, "TASK_NOT_CANCELABLE", task_id="t/5")


def test_rest_unknown_rest_like_path_is_relayed_unjudged(h: Harness) -> None:
    h.worker.on_path("DELETE", "/tasks/t-1", json_body={"status": {"state": "paused"}})
    r, raw = h.rest("DELETE", "/tasks/t-1", headers=V1)
    assert r.status_code == 200 and orjson.loads(raw) == {"status": {"state": "paused"}}
    assert h.divergences("unknown_state") == 0


# ------------------------------------------------------------------------------ cross-binding

@pytest.mark.parametrize("verb,path,body,reason,method", [
    ("POST", "/message:send", message(task_id="t-5"), "UNSUPPORTED_OPERATION", "SendMessage"),
    ("POST", "/message:stream", message(task_id="t-5"), "UNSUPPORTED_OPERATION", "SendStreamingMessage"),
    ("POST", "/tasks/t-5:cancel", None, "TASK_NOT_CANCELABLE", "CancelTask"),
    ("POST", "/tasks/t-5:subscribe", None, "UNSUPPORTED_OPERATION", "SubscribeToTask"),
    ("GET", "/tasks/t-5:subscribe", None, "UNSUPPORTED_OPERATION", "SubscribeToTask"),
])
def test_cross_terminal_via_jsonrpc_refuses_rest_actions(h: Harness, verb: str, path: str, body: Any,
                                                         reason: str, method: str) -> None:
    rpc_complete(h, "t-5")
    r, raw = h.rest(verb, path, json=body, headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, reason, task_id="t-5")
    assert forwarded(h) == [("POST", "/")]  # only the setup GetTask
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="rest", method=method, outcome="rejected") == 1)
    assert h.metric("a2a_gateway_local_rejections_total", method=method, reason="terminal_task") == 1


def _terminal_via_rest_stream(h: Harness) -> None:
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-5", "TASK_STATE_WORKING")}),
        Data(status_update("t-5", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    assert events(raw)[-1] == status_update("t-5", "TASK_STATE_COMPLETED")


@pytest.mark.parametrize("how,method,params,code", [
    ("rest_stream", "SendMessage", message(task_id="t-5"), -32004),
    ("rest_get", "SendMessage", message(task_id="t-5"), -32004),
    ("rest_stream", "CancelTask", {"id": "t-5"}, -32002),
    ("rest_get", "CancelTask", {"id": "t-5"}, -32002),
    ("rest_stream", "SubscribeToTask", {"id": "t-5"}, -32004),
    ("rest_get", "SendStreamingMessage", message(task_id="t-5"), -32004),
])
def test_cross_terminal_via_rest_refuses_jsonrpc_actions(h: Harness, how: str, method: str, params: Any,
                                                         code: int) -> None:
    if how == "rest_stream":
        _terminal_via_rest_stream(h)
    else:
        rest_get_completed(h, "t-5")
    before = forwarded(h)
    body = {"jsonrpc": "2.0", "id": "x-1", "method": method, "params": params}
    r = h.rpc(body, headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    doc = r.json()
    assert doc["id"] == "x-1" and doc["error"]["code"] == code
    assert doc["error"]["data"][0]["metadata"] == {"taskId": "t-5"}
    assert forwarded(h) == before
    assert h.worker.calls(method) == []
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="jsonrpc",
                                method=method, outcome="rejected") == 1)


@pytest.mark.parametrize("body", [
    {"jsonrpc": "2.0", "id": 13, "method": "message/send", "params": {"message": {
        "kind": "message", "messageId": "m-13", "role": "user", "taskId": "t-5",
        "parts": [{"kind": "text", "text": "hi"}]}}},
    {"jsonrpc": "2.0", "id": 14, "method": "tasks/cancel", "params": {"id": "t-5"}},
])
def test_cross_v03_jsonrpc_action_refused_for_a_task_terminal_via_v10_rest(h: Harness, body: dict[str, Any]) -> None:
    rest_get_completed(h, "t-5")
    r = h.rpc(body)
    doc = r.json()
    assert doc["id"] == body["id"]
    assert doc["error"]["code"] == (-32002 if body["method"] == "tasks/cancel" else -32004)
    assert "completed" in doc["error"]["message"]  # spelled for the v0.3 JSON-RPC client
    assert h.worker.calls(body["method"]) == []


def test_cross_one_record_per_task_whatever_the_binding(h: Harness) -> None:
    """A REST send creates the record; a JSON-RPC GetTask moves it; a REST GET sees the same one."""
    h.worker.on_path("POST", "/message:send", json_body={"task": task("t-7", "TASK_STATE_WORKING")})
    r, _ = h.rest("POST", "/message:send", json=message(), headers=V1)
    assert r.status_code == 200
    first = h.on_gateway_loop(h.runtime.ledger.get("worker", "t-7"))
    assert first.record.state.value == "TASK_STATE_WORKING"
    h.worker.on("GetTask", json_result=task("t-7", "TASK_STATE_COMPLETED"))
    h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-7"}}, headers=V1)
    h.worker.on_path("GET", "/tasks/t-7", json_body=task("t-7", "TASK_STATE_WORKING"))
    _, raw = h.rest("GET", "/tasks/t-7", headers=V1)
    assert orjson.loads(raw)["status"]["state"] == "TASK_STATE_COMPLETED"  # the terminal state holds
    assert h.divergences("terminal_regression") == 1


def test_rest_request_log_line_carries_binding_task_and_context(h: Harness, caplog: Any) -> None:
    h.worker.on_path("POST", "/message:send", json_body={"task": task("t-8", "TASK_STATE_WORKING")})
    h.worker.on_path("POST", "/tasks/t-8:cancel", json_body=task("t-8", "TASK_STATE_CANCELED"))
    logger = logging.getLogger("a2a_gateway")
    logger.addHandler(caplog.handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        h.rest("POST", "/message:send", json=message(), headers=V1)
        h.rest("POST", "/tasks/t-8:cancel", headers=V1)
        follow_up = {"message": {"messageId": "m-9", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": "t-8"}}
        h.rest("POST", "/message:send", json=follow_up, headers=V1)  # names no context
        wait_until(lambda: len([r for r in dict.fromkeys(caplog.records) if r.getMessage() == "request"]) >= 3)
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(old_level)
    lines = [rec for rec in dict.fromkeys(caplog.records) if rec.getMessage() == "request"]
    send, cancel, refused = lines[-3:]
    assert (send.binding, send.method, send.task_id, send.context_id, send.outcome) == (
        "rest", "SendMessage", "t-8", "c-8", "ok")
    assert (cancel.binding, cancel.method, cancel.task_id) == ("rest", "CancelTask", "t-8")
    assert (refused.outcome, refused.task_id, refused.context_id) == ("rejected", "t-8", "c-8")  # from the ledger
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="rest", method="SendMessage", outcome="ok") == 1)
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="rest", method="CancelTask", outcome="ok") == 1)


def test_rest_stream_log_line_carries_the_streams_task_and_context(h: Harness, caplog: Any) -> None:
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-8", "TASK_STATE_WORKING")}),
        Data(status_update("t-8", "TASK_STATE_COMPLETED")),
    ])
    logger = logging.getLogger("a2a_gateway")
    logger.addHandler(caplog.handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
        wait_until(lambda: any(r.getMessage() == "request" for r in caplog.records))
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(old_level)
    records = list(dict.fromkeys(caplog.records))  # the handler and caplog's root handler both keep them
    [line] = [rec for rec in records if rec.getMessage() == "request"]
    assert (line.binding, line.method, line.task_id, line.context_id) == ("rest", "SendStreamingMessage", "t-8", "c-8")
    [closed] = [rec for rec in records if rec.getMessage() == "stream_closed"]
    assert closed.events == 2 and closed.reason == "terminal"


# ------------------------------------------------------------------------------ hostile workers, ledger, known gaps

@pytest.mark.parametrize("reason", [["TASK_NOT_FOUND"], {"x": 1}, None])
def test_rest_worker_error_with_an_odd_reason_is_relayed_not_a_500(h: Harness, reason: Any) -> None:
    """A worker's ``ErrorInfo.reason`` is any JSON value; one that is not a string (a list was
    unhashable and crashed the request) is no reason: the HTTP status classifies the error."""
    body = {"error": {"code": 404, "status": "NOT_FOUND", "message": "m",
                      "details": [{"@type": ERROR_INFO, "reason": reason}]}}
    h.worker.on_path("POST", "/tasks/t-1:cancel", json_body=body, status=404)
    h.worker.on_path("GET", "/tasks/t-1", json_body=task("t-1", "TASK_STATE_WORKING"))
    r, raw = h.rest("POST", "/tasks/t-1:cancel", headers=V1)
    assert r.status_code == 404 and orjson.loads(raw) == body
    assert len(worker_saw(h, "GET", "/tasks/t-1")) == 1  # 404 read as TASK_NOT_FOUND: probed


def test_rest_ledger_unavailable_fails_closed_with_503_status(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    async def down(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk gone")

    monkeypatch.setattr(h.runtime.ledger.inner, "get", down)
    h.worker.on_path("POST", "/tasks/t-1:cancel", json_body=task("t-1", "TASK_STATE_CANCELED"))
    r, raw = h.rest("POST", "/tasks/t-1:cancel", headers=V1)
    assert r.status_code == 503
    doc = orjson.loads(raw)
    assert doc["error"]["code"] == 503 and doc["error"]["status"] == "UNAVAILABLE"
    assert worker_saw(h, "POST", "/tasks/t-1:cancel") == []
    wait_until(lambda: h.metric("a2a_gateway_requests_total", binding="rest",
                                method="CancelTask", outcome="ledger_error") == 1)


def test_rest_ledger_failure_mid_stream_ends_it_with_a_status_error_event(h: Harness,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = h.runtime.ledger.inner
    real_put = ledger.put
    calls = {"n": 0}

    async def put(record: Any, expected_version: int) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk gone")
        return await real_put(record, expected_version)

    monkeypatch.setattr(ledger, "put", put)
    h.worker.on_path("POST", "/message:stream", sse=[
        Data({"task": task("t-1", "TASK_STATE_WORKING")}),
        Data(status_update("t-1", "TASK_STATE_COMPLETED")),
    ])
    _, raw = h.rest("POST", "/message:stream", json=message(), headers={**V1, **SSE_ACCEPT})
    fs = [f for f in frames(raw) if f["data"] is not None]
    assert fs[0]["data"] == {"task": task("t-1", "TASK_STATE_WORKING")}
    assert fs[-1]["event"] == "error" and len(fs) == 2
    assert_status_error(fs[-1]["data"], 500, "INTERNAL_ERROR")
    assert b"TASK_STATE_COMPLETED" not in raw


def test_f14d_rest_a2a_version_query_parameter_makes_v1_a_v10_base(h: Harness) -> None:
    h.worker.on_path("GET", "/v1/tasks/t-1", json_body=task("t-1", "canceled"))
    r, raw = h.rest("GET", "/v1/tasks/t-1?A2A-Version=1.0")
    assert r.status_code == 200
    assert orjson.loads(raw)["status"]["state"] == "TASK_STATE_CANCELED"  # v1.0 spelling, not CANCELLED


def test_rest_encoded_colon_and_percent_in_an_id_is_decoded_once(h: Harness) -> None:
    h.worker.on_path("GET", "/tasks/a%41", json_body=task("a%41", "TASK_STATE_COMPLETED"))
    r, _ = h.rest("GET", "/tasks/a%2541", headers=V1)
    assert r.status_code == 200
    h.worker.on_path("POST", "/tasks/a%41:cancel", json_body=task("a%41", "TASK_STATE_CANCELED"))
    r, raw = h.rest("POST", "/tasks/a%2541%3Acancel", headers=V1)  # a client that encodes the colon
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, "TASK_NOT_CANCELABLE", task_id="a%41")
    assert worker_saw(h, "POST", "/tasks/a%41:cancel") == []


def test_rest_path_with_doubled_slashes_is_still_guarded(h: Harness) -> None:
    """``/acme//tasks/t-5:cancel`` reaches a worker that merges slashes as a cancel: the
    gateway reads it the same way (tenant ``acme``), so the terminal task's cancel is refused
    here."""
    rest_get_completed(h, "t-5", base="/acme", tenant="acme")
    r, raw = h.rest("POST", "/acme//tasks/t-5:cancel", headers=V1)
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, "TASK_NOT_CANCELABLE", task_id="t-5")
    assert forwarded(h)[-1] == ("GET", "/acme/tasks/t-5")  # only the setup reached the worker


# ------------------------------------------------------------------------------ no road around (hostile trial)

@pytest.mark.parametrize("path", ["/rest/%6Dessage:send", "/rest/message:s%65nd", "/rest%2Fmessage:send"])
def test_rest_path_with_percent_encoded_letters_is_guarded_as_the_worker_reads_it(h: Harness, path: str) -> None:
    """Most servers route on the decoded path: ``/rest/%6Dessage:send`` is a send to them, so
    it is one to the gateway too — a follow-up to a terminal task is refused here."""
    rest_get_completed(h, "t-5", base="/rest", tenant="rest")  # the card names no /rest prefix
    r, raw = h.rest("POST", path, json=message(task_id="t-5"), headers=V1)
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, "UNSUPPORTED_OPERATION", task_id="t-5")
    assert forwarded(h) == [("GET", "/rest/tasks/t-5")]  # only the setup reached the worker


@pytest.mark.parametrize("body", [
    {"message": {"message_id": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "task_id": "t-5"}},
    {"request": {"message_id": "m", "role": "ROLE_USER", "content": [{"text": "x"}], "task_id": "t-5"},
     "configuration": {}},
], ids=["v1.0-proto-field-names", "v0.3-proto-request"])
def test_rest_send_naming_its_task_by_proto_field_names_is_checked(h: Harness, body: dict[str, Any]) -> None:
    """ProtoJSON parsers accept ``task_id`` as well as ``taskId``, and a2a-sdk's v0.3 REST
    transport sends ``{"request": {…, "task_id"}}``: the gateway reads the task either way."""
    path = "/v1/message:send" if "request" in body else "/message:send"
    rest_get_completed(h, "t-5", base="/v1" if "request" in body else "", headers={} if "request" in body else V1)
    r, raw = h.rest("POST", path, json=body, headers={} if "request" in body else V1)
    assert r.status_code == 400, raw
    assert forwarded(h)[-1][0] == "GET"  # the send never reached the worker


def test_rest_task_with_a_stray_kind_is_still_judged(h: Harness) -> None:
    """``"kind": "message"`` on a GetTask answer does not hide its state from the engine."""
    rest_get_completed(h, "t-5")
    h.worker.on_path("GET", "/tasks/t-5", json_body=task("t-5", "TASK_STATE_WORKING", kind="message"))
    r, raw = h.rest("GET", "/tasks/t-5", headers=V1)
    doc = orjson.loads(raw)
    assert doc["status"]["state"] == "TASK_STATE_COMPLETED"
    assert doc["metadata"][CORRECTED_KEY]["reason"] == "terminal_regression"


def test_rest_get_of_an_id_with_colons_is_judged(h: Harness) -> None:
    rest_get_completed(h, "urn:uuid:t-7")
    h.worker.on_path("GET", "/tasks/urn:uuid:t-7", json_body=task("urn:uuid:t-7", "TASK_STATE_WORKING"))
    r, raw = h.rest("GET", "/tasks/urn:uuid:t-7", headers=V1)
    assert orjson.loads(raw)["status"]["state"] == "TASK_STATE_COMPLETED"


def test_rest_v03_transport_failure_is_in_the_v03_form(make_harness: Any) -> None:
    h = make_harness(upstream={"url": f"http://127.0.0.1:{free_port()}/"})
    r, raw = h.rest("GET", "/v1/tasks/t-1")
    assert r.status_code == 502
    doc = orjson.loads(raw)
    assert (doc["code"], doc["type"]) == (-32603, "InternalError") and "upstream error" in doc["message"]


# ------------------------------------------------------------------------------ review findings

def test_the_gateways_own_probe_is_no_id_mismatch(h: Harness) -> None:
    """The probe's answer carries the probe's id, not the client's: never a divergence."""
    h.worker.on("SendMessage", json_error={"code": -32001, "message": "no such task"})
    h.worker.on("GetTask", json_result=task("t-5", "TASK_STATE_WORKING"))
    r = h.rpc({"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": "t-5"}}}, headers=V1)
    assert r.json()["error"]["code"] == -32001 and len(h.worker.calls("GetTask")) == 1
    assert h.divergences("jsonrpc_id_mismatch") == 0


def test_rest_probe_and_resubscribe_carry_the_clients_tenant_and_version_query(h: Harness) -> None:
    """@a2a-js/sdk reads the tenant from ``?tenant=``, and a client may give its version as
    ``?A2A-Version=``: the gateway's own calls on that request keep both."""
    h.worker.on_path("POST", "/message:stream", sse=[Data({"task": task("t-9", "TASK_STATE_WORKING")})])
    h.worker.on_path("GET", "/tasks/t-9", json_body=task("t-9", "TASK_STATE_WORKING"))
    h.worker.on_path("POST", "/tasks/t-9:subscribe", sse=[
        Data({"task": task("t-9", "TASK_STATE_WORKING")}), Data(status_update("t-9", "TASK_STATE_COMPLETED"))])
    _, raw = h.rest("POST", "/message:stream?tenant=acme&A2A-Version=1.0&x=1", json=message(), headers=SSE_ACCEPT)
    assert events(raw)[-1] == status_update("t-9", "TASK_STATE_COMPLETED")
    [probe] = worker_saw(h, "GET", "/tasks/t-9")
    [sub] = worker_saw(h, "POST", "/tasks/t-9:subscribe")
    assert probe.query == "historyLength=0&tenant=acme&A2A-Version=1.0"
    assert sub.query == "tenant=acme&A2A-Version=1.0"


def test_rest_v03_worker_500_in_the_v03_form_is_its_error_not_a_502(h: Harness) -> None:
    body = {"code": -32603, "message": "worker broke", "type": "InternalError"}
    h.worker.on_path("GET", "/v1/tasks/t-1", json_body=body, status=500)
    r, raw = h.rest("GET", "/v1/tasks/t-1")
    assert r.status_code == 500 and orjson.loads(raw) == body
    assert h.metric("a2a_gateway_upstream_errors_total") == 0


def test_rest_encoded_colon_is_read_as_the_decoding_worker_reads_it(h: Harness) -> None:
    """``GET /tasks/t-5%3Asubscribe`` is a subscribe to a worker that routes the decoded path:
    for a terminal task the gateway refuses it instead of reading a GetTask of 't-5:subscribe'."""
    rest_get_completed(h, "t-5")
    r, raw = h.rest("GET", "/tasks/t-5%3Asubscribe", headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 400
    assert_status_error(orjson.loads(raw), 400, "UNSUPPORTED_OPERATION", task_id="t-5")


@pytest.mark.parametrize("path", ["/Message:Send", "/message:send/", "/REST/message:SEND"])
def test_rest_operation_in_another_letter_case_or_with_a_trailing_slash_is_guarded(h: Harness, path: str) -> None:
    base = path[:path.index("/", 1)] if path.count("/") > 1 and not path.endswith("/") else ""
    rest_get_completed(h, "t-5", base=base, tenant=base.strip("/"))  # no card prefix: /REST is a tenant
    r, raw = h.rest("POST", path, json=message(task_id="t-5"), headers=V1)
    assert r.status_code == 400 and forwarded(h) == [("GET", f"{base}/tasks/t-5")]


def test_rest_task_not_found_does_not_revalidate_the_card(h: Harness) -> None:
    h.worker.on_path("GET", "/tasks/t-0", json_body=status_body(404, "NOT_FOUND", "TASK_NOT_FOUND"), status=404)
    before = len([r for r in h.worker.requests if "/.well-known/" in r.path])
    h.rest("GET", "/tasks/t-0", headers=V1)
    h.rest("POST", "/message:send", json=message(), headers=V1)  # an admission: would revalidate
    assert len([r for r in h.worker.requests if "/.well-known/" in r.path]) == before


def test_jsonrpc_path_in_another_case_or_with_doubled_slashes_is_guarded(make_harness: Any) -> None:
    h = make_harness(upstream={"jsonrpc_path": "/a2a/jsonrpc"})
    rpc_complete_at(h, "t-5", "/a2a/jsonrpc")
    for path in ("/A2A/JSONRPC", "/a2a//jsonrpc"):
        r = h.http.post(h.gateway.url + path, headers=V1, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                        "params": {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "x"}],
                                               "taskId": "t-5"}}})
        assert r.json()["error"]["code"] == -32004, path
    assert h.worker.calls("SendMessage") == []


def rpc_complete_at(h: Harness, tid: str, path: str) -> None:
    h.worker.on("GetTask", json_result=task(tid, "TASK_STATE_COMPLETED"))
    r = h.http.post(h.gateway.url + path, headers=V1,
                    json={"jsonrpc": "2.0", "id": "s", "method": "GetTask", "params": {"id": tid}})
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
