"""The delivery loop (docs/push.md §3): a background task of the app's lifespan that claims due
outbox entries (each leased for ``push.lease_seconds``, so replicas sharing a Redis ledger do
not both send one), POSTs each to its client's webhook and removes it on a 2xx; a failure is
retried after ``push.backoff_seconds`` doubled per attempt (at most ``push.backoff_max_seconds``)
and, after ``push.max_attempts`` attempts, dead-lettered: removed, counted and logged with the
task id. A task's entries go out one at a time, in order (the ledger claims only a queue's head).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx

from gateway.a2a.version import ProtocolVersion
from gateway.config import GatewayConfig
from gateway.errors import LedgerError
from gateway.invariants.timeline import TimelineEntry
from gateway.ledger.base import OutboxEntry, TaskLedger
from gateway.observability.metrics import Metrics
from gateway.push.relay import PushConfigData, PushRelay
from gateway.push.ssrf import Refused, Target, check_webhook


class Host(Protocol):
    """What the delivery loop needs of the running gateway (the proxy's ``Runtime`` is one;
    named structurally so that push does not import the proxy, docs/architecture.md §3).
    ``ledger`` is the instrumented one: every call timed and counted."""

    config: GatewayConfig
    ledger: TaskLedger
    metrics: Metrics
    log: logging.Logger

    async def keep_timeline(self, upstream: str, task_id: str, entry: TimelineEntry, *,
                            tenant: str = "") -> None: ...


CLAIM_BATCH = 32
"""Entries claimed (and delivered concurrently) per round."""


def pinned_request(target: Target) -> tuple[str, dict[str, str], dict[str, object]]:
    """The URL, extra headers and httpx extensions that reach ``target``'s checked address
    rather than a fresh resolution of its host (DNS rebinding, docs/push.md §4): the address in
    the URL, the host in ``Host`` and, for https, as the TLS server name (SNI and the
    certificate check)."""
    if target.address is None:
        return target.url, {}, {}
    parts = urlsplit(target.url)
    address = f"[{target.address}]" if ":" in target.address else target.address
    netloc = address if parts.port is None else f"{address}:{parts.port}"
    host = parts.netloc.rpartition("@")[2]
    extensions: dict[str, object] = {"sni_hostname": target.host} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), {"Host": host}, extensions


class Deliverer:
    """Empties the outbox of one gateway process into the clients' webhooks."""

    def __init__(self, rt: Host, relay: PushRelay) -> None:
        self.rt = rt
        self.relay = relay
        cfg = rt.config.push
        self.http = httpx.AsyncClient(trust_env=False, follow_redirects=False,
                                      timeout=httpx.Timeout(cfg.delivery_timeout_seconds),
                                      limits=httpx.Limits(max_connections=CLAIM_BATCH))
        # httpx logs every request's URL at INFO; a webhook URL may carry a secret
        logging.getLogger("httpx").setLevel(logging.WARNING)

    async def run_forever(self) -> None:
        """Claim and deliver until cancelled; wakes at once when an entry is added."""
        while True:
            delivered = await self.round()
            if not delivered:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.relay.wake.wait(), self.rt.config.push.poll_seconds)
                self.relay.wake.clear()

    async def round(self) -> int:
        """One round: claim due entries and deliver them; returns how many were claimed."""
        cfg, ledger = self.rt.config.push, self.rt.ledger
        try:
            entries = await ledger.outbox_claim(
                time.time(), cfg.lease_seconds, CLAIM_BATCH)
            depth = await ledger.outbox_depth()
        except LedgerError:
            return 0
        self.rt.metrics.push_outbox_depth.set(depth)
        if entries:
            await asyncio.gather(*(self.deliver(entry) for entry in entries))
        return len(entries)

    async def deliver(self, entry: OutboxEntry) -> None:
        """One attempt at ``entry``; never raises (a ledger failure leaves the entry leased:
        it is claimed again when the lease runs out)."""
        try:
            await self._deliver(entry)
        except LedgerError:
            pass

    async def _deliver(self, entry: OutboxEntry) -> None:
        rt = self.rt
        found = await rt.ledger.get_push_config(entry.callback_id)
        if found is None:  # deleted by the client, or pruned: nobody to deliver to
            await rt.ledger.outbox_done(entry)
            rt.log.info("push_config_gone", extra={"upstream": entry.upstream, "task_id": entry.task_id})
            return
        data = PushConfigData.decode(found.data)
        media = "application/json" if data.version is ProtocolVersion.V0_3 else "application/a2a+json"
        try:
            target = await check_webhook(data.webhook.url, rt.config.push)
            url, extra, extensions = pinned_request(target)
            headers = {"Content-Type": media, **extra, **dict(data.webhook.headers())}
            # streamed, and closed unread: only the status counts, and a webhook's answer of
            # any size (an endless one) must not be read into memory
            async with self.http.stream("POST", url, content=entry.body, headers=headers, extensions=extensions,
                                        timeout=rt.config.push.delivery_timeout_seconds) as response:
                status = response.status_code
            failure = None if 200 <= status < 300 else ("status", f"HTTP {status}")
        except Refused as refused:
            failure = ("refused_address", refused.reason)
        except httpx.HTTPError as exc:
            failure = ("transport", type(exc).__name__)
        if failure is None:
            await rt.ledger.outbox_done(entry)
            rt.metrics.push_delivered.labels(entry.upstream).inc()
            return
        reason, detail = failure
        rt.metrics.push_delivery_failures.labels(entry.upstream, reason).inc()
        cfg = rt.config.push
        attempts = entry.attempts + 1
        if attempts >= cfg.max_attempts:
            await rt.ledger.outbox_done(entry)
            rt.metrics.push_dead_lettered.labels(entry.upstream).inc()
            rt.log.error("push_dead_lettered", extra={"upstream": entry.upstream, "task_id": entry.task_id,
                                                      "attempts": attempts, "reason": reason, "error": detail})
            await rt.keep_timeline(entry.upstream, entry.task_id, TimelineEntry(
                "push", "dead_lettered", method="webhook", binding=data.binding.value, version=data.version.value,
                error=f"not delivered after {attempts} attempts: {reason} ({detail})"), tenant=entry.tenant)
            return
        wait = min(cfg.backoff_seconds * 2 ** (attempts - 1), cfg.backoff_max_seconds)
        await rt.ledger.outbox_retry(entry, time.time() + wait)

    async def aclose(self) -> None:
        """Close the webhook client."""
        await self.http.aclose()
