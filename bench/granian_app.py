"""The gateway's ASGI app for another ASGI server (``bench.run --granian``).

    A2A_BENCH_GATEWAY_CONFIG=config.json granian --interface asgi bench.granian_app:app

Builds the app as ``serve`` does (:func:`gateway.app.build_app` over
:func:`gateway.config.load_config` of the file the variable names, logging as
:func:`gateway.observability.logging.configure_logging` sets it up, the same garbage-collector
tuning as :func:`gateway.server.run`). The server must run the ASGI lifespan: the ledger is
opened in it. There is no admin listener: ``GET /readyz`` and ``GET /metrics`` go to the
admin app on the traffic port (one set lookup per request on top of the gateway's path).
"""

from __future__ import annotations

import gc
import os
from typing import Any

from gateway.app import build_app
from gateway.config import load_config
from gateway.observability.logging import configure_logging

ADMIN_PATHS = frozenset({"/readyz", "/metrics"})


def _build() -> Any:
    config = load_config(os.environ["A2A_BENCH_GATEWAY_CONFIG"])
    log = config.log
    configure_logging(log.level, log.format, log.flush_seconds, log.repeat_window_seconds,
                      max_queued=log.max_queued_lines)
    gateway = build_app(config)
    admin = gateway.admin

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in ADMIN_PATHS:
            await admin(scope, receive, send)
        else:
            await gateway(scope, receive, send)

    gc.freeze()  # as gateway.server.run does before it serves
    gc.set_threshold(10_000, *gc.get_threshold()[1:])
    return app


app = _build()
