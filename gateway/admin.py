"""The admin listener's ASGI app: ``GET /metrics``, ``/healthz`` and ``/readyz`` on an address
and port of their own (``admin:`` in the config), apart from the traffic port — as Envoy's and
agentgateway's admin ports are.

* ``/healthz``: 200 ``{"status": "ok"}`` while the process serves (the admin listener starts
  once start-up — the ledger open — is done; Agent Cards are fetched in the background).
* ``/readyz``: 200 ``{"status": "ready"}`` while the gateway accepts traffic, every
  upstream's Agent Card has been fetched once (:meth:`Runtime.cards_known`) and the task
  ledger can be written (``Runtime.ledger_down``: the last ledger call or probe write
  failed; with ``ledger.on_unavailable: reject`` only, since then every state change is
  refused), 503 ``{"status": "not ready"}`` before that, from SIGTERM on (the drain) and
  while the ledger cannot be written (then ``"reason"``, and on the admin listener
  ``"ledger": {"backend", "error"}``); with
  ``"upstreams": {name: {...}}``, each upstream's card status, where the runtime reports it.
  Once an upstream's card is known, its worker going away does not make the gateway unready
  (the card's own stale / back-off rules apply; the upstream's entry says so).
* ``/metrics``: Prometheus text; under ``serve --workers N`` the sum over every worker. A
  scrape never waits on the ledger: ``a2a_gateway_tracked_tasks`` is read as it stands.
* ``/tasks/{upstream}/{task_id}/timeline`` (``?tenant=`` optional): the task's record (its
  state, never anything about a caller) and its timeline as JSON (docs/observability.md §2);
  404 when the ledger has neither, 503 when it does not answer.
* ``/status``: a small HTML page for a person (docs/observability.md §3): every upstream's
  Agent Card (fresh / stale / unreachable / invalid, ETag, age, signed, advertised interfaces),
  tracked tasks by state, and this process's latest divergences linking to their timelines.

With ``admin.token_file``, every request must carry ``Authorization: Bearer <token>`` (the
file's content, stripped; compared in constant time), else 401 with ``WWW-Authenticate:
Bearer``; ``/healthz`` and ``/readyz`` stay open to probes unless ``admin.protect_probes``.
The probe handlers also serve ``listen.probes: true`` on the traffic port
(:func:`probe_routes`), where ``/readyz`` never names the upstreams.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from gateway import __version__
from gateway.a2a.card import is_signed
from gateway.a2a.card_bridge import card_endpoints
from gateway.config import AdminConfig
from gateway.errors import ConfigError, LedgerError
from gateway.ledger import redact
from gateway.observability.status_page import CONTENT_SECURITY_POLICY, iso, render_status
from gateway.proxy.runtime import Runtime
from gateway.proxy.types import ASGIApp, Receive, Scope, Send

PROBE_PATHS = frozenset({"/healthz", "/readyz"})


def read_token(admin: AdminConfig) -> str | None:
    """The admin bearer token: the content of ``admin.token_file``, stripped (``None`` without
    a token file). Read once, at start-up.

    Raises:
        ConfigError: the file cannot be read, or holds nothing but white space (one line,
            ``admin.token_file: PATH: problem``).
    """
    if admin.token_file is None:
        return None
    try:
        token = Path(admin.token_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        problem = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise ConfigError([f"admin.token_file: {admin.token_file}: {problem}"]) from None
    if not token:
        raise ConfigError([f"admin.token_file: {admin.token_file}: the file is empty"])
    return token


class BearerGuard:
    """ASGI: lets a request through to ``app`` only with ``Authorization: Bearer <token>``
    (the scheme in any letter case); else 401 with ``WWW-Authenticate: Bearer``. Paths in
    ``open_paths`` pass without a token."""

    def __init__(self, app: ASGIApp, *, token: str,
                 open_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.expected = b"bearer " + token.encode()
        self.open_paths = open_paths

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                given = value.strip()
                given = given[:7].lower() + given[7:]  # the scheme is case-insensitive (RFC 9110 §11.1)
                return hmac.compare_digest(given, self.expected)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        await JSONResponse({"error": "unauthorized: send Authorization: Bearer <admin token>"}, 401,
                           headers={"WWW-Authenticate": 'Bearer realm="a2a-gateway admin"'})(scope, receive, send)


def probe_routes(runtime: Runtime, is_ready: Callable[[], bool], *, upstreams: bool) -> list[Route]:
    """``GET``/``HEAD`` ``/healthz`` and ``/readyz``; ``is_ready``: start-up is done (the drain
    and whether every upstream's card was fetched are read from the runtime). ``upstreams``:
    ``/readyz`` adds ``runtime.card_status()`` (the admin listener; never on the traffic
    port), every upstream not admitting during a drain."""

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        down = runtime.ledger_down if runtime.config.ledger.on_unavailable == "reject" else None
        ready = is_ready() and not runtime.draining.is_set() and runtime.cards_known() and down is None
        body: dict[str, object] = {"status": "ready" if ready else "not ready"}
        if down is not None:  # every state change would be refused (503) now
            body["reason"] = "the task ledger cannot be written"
            if upstreams:  # the admin listener: what failed
                body["ledger"] = {"backend": runtime.ledger.backend, "error": down}
        if upstreams:
            status = runtime.card_status()
            if runtime.draining.is_set():  # shutting down: no upstream admits anything new
                status = {name: {**s, "admitting_new_tasks": False, "reason": "gateway draining"}
                          for name, s in status.items()}
            body["upstreams"] = status
        return JSONResponse(body, status_code=200 if ready else 503)

    return [Route("/healthz", healthz, methods=["GET", "HEAD"]),
            Route("/readyz", readyz, methods=["GET", "HEAD"])]


def build_admin(runtime: Runtime, registry: CollectorRegistry, is_ready: Callable[[], bool],
                admin: AdminConfig, token: str | None) -> Starlette | BearerGuard:
    """The admin ASGI app (no lifespan of its own: it shares the traffic app's runtime).

    Args:
        registry: the registry the gateway's metrics are on; under ``serve --workers N``
            (``PROMETHEUS_MULTIPROC_DIR`` set) ``/metrics`` reports the sum over every worker.
        is_ready: start-up is done (the traffic app's lifespan).
        token: from :func:`read_token`; ``None``: no token asked.
    """
    exposed = registry
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # serve --workers N: the sum over all workers
        exposed = CollectorRegistry()
        multiprocess.MultiProcessCollector(exposed)

    async def metrics_endpoint(request: Request) -> Response:
        return Response(generate_latest(exposed), media_type=CONTENT_TYPE_LATEST)

    site = Starlette(routes=[*probe_routes(runtime, is_ready, upstreams=True),
                             Route("/metrics", metrics_endpoint, methods=["GET"]),
                             *task_routes(runtime)])
    site.state.runtime = runtime
    if token is None:
        return site
    return BearerGuard(site, token=token, open_paths=frozenset() if admin.protect_probes else PROBE_PATHS)


def record_summary(record: Any, version: int, needs_resync: bool) -> dict[str, Any]:
    """What the timeline endpoint shows of a task's record: its state and bookkeeping, field
    by field (so nothing added to the record later — a caller's fingerprint — shows by accident)."""
    return {"state": record.state.value, "terminal": record.terminal, "context_id": record.context_id,
            "observed_at": iso(record.observed_at), "poisoned": record.poisoned,
            "card_etag": record.card_etag, "card_generation": record.card_generation,
            "pending_get": record.pending_get,
            "version": version, "needs_resync": needs_resync}


_CARD_BINDING = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON"}
"""The bindings as an Agent Card names them (``protocolBinding``)."""


def upstream_status(runtime: Runtime) -> list[dict[str, Any]]:
    """Every upstream's card as the status page shows it (no I/O; see
    :func:`~gateway.observability.status_page.render_status`)."""
    out = []
    now = time.monotonic()
    for name, cache in runtime.cards.items():
        status, view, cached = cache.status(), cache.view(), cache.cached()
        card = status["card"]
        if card == "ok":
            card = "fresh" if view.fresh else "stale"
        doc = cached.doc if cached is not None else None
        interfaces = sorted((_CARD_BINDING.get(b.value, b.value), v.value, url)
                            for (v, b), url in card_endpoints(doc).items()) if doc else []
        out.append({"name": name, "url": redact(cache.upstream.url), "card": card, "reason": status["reason"],
                    "etag": cached.etag if cached is not None else None,
                    "age_s": now - cached.fetched_at if cached is not None else None,
                    "signed": bool(doc) and is_signed(doc), "interfaces": interfaces,
                    "admitting": status["admitting_new_tasks"], "signature": cache.worker_signature(),
                    "signing_kids": [k.kid for k in runtime.signer.keys if k.signs]
                    if runtime.signer is not None else []})
    return out


def task_routes(runtime: Runtime) -> list[Route]:
    """``GET /tasks/{upstream}/{task_id}/timeline`` (JSON) and ``GET /status`` (HTML); see
    the module docstring."""

    async def timeline(request: Request) -> Response:
        upstream, task_id = request.path_params["upstream"], request.path_params["task_id"]
        tenant = request.query_params.get("tenant", "")
        ledger = runtime.ledger
        try:
            stored = await ledger.get(upstream, task_id, tenant=tenant)
            entries = await ledger.timeline(upstream, task_id, tenant=tenant)
        except LedgerError:
            return JSONResponse({"error": "the task ledger did not answer"}, 503)
        if stored is None and not entries:
            where = f" in tenant {tenant!r}" if tenant else ""
            return JSONResponse({"error": f"task {task_id}{where} of upstream {upstream} is not in the ledger"}, 404)
        record = record_summary(stored.record, stored.version, stored.needs_resync) if stored else None
        docs = [{**e.to_doc(), "at": iso(e.at)} for e in entries]
        return JSONResponse({"upstream": upstream, "tenant": tenant, "task_id": task_id, "record": record,
                             "timeline": docs})

    async def status(request: Request) -> Response:
        try:
            by_state: dict[str, int] | None = await runtime.ledger.count_by_state()
        except LedgerError:
            by_state = None
        limits = None
        if runtime.limiter is not None and runtime.limiter.active:  # docs/limits.md §5
            try:
                limits = await runtime.limiter.status()
            except Exception:  # noqa: BLE001 - the store did not answer: the section says nothing
                limits = []
        page = render_status(upstreams=upstream_status(runtime), by_state=by_state,
                             divergences=list(reversed(runtime.divergences)), mode=runtime.config.mode,
                             version=__version__, limits=limits)
        return HTMLResponse(page, headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY,
                                           "Cache-Control": "no-store"})

    return [Route("/tasks/{upstream}/{task_id:path}", _timeline_only(timeline), methods=["GET"]),
            Route("/status", status, methods=["GET"])]


def _timeline_only(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
    """``/tasks/{upstream}/{task_id}/timeline`` with a task id that may hold ``/``: the route
    takes the rest of the path and this strips the ``/timeline`` suffix (404 without it)."""

    async def endpoint(request: Request) -> Response:
        rest = request.path_params["task_id"]
        if not rest.endswith("/timeline") or rest == "/timeline":
            return JSONResponse({"error": "not found"}, 404)
        request.path_params["task_id"] = rest[: -len("/timeline")]
        return await handler(request)  # type: ignore[no-any-return]

    return endpoint
