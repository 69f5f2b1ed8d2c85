"""Resuming a stream with ``Last-Event-ID`` through the real gateway (docs/resume.md §1): a
client cut mid-stream gets every event it missed once, in order, then the live stream — on
JSON-RPC and REST, v1.0 and v0.3 — and an id the window no longer holds is a counted gap
answered with the task's snapshot first. A scripted worker under real uvicorn; the gateway's
own ledger (memory here; tests/e2e/test_resume.py runs SQLite and Redis processes).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.proxy.conftest import Harness
from tests.support.resume import (
    COMPLETED,
    WORKING,
    chunk,
    chunks_of,
    first_stream,
    read_stream,
    result_of,
    resumed_stream,
    task,
)
from tests.support.scripted_worker import Data, Event, Gate

V1 = {"A2A-Version": "1.0"}
TID = "t-r"
SEND = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}


def subscribe(req_id: Any = 2, method: str = "SubscribeToTask") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "method": method, "params": {"id": TID}}


@pytest.fixture
def cut(h: Harness) -> Any:
    """Run the first stream through ``h``: the client reads the Task and six chunks, has
    handled only three of them when it goes away; returns ``(frames, gate)``."""
    gate = Gate()
    first_stream(h.worker, TID, gate)
    frames = read_stream(h.http, h.gateway.url + "/", SEND, V1, stop_after=7)
    yield frames, gate
    gate.release()


def test_a_client_cut_mid_stream_gets_every_missed_event_once_in_order(h: Harness, cut: Any) -> None:
    frames, _ = cut
    assert chunks_of(frames) == [f"chunk {n}" for n in range(1, 7)]
    ids = [f.id for f in frames]
    assert all(ids) and len(set(ids)) == 7  # every event carries a gateway event id
    resumed_stream(h.worker, TID, 7, 8)
    again = read_stream(h.http, h.gateway.url + "/", subscribe(), {**V1, "Last-Event-ID": ids[3]})
    assert chunks_of(again) == [f"chunk {n}" for n in range(4, 9)]  # 4-6 from the window, 7-8 live
    assert [f.id for f in again[:3]] == ids[4:]  # replayed with the ids they had
    assert result_of(again[3]) == {"task": task(TID, WORKING)}  # the live stream's own snapshot
    assert result_of(again[-1])["statusUpdate"]["status"]["state"] == COMPLETED
    assert all(f.data["id"] == 2 for f in again)  # the resuming request's JSON-RPC id
    assert len({f.id for f in again}) == len(again) and not {f.id for f in again[3:]} & set(ids)
    [sub] = h.worker.calls("SubscribeToTask")
    assert "last-event-id" not in sub.headers  # the gateway's ids mean nothing to the worker
    assert h.metric("a2a_gateway_resumes_total", outcome="resumed") == 1
    assert h.metric("a2a_gateway_replayed_events_total") == 3


def test_a_rest_client_resumes_a_json_rpc_stream_in_its_own_form(h: Harness, cut: Any) -> None:
    frames, _ = cut
    h.worker.on_path("GET", f"/tasks/{TID}:subscribe", sse=[
        Data({"task": task(TID, WORKING)}), Data(chunk(TID, 7, last=True)),
        Data({"statusUpdate": {"taskId": TID, "contextId": "c-1", "status": {"state": COMPLETED}}})])
    again = read_stream(h.http, h.gateway.url + f"/tasks/{TID}:subscribe", None,
                        {**V1, "Last-Event-ID": frames[5].id}, method="GET")
    assert chunks_of(again) == ["chunk 6", "chunk 7"]
    assert again[0].data == chunk(TID, 6)  # a REST body: the bare StreamResponse
    assert again[0].id == frames[6].id


def test_a_v03_client_resumes_with_tasks_resubscribe(h: Harness, cut: Any) -> None:
    frames, _ = cut
    h.worker.on("tasks/resubscribe", sse=[  # the worker speaks v0.3 too: nothing is bridged
        Event(result={"kind": "task", **task(TID, "working")}),
        Event(result={"kind": "status-update", "taskId": TID, "contextId": "c-1",
                      "status": {"state": "completed"}, "final": True})])
    again = read_stream(h.http, h.gateway.url + "/", subscribe(3, "tasks/resubscribe"),
                        {"Last-Event-ID": frames[4].id, "A2A-Version": "0.3"})
    first = result_of(again[0])
    assert first["kind"] == "artifact-update" and first["artifact"]["parts"][0] == {"kind": "text", "text": "chunk 5"}
    assert chunks_of(again) == ["chunk 5", "chunk 6"]
    assert result_of(again[-1])["status"]["state"] == "completed" and result_of(again[-1])["final"] is True


def test_an_id_the_window_no_longer_holds_is_a_counted_gap_answered_with_a_snapshot(
        make_harness: Any, gateway_warnings: Any) -> None:
    h = make_harness(replay_window={"max_events_per_task": 3})
    gate = Gate()
    first_stream(h.worker, TID, gate)
    frames = read_stream(h.http, h.gateway.url + "/", SEND, V1, stop_after=7)
    h.worker.on("GetTask", json_result=task(TID, WORKING))
    resumed_stream(h.worker, TID, 7, 7)
    again = read_stream(h.http, h.gateway.url + "/", subscribe(), {**V1, "Last-Event-ID": frames[1].id})
    assert result_of(again[0]) == {"task": task(TID, WORKING)}  # the GetTask snapshot first
    assert chunks_of(again) == ["chunk 7"]  # the worker's repeated snapshot was dropped
    assert [result_of(f).get("task") is not None for f in again].count(True) == 1
    assert len(h.worker.calls("GetTask")) == 1
    assert h.metric("a2a_gateway_resumes_total", outcome="gap") == 1
    [line] = gateway_warnings("replay_gap")
    assert line.task_id == TID and line.last_event_id == frames[1].id
    gate.release()


def test_a_terminal_task_is_resumed_from_the_window_without_the_worker(h: Harness) -> None:
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": task(TID, WORKING)}), Event(result=chunk(TID, 1, last=True)),
        Event(result={"statusUpdate": {"taskId": TID, "contextId": "c-1", "status": {"state": COMPLETED}}})])
    frames = read_stream(h.http, h.gateway.url + "/", SEND, V1)
    calls = len(h.rpc_calls())
    again = read_stream(h.http, h.gateway.url + "/", subscribe(), {**V1, "Last-Event-ID": frames[0].id})
    assert [f.id for f in again] == [f.id for f in frames[1:]]
    assert result_of(again[-1])["statusUpdate"]["status"]["state"] == COMPLETED
    assert len(h.rpc_calls()) == calls  # nothing reached the worker


def test_without_the_window_the_workers_ids_and_the_header_go_through(make_harness: Any) -> None:
    h = make_harness(replay_window={"enabled": False})
    h.worker.on("SendStreamingMessage", sse=[
        b"id: w-1\ndata: " + _rpc({"task": task(TID, COMPLETED)}) + b"\n\n"])
    frames = read_stream(h.http, h.gateway.url + "/", SEND, V1)
    assert [f.id for f in frames] == ["w-1"]
    h.worker.on("SubscribeToTask", sse=[Event(result={"task": task("t-other", WORKING)})])
    read_stream(h.http, h.gateway.url + "/", {**subscribe(), "params": {"id": "t-other"}},
                {**V1, "Last-Event-ID": "w-1"})
    assert h.worker.calls("SubscribeToTask")[0].headers["last-event-id"] == "w-1"


def _rpc(result: Any) -> bytes:
    import orjson

    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": result})



def test_an_empty_header_is_no_header(h: Harness, cut: Any) -> None:
    resumed_stream(h.worker, TID, 7, 7)
    again = read_stream(h.http, h.gateway.url + "/", subscribe(), {**V1, "Last-Event-ID": ""})
    assert chunks_of(again) == ["chunk 7"]  # the worker's stream only: no replay, no gap
    assert h.metric("a2a_gateway_resumes_total") == 0
