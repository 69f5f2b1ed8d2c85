"""Serve a gateway app (``gateway.app.build_app``) under real uvicorn as ``a2a-gateway serve``
does, in-process: the traffic app under the connection bounds (``gateway/connections.py``) and
the admin app (``/metrics``, ``/healthz``, ``/readyz``) on a uvicorn of its own, started once
the traffic app's start-up is done.

Public API
----------
- ``serve_gateway(app, *, name="gateway", config=None)`` -> context manager yielding
  ``(traffic, admin)``, two :class:`~tests.support.servers.RunningServer` on 127.0.0.1 ephemeral
  ports (``admin.url + "/metrics"``). ``config`` overrides uvicorn.Config keyword arguments of
  the traffic server.
- ``gateway_process(worker_url, ledger, *extra)`` -> context manager running ``a2a-gateway
  serve`` as a process of its own (for ``kill -9``), yielding ``(url, process, admin_url)``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from gateway.connections import uvicorn_options
from gateway.server import listener_bounds
from tests.support.servers import RunningServer, free_port, serve_in_thread, subprocess_server

__all__ = ["gateway_process", "serve_gateway"]


@contextlib.contextmanager
def gateway_process(worker_url: str, ledger: str, *extra: str) -> Iterator[tuple[str, Any, str]]:
    """A ``serve --upstream worker_url --ledger ledger`` process on ephemeral ports (``extra``:
    more arguments); yields its traffic URL, the process and its admin URL once ``/readyz``
    answers 200; stops it (SIGTERM, then SIGKILL) on exit."""
    port, admin_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", worker_url, "--port", str(port),
           "--admin-port", str(admin_port), "--ledger", ledger, *extra]
    url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    with subprocess_server(cmd, admin + "/readyz") as proc:
        yield url, proc, admin


@contextlib.contextmanager
def serve_gateway(app: Any, *, name: str = "gateway",
                  config: Mapping[str, Any] | None = None) -> Iterator[tuple[RunningServer, RunningServer]]:
    """Serve ``app`` and ``app.admin``; yield ``(traffic, admin)``; stop the admin server first."""
    runtime = app.state.runtime
    # like `a2a-gateway serve`: uvicorn's own proxy-header handling is off (the gateway's
    # public.trusted_proxies decides whom to believe) and the connection bounds are on
    traffic_config = {"proxy_headers": False, **uvicorn_options(listener_bounds(runtime)), **(config or {})}
    admin_config = {"lifespan": "off", "proxy_headers": False,
                    **uvicorn_options(listener_bounds(runtime, "admin"))}
    with serve_in_thread(app, name=name, config=traffic_config) as traffic, \
            serve_in_thread(app.admin, name=f"{name}-admin", config=admin_config) as admin:
        yield traffic, admin
