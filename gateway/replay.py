"""Offline replay of recorded A2A observations through the invariant engine.

Transcript format (``.jsonl``: one JSON object per line; blank lines and lines starting with
``#`` are skipped)::

    {"kind": "request",  "method": "CancelTask", "params": {"id": "t-4"}}
    {"kind": "response", "method": "CancelTask", "params": {"id": "t-4"}, "result": {...}}
    {"kind": "event", "stream": "s1", "method": "SendStreamingMessage", "params": {...},
     "result": {"statusUpdate": {...}}}

* ``kind``: ``request`` (a client request: admission check), ``response`` (a unary worker
  answer's ``result``) or ``event`` (one SSE event's ``result``; events with the same
  ``stream`` name share stream state).
* ``method``: any v1.0 or v0.3 JSON-RPC method name; it decides the protocol version.
* ``params``: the request's params (used for the task id); optional for events after the first.
* ``upstream`` (default ``"default"``) and ``mode`` (``enforce``/``observe``, default
  ``enforce``) are optional on every line.

The ledger is an in-process dict, so a transcript replays exactly as the gateway would judge it
from an empty ledger. Each line yields one :class:`Verdict`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.invariants import engine
from gateway.invariants.model import Clock, Exchange, Mode, Outcome, StreamState, TaskRecord
from gateway.errors import TranscriptError


@dataclass
class Verdict:
    """What the engine decided for one transcript line."""

    line: int
    kind: str
    method: str
    action: str
    findings: list[str]
    result: Any = None
    error: tuple[int, str] | None = None

    def render(self) -> str:
        """One human-readable line."""
        text = f"{self.line}: {self.kind} {self.method} -> {self.action}"
        if self.findings:
            text += " [" + ", ".join(self.findings) + "]"
        if self.error is not None:
            text += f" error {self.error[0]}: {self.error[1]}"
        elif self.result is not None:
            text += " " + orjson.dumps(self.result).decode()
        return text


@dataclass
class _Replay:
    records: dict[tuple[str, str], TaskRecord] = field(default_factory=dict)
    streams: dict[str, tuple[Exchange, StreamState]] = field(default_factory=dict)
    tick: float = 0.0

    def clock(self) -> Clock:
        self.tick += 1.0
        return Clock(self.tick)


def _exchange(obj: dict[str, Any], lineno: int) -> Exchange:
    method = obj.get("method")
    info = jsonrpc.lookup_method(method) if isinstance(method, str) else None
    if info is None:
        raise TranscriptError(f"line {lineno}: unknown or missing method {method!r}")
    try:
        mode = Mode(obj.get("mode", "enforce"))
    except ValueError:
        raise TranscriptError(f"line {lineno}: mode must be enforce or observe") from None
    return Exchange(
        upstream=str(obj.get("upstream", "default")),
        operation=info.operation,
        version=info.version,
        task_id=jsonrpc.request_task_id(info, obj.get("params")),
        mode=mode,
    )


def replay(lines: Iterable[str]) -> Iterator[Verdict]:
    """Judge every observation of a transcript in order.

    Raises:
        TranscriptError: a line is not JSON, not an object, or has an unknown kind/method.
    """
    state = _Replay()
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TranscriptError(f"line {lineno}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise TranscriptError(f"line {lineno}: expected a JSON object")
        yield _judge_line(state, obj, lineno)


def _judge_line(state: _Replay, obj: dict[str, Any], lineno: int) -> Verdict:
    kind = obj.get("kind")
    method = str(obj.get("method"))
    if kind == "event" and obj.get("stream") in state.streams:
        ex, stream = state.streams[obj["stream"]]
    else:
        ex = _exchange(obj, lineno)
        stream = StreamState(task_id=ex.task_id)
    if kind == "request":
        record = state.records.get((ex.upstream, ex.task_id)) if ex.task_id else None
        outcome = engine.check_request(ex, record)
    elif kind in ("response", "event"):
        if "result" not in obj:
            raise TranscriptError(f"line {lineno}: {kind} needs a result")
        tid = engine.payload_task_id(obj["result"])
        record = state.records.get((ex.upstream, tid)) if tid else None
        in_stream = stream if kind == "event" else None
        outcome = engine.check_payload(ex, in_stream, record, obj["result"], state.clock())
        if kind == "event":
            state.streams[str(obj.get("stream", ""))] = (ex, outcome.stream or stream)
    else:
        raise TranscriptError(f"line {lineno}: kind must be request, response or event")
    _store(state, outcome)
    return Verdict(
        line=lineno,
        kind=str(kind),
        method=method,
        action=outcome.action.value,
        findings=[f"{f.category}:{f.kind}" for f in outcome.findings],
        result=outcome.result,
        error=outcome.error,
    )


def _store(state: _Replay, outcome: Outcome) -> None:
    if outcome.record is not None:
        rec = outcome.record
        state.records[(rec.upstream, rec.task_id)] = rec
