"""The SSE relay's batching and re-framing (gateway/exchange/stream.py, performed by
gateway/proxy/driver.py), through real servers: the safety net under the transcript tests.

The events decoded from one upstream read are judged and stored one by one, then sent to the
client in one write: no event's bytes go out before its ledger record was stored, and a ledger
failure in the middle of a read forwards only the events stored before it. An event the engine
left unchanged is relayed with the worker's own ``data`` text when its id is the client's id
(same JSON type), and re-encoded with the client's id otherwise.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.proxy import driver
from tests.proxy.conftest import Harness, frames, on_client_writes

V1 = {"A2A-Version": "1.0"}
WORKING, COMPLETED = "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"


def _send(req_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "method": "SendStreamingMessage",
            "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}


def _events(tid: str, req_id: Any = 1) -> list[bytes]:
    """A task, an artifact update and a completing status update: each one changes the record."""
    ids = {"taskId": tid, "contextId": "c-1"}
    results = [
        {"task": {"id": tid, "contextId": "c-1", "status": {"state": WORKING}}},
        {"artifactUpdate": {**ids, "artifact": {"artifactId": "a-1", "parts": [{"text": "x"}]}}},
        {"statusUpdate": {**ids, "status": {"state": COMPLETED}}},
    ]
    return [b"data: " + orjson.dumps({"jsonrpc": "2.0", "id": req_id, "result": r}) + b"\n\n" for r in results]


@pytest.fixture
def trace(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Ledger puts (``("put", state)``, ``("put_failed", state)``) and client body writes
    (``("send", body)``) of the gateway, in the order they happened."""
    log: list[tuple[str, Any]] = []
    ledger = h.runtime.ledger.inner  # the backend itself: the instrumented wrapper times the patched call
    real_put = ledger.put

    async def put(record: Any, expected_version: int) -> Any:
        try:
            stored = await real_put(record, expected_version)
        except Exception:
            log.append(("put_failed", record.state.value))
            raise
        log.append(("put", record.state.value))
        return stored

    monkeypatch.setattr(ledger, "put", put)
    on_client_writes(monkeypatch, lambda body: log.append(("send", body)))
    return log


def test_events_of_one_read_are_all_stored_before_their_one_write(
        h: Harness, trace: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """With a ledger that is never slow (FLUSH_AFTER out of reach: on a loaded machine a 2 ms
    store happens, which flushes early as the next tests show), one write for the read."""
    monkeypatch.setattr(driver, "FLUSH_AFTER", 60.0)
    h.worker.on("SendStreamingMessage", sse=[b"".join(_events("t-b"))])  # one worker write
    _, raw = h.stream(_send(1), headers=V1)
    assert len([f for f in frames(raw) if f["data"] is not None]) == 3
    assert [kind for kind, _ in trace] == ["put", "put", "put", "send"], trace
    assert trace[-1][1] == raw


def test_a_slow_ledger_does_not_hold_stored_events_back(
        h: Harness, trace: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``FLUSH_AFTER`` (here 0 s) the frames already stored go out before the next
    event is judged: each send still follows its own put."""
    monkeypatch.setattr(driver, "FLUSH_AFTER", 0.0)
    h.worker.on("SendStreamingMessage", sse=[b"".join(_events("t-s"))])  # one worker write
    _, raw = h.stream(_send(1), headers=V1)
    assert len([f for f in frames(raw) if f["data"] is not None]) == 3
    assert [kind for kind, _ in trace] == ["put", "send", "put", "send", "put", "send"], trace


def test_after_a_slow_store_the_stored_events_go_out_before_the_next_store(
        h: Harness, trace: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The first store takes 20 ms (10x FLUSH_AFTER): its event is sent before the next one
    is stored; the fast stores after it are batched again."""
    ledger = h.runtime.ledger.inner  # the backend itself: the instrumented wrapper times the patched call
    traced_put = ledger.put
    calls = {"n": 0}

    async def put(record: Any, expected_version: int) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            await asyncio.sleep(0.02)  # a slow ledger, not a synchronisation
        return await traced_put(record, expected_version)

    monkeypatch.setattr(ledger, "put", put)
    h.worker.on("SendStreamingMessage", sse=[b"".join(_events("t-w"))])  # one worker write
    _, raw = h.stream(_send(1), headers=V1)
    assert len([f for f in frames(raw) if f["data"] is not None]) == 3
    assert [kind for kind, _ in trace] == ["put", "send", "put", "put", "send"], trace


def test_ledger_failure_mid_read_forwards_only_the_events_stored_before_it(
        h: Harness, trace: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = h.runtime.ledger.inner  # the backend itself: the instrumented wrapper times the patched call
    counting_put = ledger.put
    calls = {"n": 0}

    async def put(record: Any, expected_version: int) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the artifact update's record
            raise OSError("disk gone")
        return await counting_put(record, expected_version)

    monkeypatch.setattr(ledger, "put", put)
    h.worker.on("SendStreamingMessage", sse=[b"".join(_events("t-f"))])
    _, raw = h.stream(_send("c"), headers=V1)
    fs = [f for f in frames(raw) if f["data"] is not None]
    assert [f["data"].get("result", {}).get("task", {}).get("id") for f in fs[:1]] == ["t-f"]
    assert len(fs) == 2, raw  # the stored task event, then the error: nothing of the unstored ones
    assert fs[1]["event"] == "error" and fs[1]["data"]["id"] == "c"
    assert fs[1]["data"]["error"]["code"] == -32603
    assert b"artifactUpdate" not in raw and COMPLETED.encode() not in raw
    sends = [body for kind, body in trace if kind == "send"]
    assert [kind for kind, _ in trace][0] == "put" and trace.index(("send", sends[0])) > 0


def test_unchanged_event_with_the_clients_id_keeps_the_workers_data_text(h: Harness) -> None:
    """The worker's own JSON text (spacing, key order) is relayed when nothing changes."""
    data = (b'{"result": {"task": {"status": {"state": "TASK_STATE_WORKING"}, "contextId": "c-1",'
            b' "id": "t-o"}}, "id": 5, "jsonrpc": "2.0"}')
    done = _events("t-o", 5)[2]
    h.worker.on("SendStreamingMessage", sse=[b"data: " + data + b"\r\n\r\n" + done])
    _, raw = h.stream(_send(5), headers=V1)
    assert raw.startswith(b"id: ") and raw.split(b"\n", 1)[1].startswith(b"data: " + data + b"\n\n"), raw


@pytest.mark.parametrize("worker_id", [b'"5"', b"null", b"6"])
def test_unchanged_event_with_another_id_is_sent_with_the_clients_id(h: Harness, worker_id: bytes) -> None:
    events = [e.replace(b'"id":5,', b'"id":' + worker_id + b",", 1) for e in _events("t-i", 5)]
    h.worker.on("SendStreamingMessage", sse=[b"".join(events)])
    _, raw = h.stream(_send(5), headers=V1)
    fs = [f for f in frames(raw) if f["data"] is not None]
    assert len(fs) == 3 and all(f["data"]["id"] == 5 and type(f["data"]["id"]) is int for f in fs), raw
    assert b'"id":' + worker_id + b"," not in raw
