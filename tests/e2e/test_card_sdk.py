"""Card authority with a real a2a-sdk worker and client: the test changes the worker's card
(new ETag) or makes its card endpoint fail, and counts the GetTasks the worker receives —
forced ones present when required, absent when not."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState
from prometheus_client import CollectorRegistry

from demo.worker import build_worker_app
from gateway.app import build_app
from gateway.config import sidecar_config
from tests.support.asgi import request_body
from tests.support.gateway import serve_gateway
from tests.support.servers import RunningServer, serve_in_thread

CARD_PATH = "/.well-known/agent-card.json"


@dataclass
class CardSwitch:
    """ASGI wrapper around the real worker: can fail or alter its Agent Card, and counts the
    JSON-RPC methods the worker receives."""

    app: Any
    fail: bool = False
    version: str | None = None
    methods: list[str] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == CARD_PATH:
            if self.fail:
                await send({"type": "http.response.start", "status": 503, "headers": []})
                await send({"type": "http.response.body", "body": b"down"})
                return
            if self.version:
                await self._altered(scope, receive, send)
                return
        if scope["type"] == "http" and scope["method"] == "POST":
            body = await request_body(receive)
            self.methods.append(orjson.loads(body).get("method", "?"))
            sent = False

            async def replay() -> Any:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)

    async def _altered(self, scope: Any, receive: Any, send: Any) -> None:
        chunks: list[bytes] = []
        start: dict[str, Any] = {}

        async def capture(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                chunks.append(message.get("body", b""))

        fresh = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"if-none-match"]}
        await self.app(fresh, receive, capture)
        card = orjson.loads(b"".join(chunks))
        card["version"] = self.version
        body = orjson.dumps(card)
        headers = [(k, v) for k, v in start["headers"] if k.lower() not in (b"content-length", b"etag")]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def count(self, method: str) -> int:
        return self.methods.count(method)


@pytest.fixture
def stack() -> Iterator[tuple[CardSwitch, RunningServer, RunningServer]]:
    """The card-switching worker, the gateway in front of it and the gateway's admin listener."""
    switch = CardSwitch(build_worker_app("http://worker.invalid:1/"))
    with serve_in_thread(switch, name="sdk-worker") as worker:
        config = sidecar_config(worker.url, host="127.0.0.1", port=0, mode="enforce", ledger="memory")
        app = build_app(config, registry=CollectorRegistry())
        with serve_gateway(app) as (gateway, admin):
            yield switch, gateway, admin


@pytest.fixture
async def client(stack: tuple[CardSwitch, RunningServer, RunningServer]) -> AsyncIterator[Any]:
    _, gateway, _ = stack
    async with httpx.AsyncClient(trust_env=False, timeout=20) as http:
        sdk = await create_client(gateway.url, client_config=ClientConfig(
            streaming=False, supported_protocol_bindings=["JSONRPC"], httpx_client=http))
        yield sdk
        await sdk.close()


async def _send(client: Any, text: str, task: Any = None) -> Any:
    message = new_text_message(text, role=Role.ROLE_USER)
    if task is not None:
        message.task_id, message.context_id = task.id, task.context_id
    events = [e async for e in client.send_message(SendMessageRequest(message=message))]
    return events[-1].task


def _mark_stale(gateway: RunningServer) -> None:
    """Make the card due for revalidation now (instead of waiting out its TTL)."""
    gateway.app.state.runtime.cards["worker"].mark_stale()


async def test_no_forced_get_without_a_reason(stack: Any, client: Any) -> None:
    switch, _, _ = stack
    task = await _send(client, "ask for a date")
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    done = await _send(client, "tomorrow", task)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert switch.count("GetTask") == 0


async def test_changed_card_forces_one_get_task_before_the_follow_up(stack: Any, client: Any) -> None:
    switch, gateway, admin = stack
    task = await _send(client, "ask for a date")
    switch.version = "9.9.9"  # the card's body, so its ETag, changes
    _mark_stale(gateway)
    done = await _send(client, "tomorrow", task)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert switch.count("GetTask") == 1
    assert switch.methods[-2:] == ["GetTask", "SendMessage"]  # the GetTask came first
    metrics = httpx.get(admin.url + "/metrics", trust_env=False).text
    assert 'a2a_gateway_forced_get_total{reason="etag_changed",upstream="worker"} 1.0' in metrics


async def test_unreachable_card_refuses_new_tasks_but_not_existing_ones(stack: Any, client: Any) -> None:
    switch, gateway, _ = stack
    task = await _send(client, "ask for a date")
    switch.fail = True
    _mark_stale(gateway)
    with pytest.raises(Exception) as refused:  # the SDK raises on the gateway's 503
        await _send(client, "a new task")
    assert "503" in str(refused.value) or "card" in str(refused.value)
    assert switch.count("SendMessage") == 1  # only the first task's message reached the worker
    done = await _send(client, "tomorrow", task)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert switch.count("GetTask") == 1  # forced: card_unreachable
    served = httpx.get(gateway.url + CARD_PATH, trust_env=False)
    assert served.status_code == 200  # the last good card is still served
