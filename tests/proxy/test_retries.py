"""Safe retries through the real gateway in front of the scripted worker (docs/retries.md):
keys per caller, the switch per upstream, retries on, off and observed."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.proxy.conftest import Harness

V1 = {"A2A-Version": "1.0"}


def send(message_id: str, text: str = "book it") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "SendMessage", "params": {
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}}


def completed(tid: str) -> dict[str, Any]:
    return {"task": {"id": tid, "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"}}}


def test_one_key_of_two_callers_is_two_keys(h: Harness) -> None:
    """Alice's and Bob's sends with the same Idempotency-Key and message are two sends (keys
    are per caller, docs/retries.md §1); Alice's retry is answered from her key."""
    h.worker.on("SendMessage", json_result=completed("t-a"))
    h.worker.on("SendMessage", json_result=completed("t-b"))
    h.worker.on("GetTask", json_result=completed("t-a")["task"])
    body = send(uuid.uuid4().hex)
    alice = {**V1, "Authorization": "Bearer alice", "Idempotency-Key": "k-1"}
    bob = {**V1, "Authorization": "Bearer bob", "Idempotency-Key": "k-1"}
    assert h.http.post(h.gateway.url + "/", json=body, headers=alice).json()["result"]["task"]["id"] == "t-a"
    assert h.http.post(h.gateway.url + "/", json=body, headers=bob).json()["result"]["task"]["id"] == "t-b"
    again = h.http.post(h.gateway.url + "/", json={**body, "id": 3}, headers=alice).json()
    assert again["id"] == 3 and again["result"]["task"]["id"] == "t-a"
    assert len(h.worker.calls("SendMessage")) == 2
    assert h.metric("a2a_gateway_retries_total", outcome="replayed") == 1


def test_with_message_id_keys_off_a_message_id_alone_is_no_key(make_harness: Any) -> None:
    h = make_harness(upstream={"retries": {"message_id_keys": False}})
    h.worker.on("SendMessage", json_result=completed("t-1"))
    h.worker.on("SendMessage", json_result=completed("t-2"))
    body = send(uuid.uuid4().hex)
    for tid in ("t-1", "t-2"):  # two sends, two tasks: what a worker does with a retry, unprotected
        assert h.http.post(h.gateway.url + "/", json=body, headers=V1).json()["result"]["task"]["id"] == tid
    assert len(h.worker.calls("SendMessage")) == 2
    assert h.metric("a2a_gateway_retries_total") == 0


def test_retries_off_forward_every_send(make_harness: Any) -> None:
    h = make_harness(retries={"enabled": False})
    h.worker.on("SendMessage", json_result=completed("t-1"), times=2)
    body = send(uuid.uuid4().hex)
    for _ in range(2):
        h.http.post(h.gateway.url + "/", json=body, headers={**V1, "Idempotency-Key": "k"})
    assert len(h.worker.calls("SendMessage")) == 2


def test_observe_mode_counts_a_retry_and_forwards_it(make_harness: Any) -> None:
    h = make_harness(mode="observe")
    h.worker.on("SendMessage", json_result=completed("t-1"), times=2)
    body = send(uuid.uuid4().hex)
    for _ in range(2):
        h.http.post(h.gateway.url + "/", json=body, headers=V1)
    h.http.post(h.gateway.url + "/", json=send(body["params"]["message"]["messageId"], "other"), headers=V1)
    assert len(h.worker.calls("SendMessage")) == 3
    assert h.metric("a2a_gateway_retries_total", outcome="replayed") == 1
    assert h.metric("a2a_gateway_retries_total", outcome="conflict") == 1


def test_an_overlong_idempotency_key_is_refused_in_the_clients_form(h: Harness) -> None:
    body = send(uuid.uuid4().hex)
    doc = h.http.post(h.gateway.url + "/", json=body, headers={**V1, "Idempotency-Key": "k" * 256}).json()
    assert doc["id"] == body["id"] and doc["error"]["code"] == -32600
    assert h.worker.calls("SendMessage") == []


def test_a_worker_error_releases_the_key(h: Harness) -> None:
    """A first send the worker refused with an error made no task: its retry goes to the
    worker again (docs/retries.md §2)."""
    h.worker.on("SendMessage", json_error={"code": -32603, "message": "busy"})
    h.worker.on("SendMessage", json_result=completed("t-2"))
    body = send(uuid.uuid4().hex)
    assert "error" in h.http.post(h.gateway.url + "/", json=body, headers=V1).json()
    again = h.http.post(h.gateway.url + "/", json=body, headers=V1).json()
    assert again["result"]["task"]["id"] == "t-2"
    assert len(h.worker.calls("SendMessage")) == 2


def test_a_send_that_never_reached_the_worker_releases_the_key() -> None:
    """The worker's card is held, then the worker goes away: the send cannot connect, so it
    never reached the worker and its key is released — the retry is sent again (here it
    cannot connect either), never answered "unknown" (docs/retries.md §2)."""
    from prometheus_client import CollectorRegistry

    from gateway.app import build_app
    from tests.proxy.conftest import _config
    from tests.support.gateway import serve_gateway
    from tests.support.scripted_worker import ScriptedWorker
    from tests.support.servers import serve_in_thread, wait_until

    registry = CollectorRegistry()
    running = serve_in_thread(ScriptedWorker(), name="worker")
    worker = running.__enter__()
    try:
        app = build_app(_config(worker.url + "/"), registry=registry)
        with serve_gateway(app) as (gateway, admin), httpx.Client(trust_env=False, timeout=10) as http:
            h = Harness(None, gateway, admin, registry, http)  # type: ignore[arg-type]
            wait_until(lambda: h.metric("a2a_gateway_card_fetches_total") >= 1, message="the card fetch")
            running.__exit__(None, None, None)  # nothing listens at the worker's port from here on
            body = send(uuid.uuid4().hex)
            for _ in range(2):
                answer = http.post(gateway.url + "/", json=body, headers=V1)
                assert answer.status_code == 502, answer.text
                assert "worker unreachable" in answer.json()["error"]["message"]
            assert h.metric("a2a_gateway_upstream_errors_total", reason="connect") == 2
            assert h.metric("a2a_gateway_retries_total") == 0
    finally:
        running.__exit__(None, None, None)


def test_a_message_id_past_the_key_bound_is_no_key_and_the_send_goes_on(h: Harness) -> None:
    """A2A bounds no ``messageId``: one longer than a key may be is forwarded unkeyed, not
    refused (docs/retries.md §1); only an ``Idempotency-Key`` that long is refused."""
    h.worker.on("SendMessage", json_result=completed("t-long"))
    doc = h.http.post(h.gateway.url + "/", json=send("m" * 300), headers=V1).json()
    assert doc["result"]["task"]["id"] == "t-long"
    assert len(h.worker.calls("SendMessage")) == 1


def test_a_retry_needs_no_live_task_slot(make_harness: Any) -> None:
    """A caller at its live-task limit retries the send that made its live task: the retry
    makes no task, so it is answered with the first call's task, not refused 429
    (docs/limits.md §1, docs/retries.md §2)."""
    h = make_harness(limits={"per_caller": {"live_tasks": 1}})
    working = {"task": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}
    h.worker.on("SendMessage", json_result=working)
    h.worker.on("GetTask", json_result=working["task"])
    body = send(uuid.uuid4().hex)
    assert h.http.post(h.gateway.url + "/", json=body, headers=V1).json()["result"]["task"]["id"] == "t-1"
    other = h.http.post(h.gateway.url + "/", json=send(uuid.uuid4().hex), headers=V1)
    assert other.status_code == 429  # a new task is past the limit
    again = h.http.post(h.gateway.url + "/", json=body, headers=V1)
    assert again.status_code == 200 and again.json()["result"]["task"]["id"] == "t-1"
    assert len(h.worker.calls("SendMessage")) == 1
    assert h.metric("a2a_gateway_retries_total", outcome="replayed") == 1
