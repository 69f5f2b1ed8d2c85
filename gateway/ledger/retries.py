"""The retry keys of safe retries (docs/retries.md §3), beside the task ledger.

A key is stored under a keyed digest of ``(upstream, tenant, caller, key)`` — the client's
``Idempotency-Key`` or ``messageId`` is never stored or logged as it came — with a
:class:`~gateway.exchange.retries.RetryEntry` as its value. Every store is bounded: keys
live ``ttl_seconds``, at most ``max_keys`` of them (the oldest is dropped first), and an
entry's stored answer is at most ``max_result_bytes`` (the shell checks it); memory and SQLite
also bound the bytes of all entries (``max_bytes``).

=======================  ======================================================================
ledger                   store
=======================  ======================================================================
memory                   :class:`MemoryRetryStore`: a dict in insertion order (one process)
SQLite                   :class:`SqliteRetryStore`: table ``retry_keys`` in the ledger's file,
                         through the ledger's own connection and call order; survives a restart
Redis                    :class:`RedisRetryStore`: ``PREFIX:retry:KEY`` strings with a TTL and
                         the index ``PREFIX:retry:index`` (zset by expiry), one Lua script per
                         claim; on Redis Cluster every key under the hash tag ``{retry}``
=======================  ======================================================================

A claim is atomic: of two requests with one key, on one process or on two replicas sharing
Redis, exactly one gets ``None`` (it owns the key and is forwarded); the other gets the entry.
At start-up (:meth:`RetryStore.recover`), keys left in flight by a gateway that stopped become
``unknown`` on memory and SQLite; Redis, shared with replicas that may still be running them,
leaves them in flight until ``retries.in_flight_seconds`` has passed since their last update.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gateway.exchange.retries import IN_FLIGHT, UNKNOWN, RetryEntry


@dataclass(frozen=True, slots=True)
class RetryLimits:
    """The bounds of a retry store: seconds a key lives, how many keys, how many bytes."""

    ttl_seconds: float = 86_400.0
    max_keys: int = 100_000
    max_bytes: int = 64 * 1024 * 1024


class RetryStore(Protocol):
    """Where retry keys live. ``key`` is the keyed digest (a short ASCII string)."""

    async def recover(self, now: float) -> int:
        """Keys in flight at start-up become ``unknown``; returns how many."""
        ...

    async def claim(self, key: str, entry: RetryEntry, now: float) -> RetryEntry | None:
        """Take ``key`` for ``entry`` unless an unexpired entry holds it; ``None`` when taken,
        else the entry that holds it."""
        ...

    async def get(self, key: str, now: float) -> RetryEntry | None:
        """The unexpired entry of ``key``, or ``None``."""
        ...

    async def put(self, key: str, entry: RetryEntry, now: float) -> None:
        """Replace the entry of ``key`` (its time to live starts again)."""
        ...

    async def delete(self, key: str) -> None:
        """Drop ``key`` (the first call made nothing a retry must get: it may go again)."""
        ...


class MemoryRetryStore:
    """Retry keys in a dict, oldest first (the memory ledger's)."""

    def __init__(self, limits: RetryLimits) -> None:
        self.limits = limits
        self._entries: OrderedDict[str, tuple[float, RetryEntry]] = OrderedDict()
        self._bytes = 0

    def _expire(self, now: float) -> None:
        entries, limits = self._entries, self.limits
        while entries:
            key, (expires, entry) = next(iter(entries.items()))
            if expires > now and len(entries) <= limits.max_keys and self._bytes <= limits.max_bytes:
                return
            del entries[key]
            self._bytes -= entry.size

    async def recover(self, now: float) -> int:
        n = 0
        for key, (expires, entry) in list(self._entries.items()):
            if entry.state == IN_FLIGHT:
                self._entries[key] = (expires, replace(entry, state=UNKNOWN, updated=now))
                n += 1
        return n

    async def claim(self, key: str, entry: RetryEntry, now: float) -> RetryEntry | None:
        held = await self.get(key, now)
        if held is not None:
            return held
        await self.put(key, entry, now)
        return None

    async def get(self, key: str, now: float) -> RetryEntry | None:
        found = self._entries.get(key)
        if found is None or found[0] <= now:
            return None
        return found[1]

    async def put(self, key: str, entry: RetryEntry, now: float) -> None:
        await self.delete(key)
        self._entries[key] = (now + self.limits.ttl_seconds, entry)
        self._bytes += entry.size
        self._expire(now)

    async def delete(self, key: str) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1].size


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS retry_keys (
        key     TEXT NOT NULL PRIMARY KEY,
        entry   BLOB NOT NULL,
        size    INTEGER NOT NULL,
        expires REAL NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS retry_keys_expires ON retry_keys (expires)",
)


def _sql_bound(conn: sqlite3.Connection, limits: RetryLimits, now: float) -> None:
    conn.execute("DELETE FROM retry_keys WHERE expires <= ?", (now,))
    n, size = conn.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM retry_keys").fetchone()
    while n > limits.max_keys or size > limits.max_bytes:
        drop = max(1, n - limits.max_keys)
        rows = conn.execute("SELECT key, size FROM retry_keys ORDER BY expires LIMIT ?", (drop,)).fetchall()
        conn.executemany("DELETE FROM retry_keys WHERE key = ?", [(k,) for k, _ in rows])
        n -= len(rows)
        size -= sum(s for _, s in rows)


class SqliteRetryStore:
    """Retry keys in the SQLite ledger's file (table ``retry_keys``), through the ledger's
    connection thread and group commit: a claim returns after its ``COMMIT``, so a key is on
    disk before the request is forwarded."""

    def __init__(self, ledger: Any, limits: RetryLimits) -> None:
        self.ledger = ledger
        self.limits = limits
        self._ready = False  # the table exists (made on first use)

    async def _call(self, fn: Any, *, write: bool = True) -> Any:
        if not self._ready:
            def made(conn: sqlite3.Connection) -> None:
                for statement in _SCHEMA:
                    conn.execute(statement)

            await self.ledger._submit(made, write=True)  # noqa: SLF001 - the ledger's own queue
            self._ready = True
        return await self.ledger._submit(fn, write=write)  # noqa: SLF001

    async def recover(self, now: float) -> int:
        def run(conn: sqlite3.Connection) -> int:
            rows = conn.execute("SELECT key, entry FROM retry_keys WHERE expires > ?", (now,)).fetchall()
            changed = 0
            for key, raw in rows:
                entry = RetryEntry.decode(raw)
                if entry.state == IN_FLIGHT:
                    conn.execute("UPDATE retry_keys SET entry = ? WHERE key = ?",
                                 (replace(entry, state=UNKNOWN, updated=now).encode(), key))
                    changed += 1
            return changed

        return int(await self._call(run))

    async def claim(self, key: str, entry: RetryEntry, now: float) -> RetryEntry | None:
        limits = self.limits

        def run(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT entry FROM retry_keys WHERE key = ? AND expires > ?", (key, now)).fetchone()
            if row is not None:
                return bytes(row[0])
            conn.execute("INSERT OR REPLACE INTO retry_keys (key, entry, size, expires) VALUES (?, ?, ?, ?)",
                         (key, entry.encode(), entry.size, now + limits.ttl_seconds))
            _sql_bound(conn, limits, now)
            return None

        raw = await self._call(run)
        return None if raw is None else RetryEntry.decode(raw)

    async def get(self, key: str, now: float) -> RetryEntry | None:
        def run(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT entry FROM retry_keys WHERE key = ? AND expires > ?", (key, now)).fetchone()
            return None if row is None else bytes(row[0])

        raw = await self._call(run, write=False)
        return None if raw is None else RetryEntry.decode(raw)

    async def put(self, key: str, entry: RetryEntry, now: float) -> None:
        limits = self.limits

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO retry_keys (key, entry, size, expires) VALUES (?, ?, ?, ?)",
                         (key, entry.encode(), entry.size, now + limits.ttl_seconds))
            _sql_bound(conn, limits, now)

        await self._call(run)

    async def delete(self, key: str) -> None:
        await self._call(lambda conn: conn.execute("DELETE FROM retry_keys WHERE key = ?", (key,)))


_CLAIM = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
local old = redis.call('GET', KEYS[1])
if old then return old end
local n = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4]) + 1
if n > 0 then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, n - 1)
  for _, k in ipairs(oldest) do redis.call('DEL', k) end
  redis.call('ZREM', KEYS[2], unpack(oldest))
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[5], KEYS[1])
return false
"""


class RedisRetryStore:
    """Retry keys on the Redis ledger's server (or cluster), shared by every replica."""

    def __init__(self, ledger: Any, limits: RetryLimits, *, cluster: bool = False) -> None:
        self.ledger = ledger
        self.limits = limits
        tag = "{retry}" if cluster else "retry"
        self._base = f"{ledger.prefix}:{tag}"
        self._script: Any = None

    def _key(self, key: str) -> str:
        return f"{self._base}:{key}"

    def _claim_script(self) -> Any:
        if self._script is None:
            self._script = self.ledger._redis.register_script(_CLAIM)  # noqa: SLF001
        return self._script

    async def recover(self, now: float) -> int:
        return 0  # replicas may be running them: retries.in_flight_seconds decides (decide())

    async def claim(self, key: str, entry: RetryEntry, now: float) -> RetryEntry | None:
        limits = self.limits
        raw = await self._claim_script()(
            keys=[self._key(key), f"{self._base}:index"],
            args=[entry.encode(), int(limits.ttl_seconds * 1000), now, limits.max_keys,
                  now + limits.ttl_seconds])
        return None if raw is None else RetryEntry.decode(raw)

    async def get(self, key: str, now: float) -> RetryEntry | None:
        raw = await self.ledger._redis.get(self._key(key))  # noqa: SLF001
        return None if raw is None else RetryEntry.decode(raw)

    async def put(self, key: str, entry: RetryEntry, now: float) -> None:
        ttl_ms = int(self.limits.ttl_seconds * 1000)
        await self.ledger._redis.set(self._key(key), entry.encode(), px=ttl_ms)  # noqa: SLF001

    async def delete(self, key: str) -> None:
        redis = self.ledger._redis  # noqa: SLF001
        await redis.delete(self._key(key))
        await redis.zrem(f"{self._base}:index", self._key(key))


def retry_store(ledger: Any, limits: RetryLimits) -> RetryStore:
    """The retry store beside ``ledger`` (by its ``backend``): SQLite and Redis keep keys
    with the ledger's tasks; any other ledger gets a :class:`MemoryRetryStore`."""
    backend = getattr(ledger, "backend", "memory")
    if backend == "sqlite" and hasattr(ledger, "_submit"):
        return SqliteRetryStore(ledger, limits)
    if backend in ("redis", "redis_cluster") and hasattr(ledger, "prefix"):
        return RedisRetryStore(ledger, limits, cluster="Cluster" in type(ledger).__name__)
    return MemoryRetryStore(limits)
