"""Redis task ledger: one ledger shared by several gateway replicas.

Layout (``prefix`` defaults to ``a2agw``)::

    {prefix}:task:{upstream}:{taskId}  hash  v (version), s (state), term (0/1), resync (0/1),
                                             oa (observed_at), rec (codec JSON)
    {prefix}:counts                    hash  state → number of tracked tasks
    {prefix}:live                      set   task keys not yet terminal (crash-recovery scan)
    {prefix}:terminal                  zset  task keys of terminal tasks, scored by observed_at

Compare-and-set runs as one Lua script, so a terminal state recorded through replica A is
absorbing on replica B: B's stale ``put`` finds another version and loses. Uses the ``redis``
package's asyncio client.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.invariants.model import TaskRecord
from gateway.ledger import codec
from gateway.ledger.base import VersionConflictError

_CAS = """
local cur = redis.call('HGET', KEYS[1], 'v')
if (cur == false and ARGV[1] ~= '0') or (cur ~= false and cur ~= ARGV[1]) then return 0 end
local old = redis.call('HGET', KEYS[1], 's')
if old then redis.call('HINCRBY', KEYS[2], old, -1) end
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
redis.call('HSET', KEYS[1], 'v', ARGV[2], 's', ARGV[3], 'term', ARGV[4], 'resync', ARGV[5],
           'oa', ARGV[6], 'rec', ARGV[7])
if ARGV[4] == '1' then
  redis.call('SREM', KEYS[3], KEYS[1])
  redis.call('ZADD', KEYS[4], ARGV[6], KEYS[1])
else
  redis.call('SADD', KEYS[3], KEYS[1])
end
return 1
"""

_PRUNE = """
local doomed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, 1000)
for _, key in ipairs(doomed) do
  local s = redis.call('HGET', key, 's')
  if s then redis.call('HINCRBY', KEYS[2], s, -1) end
  redis.call('DEL', key)
  redis.call('ZREM', KEYS[1], key)
end
return #doomed
"""

_RESYNC = """
local keys = redis.call('SMEMBERS', KEYS[1])
local n = 0
for _, key in ipairs(keys) do
  if redis.call('HGET', key, 'term') == '0' then
    redis.call('HSET', key, 'resync', '1')
    n = n + 1
  end
end
return n
"""


class RedisLedger:
    """:class:`~gateway.ledger.base.TaskLedger` in Redis.

    Args:
        url: ``redis://HOST:PORT/DB`` (``rediss://`` for TLS).
        prefix: key prefix, so several gateway deployments can share one Redis.
        timeout: socket timeout in seconds for every command.
    """

    backend = "redis"

    def __init__(self, url: str, *, prefix: str = "a2agw", timeout: float = 2.0) -> None:
        self.url = url
        self.prefix = prefix
        self._timeout = timeout
        self._client: aioredis.Redis | None = None
        self._cas: Any = None
        self._prune: Any = None
        self._resync: Any = None

    def _key(self, upstream: str, task_id: str) -> str:
        return f"{self.prefix}:task:{upstream}:{task_id}"

    @property
    def _redis(self) -> aioredis.Redis:
        if self._client is None:
            raise RuntimeError("ledger is not open")
        return self._client

    async def open(self) -> None:
        """Connect and check the server answers ``PING``."""
        self._client = aioredis.Redis.from_url(
            self.url, socket_timeout=self._timeout, socket_connect_timeout=self._timeout
        )
        await self._client.ping()
        self._cas = self._client.register_script(_CAS)
        self._prune = self._client.register_script(_PRUNE)
        self._resync = self._client.register_script(_RESYNC)

    async def get(self, upstream: str, task_id: str) -> TaskRecord | None:
        """The record of (``upstream``, ``task_id``), or ``None``."""
        values = await self._redis.hmget(self._key(upstream, task_id), ["rec", "v", "resync"])
        if values[0] is None:
            return None
        return codec.decode(values[0], version=int(values[1]), needs_resync=values[2] == b"1")

    async def put(self, record: TaskRecord, expected_version: int) -> TaskRecord:
        """Compare-and-set on ``version`` in one Lua script; see :meth:`TaskLedger.put`."""
        blob = codec.encode(record)
        keys = [self._key(record.upstream, record.task_id), f"{self.prefix}:counts",
                f"{self.prefix}:live", f"{self.prefix}:terminal"]
        args = [expected_version, expected_version + 1, record.state.value,
                int(record.terminal), int(record.needs_resync), repr(record.observed_at), blob]
        if await self._cas(keys=keys, args=args) != 1:
            raise VersionConflictError(f"{record.upstream}/{record.task_id}: version moved")
        return codec.decode(blob, version=expected_version + 1, needs_resync=record.needs_resync)

    async def count_by_state(self) -> dict[str, int]:
        """Tracked tasks by canonical state."""
        raw = await self._redis.hgetall(f"{self.prefix}:counts")
        return {k.decode(): int(v) for k, v in raw.items() if int(v) > 0}

    async def mark_resync(self) -> int:
        """Flag every non-terminal task ``needs_resync``."""
        return int(await self._resync(keys=[f"{self.prefix}:live"]))

    async def prune(self, older_than: float) -> int:
        """Delete terminal tasks last observed before ``older_than`` (in batches of 1000)."""
        total = 0
        while True:
            n = int(await self._prune(keys=[f"{self.prefix}:terminal", f"{self.prefix}:counts"],
                                      args=[repr(older_than)]))
            total += n
            if n < 1000:
                return total

    async def close(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
