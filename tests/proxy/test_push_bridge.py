"""Push configs through the version bridge (docs/push.md §1.1, docs/bridge.md §1.7): a v0.3
client's config reaches a v1.0-only worker in v1.0's shape naming the gateway's callback, and
the worker's answer reaches the client in v0.3's shape naming the client's webhook."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.scripted_worker import JsonResult, default_card
from tests.support.servers import wait_until

V03_URL = "https://hooks.example.net/a2a"  # allowed by name: never resolved
V10_CARD = {**default_card(), "supportedInterfaces": [  # the worker speaks v1.0 only: v0.3 is bridged
    {"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}


def test_a_v03_clients_push_config_crosses_the_bridge_naming_the_gateway(make_harness: Any) -> None:
    h = make_harness(card=V10_CARD, push={"allowed_hosts": ["hooks.example.net"]})
    h.worker.on("CreateTaskPushNotificationConfig",
                handler=lambda req: JsonResult({**req.json["params"], "id": "cfg-9"}))
    answer = h.rpc({"jsonrpc": "2.0", "id": "s-1", "method": "tasks/pushNotificationConfig/set", "params": {
        "taskId": "t-1", "pushNotificationConfig": {"url": V03_URL, "token": "client-token",
                                                    "authentication": {"schemes": ["Bearer"], "credentials": "x"}}}})
    (call,) = h.worker.calls("CreateTaskPushNotificationConfig")
    sent = call.json["params"]
    assert sent["taskId"] == "t-1"
    assert sent["url"].startswith(h.gateway.url + "/_a2a_gateway/push/")
    assert sent["token"] != "client-token" and "authentication" not in sent
    doc = answer.json()
    assert doc["id"] == "s-1", doc
    config = doc["result"]["pushNotificationConfig"]
    assert config["url"] == V03_URL and config["token"] == "client-token"
    assert config["authentication"] == {"schemes": ["Bearer"], "credentials": "x"}
    assert doc["result"]["taskId"] == "t-1"


def test_push_disabled_passes_configs_untouched(make_harness: Any) -> None:
    h = make_harness(push={"enabled": False})
    h.worker.on("CreateTaskPushNotificationConfig", handler=lambda req: JsonResult(req.json["params"]))
    params = {"taskId": "t-1", "url": "http://127.0.0.1:1/hook", "token": "client-token"}
    answer = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig", "params": params},
                   headers={"A2A-Version": "1.0"})
    assert h.worker.calls("CreateTaskPushNotificationConfig")[0].json["params"] == params
    assert answer.json()["result"] == params


def test_a_create_the_worker_refuses_leaves_no_stored_config(make_harness: Any) -> None:
    h = make_harness(push={"allowed_hosts": ["hooks.example.net"]})
    h.worker.on("CreateTaskPushNotificationConfig", handler=lambda req: JsonResult(req.json["params"]))
    h.worker.on("CreateTaskPushNotificationConfig", json_error={"code": -32001, "message": "task not found"})
    for task_id in ("t-ok", "t-gone"):
        h.rpc({"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig",
               "params": {"taskId": task_id, "url": V03_URL}}, headers={"A2A-Version": "1.0"})
    rt = h.gateway.app.state.runtime

    def stored(task_id: str) -> list[Any]:
        return asyncio.run_coroutine_threadsafe(rt.ledger.push_configs("worker", task_id), h.gateway.loop).result(5)

    assert len(stored("t-ok")) == 1
    # a refused create's config is forgotten once the client has the answer: wait for it
    wait_until(lambda: stored("t-gone") == [], timeout=10, message="the refused create's config forgotten")


def test_a_create_naming_no_webhook_still_never_shows_a_worker_token(make_harness: Any) -> None:
    """A create without a ``url`` is forwarded as written (nothing to relay); a worker that
    answers it with a config it already holds — naming a gateway callback of another task and
    the worker token for it — reaches the client without that token (docs/push.md §1.2)."""
    h = make_harness()
    foreign = {"taskId": "t-other", "id": "cfg-1", "url": h.gateway.url + "/_a2a_gateway/push/abc",
               "token": "worker-token-of-t-other"}
    h.worker.on("CreateTaskPushNotificationConfig", json_result=foreign)
    answer = h.rpc({"jsonrpc": "2.0", "id": 7, "method": "CreateTaskPushNotificationConfig",
                    "params": {"taskId": "t-1", "id": "cfg-1"}}, headers={"A2A-Version": "1.0"})
    doc = answer.json()
    assert doc["id"] == 7 and h.worker.calls("CreateTaskPushNotificationConfig")
    assert doc["result"]["url"] == foreign["url"] and "token" not in doc["result"], doc
