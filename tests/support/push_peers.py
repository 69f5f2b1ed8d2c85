"""Peers of the push relay's tests (docs/push.md): an a2a-sdk 1.3 worker that sends push
notifications with the SDK's own sender, and a webhook receiver that records what it gets.

Public API
----------
- ``build_push_worker_app(public_url)`` -> the demo worker with ``--push``
  (``demo.worker.build_worker_app(public_url, push=True)``): ``pushNotifications`` on, the
  SDK's ``InMemoryPushNotificationConfigStore`` and ``BasePushNotificationSender`` (an httpx
  client that does not read proxy settings); ``app.state.push_store`` is the worker's config store.
- ``Receiver()`` -> an ASGI webhook: records every POST (``.posts``, :class:`Post`), answers
  ``.status`` (200 by default; set 503 to make deliveries fail).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette

from demo.worker import build_worker_app

__all__ = ["Post", "Receiver", "build_push_worker_app"]


def build_push_worker_app(public_url: str) -> Starlette:
    """The demo worker as ``python -m demo.worker --push`` runs it (docs: README, "Push
    notifications through the gateway")."""
    return build_worker_app(public_url, push=True)


@dataclass
class Post:
    """One POST the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class Receiver:
    """A webhook that records POSTs (thread-safe) and answers ``status``."""

    def __init__(self) -> None:
        self.posts: list[Post] = []
        self.attempts = 0
        self.status = 200
        self._lock = threading.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status = self.status
        with self._lock:
            self.attempts += 1
            if status < 300:
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                self.posts.append(Post(scope["path"], headers, body))
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    def bodies(self) -> list[Any]:
        with self._lock:
            return [p.json() for p in self.posts]
