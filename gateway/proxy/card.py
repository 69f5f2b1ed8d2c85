"""Agent Card cache per upstream, and serving the card through the gateway.

Implements issue "Agent Card authority" §1-2 (docs/protocol.md §4.1, §11 pitfall 12;
docs/field-cases.md F10, F11):

* :class:`CardCache` fetches the worker's card in the background from start-up on (start-up
  never waits for it) and when stale; honours ``Cache-Control: max-age`` (else
  ``card.ttl_seconds``); revalidates with ``If-None-Match``; tries the legacy
  ``/.well-known/agent.json`` only after a 404. However many requests need the card, one fetch
  is in flight (each waits for it at most ``card.fetch_wait_seconds``). A failed fetch is
  ``unreachable`` (no answer, or HTTP 5xx: transport degradation, never a capability change) or
  ``invalid`` (a redirect, another 4xx, a body that is not JSON, JSON that is no card): logged
  ``card_unreachable`` / ``card_invalid`` with the reason, shown by the gauge
  ``a2a_gateway_upstream_degraded{reason="card_unreachable"|"card_invalid"}``, and followed by
  a back-off (``card.retry_backoff_seconds``, doubling up to ``card.retry_max_seconds``)
  during which requests are answered from the cache at once — except while no card was ever
  fetched and the last fetch found the worker unreachable (a worker still starting): then a
  request makes (or joins) a fetch of its own, which neither advances the back-off nor warns
  again for the same problem. An invalid card is never cached (the last good one stays).
  :meth:`CardCache.status` says all this for a readiness check, :meth:`CardCache.holds_card`
  whether any card was ever fetched (``/readyz`` is 503 until every upstream's was).
  Every card has an ETag: the worker's, or one derived from the canonical JSON. A worker that
  varies its card by ``A2A-Version`` is cached per variant. Each good fetch is told to the
  ledger (``observe_card``), which answers the upstream's card generation — one more per
  observed change of a variant's ETag, shared by every replica on the ledger — kept here and in
  every :class:`~gateway.invariants.admission.CardView` (docs/field-cases.md F20).
* :func:`serve_card` answers ``GET {prefix}/.well-known/agent-card.json`` (and the legacy
  ``agent.json``) with every interface URL rewritten to the gateway's public URL for the
  mount, its own ETag (hash of the served body), ``304`` on a matching ``If-None-Match``, and
  the worker's ``Cache-Control`` / ``Last-Modified`` / ``Vary``. Only the bindings the gateway
  guards are advertised (``card.unguarded_interfaces``); signed cards (a non-empty
  ``signatures`` list) follow ``card.signed`` (docs/protocol.md §4.5). Every client gets the
  same card whatever its card GET carries: with ``bridge.enabled`` a card of one version also
  lists the other one's interfaces and members
  (:func:`gateway.a2a.card_bridge.served_card`; docs/bridge.md §2.2).
* Signed cards (docs/protocol.md §4.5): with ``card.signing`` (a :class:`CardSigner`) or an
  upstream's ``card.trust``, a fetched card's signatures are checked first
  (:class:`~gateway.proxy.signing.CardTrust`, inside the fetch: a JWKS it needs is fetched
  within the same flight, so a request never waits for it beyond ``card.fetch_wait_seconds``);
  a card whose signatures are refused is ``invalid`` with the reason as its ``cause``. With a
  key, :func:`serve_card` signs the final served document (kept per request shape, so the
  bytes and the ETag are stable), :meth:`CardCache.extended` the extended card, and
  :func:`serve_jwks` publishes the keys under each mount.
* Whenever a new card is stored (at start and when it changes, never per request) the cache
  says what clients will be told that bypasses the gateway: a warning ``card_served_verbatim``
  and the gauge ``a2a_gateway_card_served_verbatim`` for a signed card served verbatim; a
  warning ``card_unguarded_interfaces`` and the gauge ``a2a_gateway_card_unguarded_interfaces``
  for unguarded interfaces still advertised.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from gateway.a2a.card import (
    WELL_KNOWN_PATHS,
    advertised_urls,
    canonical_etag,
    card_problem,
    content_etag,
    credential_headers,
    drop_unguarded,
    heartbeat_interval,
    jsonrpc_paths,
    is_signed,
    rewrite_card,
    unguarded_interfaces,
)
from gateway.a2a.card_bridge import card_versions, served_card
from gateway.a2a.jsonrpc import ERROR_DOMAIN, ERROR_INFO_TYPE, MAX_JSON_DEPTH, loads
from gateway.a2a.version import Binding, ProtocolVersion, version_family
from gateway.config import BridgeConfig, CardConfig, PublicConfig, UpstreamConfig
from gateway.errors import LedgerError, NestingTooDeepError, UpstreamError
from gateway.invariants.admission import CardView
from gateway.ledger import redact
from gateway.proxy.forward import Route
from gateway.observability import access
from gateway.observability.metrics import Metrics
from gateway.proxy.transport import UpstreamAnswer, UpstreamClient, failure_cause
from gateway.proxy.types import Receive, Scope, Send

if TYPE_CHECKING:
    from gateway.proxy.signing import CardSigner, CardTrust

SIGNED_CACHE_ENTRIES = 32
"""Signed served cards kept per upstream (one per public base and bridge setting seen)."""


@dataclass(frozen=True, slots=True)
class CachedCard:
    """One good card as fetched. Times are monotonic seconds; ``max_age`` in seconds."""

    doc: dict[str, Any]
    body: bytes
    etag: str
    worker_etag: str | None
    cache_control: str | None
    last_modified: str | None
    vary: str | None
    fetched_at: float
    max_age: float
    signature: str = "unchecked"
    """What its signatures came to (docs/protocol.md §4.5): ``verified``, ``unsigned``,
    ``unverified`` (``card.trust.signatures: optional`` accepted it although they did not
    verify) or ``unchecked`` (no verification configured)."""

    def fresh(self, now: float) -> bool:
        """Fetched or revalidated within its max-age."""
        return now - self.fetched_at < self.max_age


def _max_age(cache_control: str | None, default: float) -> float:
    for part in (cache_control or "").split(","):
        name, _, value = part.strip().partition("=")
        if name.lower() == "max-age" and value.strip().isdigit():
            return float(value.strip())
        if name.lower() in ("no-cache", "no-store"):
            return 0.0
    return default


def _verbatim(doc: dict[str, Any], settings: CardConfig, signing: bool = False) -> bool:
    """Whether ``doc`` is served as the worker sent it: signed, ``card.signed: verbatim``, and
    the gateway has no signing key (``signing``; with one, every card is signed again)."""
    return not signing and settings.signed == "verbatim" and is_signed(doc)


def _keep_unguarded(settings: CardConfig) -> bool:
    return settings.unguarded_interfaces == "keep"


def _advertised(doc: dict[str, Any], settings: CardConfig, signing: bool) -> dict[str, Any]:
    """The served card's interfaces, as far as they do not depend on the request (the URLs of
    guarded interfaces are not rewritten here; unguarded ones never are)."""
    if _verbatim(doc, settings, signing) or _keep_unguarded(settings):
        return doc
    return drop_unguarded(doc)


def _local_host(url: object) -> bool:
    """True for an unspecified, loopback or link-local host (never routable from elsewhere)."""
    host = urlsplit(url).hostname if isinstance(url, str) else None
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_unspecified or ip.is_loopback or ip.is_link_local


@dataclass(frozen=True, slots=True)
class _FetchProblem:
    """Why a card fetch gave no usable card. ``outcome``: ``unreachable`` (no answer: connect
    failure, timeout, broken connection, HTTP 5xx) or ``invalid`` (an answer that is no card: a
    redirect, another 4xx, a 404 at the card path and the legacy one, a body that is not JSON or
    too large, JSON that is not an Agent Card). ``reason``: one line for people (logs, readiness);
    ``status`` and ``content_type`` of the worker's answer when there was one."""

    outcome: str
    reason: str
    status: int | None = None
    content_type: str | None = None
    cause: str = "invalid_card"
    """For people: ``dns``, ``connection_refused``, ``timeout``, ``tls``, ``connection_reset``
    (:func:`~gateway.proxy.transport.failure_cause`), ``http_status``, ``answer_too_large``,
    ``invalid_card``, or why the card's signatures were refused: ``bad_signature``,
    ``unknown_kid``, ``key_fetch_failed``, ``unsigned`` (docs/protocol.md §4.5)."""
    url: str | None = None
    """The card URL fetched last."""


class CardCache:
    """The Agent Card of one upstream, kept fresh. One instance per upstream.

    Fetches are single-flight: callers that need the card fetched (never fetched, stale, marked
    stale) share one fetch in flight per variant, an :class:`asyncio.Task` none of them owns.
    After a failed fetch no fetch is made before a back-off (``card.retry_backoff_seconds``,
    doubling per further failure up to ``min(card.retry_max_seconds, card.ttl_seconds)``;
    reset by a good fetch); meanwhile callers get the cache as it is at once. The one
    exception is a card never fetched after an unreachable worker (:meth:`current`): a
    request is never refused for a failure it did not see, as long as no card is known.
    """

    def __init__(self, client: UpstreamClient, metrics: Metrics, log: logging.Logger,
                 upstream: UpstreamConfig, *, max_json_depth: int = MAX_JSON_DEPTH,
                 identity_header: str | None = None,
                 observe: Callable[[str, str], Awaitable[int]] | None = None,
                 signer: CardSigner | None = None, where: str | None = None) -> None:
        self.client = client
        self.observe = observe  # (variant, ETag) -> the ledger's card generation (docs/field-cases.md F20)
        self._generation: int | None = None
        self.signer = signer
        """The gateway's card signatures (``card.signing``); ``None``: served cards are not signed."""
        self.trust: CardTrust | None = None
        """The keys the worker's card signatures are checked against; ``None``: not checked."""
        if signer is not None or upstream.card.trust.configured():
            from gateway.proxy.signing import CardTrust

            self.trust = CardTrust(upstream, client, metrics, log, where=where)
        self._signed: dict[tuple[Any, ...], bytes] = {}  # served card bodies signed, by request shape
        self.identity_header = identity_header  # callers.header when it names callers, else None
        self.max_json_depth = max_json_depth
        self.metrics = metrics
        self.log = log
        self.upstream = upstream
        self._cards: dict[str, CachedCard] = {}
        self._varies = False
        self._flights: dict[str, asyncio.Task[str]] = {}  # variant -> last fetch (running or done)
        self.reachable = True
        self._stale = False
        self._problem: _FetchProblem | None = None  # of the last fetch, None after a good one
        self._backoff = 0.0  # seconds: the current back-off step, 0 after a good fetch
        self._retry_at = 0.0  # monotonic: after a failure, no fetch before this
        self._heartbeat_of: CachedCard | None = None  # the card _heartbeat was read from
        self._jsonrpc_paths: frozenset[str] = frozenset()
        self._speaks: frozenset[tuple[ProtocolVersion, Binding]] = frozenset()
        self._heartbeat: float | None = None

    def _variant(self, a2a_version: str) -> str:
        """The cache key of a client's ``A2A-Version``: its version family when the worker
        varies its card by it, else ``""`` (one card). Bounded whatever clients send."""
        return version_family(a2a_version) if self._varies else ""

    def _url(self, path: str) -> str:
        return self.upstream.url.rstrip("/") + path

    def mark_stale(self) -> None:
        """Revalidate before the next use (a 401/403/404 from a task endpoint); after a failed
        fetch, once its back-off has run out."""
        self._stale = True

    def view(self, a2a_version: str = "") -> CardView:
        """What admission and freshness need, from the cache as it is (no I/O)."""
        card = self._cards.get(self._variant(a2a_version))
        if card is None:
            problem = self._problem
            return CardView(None, False, self.reachable, None,
                            problem=f"{problem.outcome} ({problem.cause})" if problem is not None else None)
        fresh = card.fresh(time.monotonic()) and not self._stale
        return CardView(card.doc, fresh, self.reachable, card.etag, generation=self._generation)

    @property
    def generation(self) -> int | None:
        """The upstream's card generation as the ledger said at the last good fetch (``None``:
        not known — no fetch yet, no ledger hook, or the ledger failed after a change)."""
        return self._generation

    def status(self) -> dict[str, Any]:
        """The card's state for a readiness endpoint, from the cache as it is (no I/O)::

            {"card": "ok" | "pending" | "unreachable" | "invalid",
             "admitting_new_tasks": bool, "reason": str | None, "retry_in_s": float | None}

        ``card``: ``ok`` when the last fetch gave a good card, ``pending`` before any fetch
        ended (the start-up fetch in flight), else the last fetch's failure (the last good
        card, if any, is still served). ``admitting_new_tasks``: a new task would be admitted
        on the card's account now — a card is held, and the last fetch was good (a stale card
        is revalidated first), the card is still fresh, or ``card.on_unreachable`` is
        ``allow_stale`` (capabilities and skills are judged per request, not here).
        ``reason``: why not ``ok``, one line (``None`` when ok). ``retry_in_s``: after a
        failure, seconds until the next fetch may be made (0 once the back-off has run out),
        else ``None``.
        """
        now = time.monotonic()
        cards = self._cards.values()
        problem = self._problem
        if problem is None:
            return {"card": "ok" if cards else "pending", "admitting_new_tasks": bool(cards),
                    "reason": None if cards else "no card fetched yet", "retry_in_s": None}
        fresh = not self._stale and any(card.fresh(now) for card in cards)
        allow_stale = self.upstream.card.on_unreachable == "allow_stale"
        return {"card": problem.outcome,
                "admitting_new_tasks": bool(cards) and (fresh or allow_stale),
                "reason": problem.reason,
                "retry_in_s": round(max(0.0, self._retry_at - now), 3)}

    def worker_signature(self) -> str:
        """The state of the worker's card signatures as the status page shows it
        (docs/protocol.md §4.5): ``invalid`` when the last fetch was refused for them, else
        the held card's (``verified``, ``unsigned``, ``unverified``, ``unchecked``), or
        ``unchecked`` with no card."""
        problem = self._problem
        if problem is not None and problem.cause in ("bad_signature", "unknown_kid", "key_fetch_failed", "unsigned"):
            return "invalid"
        card = self._cards.get("")
        return card.signature if card is not None else "unchecked"

    def holds_card(self) -> bool:
        """Whether a good card was ever fetched (for any variant): ``False`` from start-up (or
        from a reload that added the upstream) until the first good fetch. For ``/readyz``."""
        return bool(self._cards)

    def heartbeat_seconds(self) -> float:
        """The card's declared heartbeat interval, else the upstream's configured one (read
        from the card once per fetched card)."""
        card = self._cards.get("")
        if card is not self._heartbeat_of:
            declared = heartbeat_interval(card.doc) if card is not None else None
            self._heartbeat_of, self._heartbeat = card, declared
        return self._heartbeat or self.upstream.heartbeat_seconds

    def jsonrpc_paths(self) -> frozenset[str]:
        """The paths below the mount where the cached card(s) advertise JSON-RPC
        (:func:`gateway.a2a.card.jsonrpc_paths`), so a POST there is guarded as JSON-RPC
        even when ``jsonrpc_path`` names another path."""
        return self._jsonrpc_paths

    def speaks(self) -> frozenset[tuple[ProtocolVersion, Binding]]:
        """The A2A versions and bindings the worker serves: what its cached card(s) say
        (:func:`gateway.a2a.card.card_versions`), with the versions replaced by
        ``protocol_versions`` when configured (on the card's bindings, or both before any
        card). Empty while nothing is known: then nothing is bridged (docs/bridge.md §3.1)."""
        learnt = self._speaks
        override = self.upstream.protocol_versions
        if override is None:
            return learnt
        bindings = {binding for _, binding in learnt} or set(Binding)
        return frozenset((ProtocolVersion(v), b) for v in override for b in bindings)

    async def current(self, a2a_version: str = "") -> CardView:
        """The card view for a client's ``A2A-Version``, fetched first when it is due.

        A due card (never fetched, stale, marked stale) is fetched once for all callers
        (:meth:`revalidate`); each waits for that fetch at most ``card.fetch_wait_seconds``,
        then gets the view as the cache has it. With a fresh card it returns at once; during a
        back-off too, unless no card of the upstream was ever fetched and the last fetch found
        the worker unreachable (a worker that was still starting): then the caller makes a
        fetch past the back-off, or joins the one in flight, and waits for it as above — a new
        task is refused for want of a card only when that fetch fails too. Such a fetch does not
        advance the back-off (client traffic does not push the background retry back). After an
        *invalid* answer the back-off holds (the worker answers, but not with a card). Never
        raises for the worker's failures (they are counted and logged).
        """
        view = self.view(a2a_version)
        if view.fresh:
            return view  # the common case: nothing to fetch or wait for
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.upstream.card.fetch_wait_seconds
        for _ in range(2):  # again only when that fetch found the card varies by A2A-Version
            key = self._variant(a2a_version)
            flight = self.revalidate(a2a_version)
            if flight is None and not self._cards and not self.reachable:
                flight = self._flight(a2a_version, past_backoff=True)  # never fetched: try now
            if flight is None:
                break
            await asyncio.wait({flight}, timeout=max(0.0, deadline - loop.time()))
            if not flight.done() or self._variant(a2a_version) == key:
                break
        return self.view(a2a_version)

    def revalidate(self, a2a_version: str = "") -> asyncio.Task[str] | None:
        """Start fetching the card for a client's ``A2A-Version`` when it is due, without
        waiting (the start-up fetch, the background refresh). Returns the fetch in flight for
        that variant (started now or earlier), or ``None`` when none is needed: the card is
        fresh, or a failed fetch's back-off has not run out."""
        view = self.view(a2a_version)
        if view.fresh or time.monotonic() < self._retry_at:
            return None
        return self._flight(a2a_version)

    def cached(self, a2a_version: str = "") -> CachedCard | None:
        """The cached card for a client's ``A2A-Version`` variant."""
        return self._cards.get(self._variant(a2a_version))

    async def refresh(self, a2a_version: str = "") -> str:
        """Fetch or revalidate now, whatever the card's freshness or a back-off (joining the
        fetch in flight for that variant, if any). Returns the outcome label (also counted in
        ``a2a_gateway_card_fetches_total``): ``fresh``, ``not_modified``, ``changed``,
        ``unreachable`` or ``invalid``."""
        return await asyncio.shield(self._flight(a2a_version))

    def cancel(self) -> None:
        """Cancel the fetches in flight, uncounted and unlogged (at shutdown, before the
        upstream client closes under them)."""
        for flight in self._flights.values():
            flight.cancel()

    def _flight(self, a2a_version: str, *, past_backoff: bool = False) -> asyncio.Task[str]:
        """The fetch in flight for this variant, started if there is none. Its callers only
        wait for it: a caller that goes away (a client disconnecting) never cancels it.
        ``past_backoff``: a fetch started now is one a request made during a back-off (its
        failure does not advance the back-off); a fetch in flight is joined either way."""
        key = self._variant(a2a_version)
        flight = self._flights.get(key)
        if flight is None or flight.done():
            flight = self._flights[key] = asyncio.get_running_loop().create_task(
                self._fetch_and_record(a2a_version, past_backoff=past_backoff),
                name=f"card-fetch-{self.upstream.name}")
        return flight

    async def _fetch_and_record(self, a2a_version: str, *, past_backoff: bool = False) -> str:
        result = await self._fetch(a2a_version)
        name = self.upstream.name
        if isinstance(result, _FetchProblem):
            self._failed(result, step=not past_backoff)
            outcome = result.outcome
        else:
            outcome = result
            self.reachable, self._stale, self._problem = True, False, None
            self._backoff = self._retry_at = 0.0
            if outcome == "changed":
                self.log.warning("card_changed", extra={"upstream": name})
            await self._observe(a2a_version, changed=outcome == "changed")
        self.metrics.card_fetches.labels(name, outcome).inc()
        for reason in ("unreachable", "invalid"):
            self.metrics.degraded.labels(name, "card_" + reason).set(int(outcome == reason))
        return outcome

    async def _observe(self, a2a_version: str, *, changed: bool) -> None:
        """Tell the ledger the card just fetched (its variant's ETag) and take the upstream's
        card generation it answers (docs/field-cases.md F20): one ledger call per good fetch —
        once per card TTL, never per request. Every fetch is told, an unchanged one too, so a
        replica learns the changes another replica observed. When the ledger fails, the
        generation stays as it was, unless this fetch saw a change: then it is not known
        (``None``), and tasks are judged by their card ETag alone until a fetch is told."""
        key = self._variant(a2a_version)
        card = self._cards.get(key)
        if self.observe is None or card is None:
            return
        try:
            self._generation = await self.observe(key, card.etag)
        except LedgerError:  # counted and logged by the runtime's instrumented ledger
            if changed:
                self._generation = None

    def _failed(self, problem: _FetchProblem, *, step: bool = True) -> None:
        """Record a failed fetch: the next back-off step, and one warning (one per fetch, so
        one per step however many requests arrive meanwhile). ``step=False``: a fetch a request
        made during a back-off (:meth:`current`): the back-off and its end stay as they are,
        and the warning is logged only when the problem is not the one already recorded. The
        warning names the ``url`` and the ``cause``; the same warning again within
        ``log.repeat_window_seconds`` is held back (``retry_in_s`` aside, it is identical)."""
        now = time.monotonic()
        if step:
            settings = self.upstream.card
            cap = min(settings.retry_max_seconds, settings.ttl_seconds)
            self._backoff = min(cap, self._backoff * 2 or settings.retry_backoff_seconds)
            self._retry_at = now + self._backoff
        warn = step or problem != self._problem
        self._problem = problem
        self.reachable = problem.outcome != "unreachable"
        if problem.outcome == "invalid":
            self._stale = False  # the card held (if any) stays as fresh as it was
        if warn:
            self.log.warning("card_" + problem.outcome, extra={
                "upstream": self.upstream.name, "url": redact(problem.url), "cause": problem.cause,
                "reason": problem.reason, "status": problem.status, "content_type": problem.content_type,
                "retry_in_s": self._backoff if step else round(max(0.0, self._retry_at - now), 3)})

    async def _fetch(self, a2a_version: str) -> str | _FetchProblem:
        """One fetch or revalidation: the outcome label of a good one, else the problem."""
        key = self._variant(a2a_version)
        old = self._cards.get(key)
        headers = {"accept": "application/json"}
        family = version_family(a2a_version)
        if family:
            headers["a2a-version"] = family
        if old is not None and old.worker_etag:
            headers["if-none-match"] = old.worker_etag
        url = self._url(self.upstream.card.path)
        try:
            response = await self._get(url, headers)
            if response.status_code == 404 and self.upstream.card.path != WELL_KNOWN_PATHS[1]:
                url = self._url(WELL_KNOWN_PATHS[1])
                response = await self._get(url, headers)
        except UpstreamError as exc:
            # an answer over limits.max_answer_bytes came: it is no usable card
            if exc.reason == "answer_too_large":
                return _FetchProblem("invalid", str(exc), cause="answer_too_large", url=url)
            return _FetchProblem("unreachable", str(exc), cause=failure_cause(exc), url=url)
        now = time.monotonic()
        status = response.status_code
        if status == 304 and old is not None:
            cc = response.headers.get("cache-control", old.cache_control)
            self._cards[key] = _replace_time(old, now, _max_age(cc, self.upstream.card.ttl_seconds))
            return "not_modified"
        content_type = response.headers.get("content-type")
        if status != 200:
            return _FetchProblem("unreachable" if status >= 500 else "invalid",
                                _status_reason(status), status, content_type, "http_status", url)
        try:
            doc = loads(response.content, self.max_json_depth)
        except orjson.JSONDecodeError:
            return _FetchProblem("invalid", "not JSON", status, content_type, url=url)
        except NestingTooDeepError as exc:
            return _FetchProblem("invalid", str(exc), status, content_type, url=url)
        problem = card_problem(doc)
        if problem is not None:
            return _FetchProblem("invalid", f"not an Agent Card: {problem}", status, content_type, url=url)
        signature, refusal = await self._check_signatures(doc)
        if refusal is not None:
            cause, detail = refusal
            return _FetchProblem("invalid", f"signature {cause}: {detail}", status, content_type, cause, url)
        card = self._build(doc, response, now, signature)
        self._signed.clear()
        self._varies = "a2a-version" in (card.vary or "").lower()
        self._cards[self._variant(a2a_version)] = card
        self._jsonrpc_paths = frozenset().union(
            *(jsonrpc_paths(c.doc, self.upstream.url) for c in self._cards.values()))
        self._speaks = frozenset().union(*(card_versions(c.doc) for c in self._cards.values()))
        if old is None or card.etag != old.etag:
            self._report_served(card)
        if old is None:
            self._count_local_urls(doc)
            return "fresh"
        return "not_modified" if card.etag == old.etag else "changed"

    async def _get(self, url: str, headers: dict[str, str]) -> UpstreamAnswer:
        return await self.client.fetch("GET", url, headers=headers,
                                       timeout=self.upstream.timeouts, upstream=self.upstream)

    async def _check_signatures(self, doc: dict[str, Any]) -> tuple[str, tuple[str, str] | None]:
        """Check the signatures of a card just fetched (docs/protocol.md §4.5), counted in
        ``a2a_gateway_card_signature_checks_total`` and shown by
        ``a2a_gateway_card_worker_signature``: the card's signature state (``verified``,
        ``unsigned``, ``unverified`` — refused signatures accepted by ``card.trust.signatures:
        optional``, warned —, ``unchecked`` without verification, ``invalid``) and, for a card
        refused, ``(reason, detail)`` (one of :data:`gateway.proxy.signing.REASONS`)."""
        name = self.upstream.name
        if self.trust is None:
            self.metrics.set_worker_signature(name, "unchecked")
            return "unchecked", None
        verdict = await self.trust.verify(doc)
        self.metrics.card_signature_checks.labels(name, verdict.state if verdict.state == "verified"
                                                  else str(verdict.reason)).inc()
        mode = self.upstream.card.trust.signatures
        state = verdict.state
        if state == "unsigned" and mode == "required":
            state = "invalid"
        elif state == "invalid" and mode == "optional":
            self.log.warning("card_signature_unverified", extra={
                "upstream": name, "cause": verdict.reason, "reason": verdict.detail,
                "hint": "accepted as unsigned (card.trust.signatures: optional)"})
            state = "unverified"
        self.metrics.set_worker_signature(name, state)
        if state == "invalid":
            detail = verdict.detail if verdict.state == "invalid" else \
                "the card is unsigned (card.trust.signatures: required)"
            return state, (str(verdict.reason), str(detail))
        return state, None

    def _build(self, doc: dict[str, Any], response: UpstreamAnswer, now: float,
               signature: str = "unchecked") -> CachedCard:
        worker_etag = response.headers.get("etag")
        cc = response.headers.get("cache-control")
        return CachedCard(
            doc=doc, body=response.content,
            etag=worker_etag or canonical_etag(doc), worker_etag=worker_etag,
            cache_control=cc, last_modified=response.headers.get("last-modified"),
            vary=response.headers.get("vary"), fetched_at=now,
            max_age=_max_age(cc, self.upstream.card.ttl_seconds), signature=signature,
        )

    def _report_served(self, card: CachedCard) -> None:
        """Say what the served form of a newly stored ``card`` tells clients that bypasses the
        gateway: one warning per new card, and gauges over every cached variant."""
        name, settings, signing = self.upstream.name, self.upstream.card, self.signer is not None
        verbatim = _verbatim(card.doc, settings, signing)
        unguarded = unguarded_interfaces(_advertised(card.doc, settings, signing))
        if verbatim:
            self.log.warning("card_served_verbatim", extra={
                "upstream": name, "urls": advertised_urls(card.doc),
                "hint": "signed card served as the worker sent it (card.signed: verbatim): "
                        "clients following it bypass the gateway"})
        if unguarded:
            reason = ("signed_verbatim" if verbatim else "keep" if _keep_unguarded(settings)
                      else "no_guarded_interface")
            self.log.warning("card_unguarded_interfaces", extra={
                "upstream": name, "bindings": sorted(unguarded),
                "interfaces": sum(unguarded.values()), "reason": reason})
        declared = credential_headers(card.doc)
        if self.identity_header is not None and declared and self.identity_header not in declared:
            self.log.warning("caller_identity_not_in_card", extra={
                "upstream": name, "header": self.identity_header, "card_headers": sorted(declared),
                "hint": "the card's security schemes send credentials in other headers: callers "
                        "without callers.header are one caller, anonymous, and see each other's "
                        "local answers (set callers.header; docs/callers.md §2.2)"})
        totals: dict[str, int] = {}
        any_verbatim = False
        for variant in self._cards.values():
            any_verbatim = any_verbatim or _verbatim(variant.doc, settings, signing)
            for binding, count in unguarded_interfaces(_advertised(variant.doc, settings, signing)).items():
                totals[binding] = max(totals.get(binding, 0), count)
        self.metrics.card_served_verbatim.labels(name).set(int(any_verbatim))
        if self.signer is not None:  # the kids the served card is signed with (docs/protocol.md §4.5)
            signed = card.signature == "verified" or self.signer.config.sign_unsigned
            for key in self.signer.keys:
                self.metrics.card_served_signed.labels(name, key.kid).set(int(signed and key.signs))
        self.metrics.set_card_unguarded(name, totals)

    def signed_body(self, key: tuple[Any, ...], build: Callable[[], dict[str, Any]], jku: str) -> bytes:
        """The served card built by ``build``, signed by the gateway (:class:`CardSigner`), as
        bytes; kept under ``key`` (the card's ETag and what else shapes the served document)
        until the next card is stored. A card with no canonical form is served unsigned
        (warned)."""
        body = self._signed.get(key)
        if body is not None:
            return body
        assert self.signer is not None
        doc = build()
        try:
            body = orjson.dumps(self.signer.sign(doc, jku))
        except ValueError as exc:
            self.log.warning("card_not_signed", extra={"upstream": self.upstream.name, "reason": str(exc)})
            return orjson.dumps(doc)
        while len(self._signed) >= SIGNED_CACHE_ENTRIES:
            self._signed.pop(next(iter(self._signed)))
        self._signed[key] = body
        return body

    def extended(self, doc: dict[str, Any], rewrite: Callable[[dict[str, Any]], dict[str, Any]],
                 jku: str) -> dict[str, Any]:
        """An extended Agent Card answer as served with a gateway key (docs/protocol.md §4.4,
        §4.5): the worker's signatures checked with the keys held now (no fetch: it is rewritten
        inside an exchange), then ``rewrite`` (which drops them), then signed by the gateway —
        when they verified, or the card came unsigned and ``sign_unsigned``. One whose
        signatures are refused (as :meth:`_check_signatures` would refuse them) is served
        rewritten and unsigned, counted and warned (``extended_card_signature_invalid``)."""
        assert self.signer is not None
        name = self.upstream.name
        verdict = self.trust.verify_held(doc) if self.trust is not None else None
        state = verdict.state if verdict is not None else "unsigned"
        if verdict is not None:
            self.metrics.card_signature_checks.labels(
                name, state if state == "verified" else str(verdict.reason)).inc()
        mode = self.upstream.card.trust.signatures
        refused = (state == "invalid" and mode != "optional") or (state == "unsigned" and mode == "required")
        out = rewrite(doc)
        if refused:
            assert verdict is not None
            self.log.warning("extended_card_signature_invalid", extra={
                "upstream": name, "cause": verdict.reason, "reason": verdict.detail,
                "hint": "served rewritten and unsigned"})
            return out
        if state != "verified" and not self.signer.config.sign_unsigned:
            return out
        try:
            return self.signer.sign(out, jku)
        except ValueError as exc:
            self.log.warning("card_not_signed", extra={"upstream": name, "reason": str(exc)})
            return out

    def _count_local_urls(self, doc: dict[str, Any]) -> None:
        urls = [doc.get("url")] + [i.get("url") for i in doc.get("supportedInterfaces", []) or []
                                   if isinstance(i, dict)]
        if any(_local_host(u) for u in urls):
            self.metrics.card_local_urls.labels(self.upstream.name).inc()


def _status_reason(status: int) -> str:
    """A card answer's HTTP status as a :attr:`_FetchProblem.reason`."""
    if 300 <= status < 400:
        return f"HTTP {status}: a redirect (not followed)"
    return f"HTTP {status}"


def _replace_time(card: CachedCard, now: float, max_age: float) -> CachedCard:
    return CachedCard(card.doc, card.body, card.etag, card.worker_etag, card.cache_control,
                      card.last_modified, card.vary, now, max_age, card.signature)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}))"
                   r"(?::(?:[0-9]|[1-9][0-9]{1,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?")
"""A Host value that may shape a served URL: a name or an IPv4/[IPv6] address, optional port."""


def public_base(public: PublicConfig, route: Route, scope: Scope) -> str:
    """The public URL of a mount, as clients must reach it (never an upstream address).

    ``public.url`` when configured; else ``Forwarded`` / ``X-Forwarded-Proto`` /
    ``X-Forwarded-Host`` when the peer is a trusted proxy; else the request's scheme and Host.
    A host that is not a host name or address with an optional port (userinfo, a path, a
    port out of range) is replaced by the address the gateway listens on; a scheme other
    than http/https by http.
    """
    prefix = route.upstream.prefix.rstrip("/") + "/"
    configured = public.url
    if configured:
        return configured.rstrip("/") + prefix
    scheme = scope.get("scheme", "http")
    host = _header(scope, b"host") or "localhost"
    peer = (scope.get("client") or ("", 0))[0]
    if peer in public.trusted_proxies:
        forwarded = _header(scope, b"forwarded")
        if forwarded:
            first = forwarded.split(",")[0]
            for pair in first.split(";"):
                key, _, value = pair.strip().partition("=")
                if key.lower() == "proto" and value:
                    scheme = value.strip('"')
                elif key.lower() == "host" and value:
                    host = value.strip('"')
        host = (_header(scope, b"x-forwarded-host") or host).split(",")[0].strip()
        scheme = (_header(scope, b"x-forwarded-proto") or scheme).split(",")[0].strip()
    if not _HOST.fullmatch(host):  # userinfo, a path, odd ports: never into a served URL
        server = scope.get("server") or ("localhost", None)
        host = server[0] if server[1] is None else f"{server[0]}:{server[1]}"
    if scheme not in ("http", "https"):
        scheme = "http"
    return f"{scheme}://{host}{prefix}"


def served_version(scope: Scope) -> ProtocolVersion:
    """The protocol version a card GET's ``request`` line names (the served card is the same
    for every version): ``V1_0`` for an ``A2A-Version`` of major 1 or later, else ``V0_3`` (no
    header, an empty, 0.x or unreadable one: docs/protocol.md §5) — and ``V0_3`` for the
    legacy ``/.well-known/agent.json``, a path that predates v1.0, whatever the header says."""
    if scope["path"].endswith(WELL_KNOWN_PATHS[1]):
        return ProtocolVersion.V0_3
    family = version_family(_header(scope, b"a2a-version") or "")
    return ProtocolVersion.V1_0 if family == "1.0" else ProtocolVersion.V0_3


async def serve_card(cache: CardCache, public: PublicConfig, route: Route, scope: Scope,
                     receive: Receive, send: Send, *, bridge: BridgeConfig | None = None) -> None:
    """Answer a well-known Agent Card GET/HEAD for a mount from ``cache`` (counted as
    ``a2a_gateway_requests_total{binding="http", method="card"}``; the fields of its
    ``request`` line are filled in, :mod:`gateway.observability.access`); interface URLs point at :func:`public_base`. ``bridge``: the
    ``bridge`` config section (``None``: the default, enabled)."""
    started = time.perf_counter()
    status = await _serve_card(cache, public, route, scope, send, bridge or BridgeConfig())
    outcome = "ok" if status < 400 else "unavailable"
    duration = time.perf_counter() - started
    name = route.upstream.name
    cache.metrics.requests.labels(name, "http", "card", outcome).inc()
    cache.metrics.duration.labels(name, "http", "card").observe(duration)
    line = access.line_of(scope)
    line.upstream, line.binding, line.method, line.outcome = name, "http", "card", outcome
    line.version = served_version(scope).value


def _unavailable_body(cache: CardCache) -> dict[str, Any]:
    """The card GET's 502 while no card is held, saying why (``google.rpc.Status``): the last
    fetch's outcome and cause (``unreachable (connection_refused)``, ``unreachable (dns)``,
    ``invalid (http_status)``, ...) and its reason, also as ``ErrorInfo`` metadata."""
    name = cache.upstream.name
    problem = cache._problem
    if problem is None:
        message = f"agent card of upstream {name} is unavailable: not fetched yet"
        metadata = {"upstream": name, "card": "pending"}
    else:
        message = (f"agent card of upstream {name} is unavailable: {problem.outcome} "
                   f"({problem.cause}): {problem.reason}")
        metadata = {"upstream": name, "card": problem.outcome, "cause": problem.cause}
    return {"error": {"code": 502, "status": "UNAVAILABLE", "message": message, "details": [
        {"@type": ERROR_INFO_TYPE, "reason": "CARD_UNAVAILABLE", "domain": ERROR_DOMAIN, "metadata": metadata}]}}


async def _serve_card(cache: CardCache, public: PublicConfig, route: Route, scope: Scope,
                      send: Send, bridge: BridgeConfig) -> int:
    variant = _header(scope, b"a2a-version") or ""
    await cache.current(variant)
    card = cache.cached(variant)
    if card is None:
        body = orjson.dumps(_unavailable_body(cache))
        await _respond(send, scope, 502, [(b"content-type", b"application/json")], body)
        return 502
    settings = route.upstream.card
    signer = cache.signer
    if _verbatim(card.doc, settings, signer is not None):
        served = card.body  # a signed card served verbatim is never bridged: it is the signed one
    else:
        if signer is None and is_signed(card.doc):
            cache.metrics.card_signatures_stripped.labels(route.upstream.name).inc()
        base = public_base(public, route, scope)

        def build() -> dict[str, Any]:
            doc = rewrite_card(card.doc, upstream_url=route.upstream.url, public_base=base,
                               keep_unguarded=_keep_unguarded(settings))
            # rewrite first, then list both versions: the bridge copies the rewritten URLs
            # (docs/bridge.md §2.2); one card for every client, whatever its card GET carries
            return served_card(doc, bridge=bridge.enabled)

        if signer is not None and (card.signature == "verified" or signer.config.sign_unsigned):
            # the final document is signed, so a client's verifier canonicalizes exactly what
            # was signed (docs/protocol.md §4.5); kept per request shape: signing is CPU work
            served = cache.signed_body((card.etag, base, bridge.enabled, settings.unguarded_interfaces),
                                       build, signer.jku(base))
        else:
            served = orjson.dumps(build())
    etag = content_etag(served)
    headers = [(b"etag", etag.encode()),
               (b"cache-control", (card.cache_control or f"max-age={int(card.max_age)}").encode())]
    if card.last_modified:
        headers.append((b"last-modified", card.last_modified.encode("latin-1")))
    if card.vary:
        headers.append((b"vary", card.vary.encode("latin-1")))
    if etag in (_header(scope, b"if-none-match") or "").replace("W/", "").split(", "):
        await _respond(send, scope, 304, headers, b"")
        return 304
    await _respond(send, scope, 200, [*headers, (b"content-type", b"application/json")], served)
    return 200


async def _respond(send: Send, scope: Scope, status: int, headers: list[tuple[bytes, bytes]],
                   body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


async def serve_jwks(signer: CardSigner, metrics: Metrics, route: Route, scope: Scope, send: Send) -> None:
    """Answer ``GET {mount}/.well-known/a2a-gateway-jwks.json``: the public keys the gateway
    signs served Agent Cards with (``card.signing``; the retiring key too during a rotation),
    the URL its signatures' ``jku`` names (docs/protocol.md §4.5). Counted as
    ``a2a_gateway_requests_total{binding="http", method="jwks"}``; an ETag and ``304``, cached
    by clients for ``max-age=300``."""
    started = time.perf_counter()
    body = signer.jwks_body
    etag = content_etag(body)
    headers = [(b"etag", etag.encode()), (b"cache-control", b"max-age=300")]
    if etag in (_header(scope, b"if-none-match") or "").replace("W/", "").split(", "):
        await _respond(send, scope, 304, headers, b"")
    else:
        await _respond(send, scope, 200, [*headers, (b"content-type", b"application/json")], body)
    name = route.upstream.name
    metrics.requests.labels(name, "http", "jwks", "ok").inc()
    metrics.duration.labels(name, "http", "jwks").observe(time.perf_counter() - started)
    line = access.line_of(scope)
    line.upstream, line.binding, line.method, line.outcome = name, "http", "jwks", "ok"
