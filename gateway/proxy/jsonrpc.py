"""The JSON-RPC endpoint of a mount: read the body, parse it, then run the exchange.

Malformed client input is answered here, never forwarded: HTTP 200 with the right JSON-RPC
error and the client's id where readable (docs/field-cases.md F15), HTTP 413 for a body over
``limits.max_body_bytes``. A method no A2A version defines is relayed untouched. Every A2A
method is a :class:`~gateway.exchange.jsonrpc.JsonRpcExchange`, performed by the
:class:`~gateway.proxy.driver.Driver`; this handler only decides when the client is gone.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.a2a import jsonrpc
from gateway.errors import BodyTooLargeError, ClientGoneError, UpstreamError
from gateway.exchange.commands import Count
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.model import Summary
from gateway.proxy.driver import JSON_HEADERS, Driver
from gateway.proxy.forward import (
    Route,
    client_response_headers,
    read_body,
    until_disconnect,
    upstream_request_headers,
)
from gateway.proxy.runtime import Runtime
from gateway.proxy.types import Receive, Scope, Send


async def send_json(send: Send, status: int, doc: Any) -> None:
    """Send a complete JSON response."""
    body = jsonrpc.dumps(doc)
    await send({"type": "http.response.start", "status": status,
                "headers": [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class JsonRpcHandler:
    """Handles one JSON-RPC POST for a route; a new instance per request."""

    def __init__(self, rt: Runtime, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        self.rt = rt
        self.route = route
        self.scope = scope
        self.receive = receive
        self.send = send
        self.upstream = route.upstream.name
        self.summary = Summary("invalid")
        self.reporter = rt.reporter(self.upstream)
        self.started = time.perf_counter()

    async def run(self) -> None:
        """Serve the request; always ends with one access-log line and request metrics."""
        try:
            await self._run()
        finally:
            self.reporter.request(self.summary, time.perf_counter() - self.started)

    async def _run(self) -> None:
        limits = self.rt.config.limits
        try:
            body = await read_body(self.receive, self.scope, limits.max_body_bytes)
        except ClientGoneError:
            self.summary.outcome = "client_disconnected"
            return
        except BodyTooLargeError:
            self.summary.outcome = "too_large"
            msg = f"request body exceeds {limits.max_body_bytes} bytes"
            await send_json(self.send, 413, jsonrpc.error_response(None, jsonrpc.INVALID_REQUEST, msg))
            return
        parsed = jsonrpc.parse_request(body)
        if isinstance(parsed, jsonrpc.ParseFailure):
            self.summary.outcome = "malformed"
            self.reporter.report(Count("rejections", ("invalid", f"jsonrpc_{-parsed.code}", "enforced")))
            await send_json(self.send, 200, parsed.error)
            return
        info = jsonrpc.lookup_method(parsed.method)
        if info is None:
            self.summary.method = "other"
            await self._relay_unknown(body, parsed.id)
            return
        cards = self.rt.card_cache(self.route.upstream)
        card = await cards.current(self._header(b"a2a-version") or "")
        policy = self.rt.policy(self.route.upstream, cards.heartbeat_seconds())
        exchange = JsonRpcExchange(parsed, body, info, card, policy)
        self.summary = exchange.summary
        await self._drive(exchange, streaming=info.streaming)

    async def _drive(self, exchange: JsonRpcExchange, *, streaming: bool) -> None:
        """Run the exchange until the client's response is complete, watching for the
        client's disconnect (and, for streams, the shutdown deadline); then let it finish
        unwatched (the post-terminal drain)."""
        driver = Driver(self.rt, self.route, self.scope, self.send, self.reporter,
                        exchange.ex.operation)  # a StrEnum: the v1.0 method name
        gen = exchange.run()
        stop = self.rt.drain_expired if streaming else None
        try:
            work = driver.run(gen, until_ended=streaming)  # a stream may drain after its end
            finished, done = await until_disconnect(self.receive, work, stop=stop)
            if not finished:
                gen.close()
                if self.rt.drain_expired.is_set():
                    self.summary.outcome = "shutdown"
                    if driver.started:
                        await driver.end_for_shutdown()
                        self.summary.close_reason = "shutdown"
                    else:
                        doc = jsonrpc.error_response(exchange.req.id, jsonrpc.INTERNAL_ERROR,
                                                     "gateway shutting down; retry")
                        await send_json(self.send, 503, doc)
                else:
                    self.summary.outcome = "client_disconnected"
                    if self.summary.close_reason is not None:
                        self.summary.close_reason = "client_disconnected"
            elif not done:
                await driver.run(gen)
        finally:
            await driver.aclose()

    def _header(self, name: bytes) -> str | None:
        """A request header's value (``name`` lower-case), or ``None``."""
        for key, value in self.scope["headers"]:
            if key.lower() == name:
                return value.decode("latin-1")
        return None

    async def _relay_unknown(self, body: bytes, req_id: jsonrpc.JsonId) -> None:
        """A method no A2A version defines: relayed untouched (custom extension methods)."""
        url = self.route.url(self.scope.get("query_string", b""))
        headers = upstream_request_headers(self.scope, identity=True,
                                           trusted_proxies=self.rt.config.public.trusted_proxies)
        try:
            response = await self.rt.client.fetch("POST", url, headers=headers, content=body,
                                                  timeout=self.route.upstream.timeouts)
        except UpstreamError as exc:
            self.summary.outcome = "upstream_error"
            self.reporter.report(Count("upstream_errors", (exc.reason,)))
            doc = jsonrpc.error_response(req_id, jsonrpc.INTERNAL_ERROR, f"upstream error: {exc}")
            await send_json(self.send, exc.http_status, doc)
            return
        headers_out = client_response_headers(response.headers, drop=("content-length", "content-encoding"))
        await self.send({"type": "http.response.start", "status": response.status_code,
                         "headers": [*headers_out, (b"content-length", str(len(response.content)).encode())]})
        await self.send({"type": "http.response.body", "body": response.content})
