"""Redis task ledger: one ledger shared by several gateway replicas.

Layout (``prefix`` defaults to ``a2agw``)::

    {prefix}:task:{upstream}:{taskId}  hash  v (version), s (state), term (0/1), resync (0/1),
                                             oa (observed_at), rec (codec JSON)
    {prefix}:counts                    hash  state → number of tracked tasks
    {prefix}:live                      set   task keys not yet terminal (crash-recovery scan)
    {prefix}:terminal                  zset  task keys of terminal tasks, scored by observed_at

Compare-and-set runs as one Lua script (``EVALSHA``), so a terminal state recorded through
replica A is absorbing on replica B: B's stale ``put`` finds another version and loses. Uses
the ``redis`` package's asyncio client.

Pipelining: ``get`` and ``put`` calls are queued and sent in call order as one pipeline (one
write, one round trip for all of them), and only one pipeline is in flight at a time: the calls
made while it travels form the next one. So a process's operations reach the server in call
order (a ``get`` sees every ``put`` called before it), 32 concurrent transitions cost a couple of
round trips instead of 64, and a ``put`` returns only once the server answered its own script
(each command of a pipeline has its own reply: a lost compare-and-set fails only its own call).
A failure of the connection fails every call of the pipeline it hit. ``count_by_state``,
``mark_resync`` and ``prune`` do not need that order and use a connection of their own from the
pool. If the server lost the script (restart, ``SCRIPT FLUSH``), it is loaded again, and the
``put`` calls it refused are sent once more together with every ``get`` called after the first
of them, in call order, right after the pipeline that was refused (a ``get`` still sees every
``put`` called before it; only which of two same-version ``put`` calls wins may differ from
call order in that one pipeline).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from gateway.errors import VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.ledger import codec
from gateway.ledger.base import Replay, Stored, WindowLimits

_CAS = """
local cur = redis.call('HGET', KEYS[1], 'v')
if (cur == false and ARGV[1] ~= '0') or (cur ~= false and cur ~= ARGV[1]) then return 0 end
local old = redis.call('HGET', KEYS[1], 's')
if old then redis.call('HINCRBY', KEYS[2], old, -1) end
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
redis.call('HSET', KEYS[1], 'v', ARGV[2], 's', ARGV[3], 'term', ARGV[4], 'resync', '0',
           'oa', ARGV[5], 'rec', ARGV[6])
if ARGV[4] == '1' then
  redis.call('SREM', KEYS[3], KEYS[1])
  redis.call('ZADD', KEYS[4], ARGV[5], KEYS[1])
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

    def __init__(self, url: str, *, prefix: str = "a2agw", timeout: float = 2.0,
                 window: WindowLimits | None = None) -> None:
        self._window_limits = window or WindowLimits()
        self.url = url
        self.prefix = prefix
        self._timeout = timeout
        self._client: aioredis.Redis | None = None
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._sender: asyncio.Task[None] | None = None
        self._cas_sha = ""
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
        self._cas_sha = await self._client.script_load(_CAS)
        self._prune = self._client.register_script(_PRUNE)
        self._resync = self._client.register_script(_RESYNC)

    def _call(self, *command: Any) -> asyncio.Future[Any]:
        """Queue ``command`` for the next pipeline; the future gets its reply."""
        if self._client is None:
            raise RuntimeError("ledger is not open")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.append((command, future))
        if self._sender is None:
            self._sender = loop.create_task(self._send())
        return future

    async def _send(self) -> None:
        """Send the queued commands as pipelines, one in flight at a time, until none is left."""
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    replies = await self._pipeline([command for command, _ in batch])
                    refused = {i for i, r in enumerate(replies) if isinstance(r, NoScriptError)}
                    if refused:
                        # Sent again, in call order: the refused puts, and every read called
                        # after the first of them (so it sees them). Puts that went through
                        # stand (sending them again would make them lose their own CAS).
                        self._cas_sha = await self._redis.script_load(_CAS)
                        redo = [i for i in range(min(refused), len(batch))
                                if i in refused or batch[i][0][0] != "EVALSHA"]
                        again = await self._pipeline([self._with_current_sha(batch[i][0]) for i in redo])
                        for i, reply in zip(redo, again):
                            replies[i] = reply
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), reply in zip(batch, replies):
                    if future.done():  # the caller was cancelled
                        continue
                    if isinstance(reply, Exception):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
        finally:
            self._sender = None

    def _with_current_sha(self, command: tuple[Any, ...]) -> tuple[Any, ...]:
        return (command[0], self._cas_sha, *command[2:]) if command[0] == "EVALSHA" else command

    async def _pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        pipe = self._redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return await pipe.execute(raise_on_error=False)

    async def get(self, upstream: str, task_id: str) -> Stored | None:
        """The record of (``upstream``, ``task_id``) with its version and restart flag, or
        ``None``.

        Raises:
            ValueError: the stored document is not a record (:func:`codec.decode`).
        """
        values = await self._call("HMGET", self._key(upstream, task_id), "rec", "v", "resync")
        if values[0] is None:
            return None
        return Stored(codec.decode(values[0]), int(values[1]), values[2] == b"1")

    async def put(self, record: TaskRecord, expected_version: int) -> int:
        """Compare-and-set on the version in one Lua script (which also clears ``resync``);
        see :meth:`TaskLedger.put`. Returns the new version."""
        blob = codec.encode(record)
        version = expected_version + 1
        done = await self._call(
            "EVALSHA", self._cas_sha, 4, self._key(record.upstream, record.task_id),
            f"{self.prefix}:counts", f"{self.prefix}:live", f"{self.prefix}:terminal",
            expected_version, version, record.state.value, int(record.terminal),
            repr(record.observed_at), blob)
        if done != 1:
            raise VersionConflictError(f"{record.upstream}/{record.task_id}: version moved")
        return version

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
        """Wait for the queued calls, then close the connection pool."""
        if self._sender is not None:
            await asyncio.shield(self._sender)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # --- the replay window (to be implemented) ---------------------------------------------------

    async def append_event(self, upstream: str, task_id: str, lineage: str | None,
                           payload: bytes, at: float) -> tuple[str, str]:
        raise NotImplementedError

    async def events_after(self, upstream: str, task_id: str, event_id: str) -> Replay:
        raise NotImplementedError

    async def prune_events(self, older_than: float) -> int:
        raise NotImplementedError
