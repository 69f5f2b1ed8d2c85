"""The push relay through the real gateway (docs/push.md): an a2a-sdk 1.3 worker that sends
push notifications with the SDK's sender, a webhook receiver, the gateway in between, all under
real uvicorn on 127.0.0.1. The receiver is on 127.0.0.1, so the gateway allows 127.0.0.1/32
explicitly (push.allowed_cidrs); a second gateway without the allowance refuses it."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.app import build_app
from gateway.config import PushConfig, sidecar_config
from gateway.observability.logging import LOGGER_NAME, JsonFormatter
from tests.support.gateway import serve_gateway
from tests.support.push_peers import Receiver, build_push_worker_app
from tests.support.servers import RunningServer, serve_in_thread, wait_until

V1 = {"A2A-Version": "1.0", "content-type": "application/json"}
CALLBACK = "/_a2a_gateway/push/"


@dataclass
class Stack:
    worker: RunningServer
    gateway: RunningServer
    admin: RunningServer
    receiver: Receiver
    receiver_url: str

    def ledger_call(self, fn: Any) -> Any:
        rt = self.gateway.app.state.runtime
        assert self.gateway.loop is not None
        return asyncio.run_coroutine_threadsafe(fn(rt.ledger), self.gateway.loop).result(5)

    def metric(self, name: str, **labels: str) -> float:
        text = httpx.get(self.admin.url_for("/metrics"), trust_env=False).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


def gateway_app(worker_url: str, tmp: Any, push: PushConfig) -> Any:
    config = sidecar_config(worker_url, host="127.0.0.1", port=0, mode="enforce", name="worker",
                            ledger=f"sqlite:///{tmp}/ledger.db")
    return build_app(config.model_copy(update={"push": push}), registry=CollectorRegistry())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    receiver = Receiver()
    push = PushConfig(allowed_cidrs=["127.0.0.1/32"], backoff_seconds=0.05, poll_seconds=0.05)
    with serve_in_thread(receiver, name="webhook") as hook, \
            serve_in_thread(build_push_worker_app("http://worker.invalid:1/"), name="push-worker") as worker:
        app = gateway_app(worker.url, tmp_path_factory.mktemp("push"), push)
        with serve_gateway(app, name="push-gateway") as (gateway, admin):
            yield Stack(worker, gateway, admin, receiver, hook.url)


def rpc(url: str, method: str, params: dict[str, Any], req_id: Any = 1) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}
    with httpx.Client(trust_env=False, timeout=15) as client:
        response = client.post(url + "/", content=orjson.dumps(body), headers=V1)
    assert response.status_code == 200, response.text
    return orjson.loads(response.content)


def message(text: str, task_id: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id:
        msg["taskId"] = task_id
    return msg


def notifications_of(stack: Stack, path: str) -> list[Any]:
    return [p for p in list(stack.receiver.posts) if p.path == path]


def final_state(posts: list[Any]) -> str | None:
    for post in reversed(posts):
        doc = post.json()
        inner = doc.get("statusUpdate") or doc.get("task") or {}
        state = (inner.get("status") or {}).get("state")
        if state:
            return state
    return None


def test_inline_config_notifications_reach_the_webhook_only_through_the_gateway(stack: Stack) -> None:
    hook = f"{stack.receiver_url}/inline"
    config = {"url": hook, "token": "client-token",
              "authentication": {"scheme": "Bearer", "credentials": "client-cred"}}
    answer = rpc(stack.gateway.url, "SendMessage", {"message": message("hi"),
                                                    "configuration": {"taskPushNotificationConfig": config}})
    task_id = answer["result"]["task"]["id"]
    wait_until(lambda: final_state(notifications_of(stack, "/inline")) == "TASK_STATE_COMPLETED", timeout=10)
    posts = notifications_of(stack, "/inline")
    for post in posts:
        assert post.headers["x-a2a-notification-token"] == "client-token"
        assert post.headers["authorization"] == "Bearer client-cred"
        assert post.headers["content-type"] == "application/a2a+json"
        doc = post.json()
        assert len(doc) == 1 and next(iter(doc)) in ("task", "statusUpdate", "artifactUpdate")
    # the worker holds the gateway's callback and a token of the gateway's, never the client's
    direct = rpc(stack.worker.url, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    (worker_view,) = direct["result"]["configs"]
    assert worker_view["url"].startswith(stack.gateway.url + CALLBACK)
    assert worker_view["token"] != "client-token" and "authentication" not in worker_view
    # through the gateway the client reads its own webhook back
    listed = rpc(stack.gateway.url, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    (client_view,) = listed["result"]["configs"]
    assert client_view["url"] == hook and client_view["token"] == "client-token"
    assert client_view["authentication"] == config["authentication"]
    bound = stack.ledger_call(lambda led: led.push_configs("worker", task_id))
    assert len(bound) == 1  # the pending inline config is bound to the task the worker named


def test_a_misbehaving_workers_post_terminal_notification_is_not_delivered(stack: Stack) -> None:
    hook = f"{stack.receiver_url}/terminal"
    answer = rpc(stack.gateway.url, "SendMessage", {"message": message("hi"), "configuration": {
        "taskPushNotificationConfig": {"url": hook, "token": "t"}}})
    task_id = answer["result"]["task"]["id"]
    wait_until(lambda: final_state(notifications_of(stack, "/terminal")) == "TASK_STATE_COMPLETED", timeout=10)
    (worker_view,) = rpc(stack.worker.url, "ListTaskPushNotificationConfigs", {"taskId": task_id})["result"]["configs"]
    # the receiver has the COMPLETED post before the gateway removes its entry: wait for that
    wait_until(lambda: stack.ledger_call(lambda led: led.outbox_depth()) == 0, timeout=10)
    reopen = orjson.dumps({"statusUpdate": {"taskId": task_id, "contextId": answer["result"]["task"]["contextId"],
                                            "status": {"state": "working"}}})
    before, refused = len(notifications_of(stack, "/terminal")), stack.metric(
        "a2a_gateway_push_refused_total", reason="invariant")
    with httpx.Client(trust_env=False, timeout=5) as client:
        wrong = client.post(worker_view["url"], content=reopen, headers={"X-A2A-Notification-Token": "guess"})
        assert wrong.status_code == 401
        none = client.post(worker_view["url"], content=reopen)
        assert none.status_code == 401
        ok = client.post(worker_view["url"], content=reopen,
                         headers={"X-A2A-Notification-Token": worker_view["token"],
                                  "content-type": "application/a2a+json"})
    assert ok.status_code == 200
    assert stack.metric("a2a_gateway_push_refused_total", reason="invariant") == refused + 1
    assert stack.metric("a2a_gateway_push_refused_total", reason="token") >= 2
    assert stack.ledger_call(lambda led: led.outbox_depth()) == 0  # never enqueued
    assert len(notifications_of(stack, "/terminal")) == before


def test_create_get_delete_through_the_gateway_map_the_webhook_both_ways(stack: Stack) -> None:
    asked = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})
    task = asked["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    hook = f"{stack.receiver_url}/created"
    created = rpc(stack.gateway.url, "CreateTaskPushNotificationConfig",
                  {"taskId": task["id"], "id": "cfg-1", "url": hook, "token": "tok-2"}, req_id="c-1")
    assert created["id"] == "c-1"
    assert created["result"]["url"] == hook and created["result"]["token"] == "tok-2"
    with httpx.Client(trust_env=False, timeout=5) as client:  # REST sees the same mapping
        got = client.get(f"{stack.gateway.url}/rest/tasks/{task['id']}/pushNotificationConfigs/cfg-1",
                         headers={"A2A-Version": "1.0"})
    assert got.status_code == 200, got.text
    assert got.json()["url"] == hook
    rpc(stack.gateway.url, "SendMessage", {"message": message("tomorrow", task["id"])})
    wait_until(lambda: final_state(notifications_of(stack, "/created")) == "TASK_STATE_COMPLETED", timeout=10)
    assert all(p.headers["x-a2a-notification-token"] == "tok-2" for p in notifications_of(stack, "/created"))
    deleted = rpc(stack.gateway.url, "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "cfg-1"})
    assert "error" not in deleted
    assert stack.ledger_call(lambda led: led.push_configs("worker", task["id"])) == []


def test_a_callback_the_answer_names_outside_its_task_never_carries_the_worker_token(stack: Stack) -> None:
    """Found by a hostile caller (issue #19): the a2a-sdk worker ignores the tenant, so a list
    in tenant ``acme`` showed the configs of tenant ``""``'s task, and with no webhook stored
    under acme nothing was restored: the client got the gateway's callback URL and the worker's
    token, posted a forged COMPLETED to it, and the ledger kept it (the owner's GetTask then
    showed the forgery, its cancel was refused here). A callback URL the answer names outside
    the request's (tenant, task) keeps its URL and loses its token and credentials."""
    asked = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})
    task = asked["result"]["task"]
    hook = f"{stack.receiver_url}/owned"
    rpc(stack.gateway.url, "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "id": "cfg-o", "url": hook, "token": "owner-token",
         "authentication": {"scheme": "Bearer", "credentials": "owner-cred"}})
    (worker_view,) = rpc(stack.worker.url, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})["result"]["configs"]
    assert worker_view["url"].startswith(stack.gateway.url + CALLBACK) and worker_view["token"]
    answers = [
        rpc(stack.gateway.url, "ListTaskPushNotificationConfigs", {"taskId": task["id"], "tenant": "acme"})["result"],
        rpc(stack.gateway.url, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "cfg-o",
                                                                 "tenant": "acme"})["result"],
    ]
    with httpx.Client(trust_env=False, timeout=5) as client:
        rest = client.get(f"{stack.gateway.url}/acme/rest/tasks/{task['id']}/pushNotificationConfigs",
                          headers={"A2A-Version": "1.0"})
    answers.append(rest.json())
    for answer in answers:
        text = orjson.dumps(answer).decode()
        assert worker_view["token"] not in text and "owner-token" not in text and "owner-cred" not in text, text
    (shown,) = answers[0]["configs"]
    assert shown["url"] == worker_view["url"] and "token" not in shown
    # the owner, in the task's own tenant, still reads its webhook back
    (own,) = rpc(stack.gateway.url, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})["result"]["configs"]
    assert own["url"] == hook and own["token"] == "owner-token"


def test_a_webhook_on_a_refused_address_is_refused_at_creation(stack: Stack, tmp_path: Any) -> None:
    asked = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})
    task_id = asked["result"]["task"]["id"]
    metadata = rpc(stack.gateway.url, "CreateTaskPushNotificationConfig",
                   {"taskId": task_id, "url": "http://169.254.169.254/latest"}, req_id=7)
    assert metadata["id"] == 7 and metadata["error"]["code"] == -32602
    # without the allowance, 127.0.0.1 is refused too — over JSON-RPC and REST
    with serve_gateway(gateway_app(stack.worker.url, tmp_path, PushConfig()), name="strict") as (strict, _):
        refused = rpc(strict.url, "CreateTaskPushNotificationConfig",
                      {"taskId": task_id, "url": f"{stack.receiver_url}/never"}, req_id="r-9")
        assert refused["id"] == "r-9" and refused["error"]["code"] == -32602
        with httpx.Client(trust_env=False, timeout=5) as client:
            rest = client.post(f"{strict.url}/rest/tasks/{task_id}/pushNotificationConfigs",
                               content=orjson.dumps({"taskId": task_id, "url": f"{stack.receiver_url}/never"}),
                               headers=V1)
            assert rest.status_code == 400
            assert rest.json()["error"]["status"] == "INVALID_ARGUMENT"
            inline = client.post(strict.url + "/", headers=V1, content=orjson.dumps({
                "jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {
                    "message": message("hi"),
                    "configuration": {"taskPushNotificationConfig": {"url": f"{stack.receiver_url}/never"}}}}))
            assert inline.json()["error"]["code"] == -32602
    # nothing reached the worker
    direct = rpc(stack.worker.url, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    assert direct["result"].get("configs", []) == []


def test_a_create_naming_a_webhook_of_each_version_is_refused_not_half_rewritten(stack: Stack) -> None:
    """A v0.3 create whose ``pushNotificationConfig.url`` (what the worker reads) is the cloud
    metadata address, with a decoy v1.0 ``url`` beside it: the worker must never hold the
    metadata address (it would POST there itself, around the gateway)."""
    task_id = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})["result"]["task"]["id"]
    params = {"taskId": task_id, "url": f"{stack.receiver_url}/decoy",
              "pushNotificationConfig": {"id": "both", "url": "http://169.254.169.254/latest"}}
    body = {"jsonrpc": "2.0", "id": 5, "method": "tasks/pushNotificationConfig/set", "params": params}
    with httpx.Client(trust_env=False, timeout=15) as client:
        answer = client.post(stack.gateway.url + "/", content=orjson.dumps(body),
                             headers={"content-type": "application/json"}).json()
    assert answer["id"] == 5 and answer["error"]["code"] == -32602, answer
    held = rpc(stack.worker.url, "ListTaskPushNotificationConfigs", {"taskId": task_id})["result"].get("configs", [])
    assert held == []
    assert stack.metric("a2a_gateway_push_webhooks_refused_total", reason="ambiguous") >= 1


def test_observe_mode_checks_and_rewrites_push_configs_of_requests_the_card_does_not_admit(
        stack: Stack, tmp_path: Any) -> None:
    """Observe mode forwards a request the card does not admit (here: a required skill the
    card lacks); its push config must not reach the worker unchecked and unrewritten."""
    config = sidecar_config(stack.worker.url, host="127.0.0.1", port=0, mode="observe", name="worker",
                            ledger=f"sqlite:///{tmp_path}/observe.db")
    upstream = config.upstreams[0]
    upstream = upstream.model_copy(update={"card": upstream.card.model_copy(update={"required_skill": "no-such-skill"})})
    app = build_app(config.model_copy(update={"upstreams": [upstream], "push": PushConfig()}),
                    registry=CollectorRegistry())
    with serve_gateway(app, name="observe-gateway") as (gateway, _admin):
        wait_until(lambda: app.state.runtime.cards_known(), timeout=10)
        refused = rpc(gateway.url, "SendMessage", {"message": message("ask for a date"), "configuration": {
            "taskPushNotificationConfig": {"url": "http://169.254.169.254/latest"}}})
        assert refused["error"]["code"] == -32602, refused
        hook = f"{stack.receiver_url}/observed"  # 127.0.0.1: refused too without the allowance
        created = rpc(gateway.url, "SendMessage", {"message": message("ask for a date"), "configuration": {
            "taskPushNotificationConfig": {"url": hook}}})
        assert created["error"]["code"] == -32602, created


class EndlessWebhook:
    """A webhook that answers 200 and then a body of :attr:`LIMIT` bytes, sent until the
    gateway hangs up; :attr:`sent` is how much it got out before that."""

    LIMIT = 128 * 1024 * 1024

    def __init__(self) -> None:
        self.sent = 0
        self.done = threading.Event()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        gone = asyncio.ensure_future(receive())  # http.disconnect, when the gateway hangs up
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(self.LIMIT).encode())]})
        chunk = b"x" * (1024 * 1024)
        while self.sent < self.LIMIT and not gone.done():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self.sent += len(chunk)
            await asyncio.sleep(0)
        self.done.set()


def test_a_webhook_answering_an_endless_body_is_not_read(stack: Stack) -> None:
    endless = EndlessWebhook()
    with serve_in_thread(endless, name="endless-webhook") as hook:
        answer = rpc(stack.gateway.url, "SendMessage", {"message": message("hi"), "configuration": {
            "taskPushNotificationConfig": {"url": f"{hook.url}/endless"}}})
        assert answer["result"]["task"]["id"]
        assert endless.done.wait(30)
        # the task's later notifications go out after the first was hung up on: wait for them
        # while the webhook still serves (once it is gone they are retried, then dead-lettered)
        wait_until(lambda: stack.ledger_call(lambda led: led.outbox_depth()) == 0, timeout=10)  # delivered: a 2xx
    assert endless.sent < endless.LIMIT // 4, endless.sent  # hung up on, not read to the end


def test_a_webhook_host_that_is_no_dns_name_is_refused_not_a_500(stack: Stack) -> None:
    task_id = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})["result"]["task"]["id"]
    refused = rpc(stack.gateway.url, "CreateTaskPushNotificationConfig",
                  {"taskId": task_id, "url": "http://" + "a" * 64 + ".example/hook"}, req_id=9)
    assert refused["id"] == 9 and refused["error"]["code"] == -32602


def test_the_callback_url_never_follows_the_clients_host_header(stack: Stack) -> None:
    """Without push.callback_url or public.url, the worker is given the listener address the
    request came to: a client's ``Host: 169.254.169.254`` (or a forwarded host) must not
    become the address the worker posts to, with the worker token."""
    task_id = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})["result"]["task"]["id"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": task_id, "id": "host", "url": f"{stack.receiver_url}/host"}}
    with httpx.Client(trust_env=False, timeout=15) as client:
        answer = client.post(stack.gateway.url + "/", content=orjson.dumps(body),
                             headers={**V1, "Host": "169.254.169.254", "X-Forwarded-Host": "evil.example"}).json()
    assert answer["result"]["url"] == f"{stack.receiver_url}/host"
    (held,) = rpc(stack.worker.url, "ListTaskPushNotificationConfigs", {"taskId": task_id})["result"]["configs"]
    assert held["url"].startswith(stack.gateway.url + CALLBACK), held["url"]


def test_deliver_observed_enqueues_for_every_config_of_the_task(stack: Stack) -> None:
    asked = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})
    task = asked["result"]["task"]
    for n in (1, 2):
        rpc(stack.gateway.url, "CreateTaskPushNotificationConfig",
            {"taskId": task["id"], "id": f"obs-{n}", "url": f"{stack.receiver_url}/observed-{n}"})
    relay = stack.gateway.app.state.runtime.push
    assert stack.gateway.loop is not None
    added = asyncio.run_coroutine_threadsafe(
        relay.deliver_observed("worker", task["id"], {"task": task}), stack.gateway.loop).result(5)
    assert added == 2
    wait_until(lambda: all(notifications_of(stack, f"/observed-{n}") for n in (1, 2)), timeout=10)
    assert notifications_of(stack, "/observed-1")[0].json() == {"task": task}
    none = asyncio.run_coroutine_threadsafe(
        relay.deliver_observed("worker", "no-such-task", {"task": task}), stack.gateway.loop).result(5)
    assert none == 0


def timeline(stack: Stack, task_id: str) -> list[dict[str, Any]]:
    """The task's timeline entries, as the admin API shows them (docs/observability.md §2)."""
    got = httpx.get(stack.admin.url_for(f"/tasks/worker/{task_id}/timeline"), trust_env=False)
    assert got.status_code == 200, got.text
    return got.json()["timeline"]


def test_a_webhook_that_keeps_failing_is_dead_lettered(stack: Stack, tmp_path: Any,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    failing = Receiver()
    failing.status = 500
    push = PushConfig(allowed_cidrs=["127.0.0.1/32"], backoff_seconds=0.2, max_attempts=3, poll_seconds=0.05)
    with serve_in_thread(failing, name="failing-hook") as hook, \
            serve_gateway(gateway_app(stack.worker.url, tmp_path, push), name="dead") as (gateway, admin):
        dead = Stack(stack.worker, gateway, admin, failing, hook.url)
        answer = rpc(gateway.url, "SendMessage", {"message": message("hi"), "configuration": {
            "taskPushNotificationConfig": {"url": f"{hook.url}/dead"}}})
        task_id = answer["result"]["task"]["id"]
        wait_until(lambda: dead.metric("a2a_gateway_push_dead_lettered_total") >= 1, timeout=10)
        wait_until(lambda: dead.ledger_call(lambda led: led.outbox_depth()) == 0, timeout=10)
        assert dead.metric("a2a_gateway_push_delivery_failures_total", reason="status") >= 3
        # and on the task's timeline, kept after the count and the log line: waited for
        entry = wait_until(lambda: next((e for e in timeline(dead, task_id) if e["verdict"] == "dead_lettered"),
                                        None), timeout=10, message="the dead letter on the timeline")
        assert (entry["direction"], entry["method"], entry["version"]) == ("push", "webhook", "1.0")
        assert entry["error"].startswith("not delivered after 3 attempts: status"), entry
    assert failing.posts == [] and failing.attempts >= 3
    # the first notification's three attempts: push.backoff_seconds, then twice that, between them
    first, second, third = failing.arrivals[:3]
    assert second - first >= 0.2 - 0.01 and third - second >= 0.4 - 0.01, failing.arrivals[:3]
    lines = [r for r in caplog.records if r.getMessage() == "push_dead_lettered"]
    assert any(getattr(r, "task_id", None) == task_id for r in lines)  # logged with its task id


def test_a_streaming_send_with_an_inline_config(stack: Stack) -> None:
    hook = f"{stack.receiver_url}/streamed"
    body = {"jsonrpc": "2.0", "id": "st", "method": "SendStreamingMessage", "params": {
        "message": message("hi"), "configuration": {"taskPushNotificationConfig": {"url": hook, "token": "s"}}}}
    with httpx.Client(trust_env=False, timeout=15) as client:
        response = client.post(stack.gateway.url + "/", content=orjson.dumps(body), headers=V1)
    events = [orjson.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    assert events and all("result" in e for e in events), events
    assert "TASK_STATE_COMPLETED" in response.text
    wait_until(lambda: final_state(notifications_of(stack, "/streamed")) == "TASK_STATE_COMPLETED", timeout=10)


def test_unknown_callbacks_and_oversized_notifications_are_refused(stack: Stack) -> None:
    answer = rpc(stack.gateway.url, "SendMessage", {"message": message("hi"), "configuration": {
        "taskPushNotificationConfig": {"url": f"{stack.receiver_url}/sizes"}}})
    task_id = answer["result"]["task"]["id"]
    (worker_view,) = rpc(stack.worker.url, "ListTaskPushNotificationConfigs", {"taskId": task_id})["result"]["configs"]
    with httpx.Client(trust_env=False, timeout=5) as client:
        unknown = client.post(stack.gateway.url + CALLBACK + "no-such-callback", content=b"{}")
        assert unknown.status_code == 404
        big = client.post(worker_view["url"], content=b"x" * (1024 * 1024 + 1),
                          headers={"X-A2A-Notification-Token": worker_view["token"]})
        assert big.status_code == 413
        garbage = client.post(worker_view["url"], content=b"[1, 2]",
                              headers={"X-A2A-Notification-Token": worker_view["token"]})
        assert garbage.status_code == 400
    assert stack.metric("a2a_gateway_push_refused_total", reason="too_large") >= 1
    assert stack.metric("a2a_gateway_push_refused_total", reason="malformed") >= 1
    # the inline config, bound to its task, is deleted by the task's id (a2a-sdk names it so)
    assert worker_view["id"] == task_id
    rpc(stack.gateway.url, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": task_id})
    assert stack.ledger_call(lambda led: led.push_configs("worker", task_id)) == []


def test_a_create_with_the_same_config_id_replaces_the_stored_config(stack: Stack) -> None:
    task = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})["result"]["task"]
    for n in range(12):  # past push.max_configs_per_task (10): each replaces the one before
        answer = rpc(stack.gateway.url, "CreateTaskPushNotificationConfig",
                     {"taskId": task["id"], "id": "same", "url": f"{stack.receiver_url}/replaced-{n}"})
        assert answer["result"]["url"] == f"{stack.receiver_url}/replaced-{n}", answer
    # the replaced config is deleted once the client has the create's answer: wait for it
    wait_until(lambda: len(stack.ledger_call(lambda led: led.push_configs("worker", task["id"]))) == 1,
               timeout=10, message="one stored config")
    listed = rpc(stack.gateway.url, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})["result"]["configs"]
    assert [c["url"] for c in listed] == [f"{stack.receiver_url}/replaced-11"]


def states_of(posts: list[Any]) -> list[str]:
    out = []
    for post in posts:
        inner = post.json().get("statusUpdate") or post.json().get("task") or {}
        state = (inner.get("status") or {}).get("state")
        if state:
            out.append(state)
    return out


def test_a_cancel_through_the_gateway_still_reaches_the_webhook_once(stack: Stack) -> None:
    """The client cancels through the gateway: the cancel's answer records CANCELED before the
    worker's CANCELED notification arrives. That notification is still this webhook's first
    terminal one, so it is delivered (once); what the worker posts after it is not (docs/push.md §2)."""
    hook = f"{stack.receiver_url}/cancel"
    answer = rpc(stack.gateway.url, "SendMessage", {"message": message("slow"), "configuration": {
        "returnImmediately": True, "taskPushNotificationConfig": {"url": hook, "token": "t"}}})
    task = answer["result"]["task"]
    wait_until(lambda: "TASK_STATE_WORKING" in states_of(notifications_of(stack, "/cancel")), timeout=10)
    canceled = rpc(stack.gateway.url, "CancelTask", {"id": task["id"]})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    wait_until(lambda: "TASK_STATE_CANCELED" in states_of(notifications_of(stack, "/cancel")), timeout=10,
               message="the worker's CANCELED notification reaches the webhook")
    wait_until(lambda: stack.ledger_call(lambda led: led.outbox_depth()) == 0, timeout=10)
    # the config is marked after its notification is enqueued, so maybe after the delivery
    def marked() -> bool:
        (entry,) = stack.ledger_call(lambda led: led.push_configs("worker", task["id"]))
        return orjson.loads(entry.data)["ts"] is True  # the webhook has had the task's end
    wait_until(marked, timeout=10, message="the config marked terminal_sent")
    dropped = stack.metric("a2a_gateway_push_refused_total", reason="invariant")
    (worker_view,) = rpc(stack.worker.url, "ListTaskPushNotificationConfigs",
                         {"taskId": task["id"]})["result"]["configs"]
    again = orjson.dumps({"statusUpdate": {"taskId": task["id"], "contextId": task["contextId"],
                                           "status": {"state": "TASK_STATE_CANCELED"}}})
    with httpx.Client(trust_env=False, timeout=5) as client:
        ok = client.post(worker_view["url"], content=again,
                         headers={"X-A2A-Notification-Token": worker_view["token"]})
    assert ok.status_code == 200
    assert stack.metric("a2a_gateway_push_refused_total", reason="invariant") == dropped + 1  # dropped, counted
    assert stack.ledger_call(lambda led: led.outbox_depth()) == 0
    assert states_of(notifications_of(stack, "/cancel")).count("TASK_STATE_CANCELED") == 1


def test_the_clients_token_and_credentials_are_never_logged_nor_in_metrics(
        stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    """The client's webhook token and credentials (docs/push.md §1.1) through a send's inline
    config, a create, get and list, a refused create, a worker posting with a wrong token and
    the deliveries: no log line (as the JSON formatter writes it, extras included), no metric
    and no timeline entry carries them."""
    token, credentials = "tok-" + uuid.uuid4().hex, "cred-" + uuid.uuid4().hex
    auth = {"scheme": "Bearer", "credentials": credentials}
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    sent = rpc(stack.gateway.url, "SendMessage", {"message": message("hi"), "configuration": {
        "taskPushNotificationConfig": {"url": f"{stack.receiver_url}/secret", "token": token,
                                       "authentication": auth}}})
    task_id = sent["result"]["task"]["id"]
    wait_until(lambda: final_state(notifications_of(stack, "/secret")) == "TASK_STATE_COMPLETED", timeout=10)
    asked = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})["result"]["task"]["id"]
    created = rpc(stack.gateway.url, "CreateTaskPushNotificationConfig", {
        "taskId": asked, "id": "secret", "url": f"{stack.receiver_url}/secret-2", "token": token,
        "authentication": auth})
    assert created["result"]["token"] == token  # the client reads it back: it was kept
    got = rpc(stack.gateway.url, "GetTaskPushNotificationConfig", {"taskId": asked, "id": "secret"})
    assert got["result"]["token"] == token and got["result"]["authentication"] == auth
    listed = rpc(stack.gateway.url, "ListTaskPushNotificationConfigs", {"taskId": asked})["result"]["configs"]
    assert [c["token"] for c in listed] == [token]
    refused = rpc(stack.gateway.url, "CreateTaskPushNotificationConfig", {
        "taskId": asked, "url": "http://169.254.169.254/latest", "token": token, "authentication": auth})
    assert refused["error"]["code"] == -32602
    (worker_view,) = rpc(stack.worker.url, "ListTaskPushNotificationConfigs", {"taskId": asked})["result"]["configs"]
    with httpx.Client(trust_env=False, timeout=5) as client:
        wrong = client.post(worker_view["url"], content=b"{}", headers={"X-A2A-Notification-Token": token})
    assert wrong.status_code == 401
    wait_until(lambda: stack.ledger_call(lambda led: led.outbox_depth()) == 0, timeout=10)
    lines = [JsonFormatter().format(r) for r in caplog.records]
    assert any("push_webhook_refused" in line for line in lines)  # the capture sees the gateway's lines
    assert any("push_notification_refused" in line for line in lines)
    for secret in (token, credentials):
        assert [line for line in lines if secret in line] == []
        assert secret not in httpx.get(stack.admin.url_for("/metrics"), trust_env=False).text
        for tid in (task_id, asked):
            assert secret not in orjson.dumps(timeline(stack, tid)).decode()


def test_a_workers_odd_state_spellings_reach_the_webhook_normalized(stack: Stack) -> None:
    """A worker posting states in other spellings (v0.3 kebab-case, upper case, double-l):
    the v1.0 client's webhook gets each in v1.0's spelling, and the ledger records it."""
    task = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})["result"]["task"]
    rpc(stack.gateway.url, "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "id": "odd", "url": f"{stack.receiver_url}/odd", "token": "t"})
    (worker_view,) = rpc(stack.worker.url, "ListTaskPushNotificationConfigs",
                         {"taskId": task["id"]})["result"]["configs"]
    with httpx.Client(trust_env=False, timeout=5) as client:
        for odd in ("working", "WORKING", "cancelled"):
            update = {"statusUpdate": {"taskId": task["id"], "contextId": task["contextId"],
                                       "status": {"state": odd}}}
            posted = client.post(worker_view["url"], content=orjson.dumps(update),
                                 headers={"X-A2A-Notification-Token": worker_view["token"]})
            assert posted.status_code == 200, posted.text
    wanted = ["TASK_STATE_WORKING", "TASK_STATE_WORKING", "TASK_STATE_CANCELED"]
    wait_until(lambda: states_of(notifications_of(stack, "/odd")) == wanted, timeout=10,
               message="three normalized notifications")
    stored = stack.ledger_call(lambda led: led.get("worker", task["id"]))
    assert stored.record.state.value == "TASK_STATE_CANCELED"


def test_a_v03_client_reads_its_own_webhook_back_with_get_and_list(stack: Stack) -> None:
    task_id = rpc(stack.gateway.url, "SendMessage", {"message": message("ask for a date")})["result"]["task"]["id"]
    hook = {"id": "v03-cfg", "url": f"{stack.receiver_url}/v03-read", "token": "v03-token",
            "authentication": {"schemes": ["Bearer"], "credentials": "v03-cred"}}

    def v03(method: str, params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": method, "method": method, "params": params}
        with httpx.Client(trust_env=False, timeout=15) as client:
            doc = client.post(stack.gateway.url + "/", content=orjson.dumps(body),
                              headers={"content-type": "application/json"}).json()
        assert "result" in doc, doc
        return doc["result"]

    v03("tasks/pushNotificationConfig/set", {"taskId": task_id, "pushNotificationConfig": hook})
    got = v03("tasks/pushNotificationConfig/get", {"id": task_id, "pushNotificationConfigId": "v03-cfg"})
    listed = v03("tasks/pushNotificationConfig/list", {"id": task_id})
    for config in (got, *listed):
        assert config["taskId"] == task_id
        assert {k: config["pushNotificationConfig"][k] for k in hook} == hook, config
    (held,) = rpc(stack.worker.url, "ListTaskPushNotificationConfigs", {"taskId": task_id})["result"]["configs"]
    assert held["url"].startswith(stack.gateway.url + CALLBACK) and held["token"] != "v03-token"


def test_a_webhook_host_rebound_to_a_refused_address_is_not_posted_to(stack: Stack, tmp_path: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding (docs/push.md §4): the webhook's host resolves to an allowed address when
    the config is created and to a private one afterwards. Each delivery resolves and checks
    again, so nothing reaches the webhook: failed attempts (``refused_address``), then a dead
    letter. The gateway runs on asyncio's loop here, whose resolver is ``socket.getaddrinfo``."""
    hits = Receiver()
    real = socket.getaddrinfo
    resolved: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.test":
            return real(host, port, *args, **kwargs)
        address = "127.0.0.1" if not resolved else "10.0.0.1"
        resolved.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 80)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    push = PushConfig(allowed_cidrs=["127.0.0.1/32"], backoff_seconds=0.05, max_attempts=2, poll_seconds=0.05)
    with serve_in_thread(hits, name="rebound-hook") as hook, \
            serve_gateway(gateway_app(stack.worker.url, tmp_path, push), name="rebind",
                          config={"loop": "asyncio"}) as (gateway, admin):
        rebound = Stack(stack.worker, gateway, admin, hits, hook.url)
        answer = rpc(gateway.url, "SendMessage", {"message": message("hi"), "configuration": {
            "taskPushNotificationConfig": {"url": f"http://rebind.test:{hook.port}/rebind"}}})
        assert answer["result"]["task"]["id"]
        wait_until(lambda: rebound.metric("a2a_gateway_push_dead_lettered_total") >= 1, timeout=10)
        assert rebound.metric("a2a_gateway_push_delivery_failures_total", reason="refused_address") >= 2
    assert resolved[0] == "127.0.0.1" and "10.0.0.1" in resolved[1:]  # created, then rebound
    assert hits.attempts == 0  # never connected to, under either address
