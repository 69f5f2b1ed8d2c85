"""In-memory task ledger: the reference implementation, single process only.

Bounded: at most ``max_tasks`` records; when full, the oldest terminal records are evicted
first (then the oldest of any kind), and each eviction is counted in ``evicted``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict

from gateway.invariants.model import TaskRecord
from gateway.ledger.base import VersionConflictError


class MemoryLedger:
    """Dict-backed :class:`~gateway.ledger.base.TaskLedger`.

    Args:
        max_tasks: the bound on tracked tasks (default 100 000).
    """

    backend = "memory"

    def __init__(self, max_tasks: int = 100_000) -> None:
        self._records: OrderedDict[tuple[str, str], TaskRecord] = OrderedDict()
        self._max = max_tasks
        self.evicted = 0

    async def get(self, upstream: str, task_id: str) -> TaskRecord | None:
        """The record of (``upstream``, ``task_id``), or ``None``."""
        return self._records.get((upstream, task_id))

    async def put(self, record: TaskRecord, expected_version: int) -> TaskRecord:
        """Compare-and-set on ``version``; see :meth:`TaskLedger.put`."""
        key = (record.upstream, record.task_id)
        current = self._records.get(key)
        stored_version = current.version if current is not None else 0
        if stored_version != expected_version:
            raise VersionConflictError(f"{key}: stored {stored_version}, expected {expected_version}")
        stored = dataclasses.replace(record, version=expected_version + 1)
        self._records[key] = stored
        self._records.move_to_end(key)
        if len(self._records) > self._max:
            self._evict()
        return stored

    def _evict(self) -> None:
        victim = next((k for k, r in self._records.items() if r.terminal), None)
        if victim is None:
            victim = next(iter(self._records))
        del self._records[victim]
        self.evicted += 1

    def count_by_state(self) -> dict[str, int]:
        """Tracked tasks by canonical state."""
        return dict(Counter(r.state.value for r in self._records.values()))

    async def close(self) -> None:
        """Nothing to release."""
