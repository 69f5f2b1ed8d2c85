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
