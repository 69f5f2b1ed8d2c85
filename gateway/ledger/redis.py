"""Redis task ledger: one ledger shared by several gateway replicas.

Layout (``prefix`` defaults to ``a2agw``)::

    {prefix}:task:{upstream}:{taskId}  hash  v (version), s (state), term (0/1), resync (0/1),
                                             oa (observed_at), rec (codec JSON)
    {prefix}:task@{tenant}:{upstream}:{taskId}  the same, for a task of an A2A tenant
                                             (escaped: :func:`tenant_part`; docs/callers.md §1);
                                             ``events`` and ``window`` keys likewise
    {prefix}:counts                    hash  state → number of tracked tasks
    {prefix}:live                      set   task keys not yet terminal (crash-recovery scan)
    {prefix}:terminal                  zset  task keys of terminal tasks, scored by observed_at
    {prefix}:observed:{upstream}       zset  the upstream's live tasks, ``TENANT\\0TASKID`` (the tenant's
                                             ``%``/NUL escaped), scored
                                             by observed_at (the sweep's page, docs/sweep.md §5)
    {prefix}:acks                      string  a counter the replica-acknowledgement barrier
                                             increments (its write is what ``WAIT`` waits for)
    {prefix}:card:{upstream}           hash    g (the upstream's card generation), e:{variant}
                                             (that card variant's ETag); docs/field-cases.md F20
    {prefix}:probe                     string  the readiness probe's write (its time; expires after 60 s)

The replay window (docs/resume.md §2.3)::

    {prefix}:events:{upstream}:{taskId}  stream  the task's window: entries (lineage,
                                                 payload, at), oldest first      [_events_key]
    {prefix}:window:{upstream}:{taskId}  hash    bytes (payload bytes of its entries)
                                                                                 [_window_key]
    {prefix}:windows                     zset    window → at of its oldest event
    {prefix}:windows:n                   hash    window → its events
    {prefix}:windows:b                   hash    window → its payload bytes
    {prefix}:windows:total               string  events in all windows
    {prefix}:windows:bytes               string  payload bytes in all windows [_windows_keys]

A window is named in the last five by the JSON ``[upstream, taskId]`` (``[upstream, taskId,
tenant]`` for a task of a tenant). Every key is built by a
method (in brackets). A window script runs on the keys of one task only (``KEYS``: its stream
and its hash), a bookkeeping script on the five keys over all windows only, never both; the
keys carry no hash tag, so Redis Cluster would still need one in the key methods
(docs/resume.md §4.6). The per-task keys expire ``retention_seconds`` after the task's newest
append (an idle window vanishes by itself). The bookkeeping script moves a window's count and
size and the totals together, so the totals always equal the sums; it runs after the window
script, so the counts are exact for one process whose calls do not overlap and approximate
otherwise, and every ``prune_events`` sets each window's count to what its keys hold and
recounts the totals (docs/resume.md §2.3 says how far off they can be, and for how long).

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
and a write that went through (a bookkeeping script the server ran) is never sent twice.

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
import time
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
from gateway.ledger import codec
from gateway.ledger.base import (
    LiveTask,
    Replay,
    Stored,
    TimelineEntry,
    TimelineLimits,
    WindowEvent,
    WindowLimits,
    put_then_append,
    decode_entry,
    encode_entry,
)
from gateway.ledger.redis_push import RedisPushStore
from gateway.ledger.urls import redact

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
  redis.call('ZREM', KEYS[5], ARGV[7])
else
  redis.call('SADD', KEYS[3], KEYS[1])
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[7])
end
return 1
"""

#: observe_card (docs/field-cases.md F20), on the upstream's card hash alone: KEYS[1]; ARGV: the
#: variant, the ETag. The generation after it: one more at the first card, and whenever the
#: variant's ETag differs from the one recorded (gateway.ledger.base.next_card_generation).
_OBSERVE_CARD = """
local field = 'e:' .. ARGV[1]
local before = redis.call('HGET', KEYS[1], field)
local g = tonumber(redis.call('HGET', KEYS[1], 'g') or '0')
redis.call('HSET', KEYS[1], field, ARGV[2])
if g == 0 or (before and before ~= ARGV[2]) then
  g = g + 1
  redis.call('HSET', KEYS[1], 'g', g)
end
return g
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
local base = string.len(ARGV[1]) + 6  -- past '{prefix}:task': ':' or '@TENANT:' follows
for _, key in ipairs(keys) do
  local term, oa = unpack(redis.call('HMGET', key, 'term', 'oa'))
  if term == '0' then
    redis.call('HSET', key, 'resync', '1')
    n = n + 1
    -- index it for the sweep (a task stored by a version before the index had none)
    local rest, tenant = string.sub(key, base), ''
    if string.sub(rest, 1, 1) == '@' then  -- '@TENANT:UPSTREAM:TASK', the tenant escaped
      local c = string.find(rest, ':', 1, true)
      if c then
        tenant = string.sub(rest, 2, c - 1)
        -- as _observed_member escapes it: '%' stays '%25', NUL is '%00'
        tenant = (string.gsub(tenant, '%%3A', ':'))
        tenant = (string.gsub(tenant, '%%7D', '}'))
        tenant = (string.gsub(tenant, '%%7B', '{'))
        tenant = (string.gsub(tenant, '%z', '%%00'))
        rest = string.sub(rest, c)
      end
    end
    rest = string.sub(rest, 2)
    local colon = string.find(rest, ':', 1, true)
    if colon then
      redis.call('ZADD', ARGV[1] .. ':observed:' .. string.sub(rest, 1, colon - 1), oa,
                 tenant .. '\\0' .. string.sub(rest, colon + 1))
    end
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
    sentinels = tuple(host_port(item, shown) for item in hosts.split(","))
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


def host_port(item: str, shown: str, *, what: str = "Sentinel", default_port: int = SENTINEL_PORT) -> tuple[str, int]:
    """``(host, port)`` of one ``HOST[:PORT]`` / ``[IPv6][:PORT]`` of a URL's address list
    (``what``: whose, for the error). Raises ValueError naming the URL as ``shown``."""
    item = item.strip()
    if item.startswith("["):
        host, _, tail = item[1:].partition("]")
        port_text = tail.removeprefix(":")
    else:
        host, _, port_text = item.partition(":")
    if not host:
        raise ValueError(f"{shown}: a {what} address without a host")
    if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ValueError(f"{shown}: bad {what} port {port_text!r}")
    return host, int(port_text) if port_text else default_port


def escape_key_part(part: str) -> str:
    """``part`` with ``%``, ``{``, ``}`` and ``:`` percent-escaped (``%25``, ``%7B``, ``%7D``,
    ``%3A``): it holds no key separator and no hash-tag brace."""
    return part.replace("%", "%25").replace("{", "%7B").replace("}", "%7D").replace(":", "%3A")


_MEMBER_ESCAPE = re.compile("%(25|00)")
"""The escapes of a tenant in an ``observed`` member (:meth:`RedisLedger._observed_member`)."""


def tenant_part(tenant: str) -> str:
    """What a task's key names gain for its tenant (docs/callers.md §1): nothing for none, so
    the keys of tasks without a tenant are those of earlier versions, else ``@`` and the
    escaped tenant (``{prefix}:task@acme:{upstream}:{taskId}``), which no key of a task
    without a tenant can spell (those go on with ``:``)."""
    return f"@{escape_key_part(tenant)}" if tenant else ""


def _read_secret(path: str) -> str:
    """The content of a password file, one trailing newline dropped. Raises OSError."""
    text = Path(path).read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


# -- the replay window (docs/resume.md §2.3) ------------------------------------------------------
#
# Each window script touches only the keys of ONE task (KEYS[1]: its stream, KEYS[2]: its window
# hash); the bookkeeping scripts touch only the five keys over all windows. Neither needs a key
# of the other, but the keys carry no hash tag: under Redis Cluster a task's two keys, and the
# five, would each need one (docs/resume.md §4.6: Cluster is not done).

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
# the oldest entry left if the front moved else '', payload bytes left, payload bytes dropped}.
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
return {id, new and 1 or 0, n - dropped, dropped, oldest, size - freed, freed}
"""

# ARGV: drop entries while fewer than this many were dropped ('' = any number) or fewer than
# this many payload bytes were freed ('' = any number), but only entries with at <= this
# ('' = any) and at < this ('' = any); '0', '0' only measures the window. Returns {entries
# dropped, entries left (0: the window is empty or gone), at of the oldest entry left or '',
# payload bytes left}.
_TRIM = _FRONT + """
local n = redis.call('XLEN', KEYS[1])
if n == 0 then  -- expired, or emptied
  redis.call('DEL', KEYS[2])
  return {0, 0, '', 0}
end
local want_n, want_b = tonumber(ARGV[1]) or math.huge, tonumber(ARGV[2]) or math.huge
local bound, cutoff = tonumber(ARGV[3]), tonumber(ARGV[4])
local ahead = want_n == math.huge and 2 or math.min(want_n, n, 64) + 1
local dropped, _, kept = trim_front(n, ahead, function(d, f, entry, len)
  if d >= want_n and f >= want_b then return false end
  local at = tonumber(field(entry[2], 'at'))
  return (bound == nil or at <= bound) and (cutoff == nil or at < cutoff)
end)
if n - dropped == 0 then return {dropped, 0, '', 0} end
if kept == nil then kept = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1] end
local size = tonumber(redis.call('HGET', KEYS[2], 'bytes') or '0')
return {dropped, n - dropped, field(kept[2], 'at'), size}
"""

# The bookkeeping of one window, and the totals with it, in one step. KEYS: the index (zset:
# window -> at of its oldest event), the counts (hash: window -> events), the sizes (hash:
# window -> payload bytes), the event total, the byte total. ARGV: the window, how, events,
# bytes, at ('' = leave the score), events and bytes the window script found left:
#   add   the window's count and size move by events and bytes; its score is set only if it
#         has none (ZADD NX: an append that dropped nothing; or one taken back);
#   move  the same, and the score is at (its front moved, or the window is new); a count that
#         would fall below one had drifted: it becomes what the script found (ARGV[6],
#         ARGV[7]);
#   set   the count and size become events and bytes, the score at.
# A count of 0 or less takes the window out. The totals move by what the window's count and
# size moved. Returns {event total, byte total, the window's count, its size}.
_BOOK = """
local member, how = ARGV[1], ARGV[2]
local n, b = tonumber(ARGV[3]), tonumber(ARGV[4])
local old_n = tonumber(redis.call('HGET', KEYS[2], member) or '0')
local old_b = tonumber(redis.call('HGET', KEYS[3], member) or '0')
if how ~= 'set' then
  n, b = old_n + n, old_b + b
  if how == 'move' and n < 1 then n, b = tonumber(ARGV[6]), tonumber(ARGV[7]) end
end
if n <= 0 then
  n, b = 0, 0
  redis.call('HDEL', KEYS[2], member)
  redis.call('HDEL', KEYS[3], member)
  redis.call('ZREM', KEYS[1], member)
else
  redis.call('HSET', KEYS[2], member, string.format('%d', n))
  redis.call('HSET', KEYS[3], member, string.format('%d', b))
  if ARGV[5] ~= '' then
    if how == 'add' then redis.call('ZADD', KEYS[1], 'NX', ARGV[5], member)
    else redis.call('ZADD', KEYS[1], ARGV[5], member) end
  end
end
local total = redis.call('INCRBY', KEYS[4], string.format('%d', n - old_n))
local bytes = redis.call('INCRBY', KEYS[5], string.format('%d', b - old_b))
return {total, bytes, n, b}
"""

# The totals recomputed from the windows' counts and sizes (KEYS: the counts, the sizes, the
# event total, the byte total). Returns {event total, byte total} before and after.
_RECOUNT = """
local function sum(key)
  local s = 0
  for _, v in ipairs(redis.call('HVALS', key)) do s = s + tonumber(v) end
  return s
end
local total, bytes = sum(KEYS[1]), sum(KEYS[2])
local was_total = tonumber(redis.call('GET', KEYS[3]) or '0')
local was_bytes = tonumber(redis.call('GET', KEYS[4]) or '0')
redis.call('SET', KEYS[3], string.format('%d', total))
redis.call('SET', KEYS[4], string.format('%d', bytes))
return {was_total, total, was_bytes, bytes}
"""

_log = logging.getLogger("a2a_gateway")

_APPEND_SHA = hashlib.sha1(_APPEND.encode()).hexdigest()
_TRIM_SHA = hashlib.sha1(_TRIM.encode()).hexdigest()
_BOOK_SHA = hashlib.sha1(_BOOK.encode()).hexdigest()
_RECOUNT_SHA = hashlib.sha1(_RECOUNT.encode()).hexdigest()
#: The window's scripts by SHA1 (what ``SCRIPT LOAD`` answers): they are first sent as
#: ``EVALSHA`` and loaded by the pipeline's ``NoScript`` path when the server lacks them.
_WINDOW_SCRIPTS = {_APPEND_SHA: _APPEND, _TRIM_SHA: _TRIM, _BOOK_SHA: _BOOK, _RECOUNT_SHA: _RECOUNT}
#: Commands that only read: after a refused script they are sent again (they must see it).
_READS = frozenset({"HMGET", "HGET", "GET", "XRANGE", "ZRANGE", "ZRANGEBYSCORE", "ZSCAN"})
#: A Redis event id: the stream entry id, ``.``, and the task's tag (:meth:`RedisLedger._tag`).
_EVENT_ID = re.compile(r"([0-9]{1,20}-[0-9]{1,20})\.([0-9a-f]{8})")
#: At most about this many windows are pruned per pipeline (a ``ZSCAN`` step's ``COUNT``).
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


class RedisLedger(RedisPushStore):
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
    timeline_limits = TimelineLimits()
    """The timeline's bounds (set by :func:`gateway.ledger.ledger_from_url`)."""
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
        self._observe_card: Any = None

    def _key(self, upstream: str, task_id: str, tenant: str = "") -> str:
        return f"{self.prefix}:task{tenant_part(tenant)}:{upstream}:{task_id}"

    def _observed_key(self, upstream: str) -> str:
        """The sorted set of ``upstream``'s live tasks by ``observed_at`` (docs/sweep.md §5),
        kept by the compare-and-set script (added while live, taken out once terminal)."""
        return f"{self.prefix}:observed:{upstream}"

    @staticmethod
    def _observed_member(tenant: str, task_id: str) -> bytes:
        """A task in :meth:`_observed_key`: ``TENANT\\0TASKID`` (no tenant: ``\\0TASKID``), the
        tenant with ``%`` and NUL escaped (``%25``, ``%00``) so that the first NUL ends it."""
        escaped = tenant.replace("%", "%25").replace("\x00", "%00")
        return f"{escaped}\x00{task_id}".encode("utf-8", "surrogatepass")

    def _events_key(self, upstream: str, task_id: str, tenant: str = "") -> str:
        """The stream of the task's replay window (docs/resume.md §2.3)."""
        return f"{self.prefix}:events{tenant_part(tenant)}:{upstream}:{task_id}"

    def _window_key(self, upstream: str, task_id: str, tenant: str = "") -> str:
        """The hash beside the task's stream: ``bytes``, the payload bytes of its entries."""
        return f"{self.prefix}:window{tenant_part(tenant)}:{upstream}:{task_id}"

    def _timeline_key(self, upstream: str, tenant: str, task_id: str) -> str:
        """The list of the task's timeline entries (docs/observability.md §2)."""
        return f"{self.prefix}:timeline{tenant_part(tenant)}:{upstream}:{task_id}"

    def _timelines_key(self) -> str:
        """The index of timelines: a zset of their list keys by the time of their last entry."""
        return f"{self.prefix}:timelines"

    def _windows_keys(self) -> tuple[str, str, str, str, str]:
        """The bookkeeping over all windows: the index (zset: window → ``at`` of its oldest
        event), the counts (hash: window → its events), the sizes (hash: window → its payload
        bytes), the event total and the byte total (strings). Changed only by the bookkeeping
        scripts, which move a window's count and size and the totals together."""
        p = self.prefix
        return f"{p}:windows", f"{p}:windows:n", f"{p}:windows:b", f"{p}:windows:total", f"{p}:windows:bytes"

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
        self._observe_card = self._client.register_script(_OBSERVE_CARD)

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

    async def get(self, upstream: str, task_id: str, *, tenant: str = "") -> Stored | None:
        """The record of (``upstream``, ``tenant``, ``task_id``) with its version and restart
        flag, or ``None``.

        Raises:
            ValueError: the stored document is not a record (:func:`codec.decode`).
        """
        values = await self._call("HMGET", self._key(upstream, task_id, tenant), "rec", "v", "resync")
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
        key = self._key(record.upstream, record.task_id, record.tenant)
        done = await self._call(
            "EVALSHA", self._cas_sha, 5, key,
            f"{self.prefix}:counts", f"{self.prefix}:live", f"{self.prefix}:terminal",
            self._observed_key(record.upstream),
            expected_version, version, record.state.value, int(record.terminal),
            repr(record.observed_at), blob, self._observed_member(record.tenant, record.task_id))
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

    async def put_with_event(self, record: TaskRecord, expected_version: int, lineage: str | None,
                             payload: bytes, at: float) -> tuple[int, str, str]:
        """:meth:`put`, then :meth:`append_event` once it held: two round trips, in that order
        (the append is never sent for a lost compare-and-set; a failure of the append leaves the
        record stored, as two separate calls would). See :meth:`TaskLedger.put_with_event`."""
        return await put_then_append(self, record, expected_version, lineage, payload, at)

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

    def _card_key(self, upstream: str) -> str:
        """The hash of ``upstream``'s card generation and its variants' ETags."""
        return f"{self.prefix}:card:{escape_key_part(upstream)}"

    async def observe_card(self, upstream: str, variant: str, etag: str) -> int:
        """See :meth:`TaskLedger.observe_card`: one script on the upstream's card hash (a
        connection of the pool's: once per card fetch, not in the pipeline's order)."""
        return int(await self._observe_card(keys=[self._card_key(upstream)], args=[variant, etag]))

    async def probe(self) -> None:
        """``SET {prefix}:probe <now> PX 60000``: a write a read-only replica (after a
        failover), ``min-replicas-to-write``, ``maxmemory`` with ``noeviction`` or a lost
        connection refuses like any ``put``."""
        await self._redis.set(f"{self.prefix}:probe", repr(time.time()), px=60_000)

    async def count_by_state(self) -> dict[str, int]:
        """Tracked tasks by canonical state."""
        raw = await self._redis.hgetall(f"{self.prefix}:counts")
        return {k.decode(): int(v) for k, v in raw.items() if int(v) > 0}

    async def mark_resync(self) -> int:
        """Flag every non-terminal task ``needs_resync``."""
        return int(await self._resync(keys=[f"{self.prefix}:live"], args=[self.prefix]))

    async def prune(self, older_than: float) -> int:
        """Delete terminal tasks last observed before ``older_than`` (in batches of 1000)."""
        total = 0
        while True:
            n = int(await self._prune(keys=[f"{self.prefix}:terminal", f"{self.prefix}:counts"],
                                      args=[repr(older_than)]))
            total += n
            if n < 1000:
                return total

    async def live_before(self, upstream: str, before: float, *, limit: int,
                          after: LiveTask | None = None) -> list[LiveTask]:
        """Live tasks of ``upstream`` observed before ``before`` from its
        :meth:`_observed_key` sorted set (``ZRANGEBYSCORE … LIMIT``, sent in call order with
        ``put``/``get``), by ``(observed_at, member)``; ``after`` resumes at its score and
        skips the members up to it. See :meth:`TaskLedger.live_before`."""
        key = self._observed_key(upstream)
        low = repr(after.observed_at) if after is not None else "-inf"
        floor = ((after.observed_at, self._observed_member(after.tenant, after.task_id))
                 if after is not None else None)
        out: list[LiveTask] = []
        offset = 0
        while len(out) < limit:
            page = _pairs(await self._call("ZRANGEBYSCORE", key, low, f"({before!r}", "WITHSCORES",
                                           "LIMIT", offset, limit))
            for member, score in page:
                at = float(score)
                if floor is not None and (at, member) <= floor:
                    continue  # ties of the cursor's score, up to the cursor itself
                escaped, _, task_id = member.decode("utf-8", "surrogatepass").partition("\x00")
                tenant = _MEMBER_ESCAPE.sub(lambda m: "%" if m[1] == "25" else "\x00", escaped)
                out.append(LiveTask(upstream, tenant, task_id, at))
            if len(page) < limit:
                break
            offset += len(page)
        return out[:limit]

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

    # --- the task timeline (docs/observability.md §2) ---------------------------------------------
    # Single-key commands only (the list, the index), in one non-transactional pipeline, so the
    # same code serves Redis Cluster, where the two keys are in different slots.

    async def append_timeline(self, upstream: str, task_id: str, entry: TimelineEntry, *,
                              tenant: str = "") -> None:
        """``RPUSH`` the entry, ``LTRIM`` the list to ``max_entries_per_task``, let it expire
        ``ledger.retention_seconds`` after its last entry, and index it by that time; when the
        index holds more than ``max_tasks`` timelines, the least recently written go (a second
        round trip). With several replicas the task bound is approximate (each trims what it
        counted)."""
        limits, key, index = self.timeline_limits, self._timeline_key(upstream, tenant, task_id), self._timelines_key()
        pipe = self._redis.pipeline(transaction=False)
        pipe.rpush(key, encode_entry(entry))
        pipe.ltrim(key, -limits.max_entries_per_task, -1)
        pipe.pexpire(key, max(1, round(limits.retention_seconds * 1000)))
        pipe.zadd(index, {key: entry.at})
        pipe.zcard(index)
        *_, tasks = await pipe.execute()
        if int(tasks) > limits.max_tasks:
            doomed = await self._redis.zpopmin(index, int(tasks) - limits.max_tasks)
            await self._delete_each([member for member, _ in doomed])

    async def _delete_each(self, keys: list[Any]) -> None:
        if keys:
            pipe = self._redis.pipeline(transaction=False)
            for name in keys:
                pipe.delete(name)
            await pipe.execute()

    async def timeline(self, upstream: str, task_id: str, *, tenant: str = "") -> list[TimelineEntry]:
        """The task's entries, oldest first (an entry that does not decode is left out)."""
        raw = await self._redis.lrange(self._timeline_key(upstream, tenant, task_id), 0, -1)
        return [e for e in (decode_entry(item) for item in raw) if e is not None]

    async def prune_timeline(self, older_than: float) -> int:
        """Delete the timelines whose last entry was kept before ``older_than`` (a busy
        task's list keeps its older entries up to ``max_entries_per_task``). Returns how many
        timelines were deleted."""
        index, deleted = self._timelines_key(), 0
        while True:
            doomed = await self._redis.zrangebyscore(index, "-inf", f"({older_than!r}", start=0, num=PRUNE_CHUNK)
            if not doomed:
                return deleted
            await self._delete_each(doomed)
            await self._redis.zrem(index, *doomed)
            deleted += len(doomed)

    # --- the replay window (docs/resume.md §2.3) -------------------------------------------------

    @staticmethod
    def _tag(upstream: str, task_id: str, tenant: str = "") -> str:
        """8 hex digits naming the task in its event ids: a stream entry id is unique only
        within its stream, and another task's id must not be found in this one's."""
        name = f"{upstream}\x00{task_id}" + (f"\x00{tenant}" if tenant else "")
        name = name.encode("utf-8", "surrogatepass")
        return hashlib.blake2s(name, digest_size=4).hexdigest()

    async def append_event(self, upstream: str, task_id: str, lineage: str | None,
                           payload: bytes, at: float, *, tenant: str = "") -> tuple[str, str]:
        """``XADD`` the event to the task's stream and trim it (oldest first, to
        ``max_events_per_task`` entries and ``max_bytes_per_task`` payload bytes) in one
        script, sent in call order with ``put``/``get`` and in the same pipeline as the
        bookkeeping script over all windows; when the totals are then over
        ``max_events_total`` or ``max_bytes_total``, drop the oldest events of all windows
        before returning (approximate with several replicas: docs/resume.md §2.3). One round
        trip unless the cap is met. See :meth:`TaskLedger.append_event`.

        Returns:
            ``(event_id, lineage)``: ``ENTRYID.TAG`` (the stream entry id, ordered within the
            task and valid on every replica, and the task's :meth:`_tag`) and the lineage.

        Raises:
            redis.exceptions.RedisError: the script failed (nothing was kept, and its counting
                is taken back) or the connection did.
        """
        limits = self._window_limits
        member = orjson.dumps([upstream, task_id, tenant] if tenant else [upstream, task_id])
        size = len(payload)
        # The script, and the bookkeeping of an append that trims nothing (the common case),
        # in one pipeline; what the script did otherwise is put right by a script after it.
        script, book = await asyncio.gather(
            self._call("EVALSHA", _APPEND_SHA, 2, self._events_key(upstream, task_id, tenant),
                       self._window_key(upstream, task_id, tenant), lineage or "", payload, repr(at),
                       limits.max_events_per_task, limits.max_bytes_per_task,
                       max(1, int(limits.retention_seconds * 1000))),
            self._book(member, "add", 1, size, repr(at)),
            return_exceptions=True)
        if isinstance(script, BaseException):
            if not isinstance(book, BaseException):  # counted an event that is not there
                self._book(member, "add", -1, -size, "").add_done_callback(_log_failure)
            raise script
        if isinstance(book, BaseException):
            raise book
        entry, new, left, dropped, oldest, kept_bytes, freed = script
        total, total_bytes, count, count_bytes = book
        event_id = f"{entry.decode()}.{self._tag(upstream, task_id, tenant)}"
        # Moved by differences, not set: the bookkeeping of appends called after this one (of
        # the same window, maybe already counted) stands.
        if new:  # the count held the events of an earlier window of the task (expired): replace it
            moved, moved_bytes, front = left - count, kept_bytes - count_bytes, repr(at) if left else ""
        else:
            moved, moved_bytes, front = -dropped, -freed, oldest.decode()
        if moved or moved_bytes or (new and count != 1):  # (count 1: nothing was held, ZADD NX set the score)
            self._book(member, "move", moved, moved_bytes, front, left, kept_bytes).add_done_callback(_log_failure)
            total, total_bytes = total + moved, total_bytes + moved_bytes
        if total > limits.max_events_total or total_bytes > limits.max_bytes_total:
            await self._cap_total()
        return event_id, lineage or event_id

    def _book(self, member: bytes, how: str, events: int, size: int, at: str,
              left: int = 0, kept_bytes: int = 0) -> asyncio.Future[Any]:
        """Queue the bookkeeping script (:data:`_BOOK`) on one window: ``how`` ``add``, ``move``
        or ``set`` its count and size by or to ``events`` and ``size``, its oldest event at
        ``at``; the totals move with them. Its reply: ``[event total, byte total, the window's
        count, its size]``."""
        return self._call("EVALSHA", _BOOK_SHA, 5, *self._windows_keys(), member, how, events,
                          size, at, left, kept_bytes)

    async def _trim_window(self, member: bytes, *args: Any) -> tuple[int, int, int]:
        """Run the front-trimming script on one window (``args``: its ``ARGV``), then set the
        window's bookkeeping to what the script found left — its count and size (so a count
        that drifted — overlapping calls, another replica, a process that died between a script
        and its bookkeeping — is healed here), its score to its oldest entry; a window that
        vanished (expired) leaves the bookkeeping. The totals move by the difference, in the
        same bookkeeping script. Returns the events the script dropped and the totals after."""
        upstream, task_id, *tenant = orjson.loads(member)
        dropped, left, oldest, kept_bytes = await self._call(
            "EVALSHA", _TRIM_SHA, 2, self._events_key(upstream, task_id, *tenant),
            self._window_key(upstream, task_id, *tenant), *args)
        total, total_bytes, _, _ = await self._book(
            member, "set", left, kept_bytes, oldest.decode() if isinstance(oldest, bytes) else oldest)
        return max(0, int(dropped)), int(total), int(total_bytes)

    async def _cap_total(self) -> None:
        """Drop the oldest events of all windows (by ``at``) until the totals are within
        ``max_events_total`` and ``max_bytes_total``: the window with the oldest event loses
        its events up to the oldest event of the next window, and so on. One at a time per
        process."""
        if self._cap_lock is None:
            self._cap_lock = asyncio.Lock()
        index, _, _, total_key, bytes_key = self._windows_keys()
        cap, cap_bytes = self._window_limits.max_events_total, self._window_limits.max_bytes_total
        async with self._cap_lock:
            total, total_bytes = (int(v or 0) for v in await asyncio.gather(
                self._call("GET", total_key), self._call("GET", bytes_key)))
            for _ in range(10_000):  # each round drops, forgets a vanished window or fixes a score
                if total <= cap and total_bytes <= cap_bytes:
                    return
                oldest = _pairs(await self._call("ZRANGE", index, 0, 1, "WITHSCORES"))
                if not oldest:
                    return  # nothing indexed: the totals are off (another replica's bookkeeping)
                bound = repr(float(oldest[1][1])) if len(oldest) > 1 else ""
                _, total, total_bytes = await self._trim_window(
                    oldest[0][0], max(0, total - cap), max(0, total_bytes - cap_bytes), bound, "")

    async def events_after(self, upstream: str, task_id: str, event_id: str, *,
                           tenant: str = "") -> Replay:
        """``XRANGE`` of the task's stream from the entry ``event_id`` names (sent in call
        order, so it sees every append called before it): found when that entry is the
        first one; then its lineage's later entries. An id that is not this task's
        ``ENTRYID.TAG`` (or that the server refuses as a stream id) is ``Replay(False)``.
        See :meth:`TaskLedger.events_after`."""
        match = _EVENT_ID.fullmatch(event_id)
        if match is None or match[2] != self._tag(upstream, task_id, tenant):
            return Replay(False)
        entry = match[1]
        try:
            entries = await self._call("XRANGE", self._events_key(upstream, task_id, tenant), entry, "+")
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
        """Trim every window from its front while its events are older than ``older_than``, and
        put the bookkeeping over all windows right: each window indexed (``ZSCAN``, about
        :data:`PRUNE_CHUNK` per pipeline) gets a script that drops its old front (or only
        measures it) and then the bookkeeping script that sets its count, size and score to what
        its keys hold (a window that expired by itself is taken out); last, the totals are
        recomputed from the counts and sizes (:data:`_RECOUNT`). So the cost is one pass over
        the windows, and whatever the bookkeeping drifted by is put right (docs/resume.md §2.3).

        Returns how many events were deleted (not counting expired ones).
        """
        index, counts, sizes, total_key, bytes_key = self._windows_keys()
        cutoff = repr(older_than)
        deleted, seen, cursor = 0, set(), 0
        while True:
            cursor, found = await self._call("ZSCAN", index, cursor, "COUNT", PRUNE_CHUNK)
            cursor = int(cursor)
            todo = [m for m, _ in _pairs(found) if m not in seen]
            seen.update(todo)
            results = await asyncio.gather(*(self._trim_window(m, "", "", "", cutoff) for m in todo))
            deleted += sum(dropped for dropped, _, _ in results)
            if cursor == 0:
                break
        was_total, total, was_bytes, total_bytes = await self._call(
            "EVALSHA", _RECOUNT_SHA, 4, counts, sizes, total_key, bytes_key)
        if (was_total, was_bytes) != (total, total_bytes):
            _log.warning("ledger_window_totals_recounted", extra={
                "backend": "redis", "events_counted": was_total, "events": total,
                "bytes_counted": was_bytes, "bytes": total_bytes})
        return deleted
