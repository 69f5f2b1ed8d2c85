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
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from gateway.connections import uvicorn_options
from gateway.server import listener_bounds
from tests.support.servers import RunningServer, serve_in_thread

__all__ = ["serve_gateway"]


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
