"""Bounds on the client connections of one listener: how many may be open, how long a request
head may take to arrive, how long a keep-alive connection may sit idle.

uvicorn bounds none of these by itself: a connection that sends nothing, or half a request
head, stays open for ever, and an idle keep-alive connection only times out once it has
carried a response. :class:`BoundedHttpToolsProtocol` is uvicorn's httptools protocol with the
three bounds added; :func:`uvicorn_options` gives the ``uvicorn.Config`` keyword arguments
that put it in force on a listener.

* **max_connections**: an accepted connection beyond it is answered at once, without reading,
  ``HTTP/1.1 503 Service Unavailable`` (``Retry-After: 1``, ``Connection: close``, a short JSON
  body) and closed. A client that already sent its request may see a reset instead of the
  503 (its unread request is discarded with the connection); either way it may retry.
* **header_timeout**: the request head (request line and headers) must be whole within this
  many seconds of the accept, or of the first byte that arrives while no request is being
  served (a later request on a keep-alive connection); else ``HTTP/1.1 408 Request Timeout``
  (``Connection: close``) is written and the connection closed. A request body and a
  response (a stream) are not bounded by it.
* **max_header_bytes**: a request head (up to its blank line; a body in the same read does not
  count) longer than this many bytes is answered ``HTTP/1.1 431 Request Header Fields Too
  Large`` and the connection closed, before the parser sees it (httptools sets no bound of its
  own, so a client could grow one head in memory for ``header_timeout``).
* **max_request_bytes**: what one request may take on the wire in all (twice the body bound
  plus twice the head bound, so chunk framing never bites): chunked trailers, which httptools
  reads into memory and no other bound sees, end there with a 431 and the close.
* **idle_timeout**: uvicorn's keep-alive timeout: a connection whose response is complete and
  that sends nothing more is closed after this many seconds.
* **body_timeout**: a request body must be whole within this many seconds of the end of its
  head, however it is sent (a byte a second, or nothing after the head); else ``HTTP/1.1 408
  Request Timeout`` (``Connection: close``; only the close when a response has begun) and the
  close. A body that comes with its head (most requests) starts no timer.
* **max_body_bytes** (chunked bodies): each chunk size is read as it arrives, beside the
  parser; one announcing more than is left of ``limits.max_body_bytes`` (``ffffffffffffffff``)
  is answered ``HTTP/1.1 413 Content Too Large`` and the connection closed at once, instead of
  waiting for bytes that may never come. A chunk size the parser cannot read is answered
  ``HTTP/1.1 400`` by uvicorn and closed (counted here as ``malformed``). A chunked body whose
  head shares a read with an earlier request (pipelined) is left to the other bounds.

Every connection refused at a bound is counted
(``a2a_gateway_connections_refused_total{reason}``, when the listener has metrics) and logged
as a ``connections_refused`` WARNING: the first time a bound bites, then at most once per
:data:`LOG_EVERY_SECONDS` per reason, with the number of connections refused since the last
line, never one line per connection.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.observability.access import REFUSED_KEY
from gateway.observability.metrics import Metrics

LOG_EVERY_SECONDS = 60.0
"""A bound that keeps biting is logged at most this often (per reason), with a count."""


def _response(status: bytes, body: bytes, *headers: bytes) -> bytes:
    return b"".join([b"HTTP/1.1 ", status, b"\r\ncontent-type: application/json\r\n",
                     b"content-length: %d\r\n" % len(body), *(h + b"\r\n" for h in headers),
                     b"connection: close\r\n\r\n", body])


SERVICE_UNAVAILABLE = _response(b"503 Service Unavailable",
                                b'{"error":"too many open connections; retry"}', b"retry-after: 1")
REQUEST_TIMEOUT = _response(b"408 Request Timeout", b'{"error":"request head not received in time"}')
BODY_TIMEOUT = _response(b"408 Request Timeout",
                         b'{"error":"request body not received in time (listen.body_timeout_seconds)"}')
BODY_TOO_LARGE = b"413 Content Too Large"
HEADERS_TOO_LARGE = _response(b"431 Request Header Fields Too Large",
                              b'{"error":"request head too large (listen.max_header_bytes)"}')


class ConnectionBounds:
    """The bounds of one listener and its count of open connections (one event loop).

    Args:
        max_connections: open connections at most (> 0).
        header_timeout: seconds a request head may take to arrive (> 0).
        max_header_bytes: bytes a request head may take (httptools alone keeps reading one).
        max_request_bytes: bytes one request may take on the wire, head, body, chunk framing
            and trailers (which no other bound sees) together; ``None``: unbounded.
        body_timeout: seconds a request body may take after its head (``None``: unbounded).
        body_limit: the bytes a chunked body to a path may announce in its chunk sizes
            (``limits.max_body_bytes``; called only for a chunked body still coming); ``None``:
            chunk sizes are not read.
        idle_timeout: seconds a keep-alive connection may sit idle (> 0).
        log: where the ``connections_refused`` warnings go.
        metrics: the gateway's metrics, to count connections in
            ``a2a_gateway_open_connections`` and refusals in
            ``a2a_gateway_connections_refused_total``; ``None`` counts nothing (the admin
            listener: logged only).
        listener: the listener's name in log lines (``traffic``, ``admin``).
    """

    def __init__(self, *, max_connections: int, header_timeout: float, idle_timeout: float,
                 log: logging.Logger, metrics: Metrics | None = None, listener: str = "traffic",
                 max_header_bytes: int = 65536, max_request_bytes: int | None = None,
                 body_limit: Callable[[str], int] | None = None, body_timeout: float | None = None) -> None:
        self.max_connections = max_connections
        self.body_timeout = body_timeout
        self.body_limit = body_limit
        self.header_timeout = header_timeout
        self.max_header_bytes = max_header_bytes
        self.max_request_bytes = max_request_bytes
        self.idle_timeout = idle_timeout
        self.log = log
        self.listener = listener
        self.open = 0
        self._gauge = metrics.open_connections if metrics is not None else None
        self._refused = metrics.connections_refused if metrics is not None else None
        self._last_logged: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def opened(self) -> bool:
        """Count a new connection in, unless the bound is reached (then count a refusal and
        return False)."""
        if self.open >= self.max_connections:
            self.refused("max_connections")
            return False
        self.open += 1
        if self._gauge is not None:
            self._gauge.inc()
        return True

    def closed(self) -> None:
        """A connection counted in by :meth:`opened` is gone."""
        self.open -= 1
        if self._gauge is not None:
            self._gauge.dec()

    def refused(self, reason: str) -> None:
        """Count one connection refused at a bound (``max_connections``, ``header_timeout``)
        and log it, rate-limited."""
        if self._refused is not None:
            self._refused.labels(reason).inc()
        held = self._held.get(reason, 0) + 1
        now = time.monotonic()
        last = self._last_logged.get(reason)
        if last is not None and now - last < LOG_EVERY_SECONDS:
            self._held[reason] = held
            return
        self._last_logged[reason], self._held[reason] = now, 0
        bound: dict[str, Any] = ({"max_connections": self.max_connections} if reason == "max_connections"
                                 else {"max_header_bytes": self.max_header_bytes} if reason == "header_too_large"
                                 else {"bound": "limits.max_body_bytes"} if reason == "body_too_large"
                                 else {} if reason == "malformed"
                                 else {"body_timeout_s": self.body_timeout} if reason == "body_timeout"
                                 else {"header_timeout_s": self.header_timeout})
        self.log.warning("connections_refused", extra={
            "listener": self.listener, "reason": reason, "connections": held, **bound,
            "since_s": None if last is None else round(now - last, 1)})


def tls_extension(transport: asyncio.BaseTransport) -> dict[str, Any] | None:
    """The ASGI TLS extension (``scope["extensions"]["tls"]``) of a connection, read once per
    connection: ``None`` for plain HTTP; else its ``client_cert_chain`` is the client's
    certificate as PEM — the one OpenSSL verified against ``listen.tls.client_ca_file`` in the
    handshake — or empty without one (docs/callers.md §2.2); the other fields are ``None``
    (not known: the standard library gives neither the chain nor the numeric suite)."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return {"server_cert": None, "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
            "client_cert_name": None, "client_cert_error": None, "tls_version": None, "cipher_suite": None}


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under a listener's :class:`ConnectionBounds` (the class
    attribute ``bounds``; :func:`protocol_class` makes one subclass per listener)."""

    bounds: ClassVar[ConnectionBounds]
    _counted = False
    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0  # bytes of the head being received so far
    _head_tail = b""  # its last 3 bytes (a CRLFCRLF may be split across reads)
    _in_head = False  # the parser is inside a request head (from its first byte to its end)
    _request_bytes = 0  # bytes received since the current request began
    _tls: dict[str, Any] | None = None  # the ASGI TLS extension of an https connection
    _body_at: int | None = None  # in the current read: where the body of a head that ended in it begins
    _heads_in_read = 0  # request heads completed in the current read
    _chunks: ChunkSizes | None = None  # the chunk sizes of the current request's body, read alongside
    _body_timer: asyncio.TimerHandle | None = None  # the current request's body deadline

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.bounds.opened():
            transport.write(SERVICE_UNAVAILABLE)
            transport.close()
            return
        self._counted = True
        super().connection_made(transport)
        self._tls = tls_extension(transport)
        self._head_timer = self.loop.call_later(self.bounds.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._counted:  # refused at accept: uvicorn never knew it
            return
        self._counted = False
        self.bounds.closed()
        self._stop_head_timer()
        self._stop_body_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._counted:
            return
        counting = self._expecting_head()
        self._body_at, self._heads_in_read = None, 0
        if counting and self._head_too_large(data):
            self._refuse_head()
            return
        super().data_received(data)
        if (self._chunks is not None or self._body_at is not None) and self._body_unbounded(data):
            return
        if self._heads_in_read and self._body_timer is None and self.bounds.body_timeout is not None \
                and self.cycle is not None and self.cycle.more_body and not self.transport.is_closing():
            # a head ended in these bytes and its body is not whole: the body's clock starts
            self._body_timer = self.loop.call_later(self.bounds.body_timeout, self._body_timed_out, self.cycle)
        self._request_bytes += len(data)  # (after the parse: a request that began in it was reset)
        limit = self.bounds.max_request_bytes
        if limit is not None and self._request_bytes > limit and self.cycle is not None \
                and self.cycle.more_body and not self.transport.is_closing():
            self._refuse_head()  # chunked trailers, or a body past every bound: stop reading
            return
        if self._in_head and not counting:  # a head began in this read, behind a response
            self._head_bytes += len(data)  # (at most this read of it)
            if self._head_bytes > self.bounds.max_header_bytes:
                self._refuse_head()
                return
        # A head began in these bytes and is not whole yet (also one pipelined behind a
        # response), or they came while no request is in flight: the head's clock starts now.
        if self._head_timer is None and self._expecting_head() and not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.bounds.header_timeout, self._head_timed_out)

    def _expecting_head(self) -> bool:
        """The next bytes belong to a request head: one is being parsed, or no request is
        in flight (none yet, or the last answered with its body read whole; the rest of a
        body refused early is still a body)."""
        cycle = self.cycle
        return self._in_head or cycle is None or (cycle.response_complete and not cycle.more_body)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._tls is not None:  # uvicorn fills no TLS extension of its own
            self.scope["extensions"] = {**self.scope.get("extensions", {}), "tls": self._tls}  # type: ignore[typeddict-unknown-key]
        self._in_head = True
        self._request_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._heads_in_read += 1
        self._chunks = None
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._chunks = None
        self._stop_body_timer()
        super().on_message_complete()

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timed_out(self, cycle: Any) -> None:
        """The body of ``cycle``'s request is not whole after ``body_timeout``: 408 (unless a
        response has begun: then only the close) and the close, counted."""
        self._body_timer = None
        if self.transport.is_closing() or cycle is not self.cycle or not cycle.more_body:
            return
        self.bounds.refused("body_timeout")
        if not cycle.response_started:
            cycle.scope[REFUSED_KEY] = (408, "body_timeout")
            self.transport.write(BODY_TIMEOUT)
        self.transport.close()

    def _body_unbounded(self, data: bytes) -> bool:
        """After the parser took ``data``: read the chunk sizes of a chunked body still coming
        (its first bytes in ``data`` when its head ended there); one past what is left of
        ``max_body_bytes`` is refused 413 at once (True: the connection is closing). Costs
        nothing for a body that came whole with its head, or with a Content-Length."""
        cycle, limit = self.cycle, self.bounds.body_limit
        if cycle is None or not cycle.more_body or limit is None or self.transport.is_closing():
            self._chunks = None
            return False
        start = 0
        if self._chunks is None:
            if self._body_at is None or self._heads_in_read != 1 or not _chunked(self.scope):
                return False  # not chunked, or its head was pipelined behind another in this read
            self._chunks, start = ChunkSizes(limit(self.scope["path"])), self._body_at
        if self._chunks.feed(data, start):
            return False
        bound, self._chunks = self._chunks.limit, None
        self._stop_head_timer()
        self._stop_body_timer()
        self.bounds.refused("body_too_large")
        if not cycle.response_started:  # else the app answered already: only the close
            self.scope[REFUSED_KEY] = (413, "too_large")  # type: ignore[literal-required]
            self.transport.write(_response(
                BODY_TOO_LARGE, b'{"error":"request body exceeds %d bytes (limits.max_body_bytes)"}' % bound))
        self.transport.close()
        return True

    def send_400_response(self, msg: str) -> None:
        self._stop_head_timer()
        self.bounds.refused("malformed")  # the parser refused the request (a bad chunk size, …)
        super().send_400_response(msg)

    def _refuse_head(self) -> None:
        self._stop_head_timer()
        self._refuse("header_too_large", HEADERS_TOO_LARGE)

    def _refuse(self, reason: str, answer: bytes) -> None:
        """Count the refusal and close; the answer is written only where a response may start
        (never into the middle of one still being written, such as a stream a head was
        pipelined behind)."""
        self.bounds.refused(reason)
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(answer)
        self.transport.close()

    def _head_too_large(self, data: bytes) -> bool:
        """Whether the request head that ``data`` continues is past ``max_header_bytes``
        (counted up to its blank line when ``data`` holds it, so a body in the same read does
        not count), before the parser gets ``data``."""
        seen = self._head_tail + data if self._head_tail else data
        end = seen.find(b"\r\n\r\n")
        if end >= 0:
            self._body_at = end + 4 - len(self._head_tail)  # where the body begins in data
            return self._head_bytes + self._body_at > self.bounds.max_header_bytes
        self._head_bytes += len(data)
        self._head_tail = seen[-3:]
        return self._head_bytes > self.bounds.max_header_bytes

    def handle_websocket_upgrade(self) -> None:
        # The connection leaves this protocol (and uvicorn's own connection set) for the
        # WebSocket one, which closes it: the gateway serves no WebSocket route.
        self._stop_head_timer()
        self._counted = False
        self.bounds.closed()
        super().handle_websocket_upgrade()

    def _stop_head_timer(self) -> None:
        self._head_bytes, self._head_tail = 0, b""
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        self._refuse("header_timeout", REQUEST_TIMEOUT)


def _chunked(scope: Any) -> bool:
    """The request's ``Transfer-Encoding`` names ``chunked``."""
    return any(name == b"transfer-encoding" and b"chunked" in value.lower() for name, value in scope["headers"])


_HEX_DIGITS = b"0123456789abcdefABCDEF"


class ChunkSizes:
    """The chunk sizes of one chunked request body, read beside the parser (httptools does
    not tell them): :meth:`feed` steps over chunk data without looking at it, so a read costs
    one ``find`` per chunk-size line in it.

    Args:
        limit: the body's bound in bytes (``limits.max_body_bytes``).
    """

    __slots__ = ("limit", "left", "_state", "_skip", "_line")

    _SIZE, _DATA, _DONE = 0, 1, 2
    _MAX_LINE = 4096  # a size line longer than this is the parser's to refuse

    def __init__(self, limit: int) -> None:
        self.limit = self.left = limit
        self._state = self._SIZE
        self._skip = 0  # bytes of chunk data (and its CRLF) still to step over
        self._line = b""

    def feed(self, data: bytes, pos: int = 0) -> bool:
        """Read ``data[pos:]``; False when a chunk announces more than is left of the bound."""
        end = len(data)
        while pos < end and self._state != self._DONE:
            if self._state == self._DATA:
                step = min(self._skip, end - pos)
                pos += step
                self._skip -= step
                if not self._skip:
                    self._state = self._SIZE
                continue
            newline = data.find(b"\n", pos)
            if newline < 0:  # the size comes first: what follows past _MAX_LINE is an extension
                self._line = (self._line + data[pos:])[:self._MAX_LINE]
                return True
            line, self._line = (self._line + data[pos:newline])[:self._MAX_LINE], b""
            pos = newline + 1
            digits = line.split(b";", 1)[0].strip(b" \t\r")
            if not digits or digits.translate(None, _HEX_DIGITS):  # malformed: the parser answers it (400)
                self._state = self._DONE
                return True
            size = int(digits, 16)
            if size == 0:  # the last chunk; trailers are bounded with the whole request
                self._state = self._DONE
            elif size > self.left:
                return False
            else:
                self.left -= size
                self._skip, self._state = size + 2, self._DATA  # the data, then its CRLF
        return True


def protocol_class(bounds: ConnectionBounds) -> type[BoundedHttpToolsProtocol]:
    """A :class:`BoundedHttpToolsProtocol` subclass bound to ``bounds`` (uvicorn builds one
    protocol object per connection from the class it is given)."""
    return type(f"BoundedHttpToolsProtocol_{bounds.listener}", (BoundedHttpToolsProtocol,), {"bounds": bounds})


def uvicorn_options(bounds: ConnectionBounds) -> dict[str, Any]:
    """The ``uvicorn.Config`` keyword arguments that put ``bounds`` in force on a listener:
    ``http`` (the protocol class; always httptools, never h11) and ``timeout_keep_alive``."""
    return {"http": protocol_class(bounds), "timeout_keep_alive": bounds.idle_timeout}
