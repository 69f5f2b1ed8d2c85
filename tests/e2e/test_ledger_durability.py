"""The durable ledgers through real gateway processes: shared Redis across two replicas,
``kill -9`` in the middle of a stream, and a ledger that goes away (fail closed)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.redis_server import redis_server
from tests.support.scripted_worker import Event, Gate, ScriptedWorker
from tests.support.gateway import gateway_process
from tests.support.servers import serve_in_thread

V1 = {"A2A-Version": "1.0", "content-type": "application/json"}


def send(url: str, req_id: Any, *, task_id: str | None = None, method: str = "SendMessage") -> httpx.Response:
    message: dict[str, Any] = {"messageId": f"m-{req_id}", "role": "ROLE_USER", "parts": [{"text": "go"}]}
    if task_id:
        message["taskId"] = task_id
    body = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": {"message": message}}
    with httpx.Client(trust_env=False, timeout=10) as client:
        return client.post(url + "/", content=orjson.dumps(body), headers=V1)


def stream_to_completion(url: str, worker: ScriptedWorker, tid: str) -> None:
    """Run one SendStreamingMessage whose task reaches COMPLETED through the gateway at ``url``."""
    worker.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": tid, "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}),
        Event(result={"statusUpdate": {"taskId": tid, "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}}),
    ])
    r = send(url, "s", method="SendStreamingMessage")
    assert b"TASK_STATE_COMPLETED" in r.content


@pytest.fixture
def worker() -> Iterator[tuple[ScriptedWorker, str]]:
    w = ScriptedWorker()
    with serve_in_thread(w) as srv:
        yield w, srv.url


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def test_terminal_state_recorded_by_replica_a_is_absorbing_on_replica_b(worker: Any, redis_url: str) -> None:
    w, wurl = worker
    with gateway_process(wurl, redis_url) as (a, _, _), gateway_process(wurl, redis_url) as (b, _, _):
        stream_to_completion(a, w, "t-shared")
        r = send(b, 2, task_id="t-shared")
        assert r.json()["error"]["code"] == -32004
        assert w.calls("SendMessage") == []


def _kill9_mid_stream(worker: Any, ledger: str) -> None:
    """Record t-done as COMPLETED, open a stream for t-live, SIGKILL the gateway mid-stream,
    start a new one on the same ledger: t-done is still terminal, t-live gets a forced GetTask."""
    w, wurl = worker
    gate = Gate()
    with gateway_process(wurl, ledger) as (url, proc, _):
        stream_to_completion(url, w, "t-done")
        w.on("SendStreamingMessage", sse=[
            Event(result={"task": {"id": "t-live", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}),
            gate,
        ])
        with httpx.Client(trust_env=False, timeout=10) as client:
            body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}})
            with client.stream("POST", url + "/", content=body, headers=V1) as r:
                first = next(r.iter_raw())
                assert b"t-live" in first
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        gate.release()
    with gateway_process(wurl, ledger) as (url, _, admin):
        assert send(url, 2, task_id="t-done").json()["error"]["code"] == -32004
        assert w.calls("SendMessage") == []
        w.on("GetTask", json_result={"id": "t-live", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}})
        w.on("SendMessage", json_result={"task": {"id": "t-live", "contextId": "c",
                                                  "status": {"state": "TASK_STATE_COMPLETED"}}})
        r = send(url, 3, task_id="t-live")
        assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert len(w.calls("GetTask")) == 1  # the forced GetTask, before the action
        metrics = httpx.get(admin + "/metrics", trust_env=False).text
        assert 'a2a_gateway_forced_get_total{reason="restart",upstream="worker"} 1.0' in metrics
        send(url, 4, task_id="t-live")
        assert len(w.calls("GetTask")) == 1  # no wasted poll once resynced


def test_kill9_mid_stream_loses_no_terminal_state_sqlite(worker: Any, tmp_path: Path) -> None:
    _kill9_mid_stream(worker, f"sqlite:///{tmp_path}/ledger.db")


def test_kill9_mid_stream_loses_no_terminal_state_redis(worker: Any) -> None:
    with redis_server() as url:
        _kill9_mid_stream(worker, url)


def test_ledger_down_fails_closed_with_transport_error(worker: Any) -> None:
    w, wurl = worker
    with ExitStack() as stack:
        redis_ctx = redis_server()
        rurl = redis_ctx.__enter__()
        url, _, admin = stack.enter_context(gateway_process(wurl, rurl))
        redis_ctx.__exit__(None, None, None)  # Redis goes away while the gateway runs
        r = send(url, 9, task_id="t-1")
        assert r.status_code == 503
        assert r.json()["id"] == 9 and r.json()["error"]["code"] == -32603
        assert "ledger" in r.json()["error"]["message"]
        assert w.calls("SendMessage") == []
        metrics = httpx.get(admin + "/metrics", trust_env=False).text
        # the send's retry key is its first ledger call (docs/retries.md §3)
        assert 'a2a_gateway_ledger_errors_total{backend="redis",operation="retry_claim"} 1.0' in metrics


def test_an_outage_logs_each_kind_of_error_once_per_window_not_per_request(worker: Any) -> None:
    """Every request refused while Redis is down used to log two error lines (the ledger
    call's and the exchange's): thousands in seconds. Identical lines within
    ``log.repeat_window_seconds`` (10) are held back, so 40 refused requests log each kind
    a few times (80 lines before), and the metrics still count every failure."""
    w, wurl = worker
    with ExitStack() as stack:
        redis_ctx = redis_server()
        rurl = redis_ctx.__enter__()
        url, proc, admin = stack.enter_context(gateway_process(wurl, rurl))
        redis_ctx.__exit__(None, None, None)
        for n in range(40):
            assert send(url, n, task_id="t-1").status_code == 503
        lines = [orjson.loads(line) for line in proc.stderr_text().splitlines() if line.startswith("{")]
        errors = [line for line in lines if line["level"] == "error"]
        # the first failure may read differently ("connection refused" once the pool notices)
        assert 1 <= len(errors) <= 5, errors  # + the background tracked-task count's own
        metrics = httpx.get(admin + "/metrics", trust_env=False).text
        assert 'a2a_gateway_ledger_errors_total{backend="redis",operation="retry_claim"} 40.0' in metrics


def _serve_on_state_dir(wurl: str, state: Path, *extra: str) -> Any:
    """``serve`` with the default ledger (``ledger.db`` in the state directory ``state``) and
    no caller secret configured; yields ``(url, process)`` once ready."""
    from tests.support.servers import free_port, subprocess_server

    port, admin_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "A2A_GATEWAY_CALLER_SECRET"}
    env["A2A_GATEWAY_STATE_DIR"] = str(state)
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port), *extra]
    return subprocess_server(cmd, f"http://127.0.0.1:{admin_port}/readyz", env=env, inherit_env=False), \
        f"http://127.0.0.1:{port}"


def test_callers_are_recognised_after_a_restart_without_a_configured_secret(worker: Any, tmp_path: Path) -> None:
    """Issue #35: without a configured caller secret each process made its own, so after a
    ``kill -9`` every client was a stranger: all follow-ups to completed tasks reached the
    worker instead of being answered -32004 by the gateway. Now the secret is made once in
    the state directory and read at every start: after a ``kill -9`` and a restart on the
    same state directory — and again as ``--workers 2``, whose processes read the same file
    — the caller who completed the task has its follow-ups answered by the gateway, the
    worker sees none, and no start warns ``caller_secret_generated``."""
    w, wurl = worker
    alice = {**V1, "Authorization": "Bearer alice"}
    w.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-done", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}),
        Event(result={"statusUpdate": {"taskId": "t-done", "contextId": "c",
                                       "status": {"state": "TASK_STATE_COMPLETED"}}}),
    ])
    w.on("SendMessage", json_result={"task": {"id": "t-done", "contextId": "c",
                                              "status": {"state": "TASK_STATE_WORKING"}}}, times=None)
    state = tmp_path / "state"

    def follow_up(url: str, n: int) -> None:
        for i in range(n):
            body = {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": {
                "messageId": f"f-{i}", "role": "ROLE_USER", "parts": [{"text": "more"}], "taskId": "t-done"}}}
            with httpx.Client(trust_env=False, timeout=10) as client:  # a new connection each
                r = client.post(url + "/", content=orjson.dumps(body), headers=alice)
            assert r.status_code == 200 and r.json()["error"]["code"] == -32004, r.text

    context, url = _serve_on_state_dir(wurl, state)
    with context as proc:
        with httpx.Client(trust_env=False, timeout=10) as client:
            body = {"jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage", "params": {"message": {
                "messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}
            assert b"TASK_STATE_COMPLETED" in client.post(url + "/", content=orjson.dumps(body), headers=alice).content
        follow_up(url, 2)  # the same process: answered by the gateway
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        first_stderr = proc.stderr_text()
    context, url = _serve_on_state_dir(wurl, state)
    with context as proc:
        follow_up(url, 5)
    restarted_stderr = proc.stderr_text()
    secret = (state / "caller-secret").read_text()
    assert (state / "caller-secret").stat().st_mode & 0o777 == 0o600
    context, url = _serve_on_state_dir(wurl, state, "--workers", "2")
    with context as proc:
        follow_up(url, 10)
    workers_stderr = proc.stderr_text()
    assert w.calls("SendMessage") == []  # every follow-up was the gateway's to answer
    assert (state / "caller-secret").read_text() == secret  # made once, read at every start
    for text in (first_stderr, restarted_stderr, workers_stderr):
        assert "caller_secret_generated" not in text
