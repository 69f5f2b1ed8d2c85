"""What both Python peer clients share (each runs in its own venv: a2a-sdk 0.3 or 1.3): an
httpx transport that records every exchange the SDK makes. Only httpx and the standard library,
so either venv can import it (the peer scripts' own folder is on ``sys.path``)."""

from __future__ import annotations

import json
from typing import Any

import httpx


class _Tee(httpx.AsyncByteStream):
    """Copies a response body into its wire record as the SDK reads it."""

    def __init__(self, inner: Any, record: dict[str, Any]) -> None:
        self._inner = inner
        self._record = record

    async def __aiter__(self):  # type: ignore[override]
        async for chunk in self._inner:
            self._record["body"] += chunk
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class WireRecorder(httpx.AsyncBaseTransport):
    """An httpx transport that records every exchange (request method, response headers and the
    body bytes the client read), so the test sees exactly what reached this SDK."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.records: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        rpc_method = None
        try:
            rpc_method = json.loads(request.content).get("method")
        except (ValueError, AttributeError, httpx.RequestNotRead):
            pass
        response = await self._inner.handle_async_request(request)
        record = {"httpMethod": request.method, "url": str(request.url), "rpcMethod": rpc_method,
                  "a2aVersion": request.headers.get("a2a-version"),
                  "status": response.status_code, "contentType": response.headers.get("content-type"),
                  "body": bytearray()}
        self.records.append(record)
        response.stream = _Tee(response.stream, record)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
