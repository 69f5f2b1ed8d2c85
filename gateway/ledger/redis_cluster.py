"""Redis Cluster task ledger: :class:`RedisClusterLedger`, the Redis ledger with one hash slot
per task (docs/resume.md §4.6).

Connecting: ``redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…][?QUERY]`` names startup
nodes (any primaries or replicas of the cluster; port 6379 by default, ``[::1]:7000`` for IPv6);
redis-py's :class:`redis.asyncio.cluster.RedisCluster` asks them for the slot map and follows
``MOVED`` / ``ASK`` redirections from then on. ``rediss+cluster://`` speaks TLS to every node,
with redis-py's query arguments (``ssl_ca_certs=CA.pem``, ``ssl_certfile=CLIENT.pem``,
``ssl_keyfile=CLIENT.key``, ``ssl_cert_reqs``, ``ssl_check_hostname``, …). The user and
password (an ACL user or just a password; or :attr:`~gateway.ledger.redis.RedisOptions.password_file`)
are every node's. A cluster has only DB 0: a path other than ``/`` or ``/0`` is refused.

Layout (``prefix`` defaults to ``a2agw``; ``TAG`` is :func:`task_tag`)::

    {prefix}:task:{TAG}      hash    as the single-server ledger's task hash
    {prefix}:events:{TAG}    stream  the task's replay window
    {prefix}:window:{TAG}    hash    bytes of the window's payloads
    {prefix}:counts, :live, :terminal, :windows, :windows:n, :windows:total, :card:{upstream}
                             as the single-server ledger: one key each, in a slot of its own

A task's three keys share one tag, so they are in one slot and the scripts that take two of
them (the window's) run there. The global keys are each one key, moved only by single-key
commands, so they need no common slot.

Compare-and-set: one script on the task's hash alone (it answers the state it replaced); the
global bookkeeping follows as plain commands, and ``put`` returns once they are answered too.
So ``put`` costs two round trips (the single-server one: one), and the bookkeeping is exact
except for a process that dies (or loses its connection) between the script and the commands
after it: then ``counts`` is off by that put (nothing recounts it; a prune decrements what it
deletes) and the ``live`` set / ``terminal`` index may miss or keep the task, which
:meth:`RedisClusterLedger.mark_resync` (at every start) and :meth:`RedisClusterLedger.prune`
heal: every task is added to ``live`` *before* its first compare-and-set, so a task is never
unknown to both; the resync scan takes terminal and vanished tasks out of ``live`` (indexing a
terminal one in ``terminal``), the prune checks each task it meets on the task itself.

Order: redis-py's cluster pipeline sends each node its commands in call order and the nodes in
parallel, so the promise of the single-server ledger (a ``get`` sees every ``put`` called before
it) holds per task — every command of a task goes to the node of its slot — not across tasks.
During a resharding a redirected command is sent again on its own, after its pipeline.

Replica acknowledgement (``WAIT``) covers only the shard a connection is on, so it is not
offered here: :attr:`~gateway.ledger.redis.RedisOptions.min_replica_acks` > 0 is refused
(``ValueError``, and by config validation naming ``min_replica_acks``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import parse_url

from gateway.errors import VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.ledger import codec
from gateway.ledger.base import LiveTask, WindowLimits
from gateway.ledger.redis import _OBSERVE_CARD, RedisLedger, RedisOptions, _read_secret, escape_key_part, host_port
from gateway.ledger.urls import redact

_log = logging.getLogger("a2a_gateway")

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
CLUSTER_PORT = 6379

# KEYS[1] only: the task's hash. Answers 0 (the version moved) or {1, the state replaced ('' for
# a new task)}; the caller moves counts / live / terminal afterwards.
_CAS = """
local cur = redis.call('HGET', KEYS[1], 'v')
if (cur == false and ARGV[1] ~= '0') or (cur ~= false and cur ~= ARGV[1]) then return 0 end
local old = redis.call('HGET', KEYS[1], 's')
redis.call('HSET', KEYS[1], 'v', ARGV[2], 's', ARGV[3], 'term', ARGV[4], 'resync', '0',
           'oa', ARGV[5], 'rec', ARGV[6])
return {1, old or ''}
"""

# KEYS[1]: a task's hash named in the live set. Answers {1, oa} flagged (live), {0, oa} terminal
# (to be indexed and taken out of live), {-1, ''} gone.
_RESYNC_ONE = """
local term = redis.call('HGET', KEYS[1], 'term')
if term == false then return {-1, ''} end
if term == '0' then
  redis.call('HSET', KEYS[1], 'resync', '1')
  return {1, redis.call('HGET', KEYS[1], 'oa')}
end
return {0, redis.call('HGET', KEYS[1], 'oa')}
"""

# KEYS[1]: a task's hash named in the terminal index; ARGV[1]: the cutoff. Deletes it if it is
# terminal and observed before the cutoff. Answers {1, state} deleted, {0, oa} terminal but newer
# (the index's score is stale), {-1, ''} gone or not terminal.
_PRUNE_ONE = """
local term, oa, s = unpack(redis.call('HMGET', KEYS[1], 'term', 'oa', 's'))
if term ~= '1' then return {-1, ''} end
if tonumber(oa) >= tonumber(ARGV[1]) then return {0, oa} end
redis.call('DEL', KEYS[1])
return {1, s or ''}
"""

#: Tasks visited per round trip by the resync scan and the prune.
SCAN_CHUNK = 500

MAX_CONNECTIONS_PER_NODE = 1024
"""Connections the cluster client may open to each node (a ``max_connections`` query argument
of the URL overrides it)."""


def _unescape(part: str) -> str:
    return part.replace("%3A", ":").replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


def untag(key: bytes | str, prefix: str) -> tuple[str, str, str] | None:
    """``(upstream, tenant, task_id)`` of a task hash's key ``{prefix}:task:{TAG}`` (the
    inverse of :func:`task_tag`; ``""`` for no tenant), or ``None`` for a key of another shape."""
    text = key.decode("utf-8", "surrogatepass") if isinstance(key, bytes) else key
    head = f"{prefix}:task:{{"
    if not (text.startswith(head) and text.endswith("}")):
        return None
    parts = text[len(head):-1].split(":")
    if len(parts) == 2:
        return (_unescape(parts[0]), "", _unescape(parts[1]))
    if len(parts) == 3:
        return (_unescape(parts[0]), _unescape(parts[1]), _unescape(parts[2]))
    return None


def task_tag(upstream: str, task_id: str, tenant: str = "") -> str:
    """The hash tag of a task's keys: ``{UPSTREAM:TASKID}``, or ``{UPSTREAM:TENANT:TASKID}``
    for a task of an A2A tenant (docs/callers.md §1), with ``%``, ``{``, ``}`` and ``:`` of
    each part percent-escaped (``%25``, ``%7B``, ``%7D``, ``%3A``), so the tag holds no ``}``
    (Redis hashes up to the first one) and two (upstream, tenant, task id) triples never share
    a tag (two parts or three): ``task_tag("w", "t-1") == "{w:t-1}"``,
    ``task_tag("a:b", "c") == "{a%3Ab:c}"``, ``task_tag("w", "t-1", "acme") == "{w:acme:t-1}"``."""
    middle = f"{escape_key_part(tenant)}:" if tenant else ""
    return f"{{{escape_key_part(upstream)}:{middle}{escape_key_part(task_id)}}}"


@dataclass(frozen=True, slots=True)
class ClusterURL:
    """A parsed ``redis+cluster://`` URL: the startup nodes' ``(host, port)`` pairs, every
    node's ``username`` / ``password``, ``tls`` (``rediss+cluster://``) and redis-py
    connection keyword arguments from the query string."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    tls: bool = False
    options: dict[str, Any] = field(default_factory=dict)


def parse_cluster_url(url: str) -> ClusterURL:
    """Parse ``redis+cluster://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…][/[0]][?QUERY]``
    (``rediss+cluster://`` for TLS; port 6379 by default; ``[::1]:7000`` for IPv6).

    Raises:
        ValueError: another scheme, no node, a bad port, a DB other than 0, or ``ssl_*``
            arguments without TLS.
    """
    shown = redact(url)
    scheme, sep, rest = url.partition("://")
    if not sep or f"{scheme}://" not in CLUSTER_SCHEMES:
        raise ValueError(f"{shown}: not a redis+cluster:// URL")
    tls = scheme.startswith("rediss")
    rest, _, query = rest.partition("?")
    userinfo, at, rest = rest.rpartition("@")
    hosts, _, path = rest.partition("/")
    if path.strip("/") not in ("", "0"):
        raise ValueError(f"{shown}: a Redis Cluster has only DB 0 (no path, or /0)")
    nodes = tuple(host_port(item, shown, what="cluster node", default_port=CLUSTER_PORT)
                  for item in hosts.split(","))
    options = dict(parse_url(("rediss" if tls else "redis") + "://x/?" + query))
    for key in ("host", "port", "connection_class"):
        options.pop(key, None)
    if options.pop("db", 0):
        raise ValueError(f"{shown}: a Redis Cluster has only DB 0")
    if not tls and any(key.startswith("ssl") for key in options):
        raise ValueError(f"{shown}: ssl_* arguments need rediss+cluster://")
    username, password = options.pop("username", None), options.pop("password", None)
    if at:  # as redis-py: the userinfo wins over username= / password= in the query
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or username
        password = unquote(secret) if colon else password
    return ClusterURL(nodes, username, password, tls, options)


class RedisClusterLedger(RedisLedger):
    """:class:`~gateway.ledger.base.TaskLedger` on a Redis Cluster (the module says how it
    differs from :class:`~gateway.ledger.redis.RedisLedger`).

    Args:
        url: ``redis+cluster://[USER:PASSWORD@]HOST:PORT,…`` (``rediss+cluster://`` for TLS).
        prefix: key prefix; it may hold neither ``{`` nor ``}`` (checked at ``open``).
        timeout: socket timeout in seconds for every command.
        window: the replay window's bounds.
        options: authentication (:class:`~gateway.ledger.redis.RedisOptions`); the Sentinel
            settings do not apply, and ``min_replica_acks`` must be 0.

    Raises:
        ValueError: a bad URL (:func:`parse_cluster_url`), or ``min_replica_acks`` > 0.
    """

    _cas_script = _CAS

    def __init__(self, url: str, *, prefix: str = "a2agw", timeout: float = 2.0,
                 window: WindowLimits | None = None, options: RedisOptions | None = None) -> None:
        self._cluster_url = parse_cluster_url(url)
        if options is not None and options.min_replica_acks > 0:
            raise ValueError("min_replica_acks: not supported with a redis+cluster:// ledger "
                             "(WAIT covers one shard); set it to 0 (docs/resume.md §4.6)")
        # the base class parses only its own schemes; it is given a placeholder and the real URL after
        super().__init__("redis://placeholder", prefix=prefix, timeout=timeout, window=window,
                         options=options)
        self.url = url

    # --- keys: one hash tag per task -------------------------------------------------------------

    def _key(self, upstream: str, task_id: str, tenant: str = "") -> str:
        return f"{self.prefix}:task:{task_tag(upstream, task_id, tenant)}"

    def _events_key(self, upstream: str, task_id: str, tenant: str = "") -> str:
        """The stream of the task's replay window, in the slot of its record."""
        return f"{self.prefix}:events:{task_tag(upstream, task_id, tenant)}"

    def _window_key(self, upstream: str, task_id: str, tenant: str = "") -> str:
        """The hash beside the task's stream (``bytes``), in the slot of its record."""
        return f"{self.prefix}:window:{task_tag(upstream, task_id, tenant)}"

    def _timeline_key(self, upstream: str, tenant: str, task_id: str) -> str:
        """The list of the task's timeline entries, in the slot of its record."""
        return f"{self.prefix}:timeline:{task_tag(upstream, task_id, tenant)}"

    def _windows_keys(self) -> tuple[str, str, str, str, str]:
        """The bookkeeping over all windows, as :meth:`RedisLedger._windows_keys`, under one
        hash tag of its own (``{windows}``): its scripts move several of these keys at once, and a
        script may touch one slot only."""
        p = self.prefix
        return (f"{p}:{{windows}}", f"{p}:{{windows}}:n", f"{p}:{{windows}}:b", f"{p}:{{windows}}:total",
                f"{p}:{{windows}}:bytes")

    def _push_key(self, suffix: str) -> str:
        """The push relay's keys, under one hash tag of their own (``{push}``): each of its
        scripts moves several of them at once (:mod:`gateway.ledger.redis_push`)."""
        return f"{self.prefix}:{{push}}:{suffix}"

    # --- connecting -------------------------------------------------------------------------------

    def _connect(self, socket_timeout: float) -> Any:
        """A :class:`~redis.asyncio.cluster.RedisCluster` client of the URL's startup nodes.
        Raises OSError (a password file that cannot be read)."""
        target = self._cluster_url
        password = target.password
        if self.options.password_file:
            password = _read_secret(self.options.password_file)
        # redis-py's default of 100 connections per node fails a call at once past it
        # (MaxConnectionsError): under a burst of concurrent puts that is a refused request
        kwargs: dict[str, Any] = {"socket_timeout": socket_timeout, "max_connections": MAX_CONNECTIONS_PER_NODE,
                                  "socket_connect_timeout": self._timeout, **target.options}
        return RedisCluster(startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
                            username=target.username, password=password, ssl=target.tls, **kwargs)

    async def open(self) -> None:
        """Connect, read the slot map and load the scripts on every primary.

        Raises:
            ValueError: the prefix holds ``{`` or ``}``. OSError: a password file cannot be
            read. redis.exceptions.RedisError: no startup node answers, the credentials are
            refused, or the cluster does not cover every slot.
        """
        if "{" in self.prefix or "}" in self.prefix:
            raise ValueError(f"prefix {self.prefix!r}: may hold neither '{{' nor '}}' (hash tags)")
        client = self._connect(self._timeout)
        self._client = client
        await client.initialize()
        await client.ping()
        self._cas_sha = await client.script_load(_CAS)
        self._resync_one = client.register_script(_RESYNC_ONE)
        self._prune_one = client.register_script(_PRUNE_ONE)
        self._observe_card = client.register_script(_OBSERVE_CARD)

    async def close(self) -> None:
        """Wait for the queued calls, then close every node's connections."""
        if self._sender is not None:
            await asyncio.shield(self._sender)
        if self._client is not None:
            await self._client.aclose()
        self._client = None

    # --- compare-and-set, then the global bookkeeping ----------------------------------------------

    async def put(self, record: TaskRecord, expected_version: int) -> int:
        """Compare-and-set on the version in a script on the task's hash alone (which also
        clears ``resync``), then the state counts, the live set and the terminal index by
        plain commands; returns once all of them are answered. See :meth:`TaskLedger.put`.

        Returns:
            The new version, ``expected_version + 1``.

        Raises:
            VersionConflictError: another writer got there first.
            redis.exceptions.RedisError: the script or the bookkeeping failed (in the latter
                case the record is stored; the module says how the bookkeeping heals).
        """
        blob = codec.encode(record)
        version = expected_version + 1
        key = self._key(record.upstream, record.task_id, record.tenant)
        live, counts, terminal = (f"{self.prefix}:live", f"{self.prefix}:counts",
                                  f"{self.prefix}:terminal")
        state = record.state.value
        # in the script's pipeline: a new task is put in `live` as it is created, so a process
        # that dies after the script leaves it where the resync scan finds it
        added = (self._call("SADD", live, key) if not record.terminal or expected_version == 0
                 else None)
        cas = self._call("EVALSHA", self._cas_sha, 1, key, expected_version, version, state,
                         int(record.terminal), repr(record.observed_at), blob)
        if added is not None:
            await asyncio.gather(added, cas)
        done = await cas
        if done == 0:
            raise VersionConflictError(f"{record.upstream}/{record.task_id}: version moved")
        old = done[1].decode()
        calls = []
        if old != state:
            if old:
                calls.append(self._call("HINCRBY", counts, old, -1))
            calls.append(self._call("HINCRBY", counts, state, 1))
        observed, member = self._observed_key(record.upstream), self._observed_member(record.tenant, record.task_id)
        if record.terminal:
            calls.append(self._call("ZADD", terminal, repr(record.observed_at), key))
            calls.append(self._call("SREM", live, key))
            calls.append(self._call("ZREM", observed, member))
        else:
            calls.append(self._call("ZADD", observed, repr(record.observed_at), member))
        await asyncio.gather(*calls)
        return version

    # --- the scans over all tasks -----------------------------------------------------------------

    async def live_before(self, upstream: str, before: float, *, limit: int,
                          after: LiveTask | None = None) -> list[LiveTask]:
        """As :meth:`RedisLedger.live_before`, each task then checked on its own hash: the
        sorted set is moved by plain commands after the compare-and-set, so it may lag (two
        processes' puts of one task answered out of order, a process that died between the
        script and them). A listed task that is gone or terminal is taken out of the set, one
        whose ``observed_at`` differs gets its real score; neither is returned (the next page
        meets it where it belongs)."""
        page = await super().live_before(upstream, before, limit=limit, after=after)
        if not page:
            return page
        client = self._redis
        rows = await asyncio.gather(*(client.hmget(self._key(upstream, t.task_id, t.tenant), "term", "oa") for t in page))
        observed = self._observed_key(upstream)
        out, fixes = [], []
        for task, (term, oa) in zip(page, rows):
            member = self._observed_member(task.tenant, task.task_id)
            if term != b"0":
                fixes.append(client.zrem(observed, member))
            elif float(oa) != task.observed_at:
                fixes.append(client.zadd(observed, {member: float(oa)}))
            else:
                out.append(task)
        await asyncio.gather(*fixes)
        return out

    async def mark_resync(self) -> int:
        """Flag every non-terminal task of the live set ``needs_resync`` (``SSCAN``, then a
        script per task in its slot, :data:`SCAN_CHUNK` at a time); on the way, a terminal task
        found there is indexed in ``terminal`` and taken out, a vanished one taken out.

        Returns how many tasks were flagged.
        """
        client = self._redis
        live, terminal = f"{self.prefix}:live", f"{self.prefix}:terminal"
        seen: set[bytes] = set()
        flagged, cursor = 0, 0
        while True:
            cursor, members = await client.sscan(live, cursor, count=SCAN_CHUNK)
            todo = [m for m in members if m not in seen]
            seen.update(todo)
            replies = await asyncio.gather(*(self._resync_one(keys=[m]) for m in todo))
            fixes = []
            for member, (code, oa) in zip(todo, replies):
                if code == 1:
                    flagged += 1
                    named = untag(member, self.prefix)
                    if named is not None:  # indexed for the sweep (heals a lost ZADD)
                        fixes.append(client.zadd(self._observed_key(named[0]),
                                                 {self._observed_member(named[1], named[2]): float(oa)}))
                    continue
                if code == 0:
                    fixes.append(client.zadd(terminal, {member: float(oa)}))
                fixes.append(client.srem(live, member))
            await asyncio.gather(*fixes)
            if cursor == 0:
                return flagged

    async def prune(self, older_than: float) -> int:
        """Delete terminal tasks last observed before ``older_than`` (epoch seconds): the
        terminal index's older members, :data:`SCAN_CHUNK` at a time, each checked and deleted
        by a script in its slot, then taken out of the index and the counts; a member whose task
        is newer gets its real score, one that is gone or not terminal is taken out.

        Returns how many were deleted.
        """
        client = self._redis
        terminal, counts = f"{self.prefix}:terminal", f"{self.prefix}:counts"
        cutoff = repr(older_than)
        total = 0
        while True:
            members = await client.zrangebyscore(terminal, "-inf", f"({cutoff}", start=0, num=SCAN_CHUNK)
            if not members:
                return total
            replies = await asyncio.gather(*(self._prune_one(keys=[m], args=[cutoff]) for m in members))
            fixes = []
            for member, (code, value) in zip(members, replies):
                if code == 1:
                    total += 1
                    if value:
                        fixes.append(client.hincrby(counts, value.decode(), -1))
                if code == 0:
                    fixes.append(client.zadd(terminal, {member: float(value)}))
                else:
                    fixes.append(client.zrem(terminal, member))
            await asyncio.gather(*fixes)
