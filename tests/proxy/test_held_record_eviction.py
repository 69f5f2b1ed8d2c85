"""A stream holds its record (docs/architecture.md): the compare-and-set over the held version
is the proof that the record is still the one judged. A memory ledger at ``max_tasks`` evicts
a terminal record first, else the least recently updated one, and versions start again at 1 when the task is stored anew:
a record that another writer stored as COMPLETED after the eviction has the stream's held
version, and the stream's next event must not be judged on, and stored over, its held WORKING."""

from __future__ import annotations

import threading
from typing import Any

import orjson

from gateway.a2a.states import TaskState
from gateway.invariants.model import TaskRecord
from tests.proxy.conftest import frames
from tests.support.scripted_worker import Gate
from tests.support.servers import wait_until

V1 = {"A2A-Version": "1.0"}


def _sse(result: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": result}) + b"\n\n"


def test_a_record_evicted_and_stored_terminal_again_is_not_overwritten_by_the_held_one(make_harness: Any) -> None:
    h = make_harness(ledger={"url": "memory", "max_tasks": 2})
    tid, ids = "t-evict", {"taskId": "t-evict", "contextId": "c-1"}
    gate = Gate()
    h.worker.on("SendStreamingMessage", sse=[
        _sse({"task": {"id": tid, "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}),
        gate,
        _sse({"artifactUpdate": {**ids, "artifact": {"artifactId": "a-1", "parts": [{"text": "late"}]}}}),
    ])
    h.worker.on("GetTask", json_result={"id": tid, "contextId": "c-1",
                                        "status": {"state": "TASK_STATE_COMPLETED"}}, times=None)
    out: dict[str, bytes] = {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}
    client = threading.Thread(target=lambda: out.setdefault("raw", h.stream(body, headers=V1)[1]))
    client.start()
    ledger = h.runtime.ledger
    wait_until(lambda: gate.reached.is_set() and h.on_gateway_loop(ledger.get("worker", tid)) is not None,
               message="the stream stored its task")
    held = h.on_gateway_loop(ledger.get("worker", tid))
    # two other tasks fill the ledger and evict it (the oldest live record; a terminal one would
    # go first), one of them ends (the next victim); then another writer (a GetTask answered)
    # records it COMPLETED anew
    def other(task_id: str, state: TaskState = TaskState.WORKING) -> TaskRecord:
        return TaskRecord("worker", task_id, "c-9", state, 1.0, terminal_status={"state": state.value} if state.is_terminal else None)

    h.on_gateway_loop(ledger.put(other("t-x"), 0))
    h.on_gateway_loop(ledger.put(other("t-y"), 0))
    assert h.on_gateway_loop(ledger.get("worker", tid)) is None
    h.on_gateway_loop(ledger.put(other("t-y", TaskState.COMPLETED), 1))
    done = TaskRecord("worker", tid, "c-1", TaskState.COMPLETED, held.record.observed_at + 0.1,
                      terminal_status={"state": "TASK_STATE_COMPLETED"})
    version = 0
    while version < held.version:  # the held version again, over a different record
        version = h.on_gateway_loop(ledger.put(done, version))
    assert h.on_gateway_loop(ledger.get("worker", tid)).version == held.version
    gate.release()
    client.join(10)
    delivered = [f["data"].get("result") for f in frames(out["raw"]) if "data" in f]
    assert not any(r and "artifactUpdate" in r for r in delivered), "an artifact merged into a terminal task"
    stored = h.on_gateway_loop(ledger.get("worker", tid))
    assert stored.record.state is TaskState.COMPLETED, "a recorded terminal state was overwritten"
