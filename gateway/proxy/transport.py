"""The upstream HTTP transport: httpx's API over aiohttp's connection pool.

httpx's own pool (httpcore on anyio) costs about 1.2 ms of CPU per proxied request on this
project's 2-core machine and grows with the number of pooled connections: it polls every idle
socket on each checkout (py-spy profile and ``--calibrate`` runs in ``bench/results``). The
proxy is written against httpx's response API (``httpx.Response``, ``httpx.Headers``, httpx's
exception classes); :class:`UpstreamClient` sends the requests through aiohttp's pool and hands
back that API. It behaves as a proxy must:

* the request goes out exactly as built: the URL is not re-quoted (``%2F`` stays ``%2F``), no
  headers of aiohttp's own (``Accept-Encoding``, ``User-Agent``) are added, redirects are
  not followed, no environment proxy is used;
* aiohttp decompresses nothing: a body the gateway reads (a unary answer, an SSE stream) is
  decoded by httpx per its ``Content-Encoding``; a relayed REST body stays as sent
  (``aiter_raw``);
* bodies stream both ways (``iter_any``: an SSE event is handed on as soon as it arrives);
* aiohttp failures become the httpx exception of the same kind — refused → ``ConnectError``,
  dropped → ``RemoteProtocolError``, read timeout → ``ReadTimeout`` — which decides the
  gateway's 502 vs 504 and the ``reason`` label; the gateway's own request-body errors (413,
  client gone) pass through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import aiohttp
import httpx
import yarl

from gateway.config import TimeoutConfig
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
    def __init__(self, response: aiohttp.ClientResponse, owner: UpstreamClient) -> None:
        self._response = response
        self._owner: UpstreamClient | None = owner

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


@dataclass(frozen=True, slots=True)
class UpstreamAnswer:
    """A worker's whole answer: HTTP status, headers (case-insensitive lookup; ``.raw`` gives
    the worker's bytes) and the body, decoded when it came with a ``Content-Encoding``."""

    status_code: int
    headers: httpx.Headers
    content: bytes


class UpstreamClient:
    """Sends one request to a worker over a pooled aiohttp session and returns the answer
    (:meth:`fetch`) or the streaming ``httpx.Response`` (:meth:`send`) — nothing more.

    Unlike ``httpx.AsyncClient`` it keeps no cookie jar (a proxy must never store a worker's
    ``Set-Cookie`` and replay it for other clients), follows no redirects and merges nothing
    into the request: what the proxy built is what goes out. No ``httpx.Request`` is built
    (parsing the URL again costs about 30 µs per request).

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

    async def send(
        self,
        method: str,
        url: str,
        *,
        headers: list[tuple[bytes, bytes]] | dict[str, str],
        timeout: TimeoutConfig,
        content: bytes | AsyncIterator[bytes] | None = None,
    ) -> httpx.Response:
        """Send a request upstream and return as soon as the response head is in; the body
        still streams (``aiter_bytes``, ``aiter_raw``, ``aread``) — close the response.

        Args:
            url: the absolute upstream URL, already percent-encoded (sent as is).
            headers: raw ``(name, value)`` byte pairs, or a ``str`` mapping.
            timeout: seconds: ``connect`` (TCP connect), ``pool`` (waiting for a pooled
                connection), ``read`` (the idle gap between response chunks).
            content: the body, whole or as an async iterator of chunks (streamed).

        Raises:
            httpx.HTTPError: the transport failed (see the module docstring for the classes).
        """
        response = await self._request(method, url, headers, timeout, content)
        return httpx.Response(
            status_code=response.status, headers=response.raw_headers, stream=_Body(response, self),
            extensions={"http_version": b"HTTP/1.1",
                        "reason_phrase": (response.reason or "").encode("latin-1", "replace")})

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        headers: list[tuple[bytes, bytes]] | dict[str, str],
        timeout: TimeoutConfig,
        content: bytes | None = None,
    ) -> UpstreamAnswer:
        """Send a request upstream and read the whole answer (the connection goes back to
        the pool). Arguments as for :meth:`send`.

        Raises:
            httpx.HTTPError: the transport failed, or a ``Content-Encoding`` body does not
                decode (``httpx.DecodingError``).
        """
        response = await self._request(method, url, headers, timeout, content)
        try:
            with _mapped():
                body = await response.read()
        finally:
            response.release()
            self.in_flight -= 1
        answer = UpstreamAnswer(response.status, httpx.Headers(response.raw_headers), body)
        if "content-encoding" in answer.headers:  # httpx decodes gzip, deflate (br, zstd)
            decoded = httpx.Response(answer.status_code, headers=answer.headers, content=body).content
            return UpstreamAnswer(answer.status_code, answer.headers, decoded)
        return answer

    async def _request(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]] | dict[str, str],
        timeout: TimeoutConfig, content: bytes | AsyncIterator[bytes] | None,
    ) -> aiohttp.ClientResponse:
        pairs = headers.items() if isinstance(headers, dict) else headers
        out = [(_header_text(k) if type(k) is bytes else k, _header_text(v) if type(v) is bytes else v)
               for k, v in pairs]
        self.in_flight += 1
        try:
            with _mapped():
                return await self._client().request(
                    method, yarl.URL(url, encoded=True), headers=out, data=content or None,
                    allow_redirects=False, compress=None, timeout=_client_timeout(timeout),
                )
        except BaseException:
            self.in_flight -= 1
            raise

    async def aclose(self) -> None:
        """Close every pooled connection."""
        if self._session is not None:
            await self._session.close()
            self._session = None


@functools.lru_cache(maxsize=64)
def _client_timeout(timeout: TimeoutConfig) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, connect=timeout.pool, sock_connect=timeout.connect,
                                 sock_read=timeout.read)
