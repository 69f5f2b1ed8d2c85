"""One gateway process at work: the traffic app and the admin app (:func:`gateway.app.build_app`,
``app.admin``) on two uvicorn servers in one event loop.

* **Sockets.** Both addresses are bound before anything starts (a port in use is one clear
  ``listen_failed`` line and exit 3, whichever it is); neither listens before start-up — the
  ledger open — is done, so connections are refused until then (Agent Cards are fetched in
  the background; ``/readyz`` is 503 until each upstream's first one is in). A worker of
  ``serve --workers N`` inherits both sockets from the supervisor instead
  (:data:`~gateway.workers.LISTEN_FD_ENV`, :data:`~gateway.workers.ADMIN_FD_ENV`). The actual
  addresses (``port: 0`` picks a free one) are logged: ``listening``, ``admin_listening``.
* **Bounds.** The traffic listener runs under ``listen.max_connections``,
  ``header_timeout_seconds`` and ``idle_timeout_seconds`` (:mod:`gateway.connections`); the
  admin listener under :data:`ADMIN_MAX_CONNECTIONS` of its own, so a flood on the traffic
  port never starves ``/healthz``. At start the soft ``RLIMIT_NOFILE`` is raised to the hard
  limit (both logged: ``open_files_limit``), with a warning when ``max_connections`` and the
  upstream pools (``upstreams[].pool.max_connections``, a descriptor per pooled connection)
  together are above 90% of it.
* **TLS.** With ``listen.tls`` the traffic listener speaks HTTPS only, from a context built
  here (:mod:`gateway.tls`) and handed to uvicorn as it is; SIGHUP re-reads its certificate
  files into that context, so new connections get the new certificate while the listener
  and the open connections stay. The admin listener stays plain HTTP.
* **Signals.** The traffic server handles SIGTERM / SIGINT: the runtime begins its drain
  (``/readyz`` turns 503, open streams are ended cleanly after
  ``listen.shutdown_grace_seconds``, docs/guide/running.md "Shutdown"), uvicorn waits for the requests in
  flight, the lifespan closes the ledger; then the admin server stops — so the admin
  ``/readyz`` answers 503 throughout the drain. A drained gateway exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import gc
import ipaddress
import logging
import math
import os
import resource
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from typing import Any

import uvicorn

from gateway.app import build_app
from gateway.config import GatewayConfig
from gateway.connections import ConnectionBounds, uvicorn_options
from gateway.errors import ConfigError
from gateway.observability.logging import get_logger
from gateway.proxy.runtime import Runtime
from gateway.push.relay import CALLBACK_PATH
from gateway.tls import client_context, reload_server_context, server_context
from gateway.workers import ADMIN_FD_ENV, LISTEN_FD_ENV, WORKER_INDEX_ENV, watch_supervisor

ADMIN_MAX_CONNECTIONS = 64
"""Open connections the admin listener accepts (probes and scrapes need few)."""
ADMIN_GRACE_SECONDS = 2
"""At shutdown, how long a scrape in flight on the admin listener may take to finish."""
_IN_ADMIN_SERVER: contextvars.ContextVar[bool] = contextvars.ContextVar("in_admin_server", default=False)
"""True in the admin server's task (:meth:`_AdminServer.serve`): its uvicorn lines are the
process's second copy."""
_PROCESS_LINES = ("Started server process [%d]", "Finished server process [%d]", "Shutting down")


class _OneServerLines(logging.Filter):
    """Drops uvicorn's ``Started server process`` / ``Finished server process`` / ``Shutting
    down`` lines when the admin server logs them: the traffic server's copies say it once for
    the process (both servers run in one process and one loop)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_IN_ADMIN_SERVER.get() and record.msg in _PROCESS_LINES)


_ONE_SERVER_LINES = _OneServerLines()
_NEAR_LIMIT = 0.9  # max_connections above this share of the descriptor limit is warned about
_UNLIMITED = 1 << 20  # the soft limit asked for when the hard limit is "unlimited" (Linux's nr_open)


def run(config: GatewayConfig, config_path: str | None = None, *,
        reload: Callable[[], GatewayConfig] | None = None) -> int:
    """Serve ``config`` until SIGTERM / SIGINT (call from the main thread: it owns the signals).

    Args:
        config_path: the file ``config`` came from (SIGHUP re-reads it), or ``None``.
        reload: how a SIGHUP reads the new config (default: the file alone); see
            :func:`gateway.app.build_app`. With ``listen.tls``, a SIGHUP also re-reads the
            certificate files (``tls_reloaded``, or ``tls_reload_refused`` keeping the old).

    Returns:
        The exit code: 0 after a clean drain, 1 when the admin listener failed, 2 when
        ``admin.token_file`` cannot be read (one line on stderr), 3 when the traffic or admin
        address cannot be bound (a ``listen_failed`` line).
    """
    log = get_logger()
    worker = os.environ.get(WORKER_INDEX_ENV)
    log.info("worker_started", extra={"worker": int(worker) if worker else None,
                                      "supervisor_pid": os.getppid() if worker else None})
    raise_open_files_limit(config.listen.max_connections, log,
                           pooled=sum(u.pool.max_connections for u in config.upstreams))
    inherited = os.environ.get(LISTEN_FD_ENV)
    if inherited:  # a worker of serve --workers N: the supervisor bound both sockets
        # The supervisor forwards SIGHUP; before the app handles it, it must not kill.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        traffic_socket = socket.socket(fileno=int(inherited))
        admin_fd = os.environ.get(ADMIN_FD_ENV)
        admin_socket = socket.socket(fileno=int(admin_fd)) if admin_fd else None
    else:
        sockets = bind_listeners(config, log)
        if sockets is None:
            return 3
        traffic_socket, admin_socket = sockets
    try:
        tls = server_context(config.listen.tls) if config.listen.tls else None
        for upstream in config.upstreams:  # unreadable upstream TLS files: exit 2 now
            client_context(upstream.tls, upstream.name)
        app = build_app(config, config_path=config_path, resync_on_open=not inherited,
                        reload_config=reload)
    except ConfigError as err:
        for line in err.problems:
            print(line, file=sys.stderr)
        return 2
    runtime: Runtime = app.state.runtime
    https: dict[str, Any] = {}
    if tls is not None:
        https["ssl_context_factory"] = lambda _config, _default: tls  # ours, built above
        runtime.reload_hooks.append(lambda _new: _reload_tls(tls, runtime))
    listen = config.listen
    admin = None
    if admin_socket is not None:
        logging.getLogger("uvicorn.error").addFilter(_ONE_SERVER_LINES)  # once: a set of filters
        admin = _AdminServer(uvicorn.Config(
            app.admin, lifespan="off", log_config=None, access_log=False, proxy_headers=False,
            timeout_graceful_shutdown=ADMIN_GRACE_SECONDS, **uvicorn_options(listener_bounds(runtime, "admin")),
        ), admin_socket, log, open_to=None if config.admin.token_file else _reach(admin_socket))
    traffic = _TrafficServer(uvicorn.Config(
        app, log_config=None, access_log=False,
        proxy_headers=False,  # public.trusted_proxies decides whom to believe, not uvicorn
        # uvicorn's own deadline comes after ours, so streams are closed by us, cleanly
        timeout_graceful_shutdown=math.ceil(listen.shutdown_grace_seconds) + 2,
        **uvicorn_options(listener_bounds(runtime)), **https,
    ), runtime, admin, log)
    # Garbage collection tuned for a request loop: what start-up built lives as long as the
    # process, so it moves out of the collector's way (gc.freeze), and collections of young
    # objects run after 10 000 net allocations instead of 700 (about 10% of the CPU per
    # proxied request in bench/run.py). Reference counting still frees almost everything.
    gc.freeze()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])
    try:
        traffic.run(sockets=[traffic_socket])
    except OSError as exc:  # listen() lost the port to another process since the bind
        log.error("listen_failed", extra={"listen": _address(traffic_socket), "error": str(exc),
                                          **in_use_hint(exc, traffic_socket.getsockname()[1], "--port")})
        return 3
    if traffic.admin_failed:
        return 1
    return 0 if traffic.started else 3


def _reload_tls(ctx: ssl.SSLContext, runtime: Runtime) -> None:
    """SIGHUP: the certificate files of ``listen.tls`` in force, read again into the live
    context (new connections get them; a changed ``listen.tls`` itself needs a restart)."""
    cfg = runtime.config.listen.tls
    assert cfg is not None
    try:
        reload_server_context(ctx, cfg)
    except ConfigError as err:
        runtime.log.error("tls_reload_refused", extra={"problems": err.problems})
        return
    runtime.log.info("tls_reloaded", extra={"cert_file": cfg.cert_file})


def listener_bounds(runtime: Runtime, listener: str = "traffic") -> ConnectionBounds:
    """The connection bounds of the ``traffic`` listener (``listen.*``, counted in the
    runtime's metrics) or of the ``admin`` one (:data:`ADMIN_MAX_CONNECTIONS` and the same
    timeouts; logged, not counted). Give them to uvicorn with
    :func:`gateway.connections.uvicorn_options`."""
    listen = runtime.config.listen
    return ConnectionBounds(
        max_connections=listen.max_connections if listener == "traffic" else ADMIN_MAX_CONNECTIONS,
        header_timeout=listen.header_timeout_seconds, idle_timeout=listen.idle_timeout_seconds,
        max_header_bytes=listen.max_header_bytes,
        max_request_bytes=2 * (runtime.config.limits.max_body_bytes + listen.max_header_bytes),
        body_limit=(lambda path: body_limit(runtime.config, path)) if listener == "traffic" else None,
        body_timeout=listen.body_timeout_seconds,
        log=runtime.log, metrics=runtime.metrics if listener == "traffic" else None, listener=listener)


def body_limit(config: GatewayConfig, path: str) -> int:
    """The most a request body to ``path`` may carry, as the app reads it: a push
    notification's ``push.max_notification_bytes``, any other ``limits.max_body_bytes`` (the
    config in force, after a reload too)."""
    if path.startswith(CALLBACK_PATH):
        return config.push.max_notification_bytes
    return config.limits.max_body_bytes


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0: a free one), not yet listening: uvicorn
    listens on it once the app has started.

    Raises:
        OSError: the address is in use, not local, or the host does not resolve.
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:  # as asyncio's create_server: IPv6 only
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def bind_listeners(config: GatewayConfig, log: logging.Logger) -> tuple[socket.socket, socket.socket | None] | None:
    """Bind the traffic address and (``admin.enabled``) the admin address; ``None`` after a
    ``listen_failed`` error line when either cannot be bound."""
    listen, admin = config.listen, config.admin
    try:
        traffic = bind(listen.host, listen.port)
    except OSError as exc:
        log.error("listen_failed", extra={"listen": f"{listen.host}:{listen.port}", "error": str(exc),
                                          **in_use_hint(exc, listen.port, "--port")})
        return None
    if not admin.enabled:
        return traffic, None
    try:
        return traffic, bind(admin.host, admin.port)
    except OSError as exc:
        traffic.close()
        log.error("listen_failed", extra={"admin": f"{admin.host}:{admin.port}", "error": str(exc),
                                          **in_use_hint(exc, admin.port, "--admin-port")})
        return None


def in_use_hint(exc: OSError, port: int, flag: str) -> dict[str, str]:
    """``{"hint": ...}`` for a ``listen_failed`` line when ``exc`` is "address in use": which
    port, how to find the process holding it, and the flag that chooses another; else ``{}``."""
    if exc.errno != errno.EADDRINUSE:
        return {}
    return {"hint": f"port {port} is in use by another process; `ss -ltnp 'sport = :{port}'` "
                    f"(or `lsof -iTCP:{port} -sTCP:LISTEN`) names it; {flag} chooses another port"}


def raise_open_files_limit(max_connections: int, log: logging.Logger, *, pooled: int = 0) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit and log both
    (``open_files_limit``); warn (``max_connections_near_open_files_limit``) when
    ``max_connections`` client connections and ``pooled`` worker connections (the upstream
    pools' bounds, summed) together are above 90% of the result: past the limit, accepts and
    connects fail (an accept unlogged), before either bound is reached. Returns the soft
    limit in force (``resource.RLIM_INFINITY`` for none)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, _UNLIMITED)
        with contextlib.suppress(ValueError, OSError):  # e.g. above the kernel's nr_open
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            limit = wanted

    def shown(value: int) -> int | str:
        return "unlimited" if value == resource.RLIM_INFINITY else value

    log.info("open_files_limit", extra={"soft_before": shown(soft), "soft": shown(limit), "hard": shown(hard)})
    if limit != resource.RLIM_INFINITY and max_connections + pooled > _NEAR_LIMIT * limit:
        log.warning("max_connections_near_open_files_limit", extra={
            "max_connections": max_connections, "pool_connections": pooled, "open_files_limit": limit,
            "hint": "lower listen.max_connections or upstreams[].pool.max_connections, or raise "
                    "the hard limit (ulimit -Hn, LimitNOFILE=, the container runtime's nofile): "
                    "each connection in a request to a worker holds a second descriptor"})
    return limit


def _reach(sock: socket.socket) -> str | None:
    """``None`` when only this host reaches ``sock`` (a loopback address), else ``network``."""
    host = sock.getsockname()[0]
    try:
        return None if ipaddress.ip_address(host.partition("%")[0]).is_loopback else "network"
    except ValueError:
        return "network"


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _AdminServer(uvicorn.Server):
    """The admin listener's server: runs inside the traffic server's loop and leaves the
    signals to it."""

    def __init__(self, config: uvicorn.Config, sock: socket.socket, log: logging.Logger,
                 open_to: str | None = None) -> None:
        super().__init__(config)
        self.socket = sock
        self.log = log
        self.open_to = open_to  # who reaches it without a token, when that is beyond this host

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        _IN_ADMIN_SERVER.set(True)  # this task's context only (asyncio copies it per task)
        await super().serve(sockets=sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.log.info("admin_listening", extra={"admin": _address(self.socket)})
            if self.open_to is not None:
                self.log.warning("admin_without_token", extra={
                    "admin": _address(self.socket), "reachable_from": self.open_to,
                    "hint": "task timelines, the status page and /metrics are open to anyone who "
                            "reaches this address: set admin.token_file, or admin.host: 127.0.0.1"})


class _TrafficServer(uvicorn.Server):
    """The traffic listener's server: begins the runtime's drain at shutdown, and runs the
    admin server from the end of its start-up to the end of its shutdown."""

    def __init__(self, config: uvicorn.Config, runtime: Runtime, admin: _AdminServer | None,
                 log: logging.Logger) -> None:
        super().__init__(config)
        self.runtime = runtime
        self.admin = admin
        self.log = log
        self.admin_failed = False
        self._admin_task: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # a worker of serve --workers N drains when its supervisor is gone; here, once uvicorn's
        # signal handlers are in place, so the SIGTERM it sends itself starts the drain
        watch_supervisor()
        await super().startup(sockets=sockets)
        if not self.started:
            return
        for sock in sockets or ():
            self.log.info("listening", extra={"listen": _address(sock), "tls": self.config.is_ssl})
        if self.admin is not None:
            self._admin_task = asyncio.ensure_future(self.admin.serve(sockets=[self.admin.socket]))
            self._admin_task.add_done_callback(self._admin_done)

    def _admin_done(self, task: asyncio.Task[None]) -> None:
        if self.should_exit:  # stopped by shutdown(), as it should
            return
        exc = None if task.cancelled() else task.exception()
        self.log.error("admin_failed", extra={"error": repr(exc)})
        self.admin_failed = True
        self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.runtime.begin_drain()
        await super().shutdown(sockets=sockets)
        if self._admin_task is not None and self.admin is not None:
            self.admin.should_exit = True
            with contextlib.suppress(Exception):  # a failure was logged by _admin_done
                await self._admin_task

    def handle_exit(self, sig: int, frame: object) -> None:
        super().handle_exit(sig, frame)  # type: ignore[arg-type]
        # uvicorn re-raises the signal after a graceful stop; a drained gateway exits 0.
        self._captured_signals.clear()
