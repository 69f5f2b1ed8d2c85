"""The proactive sweep through the real gateway (docs/sweep.md): a scripted worker under real
uvicorn answers the gateway's own GetTasks, which no client asked for; every wait is a poll
with a deadline on the ledger, the worker's calls or the metrics."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
import time
from typing import Any

import pytest

from gateway.a2a.states import TaskState
from gateway.invariants.model import TaskRecord
from tests.proxy.conftest import Harness
from tests.support.objects import task
from tests.support.scripted_worker import Event, Gate, JsonError, JsonResult, ReceivedRequest, default_card
from tests.support.servers import free_port, wait_until

V1 = {"A2A-Version": "1.0"}
HEARTBEAT = 0.5
PERIOD = 0.05


def send_msg(req_id: Any, method: str = "SendMessage") -> dict[str, Any]:
    message = {"messageId": f"m-{req_id}", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    return {"jsonrpc": "2.0", "id": req_id, "method": method, "params": {"message": message}}


def harness(make_harness: Any, *, upstream: dict[str, Any] | None = None, card: Any = None,
            **sweep: Any) -> Harness:
    return make_harness(upstream={"heartbeat_seconds": HEARTBEAT, **(upstream or {})}, card=card,
                        sweep={"interval_seconds": PERIOD, **sweep})


def stored(h: Harness, task_id: str) -> Any:
    return h.on_gateway_loop(h.runtime.ledger.get("worker", task_id))


def put_live(h: Harness, task_id: str, age: float = 3600.0) -> None:
    """A live task the gateway last observed ``age`` seconds ago (as if it went silent)."""
    record = TaskRecord("worker", task_id, task_id.replace("t-", "c-"), TaskState.WORKING, time.time() - age)
    h.on_gateway_loop(h.runtime.ledger.put(record, 0))


def get_tasks(h: Harness, task_id: str) -> list[ReceivedRequest]:
    return [r for r in h.worker.calls("GetTask") if r.params.get("id") == task_id]


class Answers:
    """A GetTask handler answering each task id with its state in ``states`` (TaskNotFound for
    others), noting when each request arrived and how many were being answered at once."""

    def __init__(self, states: dict[str, str], delay: float = 0.0) -> None:
        self.states = states
        self.delay = delay
        self.arrivals: list[float] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    async def __call__(self, req: ReceivedRequest) -> Any:
        with self._lock:
            self.arrivals.append(time.monotonic())
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)  # a slow worker, not a synchronization
            tid = req.params["id"]
            if tid not in self.states:
                return JsonError({"code": -32001, "message": "Task not found"})
            return JsonResult(task(tid, self.states[tid]))
        finally:
            with self._lock:
                self.in_flight -= 1


def test_a_task_the_worker_rehydrated_as_failed_is_recorded_failed_with_no_client_request(make_harness: Any) -> None:
    """The worker restarts and its store says failed; the card is unchanged and no client
    asks. The sweep's GetTask finds it within one heartbeat interval plus the sweep period."""
    h = harness(make_harness)
    h.worker.on("SendMessage", json_result={"task": task("t-1", "TASK_STATE_WORKING")})
    r = h.rpc(send_msg(1), headers=V1)
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    created = stored(h, "t-1").record
    answers = Answers({"t-1": "TASK_STATE_FAILED"})
    h.worker.on("GetTask", handler=answers, times=None)

    # the record is stored before the divergence and the sweep's outcome are counted: wait on
    # the last of them (the outcome), then read the record
    wait_until(lambda: h.metric("a2a_gateway_sweep_total", outcome="changed") >= 1,
               timeout=HEARTBEAT + PERIOD + 10, message="the sweep records the failed state")
    now = stored(h, "t-1")
    assert now.record.state is TaskState.FAILED
    assert now.record.observed_at - created.observed_at <= HEARTBEAT + PERIOD + 1.0
    assert now.record.observed_at - created.observed_at > HEARTBEAT  # not before the heartbeat gap
    assert len(get_tasks(h, "t-1")) == 1
    assert h.metric("a2a_gateway_requests_total", method="GetTask") == 0  # no client asked
    assert h.metric("a2a_gateway_forced_get_total", reason="sweep") == 1
    assert h.divergences("stale_record") == 0  # working → failed: progress, no divergence (F22)
    assert h.metric("a2a_gateway_sweep_total", outcome="changed") == 1

    # a terminal task is never swept again: another live task is swept twice meanwhile
    answers.states["t-2"] = "TASK_STATE_WORKING"
    put_live(h, "t-2")
    # the worker records a GetTask before the gateway has judged its answer: wait on the
    # gateway's count of judged sweeps, not on the worker's calls
    wait_until(lambda: h.metric("a2a_gateway_sweep_total", outcome="unchanged") >= 2,
               timeout=3 * (HEARTBEAT + PERIOD) + 10, message="t-2 swept in two heartbeat gaps")
    assert len(get_tasks(h, "t-2")) >= 2
    assert len(get_tasks(h, "t-1")) == 1
    # and the JSON-RPC GetTask went out as the gateway's own: its probe id, no history, v1.0
    first = get_tasks(h, "t-1")[0]
    assert first.rpc_id == "a2a-gateway-probe" and first.params == {"id": "t-1", "historyLength": 0}
    assert first.headers.get("a2a-version") == "1.0"


def test_a_v03_only_worker_is_swept_with_tasks_get(make_harness: Any) -> None:
    h = harness(make_harness, upstream={"protocol_versions": ["0.3"]})
    h.worker.on("tasks/get", json_result={**task("t-1", "failed"), "kind": "task"}, times=None)
    put_live(h, "t-1")
    # the outcome is counted after the record is stored: wait on it, not on the record
    wait_until(lambda: h.metric("a2a_gateway_sweep_total", outcome="changed") >= 1,
               timeout=HEARTBEAT + PERIOD + 10)
    assert stored(h, "t-1").record.state is TaskState.FAILED
    [call] = h.worker.calls("tasks/get")
    assert "a2a-version" not in call.headers and h.worker.calls("GetTask") == []
    assert h.divergences("stale_record") == 0  # working → failed: progress (F22)


def test_a_task_with_an_open_client_stream_is_not_swept(make_harness: Any) -> None:
    h = harness(make_harness)
    gate = Gate(timeout=30)
    h.worker.on("SendStreamingMessage", sse=[Event(result={"task": task("t-s", "TASK_STATE_WORKING")}), gate])
    answers = Answers({"t-q": "TASK_STATE_WORKING", "t-s": "TASK_STATE_WORKING"})
    h.worker.on("GetTask", handler=answers, times=None)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        streamed = pool.submit(h.stream, send_msg(1, "SendStreamingMessage"), headers=V1)
        wait_until(lambda: ("worker", "", "t-s") in h.runtime.streams, message="the stream is open")
        put_live(h, "t-q")  # a silent task without a stream: the control
        wait_until(lambda: len(get_tasks(h, "t-q")) >= 2, timeout=3 * (HEARTBEAT + PERIOD) + 10,
                   message="the control swept in two heartbeat gaps")
        assert get_tasks(h, "t-s") == []  # silent past two heartbeats, but its stream is open
        assert stored(h, "t-s").record.observed_at < time.time() - HEARTBEAT
        assert h.metric("a2a_gateway_sweep_total", outcome="open_stream") >= 1
        gate.release()
        streamed.result(timeout=10)
    wait_until(lambda: len(h.runtime.streams) == 0, message="the stream's task is let go at its end")


def test_the_sweep_keeps_to_the_rate_per_upstream(make_harness: Any) -> None:
    rate, tasks = 8.0, 10
    h = harness(make_harness, requests_per_second=rate)
    answers = Answers({f"t-{i}": "TASK_STATE_WORKING" for i in range(tasks)})
    h.worker.on("GetTask", handler=answers, times=None)
    for i in range(tasks):
        put_live(h, f"t-{i}")
    wait_until(lambda: len(answers.arrivals) >= tasks, timeout=10, message="every task swept")
    times = sorted(answers.arrivals)
    # evenly spaced, no burst: n requests take at least (n - 1) / rate, less the jitter of their
    # way to the worker (unpaced, all ten would arrive within a few milliseconds)
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            assert times[j] - times[i] >= (j - i) / rate - 0.1, (i, j)
    assert times[-1] - times[0] >= (tasks - 1) / rate - 0.1
    assert {r.params["id"] for r in h.worker.calls("GetTask")} == set(answers.states)


def test_the_sweep_keeps_to_the_most_in_flight_per_upstream(make_harness: Any) -> None:
    h = harness(make_harness, requests_per_second=100.0, max_in_flight=2)
    answers = Answers({f"t-{i}": "TASK_STATE_WORKING" for i in range(6)}, delay=0.3)
    h.worker.on("GetTask", handler=answers, times=None)
    for i in range(6):
        put_live(h, f"t-{i}")
    wait_until(lambda: h.metric("a2a_gateway_sweep_total", outcome="unchanged") >= 6, timeout=15)
    assert answers.most_in_flight == 2


def test_a_disabled_sweep_sends_no_get_task(make_harness: Any) -> None:
    h = harness(make_harness, enabled=False)
    h.worker.on("GetTask", json_result=task("t-1", "TASK_STATE_FAILED"), times=None)
    put_live(h, "t-1")
    with pytest.raises(AssertionError):  # a deadline of several heartbeats and periods passes
        wait_until(lambda: h.worker.calls("GetTask"), timeout=4 * (HEARTBEAT + PERIOD))
    assert stored(h, "t-1").record.state is TaskState.WORKING
    assert h.metric("a2a_gateway_forced_get_total") == 0


def test_an_unreachable_worker_leaves_the_record_untouched(make_harness: Any,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    dead = f"http://127.0.0.1:{free_port()}/"  # nothing listens: connect refused
    h = harness(make_harness, upstream={"url": dead, "protocol_versions": ["1.0"]})
    put_live(h, "t-1")
    before = stored(h, "t-1")
    wait_until(lambda: h.metric("a2a_gateway_sweep_total", outcome="error") >= 1, timeout=HEARTBEAT + PERIOD + 10)
    assert h.metric("a2a_gateway_upstream_errors_total", reason="connect") >= 1
    after = stored(h, "t-1")
    assert after == before  # the same record, version and flag: nothing invented
    # one GetTask per heartbeat gap, even without an answer: timed by the gateway's own
    # sweep_get_failed lines (a clock read here would lag the first sweep by the polling)
    def failures() -> list[float]:
        times = [r.created for r in caplog.records if r.getMessage() == "sweep_get_failed"]
        return times if len(times) >= 2 else []
    first, second = wait_until(failures, timeout=HEARTBEAT + PERIOD + 10)[:2]
    assert second - first >= HEARTBEAT - 0.25, (first, second)


def test_a_worker_that_no_longer_knows_the_task_is_counted_not_given_a_state(make_harness: Any) -> None:
    h = harness(make_harness)
    h.worker.on("GetTask", handler=Answers({}), times=None)
    put_live(h, "t-gone")
    before = stored(h, "t-gone")
    wait_until(lambda: h.metric("a2a_gateway_sweep_total", outcome="not_found") >= 1, timeout=HEARTBEAT + PERIOD + 10)
    assert stored(h, "t-gone") == before
    assert h.divergences("stale_record") == 0


def test_a_concurrent_writer_wins_and_the_sweep_rereads(make_harness: Any) -> None:
    """A client's answer stored while the sweep's GetTask is out wins: the sweep judges the
    worker's answer over the record as it is then (compare-and-set), never over the old one."""
    h = harness(make_harness)
    release = threading.Event()

    async def slow_get(req: ReceivedRequest) -> Any:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return JsonResult(task("t-1", "TASK_STATE_WORKING"))

    h.worker.on("GetTask", handler=slow_get, times=None)
    put_live(h, "t-1")
    wait_until(lambda: get_tasks(h, "t-1"), timeout=HEARTBEAT + PERIOD + 10, message="the sweep's GetTask is out")
    current = stored(h, "t-1")
    done = dataclasses.replace(current.record, state=TaskState.COMPLETED, observed_at=time.time())
    h.on_gateway_loop(h.runtime.ledger.put(done, current.version))  # another writer: completed
    release.set()
    wait_until(lambda: h.metric("a2a_gateway_sweep_total") >= 1, timeout=10)
    assert stored(h, "t-1").record.state is TaskState.COMPLETED  # terminal stays: not overwritten
    assert h.metric("a2a_gateway_sweep_total", outcome="changed") == 0  # the other writer's, not the sweep's
    assert h.divergences("stale_record") == 0


def test_a_rest_only_worker_is_swept_below_the_rest_path_its_card_gives(make_harness: Any) -> None:
    card = {**default_card(), "supportedInterfaces": [
        {"url": "http://worker.internal:9/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}]}
    h = harness(make_harness, card=card)
    h.worker.on_path("GET", "/rest/tasks/t-1", json_body=task("t-1", "TASK_STATE_FAILED"), times=None)
    put_live(h, "t-1")
    wait_until(lambda: stored(h, "t-1").record.state is TaskState.FAILED, timeout=HEARTBEAT + PERIOD + 10)
    [call] = h.worker.path_calls("GET", "/rest/tasks/t-1")
    assert call.query == "historyLength=0" and call.headers.get("a2a-version") == "1.0"
    assert h.worker.calls("GetTask") == []


class RecordingPush:
    """Stands in for the push relay (``rt.push``): notes each delivery; the first one fails."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str, Any, str]] = []

    async def deliver_observed(self, upstream: str, task_id: str, payload: Any, *, tenant: str = "") -> None:
        self.delivered.append((upstream, task_id, payload, tenant))
        if len(self.delivered) == 1:
            raise RuntimeError("the relay is down")


def test_a_state_the_sweep_records_is_handed_to_the_push_relay(make_harness: Any) -> None:
    h = harness(make_harness)
    push = h.runtime.push = RecordingPush()
    h.worker.on("GetTask", handler=Answers({"t-1": "TASK_STATE_FAILED", "t-2": "TASK_STATE_CANCELED",
                                            "t-3": "TASK_STATE_WORKING"}), times=None)
    for tid in ("t-1", "t-2", "t-3"):
        put_live(h, tid)
    wait_until(lambda: h.metric("a2a_gateway_sweep_total", outcome="changed") == 2
               and h.metric("a2a_gateway_sweep_total", outcome="unchanged") >= 1, timeout=HEARTBEAT + PERIOD + 10)
    wait_until(lambda: len(push.delivered) == 2, message="both new states handed over")
    got = {tid: (upstream, payload["task"]["status"]["state"], tenant) for upstream, tid, payload, tenant in push.delivered}
    assert got == {"t-1": ("worker", "TASK_STATE_FAILED", ""), "t-2": ("worker", "TASK_STATE_CANCELED", "")}
    # the relay's failure on the first did not stop the second, nor undo the record
    assert {stored(h, t).record.state for t in ("t-1", "t-2")} == {TaskState.FAILED, TaskState.CANCELED}


def test_a_draining_gateway_starts_no_sweep(make_harness: Any) -> None:
    h = harness(make_harness)
    h.worker.on("GetTask", json_result=task("t-1", "TASK_STATE_FAILED"), times=None)
    h.gateway.loop.call_soon_threadsafe(h.runtime.draining.set)  # SIGTERM's first step
    wait_until(lambda: h.http.get(h.admin.url + "/readyz").status_code == 503, message="draining")
    put_live(h, "t-1")
    with pytest.raises(AssertionError):  # a deadline of several heartbeats and periods passes
        wait_until(lambda: h.worker.calls("GetTask"), timeout=4 * (HEARTBEAT + PERIOD))
    assert h.metric("a2a_gateway_forced_get_total", reason="sweep") == 0
