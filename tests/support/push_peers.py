"""Peers of the push relay's tests (docs/push.md): an a2a-sdk 1.3 worker that sends push
notifications with the SDK's own sender, and a webhook receiver that records what it gets.

Public API
----------
- ``build_push_worker_app(public_url, rest_only=False)`` -> the demo worker (``demo/worker.py``'s executor,
  card and routes) with ``pushNotifications`` on, the SDK's ``InMemoryPushNotificationConfigStore``
  and ``BasePushNotificationSender`` (an httpx client that does not read proxy settings);
  ``app.state.push_store`` is the worker's config store, ``app.state.task_store`` its task
  store (a test rewrites a stored task there, as a worker's restart would). ``rest_only``:
  HTTP+JSON v1.0 alone (``/rest``, and ``/{tenant}/rest`` as a2a-sdk mounts tenants), in the
  card as on the wire.
- ``Receiver()`` -> an ASGI webhook: records every POST it answers 2xx (``.posts``, :class:`Post`,
  with its arrival time on the monotonic clock) and when each request arrived, whatever it was
  answered (``.arrivals``, monotonic seconds; ``.attempts`` their count), answers
  ``.status`` (200 by default; set 503 to make deliveries fail).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette

from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import BasePushNotificationSender, InMemoryPushNotificationConfigStore, InMemoryTaskStore

from demo.worker import DemoAgentExecutor, build_agent_card
from tests.support.asgi import request_body

__all__ = ["Post", "Receiver", "build_push_worker_app"]


def build_push_worker_app(public_url: str, *, rest_only: bool = False) -> Starlette:
    card = build_agent_card(public_url)
    card.capabilities.push_notifications = True
    if rest_only:  # a worker of HTTP+JSON v1.0 alone: its card names no other interface
        rest = [i for i in card.supported_interfaces if i.protocol_binding == "HTTP+JSON"]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(rest)
    store, tasks = InMemoryPushNotificationConfigStore(), InMemoryTaskStore()
    http = httpx.AsyncClient(trust_env=False, timeout=5.0)
    handler = DefaultRequestHandler(agent_executor=DemoAgentExecutor(), task_store=tasks,
                                    agent_card=card, push_config_store=store,
                                    push_sender=BasePushNotificationSender(http, store))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await handler.aclose()
            await http.aclose()

    routes = [*create_agent_card_routes(card),
              *([] if rest_only else create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)),
              *create_rest_routes(handler, enable_v0_3_compat=not rest_only, path_prefix="/rest")]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.push_store = store
    app.state.task_store = tasks
    return app


@dataclass
class Post:
    """One POST the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)
    """When it arrived (``time.monotonic()``)."""

    def json(self) -> Any:
        return orjson.loads(self.body)


class Receiver:
    """A webhook that records POSTs (thread-safe) and answers ``status``."""

    def __init__(self) -> None:
        self.posts: list[Post] = []
        self.attempts = 0
        self.arrivals: list[float] = []
        self.status = 200
        self._lock = threading.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await request_body(receive)
        status = self.status
        with self._lock:
            self.attempts += 1
            self.arrivals.append(time.monotonic())
            if status < 300:
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                self.posts.append(Post(scope["path"], headers, body))
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    def bodies(self) -> list[Any]:
        with self._lock:
            return [p.json() for p in self.posts]
