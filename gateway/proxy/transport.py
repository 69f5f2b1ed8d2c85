"""The upstream HTTP transport: httpx's API over aiohttp's connection pool.

httpx's own pool (httpcore on anyio) costs about 1.2 ms of CPU per proxied request on this
project's 2-core machine and grows with the number of pooled connections: it polls every idle
socket on each checkout (py-spy profile and ``--calibrate`` runs in ``bench/results``). The
proxy is written against httpx's request/response API; this transport keeps that API and moves
the connections to aiohttp's pool. It behaves as a proxy must:

* the request goes out exactly as built: the URL is not re-quoted (``%2F`` stays ``%2F``), no
  headers of aiohttp's own (``Accept-Encoding``, ``User-Agent``) are added, nothing is
  decompressed, redirects are not followed, no environment proxy is used;
* bodies stream both ways (``iter_any``: an SSE event is handed on as soon as it arrives);
* aiohttp failures become the httpx exception of the same kind — refused → ``ConnectError``,
  dropped → ``RemoteProtocolError``, read timeout → ``ReadTimeout`` — which decides the
  gateway's 502 vs 504 and the ``reason`` label; the gateway's own request-body errors (413,
  client gone) pass through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx
import yarl

from gateway.proxy.forward import BodyTooLargeError, ClientGoneError

# Most specific first: the first match wins.
_MAP: tuple[tuple[type[BaseException], type[httpx.HTTPError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),
    (asyncio.TimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx.ReadError),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),
    (aiohttp.InvalidURL, httpx.UnsupportedProtocol),
    (aiohttp.ClientOSError, httpx.ReadError),
    (aiohttp.ClientConnectionError, httpx.NetworkError),
)


def _own_error(exc: BaseException) -> BaseException | None:
    """The gateway's own body-stream exception somewhere in ``exc``'s chain, if any."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, BodyTooLargeError | ClientGoneError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except (httpx.HTTPError, asyncio.CancelledError):
        raise
    except Exception as exc:
        own = _own_error(exc)
        if own is not None:
            raise own from None
        for source, target in _MAP:
            if isinstance(exc, source):
                raise target(str(exc) or type(exc).__name__) from exc
        raise


class _Body(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, owner: UpstreamTransport) -> None:
        self._response = response
        self._owner: UpstreamTransport | None = owner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped():
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        self._response.release()  # back to the pool when fully read, else the connection closes
        if self._owner is not None:
            self._owner.in_flight -= 1
            self._owner = None


def _header_text(value: bytes) -> str:
    try:
        return value.decode("utf-8")  # aiohttp writes header values as UTF-8
    except UnicodeDecodeError:
        return value.decode("latin-1")


class UpstreamTransport(httpx.AsyncBaseTransport):
    """An httpx transport backed by one aiohttp ``ClientSession`` (created on first use).

    Args:
        max_connections: the pool's bound on open connections to all upstreams.
    """

    def __init__(self, max_connections: int = 1000) -> None:
        self._max = max_connections
        self._session: aiohttp.ClientSession | None = None
        self.in_flight = 0
        """Requests sent or being sent whose response is not closed yet."""

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),  # a proxy never keeps or replays cookies
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` upstream; the response body streams (``aiter_raw``)."""
        timeout = request.extensions.get("timeout", {})
        try:
            data: bytes | httpx.AsyncByteStream | None = request.content or None
        except httpx.RequestNotRead:
            data = request.stream  # type: ignore[assignment]
        headers = [(_header_text(k), _header_text(v)) for k, v in request.headers.raw
                   if k.lower() != b"transfer-encoding"]
        self.in_flight += 1
        try:
            with _mapped():
                response = await self._client().request(
                    request.method, yarl.URL(str(request.url), encoded=True), headers=headers,
                    data=data, allow_redirects=False, compress=None,
                    timeout=aiohttp.ClientTimeout(total=None, connect=timeout.get("pool"),
                                                  sock_connect=timeout.get("connect"),
                                                  sock_read=timeout.get("read")),
                )
        except BaseException:
            self.in_flight -= 1
            raise
        return httpx.Response(
            status_code=response.status, headers=response.raw_headers, stream=_Body(response, self),
            request=request,
            extensions={"http_version": b"HTTP/1.1",
                        "reason_phrase": (response.reason or "").encode("latin-1", "replace")},
        )

    async def aclose(self) -> None:
        """Close every pooled connection."""
        if self._session is not None:
            await self._session.close()
            self._session = None


class UpstreamClient:
    """Sends one request to a worker and returns the streaming response — nothing more.

    Unlike ``httpx.AsyncClient`` it keeps no cookie jar (a proxy must never store a worker's
    ``Set-Cookie`` and replay it for other clients), follows no redirects and merges nothing
    into the request: what the proxy built is what goes out.

    Args:
        transport: the transport to send with (default :class:`UpstreamTransport`; tests may
            pass ``httpx.MockTransport``).
    """

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.transport = transport or UpstreamTransport()

    async def send(
        self,
        method: str,
        url: str,
        *,
        headers: list[tuple[bytes, bytes]] | dict[str, str],
        timeout: httpx.Timeout,
        content: bytes | AsyncIterator[bytes] | None = None,
    ) -> httpx.Response:
        """Send and return the response with its body still streaming (close it, or
        ``await response.aread()``).

        Raises:
            httpx.HTTPError: the transport failed (see the module docstring for the classes).
        """
        request = httpx.Request(method, url, headers=headers, content=content,
                                extensions={"timeout": timeout.as_dict()})
        return await self.transport.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the transport's connections."""
        await self.transport.aclose()
