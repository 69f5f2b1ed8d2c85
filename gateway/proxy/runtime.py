"""What every proxy handler shares: config, ledger, upstream client, metrics, logger.

Also the one place where the shell calls the engine for a worker payload
(:meth:`Runtime.judge`): read the ledger, run the engine, store the record with
compare-and-set (retrying on a lost race), count the findings — all before the caller
forwards anything (write-before-forward). Every ledger call is timed
(``a2a_gateway_ledger_operation_duration_seconds``) and every failure counted
(``a2a_gateway_ledger_errors_total``) here.

When the ledger is unavailable, ``ledger.on_unavailable: reject`` (default) raises
:class:`~gateway.errors.LedgerError` so the handler fails closed; ``forward`` — and observe
mode — relay the payload unchecked instead (counted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import operator
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar


from gateway.a2a.jsonrpc import Operation
from gateway.config import GatewayConfig, UpstreamConfig
from gateway.errors import LedgerError
from gateway.invariants import engine
from gateway.invariants.model import (
    Action,
    Clock,
    Exchange,
    Finding,
    Mode,
    Outcome,
    StreamState,
    TaskRecord,
)
from gateway.ledger.base import TaskLedger, VersionConflictError
from gateway.observability.metrics import Metrics
from gateway.proxy.forward import Router

from gateway.proxy.card import CardCache

if TYPE_CHECKING:
    from gateway.proxy.transport import UpstreamClient

_CAS_ATTEMPTS = 8
_OBSERVATION_WRITE_SECONDS = 1.0
T = TypeVar("T")


def _only_fresher(old: TaskRecord | None, new: TaskRecord) -> bool:
    """True when ``new`` differs from ``old`` only by an observation time less than a second
    later: the write is skipped (a stream of WORKING updates does not rewrite the record per
    event). Observation times only matter at heartbeat granularity (seconds)."""
    if old is None or new.observed_at - old.observed_at >= _OBSERVATION_WRITE_SECONDS:
        return False
    return _content(new) == _content(old)


_content = operator.attrgetter(*(f.name for f in dataclasses.fields(TaskRecord)
                                 if f.name not in ("observed_at", "observed_monotonic", "version")))
"""A record's fields other than its observation time and version, as a tuple."""


@dataclass
class Runtime:
    """Shared state of one gateway process."""

    config: GatewayConfig
    ledger: TaskLedger
    client: UpstreamClient
    metrics: Metrics
    log: logging.Logger
    draining: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    drain_expired: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    cards: dict[str, CardCache] = dataclasses.field(default_factory=dict)
    router: Router = dataclasses.field(default_factory=lambda: Router(()))

    def apply_config(self, config: GatewayConfig, *, cards: Callable[..., CardCache]) -> set[str]:
        """Put ``config`` in force: routing, policies, one card cache per upstream.

        Requests already running keep the route and upstream they started with; a card cache
        whose upstream URL and card settings did not change is kept (with its card). The listen
        address and the ledger cannot change while running: they keep their old values (a
        warning says so). Returns the names of the upstreams whose cache was kept.
        """
        old = getattr(self, "config", None)
        if old is not None and (old.listen != config.listen or old.ledger != config.ledger):
            self.log.warning("config_needs_restart", extra={"keys": ["listen", "ledger"]})
            config = config.model_copy(update={"listen": old.listen, "ledger": old.ledger})
        kept: set[str] = set()
        fresh: dict[str, CardCache] = {}
        for upstream in config.upstreams:
            current = self.cards.get(upstream.name)
            same = current is not None and (current.upstream.url, current.upstream.card) == (
                upstream.url, upstream.card)
            if current is not None and same:
                current.upstream = upstream
                fresh[upstream.name] = current
                kept.add(upstream.name)
            else:
                fresh[upstream.name] = cards(self, upstream)
        self.config = config
        self.cards = fresh
        self.router = Router(config.upstreams)
        return kept

    def card_cache(self, upstream: UpstreamConfig) -> CardCache:
        """The card cache of ``upstream``. A request that started before a reload removed or
        replaced its upstream keeps working with a cache of its own (not kept)."""
        cache = self.cards.get(upstream.name)
        if cache is None or cache.upstream.url != upstream.url:
            cache = CardCache(self, upstream)
        return cache

    def begin_drain(self) -> None:
        """Shutdown has begun: readiness turns 503 at once; after
        ``listen.shutdown_grace_seconds`` open streams are ended cleanly (call in the loop)."""
        if self.draining.is_set():
            return
        grace = self.config.listen.shutdown_grace_seconds
        self.log.info("draining", extra={"grace_s": grace})
        self.draining.set()
        asyncio.get_running_loop().call_later(grace, self.drain_expired.set)

    @property
    def mode(self) -> Mode:
        """The configured :class:`Mode`."""
        return Mode(self.config.mode)

    @property
    def fail_open(self) -> bool:
        """True when an unavailable ledger means "relay unchecked" rather than "refuse"."""
        return self.mode is Mode.OBSERVE or self.config.ledger.on_unavailable == "forward"

    @staticmethod
    def clock() -> Clock:
        """The current wall and monotonic time, in seconds."""
        return Clock(time.time(), time.monotonic())

    async def ledger_call(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run one ledger operation, timed and with failures counted.

        Raises:
            VersionConflictError: passed through. LedgerError: any other failure.
        """
        backend = self.ledger.backend
        started = time.perf_counter()
        try:
            return await call()
        except VersionConflictError:
            raise
        except Exception as exc:
            self.metrics.ledger_errors.labels(backend, operation).inc()
            self.log.error("ledger_error", extra={"backend": backend, "operation": operation,
                                                  "error": f"{type(exc).__name__}: {exc}"})
            raise LedgerError(f"{backend} ledger {operation} failed") from exc
        finally:
            elapsed = time.perf_counter() - started
            self.metrics.ledger_duration.labels(backend, operation).observe(elapsed)

    async def record_of(self, upstream: str, task_id: str | None) -> TaskRecord | None:
        """The ledger record of a task, or ``None``.

        Raises:
            LedgerError: the ledger failed and the policy is to fail closed (with
                ``fail_open`` the failure is counted and ``None`` returned).
        """
        if task_id is None:
            return None
        try:
            return await self.ledger_call("get", lambda: self.ledger.get(upstream, task_id))
        except LedgerError:
            if self.fail_open:
                return None
            raise

    async def store(self, record: TaskRecord, expected_version: int) -> TaskRecord:
        """Compare-and-set ``record``.

        Raises:
            VersionConflictError: lost the race. LedgerError: the ledger failed.
        """
        return await self.ledger_call("put", lambda: self.ledger.put(record, expected_version))

    async def judge(
        self, ex: Exchange, stream: StreamState | None, result: Any
    ) -> Outcome:
        """Run the engine on one worker payload and store its ledger change first.

        ``ListTasks`` results are only normalized. Returns the :class:`Outcome` whose
        findings have been counted and logged.

        Raises:
            LedgerError: the ledger failed and the policy is to fail closed.
        """
        if ex.operation is Operation.LIST:
            outcome = engine.check_list(ex, result)
            task_id = None
        else:
            task_id = engine.payload_task_id(result)
            try:
                outcome = await self._judge_with_cas(ex, stream, result, task_id)
            except LedgerError:
                if not self.fail_open:
                    raise
                self.metrics.unchecked.labels(ex.upstream).inc()
                return Outcome(Action.FORWARD, result, stream)
        self.count(ex, outcome.findings, task_id=task_id)
        return outcome

    async def _judge_with_cas(
        self, ex: Exchange, stream: StreamState | None, result: Any, task_id: str | None
    ) -> Outcome:
        for _ in range(_CAS_ATTEMPTS):
            record = None
            if task_id is not None:
                record = await self.ledger_call("get", lambda: self.ledger.get(ex.upstream, task_id))
            outcome = engine.check_payload(ex, stream, record, result, self.clock())
            if outcome.record is None or _only_fresher(record, outcome.record):
                return outcome
            try:
                await self.store(outcome.record, record.version if record else 0)
            except VersionConflictError:
                self.metrics.ledger_conflicts.labels(self.ledger.backend).inc()
                continue
            return outcome
        raise LedgerError(f"task {task_id}: too many concurrent updates")

    async def touch(self, upstream: str, task_id: str) -> None:
        """Record an observation of a live task without a payload (an SSE comment on its own
        stream): ``observed_at`` moves on, nothing else. Best effort: races and ledger
        failures are ignored (the next event records the time anyway)."""
        try:
            record = await self.ledger_call("get", lambda: self.ledger.get(upstream, task_id))
            if record is None or record.terminal:
                return
            now = self.clock()
            fresh = dataclasses.replace(record, observed_at=now.wall, observed_monotonic=now.monotonic)
            await self.store(fresh, record.version)
        except (VersionConflictError, LedgerError):
            return

    async def clear_resync(self, record: TaskRecord) -> None:
        """Drop the ``needs_resync`` flag of ``record`` (a lost race means someone else did)."""
        if record.needs_resync:
            try:
                await self.store(dataclasses.replace(record, needs_resync=False), record.version)
            except VersionConflictError:
                pass

    def count(
        self, ex: Exchange, findings: list[Finding], method: str = "", task_id: str | None = None
    ) -> None:
        """Count findings in metrics and log divergences at warning level (with the task id)."""
        action = "observed" if ex.mode is Mode.OBSERVE else "enforced"
        for f in findings:
            if f.category == "normalization":
                self.metrics.normalizations.labels(ex.upstream, f.kind).inc()
            elif f.category == "divergence":
                self.metrics.divergences.labels(ex.upstream, f.kind, action).inc()
                self.log.warning(
                    "divergence",
                    extra={"upstream": ex.upstream, "kind": f.kind, "detail": f.detail,
                           "task_id": task_id or ex.task_id, "action": action},
                )
            elif f.category == "rejection":
                self.metrics.rejections.labels(
                    ex.upstream, method or ex.operation.value, f.kind, action
                ).inc()
