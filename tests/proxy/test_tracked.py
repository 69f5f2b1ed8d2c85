"""The tracked-task gauge is refreshed in the background, and a ledger failure skips a refresh."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.a2a.states import TaskState
from gateway.config import parse_config
from gateway.invariants.model import TaskRecord
from gateway.ledger.memory import MemoryLedger
from gateway.observability.metrics import Metrics
from gateway.proxy.runtime import Runtime
from gateway.proxy.tracked import refresh_tracked_forever


class CountingLedger(MemoryLedger):
    """A memory ledger whose ``count_by_state`` fails while ``failing`` and reports each call."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.calls: asyncio.Queue[None] = asyncio.Queue()

    async def count_by_state(self) -> dict[str, int]:
        self.calls.put_nowait(None)
        if self.failing:
            raise OSError("disk gone")
        return await super().count_by_state()


def runtime(ledger: MemoryLedger) -> Runtime:
    config = parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/"}]})
    client: Any = None  # no upstream traffic here
    return Runtime(config=config, ledger=ledger, client=client,
                   metrics=Metrics(CollectorRegistry()), log=logging.getLogger("test"))


def sample(rt: Runtime, name: str, **labels: str) -> float | None:
    return rt.metrics.registry.get_sample_value(name, labels)


async def next_refresh(ledger: CountingLedger) -> None:
    """Wait until the loop has asked the ledger once more and handled the answer."""
    await asyncio.wait_for(ledger.calls.get(), timeout=5)
    await asyncio.sleep(0)  # the loop's own continuation after the call


async def test_the_gauge_follows_the_ledger_and_survives_a_failure() -> None:
    ledger = CountingLedger()
    rt = runtime(ledger)
    await ledger.put(TaskRecord(upstream="w", task_id="t-1", context_id=None,
                                state=TaskState.WORKING, observed_at=1.0), 0)
    loop = asyncio.create_task(refresh_tracked_forever(rt, every=0.01))
    try:
        await next_refresh(ledger)  # the first refresh comes at once
        assert sample(rt, "a2a_gateway_tracked_tasks", state="TASK_STATE_WORKING") == 1
        assert sample(rt, "a2a_gateway_tracked_tasks", state="TASK_STATE_COMPLETED") == 0

        ledger.failing = True
        await ledger.put(TaskRecord(upstream="w", task_id="t-1", context_id=None,
                                    state=TaskState.COMPLETED, observed_at=2.0), 1)
        await next_refresh(ledger)
        await next_refresh(ledger)  # still running after the failure
        assert sample(rt, "a2a_gateway_ledger_errors_total", backend="memory",
                      operation="count") >= 1
        assert sample(rt, "a2a_gateway_tracked_tasks", state="TASK_STATE_WORKING") == 1  # kept

        ledger.failing = False
        await next_refresh(ledger)
        assert sample(rt, "a2a_gateway_tracked_tasks", state="TASK_STATE_WORKING") == 0
        assert sample(rt, "a2a_gateway_tracked_tasks", state="TASK_STATE_COMPLETED") == 1
        assert not loop.done()
    finally:
        loop.cancel()
    assert sample(rt, "a2a_gateway_ledger_operation_duration_seconds_count", backend="memory",
                  operation="count") >= 4
