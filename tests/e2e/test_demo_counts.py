"""The demo's "tracked tasks by state" come from the ledger (``a2a-gateway ledger stats``, demo/run.py
``ledger_counts``), not the ``a2a_gateway_tracked_tasks`` gauge, which is refreshed in the
background and can still show a finished task as WORKING; a summary made from the gauge alone
says that it may lag (issue #34)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from demo.run import ledger_counts, summarize_metrics
from gateway.a2a.states import TaskState
from gateway.invariants.model import TaskRecord
from gateway.ledger.sqlite import SqliteLedger

ROOT = Path(__file__).resolve().parents[2]

# what a scrape can show just after a task finished: the gauge still at its last refresh
STALE_GAUGE = """\
# HELP a2a_gateway_tracked_tasks Tracked tasks by state
# TYPE a2a_gateway_tracked_tasks gauge
a2a_gateway_tracked_tasks{state="TASK_STATE_WORKING"} 1.0
"""


def test_the_demo_counts_tasks_from_the_ledger_not_the_gauge(tmp_path: Path) -> None:
    async def store() -> None:
        ledger = SqliteLedger(tmp_path / "ledger.db")
        await ledger.open()
        try:
            record = TaskRecord(upstream="worker", task_id="t-1", context_id="c-1",
                                state=TaskState.WORKING, observed_at=1000.0)
            version = await ledger.put(record, 0)
            await ledger.put(TaskRecord(upstream="worker", task_id="t-1", context_id="c-1",
                                        state=TaskState.COMPLETED, observed_at=1001.0), version)
        finally:
            await ledger.close()

    asyncio.run(store())
    by_state = ledger_counts(f"sqlite:///{tmp_path / 'ledger.db'}", ROOT)
    assert by_state == {"TASK_STATE_COMPLETED": 1}
    lines = summarize_metrics(STALE_GAUGE, by_state)
    at = lines.index("  tracked tasks by state (the ledger now: a2a-gateway ledger stats):")
    assert lines[at + 1].split() == ["TASK_STATE_COMPLETED", "1"]
    assert not any("TASK_STATE_WORKING" in line for line in lines)


def test_a_summary_from_the_gauge_alone_says_it_may_lag() -> None:
    lines = summarize_metrics(STALE_GAUGE)
    assert any("refreshed in the background: may lag" in line for line in lines)
    assert any(line.split() == ["TASK_STATE_WORKING", "1"] for line in lines)
