"""Redis task ledger: one ledger shared by several gateway replicas.

Layout (``prefix`` defaults to ``a2agw``)::

    {prefix}:task:{upstream}:{taskId}  hash  v (version), s (state), term (0/1), resync (0/1),
                                             oa (observed_at), rec (codec JSON)
    {prefix}:counts                    hash  state → number of tracked tasks
    {prefix}:live                      set   task keys not yet terminal (crash-recovery scan)
    {prefix}:terminal                  zset  task keys of terminal tasks, scored by observed_at
    {prefix}:acks                      string  a counter the replica-acknowledgement barrier
                                             increments (its write is what ``WAIT`` waits for)

The replay window (docs/resume.md §2.3)::

    {prefix}:events:{upstream}:{taskId}  stream  the task's window: entries (lineage,
                                                 payload, at), oldest first      [_events_key]
    {prefix}:window:{upstream}:{taskId}  hash    bytes (payload bytes of its entries)
                                                                                 [_window_key]
    {prefix}:windows                     zset    window → at of its oldest event
    {prefix}:windows:n                   hash    window → its events
    {prefix}:windows:total               string  events in all windows        [_windows_keys]

A window is named in the last three by the JSON ``[upstream, taskId]``. Every key of a task is
built by a method (in brackets), and each script runs on the keys of one task only (``KEYS``:
its stream and its hash), so a layout with one hash slot per task (Redis Cluster) changes
only the methods. The per-task keys expire ``retention_seconds`` after the task's newest
append (an idle window vanishes by itself); the three over all windows are moved by plain
commands after each script, so they are exact for one process whose calls do not overlap and
approximate otherwise (docs/resume.md §2.3 says how, and how they heal).

Compare-and-set runs as one Lua script (``EVALSHA``), so a terminal state recorded through
replica A is absorbing on replica B: B's stale ``put`` finds another version and loses. Uses
the ``redis`` package's asyncio client.

Connecting (docs/resume.md §4.1-4.3): ``redis://[USER:PASSWORD@]HOST:PORT/DB`` one server,
``rediss://…`` the same over TLS, ``unix:///PATH.sock?db=N`` a socket, all three parsed by
redis-py itself, with its query arguments (TLS: ``ssl_ca_certs=CA.pem``,
``ssl_certfile=CLIENT.pem``, ``ssl_keyfile=CLIENT.key``, ``ssl_cert_reqs``,
``ssl_check_hostname``, …). ``redis+sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT/SERVICE[/DB]``
(``rediss+sentinel://`` with TLS to Sentinels and data nodes alike, the same query arguments)
asks the Sentinels for the primary of ``SERVICE`` (redis-py's ``redis.asyncio.sentinel``) and
asks again whenever a connection to it is made, so a failover is followed: the calls in flight
when the primary dies fail or are retried by redis-py (a few seconds of back-off) and the next
ones reach the promoted replica. The URL's user and password are the data nodes' (``AUTH``;
an ACL user or just a password); the Sentinels' own are apart
(:attr:`RedisOptions.sentinel_username` / :attr:`~RedisOptions.sentinel_password_file`; none by
default), and so is a password read from a file (:attr:`RedisOptions.password_file`).

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
call order in that one pipeline). The window's calls go through the same pipelines: its scripts
are sent as ``EVALSHA`` of their SHA1 and loaded by that same path the first time a server
lacks them; refused ones are sent again like puts, reads (``XRANGE``, ``GET`` …) like gets,
and a write that went through (a bookkeeping increment) is never sent twice.

Replica acknowledgement (docs/resume.md §4.4): with :attr:`RedisOptions.min_replica_acks` N > 0
a ``put`` of a terminal record that won its compare-and-set does not return yet. Such puts are
gathered like the pipeline's calls, and one *barrier* at a time is sent on a connection of its
own: ``HGET`` of each gathered task's version (the write is still on the server that answers:
not lost to a failover in between), ``INCR {prefix}:acks`` and ``WAIT N timeout``. Replication is
one ordered stream, so a replica that acknowledged the barrier's write holds every write made
before it, the gathered puts included. Then each put returns, or raises
:class:`ReplicaAckError` (fewer than N acknowledgements within the timeout, or its version is
not on the server). The pipeline itself never waits: gets and non-terminal puts go on while a
barrier waits, and a terminal put waits for at most two barriers (the one in flight when its
compare-and-set was answered, then its own).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.exceptions import NoScriptError, RedisError, ResponseError

from gateway.errors import VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.ledger import codec, redact
from gateway.ledger.base import Replay, Stored, WindowEvent, WindowLimits

_log = logging.getLogger("a2a_gateway")

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

SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")
SENTINEL_PORT = 26379


class ReplicaAckError(RedisError):
    """A terminal state was written on the primary but is not known to be on
    :attr:`RedisOptions.min_replica_acks` replicas: fewer acknowledged it within
    :attr:`RedisOptions.replica_ack_timeout`, or it was no longer on the server that answered
    (lost in a failover). The write is not undone; the ``put`` fails, so the event that caused
    it is not forwarded (the shell turns this into :class:`~gateway.errors.LedgerError`)."""


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """How the Redis ledger authenticates and how durable a terminal state must be before
    ``put`` returns (``ledger:`` in the config, :meth:`gateway.config.LedgerConfig.redis_options`).

    ``min_replica_acks``: replicas that must acknowledge a terminal state (``WAIT``) before its
    ``put`` returns; 0 (default) returns once the primary answered. ``replica_ack_timeout``:
    seconds to wait for them (> 0). ``password_file``: a file holding the data nodes' password
    (a Kubernetes Secret; one trailing newline is dropped), read at every ``open``, for a URL
    that names no password (it may name the user). ``sentinel_username`` /
    ``sentinel_password_file``: what is presented to the Sentinels of a ``redis+sentinel://``
    URL (their own ``requirepass`` / ACL user); none by default.
    """

    min_replica_acks: int = 0
    replica_ack_timeout: float = 1.0
    password_file: str | None = None
    sentinel_username: str | None = None
    sentinel_password_file: str | None = None


@dataclass(frozen=True, slots=True)
class SentinelURL:
    """A parsed ``redis+sentinel://`` URL: the Sentinels' ``(host, port)`` pairs, the monitored
    ``service`` name, the ``db`` number, the data nodes' ``username`` / ``password``, ``tls``
    (``rediss+sentinel://``) and redis-py connection keyword arguments from the query string."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    options: dict[str, Any] = field(default_factory=dict)


def parse_sentinel_url(url: str) -> SentinelURL:
    """Parse ``redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]/SERVICE[/DB][?QUERY]``
    (``rediss+sentinel://`` for TLS; port 26379 by default; ``[::1]:26379`` for IPv6). The query
    takes redis-py's URL arguments (``ssl_ca_certs=…``, ``socket_timeout=…``, ``db=…``).

    Raises:
        ValueError: another scheme, no Sentinel, a bad port, no service name or a bad DB.
    """
    shown = redact(url)
    scheme, sep, rest = url.partition("://")
    if not sep or f"{scheme}://" not in SENTINEL_SCHEMES:
        raise ValueError(f"{shown}: not a redis+sentinel:// URL")
    rest, _, query = rest.partition("?")
    userinfo, at, rest = rest.rpartition("@")
    hosts, _, path = rest.partition("/")
    sentinels = tuple(_host_port(item, shown) for item in hosts.split(","))
    service, _, db_text = path.strip("/").partition("/")
    if not service:
        raise ValueError(f"{shown}: no Sentinel service name (…/SERVICE[/DB])")
    options = dict(parse_url(("rediss" if scheme.startswith("rediss") else "redis") + "://x/?" + query))
    for key in ("host", "port", "connection_class"):
        options.pop(key, None)
    if not scheme.startswith("rediss") and any(key.startswith("ssl") for key in options):
        raise ValueError(f"{shown}: ssl_* arguments need rediss+sentinel://")
    if db_text and not db_text.isdigit():
        raise ValueError(f"{shown}: the DB after the service name must be a number")
    db = options.pop("db", int(db_text or 0))  # as redis-py: a db= in the query wins
    username, password = options.pop("username", None), options.pop("password", None)
    if at:  # as redis-py: the userinfo wins over username= / password= in the query
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or username
        password = unquote(secret) if colon else password
    return SentinelURL(sentinels, unquote(service), db, username, password,
                       scheme.startswith("rediss"), options)


def _host_port(item: str, shown: str) -> tuple[str, int]:
    item = item.strip()
    if item.startswith("["):
        host, _, tail = item[1:].partition("]")
        port_text = tail.removeprefix(":")
    else:
        host, _, port_text = item.partition(":")
    if not host:
        raise ValueError(f"{shown}: a Sentinel address without a host")
    if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ValueError(f"{shown}: bad Sentinel port {port_text!r}")
    return host, int(port_text) if port_text else SENTINEL_PORT


def _read_secret(path: str) -> str:
    """The content of a password file, one trailing newline dropped. Raises OSError."""
    text = Path(path).read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


# -- the replay window (docs/resume.md §2.3) ------------------------------------------------------
#
# Each script touches only the keys of ONE task (KEYS[1]: its stream, KEYS[2]: its window hash),
# so under Redis Cluster it runs in that task's slot. The bookkeeping over all tasks (the
# windows index, the per-window counts, the total) is done by separate commands afterwards.

_FRONT = """
local function field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end

-- Drop entries from the front of the stream KEYS[1] (n entries) while more(dropped, freed,
-- entry, its payload bytes) says so. Returns the number dropped, their payload bytes, the
-- first entry kept (nil: none kept). XRANGE reads ahead `ahead` entries, then 16 at a time.
local function trim_front(n, ahead, more)
  local dropped, freed, kept, start, count = 0, 0, nil, '-', ahead
  while kept == nil and dropped < n do
    local batch = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', count)
    if #batch == 0 then break end
    for _, entry in ipairs(batch) do
      local len = string.len(field(entry[2], 'payload') or '')
      if more(dropped, freed, entry, len) then
        dropped, freed, start = dropped + 1, freed + len, '(' .. entry[1]
      else
        kept = entry
        break
      end
    end
    count = 16
  end
  if dropped >= n then  -- the stream stays, empty: it remembers its last id (never reused)
    redis.call('XTRIM', KEYS[1], 'MAXLEN', 0)
    redis.call('DEL', KEYS[2])
  elseif dropped > 0 then
    if kept == nil then kept = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', 1)[1] end
    redis.call('XTRIM', KEYS[1], 'MINID', kept[1])
    if freed > 0 then redis.call('HINCRBY', KEYS[2], 'bytes', -freed) end  -- never '-0'
  end
  return dropped, freed, kept
end
"""

# ARGV: lineage ('' = the event's own id), payload, at, max events, max bytes, ttl ms.
# Returns {entry id, 1 if the window was empty (or absent), entries left, entries dropped, at of
# the oldest entry left if the front moved else ''}.
_APPEND = _FRONT + """
local new = redis.call('XLEN', KEYS[1]) == 0
if new then redis.call('DEL', KEYS[2]) end
local id = redis.call('XADD', KEYS[1], '*', 'lineage', ARGV[1], 'payload', ARGV[2], 'at', ARGV[3])
local n = redis.call('XLEN', KEYS[1])
local size = redis.call('HINCRBY', KEYS[2], 'bytes', string.len(ARGV[2]))
local max_n, max_b = tonumber(ARGV[4]), tonumber(ARGV[5])
local dropped, freed, kept, oldest = 0, 0, nil, ''
if n > max_n or size > max_b then
  dropped, freed, kept = trim_front(n, math.max(n - max_n, 1) + 1, function(d, f, entry, len)
    return n - d > max_n or size - f > max_b
  end)
  if kept ~= nil then oldest = field(kept[2], 'at') end
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return {id, new and 1 or 0, n - dropped, dropped, oldest}
"""

# ARGV: at most this many entries ('' = any), only entries with at <= this ('' = any), only
# entries with at < this ('' = any). Returns {entries dropped, entries left (0: the window is
# empty or gone), at of the oldest entry left or ''}.
_TRIM = _FRONT + """
local n = redis.call('XLEN', KEYS[1])
if n == 0 then  -- expired, or emptied
  redis.call('DEL', KEYS[2])
  return {0, 0, ''}
end
local want, bound, cutoff = tonumber(ARGV[1]) or n, tonumber(ARGV[2]), tonumber(ARGV[3])
local dropped, _, kept = trim_front(n, math.min(want, n) + 1, function(d, f, entry, len)
  if d >= want then return false end
  local at = tonumber(field(entry[2], 'at'))
  return (bound == nil or at <= bound) and (cutoff == nil or at < cutoff)
end)
return {dropped, n - dropped, kept ~= nil and field(kept[2], 'at') or ''}
"""

_log = logging.getLogger("a2a_gateway")

_APPEND_SHA = hashlib.sha1(_APPEND.encode()).hexdigest()
_TRIM_SHA = hashlib.sha1(_TRIM.encode()).hexdigest()
#: The window's scripts by SHA1 (what ``SCRIPT LOAD`` answers): they are first sent as
#: ``EVALSHA`` and loaded by the pipeline's ``NoScript`` path when the server lacks them.
_WINDOW_SCRIPTS = {_APPEND_SHA: _APPEND, _TRIM_SHA: _TRIM}
#: Commands that only read: after a refused script they are sent again (they must see it).
_READS = frozenset({"HMGET", "HGET", "GET", "XRANGE", "ZRANGE", "ZRANGEBYSCORE"})
#: A Redis event id: the stream entry id, ``.``, and the task's tag (:meth:`RedisLedger._tag`).
_EVENT_ID = re.compile(r"([0-9]{1,20}-[0-9]{1,20})\.([0-9a-f]{8})")
#: At most this many windows are pruned per pipeline.
PRUNE_CHUNK = 256


def _log_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        _log.warning("ledger_window_bookkeeping_failed", extra={"backend": "redis",
                                                                 "error": str(future.exception())})


def _pairs(reply: list[Any]) -> list[tuple[bytes, Any]]:
    """``(member, score)`` pairs of a ``ZRANGE … WITHSCORES`` reply, flat or already paired
    (as the client's parser of the day gives it)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return [(m, score) for m, score in reply]
    return list(zip(reply[::2], reply[1::2]))


class RedisLedger:
    """:class:`~gateway.ledger.base.TaskLedger` in Redis.

    Args:
        url: ``redis://[USER:PASSWORD@]HOST:PORT/DB`` (``rediss://`` for TLS, ``unix://``), or
            ``redis+sentinel://[USER:PASSWORD@]HOST:PORT,…/SERVICE[/DB]`` (see the module).
        prefix: key prefix, so several gateway deployments can share one Redis.
        timeout: socket timeout in seconds for every command (a barrier's ``WAIT`` gets
            ``options.replica_ack_timeout`` more).
        window: the replay window's bounds.
        options: authentication and replica acknowledgement (:class:`RedisOptions`).

    Raises:
        ValueError: a URL redis-py cannot parse, or a bad ``redis+sentinel://`` URL.
    """

    backend = "redis"
    _cap_lock: asyncio.Lock | None = None  # made at the first use (_cap_total)
    #: the compare-and-set script ``put`` sends (loaded at open and again after ``NoScript``)
    _cas_script = _CAS

    def __init__(self, url: str, *, prefix: str = "a2agw", timeout: float = 2.0,
                 window: WindowLimits | None = None, options: RedisOptions | None = None) -> None:
        self._window_limits = window or WindowLimits()
        self.url = url
        self.prefix = prefix
        self.options = options or RedisOptions()
        self._sentinel_url = parse_sentinel_url(url) if url.startswith(SENTINEL_SCHEMES) else None
        if self._sentinel_url is None:
            parse_url(url)  # raises ValueError now rather than at open
        self._timeout = timeout
        self._client: aioredis.Redis | None = None
        self._ack_client: aioredis.Redis | None = None
        self._sentinel: Sentinel | None = None
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._sender: asyncio.Task[None] | None = None
        self._held: list[tuple[str, int, asyncio.Future[None]]] = []
        self._acker: asyncio.Task[None] | None = None
        #: terminal puts that failed for want of replica acknowledgements (ReplicaAckError)
        self.replica_ack_failures = 0
        self._cas_sha = ""
        self._prune: Any = None
        self._resync: Any = None

    def _key(self, upstream: str, task_id: str) -> str:
        return f"{self.prefix}:task:{upstream}:{task_id}"

    def _events_key(self, upstream: str, task_id: str) -> str:
        """The stream of the task's replay window (docs/resume.md §2.3)."""
        return f"{self.prefix}:events:{upstream}:{task_id}"

    def _window_key(self, upstream: str, task_id: str) -> str:
        """The hash beside the task's stream: ``bytes``, the payload bytes of its entries."""
        return f"{self.prefix}:window:{upstream}:{task_id}"

    def _windows_keys(self) -> tuple[str, str, str]:
        """The bookkeeping over all windows: the index (zset: window → ``at`` of its oldest
        event), the counts (hash: window → its events) and the total (string: events in all
        windows). Each is used by single-key commands only."""
        return f"{self.prefix}:windows", f"{self.prefix}:windows:n", f"{self.prefix}:windows:total"

    @property
    def _redis(self) -> aioredis.Redis:
        if self._client is None:
            raise RuntimeError("ledger is not open")
        return self._client

    def _connect(self, socket_timeout: float) -> aioredis.Redis:
        """A client of the primary whose commands time out after ``socket_timeout`` seconds.
        Raises OSError (a password file that cannot be read)."""
        opts = self.options
        password = _read_secret(opts.password_file) if opts.password_file else None
        timeouts = {"socket_timeout": socket_timeout, "socket_connect_timeout": self._timeout}
        target = self._sentinel_url
        if target is None:
            extra = {"password": password} if password is not None else {}
            return aioredis.Redis.from_url(self.url, **timeouts, **extra)
        if self._sentinel is None:
            tls = {k: v for k, v in target.options.items() if k.startswith("ssl")}
            sentinel_kwargs: dict[str, Any] = {"socket_timeout": self._timeout,
                                               "socket_connect_timeout": self._timeout,
                                               "ssl": target.tls, **(tls if target.tls else {})}
            if opts.sentinel_username:
                sentinel_kwargs["username"] = opts.sentinel_username
            if opts.sentinel_password_file:
                sentinel_kwargs["password"] = _read_secret(opts.sentinel_password_file)
            self._sentinel = Sentinel(
                list(target.sentinels), sentinel_kwargs=sentinel_kwargs, **target.options,
                db=target.db, username=target.username, ssl=target.tls,
                password=password if password is not None else target.password)
        # as redis-py does for one server, a timeout in the URL's query wins
        return self._sentinel.master_for(target.service, **{
            k: v for k, v in timeouts.items() if k not in target.options})

    async def open(self) -> None:
        """Connect (through the Sentinels for a ``redis+sentinel://`` URL) and check the
        primary answers ``PING``.

        Raises:
            OSError: a password file cannot be read. redis.exceptions.RedisError: the server
            (or no Sentinel) answers, or refuses the credentials.
        """
        self._client = self._connect(self._timeout)
        if self.options.min_replica_acks > 0:
            self._ack_client = self._connect(self._timeout + self.options.replica_ack_timeout)
        try:
            await self._client.ping()
        except MasterNotFoundError as exc:  # its own text lists every Sentinel client's repr
            target = self._sentinel_url
            assert target is not None
            asked = ", ".join(f"{host}:{port}" for host, port in target.sentinels)
            raise MasterNotFoundError(f"no Sentinel at {asked} names a primary for "
                                      f"{target.service!r} (down, unreachable, refusing the "
                                      "Sentinel credentials, or not monitoring it)") from exc
        self._cas_sha = await self._client.script_load(self._cas_script)
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
                        # Sent again, in call order: the refused scripts, and every read called
                        # after the first of them (so it sees them). Writes that went through
                        # stand (sending them again would make a put lose its own CAS, or count
                        # an event twice).
                        self._cas_sha = await self._redis.script_load(self._cas_script)
                        for sha in {batch[i][0][1] for i in refused} & _WINDOW_SCRIPTS.keys():
                            await self._redis.script_load(_WINDOW_SCRIPTS[sha])
                        redo = [i for i in range(min(refused), len(batch))
                                if i in refused or batch[i][0][0] in _READS]
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
        if command[0] != "EVALSHA" or command[1] in _WINDOW_SCRIPTS:
            return command
        return (command[0], self._cas_sha, *command[2:])

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
        see :meth:`TaskLedger.put`. Returns the new version. With
        :attr:`RedisOptions.min_replica_acks`, a terminal record returns only once that many
        replicas acknowledged it (the module's *Replica acknowledgement*).

        Raises:
            VersionConflictError: another writer got there first.
            ReplicaAckError: a terminal record is not known to be on enough replicas in time.
        """
        blob = codec.encode(record)
        version = expected_version + 1
        key = self._key(record.upstream, record.task_id)
        done = await self._call(
            "EVALSHA", self._cas_sha, 4, key,
            f"{self.prefix}:counts", f"{self.prefix}:live", f"{self.prefix}:terminal",
            expected_version, version, record.state.value, int(record.terminal),
            repr(record.observed_at), blob)
        if done != 1:
            raise VersionConflictError(f"{record.upstream}/{record.task_id}: version moved")
        if record.terminal and self.options.min_replica_acks > 0:
            try:
                await self._replicated(key, version)
            except ReplicaAckError as exc:
                self.replica_ack_failures += 1
                _log.warning("ledger_replica_ack_failed", extra={
                    "upstream": record.upstream, "task_id": record.task_id, "error": str(exc)})
                raise
        return version

    def _replicated(self, key: str, version: int) -> asyncio.Future[None]:
        """Hold a terminal put until the next barrier says it is on enough replicas."""
        if self._ack_client is None:
            raise RuntimeError("ledger is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._held.append((key, version, future))
        if self._acker is None:
            self._acker = loop.create_task(self._acknowledge())
        return future

    async def _acknowledge(self) -> None:
        """Send barriers, one in flight at a time, until no terminal put is held."""
        wanted = self.options.min_replica_acks
        timeout = self.options.replica_ack_timeout
        try:
            while self._held:
                batch, self._held = self._held, []
                try:
                    *versions, acked = await self._barrier([key for key, _, _ in batch])
                except Exception as exc:
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (key, version, future), stored in zip(batch, versions):
                    if future.done():  # the caller was cancelled
                        continue
                    if stored is None or int(stored) < version:
                        future.set_exception(ReplicaAckError(
                            f"{key} version {version} is not on the primary that answered "
                            "(lost in a failover)"))
                    elif acked < wanted:
                        future.set_exception(ReplicaAckError(
                            f"{key} version {version} acknowledged by {acked} of {wanted} "
                            f"replicas within {timeout:g} s"))
                    else:
                        future.set_result(None)
        finally:
            self._acker = None

    async def _barrier(self, keys: list[str]) -> list[Any]:
        """One round trip on the barrier's own connection: each key's version, then a write
        and ``WAIT`` for it. Returns the versions (bytes or None), then how many replicas
        acknowledged."""
        assert self._ack_client is not None
        pipe = self._ack_client.pipeline(transaction=False)
        for key in keys:
            pipe.hget(key, "v")
        pipe.incr(f"{self.prefix}:acks")
        pipe.execute_command("WAIT", self.options.min_replica_acks,
                             max(1, round(self.options.replica_ack_timeout * 1000)))
        *versions, _, acked = await pipe.execute()
        return [*versions, int(acked)]

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
        """Wait for the queued calls and held terminal puts, then close the connection pools
        (and the Sentinel clients)."""
        if self._sender is not None:
            await asyncio.shield(self._sender)
        if self._acker is not None:
            await asyncio.shield(self._acker)
        for client in (self._client, self._ack_client):
            if client is not None:
                await client.aclose()
                await client.connection_pool.disconnect()  # master_for's pool, on older redis-py too
        if self._sentinel is not None:
            for sentinel in self._sentinel.sentinels:
                await sentinel.aclose()
        self._client = self._ack_client = self._sentinel = None

    # --- the replay window (docs/resume.md §2.3) -------------------------------------------------

    @staticmethod
    def _tag(upstream: str, task_id: str) -> str:
        """8 hex digits naming the task in its event ids: a stream entry id is unique only
        within its stream, and another task's id must not be found in this one's."""
        name = f"{upstream}\x00{task_id}".encode("utf-8", "surrogatepass")
        return hashlib.blake2s(name, digest_size=4).hexdigest()

    async def append_event(self, upstream: str, task_id: str, lineage: str | None,
                           payload: bytes, at: float) -> tuple[str, str]:
        """``XADD`` the event to the task's stream and trim it (oldest first, to
        ``max_events_per_task`` entries and ``max_bytes_per_task`` payload bytes) in one
        script, sent in call order with ``put``/``get`` and in the same pipeline as the
        bookkeeping over all windows; when the total is then over ``max_events_total``, drop
        the oldest events of all windows before returning (approximate with several replicas:
        docs/resume.md §2.3). One round trip unless the cap is met. See
        :meth:`TaskLedger.append_event`.

        Returns:
            ``(event_id, lineage)``: ``ENTRYID.TAG`` (the stream entry id, ordered within the
            task and valid on every replica, and the task's :meth:`_tag`) and the lineage.

        Raises:
            redis.exceptions.RedisError: the script failed (nothing was kept, and its counting
                is taken back) or the connection did.
        """
        limits = self._window_limits
        member = orjson.dumps([upstream, task_id])
        index, counts, total_key = self._windows_keys()
        # The script, and the bookkeeping of an append that trims nothing (the common case),
        # in one pipeline; what the script did otherwise is put right by the commands after it.
        script, count, indexed, total = await asyncio.gather(
            self._call("EVALSHA", _APPEND_SHA, 2, self._events_key(upstream, task_id),
                       self._window_key(upstream, task_id), lineage or "", payload, repr(at),
                       limits.max_events_per_task, limits.max_bytes_per_task,
                       max(1, int(limits.retention_seconds * 1000))),
            self._call("HINCRBY", counts, member, 1),
            self._call("ZADD", index, "NX", repr(at), member),
            self._call("INCRBY", total_key, 1),
            return_exceptions=True)
        if isinstance(script, BaseException):
            if not isinstance(count, BaseException):  # counted an event that is not there
                self._fire("HINCRBY", counts, member, -1)
                self._fire("INCRBY", total_key, -1)
            raise script
        for reply in (count, indexed, total):
            if isinstance(reply, BaseException):
                raise reply
        entry, new, left, dropped, oldest = script
        event_id = f"{entry.decode()}.{self._tag(upstream, task_id)}"
        if new:  # the count held the events of an earlier window of the task (expired): replace it
            total += self._settle(member, left - count, left, repr(at))
        elif dropped:
            total += self._settle(member, -dropped, left, oldest.decode())
        if total > limits.max_events_total:
            await self._cap_total()
        return event_id, lineage or event_id

    def _settle(self, member: bytes, delta: int, left: int, oldest: str) -> int:
        """Queue the bookkeeping that puts a window right after the append script (in call
        order: every later call sees it; nobody waits for its replies): its count moves by
        ``delta``, to ``left`` events (0: gone), and its oldest event is at ``oldest``. Returns
        ``delta``."""
        index, counts, total = self._windows_keys()
        if left <= 0:
            self._fire("HDEL", counts, member)
            self._fire("ZREM", index, member)
        else:
            if delta:
                self._fire("HINCRBY", counts, member, delta)
            self._fire("ZADD", index, oldest, member)
        if delta:
            self._fire("INCRBY", total, delta)
        return delta

    def _fire(self, *command: Any) -> None:
        """Queue ``command`` without waiting for its reply (an error is logged)."""
        self._call(*command).add_done_callback(_log_failure)

    async def _trim_window(self, member: bytes, *args: Any) -> int:
        """Run the front-trimming script on one window (``args``: its ``ARGV``) and set the
        window's bookkeeping to what the script found: its count to the entries left (so a
        count that drifted — overlapping calls, another replica, a process that died between a
        script and its bookkeeping — is healed here), its score to its oldest entry; a window
        that vanished (expired) leaves the bookkeeping. Returns the events the script dropped."""
        upstream, task_id = orjson.loads(member)
        index, counts, total = self._windows_keys()
        counted, (dropped, left, oldest) = await asyncio.gather(
            self._call("HGET", counts, member),
            self._call("EVALSHA", _TRIM_SHA, 2, self._events_key(upstream, task_id),
                       self._window_key(upstream, task_id), *args))
        delta = left - int(counted or 0)
        if left <= 0:
            calls = [self._call("HDEL", counts, member), self._call("ZREM", index, member)]
        else:
            calls = [self._call("HSET", counts, member, left), self._call("ZADD", index, oldest, member)]
        if delta:
            calls.append(self._call("INCRBY", total, delta))
        await asyncio.gather(*calls)
        return max(0, int(dropped))

    async def _cap_total(self) -> None:
        """Drop the oldest events of all windows (by ``at``) until the total is within
        ``max_events_total``: the window with the oldest event loses its events up to the
        oldest event of the next window, and so on. One at a time per process."""
        if self._cap_lock is None:
            self._cap_lock = asyncio.Lock()
        index, _, total_key = self._windows_keys()
        cap = self._window_limits.max_events_total
        async with self._cap_lock:
            total = int(await self._call("GET", total_key) or 0)
            for _ in range(10_000):  # each round drops, forgets a vanished window or fixes a score
                if total <= cap:
                    return
                oldest = _pairs(await self._call("ZRANGE", index, 0, 1, "WITHSCORES"))
                if not oldest:
                    return  # nothing indexed: the total is off (another replica's bookkeeping)
                bound = repr(float(oldest[1][1])) if len(oldest) > 1 else ""
                await self._trim_window(oldest[0][0], total - cap, bound, "")
                total = int(await self._call("GET", total_key) or 0)

    async def events_after(self, upstream: str, task_id: str, event_id: str) -> Replay:
        """``XRANGE`` of the task's stream from the entry ``event_id`` names (sent in call
        order, so it sees every append called before it): found when that entry is the
        first one; then its lineage's later entries. An id that is not this task's
        ``ENTRYID.TAG`` (or that the server refuses as a stream id) is ``Replay(False)``.
        See :meth:`TaskLedger.events_after`."""
        match = _EVENT_ID.fullmatch(event_id)
        if match is None or match[2] != self._tag(upstream, task_id):
            return Replay(False)
        entry = match[1]
        try:
            entries = await self._call("XRANGE", self._events_key(upstream, task_id), entry, "+")
        except ResponseError as exc:
            if "stream ID" in str(exc):
                return Replay(False)
            raise
        if not entries or entries[0][0].decode() != entry:
            return Replay(False)
        tag = match[2]
        lineage = entries[0][1][b"lineage"].decode() or event_id
        later = []
        for raw_id, fields in entries[1:]:
            if fields[b"lineage"].decode() == lineage:
                later.append(WindowEvent(f"{raw_id.decode()}.{tag}", lineage, fields[b"payload"]))
        return Replay(True, lineage, tuple(later))

    async def prune_events(self, older_than: float) -> int:
        """Trim every window whose oldest event is older than ``older_than``, from its front
        while the events are older (a script per window, :data:`PRUNE_CHUNK` windows per
        pipeline); a window that expired by itself is only taken out of the bookkeeping.

        Returns how many events were deleted (not counting expired ones).
        """
        index, _, _ = self._windows_keys()
        cutoff = repr(older_than)
        deleted, seen = 0, set()
        while True:
            members = await self._call("ZRANGEBYSCORE", index, "-inf", f"({cutoff}", "LIMIT", 0, PRUNE_CHUNK)
            todo = [m for m in members if m not in seen]
            if not todo:
                return deleted
            seen.update(todo)
            dropped = await asyncio.gather(*(self._trim_window(m, "", "", cutoff) for m in todo))
            deleted += sum(dropped)
