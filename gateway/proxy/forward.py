"""Upstream request plumbing: routing by prefix, header filtering, body limits, disconnects.

Header rules (RFC 9110 §7.6.1; docs/protocol.md §5, §11 pitfalls 2 and 13): hop-by-hop headers
(and any named in ``Connection``) are removed in both directions; ``Host`` is set for the
upstream; ``A2A-Version``, ``A2A-Extensions``, ``X-A2A-Extensions``, ``Authorization`` and every
other end-to-end header pass untouched; the gateway never adds ``A2A-Version``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from gateway.config import UpstreamConfig
from gateway.errors import BadPathError, BodyBudgetError, BodyTooLargeError, ClientGoneError
from gateway.proxy.types import Receive, Scope

T = TypeVar("T")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_NEVER_FORWARD = HOP_BY_HOP | {"host", "content-length"}


@dataclass(frozen=True, slots=True)
class Route:
    """A matched request: the upstream and the path below its prefix (starts with ``/``)."""

    upstream: UpstreamConfig
    path: str
    raw_path: str | None = None

    def url(self, query: bytes) -> str:
        """The upstream URL for this request (upstream base URL + rest of path + query).

        The rest of the path is taken from the client's raw (still percent-encoded) path when
        available, so ``%2F`` in a task id is not turned into a path separator. It always
        starts with ``/`` (:meth:`Router.match` refuses anything else), so it can only extend
        the configured base URL's path: the scheme, host and port are the upstream's.
        """
        text = self.upstream.url.rstrip("/") + (self.raw_path or self.path)
        return text + "?" + query.decode("latin-1") if query else text


class Router:
    """Longest-prefix match of request paths to upstream mounts."""

    def __init__(self, upstreams: Iterable[UpstreamConfig]) -> None:
        self._mounts = sorted(upstreams, key=lambda u: len(u.prefix), reverse=True)

    def match(self, path: str, raw_path: bytes | None = None) -> Route | None:
        """The :class:`Route` for ``path`` (decoded; ``raw_path`` as sent), or ``None``.

        Raises:
            BadPathError: a ``.`` or ``..`` segment (which would escape the mount or dodge the
                JSON-RPC path after normalization), or a raw path whose rest below the prefix
                does not start with ``/`` (``/agent%2F@evil``).
        """
        if any(seg in (".", "..") for seg in path.split("/")):
            raise BadPathError("dot segments are not allowed in request paths")
        raw = raw_path.decode("latin-1") if raw_path else None
        if raw is not None and not raw.startswith("/"):
            raise BadPathError("request path must start with '/'")
        if any(c in (raw or path) for c in "\r\n\x00#?"):
            raise BadPathError("control or reserved characters in the request path")
        for up in self._mounts:
            if up.prefix == "/":
                return Route(up, path or "/", raw or None)
            if path == up.prefix or path.startswith(up.prefix + "/"):
                rest_raw = raw[len(up.prefix) :] if raw and raw.startswith(up.prefix) else None
                if rest_raw and not rest_raw.startswith("/"):
                    raise BadPathError("request path does not continue below the mount")
                return Route(up, path[len(up.prefix) :] or "/", rest_raw or None)
        return None


def _connection_tokens(headers: list[tuple[bytes, bytes]]) -> set[str]:
    tokens: set[str] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens |= {t.strip().lower() for t in value.decode("latin-1").split(",")}
    return tokens


_FORWARDING = frozenset({"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "forwarded"})


def upstream_request_headers(
    scope: Scope, *, identity: bool, trusted_proxies: Iterable[str] = ()
) -> list[tuple[bytes, bytes]]:
    """Headers to send upstream for a client request, as raw bytes (never re-encoded).

    Args:
        scope: the ASGI HTTP scope of the client request.
        identity: ask the worker for an uncompressed body (the gateway must read it).
        trusted_proxies: peers whose ``X-Forwarded-*`` / ``Forwarded`` headers are kept; from
            anyone else they are replaced, so a client cannot spoof them.

    Returns ``(name, value)`` pairs; ``X-Forwarded-For`` gets the peer appended, and
    ``X-Forwarded-Host`` / ``-Proto`` are set when not kept from a trusted proxy.
    """
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    drop = _NEVER_FORWARD | _connection_tokens(raw)
    peer = (scope.get("client") or ("", 0))[0]
    trusted = peer in set(trusted_proxies)
    out: list[tuple[bytes, bytes]] = []
    forwarded_for = b""
    host = b""
    for name_b, value_b in raw:
        name = name_b.decode("latin-1").lower()
        if name == "host":
            host = value_b
        if name == "x-forwarded-for":
            forwarded_for = value_b if trusted else b""
            continue
        if name in drop or (identity and name == "accept-encoding"):
            continue
        if name in _FORWARDING and not trusted:
            continue
        out.append((name_b.lower(), value_b))
    if peer:
        forwarded_for = forwarded_for + b", " + peer.encode() if forwarded_for else peer.encode()
    if forwarded_for:
        out.append((b"x-forwarded-for", forwarded_for))
    if host and not any(n == b"x-forwarded-host" for n, _ in out):
        out.append((b"x-forwarded-host", host))
    if not any(n == b"x-forwarded-proto" for n, _ in out):
        out.append((b"x-forwarded-proto", str(scope.get("scheme", "http")).encode()))
    if identity:
        out.append((b"accept-encoding", b"identity"))
    return out


def client_response_headers(
    headers: httpx.Headers, *, drop: Iterable[str] = ()
) -> list[tuple[bytes, bytes]]:
    """Upstream response headers fit for the client, as the worker's raw bytes: hop-by-hop and
    ``drop`` removed."""
    removed = _removed(tuple(drop))
    connection = headers.get("connection")
    if connection:
        removed = removed | {t.strip().lower() for t in connection.split(",") if t.strip()}
    return [(k, v) for k, v in headers.raw if k.decode("latin-1").lower() not in removed]


@functools.lru_cache(maxsize=32)
def _removed(drop: tuple[str, ...]) -> frozenset[str]:
    # uvicorn writes its own Date and Server; the worker's copies would be duplicates.
    return HOP_BY_HOP | {"date", "server"} | {d.lower() for d in drop}


def is_event_stream(headers: httpx.Headers) -> bool:
    """True when the ``Content-Type`` media type is ``text/event-stream`` (any letter case)."""
    return headers.get("content-type", "").split(";")[0].strip().lower() == "text/event-stream"


class BodyBudget:
    """The bytes of client request bodies this process holds at once (``limits.max_inflight_body_bytes``):
    a counter, taken as a body is read (its ``Content-Length`` at once, else as its chunks
    arrive) and given back when the request ends; no lock (one event loop).

    Args:
        limit: the bound in force (read at each take, so a reload applies).
    """

    __slots__ = ("used", "_limit")

    def __init__(self, limit: Callable[[], int]) -> None:
        self.used = 0
        self._limit = limit

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes, unless that passes the bound (then nothing is held)."""
        if self.used + size > self._limit():
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        """Bytes held by :meth:`take` are free again."""
        self.used -= size


async def read_body(receive: Receive, scope: Scope, limit: int, budget: BodyBudget | None = None) -> bytes:
    """Read the whole client request body; with ``budget``, the body's bytes are held in it
    (``len(body)`` of them once it is returned: the caller gives them back when the request
    ends; on an error nothing stays held).

    Raises:
        BodyTooLargeError: ``Content-Length`` or the bytes read exceed ``limit``.
        BodyBudgetError: the body would take ``budget`` past its bound (by its
            ``Content-Length`` before anything is read).
        ClientGoneError: the client left before the body was whole.
    """
    declared = declared_length(scope)
    if declared > limit:
        raise BodyTooLargeError
    taken = 0
    if budget is not None and declared:
        if not budget.take(declared):
            raise BodyBudgetError
        taken = declared
    try:
        message = await receive()  # usually the whole body in one message
        if message["type"] == "http.request" and not message.get("more_body", False):
            body: bytes = message.get("body", b"")
            if len(body) <= taken or (budget is None and len(body) <= limit):
                return body
        chunks: list[bytes] = []
        size = 0
        while True:
            if message["type"] == "http.disconnect":
                raise ClientGoneError
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLargeError
            if budget is not None and size > taken:
                if not budget.take(size - taken):
                    raise BodyBudgetError
                taken = size
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
            message = await receive()
    except BaseException:
        if taken:
            budget.give(taken)  # type: ignore[union-attr]
        raise


def declared_length(scope: Scope) -> int:
    """The request's ``Content-Length`` in bytes (0 when absent or not a number)."""
    for name, value in scope["headers"]:
        if name.lower() == b"content-length" and value.isdigit():
            return int(value)
    return 0


async def stream_body(
    receive: Receive, limit: int, *, first: dict[str, Any] | None = None
) -> AsyncIterator[bytes]:
    """Yield the client request body as it arrives (for transparent relaying); ``first`` is
    a message already received.

    Raises:
        BodyTooLargeError: more than ``limit`` bytes arrive.
        ClientGoneError: the client disconnected mid-body (so a truncated body is never sent
            upstream as if complete).
    """
    size = 0
    message: MutableMapping[str, Any]
    while True:
        if first is not None:
            message, first = first, None
        else:
            message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


WATCH_AFTER = 0.05
"""Seconds a request's work runs before :func:`until_disconnect` starts watching the client."""


class Signal(asyncio.Event):
    """An ``asyncio.Event`` that also calls back when set: :func:`until_disconnect` watches
    one with a callback per request instead of a task per request (the shutdown deadline,
    watched by every open stream)."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: set[Callable[[], None]] = set()

    def set(self) -> None:
        """Set the flag, wake the waiters and call every callback once."""
        if self.is_set():
            return
        super().set()
        callbacks, self._callbacks = self._callbacks, set()
        for callback in callbacks:
            callback()

    def add_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when the flag is set (at once, if it is)."""
        if self.is_set():
            callback()
        else:
            self._callbacks.add(callback)

    def remove_callback(self, callback: Callable[[], None]) -> None:
        """Forget ``callback`` (no error when it was not added or was already called)."""
        self._callbacks.discard(callback)


async def until_disconnect(
    receive: Receive, work: Awaitable[T], *, stop: asyncio.Event | None = None
) -> tuple[bool, T | None]:
    """Run ``work`` until it finishes, the client disconnects, or ``stop`` is set.

    Call only after the request body has been read. Returns ``(True, result)`` when ``work``
    finished, ``(False, None)`` otherwise (``work`` is then cancelled, so its ``finally`` blocks
    close the upstream response). ``stop`` is the gateway's drain signal at shutdown.

    ``work`` runs in the calling task. Watchers start only after :data:`WATCH_AFTER` seconds,
    so the common quick exchange creates no task at all; a disconnect is noticed at most that
    much later: one task waits for the client's disconnect, and ``stop`` is watched with a
    callback when it is a :class:`Signal` (a task for a plain ``asyncio.Event``). A watcher
    that fires cancels ``work``. A cancellation from anyone else propagates as usual.
    """
    current = asyncio.current_task()
    assert current is not None
    state = {"fired": False, "over": False}
    watchers: list[asyncio.Future[Any]] = []

    def fire(watcher: asyncio.Future[Any]) -> None:
        if watcher.cancelled():
            return
        watcher.exception()  # a receive() that failed counts as a disconnect; retrieved here
        stopped()

    def stopped() -> None:
        if not state["over"] and not state["fired"]:  # cancel once, even if both signals come
            state["fired"] = True
            current.cancel()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    def start() -> None:
        watchers.append(asyncio.ensure_future(watch()))
        if isinstance(stop, Signal):
            stop.add_callback(stopped)
        elif stop is not None:
            watchers.append(asyncio.ensure_future(stop.wait()))
        for watcher in watchers:
            watcher.add_done_callback(fire)

    timer = asyncio.get_running_loop().call_later(WATCH_AFTER, start)
    try:
        result = await work
    except asyncio.CancelledError:
        if state["fired"] and current.uncancel() == 0:
            return False, None
        raise
    finally:
        state["over"] = True
        timer.cancel()
        if isinstance(stop, Signal):
            stop.remove_callback(stopped)
        for watcher in watchers:
            watcher.cancel()
    if state["fired"]:  # the signal came while ``work`` was finishing; it finished
        current.uncancel()
    return True, result
