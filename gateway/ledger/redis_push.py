"""The push relay's keys in the Redis ledger (docs/push.md §3): push configs and the durable
outbox, a mixin of :class:`~gateway.ledger.redis.RedisLedger` and
:class:`~gateway.ledger.redis_cluster.RedisClusterLedger`, shared by every replica.

Every key is named by :meth:`RedisPushStore._push_key` (``PREFIX:push:…``; on Redis Cluster
``PREFIX:{push}:…``: one hash tag, so each Lua script below touches one slot), and every
change is one script, atomic:

=========================  ====================================================================
``push:cfg`` (hash)        callback id → the entry (JSON: upstream, tenant, task, data)
``push:cfg:at`` (zset)     callback id → creation time (pruning)
``push:cfgs:TASK`` (zset)  the task's callback ids by creation time
``push:ob`` (hash)         entry id → the entry (JSON: upstream, tenant, task, callback, body)
``push:ob:attempts``       entry id → attempts made (hash)
``push:ob:q:TASK`` (list)  the task's queue of entry ids, oldest first
``push:ob:due`` (zset)     TASK → when its queue's head is due; a claim moves it past the lease
``push:ob:n``, ``:seq``    the number of entries; the entry id counter
=========================  ====================================================================

``TASK`` is the JSON array ``[upstream, tenant, task_id]``.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import PushLimitError
from gateway.ledger.base import OutboxEntry, PushConfigEntry

_PUT_CFG = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local mine = redis.call('ZSCORE', KEYS[3], ARGV[1]) and 1 or 0
if redis.call('ZCARD', KEYS[3]) - mine >= tonumber(ARGV[4]) then return -1 end
if not old and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then return -2 end
local at = ARGV[3]
if old then
  redis.call('ZREM', ARGV[6] .. cjson.decode(old).m, ARGV[1])
  at = redis.call('ZSCORE', KEYS[2], ARGV[1]) or at
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], at, ARGV[1])
redis.call('ZADD', KEYS[3], at, ARGV[1])
return 1
"""

_DELETE_CFG = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if not old then return 0 end
redis.call('ZREM', ARGV[2] .. cjson.decode(old).m, ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""

_PRUNE_CFG = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1], 'LIMIT', 0, 1000)
for _, id in ipairs(ids) do
  local old = redis.call('HGET', KEYS[1], id)
  if old then
    redis.call('ZREM', ARGV[2] .. cjson.decode(old).m, id)
    redis.call('HDEL', KEYS[1], id)
  end
  redis.call('ZREM', KEYS[2], id)
end
return #ids
"""

_ADD = """
if tonumber(redis.call('GET', KEYS[4]) or '0') >= tonumber(ARGV[2]) then return -2 end
if redis.call('LLEN', KEYS[2]) >= tonumber(ARGV[1]) then return -1 end
local id = redis.call('INCR', KEYS[5])
redis.call('HSET', KEYS[1], id, ARGV[3])
redis.call('RPUSH', KEYS[2], id)
redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[5])
return id
"""

_CLAIM = """
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, m in ipairs(members) do
  local id = redis.call('LINDEX', ARGV[4] .. m, 0)
  if not id then
    redis.call('ZREM', KEYS[1], m)
  else
    redis.call('ZADD', KEYS[1], ARGV[2], m)
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
    out[#out + 1] = redis.call('HGET', KEYS[3], id) or '0'
  end
end
return out
"""

_RETRY = """
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('ZADD', KEYS[2], 'XX', ARGV[3], ARGV[2])
return 1
"""

_DONE = """
local q = ARGV[3] .. ARGV[2]
if redis.call('LINDEX', q, 0) == ARGV[1] then
  redis.call('LPOP', q)
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('DECR', KEYS[4])
end
if redis.call('LLEN', q) > 0 then redis.call('ZADD', KEYS[3], 0, ARGV[2]) else redis.call('ZREM', KEYS[3], ARGV[2]) end
return 1
"""


def _task(upstream: str, tenant: str, task_id: str) -> str:
    return orjson.dumps([upstream, tenant, task_id]).decode()


class RedisPushStore:
    """The push relay's part of the Redis ledgers (see the module)."""

    prefix: str
    _redis: Any
    _push_scripts: dict[str, Any] | None = None

    def _push_key(self, suffix: str) -> str:
        return f"{self.prefix}:push:{suffix}"

    def _script(self, source: str) -> Any:
        if self._push_scripts is None:
            self._push_scripts = {}
        script = self._push_scripts.get(source)
        if script is None:  # redis-py loads it on first use (EVALSHA, then SCRIPT LOAD on NOSCRIPT)
            script = self._push_scripts[source] = self._redis.register_script(source)
        return script

    # --- push configs -----------------------------------------------------------------------------

    async def put_push_config(self, entry: PushConfigEntry, at: float, *, max_per_task: int,
                              max_total: int) -> None:
        """See :meth:`TaskLedger.put_push_config`."""
        member = _task(entry.upstream, entry.tenant, entry.task_id)
        packed = orjson.dumps({"u": entry.upstream, "t": entry.tenant, "k": entry.task_id, "m": member,
                               "d": entry.data.decode("latin-1")})
        k = self._push_key
        n = int(await self._script(_PUT_CFG)(
            keys=[k("cfg"), k("cfg:at"), k(f"cfgs:{member}")],
            args=[entry.callback_id, packed, repr(at), max_per_task, max_total, k("cfgs:")]))
        if n == -1:
            raise PushLimitError(f"task {entry.task_id}: {max_per_task} push configs already")
        if n == -2:
            raise PushLimitError(f"{max_total} push configs already")

    @staticmethod
    def _entry(callback_id: str, raw: bytes) -> PushConfigEntry:
        doc = orjson.loads(raw)
        return PushConfigEntry(callback_id, doc["u"], doc["k"], doc["d"].encode("latin-1"), doc["t"])

    async def get_push_config(self, callback_id: str) -> PushConfigEntry | None:
        """See :meth:`TaskLedger.get_push_config`."""
        raw = await self._redis.hget(self._push_key("cfg"), callback_id)
        return None if raw is None else self._entry(callback_id, raw)

    async def push_configs(self, upstream: str, task_id: str, *, tenant: str = "") -> list[PushConfigEntry]:
        """See :meth:`TaskLedger.push_configs`."""
        ids = await self._redis.zrange(self._push_key(f"cfgs:{_task(upstream, tenant, task_id)}"), 0, -1)
        if not ids:
            return []
        raws = await self._redis.hmget(self._push_key("cfg"), ids)
        return [self._entry(i.decode(), raw) for i, raw in zip(ids, raws) if raw is not None]

    async def delete_push_config(self, callback_id: str) -> bool:
        """See :meth:`TaskLedger.delete_push_config`."""
        k = self._push_key
        return bool(int(await self._script(_DELETE_CFG)(keys=[k("cfg"), k("cfg:at")],
                                                         args=[callback_id, k("cfgs:")])))

    async def prune_push_configs(self, older_than: float) -> int:
        """See :meth:`TaskLedger.prune_push_configs` (in batches of 1000)."""
        k, total = self._push_key, 0
        while True:
            n = int(await self._script(_PRUNE_CFG)(keys=[k("cfg"), k("cfg:at")],
                                                    args=[repr(older_than), k("cfgs:")]))
            total += n
            if n < 1000:
                return total

    # --- the outbox -------------------------------------------------------------------------------

    async def outbox_add(self, upstream: str, task_id: str, callback_id: str, body: bytes, at: float,
                         *, tenant: str = "", max_per_task: int, max_total: int) -> str:
        """See :meth:`TaskLedger.outbox_add` (one script)."""
        member = _task(upstream, tenant, task_id)
        packed = orjson.dumps({"u": upstream, "t": tenant, "k": task_id, "m": member, "c": callback_id,
                               "b": body.decode("latin-1")})
        k = self._push_key
        n = int(await self._script(_ADD)(
            keys=[k("ob"), k(f"ob:q:{member}"), k("ob:due"), k("ob:n"), k("ob:seq")],
            args=[max_per_task, max_total, packed, repr(at), member]))
        if n == -1:
            raise PushLimitError(f"task {task_id}: {max_per_task} notifications wait already")
        if n == -2:
            raise PushLimitError(f"the push outbox holds {max_total} notifications")
        return str(n)

    async def outbox_claim(self, now: float, lease_seconds: float, limit: int) -> list[OutboxEntry]:
        """See :meth:`TaskLedger.outbox_claim` (one script: read and lease together)."""
        k = self._push_key
        flat = await self._script(_CLAIM)(keys=[k("ob:due"), k("ob"), k("ob:attempts")],
                                          args=[repr(now), repr(now + lease_seconds), limit, k("ob:q:")])
        out = []
        for i in range(0, len(flat), 3):
            entry_id, raw, attempts = flat[i].decode(), flat[i + 1], int(flat[i + 2])
            if not raw:
                continue
            doc = orjson.loads(raw)
            out.append(OutboxEntry(entry_id, doc["u"], doc["k"], doc["c"], doc["b"].encode("latin-1"),
                                   attempts, doc["t"]))
        return out

    async def outbox_retry(self, entry: OutboxEntry, next_at: float) -> None:
        """See :meth:`TaskLedger.outbox_retry`."""
        k = self._push_key
        await self._script(_RETRY)(keys=[k("ob:attempts"), k("ob:due")],
                                   args=[entry.entry_id, _task(entry.upstream, entry.tenant, entry.task_id),
                                         repr(next_at)])

    async def outbox_done(self, entry: OutboxEntry) -> None:
        """See :meth:`TaskLedger.outbox_done`."""
        k = self._push_key
        await self._script(_DONE)(keys=[k("ob"), k("ob:attempts"), k("ob:due"), k("ob:n")],
                                  args=[entry.entry_id, _task(entry.upstream, entry.tenant, entry.task_id),
                                        k("ob:q:")])

    async def outbox_depth(self) -> int:
        """See :meth:`TaskLedger.outbox_depth`."""
        return int(await self._redis.get(self._push_key("ob:n")) or 0)
