"""A fault-injecting hop between a client and the gateway: the first answer to each send is
lost after the worker accepted the message (docs/retries.md, tests/e2e/test_retries_sdk.py).

``DropFirstAnswer(upstream)`` is an ASGI app (serve it with
:func:`tests.support.servers.serve_in_thread`) that forwards every request to ``upstream``
(the gateway's base URL) with the client's own ``Host`` header, so the Agent Card the gateway
serves names the hop and a client that follows the card keeps talking through it. For the
first request carrying a given ``messageId`` (JSON-RPC ``params.message``, REST ``message`` /
v0.3 ``request``), the gateway's answer is read — the whole of a unary answer, the first event
of a stream — and then the client's connection is cut in the middle of it: the client sees a
broken answer, as after a dropped connection, while the gateway and the worker have done
their part. Later requests with that ``messageId`` (the client's retry) pass untouched.

``hop.cut`` lists the ``messageId`` of every answer cut, in order. With ``drop=False`` the hop
cuts nothing and only records: ``hop.sends`` lists the ``messageId`` of every send that went
through it (put one between the gateway and a worker to count what the worker received).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = ["DropFirstAnswer"]

_HOP_HEADERS = {b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"accept-encoding"}


class AnswerCut(Exception):
    """Raised inside the hop to close the client's connection mid-answer."""


def message_id(body: bytes) -> str | None:
    """The ``messageId`` of a send's body (either binding, either version), or ``None``."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    params = doc.get("params") if "jsonrpc" in doc else doc
    if not isinstance(params, dict):
        return None
    message = params.get("message", params.get("request"))
    if not isinstance(message, dict):
        return None
    value = message.get("messageId", message.get("message_id"))
    return value if isinstance(value, str) else None


class DropFirstAnswer:
    """The hop (see the module docstring)."""

    def __init__(self, upstream: str, *, drop: bool = True) -> None:
        self.upstream = upstream.rstrip("/")
        self.drop = drop
        self.seen: set[str] = set()
        self.cut: list[str] = []
        self.sends: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        mid = message_id(body) if scope["method"] == "POST" else None
        drop = self.drop and mid is not None and mid not in self.seen
        if mid is not None:
            self.seen.add(mid)
            self.sends.append(mid)
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_HEADERS]
        url = self.upstream + scope["raw_path"].decode() + (
            "?" + scope["query_string"].decode() if scope.get("query_string") else "")
        async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client, \
                client.stream(scope["method"], url, headers=headers, content=body) as answer:
            out = [(k.encode(), v.encode()) for k, v in answer.headers.items()
                   if k.encode() not in _HOP_HEADERS and k.lower() != "content-encoding"]
            streaming = answer.headers.get("content-type", "").startswith("text/event-stream")
            if not drop:
                await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
                async for chunk in answer.aiter_bytes():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
                return
            assert mid is not None
            if streaming:  # the head and the first event reach the client, then the cut
                first = b""
                async for chunk in answer.aiter_bytes():
                    first += chunk
                    if b"\n\n" in first or b"\r\n\r\n" in first:
                        break
                await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
                await send({"type": "http.response.body", "body": first, "more_body": True})
            else:  # the whole answer was read here; half of it reaches the client
                whole = await answer.aread()
                await send({"type": "http.response.start", "status": answer.status_code,
                            "headers": [*out, (b"content-length", str(len(whole)).encode())]})
                await send({"type": "http.response.body", "body": whole[: len(whole) // 2], "more_body": True})
            self.cut.append(mid)
            raise AnswerCut(mid)
