"""The task ledger interface: per-task records behind one small async Protocol.

The ledger stores :class:`~gateway.invariants.model.TaskRecord` values keyed by
(``upstream``, ``tenant``, ``task_id``) — the A2A tenant the task lives in, ``""`` for none,
its own namespace (docs/callers.md §1); every per-task method takes it as the keyword
``tenant: str = ""``, and ``put`` reads it from the record — and updates them with compare-and-set on a version it keeps beside
each record (:class:`Stored`), so two concurrent events for one task — two streams, or two
gateway replicas — can never both win a transition out of the same state. Backends: :mod:`~gateway.ledger.memory` (bounded, one
process), :mod:`~gateway.ledger.sqlite` (the embedded default, one host),
:mod:`~gateway.ledger.redis` (several replicas), :mod:`~gateway.ledger.redis_cluster` (the
same on Redis Cluster).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import orjson

from gateway.invariants.model import TaskRecord
from gateway.invariants.timeline import TimelineEntry
from gateway.records import LiveTask, PushConfigEntry, Replay, WindowEvent

__all__ = ["LiveTask", "OutboxEntry", "PushConfigEntry", "Replay", "Stored", "TaskLedger", "TimelineEntry",
           "TimelineLimits", "WindowEvent", "WindowLimits"]


@dataclass(frozen=True, slots=True)
class Stored:
    """A record as the ledger holds it: the task state and the ledger's bookkeeping beside it.

    ``version`` is the compare-and-set counter: 1 after the first ``put``, one more per ``put``.
    ``needs_resync`` is set by :meth:`TaskLedger.mark_resync` at start-up for a task that was
    live while the gateway was down (the next action on it is preceded by a forced
    ``GetTask``), and cleared by the next ``put`` of the record.
    """

    record: TaskRecord
    version: int
    needs_resync: bool = False


@dataclass(frozen=True, slots=True)
class WindowLimits:
    """The bounds of the replay window (docs/resume.md §2): per task, at most
    ``max_events_per_task`` events and ``max_bytes_per_task`` bytes of payload (the oldest go
    first); at most ``max_events_total`` events and ``max_bytes_total`` bytes of payload in
    the whole ledger (the oldest go first, whatever their task); an event older than
    ``retention_seconds`` is deleted by :meth:`TaskLedger.prune_events`. A payload larger than
    ``max_bytes_per_task`` is not kept at all (the task's window is emptied: its ids are then
    unknown, a counted gap); one larger than ``max_bytes_total`` goes by the total cap, with
    every other event of the ledger."""

    max_events_per_task: int = 1000
    max_bytes_per_task: int = 1024 * 1024
    max_events_total: int = 100_000
    max_bytes_total: int = 256 * 1024 * 1024
    retention_seconds: float = 3600.0


@dataclass(frozen=True, slots=True)
class TimelineLimits:
    """The bounds of the task timeline (docs/observability.md §2): at most
    ``max_entries_per_task`` entries per task (the oldest go first) and timelines of at most
    ``max_tasks`` tasks (the task whose timeline was least recently written goes first, whole;
    SQLite checks this every :data:`~gateway.ledger.sqlite.TIMELINE_CAP_EVERY` appends, so it
    may hold that many more for a moment). :meth:`TaskLedger.prune_timeline` deletes entries
    older than the records' retention (``ledger.retention_seconds``)."""

    max_entries_per_task: int = 200
    max_tasks: int = 10_000
    retention_seconds: float = 7 * 24 * 3600.0
    """Redis only: a timeline's list expires this long after its last entry (the other
    backends are pruned by the prune loop with the same age)."""


def encode_entry(entry: TimelineEntry) -> bytes:
    """The stored form of a timeline entry (JSON)."""
    return orjson.dumps(entry.to_doc())


def decode_entry(raw: bytes | str) -> TimelineEntry | None:
    """The entry :func:`encode_entry` stored; ``None`` for anything else (never raises)."""
    try:
        doc = orjson.loads(raw)
        return TimelineEntry.from_doc(doc) if isinstance(doc, dict) else None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One notification waiting in the durable outbox (docs/push.md §3): ``body`` is what the
    client's webhook receives, ``callback_id`` names the push config (the webhook, its token
    and authentication), ``attempts`` the delivery attempts made so far. Entries of one task
    (``upstream``, ``tenant``, ``task_id``) are delivered in the order they were added."""

    entry_id: str
    upstream: str
    task_id: str
    callback_id: str
    body: bytes
    attempts: int = 0
    tenant: str = ""


class TaskLedger(Protocol):
    """Async per-task store.

    Every method except ``put``'s conflict raises backend errors as they come; the shell turns
    them into :class:`~gateway.errors.LedgerError`.
    """

    backend: str

    async def open(self) -> None:
        """Connect / create the schema. Called once before use."""
        ...

    async def get(self, upstream: str, task_id: str, *, tenant: str = "") -> Stored | None:
        """The record of (``upstream``, ``tenant``, ``task_id``) with its version and restart
        flag, or ``None``."""
        ...

    async def put(self, record: TaskRecord, expected_version: int) -> int:
        """Store ``record`` (under its ``upstream``, ``tenant`` and ``task_id``) if the stored
        version equals ``expected_version`` (0: absent), and
        clear its ``needs_resync`` flag (a record stored by the running gateway is an
        observation made since the restart).

        Returns the new version, ``expected_version + 1``.

        Raises:
            VersionConflictError: another writer got there first; re-read and re-judge.
        """
        ...

    async def probe(self) -> None:
        """One small write the ledger takes whenever it can store a record (the readiness
        probe's, ``/readyz``): it changes nothing anyone reads, and raises as a failed ``put``
        would (read-only, full, unreachable)."""
        ...

    async def count_by_state(self) -> dict[str, int]:
        """Tracked tasks by canonical state value (``TASK_STATE_WORKING`` → n; a state with no
        task is absent), exact. Every backend keeps these counts up to date as records change
        (put, eviction, prune), so the call costs one entry per state however many tasks the
        ledger holds."""
        ...

    async def mark_resync(self) -> int:
        """Flag every non-terminal task ``needs_resync`` (crash recovery at start-up); the
        versions do not move.

        Returns how many tasks were flagged.
        """
        ...

    async def prune(self, older_than: float) -> int:
        """Delete terminal tasks last observed before ``older_than`` (epoch seconds).

        Returns how many were deleted.
        """
        ...

    async def live_before(self, upstream: str, before: float, *, limit: int,
                          after: LiveTask | None = None) -> list[LiveTask]:
        """Live (non-terminal) tasks of ``upstream`` last observed before ``before`` (epoch
        seconds), oldest observation first, at most ``limit`` (> 0) of them; with ``after`` (a
        task an earlier call returned), only those that come after it in that order — ties of
        ``observed_at`` are broken in an order of the backend's own — so a caller pages through
        them without reading a task twice (docs/sweep.md §5). Costs about ``limit`` entries of
        an index, however many tasks the ledger holds (the memory backend: one pass over the
        upstream's live tasks). ``tenant`` is ``""`` while the ledger keys no tenant.
        """
        ...

    async def append_event(self, upstream: str, task_id: str, lineage: str | None,
                           payload: bytes, at: float, *, tenant: str = "") -> tuple[str, str]:
        """Add one delivered event of (``upstream``, ``tenant``, ``task_id``) to its replay window, at
        ``at`` (epoch seconds), trimming the window to the ledger's :class:`WindowLimits`.
        ``lineage`` ``None`` starts a new lineage named after this event's id.

        Returns ``(event_id, lineage)``: the new id (opaque text, later ids of a task compare
        as later in the ledger's own order, valid on every replica sharing the ledger) and the
        event's lineage.
        """
        ...

    async def put_with_event(self, record: TaskRecord, expected_version: int, lineage: str | None,
                             payload: bytes, at: float) -> tuple[int, str, str]:
        """:meth:`put` and :meth:`append_event` of one delivered event of the record's task, as
        one operation: the event is appended only when the compare-and-set holds, and a failure
        keeps neither (docs/resume.md §2).

        Returns ``(version, event_id, lineage)``.

        Raises:
            VersionConflictError: another writer got there first; nothing was kept.
        """
        ...

    async def events_after(self, upstream: str, task_id: str, event_id: str, *,
                           tenant: str = "") -> Replay:
        """The events of ``task_id``'s window (in ``tenant``) after ``event_id`` in ``event_id``'s lineage
        (:class:`Replay`); an id that is not in the window (trimmed, expired, another task's,
        malformed) is ``Replay(found=False)``, never an error."""
        ...

    async def prune_events(self, older_than: float) -> int:
        """Delete window events appended before ``older_than`` (epoch seconds).

        Returns how many were deleted.
        """
        ...

    async def append_timeline(self, upstream: str, task_id: str, entry: TimelineEntry, *,
                              tenant: str = "") -> None:
        """Add ``entry`` (its ``at`` set) to the timeline of (``upstream``, ``tenant``,
        ``task_id``), trimmed to the ledger's :class:`TimelineLimits` (docs/observability.md §2)."""
        ...

    async def timeline(self, upstream: str, task_id: str, *, tenant: str = "") -> list[TimelineEntry]:
        """The timeline of (``upstream``, ``tenant``, ``task_id``), oldest first (empty when
        there is none)."""
        ...

    async def prune_timeline(self, older_than: float) -> int:
        """Delete timeline entries kept before ``older_than`` (epoch seconds). Returns how
        many were deleted (Redis: how many timelines, each whose last entry is that old)."""
        ...

    async def observe_card(self, upstream: str, variant: str, etag: str) -> int:
        """Record that ``upstream``'s Agent Card (the ``variant`` a worker that varies its card
        by ``A2A-Version`` serves; ``""`` for the one card) has the ETag ``etag`` now, and return
        the upstream's card generation (docs/field-cases.md F20): 1 at the first card ever
        observed, one more each time a variant's ETag differs from the one recorded for it —
        also when it comes back to an earlier one — unchanged otherwise (a repeated ETag, or a
        variant observed for the first time). Atomic, so replicas sharing the ledger count one
        change once however many observe it; one entry per upstream, an ETag per variant."""
        ...

    async def close(self) -> None:
        """Release connections and files."""
        ...

    # --- the push relay (docs/push.md) ------------------------------------------------------------

    async def put_push_config(self, entry: PushConfigEntry, at: float, *, max_per_task: int,
                              max_total: int) -> None:
        """Store ``entry`` (created at ``at``, epoch seconds) under its ``callback_id``,
        replacing an entry of that id (which may have named another task: a pending inline
        config bound to its task).

        Raises:
            PushLimitError: the task already has ``max_per_task`` configs, or the ledger
                ``max_total``; nothing was stored.
        """
        ...

    async def get_push_config(self, callback_id: str) -> PushConfigEntry | None:
        """The entry of ``callback_id``, or ``None``."""
        ...

    async def push_configs(self, upstream: str, task_id: str, *, tenant: str = "") -> list[PushConfigEntry]:
        """Every entry of the task (``task_id`` ``""``: the pending ones), oldest first."""
        ...

    async def delete_push_config(self, callback_id: str) -> bool:
        """Delete the entry of ``callback_id``; False when there was none."""
        ...

    async def prune_push_configs(self, older_than: float) -> int:
        """Delete entries created before ``older_than`` (epoch seconds); returns how many."""
        ...

    async def outbox_add(self, upstream: str, task_id: str, callback_id: str, body: bytes, at: float,
                         *, tenant: str = "", max_per_task: int, max_total: int) -> str:
        """Append one notification to the task's outbox queue, due at ``at``; durable when
        this returns. Returns its entry id.

        Raises:
            PushLimitError: the task's queue holds ``max_per_task`` entries or the outbox
                ``max_total``; nothing was added.
        """
        ...

    async def outbox_claim(self, now: float, lease_seconds: float, limit: int) -> list[OutboxEntry]:
        """Up to ``limit`` entries to deliver now: the oldest entry of each task queue whose
        due time is past, each leased (not due again) for ``lease_seconds``, so another
        replica does not claim it meanwhile. A later entry of a task is never claimed while an
        earlier one is in the outbox."""
        ...

    async def outbox_retry(self, entry: OutboxEntry, next_at: float) -> None:
        """A failed attempt: ``entry`` counts one more attempt and is due again at ``next_at``."""
        ...

    async def outbox_done(self, entry: OutboxEntry) -> None:
        """Remove ``entry`` (delivered, or dead-lettered); the task's next entry is due."""
        ...

    async def outbox_depth(self) -> int:
        """Entries in the outbox, all tasks."""
        ...


def next_card_generation(generation: int, etags: dict[str, str], variant: str, etag: str) -> int:
    """The rule of :meth:`TaskLedger.observe_card` over a stored ``generation`` (0: none yet)
    and ``etags`` by variant (mutated: ``variant`` gets ``etag``); the generation after it."""
    before = etags.get(variant)
    etags[variant] = etag
    if generation == 0 or (before is not None and before != etag):
        return generation + 1
    return generation


async def put_then_append(ledger: TaskLedger, record: TaskRecord, expected_version: int,
                          lineage: str | None, payload: bytes, at: float) -> tuple[int, str, str]:
    """:meth:`TaskLedger.put_with_event` as its two calls in turn: ``put``, then — only once it
    held — ``append_event`` on the record's task. Atomic where nothing awaits in between (the
    memory ledger); elsewhere a failure of the append (or a crash between the two) leaves the
    record stored without its event, as two separate calls would (docs/resume.md §1.6).

    Raises:
        VersionConflictError: from ``put``; nothing was appended.
    """
    version = await ledger.put(record, expected_version)
    event_id, lineage = await ledger.append_event(record.upstream, record.task_id, lineage, payload, at,
                                                  tenant=record.tenant)
    return version, event_id, lineage
