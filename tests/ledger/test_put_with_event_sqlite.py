"""SQLite's put_with_event is one savepoint in its batch's transaction: a failure of the append
after the compare-and-set held keeps neither, a lost compare-and-set keeps nothing, and neither
touches the other operations of the same batch."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

from gateway.a2a.states import TaskState
from gateway.errors import VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.ledger import sqlite as sqlite_ledger
from gateway.ledger.sqlite import SqliteLedger

T0 = 1_000.0


def rec(task_id: str = "t-1", state: TaskState = TaskState.WORKING) -> TaskRecord:
    return TaskRecord(upstream="w", task_id=task_id, context_id="c-1", state=state, observed_at=T0)


async def test_a_failed_append_keeps_neither_and_spares_the_batch(tmp_path: Any, monkeypatch: Any) -> None:
    led = SqliteLedger(tmp_path / "l.db")
    await led.open()
    try:
        _, first, lineage = await led.put_with_event(rec(), 0, None, b"e1", T0)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error (injected)")

        monkeypatch.setattr(sqlite_ledger, "_append_event", broken)
        # one batch: a plain put of another task, the failing put_with_event, a lost one
        results = await asyncio.gather(
            led.put(rec("t-2"), 0),
            led.put_with_event(rec(state=TaskState.COMPLETED), 1, lineage, b"e2", T0 + 1),
            led.put_with_event(rec(state=TaskState.FAILED), 5, lineage, b"e3", T0 + 1),
            return_exceptions=True)
        monkeypatch.undo()
        assert results[0] == 1
        assert isinstance(results[1], sqlite3.OperationalError)
        assert isinstance(results[2], VersionConflictError)
        got = await led.get("w", "t-1")
        assert got is not None and (got.version, got.record.state) == (1, TaskState.WORKING)
        other = await led.get("w", "t-2")
        assert other is not None and other.version == 1
        replay = await led.events_after("w", "t-1", first)
        assert replay.found and replay.events == ()
        # the savepoint is gone: the next put_with_event goes on in the lineage
        version, second, same = await led.put_with_event(rec(state=TaskState.COMPLETED), 1, lineage, b"e4", T0 + 2)
        assert (version, same) == (2, lineage)
        assert [e.payload for e in (await led.events_after("w", "t-1", first)).events] == [b"e4"]
    finally:
        await led.close()


@pytest.mark.parametrize("expected", [0, 2])
async def test_a_lost_compare_and_set_keeps_no_event(tmp_path: Any, expected: int) -> None:
    led = SqliteLedger(tmp_path / "l.db")
    await led.open()
    try:
        _, first, lineage = await led.put_with_event(rec(), 0, None, b"e1", T0)
        with pytest.raises(VersionConflictError):
            await led.put_with_event(rec(state=TaskState.COMPLETED), expected, lineage, b"lost", T0 + 1)
        assert (await led.events_after("w", "t-1", first)).events == ()
        got = await led.get("w", "t-1")
        assert got is not None and got.version == 1
    finally:
        await led.close()
