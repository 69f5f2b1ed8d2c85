"""The REST (HTTP+JSON) endpoint of a mount: read the body, parse it, then run the exchange.

Every path and verb that is an A2A REST operation (docs/protocol.md §1.3; recognised by
:func:`gateway.a2a.rest.match`) is a :class:`~gateway.exchange.rest.RestExchange`, checked
like JSON-RPC and driven by :meth:`~gateway.proxy.endpoint.ExchangeHandler.drive`. Malformed
client input is answered here in REST's error form (``google.rpc.Status``, docs/protocol.md
§6.3), never forwarded: HTTP 400 for a send whose body is not a JSON object, HTTP 413 for a
body over ``limits.max_body_bytes``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway.a2a import jsonrpc, rest
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.rest import RestCall
from gateway.a2a.card_bridge import card_endpoints
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import BodyBudgetError, BodyTooLargeError, ClientGoneError, NestingTooDeepError
from gateway.exchange.bridge import BridgedRestExchange
from gateway.exchange.commands import Count
from gateway.exchange.request import RequestExchange
from gateway.exchange.rest import RestExchange
from gateway.proxy.auth import AuthFailure
from gateway.proxy.card import public_base
from gateway.proxy.endpoint import AT_CAPACITY, RETRY_AFTER, ExchangeHandler, send_json
from gateway.proxy.forward import Route
from gateway.proxy.runtime import Runtime
from gateway.proxy.types import Receive, Scope, Send

_JSON_BODY = (Operation.SEND, Operation.STREAM, Operation.PUSH_CREATE)


def rest_prefixes(card: dict[str, Any] | None, upstream_url: str) -> list[str]:
    """The worker's own REST prefixes (``/rest``): the paths of its card's HTTP+JSON
    interfaces below the upstream's URL path, for :func:`gateway.a2a.rest.rest_tenant`
    (docs/callers.md §1). None without a card."""
    return [base for base in rest_bases(card, upstream_url) if base]


def rest_bases(card: dict[str, Any] | None, upstream_url: str) -> list[str]:
    """Where the card's HTTP+JSON interfaces are below the upstream's URL path: ``""`` for
    one at the upstream's root, else its path (``/rest``); interfaces elsewhere (another path,
    not below the upstream's) are left out. Empty without a card or a REST interface."""
    if not isinstance(card, dict):
        return []
    base = urlsplit(upstream_url).path.rstrip("/")
    found = []
    for (_, binding), url in card_endpoints(card).items():
        if binding is not Binding.REST:
            continue
        path = urlsplit(url).path.rstrip("/")
        if path == base or path.startswith(base + "/"):
            found.append(path[len(base):])
    return found


def outside_rest(call: RestCall, bases: list[str]) -> bool:
    """Whether ``call`` is outside every REST interface ``bases`` (:func:`rest_bases`) names:
    the card advertises REST, none at the upstream's root, and no advertised path is a run of
    whole segments of the call's base (``/rest`` in ``/rest``, ``/acme/rest`` or
    ``/rest/acme``: a tenant may come before or after it). Such a call reaches no REST
    handler of the worker (the demo worker answers it with a redirect), so the gateway
    answers it itself (:meth:`RestHandler.handle`). ``False`` when the card advertises no
    REST interface (nothing to say where REST lives)."""
    if not bases or "" in bases:
        return False
    path = call.base.rstrip("/") + "/"
    return not any(f"{base}/" in path for base in bases)


async def refuse_rest_auth(send: Send, failure: AuthFailure,
                           version: ProtocolVersion = ProtocolVersion.V1_0) -> None:
    """A refused credential in REST's error form: HTTP 401 (``UNAUTHENTICATED``) with
    ``WWW-Authenticate: Bearer``, or 503 when the keys cannot be had now (docs/callers.md §5)."""
    code = jsonrpc.INTERNAL_ERROR if failure.status == 503 else jsonrpc.INVALID_REQUEST
    headers = () if failure.status == 503 else ((b"www-authenticate", failure.www_authenticate()),)
    await send_json(send, failure.status, rest.error_body(code, str(failure), status=failure.status,
                                                          version=version), headers=headers)
_BODILESS = ("GET", "DELETE")


class RestHandler(ExchangeHandler):
    """Handles one REST request for an A2A operation of a route; a new instance per request."""

    def __init__(self, rt: Runtime, route: Route, call: RestCall, scope: Scope, receive: Receive,
                 send: Send) -> None:
        super().__init__(rt, route, scope, receive, send)
        self.call = call
        self.summary.method = call.operation.value
        self.summary.binding = Binding.REST
        self.line.version = call.version.value

    async def handle(self) -> None:
        call, method = self.call, self.scope["method"]
        caller = await self.identify()
        if caller is None:
            return
        body = b""
        if method not in _BODILESS:
            limit = self.rt.config.limits.max_body_bytes
            try:
                body = await self.read_client_body()
            except ClientGoneError:
                self.summary.outcome = "client_disconnected"
                return
            except BodyBudgetError:
                await self._refuse(503, jsonrpc.INTERNAL_ERROR, AT_CAPACITY, headers=RETRY_AFTER)
                return
            except BodyTooLargeError:
                self.summary.outcome = "too_large"
                self.reporter.limit_reached("max_body_bytes", "client")
                await self._refuse(413, jsonrpc.INVALID_REQUEST, f"request body exceeds {limit} bytes")
                return
        doc: object = None
        if call.operation in _JSON_BODY:
            try:
                doc = jsonrpc.loads(body, self.rt.config.limits.max_json_depth, exact_integers=False)
            except orjson.JSONDecodeError:
                doc = None
            except NestingTooDeepError as exc:
                self.reporter.limit_reached("max_json_depth", "client")
                await self._malformed(str(exc))
                return
            if not isinstance(doc, dict):
                await self._malformed("request body must be a JSON object")
                return
        cards = self.rt.card_cache(self.route.upstream)
        card = await cards.current(self.header(b"a2a-version") or "")
        policy = self.rt.policy(self.route.upstream, cards.heartbeat_seconds())
        rewrite = self.card_rewrite(call.operation)
        worker = self.bridge_to(call.version, Binding.REST, cards)
        bases = rest_bases(card.doc, self.route.upstream.url)
        if outside_rest(call, bases):
            await self._outside_rest(bases)
            return
        tenant = rest.rest_tenant(call, [base for base in bases if base])

        def build(doc: object, body: bytes) -> RequestExchange:
            params = rest.request_params(call, doc)
            if worker is None:
                return RestExchange(call, method, body, params, card, policy, self.signed_card_rewrite(rewrite),
                                    tenant=tenant, caller=caller)
            query = self.scope.get("query_string", b"").decode("latin-1")
            return BridgedRestExchange(call, method, body, params, card, policy, worker, query=query,
                                       doc=doc, rewrite_card=self.signed_card_rewrite(
                                           self.bridged_card_rewrite(rewrite, call.version)),
                                       tenant=tenant, caller=caller)

        exchange = build(doc, body)
        if not await self.admit_limits(exchange, doc):  # fair shares (docs/limits.md)
            return
        push = await self.push_step(exchange, card, doc, call.config_id)
        if push is None:
            return
        if push.doc is not None:  # the configs name the gateway's callback (docs/push.md §1)
            body = jsonrpc.dumps(push.doc)
            exchange = build(push.doc, body)
        await self.drive_pushed(exchange, push)

    async def refuse_auth(self, failure: AuthFailure) -> None:
        """HTTP 401 with ``WWW-Authenticate: Bearer`` (503 when the keys cannot be had now)
        and the REST error body of the client's version (docs/callers.md §5)."""
        await refuse_rest_auth(self.send, failure, self.call.version)

    async def _outside_rest(self, bases: list[str]) -> None:
        """HTTP 404 in REST's error form for an A2A REST path outside every REST interface the
        card advertises, naming where they are as the client reaches them (the served card's
        URLs): a wrong path is the client's to fix, not an upstream error."""
        self.summary.outcome = "no_route"
        mount = public_base(self.rt.config.public, self.route, self.scope).rstrip("/")
        where = [f"{mount}{base}" for base in bases]
        below = self.route.path
        operation = below[len(self.call.base):] if below.startswith(self.call.base) else below
        message = (f"no REST interface at {self.scope['path']}: the agent card advertises REST "
                   f"(HTTP+JSON) at {' and '.join(where)}; try {where[0]}{operation}")
        body = rest.error_body(jsonrpc.METHOD_NOT_FOUND, message, status=404, version=self.call.version,
                               metadata={"restBase": where[0]})
        await send_json(self.send, 404, body)

    async def _malformed(self, message: str) -> None:
        self.summary.outcome = "malformed"
        self.reporter.report(Count("rejections", (self.summary.method, "rest_malformed", "enforced")))
        await self._refuse(400, jsonrpc.INVALID_REQUEST, message)

    async def _refuse(self, status: int, code: int, message: str, *,
                      headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        """An error of the gateway's own in the client's version's REST form (docs/protocol.md
        §1.5), with HTTP ``status``."""
        version = self.call.version
        await send_json(self.send, status, rest.error_body(code, message, status=status, version=version),
                        headers=headers)
