"""Which observations make a timeline entry, and what it says (gateway/invariants/timeline.py,
docs/observability.md §2). Plain values in, plain values out; the exchanges are played offline."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.a2a.jsonrpc import Operation
from gateway.a2a.states import TaskState
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.exchange.commands import Open, Post
from gateway.invariants import engine
from gateway.invariants.model import Action, Clock, Exchange, Finding, Mode, Outcome, TaskRecord
from gateway.invariants.timeline import TimelineEntry, payload_entry, request_entry

EX = Exchange("w", Operation.STREAM, ProtocolVersion.V1_0, "t-1", binding=Binding.REST)


def rec(state: TaskState) -> TaskRecord:
    return TaskRecord("w", "t-1", "c-1", state, 1000.0)


def status(state: str) -> dict[str, Any]:
    return {"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": {"state": state}}}


def test_the_same_state_forwarded_unchanged_is_no_entry() -> None:
    payload = status("TASK_STATE_WORKING")
    out = Outcome(Action.FORWARD, payload, record=rec(TaskState.WORKING))
    assert payload_entry(EX, "event", rec(TaskState.WORKING), out, payload) is None


def test_a_first_observation_and_a_state_change_are_entries() -> None:
    payload = status("TASK_STATE_WORKING")
    out = Outcome(Action.FORWARD, payload, record=rec(TaskState.WORKING))
    first = payload_entry(EX, "event", None, out, payload)
    assert first == TimelineEntry("event", "forwarded", method="SendStreamingMessage", binding="rest",
                                  version="1.0", state_received="TASK_STATE_WORKING", state="TASK_STATE_WORKING")
    done = status("completed")
    moved = payload_entry(EX, "event", rec(TaskState.WORKING),
                          Outcome(Action.FORWARD, status("TASK_STATE_COMPLETED"), record=rec(TaskState.COMPLETED)), done)
    assert moved is not None and moved.verdict == "rewritten"
    assert (moved.state_received, moved.state) == ("completed", "TASK_STATE_COMPLETED")


def test_the_engine_s_verdicts_read_as_the_timeline_s() -> None:
    """A late event after a terminal state, judged by the real engine: dropped, with the finding."""
    record = rec(TaskState.COMPLETED)
    payload = status("TASK_STATE_WORKING")
    outcome = engine.check_payload(EX, None, record, payload, Clock(2000.0))
    entry = payload_entry(EX, "event", record, outcome, payload)
    assert entry is not None and entry.verdict in ("dropped", "rewritten")
    assert entry.state == "TASK_STATE_COMPLETED" and entry.state_received == "TASK_STATE_WORKING"
    assert any(category == "divergence" for category, _, _ in entry.findings)
    refused = Outcome(Action.REJECT, None, error=(-32006, "unknown state"),
                      findings=[Finding("divergence", "unknown_state", "'Bogus'")])
    entry = payload_entry(EX, "answer", rec(TaskState.WORKING), refused, status("Bogus"))
    assert entry is not None and (entry.verdict, entry.error) == ("rejected", "-32006 unknown state")


def test_a_probe_is_always_an_entry_with_its_reason() -> None:
    payload = status("TASK_STATE_WORKING")
    out = Outcome(Action.FORWARD, payload, record=rec(TaskState.WORKING))
    entry = payload_entry(EX, "probe", rec(TaskState.WORKING), out, payload, forced_get="heartbeat_gap")
    assert entry is not None and (entry.direction, entry.forced_get) == ("probe", "heartbeat_gap")


@pytest.mark.parametrize(("mode", "verdict"), [(Mode.ENFORCE, "answered_locally"), (Mode.OBSERVE, "forwarded")])
def test_a_task_action_on_a_terminal_task(mode: Mode, verdict: str) -> None:
    ex = Exchange("w", Operation.SEND, ProtocolVersion.V1_0, "t-1", mode=mode)
    record = rec(TaskState.CANCELED)
    entry = request_entry(ex, record, engine.check_request(ex, record))
    assert entry is not None and entry.verdict == verdict and entry.direction == "request"
    assert [(c, k) for c, k, _ in entry.findings] == [("rejection", "terminal_task")]
    assert (entry.error is not None) is (mode is Mode.ENFORCE)
    live = rec(TaskState.WORKING)
    assert request_entry(ex, live, engine.check_request(ex, live)) is None


def test_an_entry_round_trips_through_its_document() -> None:
    entry = TimelineEntry("probe", "rewritten", method="GetTask", binding="jsonrpc", version="0.3",
                          state_received="working", state="TASK_STATE_COMPLETED",
                          findings=(("divergence", "terminal_regression", "t-1 …"),), forced_get="restart",
                          error=None, at=1234.5)
    assert TimelineEntry.from_doc(entry.to_doc()) == entry
