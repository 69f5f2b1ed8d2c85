"""Calibration ASGI apps for ``python -m bench.run --calibrate``: what one uvicorn worker costs
on this machine before any gateway logic, so the gateway's figures can be read against a floor.

    uvicorn bench.calibration_apps:hello        # answers a fixed JSON body, no upstream
    uvicorn bench.calibration_apps:httpx_proxy  # POST relayed with httpx (the gateway's client
                                                # and pool limits), no checks, no logs, no metrics
    uvicorn bench.calibration_apps:raw_proxy    # POST relayed over a raw asyncio keep-alive pool

The upstream is ``http://127.0.0.1:$CALIBRATION_UPSTREAM_PORT/``. The proxies understand only
``Content-Length`` answers (the canned worker's unary answers): they are yardsticks, not proxies.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx

UPSTREAM_PORT = int(os.environ.get("CALIBRATION_UPSTREAM_PORT", "9999"))
HELLO = b'{"jsonrpc":"2.0","id":1,"result":{}}'
_client: httpx.AsyncClient | None = None
_idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await _body(receive)
    await _answer(send, 200, HELLO)


async def httpx_proxy(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global _client
    if scope["type"] != "http":
        return
    if _client is None:  # the gateway's client settings (gateway/app.py)
        _client = httpx.AsyncClient(limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
                                    trust_env=False, follow_redirects=False)
    body = await _body(receive)
    response = await _client.post(f"http://127.0.0.1:{UPSTREAM_PORT}/", content=body,
                                  headers={"content-type": "application/json", "a2a-version": "1.0"})
    await _answer(send, response.status_code, response.content)


async def raw_proxy(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = await _body(receive)
    conn = _idle.pop() if _idle else await asyncio.open_connection("127.0.0.1", UPSTREAM_PORT)
    reader, writer = conn
    writer.write(b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                 b"a2a-version: 1.0\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
    head = await reader.readuntil(b"\r\n\r\n")
    lower = head.lower()
    pos = lower.find(b"\r\ncontent-length:")
    end = lower.find(b"\r\n", pos + 2)
    data = await reader.readexactly(int(lower[pos + 17:end]))
    _idle.append(conn)
    await _answer(send, int(head[9:12]), data)
