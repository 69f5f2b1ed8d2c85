"""Streams that are cut and resumed with ``Last-Event-ID`` (docs/resume.md §1), as a client
reads them: frames with their SSE ids, read one by one so a test can stop in the middle.

Public API
----------
- ``chunk(tid, n, last=False)``: the v1.0 ``artifactUpdate`` result carrying ``"chunk n"``.
- ``first_stream(worker, tid, gate, chunks=6)``: script ``SendStreamingMessage``: the Task
  (WORKING), chunks 1..``chunks``, then ``gate`` (the stream stays open until it is released).
- ``resumed_stream(worker, tid, start, stop)``: script ``SubscribeToTask``: the Task snapshot,
  chunks ``start``..``stop`` (the last one ``lastChunk``), then COMPLETED.
- ``Frame``: one SSE event as read (``id``, ``event``, ``data`` parsed).
- ``read_stream(client, url, body, headers, stop_after=None, method="POST")``: send ``body``
  and read frames until the stream ends, or until ``stop_after`` data frames, then close the
  connection (a client cut mid-stream).
- ``chunks_of(frames)``: the chunk texts in frame order; ``result_of(frame)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from tests.support.scripted_worker import Event, Gate, ScriptedWorker

WORKING, COMPLETED = "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"


def task(tid: str, state: str) -> dict[str, Any]:
    return {"id": tid, "contextId": "c-1", "status": {"state": state}}


def chunk(tid: str, n: int, *, last: bool = False) -> dict[str, Any]:
    return {"artifactUpdate": {"taskId": tid, "contextId": "c-1", "append": n > 1, "lastChunk": last,
                               "artifact": {"artifactId": "a-1", "parts": [{"text": f"chunk {n}"}]}}}


def first_stream(worker: ScriptedWorker, tid: str, gate: Gate, chunks: int = 6) -> None:
    worker.on("SendStreamingMessage", sse=[Event(result={"task": task(tid, WORKING)}),
                                           *(Event(result=chunk(tid, n)) for n in range(1, chunks + 1)), gate])


def resumed_stream(worker: ScriptedWorker, tid: str, start: int, stop: int) -> None:
    worker.on("SubscribeToTask", sse=[
        Event(result={"task": task(tid, WORKING)}),
        *(Event(result=chunk(tid, n, last=n == stop)) for n in range(start, stop + 1)),
        Event(result={"statusUpdate": {"taskId": tid, "contextId": "c-1", "status": {"state": COMPLETED}}}),
    ])


@dataclass
class Frame:
    id: str | None
    event: str | None
    data: Any


def _frame(lines: list[str]) -> Frame | None:
    fid = event = None
    data: list[str] = []
    for line in lines:
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "id":
            fid = value
        elif key == "event":
            event = value
        elif key == "data":
            data.append(value)
    if not data:
        return None
    return Frame(fid, event, orjson.loads("\n".join(data)))


def read_stream(client: httpx.Client, url: str, body: Any, headers: dict[str, str], *,
                stop_after: int | None = None, method: str = "POST") -> list[Frame]:
    """The data frames of one streaming request (``body`` ``None``: none), read line by line."""
    out: list[Frame] = []
    hdrs = {"accept": "text/event-stream", **headers}
    content = None if body is None else orjson.dumps(body)
    if content is not None:
        hdrs.setdefault("content-type", "application/json")
    with client.stream(method, url, content=content, headers=hdrs) as r:
        assert r.status_code == 200, r.read()
        lines: list[str] = []
        for line in r.iter_lines():
            if line:
                lines.append(line)
                continue
            frame = _frame(lines)
            lines = []
            if frame is not None:
                out.append(frame)
                if stop_after is not None and len(out) >= stop_after:
                    break
    return out


def result_of(frame: Frame) -> Any:
    """The frame's A2A payload: a JSON-RPC ``result`` (or ``error``), or a REST body."""
    data = frame.data
    if isinstance(data, dict) and data.get("jsonrpc") == "2.0":
        return data.get("result", data.get("error"))
    return data


def chunks_of(frames: list[Frame]) -> list[str]:
    """The chunk texts carried by ``frames``, in order (v1.0 and v0.3 shapes)."""
    out = []
    for frame in frames:
        result = result_of(frame)
        update = result.get("artifactUpdate", result) if isinstance(result, dict) else None
        if isinstance(update, dict) and isinstance(update.get("artifact"), dict):
            out.extend(p.get("text") for p in update["artifact"].get("parts", []))
    return out
