"""The proactive sweep's loop: every ``sweep.interval_seconds``, for each upstream, one page
of its silent live tasks from the ledger, and one ``GetTask`` per due task, rate-bounded per
upstream (docs/sweep.md).

What is due and what the answer means is decided by the pure core
(:mod:`gateway.exchange.sweep`); this module reads the ledger's page, keeps the per-process
memory of what it swept when, paces the requests, and drives each
:class:`~gateway.exchange.sweep.SweepExchange` with :class:`SweepDriver` — the driver of a
client's exchange with no client: the worker's answer is judged, stored with compare-and-set
and reported exactly as a forced ``GetTask``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Any
from urllib.parse import urlsplit

from gateway.a2a.card_bridge import card_endpoints
from gateway.a2a.version import Binding
from gateway.config import SweepConfig, UpstreamConfig
from gateway.errors import LedgerError
from gateway.exchange.sweep import ProbeRoute, SweepExchange, forget_before, probe_exchange, probe_route, select
from gateway.proxy.driver import Driver
from gateway.proxy.forward import Route
from gateway.proxy.runtime import Runtime
from gateway.records import Key, LiveTask

_BODILESS = frozenset({"GET", "DELETE"})


class SweepDriver(Driver):  # no __slots__ of its own: one per sweep, never on the hot path
    """:class:`~gateway.proxy.driver.Driver` for an exchange no client asked for: a ``Post``
    goes to ``target`` below the upstream's base URL with the gateway's own headers only
    (``Accept``, ``Content-Type`` with a body, ``A2A-Version`` when the command names one) —
    no client's headers, so no client's credentials (docs/sweep.md §6). Nothing is ever sent
    to a client (the exchange yields no such command)."""

    def __init__(self, rt: Runtime, upstream: UpstreamConfig) -> None:
        super().__init__(rt, Route(upstream, "/"), {"type": "http", "headers": [], "query_string": b""},
                         _no_client, rt.reporter(upstream.name), "GetTask")

    def _request(self, cmd: Any) -> tuple[str, list[tuple[bytes, bytes]], bytes | None]:
        url = self.route.upstream.url.rstrip("/") + (cmd.target or "/")
        headers = [(b"accept", b"application/json")]
        if cmd.a2a_version:
            headers.append((b"a2a-version", cmd.a2a_version.encode("latin-1")))
        if cmd.method in _BODILESS:
            return url, headers, None
        return url, [*headers, (b"content-type", b"application/json")], cmd.body


async def _no_client(message: Any) -> None:
    raise RuntimeError("a sweep has no client to send to")


class Pacer:
    """At most ``rate`` starts per second, evenly spaced (no burst): :meth:`wait` returns
    when the next start is allowed. ``rate`` may change between waits (a reload)."""

    def __init__(self) -> None:
        self._next = 0.0

    async def wait(self, rate: float) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        start = max(now, self._next)
        self._next = start + 1.0 / rate
        if start > now:
            await asyncio.sleep(start - now)


class Sweeper:
    """The sweep of one gateway process: :meth:`run` until cancelled (the app's lifespan
    starts and cancels it). Per upstream: a cursor into the ledger's live tasks (the next
    period goes on after the last page's last task, from the oldest again once a page comes
    back short), a :class:`Pacer` and at most one round at a time; per task, when this
    process last swept it (kept one heartbeat, so a task is swept at most once per heartbeat
    gap even when its worker does not answer)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.swept: dict[Key, float] = {}
        self._cursors: dict[str, LiveTask | None] = {}
        self._pacers: dict[str, Pacer] = {}
        self._rounds: dict[str, asyncio.Task[None]] = {}
        self._no_route: set[str] = set()  # upstreams whose missing card was logged

    async def run(self) -> None:
        """Every ``sweep.interval_seconds`` (re-read each period: a reload applies), start a
        round for each upstream whose previous round has ended, unless the sweep is disabled
        or the gateway is draining. Cancelling it cancels the rounds and their requests."""
        try:
            while True:
                cfg = self.rt.config.sweep
                if cfg.enabled and not self.rt.draining.is_set():
                    try:
                        self.tick(cfg)
                    except Exception as exc:  # a bug must not end the loop: the next period tries again
                        self.rt.log.error("sweep_round_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
                await asyncio.sleep(cfg.interval_seconds)
        finally:
            rounds = [r for r in self._rounds.values() if not r.done()]
            for task in rounds:
                task.cancel()
            for task in rounds:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def tick(self, cfg: SweepConfig) -> None:
        """Start the period's rounds and forget tasks swept longer ago than any heartbeat."""
        upstreams = self.rt.config.upstreams
        longest = max(self.rt.card_cache(u).heartbeat_seconds() for u in upstreams)
        for key in forget_before(self.swept, time.time() - longest):
            del self.swept[key]
        names = {u.name for u in upstreams}
        for name in [n for n in self._cursors if n not in names]:  # removed by a reload
            self._cursors.pop(name, None)
            self._pacers.pop(name, None)
        for upstream in upstreams:
            running = self._rounds.get(upstream.name)
            if running is None or running.done():
                started = self._rounds[upstream.name] = asyncio.ensure_future(self.round(upstream, cfg))
                started.add_done_callback(self._ended)

    def _ended(self, round_: asyncio.Task[None]) -> None:
        """Log a round that ended with an error of its own (a bug: ledger and worker failures
        are outcomes, not errors)."""
        if not round_.cancelled() and round_.exception() is not None:
            exc = round_.exception()
            self.rt.log.error("sweep_round_failed", extra={"error": f"{type(exc).__name__}: {exc}"})

    async def round(self, upstream: UpstreamConfig, cfg: SweepConfig) -> None:
        """One page of ``upstream``'s live tasks observed before ``now - heartbeat``; a
        ``GetTask`` for each due one, paced at ``requests_per_second``, at most
        ``max_in_flight`` awaiting answers. A ledger failure ends the round (counted and
        logged by the instrumented ledger); the next period tries again."""
        rt, name = self.rt, upstream.name
        cache = rt.card_cache(upstream)
        heartbeat = cache.heartbeat_seconds()
        road = probe_route(cache.speaks(), jsonrpc_path=upstream.jsonrpc_path, paths=_card_paths(cache, upstream))
        if road is None:  # said once, and not for the start-up fetch still in flight
            if name not in self._no_route and cache.status()["card"] != "pending":
                self._no_route.add(name)
                rt.log.info("sweep_waits_for_card", extra={"upstream": name})
            return
        self._no_route.discard(name)
        now = time.time()
        after = self._cursors.get(name)
        try:
            page = await rt.ledger.live_before(
                name, now - heartbeat, limit=cfg.batch_size, after=after)
        except LedgerError:
            return
        self._cursors[name] = page[-1] if len(page) >= cfg.batch_size else None
        due, skipped = select(page, now=now, heartbeat_seconds=heartbeat, swept=self.swept,
                              streaming=rt.streams)
        if skipped.get("open_stream"):
            rt.metrics.sweeps.labels(name, "open_stream").inc(skipped["open_stream"])
        if not due:
            return
        pacer = self._pacers.setdefault(name, Pacer())
        slots = asyncio.Semaphore(cfg.max_in_flight)
        policy = dataclasses.replace(rt.policy(upstream, heartbeat), fail_open=False)
        card = cache.view()
        async with asyncio.TaskGroup() as group:
            for task in due:
                if rt.draining.is_set() or not rt.config.sweep.enabled:
                    break
                await slots.acquire()
                await pacer.wait(rt.config.sweep.requests_per_second)
                self.swept[task.key] = time.time()
                group.create_task(self._sweep(upstream, road, task, card, policy, slots))

    async def _sweep(self, upstream: UpstreamConfig, road: ProbeRoute, task: LiveTask, card: Any,
                     policy: Any, slots: asyncio.Semaphore) -> None:
        """Drive one task's :class:`SweepExchange` (releasing its slot in ``slots`` at the
        end), count its outcome, and hand a newly recorded state to the push relay when there
        is one (docs/sweep.md §4)."""
        try:
            outcome, judged = await self._drive(upstream, road, task, card, policy)
        finally:
            slots.release()
        self.rt.metrics.sweeps.labels(upstream.name, outcome).inc()
        push = getattr(self.rt, "push", None)
        if outcome == "changed" and push is not None:
            try:
                await push.deliver_observed(upstream.name, task.task_id, {"task": judged}, tenant=task.tenant)
            except Exception as exc:  # the push relay's failure is its own; the sweep goes on
                self._failed("sweep_push_failed", upstream, task, exc)

    async def _drive(self, upstream: UpstreamConfig, road: ProbeRoute, task: LiveTask, card: Any,
                     policy: Any) -> tuple[str, Any]:
        """The exchange's outcome and judged Task; ``error`` for a bug of its own, logged, so
        that it does not end the round's other sweeps."""
        try:
            probe = probe_exchange(road, task, card, policy)
            target = road.path if road.binding is Binding.JSONRPC else "/"
            exchange = SweepExchange(task, probe, policy, jsonrpc_path=target)
            driver = SweepDriver(self.rt, upstream)
            try:
                await driver.run(exchange.run())
            finally:
                await driver.aclose()
        except Exception as exc:
            self._failed("sweep_failed", upstream, task, exc)
            return "error", None
        return exchange.result.outcome, exchange.result.task

    def _failed(self, event: str, upstream: UpstreamConfig, task: LiveTask, exc: Exception) -> None:
        self.rt.log.error(event, extra={"upstream": upstream.name, "task_id": task.task_id,
                                        "error": f"{type(exc).__name__}: {exc}"})


def _card_paths(cache: Any, upstream: UpstreamConfig) -> dict[Any, str]:
    """The path below the upstream's URL of each interface its cached card advertises (by
    version and binding), as the served card's rewrite reads it: only the path of a URL
    counts (its host is often the worker's own name, docs/field-cases.md F11), and a URL not
    below the upstream's path counts whole."""
    cached = cache.cached()
    if cached is None:
        return {}
    base = urlsplit(upstream.url).path.rstrip("/")
    out = {}
    for key, url in card_endpoints(cached.doc).items():
        path = urlsplit(url).path or "/"
        if base and (path == base or path.startswith(base + "/")):
            path = path[len(base):] or "/"
        out[key] = path
    return out


__all__ = ["Pacer", "SweepDriver", "Sweeper"]
