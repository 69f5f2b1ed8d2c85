"""SQLite task ledger: the embedded default, durable across restarts and ``kill -9``.

One connection, owned by one worker thread (every call runs there in order, so the event loop
never blocks on the file). The database runs in WAL mode with ``synchronous=NORMAL``: each
``put`` is its own committed transaction before it returns, so a record the gateway stored
before forwarding an event survives a crash of the process. Compare-and-set is a single
``UPDATE … WHERE version = ?`` (or an ``INSERT`` that must not conflict), so it also holds if
several processes share the file.

Schema (created on open)::

    tasks(upstream TEXT, task_id TEXT, version INTEGER, state TEXT, terminal INTEGER,
          resync INTEGER, observed_at REAL, record BLOB, PRIMARY KEY (upstream, task_id))
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from gateway.invariants.model import TaskRecord
from gateway.ledger import codec
from gateway.ledger.base import VersionConflictError

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    upstream    TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    state       TEXT    NOT NULL,
    terminal    INTEGER NOT NULL,
    resync      INTEGER NOT NULL DEFAULT 0,
    observed_at REAL    NOT NULL,
    record      BLOB    NOT NULL,
    PRIMARY KEY (upstream, task_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_terminal_observed ON tasks (terminal, observed_at);
"""


class SqliteLedger:
    """:class:`~gateway.ledger.base.TaskLedger` in one SQLite file.

    Args:
        path: the database file; its directory is created if missing.
        busy_timeout: seconds to wait for a lock held by another process.
    """

    backend = "sqlite"

    def __init__(self, path: str | Path, *, busy_timeout: float = 5.0) -> None:
        self.path = Path(path)
        self._busy_ms = int(busy_timeout * 1000)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-sqlite")
        self._conn: sqlite3.Connection | None = None

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            if self._conn is None:
                raise RuntimeError("ledger is not open")
            return fn(self._conn)

        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def open(self) -> None:
        """Create the directory, the file and the schema; switch to WAL."""

        def connect() -> None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.executescript(_SCHEMA)
            self._conn = conn

        await asyncio.get_running_loop().run_in_executor(self._executor, connect)

    async def get(self, upstream: str, task_id: str) -> TaskRecord | None:
        """The record of (``upstream``, ``task_id``), or ``None``."""

        def query(conn: sqlite3.Connection) -> Any:
            return conn.execute(
                "SELECT record, version, resync FROM tasks WHERE upstream = ? AND task_id = ?",
                (upstream, task_id),
            ).fetchone()

        row = await self._run(query)
        if row is None:
            return None
        return codec.decode(row[0], version=row[1], needs_resync=bool(row[2]))

    async def put(self, record: TaskRecord, expected_version: int) -> TaskRecord:
        """Compare-and-set on ``version``; see :meth:`TaskLedger.put`."""
        blob = codec.encode(record)
        values = (expected_version + 1, record.state.value, int(record.terminal),
                  int(record.needs_resync), record.observed_at, blob)

        def write(conn: sqlite3.Connection) -> int:
            if expected_version == 0:
                cur = conn.execute(
                    "INSERT INTO tasks (version, state, terminal, resync, observed_at, record, "
                    "upstream, task_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (*values, record.upstream, record.task_id),
                )
            else:
                cur = conn.execute(
                    "UPDATE tasks SET version = ?, state = ?, terminal = ?, resync = ?, "
                    "observed_at = ?, record = ? WHERE upstream = ? AND task_id = ? "
                    "AND version = ?",
                    (*values, record.upstream, record.task_id, expected_version),
                )
            return cur.rowcount

        if await self._run(write) != 1:
            raise VersionConflictError(f"{record.upstream}/{record.task_id}: version moved")
        return codec.decode(blob, version=expected_version + 1, needs_resync=record.needs_resync)

    async def count_by_state(self) -> dict[str, int]:
        """Tracked tasks by canonical state."""
        rows = await self._run(
            lambda c: c.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall()
        )
        return {state: count for state, count in rows}

    async def mark_resync(self) -> int:
        """Flag every non-terminal task ``needs_resync``."""
        return await self._run(
            lambda c: c.execute("UPDATE tasks SET resync = 1 WHERE terminal = 0").rowcount
        )

    async def prune(self, older_than: float) -> int:
        """Delete terminal tasks last observed before ``older_than``."""
        return await self._run(
            lambda c: c.execute(
                "DELETE FROM tasks WHERE terminal = 1 AND observed_at < ?", (older_than,)
            ).rowcount
        )

    async def close(self) -> None:
        """Close the connection and stop the worker thread."""

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        if self._conn is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)
