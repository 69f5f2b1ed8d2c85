"""docs/callers.md §3 on every road to a local answer, through the real gateway: a message,
cancel or subscribe to a terminal task, in JSON-RPC and REST, v1.0 and v0.3, with and without
a tenant. Alice was shown the task by the worker; Mallory names it. Mallory's request reaches
the worker, which says "task not found" (its probe too: no rewrite); Alice's same request is
refused here, the worker not asked."""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

import orjson
import pytest

from gateway.a2a import jsonrpc
from tests.proxy.conftest import Harness
from tests.support.objects import task
from tests.support.scripted_worker import ANY, JsonBody, JsonError, JsonResult, ReceivedRequest

SECRET_ENV = "A2A_GATEWAY_CALLER_SECRET"
ALICE, MALLORY = "Bearer alice", "Bearer mallory"
TID = "t-alices"
NOT_FOUND_REST = {"error": {"code": 404, "status": "NOT_FOUND", "message": "task not found",
                            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                         "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org"}]}}


def _message(v03: bool) -> dict[str, Any]:
    if v03:
        return {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "taskId": TID,
                "parts": [{"kind": "text", "text": "more"}]}
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "taskId": TID, "parts": [{"text": "more"}]}


# (binding, version, method or "VERB path", what the local refusal is: JSON-RPC code / HTTP status)
ROADS = [
    ("jsonrpc", "1.0", "SendMessage", jsonrpc.UNSUPPORTED_OPERATION),
    ("jsonrpc", "1.0", "SendStreamingMessage", jsonrpc.UNSUPPORTED_OPERATION),
    ("jsonrpc", "1.0", "CancelTask", jsonrpc.TASK_NOT_CANCELABLE),
    ("jsonrpc", "1.0", "SubscribeToTask", jsonrpc.UNSUPPORTED_OPERATION),
    ("jsonrpc", "0.3", "message/send", jsonrpc.UNSUPPORTED_OPERATION),
    ("jsonrpc", "0.3", "message/stream", jsonrpc.UNSUPPORTED_OPERATION),
    ("jsonrpc", "0.3", "tasks/cancel", jsonrpc.TASK_NOT_CANCELABLE),
    ("jsonrpc", "0.3", "tasks/resubscribe", jsonrpc.UNSUPPORTED_OPERATION),
    ("rest", "1.0", "POST /message:send", 400),
    ("rest", "1.0", "POST /message:stream", 400),
    ("rest", "1.0", f"POST /tasks/{TID}:cancel", 400),
    ("rest", "1.0", f"POST /tasks/{TID}:subscribe", 400),
    ("rest", "1.0", f"GET /tasks/{TID}:subscribe", 400),
    ("rest", "0.3", "POST /v1/message:send", 400),
    ("rest", "0.3", "POST /v1/message:stream", 400),
    ("rest", "0.3", f"POST /v1/tasks/{TID}:cancel", 409),
    ("rest", "0.3", f"POST /v1/tasks/{TID}:subscribe", 400),
    ("rest", "0.3", f"GET /v1/tasks/{TID}:subscribe", 400),
]
CASES = [(*road, tenant) for road in ROADS for tenant in ("", "acme") if road[1] == "1.0" or tenant == ""]


class Worker:
    """Shows the task to Alice only; tells anyone else it does not exist (JSON-RPC -32001, REST
    404 ``TASK_NOT_FOUND``); refuses Alice's actions as a worker would (it should not be asked)."""

    def rpc(self, req: ReceivedRequest) -> Any:
        if req.headers.get("authorization") == ALICE and req.method in ("GetTask", "tasks/get"):
            return JsonResult(task(TID, "TASK_STATE_COMPLETED"))
        return JsonError({"code": jsonrpc.TASK_NOT_FOUND, "message": "task not found"})

    def rest(self, req: ReceivedRequest) -> Any:
        return JsonBody(NOT_FOUND_REST, status=404)


def _request(h: Harness, binding: str, version: str, road: str, tenant: str, caller: str) -> tuple[int, Any, bytes]:
    """Send ``road`` as ``caller``: (HTTP status, JSON-RPC error code or None, raw body)."""
    headers = {"Authorization": caller, "accept": "application/json, text/event-stream"}
    if version == "1.0":
        headers["A2A-Version"] = "1.0"
    v03 = version == "0.3"
    if binding == "jsonrpc":
        params: dict[str, Any] = {"message": _message(v03)} if "essage" in road else {"id": TID}
        if tenant:
            params["tenant"] = tenant
        body = {"jsonrpc": "2.0", "id": "c-1", "method": road, "params": params}
        r, raw = h.rest("POST", "/", content=orjson.dumps(body), headers={**headers, "content-type": "application/json"})
        doc = _first_json(raw)
        assert doc.get("id") == "c-1", raw
        return r.status_code, (doc.get("error") or {}).get("code"), raw
    verb, path = road.split(" ", 1)
    if tenant:
        path = f"/{tenant}{path}"
    json_body = {"message": _message(v03)} if "message:" in path else None
    r, raw = h.rest(verb, path, json=json_body, headers=headers)
    return r.status_code, None, raw


def _first_json(raw: bytes) -> dict[str, Any]:
    """The JSON answer, or the first SSE frame's data."""
    text = raw.strip()
    if text.startswith(b"{"):
        return orjson.loads(text)  # type: ignore[no-any-return]
    for line in text.split(b"\n"):
        if line.startswith(b"data:"):
            return orjson.loads(line[5:])  # type: ignore[no-any-return]
    raise AssertionError(raw)


def _actions_of(h: Harness, caller: str) -> list[ReceivedRequest]:
    """The caller's requests the worker got, its GetTask (and the gateway's probes) left out."""
    return [r for r in h.rpc_calls() if r.headers.get("authorization") == caller
            and r.method not in ("GetTask", "tasks/get")
            and not (r.http_method == "GET" and r.path.rstrip("/").endswith(f"/tasks/{TID}"))]


@pytest.mark.parametrize("binding,version,road,refusal,tenant", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[4] or 'no_tenant'}" for c in CASES])
def test_another_callers_action_on_a_terminal_task_goes_to_the_worker_and_the_seen_caller_is_answered_here(
        make_harness: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        binding: str, version: str, road: str, refusal: int, tenant: str) -> None:
    monkeypatch.setenv(SECRET_ENV, "s3cret-" + uuid.uuid4().hex)
    h = make_harness()
    worker = Worker()
    h.worker.on(ANY, handler=worker.rpc, times=None)
    h.worker.on_path("*", re.compile(r"/(acme/)?(v1/)?(message|tasks).*"), handler=worker.rest,
                     times=None)
    params: dict[str, Any] = {"id": TID, **({"tenant": tenant} if tenant else {})}
    shown = h.rpc({"jsonrpc": "2.0", "id": 0, "method": "GetTask", "params": params},
                  headers={"A2A-Version": "1.0", "Authorization": ALICE})
    assert shown.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED", shown.text
    record = h.on_gateway_loop(h.runtime.ledger.get("worker", TID, tenant=tenant)).record
    assert record.terminal and len(record.callers) == 1

    with caplog.at_level(logging.INFO, logger="a2a_gateway"):
        status, code, raw = _request(h, binding, version, road, tenant, MALLORY)
    assert _actions_of(h, MALLORY), "Mallory's request did not reach the worker"
    if binding == "jsonrpc":
        assert code == jsonrpc.TASK_NOT_FOUND, raw
    else:
        assert status == 404, raw
    assert b"terminal" not in raw and b"COMPLETED" not in raw.upper()
    assert h.metric("a2a_gateway_local_answer_skipped_total", reason="unknown_caller") >= 1
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "mallory" not in logged and not any(fp in logged for fp in record.callers)
    after = h.on_gateway_loop(h.runtime.ledger.get("worker", TID, tenant=tenant)).record
    assert after.callers == record.callers

    status, code, raw = _request(h, binding, version, road, tenant, ALICE)
    assert _actions_of(h, ALICE) == [], "Alice's request was not answered here"
    if binding == "jsonrpc":
        assert code == refusal, raw
    else:
        assert status == refusal, raw
