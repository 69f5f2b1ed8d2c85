"""Offline replay of recorded A2A observations through the gateway's own exchange objects.

Transcript format (``.jsonl``: one JSON object per line; blank lines and lines starting with
``#`` are skipped)::

    {"kind": "request",  "method": "CancelTask", "params": {"id": "t-4"}}
    {"kind": "response", "method": "CancelTask", "params": {"id": "t-4"}, "result": {...}}
    {"kind": "event", "stream": "s1", "method": "SendStreamingMessage", "params": {...},
     "result": {"statusUpdate": {...}}}
    {"kind": "exchange", "method": "SendStreamingMessage", "id": 1, "params": {...},
     "worker": [{"open": true}, {"events": [{...}]}, {"cut": true}, {"answer": {...}}, ...]}

* ``request``: a client request: admission (card, ledger) up to the point it would be
  forwarded (``forward``) or is answered by the gateway (``reject``).
* ``response``: a unary worker answer's ``result`` for that request.
* ``event``: one SSE event's ``result``; events with the same ``stream`` name are one stream
  (after a terminal event the stream drains: later events are judged, never delivered).
* ``exchange``: a whole exchange, admission included, against a scripted worker: ``worker``
  lists its acts in order (:mod:`gateway.offline`), so a stream that is cut, probed
  and resubscribed replays exactly as the gateway runs it; ``outputs`` of the verdict are the
  documents the client receives.
* ``method``: any v1.0 or v0.3 JSON-RPC method name; it decides the protocol version.
* ``upstream`` (default ``"default"``) and ``mode`` (``enforce``/``observe``, default
  ``enforce``) are optional on every line; ``id`` is the client's JSON-RPC id (default 1).

The ledger starts empty and the card is taken as fresh, declaring streaming and push
notifications. A transcript carries no times: lines are a second apart and no heartbeat gap
forces a ``GetTask``. Each line yields one :class:`Verdict`. An ``event`` for a stream that has
ended (closed after an interrupted v0.3 status, or after an error event) is a
:class:`~gateway.errors.TranscriptError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.errors import TranscriptError
from gateway.exchange.commands import Answer, CommandGenerator
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.model import Policy
from gateway.offline import Ledger, Offline
from gateway.exchange.stream import StreamExchange
from gateway.invariants.admission import CardView
from gateway.invariants.model import Mode

REPLAY_CARD = CardView(doc={"capabilities": {"streaming": True, "pushNotifications": True}},
                       fresh=True, reachable=True, etag=None)
"""The card a transcript is judged against."""
_START = 1_780_000_000.0


@dataclass
class Verdict:
    """What the gateway decided for one transcript line."""

    line: int
    kind: str
    method: str
    action: str
    findings: list[str]
    result: Any = None
    error: tuple[int, str] | None = None
    outputs: list[Any] = field(default_factory=list)

    def render(self) -> str:
        """One human-readable line."""
        text = f"{self.line}: {self.kind} {self.method} -> {self.action}"
        if self.findings:
            text += " [" + ", ".join(self.findings) + "]"
        if self.error is not None:
            text += f" error {self.error[0]}: {self.error[1]}"
        elif self.outputs:
            text += " " + orjson.dumps(self.outputs).decode()
        elif self.result is not None:
            text += " " + orjson.dumps(self.result).decode()
        return text


@dataclass
class _Stream:
    offline: Offline
    gen: CommandGenerator[Any]
    ended_at: int | None = None  # the line after which the stream's exchange was over


@dataclass
class _Replay:
    ledger: Ledger = field(default_factory=Ledger)
    streams: dict[str, _Stream] = field(default_factory=dict)


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


def _exchange(obj: dict[str, Any], lineno: int) -> JsonRpcExchange:
    method = obj.get("method")
    info = jsonrpc.lookup_method(method) if isinstance(method, str) else None
    if info is None:
        raise TranscriptError(f"line {lineno}: unknown or missing method {method!r}")
    try:
        mode = Mode(obj.get("mode", "enforce"))
    except ValueError:
        raise TranscriptError(f"line {lineno}: mode must be enforce or observe") from None
    doc = {"jsonrpc": "2.0", "id": obj.get("id", 1), "method": method, "params": obj.get("params") or {}}
    body = jsonrpc.dumps(doc)
    req = jsonrpc.parse_request(body)
    if isinstance(req, jsonrpc.ParseFailure):
        raise TranscriptError(f"line {lineno}: {req.error['error']['message']}")
    policy = Policy(upstream=str(obj.get("upstream", "default")), mode=mode,
                    heartbeat_seconds=math.inf)
    return JsonRpcExchange(req, body, info, REPLAY_CARD, policy)


def _judge_line(state: _Replay, obj: dict[str, Any], lineno: int) -> Verdict:
    try:
        return _judge(state, obj, lineno)
    except TranscriptError as exc:
        if str(exc).startswith("line "):
            raise
        raise TranscriptError(f"line {lineno}: {exc}") from None


def _judge(state: _Replay, obj: dict[str, Any], lineno: int) -> Verdict:
    kind = obj.get("kind")
    if kind not in ("request", "response", "event", "exchange"):
        raise TranscriptError(f"line {lineno}: kind must be request, response, event or exchange")
    if kind in ("response", "event") and "result" not in obj:
        raise TranscriptError(f"line {lineno}: {kind} needs a result")
    now = _START + lineno
    name = str(obj.get("stream", ""))
    stream = state.streams.get(name) if kind == "event" else None
    if stream is not None:
        if stream.ended_at is not None:
            raise TranscriptError(f"line {lineno}: stream {name!r} ended at line {stream.ended_at}")
        offline = stream.offline
        offline.now, offline.outputs, offline.findings = now, [], []
        offline.worker.append({"events": [obj["result"]]})
        if offline.resume(stream.gen):
            stream.ended_at = lineno
        return _verdict(lineno, obj, offline)
    ex = _exchange(obj, lineno)
    offline = Offline(ex.policy.upstream, state.ledger, now, ex.req.id)
    if kind == "request":
        offline.run(ex.run())
    elif kind == "response":
        answer = Answer(200, jsonrpc.dumps({"jsonrpc": "2.0", "id": ex.req.id, "result": obj["result"]}))
        offline.run(ex.answer(answer))
    elif kind == "event":
        gen = StreamExchange(ex).run()
        offline.worker.extend([{"open": True}, {"events": [obj["result"]]}])
        state.streams[name] = _Stream(offline, gen, lineno if offline.run(gen) else None)
    else:
        worker = obj.get("worker")
        if not isinstance(worker, list) or not all(isinstance(a, dict) for a in worker):
            raise TranscriptError(f"line {lineno}: exchange needs a worker list of acts")
        offline.worker.extend(worker)
        offline.run(ex.run())
        return _verdict(lineno, obj, offline, whole=True)
    return _verdict(lineno, obj, offline)


def _verdict(lineno: int, obj: dict[str, Any], offline: Offline, *, whole: bool = False) -> Verdict:
    docs = [o for o in offline.outputs if o.doc is not None]
    findings = [f"{f.category}:{f.kind}" for f in offline.findings]
    verdict = Verdict(lineno, str(obj.get("kind")), str(obj.get("method")), "drop", findings)
    if whole:
        verdict.outputs = [o.doc for o in docs]
    error = next((o for o in docs if isinstance(o.doc, dict) and "error" in o.doc), None)
    result = next((o for o in docs if isinstance(o.doc, dict) and "result" in o.doc), None)
    if error is not None:
        err = error.doc["error"]
        verdict.action, verdict.error = "reject", (err.get("code"), err.get("message"))
    elif result is not None:
        verdict.action, verdict.result = "forward", result.doc["result"]
    elif obj.get("kind") == "request" and not offline.outputs:
        verdict.action = "forward"  # admitted: it would go to the worker now
    return verdict


__all__ = ["REPLAY_CARD", "Verdict", "replay"]
