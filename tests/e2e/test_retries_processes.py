"""Safe retries across gateway processes (docs/retries.md §3): two replicas sharing Redis, and
a ``kill -9`` of the gateway between forwarding a send and answering it.

Each test runs ``a2a-gateway serve`` processes (tests/support/gateway.py) in front of the
scripted worker, whose answer to the send is held by a gate until the test releases it, so
"the worker accepted the message and has not answered yet" is a state the test controls.
Marked ``slow``: gateway processes start and stop.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.gateway import gateway_process
from tests.support.redis_server import redis_server
from tests.support.scripted_worker import Event, Gate, ScriptedWorker
from tests.support.servers import serve_in_thread, wait_until

V1 = {"A2A-Version": "1.0", "content-type": "application/json"}
WORKING, COMPLETED = "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"

pytestmark = pytest.mark.slow


@pytest.fixture
def worker() -> Iterator[tuple[ScriptedWorker, str]]:
    w = ScriptedWorker()
    with serve_in_thread(w) as srv:
        yield w, srv.url


def task(tid: str, state: str) -> dict[str, Any]:
    return {"id": tid, "contextId": "c-1", "status": {"state": state}}


def send(method: str = "SendMessage", message_id: str | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": {"message": {
        "messageId": message_id or uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "book it"}]}}}


def metric(admin: str, line: str) -> float:
    """The value of the sample whose exposition line starts with ``line`` (0 when absent)."""
    for text in httpx.get(admin + "/metrics", trust_env=False).text.splitlines():
        if text.startswith(line):
            return float(text.rsplit(" ", 1)[1])
    return 0.0


def test_a_retry_at_the_other_replica_waits_for_the_first_call_and_gets_its_task(worker: Any) -> None:
    """Replica A forwards the send; the worker holds its answer. The retry reaches replica B
    (same Redis): B waits on the shared key — the worker sees no second send — and once A has
    the answer, B answers with that task (as recorded, a GetTask)."""
    w, wurl = worker
    gate = Gate(timeout=20)
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": task("t-r", COMPLETED)}})
    w.on("SendMessage", sse=[gate, answer], headers={"content-type": "application/json"})
    w.on("GetTask", json_result=task("t-r", COMPLETED), times=None)
    body = send()
    with redis_server() as rurl, gateway_process(wurl, rurl) as (a, _, _), \
            gateway_process(wurl, rurl) as (b, _, b_admin):
        first: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: first.update(
            httpx.post(a + "/", json=body, headers=V1, trust_env=False, timeout=30).json()))
        thread.start()
        wait_until(lambda: gate.reached.is_set())
        result: dict[str, Any] = {}
        retry = threading.Thread(target=lambda: result.update(
            httpx.post(b + "/", json={**body, "id": "retry"}, headers=V1, trust_env=False, timeout=30).json()))
        retry.start()
        # B is polling the key A holds (its retry_get calls), before the worker answers A
        wait_until(lambda: metric(b_admin, 'a2a_gateway_ledger_operation_duration_seconds_count'
                                           '{backend="redis",operation="retry_get"}') >= 1)
        gate.release()
        thread.join(30)
        retry.join(30)
        assert first["result"]["task"]["id"] == "t-r"
        assert result["id"] == "retry" and result["result"]["task"]["id"] == "t-r", result
        assert len(w.calls("SendMessage")) == 1
        assert metric(b_admin, 'a2a_gateway_retries_total{outcome="waited",upstream="worker"}') == 1


def test_a_stream_retried_after_a_kill_9_gets_the_task_it_started(worker: Any, tmp_path: Path) -> None:
    """The gateway forwards a streaming send, relays the task's first event, and is killed
    (``kill -9``) before the rest. Restarted on the same SQLite ledger, it finds the key left
    in flight with its task known: the retry gets that task (a GetTask), no second send."""
    w, wurl = worker
    gate = Gate(timeout=20)
    w.on("SendStreamingMessage", sse=[Event(result={"task": task("t-k", WORKING)}), gate,
                                      Event(result={"statusUpdate": {"taskId": "t-k", "contextId": "c-1",
                                                                     "status": {"state": COMPLETED}}})])
    w.on("GetTask", json_result=task("t-k", COMPLETED), times=None)
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    body = send("SendStreamingMessage")
    with httpx.Client(trust_env=False, timeout=10) as client:
        with gateway_process(wurl, ledger) as (url, proc, _):
            with client.stream("POST", url + "/", content=orjson.dumps(body), headers=V1) as first:
                for line in first.iter_lines():
                    if line.startswith("data:"):
                        assert "t-k" in line
                        break
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        gate.release()
        with gateway_process(wurl, ledger) as (url, _, admin):
            retried = client.post(url + "/", content=orjson.dumps({**body, "id": "again"}), headers=V1)
            events = [orjson.loads(line[5:]) for line in retried.text.splitlines() if line.startswith("data:")]
            assert events and events[0]["id"] == "again", retried.text
            assert events[0]["result"]["task"]["id"] == "t-k"
            assert events[-1]["result"]["task"]["status"]["state"] == COMPLETED
            assert len(w.calls("SendStreamingMessage")) == 1
            assert metric(admin, 'a2a_gateway_retries_total{outcome="unknown",upstream="worker"}') == 1


def test_a_send_retried_after_a_kill_9_before_any_answer_is_not_sent_again(worker: Any, tmp_path: Path) -> None:
    """Killed while the worker still held its answer (no task known to the gateway): the
    retry after the restart gets a clear error (-32603, the outcome is unknown), and the
    worker still has exactly one send — never a second task."""
    w, wurl = worker
    gate = Gate(timeout=20)
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": task("t-u", COMPLETED)}})
    w.on("SendMessage", sse=[gate, answer], headers={"content-type": "application/json"})
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    body = send()
    with gateway_process(wurl, ledger) as (url, proc, _):
        thread = threading.Thread(target=lambda: _swallow(lambda: httpx.post(
            url + "/", json=body, headers=V1, trust_env=False, timeout=30)))
        thread.start()
        wait_until(lambda: gate.reached.is_set())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        thread.join(30)
    gate.release()
    with gateway_process(wurl, ledger) as (url, _, _):
        doc = httpx.post(url + "/", json={**body, "id": "again"}, headers=V1, trust_env=False, timeout=10).json()
        assert doc["id"] == "again" and doc["error"]["code"] == -32603, doc
        assert "unknown" in doc["error"]["message"]
        assert len(w.calls("SendMessage")) == 1


def _swallow(call: Any) -> None:
    try:
        call()
    except httpx.HTTPError:
        pass  # the gateway died under the request

