"""forced_get_reason: why the gateway asks GetTask before acting on an existing task."""

from __future__ import annotations

import pytest

from gateway.a2a.states import TaskState
from gateway.invariants.admission import CardView, forced_get_reason
from gateway.invariants.model import TaskRecord

NOW = 1_780_000_000.0
CARD = CardView(doc={}, fresh=True, reachable=True, etag='"e1"')
LIVE = TaskRecord("w", "t-1", "c-1", TaskState.WORKING, NOW - 1.0, card_etag='"e1"')


def reason(record: TaskRecord | None, card: CardView = CARD, *, needs_resync: bool = False) -> str | None:
    return forced_get_reason(record, card, needs_resync=needs_resync, now=NOW, heartbeat_seconds=30.0)


def test_a_fresh_live_task_needs_no_poll() -> None:
    assert reason(LIVE) is None


def test_the_ledger_flag_beside_the_record_means_restart_and_comes_first() -> None:
    unreachable = CardView(doc=None, fresh=False, reachable=False, etag=None)
    assert reason(LIVE, needs_resync=True) == "restart"
    assert reason(LIVE, unreachable, needs_resync=True) == "restart"
    assert reason(LIVE, unreachable) == "card_unreachable"


@pytest.mark.parametrize("record", [None, TaskRecord("w", "t-1", "c-1", TaskState.COMPLETED, 0.0)])
def test_unknown_or_terminal_tasks_are_never_polled_even_after_a_restart(record: TaskRecord | None) -> None:
    assert reason(record, needs_resync=True) is None


def test_changed_card_then_heartbeat_gap() -> None:
    assert reason(LIVE, CardView(doc={}, fresh=True, reachable=True, etag='"e2"')) == "etag_changed"
    old = TaskRecord("w", "t-1", "c-1", TaskState.WORKING, NOW - 31.0)
    assert reason(old) == "heartbeat_gap"


def test_f20_a_later_card_generation_forces_a_get_even_with_the_same_etag() -> None:
    """docs/field-cases.md F20: the card went A → B → A since the task was observed under A
    (generation 1): the ETags agree, the generation does not."""
    observed = TaskRecord("w", "t-1", "c-1", TaskState.INPUT_REQUIRED, NOW - 1.0, card_etag='"A"', card_generation=1)
    assert reason(observed, CardView(doc={}, fresh=True, reachable=True, etag='"A"', generation=1)) is None
    assert reason(observed, CardView(doc={}, fresh=True, reachable=True, etag='"A"', generation=3)) == "etag_changed"


def test_f20_generations_decide_when_both_are_known_etags_otherwise() -> None:
    # an older card generation than the task's (a replica behind): no poll, whatever the ETag
    newer = TaskRecord("w", "t-1", "c-1", TaskState.WORKING, NOW - 1.0, card_etag='"B"', card_generation=4)
    assert reason(newer, CardView(doc={}, fresh=True, reachable=True, etag='"A"', generation=3)) is None
    # a record from before generations, or a card whose generation the ledger could not give
    assert reason(LIVE, CardView(doc={}, fresh=True, reachable=True, etag='"e2"', generation=5)) == "etag_changed"
    assert reason(newer, CardView(doc={}, fresh=True, reachable=True, etag='"A"')) == "etag_changed"
