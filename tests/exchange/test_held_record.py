"""A stream holds its record (docs/architecture.md, "A stream holds its record"): a stream
event is judged first against the record the stream last read or stored; a store over that
version proves it current, and anything else reads the record again. Driven by hand, one
command at a time: what the judge asks of the ledger is the assertion."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from gateway.a2a.jsonrpc import Operation
from gateway.a2a.states import TaskState
from gateway.a2a.version import ProtocolVersion
from gateway.errors import VersionConflictError
from gateway.exchange.commands import AppendEvent, Count, Load, Loaded, Store, StoreAndAppend
from gateway.exchange.judge import judge
from gateway.exchange.model import Policy
from gateway.invariants.model import (
    Action,
    Clock,
    Exchange,
    Outcome,
    StreamState,
    TaskRecord,
    artifact_record,
)

POLICY = Policy("w")
EX = Exchange("w", Operation.STREAM, ProtocolVersion.V1_0, None)
STREAM = StreamState(task_id="t-1", context_id="c-1")
NOW = 2_000.0


def record(state: TaskState = TaskState.WORKING, parts: int = 1, at: float = NOW) -> TaskRecord:
    return TaskRecord("w", "t-1", "c-1", state, at, artifacts={"a-1": artifact_record(False, parts)})


def chunk(text: str = "tok", last: bool = False) -> dict[str, Any]:
    return {"artifactUpdate": {"taskId": "t-1", "contextId": "c-1", "append": True, "lastChunk": last,
                               "artifact": {"artifactId": "a-1", "parts": [{"text": text}]}}}


def working() -> dict[str, Any]:
    return {"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}


class Sink:
    """The stream side of the judge's window: every event forwarded goes in (as the stream's
    own: not a dropped or refused one), its ids are noted."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def window_event(self, outcome: Outcome) -> AppendEvent | None:
        if outcome.action is not Action.FORWARD:
            return None
        return AppendEvent("t-1", None, b"payload")

    def appended(self, event_id: str, lineage: str) -> None:
        self.ids.append(event_id)


def start(result: dict[str, Any], sink: Sink | None = None) -> tuple[Generator[Any, Any, Outcome], Any]:
    gen = judge(POLICY, EX, STREAM, result, direction="event", window=sink)
    return gen, next(gen)


def finish(gen: Generator[Any, Any, Outcome], reply: Any) -> tuple[list[Any], Outcome]:
    """Send ``reply``, then answer every further command as a ledger that takes every write
    would; the commands and the outcome."""
    seen = []
    try:
        cmd = gen.send(reply)
        while True:
            seen.append(cmd)
            answer = (cmd.expected_version + 1, "e-x", "e-x") if type(cmd) is StoreAndAppend else None
            cmd = gen.send(answer)
    except StopIteration as stop:
        return seen, stop.value


def test_an_append_chunk_is_judged_on_the_held_record_and_stored_with_its_event_in_one_call():
    sink = Sink()
    gen, first = start(chunk(), sink)
    assert first == Load("t-1", "", cached=True)
    cmd = gen.send(Loaded(record(parts=3), Clock(NOW), 7, cached=True))
    assert type(cmd) is StoreAndAppend and cmd.expected_version == 7  # the held version, no read
    assert cmd.record.artifacts["a-1"].parts == 4 and cmd.event == AppendEvent("t-1", None, b"payload")
    seen, outcome = finish(gen, (8, "e-9", "e-1"))
    assert sink.ids == ["e-9"] and outcome.action is Action.FORWARD
    assert not any(type(c) in (Load, Store, StoreAndAppend) for c in seen)


def test_a_store_refused_over_the_held_version_reads_the_record_and_judges_again():
    sink = Sink()
    gen, _ = start(chunk(), sink)
    gen.send(Loaded(record(parts=3), Clock(NOW), 7, cached=True))
    assert gen.throw(VersionConflictError("moved")) == Count("ledger_conflicts")
    assert gen.send(None) == Load("t-1", "")  # a real read now
    cmd = gen.send(Loaded(record(parts=5), Clock(NOW), 9))
    assert type(cmd) is StoreAndAppend and cmd.expected_version == 9 and cmd.record.artifacts["a-1"].parts == 6


def test_an_event_that_stores_nothing_reads_the_record_to_prove_the_held_one_current():
    """A WORKING update less than a second after the last store changes nothing durable: the
    held record is read again, and with its version unchanged the outcome stands."""
    held = record(at=NOW - 0.5)
    gen, _ = start(working(), Sink())
    assert gen.send(Loaded(held, Clock(NOW), 7, cached=True)) == Load("t-1", "")
    seen, outcome = finish(gen, Loaded(held, Clock(NOW), 7))
    assert not any(type(c) in (Load, Store, StoreAndAppend) for c in seen)
    assert outcome.action is Action.FORWARD and not outcome.findings


def test_a_record_that_moved_to_a_terminal_state_meanwhile_refuses_the_event_held_on_working():
    """Another writer recorded the task COMPLETED (a cancel answered, another stream): the
    WORKING update, fine on the held WORKING record, is judged again on the fresh one — the
    task is poisoned and the client gets the recorded terminal status, not WORKING."""
    held = record(at=NOW - 0.5)
    gen, _ = start(working(), Sink())
    assert gen.send(Loaded(held, Clock(NOW), 7, cached=True)) == Load("t-1", "")
    done = TaskRecord("w", "t-1", "c-1", TaskState.COMPLETED, NOW - 0.2,
                      terminal_status={"state": "TASK_STATE_COMPLETED"})
    seen, outcome = finish(gen, Loaded(done, Clock(NOW), 8))
    assert outcome.record is not None and outcome.record.poisoned
    assert "TASK_STATE_WORKING" not in str(outcome.result) and "TASK_STATE_COMPLETED" in str(outcome.result)
    assert outcome.findings


def test_a_unary_answer_never_asks_for_the_held_record():
    gen = judge(POLICY, EX, None, {"task": {"id": "t-1", "contextId": "c-1",
                                            "status": {"state": "TASK_STATE_WORKING"}}})
    assert next(gen) == Load("t-1", "")
