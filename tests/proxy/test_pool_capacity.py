"""A tiny upstream pool through the real gateway (issue #17): when every pooled connection to
the worker is held by an open stream, the next request — JSON-RPC or REST, unary or streaming,
a subscribe too — gets "gateway at capacity" in its binding's form (HTTP 503, ``Retry-After``,
the client's JSON-RPC id) before any stream starts, counted and logged as ``pool_exhausted``,
never as a worker timeout; once the streams end the pool serves again.

The streams are held open by a :class:`Gate` in the scripted worker; the test waits for
conditions (the worker's and the gateway's own counts), never for time.
"""

from __future__ import annotations

import uuid

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from tests.proxy.conftest import Harness, frames
from tests.support.scripted_worker import Event, Gate
from tests.support.servers import await_until

V1 = {"A2A-Version": "1.0"}
WORKING, COMPLETED = "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"
POOL = 2
WAIT = 0.2  # seconds a request waits for a pooled connection: each refusal below takes this long


def task(tid: str, state: str) -> dict[str, Any]:
    return {"id": tid, "contextId": "c-1", "status": {"state": state}}


def status_update(tid: str, state: str) -> dict[str, Any]:
    return {"statusUpdate": {"taskId": tid, "contextId": "c-1", "status": {"state": state}}}


def message(req: str) -> dict[str, Any]:
    return {"messageId": f"m-{req}-{uuid.uuid4().hex[:8]}", "role": "ROLE_USER", "parts": [{"text": "hi"}]}


def rpc(req_id: Any, method: str, params: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})


def _capacity_status(h: Harness, r: httpx.Response) -> None:
    """What every capacity answer has, whatever the binding."""
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "1"
    assert r.headers["content-type"] == "application/json"  # no stream was started


async def test_a_full_pool_answers_gateway_at_capacity_on_every_binding(
        make_harness: Any, gateway_warnings: Callable[[str], list[logging.LogRecord]]) -> None:
    h: Harness = make_harness(upstream={"pool": {"max_connections": POOL, "wait_seconds": WAIT}})
    gate = Gate()
    h.worker.on("SendStreamingMessage", sse=[Event(result={"task": task("t-held", WORKING)}), gate,
                                             Event(result=status_update("t-held", COMPLETED))], times=POOL)
    url = h.gateway.url
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        first_events: list[bytes] = []

        async def held(i: int) -> bytes:
            raw = b""
            body = rpc(f"held-{i}", "SendStreamingMessage", {"message": message(f"held-{i}")})
            async with client.stream("POST", url + "/", content=body, headers=V1) as r:
                assert r.status_code == 200
                async for chunk in r.aiter_raw():
                    if not raw:
                        first_events.append(chunk)
                    raw += chunk
            return raw

        holders = [asyncio.create_task(held(i)) for i in range(POOL)]
        await await_until(lambda: len(first_events) == POOL and h.worker.open_streams == POOL,
                          message="both streams open through the gateway")
        assert h.metric("a2a_gateway_open_streams", upstream="worker") == POOL
        calls_before = len(h.rpc_calls())

        # JSON-RPC unary and streaming: the error with the client's own id
        for req_id, method in (("u-1", "SendMessage"), (7, "SendStreamingMessage")):
            r = await client.post(url + "/", content=rpc(req_id, method, {"message": message(str(req_id))}),
                                  headers={**V1, "content-type": "application/json"})
            _capacity_status(h, r)
            doc = r.json()
            assert doc["id"] == req_id and doc["jsonrpc"] == "2.0"
            assert doc["error"]["code"] == -32603
            assert doc["error"]["message"].startswith("gateway at capacity:")
            assert f"all {POOL} connections" in doc["error"]["message"]
        # a subscribe of a task the gateway does not know yet goes upstream: the same answer
        r = await client.post(url + "/", content=rpc("s-1", "SubscribeToTask", {"id": "t-other"}),
                              headers={**V1, "content-type": "application/json"})
        _capacity_status(h, r)
        assert r.json()["id"] == "s-1"
        # REST unary and streaming: the binding's error body
        for path in ("/message:send", "/message:stream"):
            r = await client.post(url + path, json={"message": message(path)}, headers=V1)
            _capacity_status(h, r)
            error = r.json()["error"]
            assert error["code"] == 503 and error["status"] == "UNAVAILABLE"
            assert error["message"].startswith("gateway at capacity:")

        refused = 5
        assert len(h.rpc_calls()) == calls_before  # none of them reached the worker
        assert h.metric("a2a_gateway_upstream_errors_total", reason="pool_exhausted") == refused
        assert h.metric("a2a_gateway_upstream_errors_total", reason="timeout") == 0
        # the request line and its metrics come after the answer (and its retry key's release)
        await await_until(lambda: h.metric("a2a_gateway_requests_total", outcome="at_capacity") == refused,
                          message="every refusal counted")
        assert h.metric("a2a_gateway_requests_total", outcome="upstream_error") == 0
        at_capacity = gateway_warnings("gateway_at_capacity")
        assert [r.__dict__["reason"] for r in at_capacity] == ["pool_exhausted"] * refused
        assert gateway_warnings("upstream_request_failed") == []
        assert not any("timed out" in r.__dict__.get("error", "") for r in at_capacity)

        # the held streams were not disturbed; once they end, the pool serves again
        gate.release()
        raws = await asyncio.gather(*holders)
        for raw in raws:
            states = [f["data"]["result"] for f in frames(raw) if isinstance(f["data"], dict)]
            assert len(states) == 2 and "statusUpdate" in states[1]
        await await_until(lambda: h.metric("a2a_gateway_open_streams", upstream="worker") == 0,
                          message="the gauge back at 0")
        h.worker.on("SendMessage", json_result=task("t-after", COMPLETED))
        r = await client.post(url + "/", content=rpc("after", "SendMessage", {"message": message("after")}),
                              headers={**V1, "content-type": "application/json"})
        assert r.status_code == 200 and r.json()["result"]["id"] == "t-after"
        assert "retry-after" not in r.headers
    assert h.metric("a2a_gateway_upstream_errors_total", reason="pool_exhausted") == refused
