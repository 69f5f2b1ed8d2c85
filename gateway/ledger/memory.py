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

The replay window (docs/resume.md §2.4), the reference the durable backends are tested
against: per task a deque of ``(seq, at, event)`` and its payload bytes, and one deque of
``(task, seq)`` in append order for the total caps (events and bytes); ids are ``RUN.SEQ`` (a token of the process,
then a counter), so an id from before a restart is unknown.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections import deque

from gateway.errors import PushLimitError, VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.ledger.base import (
    LiveTask,
    OutboxEntry,
    PushConfigEntry,
    Replay,
    Stored,
    TimelineEntry,
    TimelineLimits,
    WindowEvent,
    WindowLimits,
    next_card_generation,
    put_then_append,
)

_log = logging.getLogger("a2a_gateway")
Key = tuple[str, str, str]  # (upstream, tenant, task_id)


class _PushStore:
    """The push relay's configs and outbox in dicts (docs/push.md §3), the reference the
    durable backends are tested against: configs by callback id (with their creation time),
    and per task a deque of outbox entries with their due times."""

    def __init__(self) -> None:
        self._push: dict[str, tuple[PushConfigEntry, float]] = {}
        self._queues: dict[tuple[str, str, str], deque[list]] = {}  # [entry, due]
        self._outbox_seq = 0
        self._outbox_n = 0

    async def put_push_config(self, entry: PushConfigEntry, at: float, *, max_per_task: int,
                              max_total: int) -> None:
        """See :meth:`TaskLedger.put_push_config`."""
        old = self._push.get(entry.callback_id)
        same = [e for e, _ in self._push.values() if (e.upstream, e.tenant, e.task_id) ==
                (entry.upstream, entry.tenant, entry.task_id) and e.callback_id != entry.callback_id]
        if len(same) >= max_per_task:
            raise PushLimitError(f"task {entry.task_id}: {max_per_task} push configs already")
        if old is None and len(self._push) >= max_total:
            raise PushLimitError(f"{max_total} push configs already")
        self._push[entry.callback_id] = (entry, at if old is None else old[1])

    async def get_push_config(self, callback_id: str) -> PushConfigEntry | None:
        """See :meth:`TaskLedger.get_push_config`."""
        found = self._push.get(callback_id)
        return None if found is None else found[0]

    async def push_configs(self, upstream: str, task_id: str, *, tenant: str = "") -> list[PushConfigEntry]:
        """See :meth:`TaskLedger.push_configs`."""
        return [e for e, _ in self._push.values()
                if (e.upstream, e.tenant, e.task_id) == (upstream, tenant, task_id)]

    async def delete_push_config(self, callback_id: str) -> bool:
        """See :meth:`TaskLedger.delete_push_config`."""
        return self._push.pop(callback_id, None) is not None

    async def prune_push_configs(self, older_than: float) -> int:
        """See :meth:`TaskLedger.prune_push_configs`."""
        doomed = [k for k, (_, at) in self._push.items() if at < older_than]
        for key in doomed:
            del self._push[key]
        return len(doomed)

    async def outbox_add(self, upstream: str, task_id: str, callback_id: str, body: bytes, at: float,
                         *, tenant: str = "", max_per_task: int, max_total: int) -> str:
        """See :meth:`TaskLedger.outbox_add`."""
        key = (upstream, tenant, task_id)
        queue = self._queues.get(key)
        if self._outbox_n >= max_total:
            raise PushLimitError(f"the push outbox holds {max_total} notifications")
        if queue is not None and len(queue) >= max_per_task:
            raise PushLimitError(f"task {task_id}: {max_per_task} notifications wait already")
        self._outbox_seq += 1
        entry = OutboxEntry(str(self._outbox_seq), upstream, task_id, callback_id, body, 0, tenant)
        self._queues.setdefault(key, deque()).append([entry, at])
        self._outbox_n += 1
        return entry.entry_id

    async def outbox_claim(self, now: float, lease_seconds: float, limit: int) -> list[OutboxEntry]:
        """See :meth:`TaskLedger.outbox_claim`."""
        heads = sorted((q[0] for q in self._queues.values() if q[0][1] <= now), key=lambda h: h[1])
        for head in heads[:limit]:
            head[1] = now + lease_seconds
        return [head[0] for head in heads[:limit]]

    def _head(self, entry: OutboxEntry) -> list | None:
        queue = self._queues.get((entry.upstream, entry.tenant, entry.task_id))
        if queue and queue[0][0].entry_id == entry.entry_id:
            return queue[0]
        return None

    async def outbox_retry(self, entry: OutboxEntry, next_at: float) -> None:
        """See :meth:`TaskLedger.outbox_retry`."""
        head = self._head(entry)
        if head is not None:
            head[0] = OutboxEntry(entry.entry_id, entry.upstream, entry.task_id, entry.callback_id,
                                  entry.body, head[0].attempts + 1, entry.tenant)
            head[1] = next_at

    async def outbox_done(self, entry: OutboxEntry) -> None:
        """See :meth:`TaskLedger.outbox_done`."""
        key = (entry.upstream, entry.tenant, entry.task_id)
        if self._head(entry) is not None:
            queue = self._queues[key]
            queue.popleft()
            self._outbox_n -= 1
            if not queue:
                del self._queues[key]

    async def outbox_depth(self) -> int:
        """See :meth:`TaskLedger.outbox_depth`."""
        return self._outbox_n


class MemoryLedger(_PushStore):
    """Dict-backed :class:`~gateway.ledger.base.TaskLedger`.

    Args:
        max_tasks: the bound on tracked tasks (default 100 000).
        window: the replay window's bounds (default :class:`~gateway.ledger.base.WindowLimits`).
    """

    backend = "memory"
    timeline_limits = TimelineLimits()
    """The timeline's bounds (set by :func:`gateway.ledger.ledger_from_url`)."""

    def __init__(self, max_tasks: int = 100_000, window: WindowLimits | None = None, *,
                 run_id: str | None = None) -> None:
        self._window_limits = window or WindowLimits()
        self._windows: dict[Key, _Window] = {}
        self._appended: deque[tuple[Key, int]] = deque()  # (task, seq) in append order: the total caps
        self._total = 0  # events in all windows
        self._bytes = 0  # payload bytes in all windows
        self._seq = 0
        # ids of an earlier process are never this run's; "" (offline runs): ids 1, 2, …
        self._run = os.urandom(4).hex() if run_id is None else run_id
        self._records: dict[Key, Stored] = {}
        self._terminal: dict[Key, None] = {}
        self._live: dict[str, dict[tuple[str, str], None]] = {}  # upstream -> (tenant, task id)s not yet terminal (the sweep)
        self._counts: dict[str, int] = {}  # state value -> records in it (no zero entries)
        self._max = max_tasks
        self.evicted = 0
        self._timelines: dict[tuple[str, str, str], deque[TimelineEntry]] = {}  # least recently written first
        self._cards: dict[str, tuple[int, dict[str, str]]] = {}  # upstream -> (generation, ETag by variant)
        _PushStore.__init__(self)

    async def open(self) -> None:
        """Nothing to open."""

    async def observe_card(self, upstream: str, variant: str, etag: str) -> int:
        """See :meth:`TaskLedger.observe_card`."""
        generation, etags = self._cards.get(upstream, (0, {}))
        generation = next_card_generation(generation, etags, variant, etag)
        self._cards[upstream] = (generation, etags)
        return generation

    async def get(self, upstream: str, task_id: str, *, tenant: str = "") -> Stored | None:
        """The record of (``upstream``, ``tenant``, ``task_id``) with its version, or ``None``."""
        return self._records.get((upstream, tenant, task_id))

    async def put(self, record: TaskRecord, expected_version: int) -> int:
        """Compare-and-set on the version; see :meth:`TaskLedger.put`. Returns the new
        version."""
        key = (record.upstream, record.tenant, record.task_id)
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
        live = self._live.setdefault(record.upstream, {})
        if record.terminal:
            self._terminal.pop(key, None)
            self._terminal[key] = None
            live.pop((record.tenant, record.task_id), None)
        else:
            live[(record.tenant, record.task_id)] = None
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
        self._live.get(victim[0], {}).pop((victim[1], victim[2]), None)
        self._uncount(stored.record.state.value)
        self.evicted += 1
        _log.warning("ledger_evicted", extra={"upstream": victim[0], "tenant": victim[1],
                                               "task_id": victim[2],
                                               "state": stored.record.state.value,
                                               "backend": self.backend})

    def _uncount(self, state: str) -> None:
        left = self._counts[state] - 1
        if left:
            self._counts[state] = left
        else:
            del self._counts[state]

    def set_resync(self, upstream: str, task_id: str, flag: bool, *, tenant: str = "") -> bool:
        """Set (or clear) one record's ``needs_resync`` flag in place, without a write: what a
        durable ledger's :meth:`mark_resync` does at a restart, for offline runs
        (:class:`gateway.offline.Ledger`). False when there is no such record."""
        key = (upstream, tenant, task_id)
        stored = self._records.get(key)
        if stored is None:
            return False
        self._records[key] = Stored(stored.record, stored.version, flag)
        return True

    def records(self) -> dict[Key, Stored]:
        """Every record held, by ``(upstream, tenant, task_id)`` (a copy; offline runs and tests)."""
        return dict(self._records)

    def window(self, upstream: str, task_id: str, *, tenant: str = "") -> list[WindowEvent]:
        """The task's replay window, oldest first (a copy; offline runs and tests)."""
        window = self._windows.get((upstream, tenant, task_id))
        return [event for _, _, event in window.events] if window is not None else []

    async def probe(self) -> None:
        """Memory always takes a write."""

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

    async def live_before(self, upstream: str, before: float, *, limit: int,
                          after: LiveTask | None = None) -> list[LiveTask]:
        """Live tasks of ``upstream`` observed before ``before``, by ``(observed_at, tenant,
        task_id)``;
        one pass over the upstream's live tasks. See :meth:`TaskLedger.live_before`."""
        floor = (after.observed_at, after.tenant, after.task_id) if after is not None else None
        records = self._records
        rows = []
        for tenant, task_id in self._live.get(upstream, ()):
            at = records[(upstream, tenant, task_id)].record.observed_at
            if at < before and (floor is None or (at, tenant, task_id) > floor):
                rows.append((at, tenant, task_id))
        return [LiveTask(upstream, tenant, task_id, at)
                for at, tenant, task_id in heapq.nsmallest(limit, rows)]

    async def append_event(self, upstream: str, task_id: str, lineage: str | None,
                           payload: bytes, at: float, *, tenant: str = "") -> tuple[str, str]:
        """Append to the task's window (ids are ``RUN.SEQ``: a process-wide counter after a
        token of this process, so an id from before a restart is unknown, never another
        event's); see :meth:`TaskLedger.append_event`."""
        limits, key = self._window_limits, (upstream, tenant, task_id)
        self._seq += 1
        event_id = f"{self._run}.{self._seq}" if self._run else str(self._seq)
        lineage = lineage or event_id
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window()
        window.events.append((self._seq, at, WindowEvent(event_id, lineage, payload)))
        window.size += len(payload)
        self._total += 1
        self._bytes += len(payload)
        self._appended.append((key, self._seq))
        while window.events and (len(window.events) > limits.max_events_per_task
                                 or window.size > limits.max_bytes_per_task):
            self._pop_front(key, window)
        while self._total > limits.max_events_total or self._bytes > limits.max_bytes_total:
            self._drop_oldest()
        if not window.events:
            self._windows.pop(key, None)
        if len(self._appended) > 2 * self._total + 1024:  # entries of events trimmed per task
            self._appended = deque(sorted(((k, s) for k, w in self._windows.items() for s, _, _ in w.events),
                                          key=lambda pair: pair[1]))
        return event_id, lineage

    async def put_with_event(self, record: TaskRecord, expected_version: int, lineage: str | None,
                             payload: bytes, at: float) -> tuple[int, str, str]:
        """:meth:`put`, then :meth:`append_event` when it held (nothing awaits in between);
        see :meth:`TaskLedger.put_with_event`."""
        return await put_then_append(self, record, expected_version, lineage, payload, at)

    def _pop_front(self, key: Key, window: _Window) -> None:
        size = len(window.events.popleft()[2].payload)
        window.size -= size
        self._total -= 1
        self._bytes -= size
        if not window.events:
            self._windows.pop(key, None)

    def _drop_oldest(self) -> None:
        """Drop the oldest event still in a window, whatever its task (the total caps)."""
        while self._appended:
            key, seq = self._appended.popleft()
            window = self._windows.get(key)
            if window is not None and window.events[0][0] == seq:
                self._pop_front(key, window)
                return

    async def events_after(self, upstream: str, task_id: str, event_id: str, *,
                           tenant: str = "") -> Replay:
        """The window's events after ``event_id`` in its lineage; see
        :meth:`TaskLedger.events_after`."""
        window = self._windows.get((upstream, tenant, task_id))
        run, _, number = event_id.partition(".") if self._run else ("", "", event_id)
        if window is None or run != self._run or not (len(number) <= 19 and number.isascii() and number.isdigit()):
            return Replay(False)  # an id of no window, never an error (``int("²")`` raises)
        seq = int(number)
        for index, (s, _, event) in enumerate(window.events):
            if s == seq:
                later = (e for _, _, e in list(window.events)[index + 1:] if e.lineage == event.lineage)
                return Replay(True, event.lineage, tuple(later))
            if s > seq:
                break
        return Replay(False)

    async def prune_events(self, older_than: float) -> int:
        """Drop window events appended before ``older_than``."""
        deleted = 0
        for key, window in list(self._windows.items()):
            while window.events and window.events[0][1] < older_than:
                self._pop_front(key, window)
                deleted += 1
        return deleted

    # --- the task timeline (docs/observability.md §2) ---------------------------------------------

    async def append_timeline(self, upstream: str, task_id: str, entry: TimelineEntry, *,
                              tenant: str = "") -> None:
        """Append to the task's deque (its length bounded); the least recently written
        timeline goes when there are more than ``max_tasks``."""
        limits, key = self.timeline_limits, (upstream, tenant, task_id)
        entries = self._timelines.pop(key, None)
        if entries is None:
            entries = deque(maxlen=limits.max_entries_per_task)
        entries.append(entry)
        self._timelines[key] = entries  # re-inserted: least recently written first
        while len(self._timelines) > limits.max_tasks:
            del self._timelines[next(iter(self._timelines))]

    async def timeline(self, upstream: str, task_id: str, *, tenant: str = "") -> list[TimelineEntry]:
        """The task's entries, oldest first."""
        return list(self._timelines.get((upstream, tenant, task_id), ()))

    async def prune_timeline(self, older_than: float) -> int:
        """Drop entries kept before ``older_than`` (and timelines left empty)."""
        deleted = 0
        for key, entries in list(self._timelines.items()):
            while entries and entries[0].at < older_than:
                entries.popleft()
                deleted += 1
            if not entries:
                del self._timelines[key]
        return deleted

    async def close(self) -> None:
        """Nothing to release."""


class _Window:
    """One task's replay window: ``(seq, appended_at, event)`` oldest first, and the bytes of
    their payloads."""

    __slots__ = ("events", "size")

    def __init__(self) -> None:
        self.events: deque[tuple[int, float, WindowEvent]] = deque()
        self.size = 0
