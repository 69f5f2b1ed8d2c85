"""The instrumented ledger (gateway/proxy/instrumented.py): every call of the running gateway
timed and counted by its method name, a failure logged and raised as ``LedgerError``, and
whether the ledger can be written noted for ``/readyz`` — a ``TaskLedger`` wrapper, no helper at
the call sites (issue #29)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from gateway.a2a.states import TaskState
from gateway.errors import LedgerError, VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.ledger.memory import MemoryLedger
from gateway.observability.metrics import Metrics
from gateway.proxy.instrumented import InstrumentedLedger


class Flaky(MemoryLedger):
    broken = False

    async def get(self, upstream: str, task_id: str, *, tenant: str = "") -> object:
        if self.broken:
            raise OSError("disk gone")
        return await super().get(upstream, task_id, tenant=tenant)


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_calls_are_timed_and_failures_counted_by_method_name(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics(CollectorRegistry())
    inner = Flaky()
    ledger = InstrumentedLedger(inner, metrics, logging.getLogger("test.instrumented"))
    record = TaskRecord("w", "t-1", "c-1", TaskState.WORKING, 1.0)

    async def scenario() -> None:
        assert await ledger.put(record, 0) == 1
        assert (await ledger.get("w", "t-1")).record == record  # type: ignore[union-attr]
        assert await ledger.count_by_state() == {"TASK_STATE_WORKING": 1}
        with pytest.raises(VersionConflictError):  # a lost compare-and-set is no failure
            await ledger.put(record, 0)
        inner.broken = True
        with pytest.raises(LedgerError):
            await ledger.get("w", "t-1")
        assert ledger.down == "get: OSError: disk gone"
        await ledger.put(record, 1)  # a write answered: the ledger can be written again
        assert ledger.down is None

    with caplog.at_level(logging.ERROR, logger="test.instrumented"):
        asyncio.run(scenario())
    hist = "a2a_gateway_ledger_operation_duration_seconds_count"
    assert sample(metrics, hist, backend="memory", operation="put") == 3
    assert sample(metrics, hist, backend="memory", operation="get") == 2
    assert sample(metrics, hist, backend="memory", operation="count") == 1  # count_by_state's name
    assert sample(metrics, "a2a_gateway_ledger_errors_total", backend="memory", operation="get") == 1
    assert sample(metrics, "a2a_gateway_ledger_errors_total", backend="memory", operation="put") is None
    [line] = [r for r in caplog.records if r.getMessage() == "ledger_error"]
    assert (line.backend, line.operation) == ("memory", "get")  # type: ignore[attr-defined]
    assert ledger.evicted == 0 and ledger.backend == "memory" and ledger.inner is inner
