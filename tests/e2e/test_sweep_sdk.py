"""The proactive sweep against the real a2a-sdk 1.3 demo worker (docs/sweep.md §1): a task
created through the gateway is parked; the worker's task store then says ``failed`` (as after a
restart that rehydrated it so) with its Agent Card unchanged, and no client asks. The gateway
records ``failed`` within one heartbeat interval plus the sweep period."""

from __future__ import annotations

import asyncio

import httpx
import orjson

from a2a.server.context import ServerCallContext
from a2a.types import TaskState as SdkTaskState

from demo.worker import build_worker_app
from gateway.a2a.states import TaskState
from gateway.app import build_app
from gateway.config import SweepConfig, sidecar_config
from prometheus_client import CollectorRegistry
from tests.support.gateway import serve_gateway
from tests.support.servers import serve_in_thread, wait_until

HEARTBEAT = 0.5
PERIOD = 0.05


def test_a_parked_task_the_sdk_worker_now_holds_failed_is_recorded_failed_by_the_sweep(tmp_path) -> None:
    worker_app = build_worker_app("http://worker.invalid:1/")
    with serve_in_thread(worker_app, name="sdk-worker") as worker:
        config = sidecar_config(worker.url, host="127.0.0.1", port=0, mode="enforce",
                                ledger=f"sqlite:///{tmp_path}/ledger.db", heartbeat_seconds=HEARTBEAT)
        config = config.model_copy(update={"sweep": SweepConfig(interval_seconds=PERIOD)})
        registry = CollectorRegistry()
        app = build_app(config, registry=registry)
        with serve_gateway(app, name="sweep-gateway") as (gateway, _admin), \
                httpx.Client(trust_env=False, timeout=10) as http:
            runtime = app.state.runtime
            wait_until(lambda: runtime.cards_known(), message="the worker's card")
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "ask for a date"}]}}}
            answer = http.post(gateway.url + "/", content=orjson.dumps(body),
                               headers={"content-type": "application/json", "A2A-Version": "1.0"}).json()
            task = answer["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

            def record():
                future = asyncio.run_coroutine_threadsafe(runtime.ledger.get("worker", task["id"]), gateway.loop)
                return future.result(timeout=5).record

            parked = record()
            assert parked.state is TaskState.INPUT_REQUIRED

            async def rehydrate_as_failed() -> None:  # the worker's store after its restart
                store, context = worker_app.state.request_handler.task_store, ServerCallContext()
                stored = await store.get(task["id"], context)
                stored.status.state = SdkTaskState.TASK_STATE_FAILED
                await store.save(stored, context)

            asyncio.run_coroutine_threadsafe(rehydrate_as_failed(), worker.loop).result(timeout=5)

            def metric(name: str, **labels: str) -> float:
                return sum(s.value for f in registry.collect() for s in f.samples
                           if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

            # the record is stored before the divergence and the sweep's outcome are counted:
            # wait on the outcome, the last of them, then read the record
            wait_until(lambda: metric("a2a_gateway_sweep_total", outcome="changed") >= 1,
                       timeout=HEARTBEAT + PERIOD + 10, message="the sweep records failed")
            failed = record()
            assert failed.state is TaskState.FAILED
            assert failed.observed_at - parked.observed_at <= HEARTBEAT + PERIOD + 1.0
            assert metric("a2a_gateway_forced_get_total", reason="sweep") == 1
            # the task moved on from the recorded state to failed: progress (docs/field-cases.md F22)
            assert metric("a2a_gateway_divergences_total", kind="stale_record") == 0
            assert metric("a2a_gateway_requests_total", method="GetTask") == 0  # no client asked
            # the task is terminal now: a follow-up message is refused by the gateway itself
            follow = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": {
                "messageId": "m-2", "role": "ROLE_USER", "taskId": task["id"], "contextId": task["contextId"],
                "parts": [{"text": "tomorrow"}]}}}
            doc = http.post(gateway.url + "/", content=orjson.dumps(follow),
                            headers={"content-type": "application/json", "A2A-Version": "1.0"}).json()
            assert doc["error"]["code"] == -32004, doc
