"""What the ASGI apps the tests run (workers, webhook receivers, an OTLP receiver) share."""

from __future__ import annotations

from typing import Any


async def request_body(receive: Any) -> bytes:
    """The whole body of an ASGI HTTP request: every ``http.request`` message's ``body`` until
    one says ``more_body`` is over."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body
