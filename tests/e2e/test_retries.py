"""Safe retries (docs/retries.md) through the real gateway in front of the real a2a-sdk 1.3
demo worker (tests/e2e/conftest.py): a send that comes again under its retry key — the
``Idempotency-Key`` header or its ``messageId`` — reaches the task the first call started,
never a second one; the same key with a different request is refused and nothing is
forwarded. Every test checks, on the worker's side (the recorder), how many sends arrived.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from tests.e2e.conftest import Stack

V10 = {"A2A-Version": "1.0"}


def _message(message_id: str, text: str = "hi") -> dict[str, Any]:
    return {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}


def _sends(stack: Stack, trace: str, method: str = "SendMessage") -> int:
    """Requests of ``method`` (JSON-RPC) or REST ``message:send`` / ``message:stream`` the
    worker received for this test."""
    seen = stack.recorder.requests(trace)
    return sum(1 for r in seen if r.rpc_method == method or r.path.endswith(
        {"SendMessage": "/message:send", "SendStreamingMessage": "/message:stream"}.get(method, "?")))


async def test_jsonrpc_send_again_with_same_message_id_gets_the_same_task(
        stack: Stack, http: httpx.AsyncClient, trace: str) -> None:
    body = {"message": _message(f"m-{uuid.uuid4().hex}")}
    first = (await http.post(stack.gateway.url + "/", json=_rpc("SendMessage", body), headers=V10)).json()
    again = (await http.post(stack.gateway.url + "/", json=_rpc("SendMessage", body), headers=V10)).json()
    task = first["result"]["task"]
    assert again["result"]["task"]["id"] == task["id"]
    assert again["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert _sends(stack, trace) == 1
    scrape = await stack.scrape()
    assert scrape.value("a2a_gateway_retries_total", outcome="replayed") >= 1


async def test_idempotency_key_header_keys_the_send(stack: Stack, http: httpx.AsyncClient, trace: str) -> None:
    key = {"Idempotency-Key": uuid.uuid4().hex, **V10}
    body = {"message": _message(f"m-{uuid.uuid4().hex}")}
    first = (await http.post(stack.gateway.url + "/", json=_rpc("SendMessage", body), headers=key)).json()
    again = (await http.post(stack.gateway.url + "/", json=_rpc("SendMessage", body), headers=key)).json()
    assert again["result"]["task"]["id"] == first["result"]["task"]["id"]
    assert _sends(stack, trace) == 1


async def test_same_key_different_message_is_refused_and_not_forwarded(
        stack: Stack, http: httpx.AsyncClient, trace: str) -> None:
    message_id = f"m-{uuid.uuid4().hex}"
    await http.post(stack.gateway.url + "/", json=_rpc("SendMessage", {"message": _message(message_id)}),
                    headers=V10)
    request = _rpc("SendMessage", {"message": _message(message_id, "something else")})
    refused = await http.post(stack.gateway.url + "/", json=request, headers=V10)
    doc = refused.json()
    assert refused.status_code == 200 and doc["id"] == request["id"]
    assert doc["error"]["code"] == -32600 and "different request" in doc["error"]["message"]
    rest = await http.post(stack.gateway.url + "/rest/message:send", headers=V10,
                           json={"message": _message(message_id, "a third text")})
    assert rest.status_code == 422 and "different request" in rest.text
    assert _sends(stack, trace) == 1
    scrape = await stack.scrape()
    assert scrape.value("a2a_gateway_retries_total", outcome="conflict") >= 2


async def test_rest_send_again_gets_the_same_task(stack: Stack, http: httpx.AsyncClient, trace: str) -> None:
    body = {"message": _message(f"m-{uuid.uuid4().hex}")}
    first = await http.post(stack.gateway.url + "/rest/message:send", json=body, headers=V10)
    again = await http.post(stack.gateway.url + "/rest/message:send", json=body, headers=V10)
    assert first.status_code == again.status_code == 200, again.text
    assert again.json()["task"]["id"] == first.json()["task"]["id"]
    assert _sends(stack, trace) == 1


async def test_stream_again_attaches_to_the_first_streams_task(
        stack: Stack, http: httpx.AsyncClient, trace: str) -> None:
    """A retried ``SendStreamingMessage`` while the first stream is live (a ``slow`` task,
    WORKING until canceled) gets the task's snapshot and then its live events: the cancel's
    CANCELED reaches it; one send at the worker."""
    body = _rpc("SendStreamingMessage", {"message": _message(f"m-{uuid.uuid4().hex}", "slow task")})
    headers = {**V10, "Accept": "text/event-stream"}
    async with http.stream("POST", stack.gateway.url + "/", json=body, headers=headers) as first:
        lines = first.aiter_lines()
        task_id = None
        async for line in lines:
            if line.startswith("data:") and "TASK_STATE_WORKING" in line:
                task_id = _task_id(line)
                break
        assert task_id is not None
        retry = {**body, "id": uuid.uuid4().hex}
        async with http.stream("POST", stack.gateway.url + "/", json=retry, headers=headers) as again:
            seen: list[dict[str, Any]] = []
            async for line in again.aiter_lines():
                if not line.startswith("data:"):
                    continue
                seen.append(json.loads(line[5:]))
                if len(seen) == 1:
                    cancel = await http.post(stack.gateway.url + "/", headers=V10,
                                             json=_rpc("CancelTask", {"id": task_id}))
                    assert "error" not in cancel.json(), cancel.text
                if "TASK_STATE_CANCELED" in json.dumps(seen[-1]):
                    break
    assert seen[0]["result"]["task"]["id"] == task_id
    assert seen[0]["id"] == retry["id"]
    assert "TASK_STATE_CANCELED" in str(seen[-1])
    assert _sends(stack, trace, "SendStreamingMessage") == 1


def _task_id(line: str) -> str:
    result = json.loads(line[5:])["result"]
    for member in ("task", "statusUpdate"):
        if member in result:
            return result[member].get("id") or result[member]["taskId"]
    raise AssertionError(line)



async def test_a_message_answer_is_given_again_and_a_stream_of_one_is_not(
        stack: Stack, http: httpx.AsyncClient, trace: str) -> None:
    """The worker answers ``direct`` with a Message and no task: a unary retry gets that
    Message again (docs/retries.md §2); a retried stream, which cannot be attached to a task,
    gets -32600 — in both cases the worker saw one send."""
    body = {"message": _message(f"m-{uuid.uuid4().hex}", "direct")}
    first = (await http.post(stack.gateway.url + "/", json=_rpc("SendMessage", body), headers=V10)).json()
    again = (await http.post(stack.gateway.url + "/", json=_rpc("SendMessage", body), headers=V10)).json()
    assert "message" in first["result"] and again["result"] == first["result"]
    assert _sends(stack, trace) == 1
    stream = {"message": _message(f"m-{uuid.uuid4().hex}", "direct")}
    headers = {**V10, "Accept": "text/event-stream"}
    await http.post(stack.gateway.url + "/", json=_rpc("SendStreamingMessage", stream), headers=headers)
    refused = await http.post(stack.gateway.url + "/", json=_rpc("SendStreamingMessage", stream), headers=headers)
    assert refused.json()["error"]["code"] == -32600, refused.text
    assert _sends(stack, trace, "SendStreamingMessage") == 1
