"""A tiny transcript driver for the invariant engine, through the loop the gateway runs.

Every payload goes through :func:`gateway.exchange.judge.judge` — load the record, judge, store
with compare-and-set — performed by :class:`gateway.offline.Offline` on the memory ledger
with a ticking clock, and the stream state is carried to the next event as the stream
exchange carries it. Tests read as transcripts: one call per observation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gateway.a2a import jsonrpc
from gateway.exchange.judge import judge
from gateway.exchange.model import Policy
from gateway.offline import Ledger, Offline
from gateway.invariants import engine
from gateway.invariants.model import (
    Clock,
    Exchange,
    Finding,
    Mode,
    Outcome,
    StreamState,
    TaskRecord,
)

UPSTREAM = "worker-a"


def exchange(method: str, params: Any = None, *, mode: Mode = Mode.ENFORCE,
             upstream: str = UPSTREAM) -> Exchange:
    """The Exchange the proxy builds for a JSON-RPC request (gateway/proxy/jsonrpc.py)."""
    info = jsonrpc.lookup_method(method)
    assert info is not None, method
    return Exchange(upstream, info.operation, info.version,
                    jsonrpc.request_task_id(info, params), mode)


def kinds(findings: list[Finding], category: str | None = None) -> list[str]:
    return [f.kind for f in findings if category is None or f.category == category]


@dataclass
class Playbook:
    """The engine driven by the gateway's own judge loop (gateway/exchange/judge.py) over an
    offline ledger (gateway/offline.py): one call per observation."""

    ledger: Ledger = field(default_factory=Ledger)
    tick: float = 0.0
    all_findings: list[Finding] = field(default_factory=list)

    def clock(self) -> Clock:
        self.tick += 1.0
        return Clock(wall=1_780_000_000.0 + self.tick)

    def record(self, task_id: str, upstream: str = UPSTREAM) -> TaskRecord | None:
        return self.ledger.get(upstream, task_id)

    def seed(self, record: TaskRecord) -> None:
        self.ledger.add(record)

    def request(self, ex: Exchange) -> Outcome:
        """A client request: admission check against the ledger."""
        record = self.record(ex.task_id, ex.upstream) if ex.task_id else None
        outcome = engine.check_request(ex, record)
        self.all_findings += outcome.findings
        return outcome

    def answer(self, ex: Exchange, result: Any) -> Outcome:
        """A unary worker answer's ``result``; the input is checked to be left unmutated."""
        return self._judge(ex, None, result)

    def open(self, ex: Exchange) -> Stream:
        return Stream(self, ex, StreamState(task_id=ex.task_id))

    def _judge(self, ex: Exchange, stream: StreamState | None, result: Any) -> Outcome:
        before = copy.deepcopy(result)
        offline = Offline(ex.upstream, self.ledger, self.clock().wall)
        assert offline.run(judge(Policy(ex.upstream, ex.mode), ex, stream, result))
        assert result == before, "the engine must not mutate its input"
        self.all_findings += offline.findings
        outcome: Outcome = offline.value
        return outcome


@dataclass
class Stream:
    book: Playbook
    ex: Exchange
    state: StreamState

    def event(self, result: Any) -> Outcome:
        """One SSE event's ``result``; the stream state is carried like the proxy does."""
        outcome = self.book._judge(self.ex, self.state, result)
        self.state = outcome.stream or self.state
        return outcome
