"""The task ledger as the running gateway uses it: a :class:`~gateway.ledger.base.TaskLedger`
wrapper that times and counts every call by its method name, so no call site wraps a call in
a helper of its own.

Each call is timed (``a2a_gateway_ledger_operation_duration_seconds{backend, operation}``); a
failure — anything but a lost compare-and-set (:class:`~gateway.errors.VersionConflictError`)
or a push bound (:class:`~gateway.errors.PushLimitError`), which pass through — is counted
(``a2a_gateway_ledger_errors_total{backend, operation}``), logged (``ledger_error``), noted in
:attr:`InstrumentedLedger.down` and raised as :class:`~gateway.errors.LedgerError`; a write
that is answered clears :attr:`~InstrumentedLedger.down` (the ledger can be written:
``/readyz``). ``operation`` is the method's name, but ``count`` for :meth:`count_by_state`;
``open``, ``mark_resync`` and ``close`` (start-up and shutdown) are passed through untimed.
What a failure means for a request (fail closed, or relay unchecked) is the exchange's
decision (:mod:`gateway.exchange.judge`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from gateway.errors import LedgerError, PushLimitError, VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.invariants.timeline import TimelineEntry
from gateway.ledger.base import OutboxEntry, PushConfigEntry, Stored, TaskLedger
from gateway.observability.metrics import Metrics
from gateway.records import LiveTask, Replay

T = TypeVar("T")

LEDGER_WRITES = frozenset({"put", "put_with_event", "append_event", "append_timeline", "outbox_add",
                           "put_push_config", "probe"})
"""The ledger operations that write: one that succeeds shows the ledger can be written."""


class InstrumentedLedger:
    """``inner`` (any :class:`~gateway.ledger.base.TaskLedger`) with every call timed and
    counted on ``metrics``, failures logged on ``log`` (see the module docstring)."""

    def __init__(self, inner: TaskLedger, metrics: Metrics, log: logging.Logger) -> None:
        self.inner = inner
        """The wrapped ledger (a test that breaks the ledger patches this one)."""
        self.backend = inner.backend
        self.metrics = metrics
        self.log = log
        self.down: str | None = None
        """Why the ledger could not be written at the last failed call (``None``: it could)."""

    @property
    def evicted(self) -> int:
        """The memory ledger's evictions (0 for a durable one; docs/architecture.md, "A stream
        holds its record")."""
        evicted: int = getattr(self.inner, "evicted", 0)
        return evicted

    async def _run(self, operation: str, call: Awaitable[T]) -> T:
        """Await one ledger call, timed and with failures counted.

        Raises:
            VersionConflictError, PushLimitError: passed through. LedgerError: any other failure.
        """
        backend = self.backend
        started = time.perf_counter()
        try:
            result = await call
        except (VersionConflictError, PushLimitError):
            if self.down is not None and operation in LEDGER_WRITES:
                self.down = None  # it answered a write: it can be written
            raise
        except Exception as exc:
            self.metrics.ledger_errors.labels(backend, operation).inc()
            error = f"{type(exc).__name__}: {exc}"
            self.log.error("ledger_error", extra={"backend": backend, "operation": operation, "error": error})
            self.down = f"{operation}: {error}"[:300]
            raise LedgerError(f"{backend} ledger {operation} failed") from exc
        finally:
            self.metrics.ledger_duration.labels(backend, operation).observe(time.perf_counter() - started)
        if self.down is not None and operation in LEDGER_WRITES:
            self.down = None
        return result

    async def timed(self, operation: str, call: Awaitable[T]) -> T:
        """Await ``call``, a call of a store that lives beside the task ledger on its connection
        (the retry keys of docs/retries.md §3), timed and counted as ``operation`` like the
        ledger's own calls. Raises as :meth:`_run`."""
        return await self._run(operation, call)

    # --- the TaskLedger protocol, each method through _run ----------------------------------------

    async def open(self) -> None:
        """Not timed (start-up: a failure stops the gateway)."""
        await self.inner.open()

    async def get(self, upstream: str, task_id: str, *, tenant: str = "") -> Stored | None:
        return await self._run("get", self.inner.get(upstream, task_id, tenant=tenant))

    async def put(self, record: TaskRecord, expected_version: int) -> int:
        return await self._run("put", self.inner.put(record, expected_version))

    async def probe(self) -> None:
        await self._run("probe", self.inner.probe())

    async def count_by_state(self) -> dict[str, int]:
        return await self._run("count", self.inner.count_by_state())

    async def mark_resync(self) -> int:
        """Not timed (start-up: a failure stops the gateway)."""
        return await self.inner.mark_resync()

    async def prune(self, older_than: float) -> int:
        return await self._run("prune", self.inner.prune(older_than))

    async def live_before(self, upstream: str, before: float, *, limit: int,
                          after: LiveTask | None = None) -> list[LiveTask]:
        return await self._run("live_before", self.inner.live_before(upstream, before, limit=limit, after=after))

    async def append_event(self, upstream: str, task_id: str, lineage: str | None, payload: bytes, at: float, *,
                           tenant: str = "") -> tuple[str, str]:
        return await self._run("append_event", self.inner.append_event(upstream, task_id, lineage, payload, at,
                                                                        tenant=tenant))

    async def put_with_event(self, record: TaskRecord, expected_version: int, lineage: str | None,
                             payload: bytes, at: float) -> tuple[int, str, str]:
        return await self._run("put_with_event", self.inner.put_with_event(record, expected_version, lineage,
                                                                            payload, at))

    async def events_after(self, upstream: str, task_id: str, event_id: str, *, tenant: str = "") -> Replay:
        return await self._run("events_after", self.inner.events_after(upstream, task_id, event_id, tenant=tenant))

    async def prune_events(self, older_than: float) -> int:
        return await self._run("prune_events", self.inner.prune_events(older_than))

    async def append_timeline(self, upstream: str, task_id: str, entry: TimelineEntry, *, tenant: str = "") -> None:
        await self._run("append_timeline", self.inner.append_timeline(upstream, task_id, entry, tenant=tenant))

    async def timeline(self, upstream: str, task_id: str, *, tenant: str = "") -> list[TimelineEntry]:
        return await self._run("timeline", self.inner.timeline(upstream, task_id, tenant=tenant))

    async def prune_timeline(self, older_than: float) -> int:
        return await self._run("prune_timeline", self.inner.prune_timeline(older_than))

    async def observe_card(self, upstream: str, variant: str, etag: str) -> int:
        return await self._run("observe_card", self.inner.observe_card(upstream, variant, etag))

    async def close(self) -> None:
        """Not timed (shutdown)."""
        await self.inner.close()

    async def put_push_config(self, entry: PushConfigEntry, at: float, *, max_per_task: int,
                              max_total: int) -> None:
        await self._run("put_push_config", self.inner.put_push_config(entry, at, max_per_task=max_per_task,
                                                                      max_total=max_total))

    async def get_push_config(self, callback_id: str) -> PushConfigEntry | None:
        return await self._run("get_push_config", self.inner.get_push_config(callback_id))

    async def push_configs(self, upstream: str, task_id: str, *, tenant: str = "") -> list[PushConfigEntry]:
        return await self._run("push_configs", self.inner.push_configs(upstream, task_id, tenant=tenant))

    async def delete_push_config(self, callback_id: str) -> bool:
        return await self._run("delete_push_config", self.inner.delete_push_config(callback_id))

    async def prune_push_configs(self, older_than: float) -> int:
        return await self._run("prune_push_configs", self.inner.prune_push_configs(older_than))

    async def outbox_add(self, upstream: str, task_id: str, callback_id: str, body: bytes, at: float, *,
                         tenant: str = "", max_per_task: int, max_total: int) -> str:
        return await self._run("outbox_add", self.inner.outbox_add(upstream, task_id, callback_id, body, at,
                                                                  tenant=tenant, max_per_task=max_per_task,
                                                                  max_total=max_total))

    async def outbox_claim(self, now: float, lease_seconds: float, limit: int) -> list[OutboxEntry]:
        return await self._run("outbox_claim", self.inner.outbox_claim(now, lease_seconds, limit))

    async def outbox_retry(self, entry: OutboxEntry, next_at: float) -> None:
        await self._run("outbox_retry", self.inner.outbox_retry(entry, next_at))

    async def outbox_done(self, entry: OutboxEntry) -> None:
        await self._run("outbox_done", self.inner.outbox_done(entry))

    async def outbox_depth(self) -> int:
        return await self._run("outbox_depth", self.inner.outbox_depth())

    def __getattr__(self, name: str) -> Any:
        """Anything else of the wrapped ledger (a backend's own attributes)."""
        return getattr(self.inner, name)
