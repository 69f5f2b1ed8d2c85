"""Where the fair-share limits keep their counts (docs/limits.md §4): in the process beside a
memory or SQLite ledger (:class:`MemoryLimitStore`), in Redis beside a Redis ledger, over the
ledger's own connection, so every replica on that Redis enforces one limit
(:class:`RedisLimitStore`).

Two kinds of state, both keyed by a scope (``caller:<fingerprint>``, ``tenant:<name>``,
``upstream:<name>``):

* a **token bucket** per scope, kept as GCRA's one number, the theoretical arrival time
  (:func:`gcra`): a request is let through when the bucket has a token, else the caller
  learns how long until it has one (``Retry-After``);
* **slot sets** per scope and kind (``live``, ``streams``, ``push``): members scored by the
  time they were taken (a stream, a pending new task) or ``+inf`` (a task, a push config,
  which leave by the ledger's word, never by age). :meth:`LimitStore.acquire` checks every
  scope's set against its limit and adds the member to all of them at once, or to none.

Why not the ``limits`` package: it has fixed, moving and sliding windows over memory and
Redis, but no token bucket with a burst and no sets of slots; the bucket here is GCRA (one
number per scope, one short Lua script on Redis), the sets plain sorted sets.

Redis layout (one hash tag, ``{limits}``, so every script's keys share a slot on Redis
Cluster too)::

    {prefix}:{limits}:rate:{scope}     string  the bucket's theoretical arrival time (Redis clock),
                                               expiring once the bucket is full again
    {prefix}:{limits}:live:{scope}     zset    pending new-task tokens (scored by the time taken)
                                               and task keys (+inf)
    {prefix}:{limits}:streams:{scope}  zset    open stream tokens, scored by the time opened
    {prefix}:{limits}:push:{scope}     zset    push-config callback ids (+inf)
    {prefix}:{limits}:owner            hash    task key → the live sets holding it (newline-joined)

Every time on Redis is the Redis server's (``TIME``), so replicas with skewed clocks share
one bucket fairly.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any, Protocol

MAX_BUCKETS = 100_000
"""Token buckets one process keeps (:class:`MemoryLimitStore`); the least recently used one
past it is forgotten (it was full again, or its scope idle longest)."""

INF = math.inf


def gcra(tat: float, now: float, rate: float, burst: int) -> tuple[float, float]:
    """One request against a GCRA token bucket (the generic cell rate algorithm, ITU-T I.371):
    ``tat`` the bucket's theoretical arrival time (0: a full bucket), ``rate`` requests per
    second, ``burst`` requests that may come at once. Returns ``(new tat, wait)``: ``wait`` 0.0
    when the request is let through (the new tat is then to be kept), else the seconds until
    it would be (the tat unchanged). Pure."""
    interval = 1.0 / rate
    new = max(tat, now) + interval
    allow_at = new - burst * interval
    if now < allow_at:
        return tat, allow_at - now
    return new, 0.0


class LimitStore(Protocol):
    """The counts behind the fair-share limits (docs/limits.md §4)."""

    backend: str

    async def take(self, key: str, rate: float, burst: int) -> float:
        """Take one token of ``key``'s bucket: 0.0 when taken, else seconds until one is there."""
        ...

    async def acquire(self, keys: list[tuple[str, int]], member: str, stale_seconds: float) -> int:
        """Add ``member`` to every set of ``keys`` (``(key, limit)``) when each holds fewer
        than its limit, after dropping members older than ``stale_seconds``: -1; else the
        index of the first set at its limit, nothing added."""
        ...

    async def release(self, keys: list[str], member: str) -> None:
        """Take ``member`` out of the sets ``keys``."""
        ...

    async def bind(self, keys: list[str], pending: str, task: str) -> None:
        """The pending token ``pending`` in ``keys`` becomes task member ``task`` (held until
        :meth:`end` or :meth:`discard`)."""
        ...

    async def end(self, task: str) -> None:
        """Task member ``task`` leaves every set that holds it (it turned terminal)."""
        ...

    async def add(self, keys: list[str], members: list[str]) -> None:
        """Add ``members`` (held until :meth:`discard`) to every set of ``keys``."""
        ...

    async def members(self, key: str) -> list[tuple[str, float]]:
        """The members of set ``key`` with their scores."""
        ...

    async def discard(self, key: str, members: list[str]) -> None:
        """Take ``members`` out of set ``key`` (and, for task members, out of the owner map)."""
        ...

    async def count(self, key: str) -> int:
        """How many members set ``key`` holds."""
        ...


class MemoryLimitStore:
    """The counts of one process (a memory or SQLite ledger): every method runs without a
    pause, so a check and its add are one step. Bounded: the buckets by :data:`MAX_BUCKETS`,
    the sets by their limits (a set only grows through :meth:`acquire`, which stops at the
    limit, or :meth:`add` after the push-config check), the owner map by the sets."""

    backend = "memory"

    def __init__(self, clock: Any = time.time) -> None:
        self._clock = clock
        self._tats: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._sets: dict[str, dict[str, float]] = {}
        self._owner: dict[str, list[str]] = {}

    async def take(self, key: str, rate: float, burst: int) -> float:
        tat, wait = gcra(self._tats.get(key, 0.0), self._clock(), rate, burst)
        if wait == 0.0:
            self._tats[key] = tat
            self._tats.move_to_end(key)
            if len(self._tats) > MAX_BUCKETS:
                self._tats.popitem(last=False)
        return wait

    async def acquire(self, keys: list[tuple[str, int]], member: str, stale_seconds: float) -> int:
        now = self._clock()
        cutoff = now - stale_seconds
        for index, (key, limit) in enumerate(keys):
            held = self._sets.get(key)
            if held:
                for old in [m for m, at in held.items() if at < cutoff]:
                    del held[old]
            if len(held or ()) >= limit:
                return index
        for key, _ in keys:
            self._sets.setdefault(key, {})[member] = now
        return -1

    async def release(self, keys: list[str], member: str) -> None:
        for key in keys:
            self._drop(key, member)

    async def bind(self, keys: list[str], pending: str, task: str) -> None:
        for key in keys:
            self._drop(key, pending)
            self._sets.setdefault(key, {})[task] = INF
        self._owner[task] = list(keys)

    async def end(self, task: str) -> None:
        for key in self._owner.pop(task, ()):
            self._drop(key, task)

    async def add(self, keys: list[str], members: list[str]) -> None:
        for key in keys:
            held = self._sets.setdefault(key, {})
            for member in members:
                held[member] = INF

    async def members(self, key: str) -> list[tuple[str, float]]:
        return list(self._sets.get(key, {}).items())

    async def discard(self, key: str, members: list[str]) -> None:
        for member in members:
            self._drop(key, member)
            self._owner.pop(member, None)

    async def count(self, key: str) -> int:
        return len(self._sets.get(key, ()))

    def _drop(self, key: str, member: str) -> None:
        held = self._sets.get(key)
        if held is not None:
            held.pop(member, None)
            if not held:
                del self._sets[key]


_NOW = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS[1]: the bucket. ARGV: interval (1/rate), burst. Answers '0' (taken) or the wait in seconds.
_TAKE = _NOW + """
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new = tat + interval
local allow_at = new - burst * interval
if now < allow_at then return tostring(allow_at - now) end
redis.call('SET', KEYS[1], string.format('%.6f', new), 'PX', math.ceil((new - now) * 1000) + 1000)
return '0'
"""

# KEYS: the sets. ARGV[1]: the member, ARGV[2]: stale seconds, ARGV[2 + i]: KEYS[i]'s limit.
# Answers -1 (added to all) or the 0-based index of the first set at its limit.
_ACQUIRE = _NOW + """
local cutoff = now - tonumber(ARGV[2])
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. cutoff)
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[2 + i]) then return i - 1 end
end
for i = 1, #KEYS do redis.call('ZADD', KEYS[i], now, ARGV[1]) end
return -1
"""

# KEYS[1]: the owner hash, KEYS[2..]: the live sets. ARGV: pending token, task member.
_BIND = """
local joined = {}
for i = 2, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[1])
  redis.call('ZADD', KEYS[i], 'inf', ARGV[2])
  joined[#joined + 1] = KEYS[i]
end
redis.call('HSET', KEYS[1], ARGV[2], table.concat(joined, '\\n'))
return 1
"""

# KEYS[1]: the owner hash. ARGV[1]: a task member. The sets it names share KEYS[1]'s hash tag.
_END = """
local joined = redis.call('HGET', KEYS[1], ARGV[1])
if not joined then return 0 end
for key in string.gmatch(joined, '[^\\n]+') do redis.call('ZREM', key, ARGV[1]) end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""


class RedisLimitStore:
    """The counts on the Redis ledger's server, over the ledger's own client (a Redis Cluster
    client for ``redis+cluster://``): every replica on that Redis sees one count. A check and
    its add are one Lua script; times are the server's."""

    backend = "redis"

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger
        self._base = f"{ledger.prefix}:{{limits}}:"
        self._scripts: dict[str, Any] = {}

    def _script(self, name: str, source: str) -> Any:
        script = self._scripts.get(name)
        client = self._ledger._redis  # the ledger's open client (docs/limits.md §4)
        if script is None or script.registered_client is not client:
            script = self._scripts[name] = client.register_script(source)
        return script

    def key(self, suffix: str) -> str:
        """The Redis key of a bucket or set (``rate:caller:…``)."""
        return self._base + suffix

    async def take(self, key: str, rate: float, burst: int) -> float:
        k = self.key(key)
        wait = await self._script("take", _TAKE)(keys=[k], args=[repr(1.0 / rate), burst])
        return float(wait)

    async def acquire(self, keys: list[tuple[str, int]], member: str, stale_seconds: float) -> int:
        names = [self.key(k) for k, _ in keys]
        found = await self._script("acquire", _ACQUIRE)(
            keys=names, args=[member, repr(stale_seconds), *(limit for _, limit in keys)])
        return int(found)

    async def release(self, keys: list[str], member: str) -> None:
        client = self._ledger._redis
        for key in keys:
            await client.zrem(self.key(key), member)

    async def bind(self, keys: list[str], pending: str, task: str) -> None:
        await self._script("bind", _BIND)(keys=[self.key("owner"), *(self.key(k) for k in keys)],
                                          args=[pending, task])

    async def end(self, task: str) -> None:
        await self._script("end", _END)(keys=[self.key("owner")], args=[task])

    async def add(self, keys: list[str], members: list[str]) -> None:
        if not members:
            return
        client = self._ledger._redis
        for key in keys:
            await client.zadd(self.key(key), dict.fromkeys(members, INF))

    async def members(self, key: str) -> list[tuple[str, float]]:
        raw = await self._ledger._redis.zrange(self.key(key), 0, -1, withscores=True)
        return [(m.decode() if isinstance(m, bytes) else m, float(s)) for m, s in raw]

    async def discard(self, key: str, members: list[str]) -> None:
        if not members:
            return
        client = self._ledger._redis
        await client.zrem(self.key(key), *members)
        await client.hdel(self.key("owner"), *members)

    async def count(self, key: str) -> int:
        return int(await self._ledger._redis.zcard(self.key(key)))


def limit_store(ledger: Any) -> LimitStore:
    """The store for ``ledger``: :class:`RedisLimitStore` beside a Redis ledger (one server,
    Sentinel or Cluster), else :class:`MemoryLimitStore` (memory and SQLite: one process)."""
    import sys

    redis_ledger = sys.modules.get("gateway.ledger.redis")  # loaded only when a Redis ledger is used
    if redis_ledger is not None and isinstance(ledger, redis_ledger.RedisLedger):
        return RedisLimitStore(ledger)
    return MemoryLimitStore()
