"""The sweep hands what it observed to the push relay (docs/sweep.md §4, docs/push.md §2.1),
end to end: a push-only client registers its webhook through the gateway, its task parks on an
a2a-sdk 1.3 worker that sends push notifications, then the worker's task store says
``failed`` (as after a restart that rehydrated it so, the Agent Card unchanged) and the worker
sends nothing. The gateway's sweep asks ``GetTask``, records ``failed`` and the client's
webhook — which the worker never knew — receives the failed status in the client's version,
within one heartbeat interval plus the sweep period. Clients: v1.0 JSON-RPC by hand, v0.3
JSON-RPC by hand, a genuine a2a-sdk 0.3 client (its ``.venv-a2a03``, tests/support/peers.py)
whose webhook body is read back with that SDK's own ``Task`` model, a tenant's task over
JSON-RPC and over an HTTP+JSON-only worker's tenant path. All under real uvicorn on 127.0.0.1,
with the SQLite ledger; one gateway per test (its metrics are the test's alone)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from a2a.server.context import ServerCallContext
from a2a.types import TaskState as SdkTaskState

from gateway.app import build_app
from gateway.config import PushConfig, SweepConfig, sidecar_config
from tests.support.gateway import serve_gateway
from tests.support.peers import require_peer
from tests.support.push_peers import Post, Receiver, build_push_worker_app
from tests.support.servers import RunningServer, serve_in_thread, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

HEARTBEAT = 0.5
PERIOD = 0.05
SLACK = 1.5  # the GetTask, the judging, the outbox and one POST, on a loaded 2-core machine
V1 = {"A2A-Version": "1.0", "content-type": "application/json"}
V03 = {"content-type": "application/json"}
CALLBACK = "/_a2a_gateway/push/"


@dataclass
class Peers:
    worker: RunningServer
    receiver: Receiver
    hook: str


@dataclass
class Stack:
    peers: Peers
    gateway: RunningServer
    admin: RunningServer
    registry: CollectorRegistry

    @property
    def runtime(self) -> Any:
        return self.gateway.app.state.runtime

    def on_gateway(self, coro: Any) -> Any:
        assert self.gateway.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.gateway.loop).result(5)

    def metric(self, name: str, **labels: str) -> float:
        return sum(s.value for f in self.registry.collect() for s in f.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def timeline(self, task_id: str, tenant: str = "") -> dict[str, Any]:
        params = {"tenant": tenant} if tenant else {}
        got = httpx.get(self.admin.url_for(f"/tasks/worker/{task_id}/timeline"), params=params, trust_env=False)
        assert got.status_code == 200, got.text
        return got.json()


@pytest.fixture(scope="module")
def peers() -> Iterator[Peers]:
    receiver = Receiver()
    with serve_in_thread(receiver, name="webhook") as hook, \
            serve_in_thread(build_push_worker_app("http://worker.invalid:1/"), name="push-worker") as worker:
        yield Peers(worker, receiver, hook.url)


@pytest.fixture
def stack(peers: Peers, tmp_path: Path) -> Iterator[Stack]:
    with gateway_stack(peers, tmp_path) as running:
        yield running


@contextlib.contextmanager
def gateway_stack(peers: Peers, tmp_path: Path) -> Iterator[Stack]:
    """A gateway in front of ``peers.worker``: small heartbeat and sweep period, the SQLite
    ledger, the receiver on 127.0.0.1 allowed."""
    config = sidecar_config(peers.worker.url, host="127.0.0.1", port=0, mode="enforce",
                            ledger=f"sqlite:///{tmp_path}/ledger.db", heartbeat_seconds=HEARTBEAT)
    config = config.model_copy(update={
        "sweep": SweepConfig(interval_seconds=PERIOD),
        "push": PushConfig(allowed_cidrs=["127.0.0.1/32"], backoff_seconds=0.05, poll_seconds=0.05)})
    registry = CollectorRegistry()
    app = build_app(config, registry=registry)
    with serve_gateway(app, name="sweep-push-gateway") as (gateway, admin):
        wait_until(lambda: app.state.runtime.cards_known(), message="the worker's card")
        yield Stack(peers, gateway, admin, registry)


def post_json(url: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(trust_env=False, timeout=15) as client:
        return client.post(url, content=orjson.dumps(body), headers=headers)


def rpc(url: str, method: str, params: dict[str, Any], headers: dict[str, str] = V1) -> Any:
    response = post_json(url + "/", {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers)
    assert response.status_code == 200, response.text
    doc = orjson.loads(response.content)
    assert "result" in doc, doc
    return doc["result"]


def message(text: str) -> dict[str, Any]:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}


def message03(text: str) -> dict[str, Any]:
    return {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user",
            "parts": [{"kind": "text", "text": text}]}


def posts_to(stack: Stack, path: str) -> list[Post]:
    return [p for p in list(stack.peers.receiver.posts) if p.path == path]


def state_of(doc: Any) -> str | None:
    """The state a webhook body names (v1.0 StreamResponse or v0.3 object)."""
    inner = doc.get("statusUpdate") or doc.get("task") or doc
    return (inner.get("status") or {}).get("state")


def worker_state(stack: Stack, task_id: str) -> Any:
    async def read() -> Any:
        stored = await stack.peers.worker.app.state.task_store.get(task_id, ServerCallContext())
        return stored.status.state if stored is not None else None
    assert stack.peers.worker.loop is not None
    return asyncio.run_coroutine_threadsafe(read(), stack.peers.worker.loop).result(5)


def rehydrate_as_failed(stack: Stack, task_id: str) -> float:
    """The worker's store after its restart: the task says FAILED; no event, no notification.
    Returns when (``time.monotonic()``)."""
    async def rewrite() -> None:
        store, context = stack.peers.worker.app.state.task_store, ServerCallContext()
        stored = await store.get(task_id, context)
        stored.status.state = SdkTaskState.TASK_STATE_FAILED
        await store.save(stored, context)
    assert stack.peers.worker.loop is not None
    asyncio.run_coroutine_threadsafe(rewrite(), stack.peers.worker.loop).result(5)
    return time.monotonic()


def recorded_state(stack: Stack, task_id: str, tenant: str = "") -> str | None:
    stored = stack.on_gateway(stack.runtime.ledger.get("worker", task_id, tenant=tenant))
    return stored.record.state.value if stored is not None else None


def worker_callbacks(stack: Stack, task_id: str) -> list[str]:
    configs = rpc(stack.peers.worker.url, "ListTaskPushNotificationConfigs", {"taskId": task_id}).get("configs", [])
    return [c["url"] for c in configs]


def wait_for_failed(stack: Stack, path: str, failed: str, flipped: float) -> Post:
    """The first post to ``path`` naming ``failed``, asserted to have arrived within one
    heartbeat interval plus the sweep period (and the slack) of the flip."""
    post = wait_until(lambda: next((p for p in posts_to(stack, path) if state_of(p.json()) == failed), None),
                      timeout=HEARTBEAT + PERIOD + 10, message=f"{failed} at {path}")
    assert post.at - flipped <= HEARTBEAT + PERIOD + SLACK, post.at - flipped
    return post


def assert_sweep_probe_on_timeline(stack: Stack, task_id: str, tenant: str = "") -> None:
    doc = stack.timeline(task_id, tenant)
    assert doc["tenant"] == tenant and doc["record"]["state"] == "TASK_STATE_FAILED"
    probes = [e for e in doc["timeline"] if e["direction"] == "probe" and e["forced_get"] == "sweep"]
    assert [(e["method"], e["state_received"], e["state"], e["verdict"]) for e in probes][-1:] == [
        ("GetTask", "TASK_STATE_FAILED", "TASK_STATE_FAILED", "forwarded")], doc["timeline"]


def assert_sweep_counted(stack: Stack, changed: int) -> None:
    """Every sweep GetTask is counted as a forced GetTask of reason ``sweep``; ``changed`` of
    them recorded a new state; no client asked GetTask."""
    answered = sum(stack.metric("a2a_gateway_sweep_total", outcome=o) for o in ("unchanged", "changed"))
    assert stack.metric("a2a_gateway_sweep_total", outcome="changed") == changed
    assert stack.metric("a2a_gateway_forced_get_total", reason="sweep") == answered >= changed
    assert stack.metric("a2a_gateway_requests_total", method="GetTask") == 0


def test_a_v10_push_only_client_receives_the_failed_status_the_sweep_observed(stack: Stack) -> None:
    path = f"/v10-{uuid.uuid4().hex[:8]}"
    config = {"url": stack.peers.hook + path, "token": "client-token"}
    task = rpc(stack.gateway.url, "SendMessage", {"message": message("slow task"), "configuration": {
        "taskPushNotificationConfig": config, "returnImmediately": True}})["task"]
    task_id = task["id"]
    # parked: the worker's WORKING notification reached the webhook through the gateway
    wait_until(lambda: any(state_of(p.json()) == "TASK_STATE_WORKING" for p in posts_to(stack, path)),
               timeout=10, message="the WORKING notification")
    wait_until(lambda: worker_state(stack, task_id) == SdkTaskState.TASK_STATE_WORKING, message="worker: working")
    assert recorded_state(stack, task_id) == "TASK_STATE_WORKING"
    (callback,) = worker_callbacks(stack, task_id)  # the worker knows the gateway's callback only
    assert callback.startswith(stack.gateway.url + CALLBACK)
    wait_until(lambda: stack.on_gateway(stack.runtime.ledger.outbox_depth()) == 0, message="outbox drained")
    before = len(posts_to(stack, path))

    flipped = rehydrate_as_failed(stack, task_id)
    post = wait_for_failed(stack, path, "TASK_STATE_FAILED", flipped)

    assert post.headers["content-type"] == "application/a2a+json"
    assert post.headers["x-a2a-notification-token"] == "client-token"
    # nothing invented: the body is the worker's own task, as GetTask answers it directly
    direct = rpc(stack.peers.worker.url, "GetTask", {"id": task_id, "historyLength": 0})
    assert post.json() == {"task": direct}
    wait_until(lambda: stack.on_gateway(stack.runtime.ledger.outbox_depth()) == 0, message="outbox drained")
    assert [p.json() for p in posts_to(stack, path)[before:]] == [{"task": direct}]
    assert recorded_state(stack, task_id) == "TASK_STATE_FAILED"
    assert_sweep_counted(stack, changed=1)
    # counted once the webhook's answer is in and the entry removed: after the receiver has it
    wait_until(lambda: stack.metric("a2a_gateway_push_delivered_total", upstream="worker") >= before + 1,
               message="the delivery counted")
    assert_sweep_probe_on_timeline(stack, task_id)


def test_a_v03_client_receives_the_failed_task_in_v03_form(stack: Stack) -> None:
    path = f"/v03-{uuid.uuid4().hex[:8]}"
    task = rpc(stack.gateway.url, "message/send", {"message": message03("ask for a date")}, V03)
    assert task["kind"] == "task" and task["status"]["state"] == "input-required"
    task_id = task["id"]
    created = rpc(stack.gateway.url, "tasks/pushNotificationConfig/set", {
        "taskId": task_id, "pushNotificationConfig": {"url": stack.peers.hook + path, "token": "t03"}}, V03)
    assert created["pushNotificationConfig"]["url"] == stack.peers.hook + path  # its own webhook, read back
    (callback,) = worker_callbacks(stack, task_id)
    assert callback.startswith(stack.gateway.url + CALLBACK)

    flipped = rehydrate_as_failed(stack, task_id)
    post = wait_for_failed(stack, path, "failed", flipped)

    assert post.headers["content-type"] == "application/json"
    assert post.headers["x-a2a-notification-token"] == "t03"
    # a v0.3 Task, what an a2a-sdk 0.3 webhook reads: the worker's own v0.3 tasks/get answer
    # without the history (the sweep asks historyLength 0; a2a-sdk's v0.3 adapter sends it all)
    direct = rpc(stack.peers.worker.url, "tasks/get", {"id": task_id, "historyLength": 0}, V03)
    assert post.json() == {k: v for k, v in direct.items() if k != "history"}
    assert post.json()["kind"] == "task" and post.json()["contextId"] == task["contextId"]
    wait_until(lambda: stack.on_gateway(stack.runtime.ledger.outbox_depth()) == 0, message="outbox drained")
    assert len(posts_to(stack, path)) == 1  # the worker sent nothing; the gateway one notification
    assert_sweep_counted(stack, changed=1)
    assert_sweep_probe_on_timeline(stack, task_id)


SDK03_CLIENT = """
import asyncio, json, sys, uuid
import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, PushNotificationConfig, Role, Task, TextPart, TransportProtocol

async def main(args):
    async with httpx.AsyncClient(trust_env=False, timeout=15) as http:
        card = await A2ACardResolver(http, args["base"]).get_agent_card()
        hook = PushNotificationConfig(url=args["url"], token=args["token"])
        # polling: a non-blocking message/send (blocking false) carrying the push config
        config = ClientConfig(streaming=False, polling=True, httpx_client=http,
                              supported_transports=[TransportProtocol.jsonrpc], push_notification_configs=[hook])
        client = ClientFactory(config).create(card)
        text = Message(message_id=uuid.uuid4().hex, role=Role.user, parts=[Part(root=TextPart(text=args["text"]))])
        async for item in client.send_message(text):
            task = item[0] if isinstance(item, tuple) else item
            print(json.dumps(task.model_dump(mode="json", exclude_none=True)))
            return

if sys.argv[1] == "send":
    asyncio.run(main(json.loads(sys.argv[2])))
else:  # what an a2a-sdk 0.3 webhook does with a notification's body
    task = Task.model_validate_json(sys.stdin.buffer.read())
    print(json.dumps({"id": task.id, "state": task.status.state.value}))
"""


def sdk03(args: list[str], stdin: bytes = b"") -> Any:
    python = require_peer("py03")[0]
    run = subprocess.run([python, "-c", SDK03_CLIENT, *args], input=stdin, capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()
    return json.loads(run.stdout.decode().strip().splitlines()[-1])


def test_an_a2a_sdk_03_client_registers_its_webhook_and_reads_the_failed_task(stack: Stack) -> None:
    path = f"/sdk03-{uuid.uuid4().hex[:8]}"
    task = sdk03(["send", json.dumps({"base": stack.gateway.url, "url": stack.peers.hook + path,
                                      "token": "sdk03", "text": "slow task"})])
    task_id = task["id"]
    wait_until(lambda: worker_state(stack, task_id) == SdkTaskState.TASK_STATE_WORKING, message="worker: working")
    wait_until(lambda: recorded_state(stack, task_id) == "TASK_STATE_WORKING", message="gateway: working")
    (callback,) = worker_callbacks(stack, task_id)  # the SDK's config reached the worker rewritten
    assert callback.startswith(stack.gateway.url + CALLBACK)

    flipped = rehydrate_as_failed(stack, task_id)
    post = wait_for_failed(stack, path, "failed", flipped)

    assert post.headers["x-a2a-notification-token"] == "sdk03"
    assert post.headers["content-type"] == "application/json"
    assert sdk03(["read"], post.body) == {"id": task_id, "state": "failed"}
    assert_sweep_counted(stack, changed=1)
    assert_sweep_probe_on_timeline(stack, task_id)


def test_a_tenants_task_notifies_that_tenants_webhook_only(stack: Stack,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    acme, other = f"/acme-{uuid.uuid4().hex[:8]}", f"/other-{uuid.uuid4().hex[:8]}"
    task = rpc(stack.gateway.url, "SendMessage", {"tenant": "acme", "message": message("ask for a date"),
                                                  "configuration": {"taskPushNotificationConfig": {
                                                      "url": stack.peers.hook + acme, "token": "acme-token"}}})["task"]
    task_id = task["id"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert recorded_state(stack, task_id, "acme") == "TASK_STATE_INPUT_REQUIRED"
    assert recorded_state(stack, task_id) is None  # the task is acme's, not the default tenant's
    # another tenant names the same task id on the REST tenant path: its config is that tenant's
    created = post_json(f"{stack.gateway.url}/other/rest/tasks/{task_id}/pushNotificationConfigs",
                        {"taskId": task_id, "id": "other-cfg", "url": stack.peers.hook + other}, V1)
    assert created.status_code == 200, created.text
    assert [e.tenant for e in stack.on_gateway(stack.runtime.ledger.push_configs("worker", task_id,
                                                                                 tenant="other"))] == ["other"]
    # a task with no push config at all is swept and delivers nowhere, with no error
    lone = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})["task"]["id"]
    wait_until(lambda: stack.on_gateway(stack.runtime.ledger.outbox_depth()) == 0, message="outbox drained")
    before = len(posts_to(stack, acme))
    delivered = stack.metric("a2a_gateway_push_delivered_total", upstream="worker")

    caplog.set_level(logging.INFO)
    flipped = rehydrate_as_failed(stack, task_id)
    rehydrate_as_failed(stack, lone)
    post = wait_for_failed(stack, acme, "TASK_STATE_FAILED", flipped)
    # the sweep's outcome is counted after its record is stored: wait on the count of both
    wait_until(lambda: stack.metric("a2a_gateway_sweep_total", outcome="changed") >= 2,
               timeout=HEARTBEAT + PERIOD + 10, message="both tasks' sweeps recorded failed")
    assert recorded_state(stack, lone) == "TASK_STATE_FAILED"

    assert post.headers["x-a2a-notification-token"] == "acme-token"
    assert post.json()["task"]["id"] == task_id
    wait_until(lambda: stack.on_gateway(stack.runtime.ledger.outbox_depth()) == 0, message="outbox drained")
    assert len(posts_to(stack, acme)) == before + 1
    assert posts_to(stack, other) == []  # another tenant's config of the same task id hears nothing
    wait_until(lambda: stack.metric("a2a_gateway_push_delivered_total", upstream="worker") >= delivered + 1,
               message="the delivery counted")  # counted after the receiver has it
    assert stack.metric("a2a_gateway_push_delivered_total", upstream="worker") == delivered + 1
    assert_sweep_counted(stack, changed=2)
    assert [r for r in caplog.records if r.getMessage() == "sweep_push_failed"] == []
    assert_sweep_probe_on_timeline(stack, task_id, "acme")


def test_a_tenants_task_on_a_rest_only_worker_is_asked_on_the_tenant_path(peers: Peers, tmp_path: Path) -> None:
    """The sweep's GetTask to an HTTP+JSON-only worker names the tenant as a client's REST
    path does: ``/{tenant}/rest/tasks/{id}``, where a2a-sdk mounts it (docs/callers.md §1)."""
    path = f"/rest-acme-{uuid.uuid4().hex[:8]}"
    with serve_in_thread(build_push_worker_app("http://worker.invalid:1/", rest_only=True),
                         name="rest-push-worker") as worker, \
            gateway_stack(Peers(worker, peers.receiver, peers.hook), tmp_path) as stack:
        sent = post_json(f"{stack.gateway.url}/acme/rest/message:send", {
            "message": message("ask for a date"),
            "configuration": {"taskPushNotificationConfig": {"url": stack.peers.hook + path, "token": "r"}}}, V1)
        assert sent.status_code == 200, sent.text
        task_id = sent.json()["task"]["id"]
        assert recorded_state(stack, task_id, "acme") == "TASK_STATE_INPUT_REQUIRED"
        wait_until(lambda: stack.on_gateway(stack.runtime.ledger.outbox_depth()) == 0, message="outbox drained")
        before = len(posts_to(stack, path))

        flipped = rehydrate_as_failed(stack, task_id)
        post = wait_for_failed(stack, path, "TASK_STATE_FAILED", flipped)

        assert post.json()["task"]["id"] == task_id and post.headers["x-a2a-notification-token"] == "r"
        wait_until(lambda: stack.on_gateway(stack.runtime.ledger.outbox_depth()) == 0, message="outbox drained")
        assert len(posts_to(stack, path)) == before + 1
        assert recorded_state(stack, task_id, "acme") == "TASK_STATE_FAILED"
        assert stack.metric("a2a_gateway_sweep_total", outcome="error") == 0  # never asked a wrong path
        assert_sweep_counted(stack, changed=1)
        assert_sweep_probe_on_timeline(stack, task_id, "acme")
