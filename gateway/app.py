"""The ASGI applications: the traffic app (the proxy for every configured mount, plus the
lifespan) and the admin app beside it (:mod:`gateway.admin`: ``/metrics``, ``/healthz``,
``/readyz`` on a listener of their own; ``GatewayApp.admin``).

On the traffic port every path is matched to an upstream mount by longest prefix — ``/metrics``
too; ``GET /healthz`` and ``/readyz`` are the gateway's own only with ``listen.probes: true``.
A POST to the mount's ``jsonrpc_path`` (or a JSON-RPC path its card advertises) is an A2A
JSON-RPC exchange, a REST (HTTP+JSON) operation path below the mount a REST exchange — both
checked by the same exchange layer; anything else is relayed transparently. A path no mount
covers gets 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.responses import JSONResponse

from gateway import __version__
from gateway.admin import PROBE_PATHS, build_admin, probe_routes, read_token
from gateway.config import JWKS_PATH, GatewayConfig, load_config
from gateway.errors import ConfigError, LedgerError
from gateway.ledger import ledger_from_url
from gateway.ledger.base import TaskLedger
from gateway.ledger.retries import retry_store
from gateway.observability import access
from gateway.observability.logging import count_drops, get_logger
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import from_config as tracing_from_config
from gateway.a2a import rest
from gateway.a2a.card import WELL_KNOWN_PATHS
from gateway.a2a.rest import RestCall
from gateway.proxy import passthrough
from gateway.proxy.card import serve_card, serve_jwks
from gateway.errors import BadPathError
from gateway.proxy.forward import BodyBudget
from gateway.proxy.forward import Route as ProxyRoute
from gateway.proxy.auth import AuthFailure, JwtVerifier
from gateway.proxy.callers import CallerKeys
from gateway.proxy.jsonrpc import JsonRpcHandler
from gateway.proxy.retries import Retries
from gateway.proxy.rest import RestHandler, refuse_rest_auth
from gateway.ledger.limits import limit_store
from gateway.proxy.limits import Limiter
from gateway.proxy.runtime import Runtime
from gateway.proxy.signing import CardSigner
from gateway.proxy.sweep import Sweeper
from gateway.proxy.tracked import refresh_tracked_forever
from gateway.proxy.transport import UpstreamClient
from gateway.proxy.types import ASGIApp, Message, Receive, Scope, Send
from gateway.push.delivery import Deliverer
from gateway.push.relay import CALLBACK_PATH, PushRelay
from gateway.proxy.push import perform_for, serve_callback


_REST_METHODS = frozenset({"GET", "POST", "DELETE"})


class ProxyApp:
    """ASGI app that routes a request to its upstream mount (docs/architecture.md, convention 7)."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def _is_jsonrpc(self, route: ProxyRoute) -> bool:
        """A POST to the mount's ``jsonrpc_path``, or to a path its served card advertises
        JSON-RPC at: a client that follows the card is guarded there too. Compared in any
        letter case and with a doubled ``/`` as one, as some workers' routers read paths."""
        path = route.path.rstrip("/")
        if path == route.upstream.jsonrpc_path.rstrip("/"):
            return True  # the hot path: as configured, exactly
        path = _single_slashes(path).lower()  # as a slash-merging, case-blind router reads it
        if path == route.upstream.jsonrpc_path.rstrip("/").lower():
            return True
        return path in self.rt.card_cache(route.upstream).jsonrpc_paths()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        line = access.begin(scope)

        async def sent(message: Message) -> None:
            if message["type"] == "http.response.start":
                line.status = message["status"]
            await send(message)

        try:
            await self._route(scope, receive, sent)
        except Exception:  # a bug: uvicorn answers 500 and logs the traceback; the line says so
            line.outcome = "internal_error"
            raise
        finally:  # every request the traffic listener answers or relays: one request line
            refused = scope.get(access.REFUSED_KEY)  # answered by the connection layer (a bound)
            if refused is not None:
                line.status, line.outcome = refused
            self.rt.log.info("request", extra=line.fields())

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            route = self.rt.router.match(scope["path"], scope.get("raw_path"))
        except BadPathError as exc:
            access.line_of(scope).outcome = "malformed"
            await JSONResponse({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                          "message": str(exc)}}, 400)(scope, receive, send)
            return
        if route is None:
            access.line_of(scope).outcome = "no_route"
            await JSONResponse({"error": "no upstream is mounted at this path"}, 404)(scope, receive, send)
            return
        if scope["method"] in ("GET", "HEAD") and route.path in WELL_KNOWN_PATHS:
            await serve_card(self.rt.card_cache(route.upstream), self.rt.config.public, route,
                             scope, receive, send, bridge=self.rt.config.bridge)
            return
        if scope["method"] in ("GET", "HEAD") and route.path == JWKS_PATH and self.rt.signer is not None:
            await serve_jwks(self.rt.signer, self.rt.metrics, route, scope, send)
            return
        method = scope["method"]
        if method == "POST" and self._is_jsonrpc(route):
            await JsonRpcHandler(self.rt, route, scope, receive, send).run()
            return
        call = _rest_call(method, route, scope)
        if call is not None:
            await RestHandler(self.rt, route, call, scope, receive, send).run()
            return
        if self.rt.auth is not None:  # nothing unauthenticated reaches the worker (docs/callers.md §5)
            try:
                await self.rt.auth.verify(scope)
            except AuthFailure as failure:
                self.rt.metrics.auth_failures.labels(route.upstream.name, "other", failure.reason).inc()
                await refuse_rest_auth(send, failure)
                return
        await passthrough.relay(self.rt, route, scope, receive, send)


def _rest_call(method: str, route: ProxyRoute, scope: Scope) -> RestCall | None:
    """The REST operation a request is, read as the worker may read it (docs/protocol.md
    §1.5): on its raw path and — because most servers route on the decoded path — on the
    percent-decoded one (``/rest/%6Dessage:send``, an encoded ``:``), the decoded reading
    winning when the two differ; a doubled ``/`` is read as one. The call keeps the query
    parameters the gateway's own calls must carry (``tenant``, ``A2A-Version``)."""
    if method not in _REST_METHODS:
        return None
    query = scope.get("query_string", b"")
    version = rest.client_version(scope["headers"], query)
    raw = route.raw_path or route.path
    call = rest.match(method, _single_slashes(raw), version)
    if route.raw_path is not None and "%" in raw:
        decoded = rest.match(method, _single_slashes(route.path), version, decoded=True)
        if decoded is not None and (call is None or decoded.operation is not call.operation):
            call = decoded
    carried = rest.carried_query(query)
    return dataclasses.replace(call, query=carried) if call is not None and carried else call


def _single_slashes(path: str) -> str:
    while "//" in path:  # a worker (or a proxy before it) may merge slashes
        path = path.replace("//", "/")
    return path


class GatewayApp:
    """The traffic ASGI app. The lifespan goes through Starlette, and so do the probe paths
    ``own_paths`` (GET and HEAD; :data:`~gateway.admin.PROBE_PATHS` with ``listen.probes:
    true``, else none) and a path that is not absolute (``OPTIONS *``: 404); every other HTTP
    request goes straight to :class:`ProxyApp`, with no router or middleware on the proxy path
    (they cost about 30 µs per request).

    ``state`` is the Starlette app's state (``state.runtime``: the shared :class:`Runtime`);
    ``admin`` is the admin ASGI app (:func:`gateway.admin.build_admin`), served on its own
    listener, with no lifespan of its own.
    """

    def __init__(self, site: Starlette, proxy: ProxyApp, admin: ASGIApp,
                 own_paths: frozenset[str] = frozenset()) -> None:
        self.site = site
        self.proxy = proxy
        self.admin = admin
        self.own_paths = own_paths
        self.state = site.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        own = path in self.own_paths and scope.get("method") in ("GET", "HEAD")
        push = self.proxy.rt.push
        if scope["type"] == "http" and path.startswith(CALLBACK_PATH) and push is not None:
            # a worker's push notification (docs/push.md §2); served with push.enabled false too,
            # for the configs relayed before a reload turned it off
            await serve_callback(self.proxy.rt, scope, receive, send)
            return
        if scope["type"] == "http" and path.startswith("/") and not own:
            await self.proxy(scope, receive, send)
            return
        await self.site(scope, receive, send)


async def _open_ledger(rt: Runtime, *, resync: bool) -> None:
    """Open the ledger; with ``resync``, flag tasks that were live while the gateway was down
    (recovery)."""
    ledger = rt.ledger
    await ledger.open()
    if rt.retries is not None:
        await rt.retries.recover()  # keys left in flight by a stopped gateway: unknown (docs/retries.md §3)
    if resync:
        flagged = await ledger.mark_resync()
        rt.log.info("ledger_opened", extra={"backend": ledger.backend, "needs_resync": flagged})


async def _prune_forever(rt: Runtime) -> None:
    """Every prune interval, delete terminal tasks older than ``ledger.retention_seconds``,
    replay-window events older than ``replay_window.retention_seconds`` and timeline entries
    older than ``ledger.retention_seconds`` (docs/observability.md §2)."""
    cfg = rt.config.ledger
    while True:
        await asyncio.sleep(cfg.prune_interval_seconds)
        now = time.time()
        try:
            deleted = await rt.ledger.prune(now - cfg.retention_seconds)
            events = await rt.ledger.prune_events(
                now - rt.config.replay_window.retention_seconds)
            await rt.ledger.prune_timeline(now - cfg.retention_seconds)
            await rt.ledger.prune_push_configs(
                now - rt.config.push.config_retention_seconds)
        except LedgerError:
            continue
        if deleted or events:
            rt.log.info("ledger_pruned", extra={"backend": rt.ledger.backend, "deleted": deleted,
                                                "events_deleted": events})


async def _probe_ledger_forever(rt: Runtime) -> None:
    """Every ``ledger.probe_interval_seconds``, one probe write (:meth:`TaskLedger.probe`):
    the instrumented ledger notes a failure in ``rt.ledger_down`` and a success clears it,
    so ``/readyz`` follows the ledger with no traffic too (a load balancer that stopped
    sending requests on a 503 sees the gateway ready again once the ledger is back). A probe
    that takes longer than the interval counts as failed."""
    while True:
        interval = rt.config.ledger.probe_interval_seconds
        await asyncio.sleep(interval)
        try:
            await asyncio.wait_for(rt.ledger.probe(), timeout=interval)
        except LedgerError:
            continue
        except TimeoutError:
            rt.ledger_down = f"probe: no answer within {interval:g} s"


async def _reload(rt: Runtime, path: str, load: Callable[[], GatewayConfig] | None = None) -> bool:
    """Re-read the config file and apply it (SIGHUP). An invalid file is refused, logged and
    counted, and the config in force stays. ``load``: how to read it (``serve`` re-applies its
    flags and environment over the file); default :func:`~gateway.config.load_config`.
    Returns True when applied."""
    try:
        new = load() if load is not None else load_config(path)
    except ConfigError as err:
        rt.metrics.config_reloads.labels("refused").inc()
        rt.log.error("config_reload_refused", extra={"path": path, "problems": err.problems})
        return False
    for hook in rt.reload_hooks:  # e.g. the listener's TLS certificate (gateway.server)
        hook(new)
    try:
        kept = rt.apply_config(new)
    except ConfigError as err:  # a trust key file of a new or changed upstream that does not load
        rt.metrics.config_reloads.labels("refused").inc()
        rt.log.error("config_reload_refused", extra={"path": path, "problems": err.problems})
        return False
    await asyncio.gather(*(rt.cards[name].refresh() for name in rt.cards if name not in kept))
    rt.metrics.config_reloads.labels("applied").inc()
    rt.log.info("config_reloaded", extra={"path": path, "upstreams": [u.name for u in new.upstreams]})
    return True


async def _refresh_cards_forever(rt: Runtime, every: float = 5.0, unknown_every: float = 0.1) -> None:
    """Fetch every due Agent Card in the background: at once (the start-up fetch, so the
    gateway listens without waiting for any worker), then every ``every`` seconds, so an idle
    gateway's card freshness and degraded gauge stay current and admission rarely waits. Only
    starts fetches (:meth:`CardCache.revalidate`): a card endpoint that never answers holds up
    no other upstream, and a failed one is retried after its back-off. While some upstream has
    no card yet (``/readyz`` is 503 until each has one) it looks every ``unknown_every``
    seconds instead, so that fetch is retried as soon as its back-off runs out, not on the next
    ``every`` tick (no more often: :meth:`CardCache.revalidate` keeps the back-off)."""
    while True:
        for cache in list(rt.cards.values()):
            cache.revalidate()
        await asyncio.sleep(every if rt.cards_known() else unknown_every)


def _card_signer(config: GatewayConfig, metrics: Metrics) -> CardSigner | None:
    """The gateway's card signatures when ``card.signing`` is configured (docs/protocol.md
    §4.5), its keys shown by ``a2a_gateway_card_signing_key_info``; raises ConfigError for a
    key that does not load."""
    if config.card.signing is None:
        return None
    from gateway.proxy.signing import CardSigner

    signer = CardSigner(config.card.signing)
    for i, key in enumerate(signer.keys):
        role = "current" if i == 0 else "previous" if key.signs else "published"
        metrics.card_signing_key.labels(key.kid, key.algorithm, role).set(1)
    return signer


def build_app(
    config: GatewayConfig,
    *,
    ledger: TaskLedger | None = None,
    registry: CollectorRegistry | None = None,
    config_path: str | None = None,
    resync_on_open: bool = True,
    reload_config: Callable[[], GatewayConfig] | None = None,
) -> GatewayApp:
    """Build the gateway application.

    Args:
        config: the validated configuration.
        ledger: the task ledger (default: the one ``ledger.url`` names). The app opens it at
            start-up (flagging live tasks for a resync) and closes it at shutdown.
        registry: where metrics are registered (default: a fresh ``CollectorRegistry``).
        config_path: the file ``config`` came from; when given, SIGHUP re-reads it and
            replaces upstreams and policies without dropping open streams (changes of
            ``listen``, ``admin``, ``ledger``, ``replay_window``, ``timeline``, ``tracing``,
            ``callers`` and ``auth`` need a restart).
        resync_on_open: flag the ledger's live tasks for a resync at start-up (``False`` in
            the workers of ``serve --workers N``: the supervisor did it once for all).
        reload_config: how SIGHUP reads the new config (default: ``load_config(config_path)``).
            Without ``config_path`` a SIGHUP is logged (``config_reload_skipped``) and changes
            nothing.

    Returns:
        The traffic ASGI app (:class:`GatewayApp`); ``app.state.runtime`` is the shared
        :class:`Runtime`, ``app.admin`` the admin ASGI app.

    Raises:
        ConfigError: ``admin.token_file`` cannot be read or is empty; a caller secret
            (``A2A_GATEWAY_CALLER_SECRET``, ``callers.secret_file``) or ``auth.jwt.jwks_file``
            is unusable (docs/callers.md §4, §5); a card-signing key (``card.signing``) or a
            trusted key of ``upstreams[].card.trust`` does not load (docs/protocol.md §4.5).
    """
    token = read_token(config.admin) if config.admin.enabled else None
    registry = registry or CollectorRegistry()
    metrics = Metrics(registry)
    count_drops(metrics.log_dropped)
    ledger = ledger or ledger_from_url(config.ledger.url, max_tasks=config.ledger.max_tasks,
                                     window=config.replay_window.limits(),
                                     timeline=config.timeline.limits(config.ledger.retention_seconds),
                                     redis=config.ledger.redis_options())
    http = UpstreamClient(max_answer_bytes=config.limits.max_answer_bytes)
    log = get_logger()
    runtime = Runtime(config=config, ledger=ledger, client=http, metrics=metrics, log=log,
                      tracing=tracing_from_config(config.tracing, __version__, log),
                      callers=CallerKeys.from_config(config.callers, log, ledger_url=config.ledger.url),
                      auth=JwtVerifier(config.auth.jwt, log) if config.auth.jwt is not None else None,
                      signer=_card_signer(config, metrics))
    runtime.apply_config(config)
    runtime.bodies = BodyBudget(lambda: runtime.config.limits.max_inflight_body_bytes)
    runtime.push = PushRelay(lambda: runtime.config.push, perform_for(runtime))
    runtime.limiter = Limiter(runtime, limit_store(ledger))  # fair shares (docs/limits.md)
    runtime.retries = Retries(runtime, retry_store(ledger, config.retries.limits()))
    deliverer = Deliverer(runtime, runtime.push)
    ready = {"value": False}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await _open_ledger(runtime, resync=resync_on_open)
        pruner = asyncio.ensure_future(_prune_forever(runtime))
        refresher = asyncio.ensure_future(_refresh_cards_forever(runtime))  # fetches the cards
        counter = asyncio.ensure_future(refresh_tracked_forever(runtime, config.admin.tracked_refresh_seconds))
        sweeper = asyncio.ensure_future(Sweeper(runtime).run())  # idle while sweep.enabled is false
        prober = asyncio.ensure_future(_probe_ledger_forever(runtime))  # /readyz follows the ledger
        delivering = asyncio.ensure_future(deliverer.run_forever())  # the push outbox (docs/push.md §3)
        loop = asyncio.get_running_loop()
        # signals reach the main thread only (an app served in a thread, as tests do, has none)
        on_hup = threading.current_thread() is threading.main_thread()
        if on_hup and config_path is not None:
            loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(
                _reload(runtime, config_path, reload_config)))
        elif on_hup:
            loop.add_signal_handler(signal.SIGHUP, lambda: runtime.log.warning(
                "config_reload_skipped", extra={"reason": "no config file to re-read: started "
                                                "without --config (the sidecar form); restart "
                                                "to change settings"}))
        ready["value"] = True
        try:
            yield
        finally:
            if on_hup:
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            ready["value"] = False
            for task in (sweeper, prober, pruner, refresher, counter, delivering):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for card in runtime.cards.values():
                card.cancel()  # a fetch still in flight does not fail on the closing client
            await http.aclose()
            if runtime.auth is not None:
                await runtime.auth.aclose()
            await deliverer.aclose()
            await ledger.close()
            if runtime.tracing is not None:
                await asyncio.to_thread(runtime.tracing.shutdown)  # exports what is queued

    def is_ready() -> bool:
        return ready["value"]

    probes = config.listen.probes
    site = Starlette(routes=probe_routes(runtime, is_ready, upstreams=False) if probes else [],
                     lifespan=lifespan)
    site.state.runtime = runtime
    admin = build_admin(runtime, registry, is_ready, config.admin, token)
    return GatewayApp(site, ProxyApp(runtime), admin, PROBE_PATHS if probes else frozenset())
