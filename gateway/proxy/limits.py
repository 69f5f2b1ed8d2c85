"""Fair shares (docs/limits.md): the limits per upstream, tenant and caller, checked before a
request reaches its worker, and the HTTP 429 answer in the client's binding and version.

:class:`Limiter` (``rt.limiter``) decides which scopes a request falls in
(:meth:`Limiter.scopes`), takes a token from each scope's bucket and the slots the request
needs (:meth:`Limiter.admit`: a live task for a request that may create one, an open stream,
push configs), and gives them back (:meth:`Limiter.release`). The counts live in a
:class:`~gateway.ledger.limits.LimitStore` beside the ledger. A live task's slot is bound to
its task when the driver first stores it (:meth:`Limiter.stored`) and freed when any driver
stores it terminal — a stream event, a GetTask answer, a cancel, the sweep; a task that turned
terminal by another road (a push notification, another replica whose store call failed) or
left the ledger is reclaimed by asking the ledger when the scope reaches its limit
(:meth:`Limiter._reclaim_live`). The ledger is the authority on which tasks are live.
"""

from __future__ import annotations

import collections
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from gateway.a2a import jsonrpc, rest
from gateway.a2a.states import TERMINAL_STATES
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.config import QuotaConfig
from gateway.errors import LedgerError
from gateway.invariants.model import Caller
from gateway.ledger.limits import LimitStore

if TYPE_CHECKING:
    import logging

    from gateway.config import GatewayConfig
    from gateway.ledger.base import TaskLedger
    from gateway.proxy.callers import CallerKeys


class LimiterHost(Protocol):
    """What a :class:`Limiter` reads of the process's runtime (``gateway.proxy.runtime.Runtime``
    is one), named by shape so this module does not import the runtime that holds the limiter
    (docs/architecture.md §3: no import cycles). ``config`` is read on every request, so a
    reload applies at once."""

    config: GatewayConfig
    ledger: TaskLedger  # the instrumented one: every call timed and counted
    log: logging.Logger
    callers: CallerKeys | None


LIMIT_CODE = jsonrpc.INTERNAL_ERROR
"""The JSON-RPC code of a limit's answer: -32603. A2A defines no "rate limited" error, and a
code of our own in the server-error range (-32000 to -32099) could collide with a code a later
A2A version assigns; -32603 is what the gateway already answers for "not now" (gateway at
capacity), and the HTTP status (429), ``Retry-After`` and the v1.0 ``ErrorInfo`` reason
:data:`LIMIT_REASON` say which "not now" it is (docs/limits.md §3)."""
LIMIT_REASON = "LIMIT_EXCEEDED"
"""The ``google.rpc.ErrorInfo`` reason of a limit's answer (domain :data:`LIMIT_DOMAIN`)."""
LIMIT_DOMAIN = "a2a-gateway"
MAX_RECLAIM = 1000
"""Members of one live-task or push-config set checked against the ledger in one reclaim."""
RECLAIM_EVERY = 1.0
"""Seconds between two reclaims of one scope's set by one process: a caller at its limit that
keeps asking costs one ledger read per held task a second, not per request."""
MAX_RECLAIM_TIMES = 10_000
"""Scopes whose last reclaim time one process remembers (the oldest forgotten first)."""
MAX_SHOWN = 50
"""Scopes the status page shows (the most recently limited or used first)."""
_UNITS = {"requests_per_second": "requests per second", "live_tasks": "live tasks",
          "open_streams": "open streams", "push_configs": "push configs"}


@dataclass(frozen=True, slots=True)
class Scope:
    """One scope a request counts in: ``kind`` ``upstream``, ``tenant`` or ``caller``;
    ``key`` its store key (``caller:<fingerprint>``); ``label`` what the status page shows
    (an upstream's or tenant's name, a caller's override name, never a fingerprint)."""

    kind: str
    key: str
    label: str
    quota: QuotaConfig


@dataclass(frozen=True, slots=True)
class Refusal:
    """A limit reached: ``limit`` ``<kind>.<limit>`` (``caller.requests_per_second``), the
    ``a2a_gateway_limited_total`` label; ``retry_after`` whole seconds; ``message`` the text."""

    limit: str
    retry_after: int
    message: str


@dataclass(slots=True)
class Grant:
    """The slots a request holds until :meth:`Limiter.release`: an open stream's token and
    the set keys it is in, a pending new task's token (``None`` once bound to its task)."""

    stream: str | None = None
    stream_keys: list[str] = field(default_factory=list)
    pending: str | None = None
    live_keys: list[str] = field(default_factory=list)


NO_GRANT = Grant()


def task_member(upstream: str, tenant: str, task_id: str) -> str:
    """A task's member in the live-task sets: ``t`` NUL upstream NUL tenant NUL task id."""
    return f"t\0{upstream}\0{tenant}\0{task_id}"


class Limiter:
    """The fair-share limits of one gateway process (``rt.limiter``); their config is read
    from ``rt.config.limits`` on every request, so a reload applies at once."""

    def __init__(self, rt: LimiterHost, store: LimitStore) -> None:
        self.rt = rt
        self.store = store
        self._overrides: tuple[Any, dict[str, tuple[str, QuotaConfig]]] = (None, {})
        self._seen: collections.OrderedDict[str, Scope] = collections.OrderedDict()
        self._flags_of: tuple[Any, tuple[bool, bool]] = (None, (False, False))
        self._reclaimed_at: collections.OrderedDict[str, float] = collections.OrderedDict()

    # --- which scopes -----------------------------------------------------------------------------

    def _flags(self) -> tuple[bool, bool]:
        """``(any limit configured, a live-task limit configured)`` under the config in force
        (worked out once per config: every request asks)."""
        cfg = self.rt.config.limits
        if self._flags_of[0] is not cfg:  # the object kept, so a reload never meets a reused id
            quotas = (cfg.per_upstream, cfg.per_tenant, cfg.per_caller, *cfg.tenants.values(), *cfg.callers.values())
            self._flags_of = (cfg, (any(q.configured for q in quotas),
                                        any(q.live_tasks is not None for q in quotas)))
        return self._flags_of[1]

    @property
    def active(self) -> bool:
        """Whether any fair-share limit is configured."""
        return self._flags()[0]

    @property
    def counts_live(self) -> bool:
        """Whether a live-task limit is configured anywhere (a terminal store then frees a slot)."""
        return self._flags()[1]

    def _caller_overrides(self) -> dict[str, tuple[str, QuotaConfig]]:
        """Every fingerprint of every ``limits.callers`` name under the secrets in force →
        ``(label, override)``, the label ``limits.callers #N`` (its place in the config, from 1:
        the name is an identity, often a credential, and is shown nowhere); built once per
        config (identities are never kept)."""
        cfg = self.rt.config.limits
        if self._overrides[0] is cfg:
            return self._overrides[1]
        found: dict[str, tuple[str, QuotaConfig]] = {}
        keys = self.rt.callers
        if keys is not None:
            for place, (name, quota) in enumerate(cfg.callers.items(), 1):
                for fingerprint in keys.caller(name.encode("utf-8", "surrogatepass")).matches:
                    found[fingerprint] = (f"limits.callers #{place}", quota)
        self._overrides = (cfg, found)
        return found

    def scopes(self, upstream: str, tenant: str, caller: Caller) -> list[Scope]:
        """The scopes of a request with a limit configured: its upstream, its tenant (``""``
        is one), its caller (one caller for all when callers are not told apart)."""
        cfg = self.rt.config.limits
        out = []
        if cfg.per_upstream.configured:
            out.append(Scope("upstream", f"upstream:{quote(upstream, safe='')}", upstream, cfg.per_upstream))
        quota = cfg.per_tenant.over(cfg.tenants[tenant]) if tenant in cfg.tenants else cfg.per_tenant
        if quota.configured:
            out.append(Scope("tenant", f"tenant:{quote(tenant, safe='')}", tenant or '(none)', quota))
        quota, label = cfg.per_caller, "(a caller)"
        overrides = self._caller_overrides()
        named = overrides.get(caller.fingerprint or "") or next(
            (overrides[m] for m in caller.matches if m in overrides), None)
        if named is not None:
            label, quota = named[0], quota.over(named[1])
        if quota.configured:
            out.append(Scope("caller", f"caller:{caller.fingerprint or '-'}", label, quota))
        return out

    # --- admission --------------------------------------------------------------------------------

    async def admit(self, scopes: list[Scope], *, new_task: bool, stream: bool,
                    push_configs: int) -> tuple[Grant, Refusal | None]:
        """Check ``scopes`` for one request: a token from each bucket, then ``push_configs``
        more configs, a live-task slot when the request may create a task (``new_task``), a
        stream slot (``stream``). Returns what the request holds and ``None``, or nothing held
        and the first limit reached.

        Raises:
            LedgerError: the store did not answer (the caller fails open: limits are fair
                shares, not a safety bound; docs/limits.md §4).
        """
        for scope in scopes:
            self._note(scope)
        try:
            refusal = await self._rates(scopes) or await self._push(scopes, push_configs)
            if refusal is not None:
                return NO_GRANT, refusal
            grant = Grant()
            if new_task:
                refusal = await self._live(scopes, grant)
            if refusal is None and stream:
                refusal = await self._streams(scopes, grant)
        except LedgerError:
            raise
        except Exception as exc:  # a Redis error: the request goes on unlimited (docs/limits.md §4)
            raise LedgerError(f"limit store: {type(exc).__name__}: {exc}") from exc
        if refusal is not None:
            await self.release(grant)
            return NO_GRANT, refusal
        return grant, None

    async def _rates(self, scopes: list[Scope]) -> Refusal | None:
        for scope in scopes:
            rate = scope.quota.requests_per_second
            if rate is None:
                continue
            burst = scope.quota.burst or max(1, math.ceil(rate))
            wait = await self.store.take(f"rate:{scope.key}", rate, burst)
            if wait > 0:
                return _refusal(scope, "requests_per_second", f"{rate:g}", wait)
        return None

    async def _push(self, scopes: list[Scope], wanted: int) -> Refusal | None:
        if wanted <= 0:
            return None
        for scope in scopes:
            limit = scope.quota.push_configs
            if limit is None:
                continue
            key = f"push:{scope.key}"
            if await self.store.count(key) + wanted > limit:
                await self._reclaim_push(key)
                if await self.store.count(key) + wanted > limit:
                    return _refusal(scope, "push_configs", str(limit), 1.0)
        return None

    async def _live(self, scopes: list[Scope], grant: Grant) -> Refusal | None:
        limited = [s for s in scopes if s.quota.live_tasks is not None]
        if not limited:
            return None
        token = "p:" + secrets.token_urlsafe(12)
        keys = [(f"live:{s.key}", s.quota.live_tasks or 0) for s in limited]
        stale = self.rt.config.limits.stale_seconds
        reclaimed: set[int] = set()
        while True:
            index = await self.store.acquire(keys, token, stale)
            if index < 0:
                grant.pending, grant.live_keys = token, [k for k, _ in keys]
                return None
            if index in reclaimed or not await self._reclaim_live(keys[index][0]):
                scope = limited[index]
                return _refusal(scope, "live_tasks", str(scope.quota.live_tasks), 1.0)
            reclaimed.add(index)

    async def _streams(self, scopes: list[Scope], grant: Grant) -> Refusal | None:
        limited = [s for s in scopes if s.quota.open_streams is not None]
        if not limited:
            return None
        token = "s:" + secrets.token_urlsafe(12)
        keys = [(f"streams:{s.key}", s.quota.open_streams or 0) for s in limited]
        index = await self.store.acquire(keys, token, self.rt.config.limits.stale_seconds)
        if index >= 0:
            scope = limited[index]
            return _refusal(scope, "open_streams", str(scope.quota.open_streams), 1.0)
        grant.stream, grant.stream_keys = token, [k for k, _ in keys]
        return None

    def _may_reclaim(self, key: str) -> bool:
        """Whether set ``key`` may be reclaimed now (:data:`RECLAIM_EVERY`); notes the time."""
        now = time.monotonic()
        last = self._reclaimed_at.get(key)
        if last is not None and now - last < RECLAIM_EVERY:
            return False
        self._reclaimed_at[key] = now
        self._reclaimed_at.move_to_end(key)
        if len(self._reclaimed_at) > MAX_RECLAIM_TIMES:
            self._reclaimed_at.popitem(last=False)
        return True

    async def _reclaim_live(self, key: str) -> bool:
        """Drop the tasks of live set ``key`` the ledger holds terminal or no longer holds
        (stale entries: a task that ended by a push notification, or was pruned), at most once
        every :data:`RECLAIM_EVERY` seconds. True when one was dropped."""
        if not self._may_reclaim(key):
            return False
        ledger, gone = self.rt.ledger, []
        for member, _ in (await self.store.members(key))[:MAX_RECLAIM]:
            if not member.startswith("t\0"):
                continue  # a pending new task: it leaves by its request's end, or by age
            _, upstream, tenant, task_id = member.split("\0", 3)
            stored = await ledger.get(upstream, task_id, tenant=tenant)
            if stored is None or stored.record.state in TERMINAL_STATES:
                gone.append(member)
        if gone:
            await self.store.discard(key, gone)
        return bool(gone)

    async def _reclaim_push(self, key: str) -> None:
        """Drop the push configs of set ``key`` the ledger no longer holds (deleted, expired),
        at most once every :data:`RECLAIM_EVERY` seconds."""
        if not self._may_reclaim(key):
            return
        ledger, gone = self.rt.ledger, []
        for member, _ in (await self.store.members(key))[:MAX_RECLAIM]:
            entry = await ledger.get_push_config(member)
            if entry is None:
                gone.append(member)
        if gone:
            await self.store.discard(key, gone)

    # --- the request's course ---------------------------------------------------------------------

    async def stored(self, grant: Grant, upstream: str, tenant: str, task_id: str, terminal: bool) -> None:
        """A driver stored ``task_id``'s record: a terminal one frees the task's live slot
        wherever it is held (any request's, any road); the first live one of a new-task
        request binds the request's pending slot to the task. Store failures are ignored
        here (a stale slot is reclaimed by :meth:`_reclaim_live`)."""
        member = task_member(upstream, tenant, task_id)
        try:
            if terminal:
                await self.store.end(member)
            elif grant.pending is not None:
                pending, grant.pending = grant.pending, None
                await self.store.bind(grant.live_keys, pending, member)
        except Exception as exc:  # noqa: BLE001 - the ledger's word wins at the next reclaim
            self.rt.log.warning("limit_store_failed", extra={"operation": "stored", "error": type(exc).__name__})

    async def pushed(self, scopes: list[Scope], callback_ids: list[str]) -> None:
        """Push configs ``callback_ids`` were stored for a request of ``scopes``."""
        keys = [f"push:{s.key}" for s in scopes if s.quota.push_configs is not None]
        if keys and callback_ids:
            try:
                await self.store.add(keys, callback_ids)
            except Exception as exc:  # noqa: BLE001 - uncounted configs: the limit is soft by them
                self.rt.log.warning("limit_store_failed", extra={"operation": "pushed", "error": type(exc).__name__})

    async def release_stream(self, grant: Grant) -> None:
        """The client's stream ended (its response is complete, or it went away): its slot is
        given back at once, before the worker's stream drains unwatched."""
        try:
            if grant.stream is not None:
                stream, grant.stream = grant.stream, None
                await self.store.release(grant.stream_keys, stream)
        except Exception as exc:  # noqa: BLE001 - reclaimed after limits.stale_seconds
            self.rt.log.warning("limit_store_failed", extra={"operation": "release", "error": type(exc).__name__})

    async def release(self, grant: Grant) -> None:
        """Give back what the request still holds: its stream slot, a pending task slot never
        bound (no task came of it, or the first record was terminal)."""
        try:
            if grant.stream is not None:
                await self.store.release(grant.stream_keys, grant.stream)
                grant.stream = None
            if grant.pending is not None:
                await self.store.release(grant.live_keys, grant.pending)
                grant.pending = None
        except Exception as exc:  # noqa: BLE001 - reclaimed after limits.stale_seconds
            self.rt.log.warning("limit_store_failed", extra={"operation": "release", "error": type(exc).__name__})

    # --- what is shown ----------------------------------------------------------------------------

    def _note(self, scope: Scope) -> None:
        self._seen[scope.key] = scope
        self._seen.move_to_end(scope.key)
        while len(self._seen) > MAX_SHOWN:
            self._seen.popitem(last=False)

    async def status(self) -> list[dict[str, Any]]:
        """The scopes this process saw most recently (at most :data:`MAX_SHOWN`), newest
        first, each as ``{"kind", "label", "limits": [{"limit", "use", "max"}]}`` (``use``
        ``None`` for a rate: a bucket has no "use"). Raises what the store raises."""
        rows = []
        for scope in reversed(self._seen.values()):
            q, limits = scope.quota, list[dict[str, Any]]()
            if q.requests_per_second is not None:
                limits.append({"limit": "requests_per_second", "use": None,
                               "max": f"{q.requests_per_second:g}/s, burst {q.burst or max(1, math.ceil(q.requests_per_second))}"})
            for kind, prefix in (("live_tasks", "live"), ("open_streams", "streams"), ("push_configs", "push")):
                limit = getattr(q, kind)
                if limit is not None:
                    limits.append({"limit": kind, "use": await self.store.count(f"{prefix}:{scope.key}"),
                                   "max": str(limit)})
            rows.append({"kind": scope.kind, "label": scope.label, "limits": limits})
        return rows


def _refusal(scope: Scope, limit: str, value: str, wait: float) -> Refusal:
    retry = max(1, math.ceil(wait))
    if limit == "requests_per_second":
        text = f"rate limited: {scope.kind} limit {limit} ({value} per second) reached; retry after {retry} s"
    else:  # a count: a slot comes free when one of them ends, not after a fixed wait
        text = (f"{scope.kind} limit {limit} reached (at most {value} {_UNITS[limit]}); "
                f"retry once one has ended (asked again after {retry} s at the earliest)")
    return Refusal(f"{scope.kind}.{limit}", retry, text)


def limited_answer(refusal: Refusal, binding: Binding, version: ProtocolVersion,
                   req_id: jsonrpc.JsonId = None) -> tuple[int, Any, tuple[tuple[bytes, bytes], ...]]:
    """The answer to a refused request as ``(HTTP status, body, headers)``: HTTP 429 with
    ``Retry-After``; JSON-RPC an error object with the client's ``req_id`` (:data:`LIMIT_CODE`,
    for v1.0 with an ``ErrorInfo`` in ``data``); v1.0 REST a ``google.rpc.Status``
    ``RESOURCE_EXHAUSTED`` with an ``ErrorInfo``; v0.3 REST ``{code, message, type}``
    (docs/limits.md §3)."""
    headers = ((b"retry-after", str(refusal.retry_after).encode()),)
    info = {"@type": jsonrpc.ERROR_INFO_TYPE, "reason": LIMIT_REASON, "domain": LIMIT_DOMAIN,
            "metadata": {"limit": refusal.limit, "retryAfterSeconds": str(refusal.retry_after)}}
    if binding is Binding.JSONRPC:
        error: dict[str, Any] = {"code": LIMIT_CODE, "message": refusal.message}
        if version is ProtocolVersion.V1_0:
            error["data"] = [info]
        return 429, {"jsonrpc": "2.0", "id": req_id, "error": error}, headers
    if version is ProtocolVersion.V0_3:
        return 429, rest.error_body(LIMIT_CODE, refusal.message, version=version), headers
    return 429, {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": refusal.message,
                           "details": [info]}}, headers


__all__ = ["LIMIT_CODE", "LIMIT_REASON", "Grant", "Limiter", "NO_GRANT", "Refusal", "Scope", "limited_answer",
           "task_member"]
