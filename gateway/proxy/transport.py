"""The upstream HTTP client: httpx's API over one ``httpx.AsyncBaseTransport`` that keeps
aiohttp's connection pool and maps every transport failure to :class:`UpstreamError`.

Layers, top to bottom:

* :class:`UpstreamClient` — what the proxy calls: :meth:`~UpstreamClient.fetch` (whole answer)
  and :meth:`~UpstreamClient.send` (streaming ``httpx.Response``). It builds an
  ``httpx.Request`` and hands it to the transport; nothing else. ``httpx.AsyncClient`` is not
  used: it always keeps a cookie jar (a proxy must never store a worker's ``Set-Cookie`` and
  replay it for other clients), merges default headers into built requests and costs CPU on
  every request for auth, redirect and event-hook machinery the proxy never uses.
* :class:`AiohttpTransport` — the ``httpx.AsyncBaseTransport``: one upstream's pool lives
  here (``upstreams[].pool``: one transport per upstream, so a busy worker cannot take the
  connections of another), and so do the proxy rules and the error mapping
  (:func:`upstream_error`, the only place transport failures are classified).

Why aiohttp's pool: httpx's own (httpcore on anyio) costs about 1.2 ms of CPU per proxied
request on this project's 2-core machine and grows with the number of pooled connections (it
polls every idle socket on each checkout; ``cal-httpx`` in ``bench/results``). Why not the
``httpx-aiohttp`` package (0.2.0, evaluated for this module): it hands aiohttp ``str(url)``,
so the URL is re-quoted (``%7E`` → ``~``, ``%2F`` in a query → ``/``); it passes the headers as
a mapping, so repeated headers are merged with ``,``; and its exception table turns a refused
or dropped connection into ``httpx.ConnectTimeout`` (the gateway would answer 504 "timeout"
instead of 502). Fixing those means replacing its ``handle_async_request`` — the whole
package — so this module implements the transport itself.

The transport behaves as a proxy must:

* the request goes out exactly as built: the request-target is the bytes the proxy put in the
  URL (``extensions["target"]``, as in httpcore; ``%2F`` stays ``%2F``, nothing is re-quoted),
  header bytes unchanged (aiohttp writes header values as UTF-8; a request with a header
  that is not UTF-8 goes through httpx's own transport instead, which writes bytes as given),
  no headers of aiohttp's own (``Accept``, ``Accept-Encoding``, ``User-Agent``,
  ``Content-Type``) are added, repeated headers stay separate, redirects are not followed, no
  environment proxy is used, no cookie is kept;
* aiohttp decompresses nothing: a body the gateway reads (``aread``, ``aiter_bytes``: a unary
  answer, an SSE stream) is decoded per its ``Content-Encoding`` in bounded pieces
  (:data:`INFLATE_PIECE`); a relayed REST body stays as sent (``aiter_raw``);
* bodies stream both ways (``iter_any``: an SSE event is handed on as soon as it arrives);
* every transport failure — at connect or send time, while the body streams, or an
  undecodable ``Content-Encoding`` body — is raised as an :class:`UpstreamError` made by :func:`upstream_error`: ``reason`` ``connect``,
  ``timeout`` or ``protocol``, ``http_status`` 502 (504 on a timeout), a message that names the
  failure class only. The gateway's own request-body errors (``BodyTooLargeError``,
  ``ClientGoneError``, raised by the body iterator) pass through unchanged;
* a request that found every pooled connection in use and got none within the pool's wait
  (aiohttp's connector ``limit`` and its ``connect`` timeout) is not a worker failure: it is
  raised as :func:`pool_exhausted` (``reason`` ``pool_exhausted``, HTTP 503 with
  ``retry_after``), never as a timeout. Which wait ran out is known exactly: a request that
  may have to queue (the pool's requests in flight reached its bound when it began) goes
  through a session with aiohttp's ``on_connection_queued_start`` / ``_end`` trace signals,
  one that cannot queue through the same connector without them (a trace costs ~10 µs of
  CPU per request).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import yarl

from gateway.config import DEFAULT_POOL_CONNECTIONS, PoolConfig, TimeoutConfig, UpstreamConfig, UpstreamTlsConfig
from gateway.errors import POOL_EXHAUSTED, BodyTooLargeError, ClientGoneError, ConfigError, UpstreamError
from gateway.tls import client_context


# The failure classes, most specific first (the first match wins): the exception, the
# ``reason`` label, and the class name the message gives (httpx's name for that failure).
_CLASSES: tuple[tuple[type[BaseException], str, str], ...] = (
    # the TCP connect (a request that ran out of time queued for a pooled connection is
    # pool_exhausted instead: AiohttpTransport.handle_async_request)
    (aiohttp.ConnectionTimeoutError, "timeout", "ConnectTimeout"),
    (aiohttp.ServerTimeoutError, "timeout", "ReadTimeout"),  # sock_read: idle gap in the answer
    (asyncio.TimeoutError, "timeout", "ReadTimeout"),
    (aiohttp.ClientConnectorError, "connect", "ConnectError"),  # refused, DNS, TLS handshake
    (aiohttp.ServerDisconnectedError, "protocol", "RemoteProtocolError"),
    (aiohttp.ClientPayloadError, "protocol", "ReadError"),  # body cut short, bad chunking
    (aiohttp.ClientResponseError, "protocol", "RemoteProtocolError"),  # unparsable answer
    (aiohttp.InvalidURL, "protocol", "UnsupportedProtocol"),
    (aiohttp.ClientOSError, "protocol", "ReadError"),  # reset while sending or reading
    (aiohttp.ClientConnectionError, "protocol", "NetworkError"),
    (aiohttp.ClientError, "protocol", "TransportError"),
    (OSError, "protocol", "NetworkError"),
    # httpx's own failures, such as an undecodable Content-Encoding body (DecodingError).
    (httpx.TimeoutException, "timeout", ""),
    (httpx.ConnectError, "connect", ""),
    (httpx.HTTPError, "protocol", ""),
)


def upstream_error(exc: BaseException) -> UpstreamError:
    """The :class:`UpstreamError` for a transport failure — the one place failures are mapped.

    ``reason`` is ``timeout`` (HTTP 504), ``connect`` or ``protocol`` (HTTP 502); the message
    names the failure class only (upstream bodies and stack text never leak). An
    :class:`UpstreamError` is returned as it is.

    Raises:
        TypeError: ``exc`` is not a transport failure (a bug to surface, not to map).
    """
    if isinstance(exc, UpstreamError):
        return exc
    for source, reason, name in _CLASSES:
        if isinstance(exc, source):
            name = name or type(exc).__name__
            if reason == "timeout":
                return UpstreamError(reason, f"worker timed out ({name})", http_status=504)
            if reason == "connect":
                return UpstreamError(reason, "worker unreachable: connection failed")
            return UpstreamError(reason, f"worker connection failed ({name})")
    raise TypeError(f"not a transport failure: {type(exc).__name__}")


def failure_cause(exc: UpstreamError) -> str:
    """What an :class:`UpstreamError` came of, for people (logs): ``dns`` (the worker's host
    does not resolve), ``connection_refused``, ``tls`` (the handshake or the worker's
    certificate failed), ``timeout``, ``connection_reset``, else the error's ``reason``."""
    if exc.reason == "timeout":
        return "timeout"
    seen: BaseException | None = exc.__cause__
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, aiohttp.ClientConnectorDNSError | socket.gaierror):
            return "dns"
        if isinstance(seen, aiohttp.ClientSSLError | ssl.SSLError):
            return "tls"
        if isinstance(seen, ConnectionRefusedError):
            return "connection_refused"
        if isinstance(seen, ConnectionResetError):
            return "connection_reset"
        inner = getattr(seen, "os_error", None)  # aiohttp.ClientConnectorError's own cause
        seen = inner if isinstance(inner, BaseException) and inner is not seen else (
            seen.__cause__ or seen.__context__)
    return exc.reason


RETRY_AFTER_SECONDS = 1
"""The ``Retry-After`` of a "gateway at capacity" answer (as the process's own 503 at
``listen.max_connections``): a pooled connection frees as soon as any request or stream to
the worker ends."""


def pool_exhausted(max_connections: int, wait_seconds: float) -> UpstreamError:
    """The :class:`UpstreamError` for a request that got no pooled connection: every one of
    the upstream's ``max_connections`` was in use for ``wait_seconds``. ``reason``
    ``pool_exhausted``, ``http_status`` 503, ``retry_after`` :data:`RETRY_AFTER_SECONDS`."""
    return UpstreamError(
        POOL_EXHAUSTED,
        f"gateway at capacity: all {max_connections} connections to the worker in use for "
        f"{wait_seconds:g} s (upstreams[].pool.max_connections); retry later",
        http_status=503, retry_after=RETRY_AFTER_SECONDS)


def _own_error(exc: BaseException) -> BaseException | None:
    """The gateway's own body-stream exception somewhere in ``exc``'s chain, if any (aiohttp
    wraps what the request-body iterator raised in a ``ClientConnectionError``)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, BodyTooLargeError | ClientGoneError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _failure(exc: Exception) -> BaseException:
    """What to raise for ``exc``, caught around aiohttp: the gateway's own request-body error
    as it was, a transport failure as :func:`upstream_error` maps it, anything else (a bug)
    unchanged. (A plain ``try``/``except``, not a context manager: it runs on every request.)"""
    if isinstance(exc, UpstreamError):
        return exc
    own = _own_error(exc)
    if own is not None:
        own.__suppress_context__ = True  # as ``raise own from None``
        return own
    if isinstance(exc, aiohttp.ClientError | OSError | httpx.HTTPError):  # TimeoutError: OSError
        err = upstream_error(exc)
        err.__cause__ = exc
        return err
    return exc


class _Body(httpx.AsyncByteStream):
    """A response body as aiohttp receives it: each read is handed on as it arrives."""

    def __init__(self, response: aiohttp.ClientResponse, owner: AiohttpTransport) -> None:
        self._response = response
        self._owner: AiohttpTransport | None = owner
        self.encoded = aiohttp.hdrs.CONTENT_ENCODING in response.headers
        """The body came with a ``Content-Encoding`` (httpx decodes it on decoded reads)."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except Exception as exc:
            raise _failure(exc)  # (_failure sets the cause)

    async def read(self) -> bytes:
        """The whole body as received, in one read (not decoded)."""
        try:
            return await self._response.read()
        except Exception as exc:
            raise _failure(exc)

    async def aclose(self) -> None:
        self._response.release()  # back to the pool when fully read, else the connection closes
        if self._owner is not None:
            self._owner.in_flight -= 1
            self._owner = None


INFLATE_PIECE = 64 * 1024
"""The most a decoded read of a compressed body yields at once (bytes): whatever the
compression ratio, the reader sees the body in pieces this size, so its own bound (the answer
and event caps) stops the inflation within one piece of the bound."""


class _Inflate:
    """One ``Content-Encoding`` stage, ``gzip`` or ``deflate`` (zlib-wrapped, else raw, as
    httpx reads it), undone in pieces of at most :data:`INFLATE_PIECE` bytes.

    Raises from :meth:`feed` and :meth:`end`: ``zlib.error`` for a body that does not decode.
    """

    def __init__(self, coding: str) -> None:
        self._deflate = coding == "deflate"
        self._z = zlib.decompressobj(zlib.MAX_WBITS if self._deflate else zlib.MAX_WBITS | 16)
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            try:
                out = self._z.decompress(data, INFLATE_PIECE)
            except zlib.error:
                if not (self._deflate and not self._started):
                    raise
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)  # deflate without the zlib header
                self._started = True
                continue
            self._started = True
            if out:
                yield out
            data = self._z.unconsumed_tail
            if not data and len(out) < INFLATE_PIECE:
                return  # all input taken, no output pending

    def end(self) -> Iterator[bytes]:
        rest = self._z.flush()
        for start in range(0, len(rest), INFLATE_PIECE):
            yield rest[start:start + INFLATE_PIECE]


def _through(stages: list[_Inflate], data: bytes, first: int = 0) -> Iterator[bytes]:
    """``data`` decoded by ``stages[first:]`` in turn, piece by piece."""
    if first == len(stages):
        yield data
        return
    for piece in stages[first].feed(data):
        yield from _through(stages, piece, first + 1)


class _DecodedResponse(httpx.Response):
    """The ``httpx.Response`` for a body with a ``Content-Encoding``. Its decoded reads
    (``aiter_bytes``, hence ``aread``) undo ``gzip`` / ``x-gzip`` / ``deflate`` (in the reverse
    order of the header, as httpx does; other codings are left as they are) in pieces of at most
    :data:`INFLATE_PIECE` bytes — httpx's decoders inflate a whole network read at once, which
    a gzip bomb turns into hundreds of megabytes — and raise an undecodable body as
    :class:`UpstreamError` (``protocol``)."""

    async def aiter_bytes(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        codings = [c.strip().lower() for c in self.headers.get_list("content-encoding", split_commas=True)]
        stages = [_Inflate("deflate" if c == "deflate" else "gzip")
                  for c in reversed(codings) if c in ("gzip", "x-gzip", "deflate")]
        try:
            async for raw in self.aiter_raw():
                for piece in _through(stages, raw):
                    yield piece
            for index, stage in enumerate(stages):
                for rest in stage.end():
                    for piece in _through(stages, rest, index + 1):
                        yield piece
        except zlib.error as exc:
            raise upstream_error(httpx.DecodingError(str(exc))) from exc


class _RequestBody(httpx.AsyncByteStream):
    """A request body streamed from an async iterator (the client's body, relayed)."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> AsyncIterator[bytes]:  # type: ignore[override]
        return self._chunks.__aiter__()


def _aiohttp_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]] | None:
    """Header pairs as aiohttp takes them (``str``; it writes them as UTF-8, so UTF-8 bytes
    go out unchanged), or ``None`` when a header is not UTF-8 (obs-text such as Latin-1
    ``caf\xe9``): aiohttp cannot write those bytes as they are. A list keeps repeated headers
    apart."""
    try:
        return [(k.decode(), v.decode()) for k, v in raw]
    except UnicodeDecodeError:
        return None


class _Relayed(httpx.AsyncByteStream):
    """A response body from the byte-exact transport: failures mapped as aiohttp's are."""

    def __init__(self, response: httpx.Response, owner: AiohttpTransport) -> None:
        self._response = response
        self._owner: AiohttpTransport | None = owner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except Exception as exc:
            raise _failure(exc)

    async def aclose(self) -> None:
        await self._response.aclose()
        if self._owner is not None:
            self._owner.in_flight -= 1
            self._owner = None


class _Queued:
    """Whether one request is queued for a pooled connection (aiohttp's trace signals)."""

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting = False


async def _queued_start(session: Any, ctx: Any, params: Any) -> None:
    ctx.trace_request_ctx.waiting = True


async def _queued_end(session: Any, ctx: Any, params: Any) -> None:
    ctx.trace_request_ctx.waiting = False


def _queue_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_queued_start.append(_queued_start)
    trace.on_connection_queued_end.append(_queued_end)
    trace.freeze()
    return trace


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` over a pooled aiohttp session, for a proxy (see the
    module docstring for what it does not do to a request). One per upstream.

    Request extensions read: ``timeout`` (httpx's dict: ``connect`` TCP connect, ``read`` the
    idle gap between response chunks; ``write`` is not enforced) and ``target`` (the
    request-target bytes, sent as they are instead of ``request.url``'s path and query).

    Raises from :meth:`handle_async_request` and from the response body's iteration:
    :class:`UpstreamError` only (:func:`upstream_error`, :func:`pool_exhausted`), besides what
    the request-body iterator itself raised.

    Args:
        max_connections: the pool's bound on open connections (> 0; idle pooled ones
            included).
        keepalive_expiry: seconds an idle pooled connection is kept.
        pool_wait: seconds a request waits for a free connection (and a new one's connect)
            when all are in use; then :func:`pool_exhausted`.
        tls: the :class:`ssl.SSLContext` of ``https://`` connections
            (:func:`gateway.tls.client_context`), or ``True`` for the default verification.
    """

    def __init__(self, max_connections: int = DEFAULT_POOL_CONNECTIONS, keepalive_expiry: float = 30.0,
                 *, pool_wait: float = 5.0, tls: ssl.SSLContext | bool = True) -> None:
        if max_connections <= 0:
            raise ValueError("max_connections must be > 0 (an unbounded pool is refused)")
        self.max_connections = max_connections
        self.pool_wait = pool_wait
        self.tls = tls
        """The TLS context of ``https://`` connections (``True``: the system's CAs)."""
        self._keepalive = keepalive_expiry
        self._session: aiohttp.ClientSession | None = None
        self._queueing: aiohttp.ClientSession | None = None  # the same pool, queue traced
        self._exact: httpx.AsyncHTTPTransport | None = None  # for headers aiohttp cannot write
        self.in_flight = 0
        """Requests sent or being sent whose response is not closed yet."""

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # created on first use: it binds to the running loop
            connector = aiohttp.TCPConnector(limit=self.max_connections, keepalive_timeout=self._keepalive,
                                             ssl=self.tls)
            self._session = self._new_session(connector, ())
        return self._session

    def _queueing_client(self) -> aiohttp.ClientSession:
        """The session for a request that may queue: the same connector (the same pool),
        with the queue trace."""
        if self._queueing is None:
            connector = self._client().connector
            assert connector is not None
            self._queueing = self._new_session(connector, (_queue_trace(),), owner=False)
        return self._queueing

    @staticmethod
    def _new_session(connector: aiohttp.BaseConnector, traces: tuple[aiohttp.TraceConfig, ...],
                     owner: bool = True) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=connector, connector_owner=owner, trust_env=False, auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # a proxy never keeps or replays cookies
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            trace_configs=list(traces) or None,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        ext = request.extensions
        headers = _aiohttp_headers(request.headers.raw)
        if headers is None:
            return await self._byte_exact(request)
        url = _yarl_url(request.url, ext.get("target"))
        timeout = ext.get("timeout") or {}
        stream = request.stream
        data: Any = (b"".join(stream) or None) if isinstance(stream, httpx.ByteStream) else stream
        # Fewer requests in flight than connections: this one cannot queue (every connection
        # held belongs to one of them), so it needs no trace.
        queued = _Queued() if self.in_flight >= self.max_connections else None
        self.in_flight += 1
        try:
            client_timeout = _client_timeout(timeout.get("connect"), timeout.get("read"), self.pool_wait)
            if queued is None:
                response = await self._client().request(
                    request.method, url, headers=headers, data=data, allow_redirects=False,
                    compress=None, timeout=client_timeout)
            else:
                response = await self._queueing_client().request(
                    request.method, url, headers=headers, data=data, allow_redirects=False,
                    compress=None, timeout=client_timeout, trace_request_ctx=queued)
        except BaseException as exc:
            self.in_flight -= 1
            if queued is not None and queued.waiting and isinstance(exc, aiohttp.ConnectionTimeoutError):
                raise pool_exhausted(self.max_connections, self.pool_wait) from exc
            if isinstance(exc, Exception):
                raise _failure(exc)  # (_failure sets the cause)
            raise
        body = _Body(response, self)
        return (_DecodedResponse if body.encoded else httpx.Response)(
            status_code=response.status, headers=response.raw_headers, stream=body, request=request,
            extensions={"http_version": b"HTTP/1.1",
                        "reason_phrase": (response.reason or "").encode("latin-1", "replace")})

    async def _byte_exact(self, request: httpx.Request) -> httpx.Response:
        """Send a request whose headers aiohttp cannot write as they are (not UTF-8) through
        httpx's own HTTP/1.1 transport (httpcore, h11), which writes header bytes unchanged;
        rare, so it has a small pool of its own. ``Host`` and the body framing are added here,
        as aiohttp adds them; errors are mapped as for aiohttp."""
        if self._exact is None:
            self._exact = httpx.AsyncHTTPTransport(retries=0, verify=self.tls, limits=httpx.Limits(
                max_connections=_EXACT_CONNECTIONS, max_keepalive_connections=10, keepalive_expiry=self._keepalive))
        url = request.url
        host = b"[" + url.raw_host + b"]" if b":" in url.raw_host else url.raw_host  # IPv6
        host = host if url.port is None else host + b":%d" % url.port
        stream = request.stream
        framing = ((b"content-length", b"%d" % len(b"".join(stream)))
                   if isinstance(stream, httpx.ByteStream) else (b"transfer-encoding", b"chunked"))
        extensions = {**request.extensions,
                      "timeout": {**request.extensions.get("timeout", {}), "pool": self.pool_wait}}
        exact = httpx.Request(request.method, url, headers=[(b"host", host), framing, *request.headers.raw],
                              stream=stream, extensions=extensions)
        self.in_flight += 1
        try:
            response = await self._exact.handle_async_request(exact)
        except BaseException as exc:
            self.in_flight -= 1
            if isinstance(exc, httpx.PoolTimeout):
                raise pool_exhausted(_EXACT_CONNECTIONS, self.pool_wait) from exc
            if isinstance(exc, Exception):
                raise _failure(exc)
            raise
        encoded = "content-encoding" in response.headers
        return (_DecodedResponse if encoded else httpx.Response)(
            status_code=response.status_code, headers=response.headers.raw,
            stream=_Relayed(response, self), request=request, extensions=response.extensions)

    async def aclose(self) -> None:
        """Close every pooled connection."""
        if self._queueing is not None:
            await self._queueing.close()  # not the connector's owner: closes nothing shared
            self._queueing = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._exact is not None:
            await self._exact.aclose()
            self._exact = None


_EXACT_CONNECTIONS = 100
"""The pool of the byte-exact transport (requests with a header that is not UTF-8)."""


def _yarl_url(url: httpx.URL, target: bytes | None) -> yarl.URL:
    if target is None:
        return yarl.URL(str(url), encoded=True)
    return yarl.URL(_origin(url.scheme, url.raw_host, url.port) + target.decode("latin-1"), encoded=True)


@functools.lru_cache(maxsize=256)
def _origin(scheme: str, raw_host: bytes, port: int | None) -> str:
    host = raw_host.decode("ascii")
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    return f"{scheme}://{host}" if port is None else f"{scheme}://{host}:{port}"


@functools.lru_cache(maxsize=64)
def _client_timeout(connect: float | None, read: float | None, pool: float | None) -> aiohttp.ClientTimeout:
    """aiohttp's ``connect`` is the wait for a pooled connection with a new one's connect in
    it; ``sock_connect`` the TCP connect alone."""
    return aiohttp.ClientTimeout(total=None, connect=pool, sock_connect=connect, sock_read=read)


@dataclass(frozen=True, slots=True)
class UpstreamAnswer:
    """A worker's whole answer: HTTP status, headers (case-insensitive lookup; ``.raw`` gives
    the worker's bytes) and the body, decoded when it came with a ``Content-Encoding``."""

    status_code: int
    headers: httpx.Headers
    content: bytes


MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The default bound on a worker answer read whole (``limits.max_answer_bytes``)."""


class UpstreamClient:
    """Sends one request to a worker through the :class:`AiohttpTransport` of its upstream
    (one pool per upstream, sized by ``upstreams[].pool``) and returns the answer
    (:meth:`fetch`) or the streaming ``httpx.Response`` (:meth:`send`) — nothing more.

    It follows no redirects, keeps no cookies and merges nothing into the request: what the
    proxy built is what goes out.

    Every transport failure raises :class:`UpstreamError` — from :meth:`fetch`, from
    :meth:`send`, and from the streaming response's ``aiter_bytes``, ``aiter_raw`` and
    ``aread``; the request-body iterator's own exceptions pass through unchanged.

    Args:
        pool: the pool of a request sent without an ``upstream`` (direct use, tests).
        max_answer_bytes: the bound on a whole answer read into memory (:meth:`fetch`,
            :meth:`read`), counted after ``Content-Encoding`` is undone, so a compressed body
            that inflates past it is cut off too (``limits.max_answer_bytes``).
    """

    def __init__(self, pool: PoolConfig | None = None, *, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        pool = pool or PoolConfig()
        self.transport = AiohttpTransport(pool.max_connections, pool_wait=pool.wait_seconds)
        """The pool of requests sent without an ``upstream``."""
        self.max_answer_bytes = max_answer_bytes
        self._pools: dict[str, AiohttpTransport] = {}
        self._tls_of: dict[str, UpstreamTlsConfig] = {}  # the settings each pool's context came from
        self._retired: list[AiohttpTransport] = []  # replaced by a reload, closed once idle

    def pool(self, upstream: UpstreamConfig | None) -> AiohttpTransport:
        """The transport (the pool) of ``upstream``, made on first use; ``None``: the default
        one. A reload that changes an upstream's ``pool`` or ``tls`` settings gets a new pool;
        the old one serves the requests already on it and is closed once they are over.

        Raises:
            UpstreamError: ``upstreams[].tls`` files that no longer load (``connect``).
        """
        if upstream is None:
            return self.transport
        transport = self._pools.get(upstream.name)
        cfg = upstream.pool
        if transport is None or (transport.max_connections, transport.pool_wait) != (
                cfg.max_connections, cfg.wait_seconds) or self._tls_of.get(upstream.name) != upstream.tls:
            try:
                tls = client_context(upstream.tls, upstream.name)
            except ConfigError as err:  # files broken since the start (checked then): no request
                raise UpstreamError("connect", f"worker TLS settings unusable: {err}") from None
            if transport is not None:
                self._retired.append(transport)
            transport = self._pools[upstream.name] = AiohttpTransport(
                cfg.max_connections, pool_wait=cfg.wait_seconds, tls=tls)
            self._tls_of[upstream.name] = upstream.tls
        if self._retired:
            self._close_idle()
        return transport

    def _close_idle(self) -> None:
        idle = [t for t in self._retired if t.in_flight == 0]
        if idle:
            self._retired = [t for t in self._retired if t.in_flight]
            for transport in idle:
                asyncio.ensure_future(transport.aclose())

    @property
    def in_flight(self) -> int:
        """Requests sent or being sent whose response is not closed yet (all pools)."""
        return self.transport.in_flight + sum(t.in_flight for t in (*self._pools.values(), *self._retired))

    async def send(
        self,
        method: str,
        url: str,
        *,
        headers: list[tuple[bytes, bytes]] | dict[str, str],
        timeout: TimeoutConfig,
        content: bytes | AsyncIterator[bytes] | None = None,
        upstream: UpstreamConfig | None = None,
    ) -> httpx.Response:
        """Send a request upstream and return as soon as the response head is in; the body
        still streams (``aiter_bytes``, ``aiter_raw``, ``aread``) — close the response.

        Args:
            url: the absolute upstream URL, already percent-encoded (sent as is).
            headers: raw ``(name, value)`` byte pairs, or a ``str`` mapping.
            timeout: seconds: ``connect`` (TCP connect), ``read`` (the idle gap between
                response chunks).
            content: the body, whole or as an async iterator of chunks (streamed).
            upstream: whose pool the request goes through (:meth:`pool`); ``None``: the
                default pool.

        Raises:
            UpstreamError: the transport failed (also later, from the body's iteration);
                ``pool_exhausted`` (HTTP 503) when no pooled connection came free within the
                pool's wait.
        """
        return await self.pool(upstream).handle_async_request(_request(method, url, headers, timeout, content))

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        headers: list[tuple[bytes, bytes]] | dict[str, str],
        timeout: TimeoutConfig,
        content: bytes | None = None,
        upstream: UpstreamConfig | None = None,
    ) -> UpstreamAnswer:
        """Send a request upstream and read the whole answer, decoded per its
        ``Content-Encoding`` (the connection goes back to the pool). Arguments as for
        :meth:`send`.

        Raises:
            UpstreamError: the transport failed, or the body does not decode
                (``pool_exhausted`` as for :meth:`send`).
        """
        response = await self.pool(upstream).handle_async_request(_request(method, url, headers, timeout, content))
        return UpstreamAnswer(response.status_code, response.headers, await self.read(response))

    async def read(self, response: httpx.Response) -> bytes:
        """The whole body of a response from :meth:`send`, decoded per its
        ``Content-Encoding``, and close the response.

        Raises:
            UpstreamError: the transport failed, the body does not decode, or it is longer
                than ``max_answer_bytes`` (``answer_too_large``, HTTP 502; nothing more is
                read).
        """
        limit = self.max_answer_bytes
        stream = response.stream
        try:
            plain = isinstance(stream, _Body) and not stream.encoded
            declared = response.headers.get("content-length", "")
            if plain and declared.isdigit():
                if int(declared) > limit:
                    raise _too_large(limit)
                return await stream.read()  # the common case, in one read
            chunks: list[bytes] = []
            size = 0
            async for chunk in (stream if plain else response.aiter_bytes()):  # decoded by httpx
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        """Close every pooled connection (of every pool)."""
        for transport in (self.transport, *self._pools.values(), *self._retired):
            await transport.aclose()
        self._pools, self._retired = {}, []


def _too_large(limit: int) -> UpstreamError:
    return UpstreamError("answer_too_large",
                         f"worker answer exceeds {limit} bytes (limits.max_answer_bytes)")


def _request(
    method: str, url: str, headers: list[tuple[bytes, bytes]] | dict[str, str],
    timeout: TimeoutConfig, content: bytes | AsyncIterator[bytes] | None,
) -> httpx.Request:
    """The ``httpx.Request`` as the proxy built it: ``stream=`` is given, so httpx adds no
    ``Host`` or ``Content-Length`` of its own (aiohttp writes both).

    Raises:
        UpstreamError: a URL httpx refuses (over 64 KiB, malformed): ``protocol``, HTTP 502.
    """
    try:
        parsed, target = _parse(url)
    except httpx.InvalidURL as exc:  # not an httpx.HTTPError: map it here, before sending
        raise UpstreamError("protocol", f"worker request URL refused ({exc})") from None
    if isinstance(headers, dict):  # UTF-8, as aiohttp writes str values (httpx would insist on ASCII)
        headers = [(k.encode(), v.encode()) for k, v in headers.items()]
    stream: httpx.AsyncByteStream | httpx.ByteStream
    if content is None or isinstance(content, bytes):
        stream = httpx.ByteStream(content or b"")
    else:
        stream = _RequestBody(content)
    return httpx.Request(method, parsed, headers=headers, stream=stream,
                         extensions={"timeout": _timeout_extension(timeout), "target": target})


@functools.lru_cache(maxsize=1024)
def _parse(url: str) -> tuple[httpx.URL, bytes]:
    """``url`` parsed (httpx's parse costs ~17 µs; a mount's JSON-RPC URL repeats) and its
    request-target exactly as written."""
    begin = url.find("://")
    begin = begin + 3 if begin >= 0 else 0
    ends = [i for i in (url.find("/", begin), url.find("?", begin)) if i >= 0]
    target = url[min(ends):].split("#", 1)[0] if ends else ""
    if not target.startswith("/"):
        target = "/" + target
    parsed = httpx.URL(url)
    try:
        raw = target.encode("latin-1")  # the router decoded the client's bytes as Latin-1
    except UnicodeEncodeError:  # only a configured base URL can hold other characters:
        raw = parsed.raw_path  # httpx's UTF-8 percent-encoding of them
    return parsed, raw


@functools.lru_cache(maxsize=64)
def _timeout_extension(timeout: TimeoutConfig) -> dict[str, float | None]:
    return {"connect": timeout.connect, "read": timeout.read, "write": timeout.write}
