"""Edges of "a stream holds its record" (docs/architecture.md): the judge's one-call store of a
record and its event must put the event into the window of the stream's own task, never of
another task the payload names. Driven by hand, one command at a time, as
tests/exchange/test_held_record.py."""

from __future__ import annotations

from typing import Any

from gateway.a2a.jsonrpc import Operation
from gateway.a2a.states import TaskState
from gateway.a2a.version import ProtocolVersion
from gateway.exchange.commands import AppendEvent, Load, Loaded, Store, StoreAndAppend
from gateway.exchange.judge import judge
from gateway.exchange.model import Policy
from gateway.invariants.model import Action, Clock, Exchange, Mode, Outcome, StreamState, TaskRecord

import pytest

POLICY = Policy("w")
STREAM = StreamState(task_id="t-1", context_id="c-1")
NOW = 2_000.0


class StreamSink:
    """The stream side as StreamExchange has it: a forwarded event goes into the window of the
    stream's task (``t-1``)."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def window_event(self, outcome: Outcome) -> AppendEvent | None:
        if outcome.action is not Action.FORWARD:
            return None
        return AppendEvent("t-1", "lin-1", b"payload")

    def appended(self, event_id: str, lineage: str) -> None:
        self.ids.append(event_id)


def other_task_message() -> dict[str, Any]:
    return {"message": {"messageId": "m-1", "role": "ROLE_AGENT", "taskId": "t-2", "contextId": "c-1",
                        "parts": [{"text": "about another task"}]}}


def other_task_status() -> dict[str, Any]:
    return {"statusUpdate": {"taskId": "t-2", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}


@pytest.mark.parametrize("mode, result", [(Mode.ENFORCE, other_task_message()),
                                          (Mode.OBSERVE, other_task_status())])
def test_a_store_of_another_tasks_record_never_carries_the_streams_event(mode: Mode, result: Any) -> None:
    """An event of the stream of ``t-1`` that names ``t-2`` (a Message naming it; in observe mode
    any payload) records the caller on ``t-2``'s record. That store must not be the one-call
    store with the event: ``put_with_event`` appends to the record's task, so the event would
    go into ``t-2``'s window under ``t-1``'s lineage, and its id be unknown to ``t-1``'s."""
    ex = Exchange("w", Operation.STREAM, ProtocolVersion.V1_0, "t-1", mode=mode, caller="fp-new")
    other = TaskRecord("w", "t-2", "c-1", TaskState.WORKING, NOW - 5, callers=("fp-old",))
    sink = StreamSink()
    gen = judge(POLICY, ex, STREAM, result, direction="event", window=sink)
    assert next(gen) == Load("t-2", "", cached=True)
    cmd = gen.send(Loaded(other, Clock(NOW), 3))
    assert type(cmd) in (Store, StoreAndAppend) and cmd.record.task_id == "t-2"
    if type(cmd) is StoreAndAppend:
        assert cmd.event.task_id == cmd.record.task_id, "the stream's event would go into another task's window"
    assert sink.ids == []
