"""Transparent relay for every request under a mount that is no A2A operation.

A path and verb that no A2A binding defines (a worker's own endpoints, a well-known path other
than the Agent Card's …) passes through unchanged in both directions: bodies are
streamed, never buffered, and response bytes are relayed raw (``aiter_raw``: compression is
left as the worker chose). Only hop-by-hop headers are removed (docs/protocol.md §11 pitfalls 9,
10), and a ``Location`` that names the worker (its configured URL, or a path below it) is
rewritten to the gateway's public URL for the mount, as nginx's ``proxy_redirect default``
does — a redirect never sends the client round the gateway. A worker transport failure becomes HTTP 502 (504 on timeout) with a
``google.rpc.Status``-shaped JSON body (docs/protocol.md §6.3).
"""

from __future__ import annotations

import time

import httpx
import orjson

from gateway.errors import POOL_EXHAUSTED, BodyTooLargeError, ClientGoneError, UpstreamError
from gateway.exchange.request import error_message, retry_after
from gateway.observability import access
from gateway.proxy.forward import (
    Route,
    client_response_headers,
    declared_length,
    is_event_stream,
    stream_body,
    until_disconnect,
    upstream_request_headers,
)
from gateway.proxy.card import public_base
from gateway.proxy.runtime import Runtime
from gateway.proxy.types import Receive, Scope, Send

_STATUS_NAMES = {413: "INVALID_ARGUMENT", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def status_body(code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` JSON error body (docs/protocol.md §6.3, REST v1.0)."""
    status = _STATUS_NAMES.get(code, "INTERNAL")
    return orjson.dumps({"error": {"code": code, "status": status, "message": message}})


def _own_location(headers: list[tuple[bytes, bytes]], route: Route, base: str) -> list[tuple[bytes, bytes]]:
    """``headers`` with a ``Location`` below the worker's URL (``http://worker:9999/a2a/x``, or
    the path ``/a2a/x``) pointing at the same place below the mount (``base``: the gateway's
    public URL of the mount); any other ``Location`` as it was."""
    upstream = route.upstream.url  # ends with "/"
    upstream_path = "/" + upstream.split("://", 1)[1].partition("/")[2]
    out = []
    for name, value in headers:
        if name.lower() == b"location":
            text = value.decode("latin-1")
            for below in (upstream, upstream_path):
                if text.startswith(below) or text == below.rstrip("/"):
                    value = (base + text[len(below):]).encode("latin-1")
                    break
        out.append((name, value))
    return out


async def relay(rt: Runtime, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
    """Relay one request to the route's upstream and the answer back, streaming both ways."""
    started = time.perf_counter()
    label = "card" if route.path.startswith("/.well-known/") else "other"
    outcome = "ok"
    try:
        outcome = await _relay(rt, route, scope, receive, send)
        if outcome == "too_large":
            rt.reporter(route.upstream.name).limit_reached("max_body_bytes", "client")
    finally:
        duration = time.perf_counter() - started
        rt.metrics.requests.labels(route.upstream.name, "http", label, outcome).inc()
        rt.metrics.duration.labels(route.upstream.name, "http", label).observe(duration)
        line = access.line_of(scope)
        line.upstream, line.binding, line.method, line.outcome = route.upstream.name, "http", label, outcome


async def _relay(rt: Runtime, route: Route, scope: Scope, receive: Receive, send: Send) -> str:
    limit = rt.config.limits.max_body_bytes
    if declared_length(scope) > limit:
        await _error(send, 413, f"request body exceeds {limit} bytes")
        return "too_large"
    method = scope["method"]
    has_body = method not in ("GET", "HEAD", "DELETE", "OPTIONS")
    try:
        response = await rt.client.send(
            method,
            route.url(scope.get("query_string", b"")),
            headers=upstream_request_headers(scope, identity=False,
                                             trusted_proxies=rt.config.public.trusted_proxies),
            content=stream_body(receive, limit) if has_body else None,
            timeout=route.upstream.timeouts,
            upstream=route.upstream,
        )
    except BodyTooLargeError:
        await _error(send, 413, f"request body exceeds {limit} bytes")
        return "too_large"
    except ClientGoneError:
        return "client_disconnected"  # the upstream request was aborted, not sent truncated
    except UpstreamError as err:
        rt.metrics.upstream_errors.labels(route.upstream.name, err.reason).inc()
        await _error(send, err.http_status, error_message(err), retry_after(err))
        return "at_capacity" if err.reason == POOL_EXHAUSTED else "upstream_error"
    try:
        headers = client_response_headers(response.headers)
        if "location" in response.headers:
            headers = _own_location(headers, route, public_base(rt.config.public, route, scope))
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        is_stream = is_event_stream(response.headers)
        finished, outcome = await until_disconnect(
            receive, _pipe(rt, route, response, send), stop=rt.drain_expired if is_stream else None
        )
        if not finished and rt.drain_expired.is_set():
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return "shutdown"
    finally:
        await response.aclose()
    if not finished:
        return "client_disconnected"
    return outcome or "ok"


async def _pipe(rt: Runtime, route: Route, response: httpx.Response, send: Send) -> str:
    """Copy the raw response body to the client as it arrives."""
    try:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except UpstreamError as err:
        rt.metrics.upstream_errors.labels(route.upstream.name, err.reason).inc()
        return "upstream_error"  # headers are out: ending the body short is all we can do
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return "ok" if response.status_code < 400 else "upstream_status"


async def _error(send: Send, status: int, message: str,
                 headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = status_body(status, message)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers,
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
