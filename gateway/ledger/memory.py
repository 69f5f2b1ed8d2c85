"""In-memory task ledger: the reference implementation, single process only.

Bounded: at most ``max_tasks`` records. When full, the least recently updated terminal record
is evicted first (then the least recently updated of any kind); each eviction is logged with
the task id and counted in :attr:`MemoryLedger.evicted`. Nothing survives a restart. The
number of records in each state is kept up to date by ``put``, eviction and ``prune``, so
``count_by_state`` costs one entry per state, not one per record.

Plain dicts (insertion-ordered) hold the :class:`~gateway.ledger.base.Stored` records and the
terminal index, sharing one key tuple per task, so a tracked task costs well under 1 KiB
(``bench/ledger_bench.py`` measures it). The record given to ``put`` is kept as is (it is
frozen); only its small ``Stored`` wrapper is new.
"""

from __future__ import annotations

import logging

from gateway.errors import VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.ledger.base import Stored

_log = logging.getLogger("a2a_gateway")
Key = tuple[str, str]


class MemoryLedger:
    """Dict-backed :class:`~gateway.ledger.base.TaskLedger`.

    Args:
        max_tasks: the bound on tracked tasks (default 100 000).
    """

    backend = "memory"

    def __init__(self, max_tasks: int = 100_000) -> None:
        self._records: dict[Key, Stored] = {}
        self._terminal: dict[Key, None] = {}
        self._counts: dict[str, int] = {}  # state value -> records in it (no zero entries)
        self._max = max_tasks
        self.evicted = 0

    async def open(self) -> None:
        """Nothing to open."""

    async def get(self, upstream: str, task_id: str) -> Stored | None:
        """The record of (``upstream``, ``task_id``) with its version, or ``None``."""
        return self._records.get((upstream, task_id))

    async def put(self, record: TaskRecord, expected_version: int) -> int:
        """Compare-and-set on the version; see :meth:`TaskLedger.put`. Returns the new
        version."""
        key = (record.upstream, record.task_id)
        current = self._records.pop(key, None)
        stored_version = current.version if current is not None else 0
        if stored_version != expected_version:
            if current is not None:
                self._records[key] = current
            raise VersionConflictError(f"{key}: stored {stored_version}, expected {expected_version}")
        version = expected_version + 1
        self._records[key] = Stored(record, version)  # re-inserted: least recently updated first
        if current is not None:
            self._uncount(current.record.state.value)
        state = record.state.value
        self._counts[state] = self._counts.get(state, 0) + 1
        if record.terminal:
            self._terminal.pop(key, None)
            self._terminal[key] = None
        if len(self._records) > self._max:
            self._evict()
        return version

    def _evict(self) -> None:
        if self._terminal:
            victim = next(iter(self._terminal))
            del self._terminal[victim]
        else:
            victim = next(iter(self._records))
        stored = self._records.pop(victim)
        self._uncount(stored.record.state.value)
        self.evicted += 1
        _log.warning("ledger_evicted", extra={"upstream": victim[0], "task_id": victim[1],
                                               "state": stored.record.state.value,
                                               "backend": self.backend})

    def _uncount(self, state: str) -> None:
        left = self._counts[state] - 1
        if left:
            self._counts[state] = left
        else:
            del self._counts[state]

    async def count_by_state(self) -> dict[str, int]:
        """Tracked tasks by canonical state value (states with none are absent); a copy of the
        counts kept on every change."""
        return dict(self._counts)

    async def mark_resync(self) -> int:
        """Nothing survives a restart, so nothing needs a resync."""
        return 0

    async def prune(self, older_than: float) -> int:
        """Drop terminal records last observed before ``older_than``."""
        doomed = [k for k in self._terminal if self._records[k].record.observed_at < older_than]
        for key in doomed:
            del self._terminal[key]
            self._uncount(self._records.pop(key).record.state.value)
        return len(doomed)

    async def close(self) -> None:
        """Nothing to release."""
