"""The driver (gateway/proxy/driver.py) through the real gateway: what it does with the
commands that touch sockets — whose headers a response carries, and how many writes one
upstream read becomes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.proxy.conftest import Harness, frames, on_client_writes
from tests.support.scripted_worker import Pause

V1 = {"A2A-Version": "1.0"}


def _task(tid: str, state: str) -> dict[str, Any]:
    return {"id": tid, "contextId": "c-1", "status": {"state": state}}


def test_a_rewritten_or_relayed_answer_carries_the_workers_answer_headers_not_the_probes(h: Harness) -> None:
    """A -32603 to a cancel is probed with GetTask before it is relayed; the client gets the
    cancel answer's headers (the probe's Set-Cookie must never reach it)."""
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom"}}
    h.worker.on("CancelTask", raw=(200, {"content-type": "application/json", "x-answer-of": "cancel",
                                         "set-cookie": "a=cancel"}, orjson.dumps(error)))
    probe = {"jsonrpc": "2.0", "id": "a2a-gateway-probe", "result": _task("t-h", "TASK_STATE_WORKING")}
    h.worker.on("GetTask", raw=(200, {"content-type": "application/json", "x-answer-of": "probe",
                                      "set-cookie": "a=probe"}, orjson.dumps(probe)))
    r = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": "t-h"}}, headers=V1)
    assert len(h.worker.calls("GetTask")) == 1  # the probe happened in between
    assert r.json()["error"]["code"] == -32603
    assert r.headers["x-answer-of"] == "cancel"
    assert r.headers.get_list("set-cookie") == ["a=cancel"]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The body of every non-empty write the gateway makes to a client."""
    log: list[bytes] = []
    on_client_writes(monkeypatch, log.append)
    return log


def test_a_read_that_starts_with_a_ping_is_still_one_write(h: Harness, writes: list[bytes]) -> None:
    """On a known task's stream a ping is a sign of life (a ledger store); that store is not
    taken for a slow ledger: the ping and the event of the same upstream read go out in one
    write."""
    h.worker.on("GetTask", json_result=_task("t-p", "TASK_STATE_WORKING"))
    assert h.rpc({"jsonrpc": "2.0", "id": 0, "method": "GetTask", "params": {"id": "t-p"}}, headers=V1).status_code == 200
    writes.clear()
    event = {"jsonrpc": "2.0", "id": 1, "result": {"task": _task("t-p", "TASK_STATE_COMPLETED")}}
    idle = Pause(0.05)  # an idle worker: far longer than FLUSH_AFTER since the admission's Load
    h.worker.on("SubscribeToTask", sse=[idle, b": ping\n\ndata: " + orjson.dumps(event) + b"\n\n"])
    _, raw = h.stream({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": "t-p"}},
                      headers=V1)
    assert [f["comment"] for f in frames(raw)][:1] == ["ping"]
    [write] = writes
    assert write.startswith(b": ping\n\nid: ")  # the gateway's event id (docs/resume.md §1.1), then the data
    assert b"\ndata: " in write


@pytest.mark.parametrize("ledger", ["memory", "sqlite"])
def test_a_token_stream_reads_its_record_once_and_stores_each_chunk_with_its_event(
        make_harness: Any, tmp_path: Any, ledger: str) -> None:
    """A stream holds its record (docs/architecture.md, "A stream holds its record"): a task
    streamed as one artifact in append chunks is read from the ledger once, and each chunk's
    record store and replay-window append is one ledger call; the client gets every chunk
    with the gateway's event ids, and the ledger holds the sealed artifact's part count."""
    url = "memory" if ledger == "memory" else f"sqlite:///{tmp_path}/ledger.db"
    h = make_harness(ledger={"url": url})
    tid, chunks = "t-tokens", 20
    ids = {"taskId": tid, "contextId": "c-1"}
    events: list[Any] = [{"task": _task(tid, "TASK_STATE_WORKING")}]
    events += [{"artifactUpdate": {**ids, "append": k > 0, "lastChunk": k == chunks - 1,
                                   "artifact": {"artifactId": "a-1", "parts": [{"text": f"tok{k} "}]}}}
               for k in range(chunks)]
    events.append({"statusUpdate": {**ids, "status": {"state": "TASK_STATE_COMPLETED"}}})
    h.worker.on("SendStreamingMessage", sse=[
        b"data: " + orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": e}) + b"\n\n" for e in events])

    def calls(operation: str) -> float:
        return h.metric("a2a_gateway_ledger_operation_duration_seconds_count", operation=operation)

    before = {op: calls(op) for op in ("get", "put", "put_with_event", "append_event")}
    _, raw = h.stream({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}, headers=V1)
    got = [f for f in frames(raw) if "data" in f]
    assert [f["data"]["result"] for f in got] == events
    event_ids = {line for line in raw.split(b"\n") if line.startswith(b"id: ")}
    assert len(event_ids) == len(events)  # every event has its own gateway id
    made = {op: calls(op) - before[op] for op in before}
    assert made == {"get": 1, "put": 0, "put_with_event": len(events), "append_event": 0}, made
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", tid))
    assert stored.record.state.value == "TASK_STATE_COMPLETED"
    assert (stored.record.artifacts["a-1"].sealed, stored.record.artifacts["a-1"].parts) == (True, chunks)
