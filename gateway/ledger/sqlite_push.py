"""The push relay's tables in the SQLite ledger (docs/push.md §3): the push configs and the
durable outbox, as a mixin of :class:`~gateway.ledger.sqlite.SqliteLedger` (its one
connection, its call-order queue and its group commit: an ``outbox_add`` returns after the
``COMMIT`` of its batch, so a notification the worker was answered 2xx for survives
``kill -9``).

Schema (in :data:`SCHEMA`, part of the ledger's schema version 3)::

    push_configs(callback_id TEXT PRIMARY KEY, upstream TEXT, tenant TEXT, task_id TEXT,
                 created_at REAL, data BLOB)      index (upstream, tenant, task_id)
    outbox(seq INTEGER PRIMARY KEY AUTOINCREMENT, upstream TEXT, tenant TEXT, task_id TEXT,
           callback_id TEXT, body BLOB, attempts INTEGER, due REAL)
                                                   index (upstream, tenant, task_id, seq)

A task's queue is its outbox rows in ``seq`` order; only the first is ever claimed. A claim
moves the row's ``due`` past the lease, so a second process sharing the file does not claim it
until the lease ran out.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from gateway.errors import PushLimitError
from gateway.ledger.base import OutboxEntry, PushConfigEntry

T = TypeVar("T")

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS push_configs (
        callback_id TEXT NOT NULL PRIMARY KEY,
        upstream    TEXT NOT NULL,
        tenant      TEXT NOT NULL,
        task_id     TEXT NOT NULL,
        created_at  REAL NOT NULL,
        data        BLOB NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS push_configs_task ON push_configs (upstream, tenant, task_id)",
    "CREATE INDEX IF NOT EXISTS push_configs_created ON push_configs (created_at)",
    """CREATE TABLE IF NOT EXISTS outbox (
        seq         INTEGER PRIMARY KEY AUTOINCREMENT,
        upstream    TEXT    NOT NULL,
        tenant      TEXT    NOT NULL,
        task_id     TEXT    NOT NULL,
        callback_id TEXT    NOT NULL,
        body        BLOB    NOT NULL,
        attempts    INTEGER NOT NULL DEFAULT 0,
        due         REAL    NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS outbox_task ON outbox (upstream, tenant, task_id, seq)",
)

_HEADS = """SELECT o.seq, o.upstream, o.task_id, o.callback_id, o.body, o.attempts, o.tenant
    FROM outbox AS o JOIN (SELECT MIN(seq) AS head FROM outbox GROUP BY upstream, tenant, task_id) AS h
    ON o.seq = h.head WHERE o.due <= ? ORDER BY o.due, o.seq LIMIT ?"""


def _put_config(conn: sqlite3.Connection, entry: PushConfigEntry, at: float, max_per_task: int,
                max_total: int) -> None:
    old = conn.execute("SELECT created_at FROM push_configs WHERE callback_id = ?",
                       (entry.callback_id,)).fetchone()
    (same,) = conn.execute(
        "SELECT COUNT(*) FROM push_configs WHERE upstream = ? AND tenant = ? AND task_id = ? "
        "AND callback_id != ?", (entry.upstream, entry.tenant, entry.task_id, entry.callback_id)).fetchone()
    if same >= max_per_task:
        raise PushLimitError(f"task {entry.task_id}: {max_per_task} push configs already")
    if old is None and conn.execute("SELECT COUNT(*) FROM push_configs").fetchone()[0] >= max_total:
        raise PushLimitError(f"{max_total} push configs already")
    conn.execute(
        "INSERT INTO push_configs (callback_id, upstream, tenant, task_id, created_at, data) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (callback_id) DO UPDATE SET upstream = excluded.upstream, "
        "tenant = excluded.tenant, task_id = excluded.task_id, data = excluded.data",
        (entry.callback_id, entry.upstream, entry.tenant, entry.task_id, at, entry.data))


def _add(conn: sqlite3.Connection, upstream: str, tenant: str, task_id: str, callback_id: str,
         body: bytes, at: float, max_per_task: int, max_total: int) -> str:
    if conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] >= max_total:
        raise PushLimitError(f"the push outbox holds {max_total} notifications")
    (queued,) = conn.execute("SELECT COUNT(*) FROM outbox WHERE upstream = ? AND tenant = ? AND task_id = ?",
                             (upstream, tenant, task_id)).fetchone()
    if queued >= max_per_task:
        raise PushLimitError(f"task {task_id}: {max_per_task} notifications wait already")
    seq = conn.execute("INSERT INTO outbox (upstream, tenant, task_id, callback_id, body, due) "
                       "VALUES (?, ?, ?, ?, ?, ?)", (upstream, tenant, task_id, callback_id, body, at)).lastrowid
    return str(seq)


def _claim(conn: sqlite3.Connection, now: float, lease: float, limit: int) -> list[OutboxEntry]:
    rows = conn.execute(_HEADS, (now, limit)).fetchall()
    conn.executemany("UPDATE outbox SET due = ? WHERE seq = ?", [(now + lease, row[0]) for row in rows])
    return [OutboxEntry(str(seq), up, task, cb, bytes(body), attempts, tenant)
            for seq, up, task, cb, body, attempts, tenant in rows]


def _row(row: tuple[Any, ...]) -> PushConfigEntry:
    callback_id, upstream, tenant, task_id, data = row
    return PushConfigEntry(callback_id, upstream, task_id, bytes(data), tenant)


class SqlitePushStore:
    """The push relay's part of :class:`~gateway.ledger.sqlite.SqliteLedger` (see the module)."""

    _submit: Callable[..., Any]

    async def put_push_config(self, entry: PushConfigEntry, at: float, *, max_per_task: int,
                              max_total: int) -> None:
        """See :meth:`TaskLedger.put_push_config` (one write operation)."""
        await self._submit(lambda c: _put_config(c, entry, at, max_per_task, max_total), write=True)

    async def get_push_config(self, callback_id: str) -> PushConfigEntry | None:
        """See :meth:`TaskLedger.get_push_config`."""
        row = await self._submit(lambda c: c.execute(
            "SELECT callback_id, upstream, tenant, task_id, data FROM push_configs WHERE callback_id = ?",
            (callback_id,)).fetchone(), write=False)
        return None if row is None else _row(row)

    async def push_configs(self, upstream: str, task_id: str, *, tenant: str = "") -> list[PushConfigEntry]:
        """See :meth:`TaskLedger.push_configs`."""
        rows = await self._submit(lambda c: c.execute(
            "SELECT callback_id, upstream, tenant, task_id, data FROM push_configs WHERE upstream = ? "
            "AND tenant = ? AND task_id = ? ORDER BY created_at", (upstream, tenant, task_id)).fetchall(),
            write=False)
        return [_row(row) for row in rows]

    async def delete_push_config(self, callback_id: str) -> bool:
        """See :meth:`TaskLedger.delete_push_config`."""
        n = await self._submit(lambda c: c.execute(
            "DELETE FROM push_configs WHERE callback_id = ?", (callback_id,)).rowcount, write=True)
        return bool(n)

    async def prune_push_configs(self, older_than: float) -> int:
        """See :meth:`TaskLedger.prune_push_configs`."""
        return int(await self._submit(lambda c: c.execute(
            "DELETE FROM push_configs WHERE created_at < ?", (older_than,)).rowcount, write=True))

    async def outbox_add(self, upstream: str, task_id: str, callback_id: str, body: bytes, at: float,
                         *, tenant: str = "", max_per_task: int, max_total: int) -> str:
        """See :meth:`TaskLedger.outbox_add`; returns after the ``COMMIT`` of its batch."""
        return str(await self._submit(lambda c: _add(c, upstream, tenant, task_id, callback_id, body, at,
                                                     max_per_task, max_total), write=True))

    async def outbox_claim(self, now: float, lease_seconds: float, limit: int) -> list[OutboxEntry]:
        """See :meth:`TaskLedger.outbox_claim` (one write operation: read and lease together)."""
        return list(await self._submit(lambda c: _claim(c, now, lease_seconds, limit), write=True))

    async def outbox_retry(self, entry: OutboxEntry, next_at: float) -> None:
        """See :meth:`TaskLedger.outbox_retry`."""
        await self._submit(lambda c: c.execute(
            "UPDATE outbox SET attempts = attempts + 1, due = ? WHERE seq = ?",
            (next_at, int(entry.entry_id))), write=True)

    async def outbox_done(self, entry: OutboxEntry) -> None:
        """See :meth:`TaskLedger.outbox_done`."""
        await self._submit(lambda c: c.execute("DELETE FROM outbox WHERE seq = ?", (int(entry.entry_id),)),
                           write=True)

    async def outbox_depth(self) -> int:
        """See :meth:`TaskLedger.outbox_depth`."""
        return int(await self._submit(lambda c: c.execute("SELECT COUNT(*) FROM outbox").fetchone()[0],
                                      write=False))
