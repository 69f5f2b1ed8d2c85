"""What every proxy handler shares: config, ledger, upstream client, metrics, logger.

Also the one place where the shell calls the engine for a worker payload
(:meth:`Runtime.judge`): read the ledger, run the engine, store the record with
compare-and-set (retrying on a lost race), count the findings — all before the caller
forwards anything (write-before-forward).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.a2a.jsonrpc import Operation
from gateway.config import GatewayConfig
from gateway.errors import LedgerError
from gateway.invariants import engine
from gateway.invariants.model import (
    Clock,
    Exchange,
    Finding,
    Mode,
    Outcome,
    StreamState,
    TaskRecord,
)
from gateway.ledger.base import TaskLedger, VersionConflictError
from gateway.observability.metrics import Metrics

_CAS_ATTEMPTS = 8


@dataclass
class Runtime:
    """Shared state of one gateway process."""

    config: GatewayConfig
    ledger: TaskLedger
    client: httpx.AsyncClient
    metrics: Metrics
    log: logging.Logger

    @property
    def mode(self) -> Mode:
        """The configured :class:`Mode`."""
        return Mode(self.config.mode)

    @staticmethod
    def clock() -> Clock:
        """The current wall and monotonic time, in seconds."""
        return Clock(time.time(), time.monotonic())

    async def record_of(self, upstream: str, task_id: str | None) -> TaskRecord | None:
        """The ledger record of a task, or ``None``.

        Raises:
            LedgerError: the ledger failed.
        """
        if task_id is None:
            return None
        try:
            return await self.ledger.get(upstream, task_id)
        except LedgerError:
            raise
        except Exception as exc:  # a backend failure of any kind is a ledger failure
            raise LedgerError(str(exc)) from exc

    async def judge(
        self, ex: Exchange, stream: StreamState | None, result: Any
    ) -> Outcome:
        """Run the engine on one worker payload and store its ledger change first.

        ``ListTasks`` results are only normalized. Returns the :class:`Outcome` whose
        findings have been counted and logged.
        """
        if ex.operation is Operation.LIST:
            outcome = engine.check_list(ex, result)
            task_id = None
        else:
            task_id = engine.payload_task_id(result)
            outcome = await self._judge_with_cas(ex, stream, result, task_id)
        self.count(ex, outcome.findings, task_id=task_id)
        return outcome

    async def _judge_with_cas(
        self, ex: Exchange, stream: StreamState | None, result: Any, task_id: str | None
    ) -> Outcome:
        for _ in range(_CAS_ATTEMPTS):
            record = await self.record_of(ex.upstream, task_id)
            outcome = engine.check_payload(ex, stream, record, result, self.clock())
            if outcome.record is None:
                return outcome
            try:
                await self.ledger.put(outcome.record, record.version if record else 0)
            except VersionConflictError:
                continue
            except Exception as exc:
                raise LedgerError(str(exc)) from exc
            return outcome
        raise LedgerError(f"task {task_id}: too many concurrent updates")

    def count(
        self, ex: Exchange, findings: list[Finding], method: str = "", task_id: str | None = None
    ) -> None:
        """Count findings in metrics and log divergences at warning level (with the task id)."""
        action = "observed" if ex.mode is Mode.OBSERVE else "enforced"
        for f in findings:
            if f.category == "normalization":
                self.metrics.normalizations.labels(ex.upstream, f.kind).inc()
            elif f.category == "divergence":
                self.metrics.divergences.labels(ex.upstream, f.kind, action).inc()
                self.log.warning(
                    "divergence",
                    extra={"upstream": ex.upstream, "kind": f.kind, "detail": f.detail,
                           "task_id": task_id or ex.task_id, "action": action},
                )
            elif f.category == "rejection":
                self.metrics.rejections.labels(
                    ex.upstream, method or ex.operation.value, f.kind, action
                ).inc()
