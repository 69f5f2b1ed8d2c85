"""SQLite task ledger: the embedded default, durable across restarts and ``kill -9``.

One connection, owned by one worker thread, so the event loop never blocks on the file. Every
call becomes an operation on one FIFO queue, and the thread runs them strictly in call order.
The database runs in WAL mode with ``synchronous=NORMAL``.

Group commit: the operations called during one event-loop iteration are handed to the thread
together (one hand-off), and the thread runs everything queued in ONE transaction
(``BEGIN IMMEDIATE`` … ``COMMIT``, when the batch writes at all), then hands all the results
back to the loop in one callback. A ``put`` returns only after the ``COMMIT`` of its batch, so a
record the gateway stored before forwarding an event survives a crash of the process, exactly as
when every ``put`` was its own transaction; 32 concurrent ``put`` calls cost one commit instead
of 32. Reads are queued like writes: a ``get`` sees every operation called before it (even one
in the same batch) and is answered after its batch committed, never with data that could still
be rolled back.

Each operation keeps its own outcome. Compare-and-set is a single ``UPDATE … WHERE version = ?``
(or an ``INSERT`` that must not conflict) judged by its own row count, so of two ``put`` calls
from the same version in one batch exactly the second one raises
:class:`~gateway.ledger.base.VersionConflictError`; it also holds if several processes share the
file (each batch holds the write lock from ``BEGIN IMMEDIATE`` to ``COMMIT``). A statement that
fails alone (SQLite undid just that statement) fails only its own call. If the transaction as a
whole is lost — ``BEGIN`` or ``COMMIT`` failed, or SQLite rolled the whole transaction back —
nothing of the batch was delivered yet, and every operation is run again in a transaction of its
own, so each call gets the outcome it would have had alone.

Schema (created on open; ``PRAGMA user_version`` 4; the push relay's tables of version 3 are in
:mod:`gateway.ledger.sqlite_push`)::

    tasks(upstream TEXT, tenant TEXT, task_id TEXT, version INTEGER, state TEXT,
          terminal INTEGER, resync INTEGER, observed_at REAL, record BLOB,
          PRIMARY KEY (upstream, tenant, task_id))
    task_counts(state TEXT PRIMARY KEY, n INTEGER)
    events(id INTEGER PRIMARY KEY AUTOINCREMENT, upstream TEXT, task_id TEXT,
           lineage TEXT (NULL: its own id), at REAL, size INTEGER, payload BLOB, tenant TEXT)
        index (upstream, tenant, task_id, id), index (at)
    event_windows(upstream TEXT, tenant TEXT, task_id TEXT, n INTEGER, bytes INTEGER,
                  PRIMARY KEY (upstream, tenant, task_id))
    event_total(one INTEGER PRIMARY KEY CHECK (one = 1), n INTEGER, bytes INTEGER)
    card_generations(upstream TEXT PRIMARY KEY, generation INTEGER, etags TEXT (JSON: ETag by variant))

``task_counts`` holds the number of rows of ``tasks`` in each state, kept by three triggers on
``tasks`` (after an insert, a change of ``state``, a delete) in the transaction of the change
itself, so :meth:`SqliteLedger.count_by_state` reads a handful of rows however many tasks the
ledger holds, and a process of an earlier version writing the same file keeps it right too. A
database of an earlier version (``user_version`` 0: no ``task_counts``) is brought up to date
by :meth:`SqliteLedger.open`: table, triggers and the counts filled once from the tasks, in one
``BEGIN IMMEDIATE`` transaction that re-reads the version first, so of several processes
opening the file at once exactly one migrates it.

The replay window (docs/resume.md §2.2): ``events`` holds each task's window, one row per
event; the event id is the row's ``AUTOINCREMENT`` id as decimal text, never reused, so it is
valid for every process sharing the file and an id of a trimmed event is never another event's.
``event_windows`` (events and payload bytes per task, a row only while the task has events)
and ``event_total`` (events and payload bytes of all tasks) are kept by two triggers on
``events``, like ``task_counts``, so :meth:`SqliteLedger.append_event` judges its trims from
two rows, deletes from the front of the task's index (per task) or of the table (the total
caps, the smallest ids), and costs amortised O(1) however many events the ledger holds. An append is one write
operation under a savepoint: all of it is committed or none. Version 1 (and 0) databases gain
the three tables at open, in the same one transaction as above.

Version 3 puts the A2A tenant into every key (docs/callers.md §1). A database of an earlier
version is migrated in the same one transaction (:data:`_TO_TENANTS`): ``tasks`` is rebuilt
with the new primary key and its rows copied under tenant ``""`` (the counts follow through
the insert trigger), ``events`` gains a ``tenant`` column (``""`` for every existing event),
and ``event_windows`` is rebuilt from the events.

Version 4 adds ``card_generations``, each upstream's card generation and the ETag of each card
variant (docs/field-cases.md F20; :meth:`SqliteLedger.observe_card`), created empty at open on a
database of an earlier version.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from queue import SimpleQueue
from typing import Any, TypeVar

import orjson

from gateway.errors import VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.ledger import codec
from gateway.ledger.base import (
    LiveTask,
    Replay,
    Stored,
    TimelineEntry,
    TimelineLimits,
    WindowEvent,
    WindowLimits,
    decode_entry,
    encode_entry,
    next_card_generation,
)
from gateway.ledger.sqlite_push import SCHEMA as PUSH_SCHEMA
from gateway.ledger.sqlite_push import SqlitePushStore

T = TypeVar("T")

#: ``PRAGMA user_version`` of a database with every table and trigger of :data:`_SCHEMA`
#: (1: ``task_counts``; 2: the replay window's ``events``, ``event_windows``, ``event_total``).
#: Version 2 was not released before ``event_total`` gained ``bytes``, so it has no version of
#: its own: a file a development build made at version 2 without it is not migrated (delete it).
SCHEMA_VERSION = 4

# Statements, not a script: they run inside the migration's own transaction (executescript
# would commit it first).
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tasks (
        upstream    TEXT    NOT NULL,
        tenant      TEXT    NOT NULL DEFAULT '',
        task_id     TEXT    NOT NULL,
        version     INTEGER NOT NULL,
        state       TEXT    NOT NULL,
        terminal    INTEGER NOT NULL,
        resync      INTEGER NOT NULL DEFAULT 0,
        observed_at REAL    NOT NULL,
        record      BLOB    NOT NULL,
        PRIMARY KEY (upstream, tenant, task_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS tasks_terminal_observed ON tasks (terminal, observed_at)",
    """CREATE TABLE IF NOT EXISTS task_counts (
        state TEXT    NOT NULL PRIMARY KEY,
        n     INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TRIGGER IF NOT EXISTS tasks_count_insert AFTER INSERT ON tasks BEGIN
        INSERT INTO task_counts (state, n) VALUES (NEW.state, 1)
            ON CONFLICT (state) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER IF NOT EXISTS tasks_count_update AFTER UPDATE OF state ON tasks
    WHEN OLD.state IS NOT NEW.state BEGIN
        UPDATE task_counts SET n = n - 1 WHERE state = OLD.state;
        INSERT INTO task_counts (state, n) VALUES (NEW.state, 1)
            ON CONFLICT (state) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER IF NOT EXISTS tasks_count_delete AFTER DELETE ON tasks BEGIN
        UPDATE task_counts SET n = n - 1 WHERE state = OLD.state;
    END""",
    # Filled once, from the tasks the database already holds (none when it is new).
    "DELETE FROM task_counts",
    "INSERT INTO task_counts (state, n) SELECT state, COUNT(*) FROM tasks GROUP BY state",
    # -- version 2: the replay window (docs/resume.md §2.2) --
    # id is the event id (as text); AUTOINCREMENT: never reused, even after the newest row
    # went. lineage NULL: the event starts its own lineage (named after its id).
    """CREATE TABLE IF NOT EXISTS events (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        upstream TEXT    NOT NULL,
        task_id  TEXT    NOT NULL,
        lineage  TEXT,
        at       REAL    NOT NULL,
        size     INTEGER NOT NULL,
        payload  BLOB    NOT NULL,
        tenant   TEXT    NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX IF NOT EXISTS events_tenant_task ON events (upstream, tenant, task_id, id)",
    "CREATE INDEX IF NOT EXISTS events_at ON events (at)",
    # Per task: its events and their payload bytes (a row only while it has events); and the
    # events and payload bytes of all tasks (one row). Kept by triggers on events, like
    # task_counts.
    """CREATE TABLE IF NOT EXISTS event_windows (
        upstream TEXT    NOT NULL,
        tenant   TEXT    NOT NULL,
        task_id  TEXT    NOT NULL,
        n        INTEGER NOT NULL,
        bytes    INTEGER NOT NULL,
        PRIMARY KEY (upstream, tenant, task_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS event_total (
        one   INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
        n     INTEGER NOT NULL,
        bytes INTEGER NOT NULL
    )""",
    """CREATE TRIGGER IF NOT EXISTS events_window_insert AFTER INSERT ON events BEGIN
        INSERT INTO event_windows (upstream, tenant, task_id, n, bytes)
            VALUES (NEW.upstream, NEW.tenant, NEW.task_id, 1, NEW.size)
            ON CONFLICT (upstream, tenant, task_id) DO UPDATE SET n = n + 1, bytes = bytes + excluded.bytes;
        UPDATE event_total SET n = n + 1, bytes = bytes + NEW.size;
    END""",
    """CREATE TRIGGER IF NOT EXISTS events_window_delete AFTER DELETE ON events BEGIN
        UPDATE event_windows SET n = n - 1, bytes = bytes - OLD.size
            WHERE upstream = OLD.upstream AND tenant = OLD.tenant AND task_id = OLD.task_id;
        DELETE FROM event_windows
            WHERE upstream = OLD.upstream AND tenant = OLD.tenant AND task_id = OLD.task_id AND n <= 0;
        UPDATE event_total SET n = n - 1, bytes = bytes - OLD.size;
    END""",
    # Filled once, from the events the database already holds (none before version 2).
    "DELETE FROM event_windows",
    """INSERT INTO event_windows (upstream, tenant, task_id, n, bytes)
        SELECT upstream, tenant, task_id, COUNT(*), SUM(size) FROM events
        GROUP BY upstream, tenant, task_id""",
    "DELETE FROM event_total",
    "INSERT INTO event_total (one, n, bytes) SELECT 1, COUNT(*), COALESCE(SUM(size), 0) FROM events",
    # -- version 3: the task timeline (docs/observability.md §2) --
    """CREATE TABLE IF NOT EXISTS timeline (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        upstream TEXT    NOT NULL,
        tenant   TEXT    NOT NULL,
        task_id  TEXT    NOT NULL,
        at       REAL    NOT NULL,
        entry    BLOB    NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS timeline_task ON timeline (upstream, tenant, task_id, id)",
    "CREATE INDEX IF NOT EXISTS timeline_at ON timeline (at)",
    # Per task with a timeline: its entries and its newest entry's id (kept by triggers).
    """CREATE TABLE IF NOT EXISTS timelines (
        upstream TEXT    NOT NULL,
        tenant   TEXT    NOT NULL,
        task_id  TEXT    NOT NULL,
        n        INTEGER NOT NULL,
        last_id  INTEGER NOT NULL,
        PRIMARY KEY (upstream, tenant, task_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS timelines_last ON timelines (last_id)",
    """CREATE TRIGGER IF NOT EXISTS timeline_insert AFTER INSERT ON timeline BEGIN
        INSERT INTO timelines (upstream, tenant, task_id, n, last_id)
            VALUES (NEW.upstream, NEW.tenant, NEW.task_id, 1, NEW.id)
            ON CONFLICT (upstream, tenant, task_id) DO UPDATE SET n = n + 1, last_id = excluded.last_id;
    END""",
    """CREATE TRIGGER IF NOT EXISTS timeline_delete AFTER DELETE ON timeline BEGIN
        UPDATE timelines SET n = n - 1
            WHERE upstream = OLD.upstream AND tenant = OLD.tenant AND task_id = OLD.task_id;
        DELETE FROM timelines
            WHERE upstream = OLD.upstream AND tenant = OLD.tenant AND task_id = OLD.task_id AND n <= 0;
    END""",
    # -- version 3: the push relay's configs and outbox (docs/push.md §3) --
    *PUSH_SCHEMA,
    # -- version 4: each upstream's card generation (docs/field-cases.md F20) --
    """CREATE TABLE IF NOT EXISTS card_generations (
        upstream   TEXT    NOT NULL PRIMARY KEY,
        generation INTEGER NOT NULL,
        etags      TEXT    NOT NULL
    ) WITHOUT ROWID""",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)

# -- version 3: the tenant in every key (docs/callers.md §1) --
# Run before _SCHEMA on a database whose tasks table has no tenant column: what is keyed by
# (upstream, task_id) is moved aside or dropped (triggers and indexes are named globally, so
# the old ones go first, or _SCHEMA's IF NOT EXISTS would find them), _SCHEMA creates the
# new forms, and _TENANTS_COPY then copies the tasks under tenant "" (the insert trigger
# counts them into task_counts, which _SCHEMA emptied).
_TO_TENANTS = (
    "DROP TRIGGER IF EXISTS tasks_count_insert",
    "DROP TRIGGER IF EXISTS tasks_count_update",
    "DROP TRIGGER IF EXISTS tasks_count_delete",
    "DROP INDEX IF EXISTS tasks_terminal_observed",
    "ALTER TABLE tasks RENAME TO tasks_before_tenants",
    "DROP TRIGGER IF EXISTS events_window_insert",
    "DROP TRIGGER IF EXISTS events_window_delete",
    "DROP INDEX IF EXISTS events_task",
    "DROP TABLE IF EXISTS event_windows",
)
_EVENTS_TENANT = "ALTER TABLE events ADD COLUMN tenant TEXT NOT NULL DEFAULT ''"
_TENANTS_COPY = (
    """INSERT INTO tasks (upstream, tenant, task_id, version, state, terminal, resync,
                          observed_at, record)
        SELECT upstream, '', task_id, version, state, terminal, resync, observed_at, record
        FROM tasks_before_tenants""",
    "DROP TABLE tasks_before_tenants",
)

_GET = "SELECT record, version, resync FROM tasks WHERE upstream = ? AND tenant = ? AND task_id = ?"
# A put clears the restart flag (resync = 0): see TaskLedger.put.
#: The sweep's page (docs/sweep.md §5), on the ``(terminal, observed_at)`` index; ties of
#: ``observed_at`` in ``task_id`` order.
_LIVE_BEFORE = ("SELECT tenant, task_id, observed_at FROM tasks WHERE terminal = 0 AND observed_at < ? "
                "AND upstream = ? ORDER BY observed_at, tenant, task_id LIMIT ?")
_LIVE_AFTER = ("SELECT tenant, task_id, observed_at FROM tasks WHERE terminal = 0 AND observed_at < ? "
               "AND upstream = ? AND observed_at >= ? AND (observed_at, tenant, task_id) > (?, ?, ?) "
               "ORDER BY observed_at, tenant, task_id LIMIT ?")
#: (A row value, not ``observed_at > ? OR …``: with the OR, SQLite sorts every row after the
#: cursor before the LIMIT; so it reads the index from the cursor on and sorts only ties.)
_INSERT = ("INSERT INTO tasks (version, state, terminal, resync, observed_at, record, upstream, "
           "tenant, task_id) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING")
_UPDATE = ("UPDATE tasks SET version = ?, state = ?, terminal = ?, resync = 0, observed_at = ?, "
           "record = ? WHERE upstream = ? AND tenant = ? AND task_id = ? AND version = ?")

#: At most this many operations share one transaction (the write lock is held for one batch).
MAX_BATCH = 256

# -- the replay window (docs/resume.md §2.2) ------------------------------------------------------

_EVENT_INSERT = ("INSERT INTO events (upstream, tenant, task_id, lineage, at, size, payload) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)")
_EVENT_WINDOW = ("SELECT w.n, w.bytes, t.n, t.bytes FROM event_windows AS w, event_total AS t "
                 "WHERE w.upstream = ? AND w.tenant = ? AND w.task_id = ?")
_EVENT_FRONT = ("SELECT id, size FROM events WHERE upstream = ? AND tenant = ? AND task_id = ? "
                "ORDER BY id")
_EVENT_DROP_FRONT = "DELETE FROM events WHERE upstream = ? AND tenant = ? AND task_id = ? AND id <= ?"
_EVENT_OLDEST = "SELECT id, size FROM events ORDER BY id"
_EVENT_DROP_OLDEST = "DELETE FROM events WHERE id <= ?"
_EVENT_LOOKUP = ("SELECT lineage FROM events WHERE id = ? AND upstream = ? AND tenant = ? "
                 "AND task_id = ?")
# Later events of the lineage: a later event with lineage NULL starts a lineage of its own.
_EVENT_LATER = ("SELECT id, payload FROM events WHERE upstream = ? AND tenant = ? AND task_id = ? "
                "AND id > ? AND lineage = ? ORDER BY id")
_EVENT_PRUNE = ("DELETE FROM events WHERE id IN "
                "(SELECT id FROM events WHERE at < ? ORDER BY at LIMIT ?)")
#: ``prune_events`` deletes in chunks of this many events, each its own operation, so the
#: ledger's other calls are not held up behind one long delete.
PRUNE_CHUNK = 1000
_MAX_ID = 2**63 - 1

# -- the task timeline (docs/observability.md §2) -------------------------------------------------

_TIMELINE_INSERT = "INSERT INTO timeline (upstream, tenant, task_id, at, entry) VALUES (?, ?, ?, ?, ?)"
_TIMELINE_N = "SELECT n FROM timelines WHERE upstream = ? AND tenant = ? AND task_id = ?"
_TIMELINE_TRIM = ("DELETE FROM timeline WHERE upstream = ?1 AND tenant = ?2 AND task_id = ?3 AND id <= "
                  "(SELECT id FROM timeline WHERE upstream = ?1 AND tenant = ?2 AND task_id = ?3 "
                  "ORDER BY id DESC LIMIT 1 OFFSET ?4)")
_TIMELINE_TASKS = "SELECT COUNT(*) FROM timelines"
_TIMELINE_OLDEST = "SELECT upstream, tenant, task_id FROM timelines ORDER BY last_id LIMIT ?"
_TIMELINE_DROP = "DELETE FROM timeline WHERE upstream = ? AND tenant = ? AND task_id = ?"
_TIMELINE_READ = "SELECT entry FROM timeline WHERE upstream = ? AND tenant = ? AND task_id = ? ORDER BY id"
_TIMELINE_PRUNE = "DELETE FROM timeline WHERE id IN (SELECT id FROM timeline WHERE at < ? ORDER BY at LIMIT ?)"
TIMELINE_CAP_EVERY = 64
"""The bound on tasks with a timeline (``timeline.max_tasks``) is checked at every this many
appends (a count of the ``timelines`` table), not at each."""


def _append_timeline(conn: sqlite3.Connection, limits: TimelineLimits, key: tuple[str, str, str],
                     at: float, entry: bytes) -> None:
    """Insert one entry, trim its task's timeline, and now and then the number of timelines."""
    row_id = conn.execute(_TIMELINE_INSERT, (*key, at, entry)).lastrowid
    (n,) = conn.execute(_TIMELINE_N, key).fetchone()
    if n > limits.max_entries_per_task:
        conn.execute(_TIMELINE_TRIM, (*key, limits.max_entries_per_task))
    if row_id is not None and row_id % TIMELINE_CAP_EVERY == 0:
        (tasks,) = conn.execute(_TIMELINE_TASKS).fetchone()
        if tasks > limits.max_tasks:
            for old in conn.execute(_TIMELINE_OLDEST, (tasks - limits.max_tasks,)).fetchall():
                conn.execute(_TIMELINE_DROP, old)


def _observe_card(conn: sqlite3.Connection, upstream: str, variant: str, etag: str) -> int:
    row = conn.execute("SELECT generation, etags FROM card_generations WHERE upstream = ?", (upstream,)).fetchone()
    generation, etags = (0, {}) if row is None else (int(row[0]), orjson.loads(row[1]))
    generation = next_card_generation(generation, etags, variant, etag)
    conn.execute("INSERT INTO card_generations (upstream, generation, etags) VALUES (?, ?, ?) "
                 "ON CONFLICT (upstream) DO UPDATE SET generation = excluded.generation, etags = excluded.etags",
                 (upstream, generation, orjson.dumps(etags).decode()))
    return generation


def _event_number(event_id: str) -> int | None:
    """The row id an event id names, or ``None`` when it cannot be one of ours (not the
    canonical decimal text of a positive 64-bit integer)."""
    if not (0 < len(event_id) <= 19 and event_id.isascii() and event_id.isdigit()):
        return None
    number = int(event_id)
    if number < 1 or number > _MAX_ID or str(number) != event_id:
        return None
    return number


def _last_to_drop(front: sqlite3.Cursor, n: int, size: int, max_n: int,
                  max_bytes: int) -> tuple[int, int, int]:
    """Of the rows ``front`` reads (``id, size``, oldest first; ``n`` rows of ``size`` bytes in
    all), the id of the last one that must go for at most ``max_n`` rows and ``max_bytes``
    bytes to be left, and how many rows and bytes it drops; the cursor is closed."""
    last, dropped, freed = 0, 0, 0
    try:
        for old_id, old_size in front:
            if n - dropped <= max_n and size - freed <= max_bytes:
                break
            last, dropped, freed = old_id, dropped + 1, freed + old_size
    finally:
        front.close()
    return last, dropped, freed


def _put_statement(record: TaskRecord, expected_version: int) -> tuple[str, tuple[Any, ...], int]:
    """The compare-and-set statement of a ``put``, its parameters and the new version."""
    blob = codec.encode(record)
    version = expected_version + 1
    if expected_version == 0:
        return _INSERT, (version, record.state.value, int(record.terminal), record.observed_at, blob,
                         record.upstream, record.tenant, record.task_id), version
    return _UPDATE, (version, record.state.value, int(record.terminal), record.observed_at, blob,
                     record.upstream, record.tenant, record.task_id, expected_version), version


def _undo(conn: sqlite3.Connection, savepoint: str) -> None:
    """Roll back to ``savepoint`` and drop it (nothing when SQLite rolled the whole
    transaction back already: the batch sees it)."""
    try:
        conn.execute(f"ROLLBACK TO {savepoint}")
        conn.execute(f"RELEASE {savepoint}")
    except sqlite3.Error:
        pass


def _append_event(conn: sqlite3.Connection, limits: WindowLimits, upstream: str, tenant: str,
                  task_id: str, lineage: str | None, payload: bytes, at: float) -> tuple[str, str]:
    """Insert one event and trim its window, then all windows, to ``limits``; all of it or
    nothing (a savepoint inside the batch's transaction)."""
    conn.execute("SAVEPOINT append_event")
    try:
        key = (upstream, tenant, task_id)
        row_id = conn.execute(_EVENT_INSERT, (*key, lineage, at, len(payload), payload)).lastrowid
        assert row_id is not None
        n, size, total, total_bytes = conn.execute(_EVENT_WINDOW, key).fetchone()
        if n > limits.max_events_per_task or size > limits.max_bytes_per_task:
            last, dropped, freed = _last_to_drop(conn.execute(_EVENT_FRONT, key), n, size,
                                                 limits.max_events_per_task, limits.max_bytes_per_task)
            conn.execute(_EVENT_DROP_FRONT, (*key, last))
            total, total_bytes = total - dropped, total_bytes - freed
        if total > limits.max_events_total or total_bytes > limits.max_bytes_total:
            last, _, _ = _last_to_drop(conn.execute(_EVENT_OLDEST), total, total_bytes,
                                       limits.max_events_total, limits.max_bytes_total)
            conn.execute(_EVENT_DROP_OLDEST, (last,))
        conn.execute("RELEASE append_event")
    except BaseException:
        _undo(conn, "append_event")
        raise
    event_id = str(row_id)
    return event_id, lineage or event_id


def _events_after(conn: sqlite3.Connection, upstream: str, tenant: str, task_id: str,
                  event_id: str) -> Replay:
    number = _event_number(event_id)
    if number is None:
        return Replay(False)
    row = conn.execute(_EVENT_LOOKUP, (number, upstream, tenant, task_id)).fetchone()
    if row is None:
        return Replay(False)
    lineage = row[0] if row[0] is not None else event_id
    later = conn.execute(_EVENT_LATER, (upstream, tenant, task_id, number, lineage)).fetchall()
    return Replay(True, lineage, tuple(WindowEvent(str(i), lineage, bytes(p)) for i, p in later))


class _Op:
    """One queued call: ``fn(conn)`` runs in the worker thread; ``future`` gets its outcome."""

    __slots__ = ("fn", "write", "future", "ok", "value")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], write: bool,
                 future: asyncio.Future[Any]) -> None:
        self.fn = fn
        self.write = write
        self.future = future
        self.ok = False
        self.value: Any = None


class _TransactionLost(Exception):
    """The batch's transaction is gone (``COMMIT`` failed or SQLite rolled it back)."""


def _in_one_transaction(conn: sqlite3.Connection, ops: list[_Op], *, alone: bool = False) -> None:
    """Run ``ops`` in one transaction (none when they only read), each with its own outcome.

    When ``BEGIN IMMEDIATE`` fails (another process held the write lock for the whole busy
    timeout), the writes fail with that error and the reads still run.

    Raises:
        _TransactionLost: (never when ``alone``) the transaction as a whole failed after it
            began; nothing of it is committed and the outcomes are meaningless.
    """
    writes = any(op.write for op in ops)
    if writes:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for op in ops:
                if op.write:
                    op.ok, op.value = False, exc
                else:
                    _run(conn, op)
            return
    try:
        for op in ops:
            if not _run(conn, op) and writes and not conn.in_transaction:
                raise _TransactionLost  # SQLite rolled the whole transaction back
        if writes:
            conn.execute("COMMIT")
    except Exception as exc:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        if not alone:
            raise _TransactionLost from exc
        if not isinstance(exc, _TransactionLost):  # COMMIT failed: so did the one operation
            ops[0].ok, ops[0].value = False, exc


def _schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _migrate(conn: sqlite3.Connection) -> None:
    """Create the schema, or bring a database of an earlier version up to
    :data:`SCHEMA_VERSION`, in one transaction; nothing to do (and no write lock taken) when it
    is up to date. The version is read again under the write lock, so a second process opening
    the file at the same moment finds the work done and does not count the tasks twice."""
    if _schema_version(conn) >= SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if _schema_version(conn) < SCHEMA_VERSION:
            moved = _columns(conn, "tasks") and "tenant" not in _columns(conn, "tasks")
            if moved:
                for statement in _TO_TENANTS:
                    conn.execute(statement)
            events = _columns(conn, "events")
            if events and "tenant" not in events:
                conn.execute(_EVENTS_TENANT)
            for statement in _SCHEMA:
                conn.execute(statement)
            if moved:
                for statement in _TENANTS_COPY:
                    conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The column names of ``table`` (empty when there is no such table)."""
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _run(conn: sqlite3.Connection, op: _Op) -> bool:
    try:
        op.value, op.ok = op.fn(conn), True
    except Exception as exc:
        op.value, op.ok = exc, False
    return op.ok


def _resolve(future: asyncio.Future[Any], error: BaseException | None) -> None:
    """Complete ``future`` from the worker thread (in its loop)."""
    def done() -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    try:
        future.get_loop().call_soon_threadsafe(done)
    except RuntimeError:  # the loop is closed
        pass


def _hand_back(ops: list[_Op]) -> None:
    """Send the outcomes of a finished batch to the loops waiting for them (one callback per
    loop and batch)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Op]] = {}
    for op in ops:
        by_loop.setdefault(op.future.get_loop(), []).append(op)
    for loop, done in by_loop.items():
        try:
            loop.call_soon_threadsafe(_deliver, done)
        except RuntimeError:  # the loop is closed: nobody waits for these any more
            pass


def _deliver(ops: list[_Op]) -> None:
    """Resolve the futures of a finished batch (in the event loop)."""
    for op in ops:
        if op.future.done():  # the caller was cancelled
            continue
        if op.ok:
            op.future.set_result(op.value)
        else:
            op.future.set_exception(op.value)


class SqliteLedger(SqlitePushStore):
    """:class:`~gateway.ledger.base.TaskLedger` in one SQLite file.

    Args:
        path: the database file; its directory is created if missing.
        busy_timeout: seconds to wait for a lock held by another process.
    """

    backend = "sqlite"
    timeline_limits = TimelineLimits()
    """The timeline's bounds (set by :func:`gateway.ledger.ledger_from_url`)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 5.0, window: WindowLimits | None = None) -> None:
        self._window_limits = window or WindowLimits()
        self.path = Path(path)
        self._busy_ms = int(busy_timeout * 1000)
        self._conn: sqlite3.Connection | None = None
        self._queue: SimpleQueue[list[_Op] | asyncio.Future[None]] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._collecting: list[_Op] | None = None  # this loop iteration's calls, not yet handed over

    # -- the event-loop side ------------------------------------------------------------------

    def _submit(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> asyncio.Future[T]:
        if self._thread is None:
            raise RuntimeError("ledger is not open")
        loop = asyncio.get_running_loop()
        op = _Op(fn, write, loop.create_future())
        if self._collecting is None:
            self._collecting = [op]
            loop.call_soon(self._hand_over)
        else:
            self._collecting.append(op)
        return op.future

    def _hand_over(self) -> None:
        batch, self._collecting = self._collecting, None
        if batch:
            self._queue.put(batch)

    # -- the worker thread --------------------------------------------------------------------

    def _worker(self, opened: asyncio.Future[None]) -> None:
        try:
            self._conn = self._connect()
        except BaseException as exc:
            _resolve(opened, exc)
            return
        _resolve(opened, None)
        queue = self._queue
        stop: asyncio.Future[None] | None = None
        while stop is None:
            item = queue.get()
            if not isinstance(item, list):
                stop = item
                break
            batch = item
            while len(batch) < MAX_BATCH and not queue.empty():
                more = queue.get()
                if not isinstance(more, list):
                    stop = more
                    break
                batch.extend(more)
            for start in range(0, len(batch), MAX_BATCH):
                ops = batch[start:start + MAX_BATCH]
                try:
                    self._run_batch(ops)
                except BaseException as exc:  # a bug here must not leave callers waiting
                    for op in ops:
                        op.ok, op.value = False, exc
                    _hand_back(ops)
        self._conn.close()
        self._conn = None
        _resolve(stop, None)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            # Several processes opening one file at once (serve --workers N): the switch to
            # WAL (an exclusive lock) can be refused at once, without the busy handler, while
            # another connection reads; retried here, on the ledger's own thread, for up to
            # busy_timeout.
            deadline = time.monotonic() + self._busy_ms / 1000
            while True:
                try:
                    conn.execute("PRAGMA journal_mode = WAL")
                    conn.execute("PRAGMA synchronous = NORMAL")
                    _migrate(conn)
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
        except BaseException:
            conn.close()
            raise
        return conn

    def _run_batch(self, ops: list[_Op]) -> None:
        conn = self._conn
        assert conn is not None
        try:
            _in_one_transaction(conn, ops)
        except _TransactionLost:
            for op in ops:
                _in_one_transaction(conn, [op], alone=True)
        _hand_back(ops)

    # -- the ledger ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Start the worker thread; it creates the directory, the file and the schema (or
        migrates a database of an earlier version: ``task_counts`` is created and filled once)
        and switches to WAL.

        Raises:
            sqlite3.Error: the file cannot be opened or migrated (for one, another process held
                the write lock longer than ``busy_timeout``).
        """
        if self._thread is not None:
            raise RuntimeError("ledger is already open")
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue = SimpleQueue()
        self._thread = threading.Thread(target=self._worker, args=(opened,), name="ledger-sqlite",
                                        daemon=True)
        self._thread.start()
        try:
            await opened
        except BaseException:
            self._thread = None
            raise

    async def get(self, upstream: str, task_id: str, *, tenant: str = "") -> Stored | None:
        """The record of (``upstream``, ``tenant``, ``task_id``) with its version and restart
        flag, or ``None``.

        Raises:
            ValueError: the stored document is not a record (:func:`codec.decode`).
        """
        row = await self._submit(lambda c: c.execute(_GET, (upstream, tenant, task_id)).fetchone(),
                                 write=False)
        if row is None:
            return None
        return Stored(codec.decode(row[0]), row[1], bool(row[2]))

    async def put(self, record: TaskRecord, expected_version: int) -> int:
        """Compare-and-set on the version; see :meth:`TaskLedger.put`. Returns the new
        version."""
        sql, params, version = _put_statement(record, expected_version)
        if await self._submit(lambda c: c.execute(sql, params).rowcount, write=True) != 1:
            raise VersionConflictError(f"{record.upstream}/{record.task_id}: version moved")
        return version

    async def probe(self) -> None:
        """Write the schema version the file already holds (``PRAGMA user_version``, page 1):
        a real write in a transaction of its own batch, which a read-only or full disk, or a
        lock held past ``busy_timeout``, refuses like any ``put``."""
        await self._submit(lambda c: c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}"), write=True)

    async def count_by_state(self) -> dict[str, int]:
        """Tracked tasks by canonical state value (states with none are absent), read from
        ``task_counts``: a few rows, whatever the number of tasks."""
        rows = await self._submit(
            lambda c: c.execute("SELECT state, n FROM task_counts WHERE n > 0").fetchall(),
            write=False,
        )
        return {state: count for state, count in rows}

    async def mark_resync(self) -> int:
        """Flag every non-terminal task ``needs_resync``."""
        return await self._submit(
            lambda c: c.execute("UPDATE tasks SET resync = 1 WHERE terminal = 0").rowcount,
            write=True,
        )

    async def prune(self, older_than: float) -> int:
        """Delete terminal tasks last observed before ``older_than``."""
        return await self._submit(
            lambda c: c.execute(
                "DELETE FROM tasks WHERE terminal = 1 AND observed_at < ?", (older_than,)
            ).rowcount,
            write=True,
        )

    async def live_before(self, upstream: str, before: float, *, limit: int,
                          after: LiveTask | None = None) -> list[LiveTask]:
        """Live tasks of ``upstream`` observed before ``before``, by ``(observed_at, tenant,
        task_id)``, read on the ``(terminal, observed_at)`` index. See
        :meth:`TaskLedger.live_before`."""
        params: tuple[Any, ...]
        if after is None:
            sql, params = _LIVE_BEFORE, (before, upstream, limit)
        else:
            sql = _LIVE_AFTER
            params = (before, upstream, after.observed_at, after.observed_at, after.tenant, after.task_id, limit)
        rows = await self._submit(lambda c: c.execute(sql, params).fetchall(), write=False)
        return [LiveTask(upstream, tenant, task_id, at) for tenant, task_id, at in rows]

    async def observe_card(self, upstream: str, variant: str, etag: str) -> int:
        """See :meth:`TaskLedger.observe_card`: read and write ``card_generations`` in one
        write operation of the batch's transaction (``BEGIN IMMEDIATE``: one writer at a time,
        whatever the processes sharing the file)."""
        return await self._submit(lambda c: _observe_card(c, upstream, variant, etag), write=True)

    async def close(self) -> None:
        """Run what is queued, close the connection and stop the worker thread."""
        if self._thread is None:
            return
        self._hand_over()
        stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put(stopped)
        self._thread = None
        await stopped

    # --- the replay window (docs/resume.md §2.2) -------------------------------------------------

    async def append_event(self, upstream: str, task_id: str, lineage: str | None,
                           payload: bytes, at: float, *, tenant: str = "") -> tuple[str, str]:
        """Insert the event and trim its task's window (oldest first, to
        ``max_events_per_task`` events and ``max_bytes_per_task`` payload bytes), then the whole
        ledger (oldest first, whatever the task, to ``max_events_total`` events and
        ``max_bytes_total`` payload bytes), as one write
        operation: it keeps call order with ``put``/``get`` and returns after the ``COMMIT``
        of its batch. See :meth:`TaskLedger.append_event`.

        Returns:
            ``(event_id, lineage)``: the event's row id as decimal text (``AUTOINCREMENT``:
            never reused, valid for every process sharing the file) and its lineage.

        Raises:
            sqlite3.Error: the append failed; nothing of it was kept (its savepoint was undone).
        """
        limits = self._window_limits
        return await self._submit(lambda c: _append_event(c, limits, upstream, tenant, task_id,
                                                          lineage, payload, at), write=True)

    async def put_with_event(self, record: TaskRecord, expected_version: int, lineage: str | None,
                             payload: bytes, at: float) -> tuple[int, str, str]:
        """:meth:`put` and :meth:`append_event` as one write operation (one hand-over to the
        ledger's thread, one savepoint in its batch's transaction): the event is inserted only
        when the compare-and-set holds, and an error keeps neither. See
        :meth:`TaskLedger.put_with_event`.

        Raises:
            VersionConflictError: the version moved; nothing was kept.
            sqlite3.Error: the write failed; nothing of it was kept.
        """
        sql, params, version = _put_statement(record, expected_version)
        limits, key = self._window_limits, (record.upstream, record.tenant, record.task_id)

        def write(conn: sqlite3.Connection) -> tuple[int, str, str]:
            conn.execute("SAVEPOINT put_with_event")
            try:
                if conn.execute(sql, params).rowcount != 1:
                    raise VersionConflictError(f"{record.upstream}/{record.task_id}: version moved")
                event_id, kept = _append_event(conn, limits, *key, lineage, payload, at)
                conn.execute("RELEASE put_with_event")
            except BaseException:
                _undo(conn, "put_with_event")
                raise
            return version, event_id, kept

        return await self._submit(write, write=True)

    async def events_after(self, upstream: str, task_id: str, event_id: str, *,
                           tenant: str = "") -> Replay:
        """The window's later events of ``event_id``'s lineage, oldest first (a read
        operation: it sees every call made before it). An id that is not a row of this task's
        window, or not a row id at all, is ``Replay(False)``. See
        :meth:`TaskLedger.events_after`."""
        return await self._submit(lambda c: _events_after(c, upstream, tenant, task_id, event_id),
                                  write=False)

    # --- the task timeline (docs/observability.md §2) ---------------------------------------------

    async def append_timeline(self, upstream: str, task_id: str, entry: TimelineEntry, *,
                              tenant: str = "") -> None:
        """Insert the entry and trim the task's timeline (one write operation); see
        :meth:`TaskLedger.append_timeline`."""
        limits, key, raw = self.timeline_limits, (upstream, tenant, task_id), encode_entry(entry)
        await self._submit(lambda c: _append_timeline(c, limits, key, entry.at, raw), write=True)

    async def timeline(self, upstream: str, task_id: str, *, tenant: str = "") -> list[TimelineEntry]:
        """The task's entries, oldest first (an entry that does not decode is left out)."""
        rows = await self._submit(lambda c: c.execute(_TIMELINE_READ, (upstream, tenant, task_id)).fetchall(),
                                  write=False)
        return [e for e in (decode_entry(raw) for (raw,) in rows) if e is not None]

    async def prune_timeline(self, older_than: float) -> int:
        """Delete entries kept before ``older_than``, in chunks of :data:`PRUNE_CHUNK`."""
        return await self._prune_in_chunks(_TIMELINE_PRUNE, older_than)

    async def prune_events(self, older_than: float) -> int:
        """Delete every window event appended at an ``at`` before ``older_than`` (epoch
        seconds), in chunks of :data:`PRUNE_CHUNK` (one write operation each).

        Returns how many were deleted.
        """
        return await self._prune_in_chunks(_EVENT_PRUNE, older_than)

    async def _prune_in_chunks(self, sql: str, older_than: float) -> int:
        """Run the deleting ``sql`` (parameters: the time, the chunk size) until it deletes
        fewer than :data:`PRUNE_CHUNK` rows, one write operation per chunk; how many in all."""
        deleted = 0
        while True:
            n = await self._submit(lambda c: c.execute(sql, (older_than, PRUNE_CHUNK)).rowcount, write=True)
            deleted += n
            if n < PRUNE_CHUNK:
                return deleted
