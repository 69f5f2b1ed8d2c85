"""The JSON-RPC endpoint of a mount: read the body, parse it, then run the exchange.

Malformed client input is answered here, never forwarded: HTTP 200 with the right JSON-RPC
error and the client's id where readable (docs/field-cases.md F15), HTTP 413 for a body over
``limits.max_body_bytes``. A method no A2A version defines is relayed untouched. Every A2A
method is a :class:`~gateway.exchange.jsonrpc.JsonRpcExchange`, driven by
:meth:`~gateway.proxy.endpoint.ExchangeHandler.drive`.
"""

from __future__ import annotations

from gateway.a2a import jsonrpc
from gateway.a2a.version import Binding
from gateway.errors import (
    POOL_EXHAUSTED,
    BodyBudgetError,
    BodyTooLargeError,
    ClientGoneError,
    NestingTooDeepError,
    UpstreamError,
)
from gateway.exchange.bridge import BridgedJsonRpcExchange
from gateway.exchange.commands import Count
from gateway.exchange.jsonrpc import JsonRpcExchange, relayed_with_client_id
from gateway.exchange.request import RequestExchange, error_message, retry_after
from gateway.proxy.auth import AuthFailure
from gateway.proxy.endpoint import AT_CAPACITY, RETRY_AFTER, ExchangeHandler, send_json
from gateway.proxy.forward import client_response_headers, upstream_request_headers
from gateway.push.relay import request_config_id


class JsonRpcHandler(ExchangeHandler):
    """Handles one JSON-RPC POST for a route; a new instance per request."""

    _reply_id: jsonrpc.JsonId = None

    async def handle(self) -> None:
        limits = self.rt.config.limits
        try:
            body = await self.read_client_body()
        except ClientGoneError:
            self.summary.outcome = "client_disconnected"
            return
        except BodyBudgetError:
            await send_json(self.send, 503, jsonrpc.error_response(None, jsonrpc.INTERNAL_ERROR, AT_CAPACITY),
                            headers=RETRY_AFTER)
            return
        except BodyTooLargeError:
            self.summary.outcome = "too_large"
            self.reporter.limit_reached("max_body_bytes", "client")
            msg = f"request body exceeds {limits.max_body_bytes} bytes"
            await send_json(self.send, 413, jsonrpc.error_response(None, jsonrpc.INVALID_REQUEST, msg))
            return
        parsed = jsonrpc.parse_request(body, limits.max_json_depth)
        self._reply_id = (parsed.error.get("id") if isinstance(parsed, jsonrpc.ParseFailure)
                          else parsed.reply_id)
        caller = await self.identify()  # before anything else is answered (docs/callers.md §5)
        if caller is None:
            return
        if isinstance(parsed, jsonrpc.ParseFailure):
            self.line.jsonrpc_id = parsed.error.get("id")
            self.summary.outcome = "malformed"
            self.reporter.report(Count("rejections", ("invalid", f"jsonrpc_{-parsed.code}", "enforced")))
            if parsed.limit is not None:
                self.reporter.limit_reached(parsed.limit, "client")
            await send_json(self.send, 200, parsed.error)
            return
        self.line.jsonrpc_id = parsed.id
        info = jsonrpc.lookup_method(parsed.method)
        if info is not None:
            self.line.version = info.version.value
        if info is None:
            self.summary.method = "other"
            await self._relay_unknown(body, parsed)
            return
        cards = self.rt.card_cache(self.route.upstream)
        card = await cards.current(self.header(b"a2a-version") or "")
        policy = self.rt.policy(self.route.upstream, cards.heartbeat_seconds())
        rewrite = self.card_rewrite(info.operation)
        worker = self.bridge_to(info.version, Binding.JSONRPC, cards)

        def build(parsed: jsonrpc.Request, body: bytes) -> RequestExchange:
            if worker is None:
                return JsonRpcExchange(parsed, body, info, card, policy, self.signed_card_rewrite(rewrite),
                                       caller=caller)
            return BridgedJsonRpcExchange(
                parsed, body, info, card, policy, worker,
                self.signed_card_rewrite(self.bridged_card_rewrite(rewrite, info.version)), caller=caller)

        exchange = build(parsed, body)
        if not await self.admit_limits(exchange, parsed.params):  # fair shares (docs/limits.md)
            return
        push = await self.push_step(exchange, card, parsed.params,
                                    request_config_id(info.operation, info.version, parsed.params))
        if push is None:
            return
        if push.doc is not None:  # the configs name the gateway's callback (docs/push.md §1)
            body = jsonrpc.dumps({"jsonrpc": "2.0", "id": parsed.reply_id, "method": parsed.method,
                                  "params": push.doc})
            reparsed = jsonrpc.parse_request(body, limits.max_json_depth)
            assert not isinstance(reparsed, jsonrpc.ParseFailure)
            exchange = build(reparsed, body)
        await self.drive_pushed(exchange, push)

    async def refuse_auth(self, failure: AuthFailure) -> None:
        """HTTP 401 (503: the keys cannot be had now) with ``WWW-Authenticate: Bearer`` and a
        JSON-RPC error with the client's id (-32600; -32603 for 503; docs/callers.md §5)."""
        code = jsonrpc.INTERNAL_ERROR if failure.status == 503 else jsonrpc.INVALID_REQUEST
        headers = () if failure.status == 503 else ((b"www-authenticate", failure.www_authenticate()),)
        await send_json(self.send, failure.status,
                        jsonrpc.error_response(self._reply_id, code, str(failure)), headers=headers)

    async def _relay_unknown(self, body: bytes, parsed: jsonrpc.Request) -> None:
        """A method no A2A version defines: relayed untouched (custom extension methods), but
        for the client's id in a JSON-RPC answer (:func:`relayed_with_client_id`)."""
        req_id = parsed.reply_id
        url = self.route.url(self.scope.get("query_string", b""))
        headers = upstream_request_headers(self.scope, identity=True,
                                           trusted_proxies=self.rt.config.public.trusted_proxies)
        try:
            response = await self.rt.client.fetch("POST", url, headers=headers, content=body,
                                                  timeout=self.route.upstream.timeouts,
                                                  upstream=self.route.upstream)
        except UpstreamError as exc:
            self.summary.outcome = "at_capacity" if exc.reason == POOL_EXHAUSTED else "upstream_error"
            self.reporter.report(Count("upstream_errors", (exc.reason,)))
            doc = jsonrpc.error_response(req_id, jsonrpc.INTERNAL_ERROR, error_message(exc))
            await send_json(self.send, exc.http_status, doc, headers=retry_after(exc))
            return
        content = response.content
        self.summary.outcome = _relayed_outcome(response.status_code, content)
        if content[:1] == b"{" or content.lstrip()[:1] == b"{":
            content = relayed_with_client_id(content, parsed, self.rt.config.limits.max_json_depth) or content
        headers_out = client_response_headers(response.headers, drop=("content-length", "content-encoding"))
        await self.send({"type": "http.response.start", "status": response.status_code,
                         "headers": [*headers_out, (b"content-length", str(len(content)).encode())]})
        await self.send({"type": "http.response.body", "body": content})


def _relayed_outcome(status: int, content: bytes) -> str:
    """The outcome of a relayed method no A2A version defines: ``worker_error`` for a JSON-RPC
    error answer (the worker's -32601 "method not found" most often), ``upstream_status`` for
    an HTTP error without one, else ``ok``."""
    if b'"error"' in content:  # cheap test first: most answers are results
        try:
            doc = jsonrpc.loads(content, jsonrpc.MAX_JSON_DEPTH, exact_integers=False)
        except (ValueError, NestingTooDeepError):  # not JSON, or too deep: not ours to judge
            doc = None
        if isinstance(doc, dict) and "error" in doc:
            return "worker_error"
    return "upstream_status" if status >= 400 else "ok"
