"""The local-answer decision of docs/callers.md §3, pure: plain values in, a verdict out."""

from __future__ import annotations

import dataclasses

from gateway.a2a.jsonrpc import Operation
from gateway.a2a.states import TaskState
from gateway.a2a.version import ProtocolVersion
from gateway.invariants import engine
from gateway.invariants.model import MAX_CALLERS, Exchange, TaskRecord

DONE = TaskRecord("w", "t-1", "c-1", TaskState.COMPLETED, 1.0, callers=("fp-alice",))


def ex(caller: str | None, *also: str) -> Exchange:
    matches = frozenset({caller, *also}) if caller is not None else frozenset()
    return Exchange("w", Operation.SEND, ProtocolVersion.V1_0, "t-1", caller=caller, caller_matches=matches)


def test_a_caller_seen_on_the_task_may_be_answered_locally() -> None:
    assert engine.caller_seen(ex("fp-alice"), DONE)


def test_any_other_caller_is_sent_to_the_worker() -> None:
    assert not engine.caller_seen(ex("fp-mallory"), DONE)
    assert not engine.caller_seen(ex("fp-mallory"), dataclasses.replace(DONE, callers=()))


def test_a_fingerprint_under_an_older_secret_matches() -> None:
    """After a rotation the caller's recorded fingerprint may be the old secret's."""
    assert engine.caller_seen(ex("fp-alice-new", "fp-alice"), DONE)


def test_callers_not_told_apart_are_answered_as_before() -> None:
    assert engine.caller_seen(ex(None), dataclasses.replace(DONE, callers=()))


def test_the_terminal_refusal_itself_is_unchanged() -> None:
    """check_request still refuses; whether the refusal is sent is the caller decision's."""
    assert engine.check_request(ex("fp-mallory"), DONE).error is not None


def test_with_caller_appends_once_and_keeps_the_most_recent() -> None:
    assert engine.with_caller(ex("fp-alice"), DONE) is DONE
    assert engine.with_caller(ex(None), DONE) is DONE
    seen = engine.with_caller(ex("fp-bob"), DONE)
    assert seen.callers == ("fp-alice", "fp-bob") and seen.state is TaskState.COMPLETED
    full = dataclasses.replace(DONE, callers=tuple(f"fp-{i}" for i in range(MAX_CALLERS)))
    more = engine.with_caller(ex("fp-new"), full)
    assert len(more.callers) == MAX_CALLERS and more.callers[-1] == "fp-new" and "fp-0" not in more.callers


def test_a_new_record_carries_the_exchanges_tenant() -> None:
    from gateway.invariants.model import Clock

    tenant_ex = dataclasses.replace(ex("fp-alice"), tenant="acme", operation=Operation.GET)
    outcome = engine.check_payload(tenant_ex, None, None, {"id": "t-1", "contextId": "c-1",
                                                           "status": {"state": "TASK_STATE_WORKING"}}, Clock(5.0))
    assert outcome.record is not None and outcome.record.tenant == "acme" and outcome.record.callers == ()
