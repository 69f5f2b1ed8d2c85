"""The durable outbox across ``kill -9`` (docs/push.md §3): a notification the gateway
accepted while the client's webhook was failing is delivered by the next gateway process on
the same SQLite ledger. Also: a v0.3 client's webhook receives v0.3 bodies."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.push.test_relay_e2e import final_state, message, rpc
from tests.support.push_peers import Receiver, build_push_worker_app
from tests.support.servers import free_port, serve_in_thread, subprocess_server, wait_until


def gateway_config(path: Path, worker_url: str, ledger: str) -> tuple[str, str]:
    port, admin = free_port(), free_port()
    path.write_text(yaml.safe_dump({
        "listen": {"host": "127.0.0.1", "port": port},
        "admin": {"host": "127.0.0.1", "port": admin},
        "upstreams": [{"name": "worker", "url": worker_url}],
        "ledger": {"url": ledger},
        "push": {"allowed_cidrs": ["127.0.0.1/32"], "backoff_seconds": 0.05, "backoff_max_seconds": 0.2,
                 "max_attempts": 10_000, "lease_seconds": 0.5, "poll_seconds": 0.05},
    }))
    return f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"


@pytest.mark.slow
def test_a_notification_accepted_before_kill_9_is_delivered_after_the_restart(tmp_path: Path) -> None:
    receiver = Receiver()
    receiver.status = 503  # the webhook fails until the gateway is killed: the entry stays
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    with serve_in_thread(receiver, name="webhook") as hook, \
            serve_in_thread(build_push_worker_app("http://worker.invalid:1/"), name="push-worker") as worker:
        first = tmp_path / "first.yaml"
        url, admin = gateway_config(first, worker.url, ledger)
        cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(first)]
        with subprocess_server(cmd, admin + "/readyz") as proc:
            answer = rpc(url, "SendMessage", {"message": message("hi"), "configuration": {
                "taskPushNotificationConfig": {"url": f"{hook.url}/kill", "token": "tk"}}})
            assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            wait_until(lambda: receiver.attempts >= 3, timeout=10)  # tried, failed, retried
            proc.kill()  # SIGKILL: no shutdown of any kind
            proc.wait(5)
        assert receiver.posts == []
        receiver.status = 200
        second = tmp_path / "second.yaml"
        _, admin2 = gateway_config(second, worker.url, ledger)
        with subprocess_server([sys.executable, "-m", "gateway", "serve", "--config", str(second)],
                               admin2 + "/readyz"):
            wait_until(lambda: final_state(receiver.posts) == "TASK_STATE_COMPLETED", timeout=15)
    assert all(p.headers["x-a2a-notification-token"] == "tk" for p in receiver.posts)
    task_ids = {next(iter(p.json().values())).get("taskId") or next(iter(p.json().values())).get("id")
                for p in receiver.posts}
    assert task_ids == {answer["result"]["task"]["id"]}


def test_a_v03_clients_webhook_receives_v03_bodies(tmp_path: Path) -> None:
    from tests.push.test_relay_e2e import PushConfig, gateway_app
    from tests.support.gateway import serve_gateway

    receiver = Receiver()
    push = PushConfig(allowed_cidrs=["127.0.0.1/32"], poll_seconds=0.05)
    with serve_in_thread(receiver, name="webhook") as hook, \
            serve_in_thread(build_push_worker_app("http://worker.invalid:1/"), name="push-worker") as worker, \
            serve_gateway(gateway_app(worker.url, tmp_path, push), name="v03") as (gateway, _):
        import httpx

        body = {"jsonrpc": "2.0", "id": "v03", "method": "message/send", "params": {
            "message": {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user",
                        "parts": [{"kind": "text", "text": "hi"}]},
            "configuration": {"pushNotificationConfig": {"url": f"{hook.url}/v03", "token": "old"}}}}
        with httpx.Client(trust_env=False, timeout=15) as client:
            answer = client.post(gateway.url + "/", content=orjson.dumps(body),
                                 headers={"content-type": "application/json"}).json()
        assert answer["result"]["status"]["state"] == "completed", answer

        def states() -> list[Any]:
            return [p.json().get("status", {}).get("state") for p in receiver.posts]

        wait_until(lambda: "completed" in states(), timeout=10)
    for post in receiver.posts:
        doc = post.json()
        assert doc["kind"] in ("task", "status-update", "artifact-update")
        assert post.headers["content-type"] == "application/json"
        assert post.headers["x-a2a-notification-token"] == "old"


@pytest.mark.slow
def test_on_a_shared_redis_ledger_another_replica_delivers(tmp_path: Path) -> None:
    from tests.support.redis_server import redis_server

    receiver = Receiver()
    receiver.status = 503
    with redis_server() as redis_url, serve_in_thread(receiver, name="webhook") as hook, \
            serve_in_thread(build_push_worker_app("http://worker.invalid:1/"), name="push-worker") as worker:
        url_a, admin_a = gateway_config(tmp_path / "a.yaml", worker.url, redis_url)
        url_b, admin_b = gateway_config(tmp_path / "b.yaml", worker.url, redis_url)
        serve = [sys.executable, "-m", "gateway", "serve", "--config"]
        with subprocess_server([*serve, str(tmp_path / "b.yaml")], admin_b + "/readyz"):
            with subprocess_server([*serve, str(tmp_path / "a.yaml")], admin_a + "/readyz") as a:
                answer = rpc(url_a, "SendMessage", {"message": message("hi"), "configuration": {
                    "taskPushNotificationConfig": {"url": f"{hook.url}/shared", "token": "tk"}}})
                wait_until(lambda: receiver.attempts >= 3, timeout=10)
                a.kill()
                a.wait(5)
            receiver.status = 200
            wait_until(lambda: final_state(receiver.posts) == "TASK_STATE_COMPLETED", timeout=15)
    assert {p.path for p in receiver.posts} == {"/shared"}
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
