"""What every binding's endpoint shares: one request's metrics and log line, and driving its
exchange while watching the client.

A binding's endpoint (:mod:`gateway.proxy.jsonrpc`, :mod:`gateway.proxy.rest`) reads and
parses the client's request, answers malformed input itself, and builds the exchange;
:meth:`ExchangeHandler.drive` then runs it through the :class:`~gateway.proxy.driver.Driver`
until the client's response is complete, and lets a stream drain after that unwatched.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from gateway.a2a import jsonrpc
from gateway.a2a.card import is_signed, rewrite_card
from gateway.a2a.card_bridge import CardBridgeError, bridge_card
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import BodyBudgetError, LedgerError
from gateway.exchange.bridge import worker_version
from gateway.exchange.commands import Count
from gateway.exchange.model import Summary
from gateway.exchange.request import CardRewrite, RequestExchange
from gateway.exchange.retries import SEND_OPERATIONS
from gateway.invariants.admission import CardView
from gateway.invariants.model import NO_CALLER, Caller
from gateway.observability import access
from gateway.observability.tracing import Tracing
from gateway.proxy.auth import AuthFailure
from gateway.proxy.card import CardCache, public_base
from gateway.proxy.driver import JSON_HEADERS, Driver
from gateway.proxy.forward import Route, read_body, until_disconnect
from gateway.proxy.runtime import Runtime
from gateway.proxy.types import Receive, Scope, Send
from gateway.exchange.push import CONFIG_OPERATIONS, NOTHING, PushStep, client_webhooks, intake, relays, settle
from gateway.invariants.timeline import TimelineEntry
from gateway.proxy.limits import NO_GRANT, limited_answer
from gateway.proxy.limits import Scope as LimitScope
from gateway.proxy.push import callback_base


async def send_json(send: Send, status: int, doc: Any, *,
                    headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """Send a complete JSON response (``application/json``), ``headers`` besides."""
    body = jsonrpc.dumps(doc)
    await send({"type": "http.response.start", "status": status,
                "headers": [*JSON_HEADERS, *headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


AT_CAPACITY = ("gateway at capacity: the request bodies in flight would pass "
               "limits.max_inflight_body_bytes; retry")
"""The message of a body refused for the in-flight budget (HTTP 503)."""
RETRY_AFTER = ((b"retry-after", b"1"),)


class ExchangeHandler:
    """One client request of a route; a new instance per request (subclasses parse it)."""

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
        self.line = access.line_of(scope)
        """The request line (:mod:`gateway.observability.access`): the binding sets
        ``jsonrpc_id`` and ``version``; :meth:`run` the rest from the exchange's summary."""
        self.line.upstream = self.upstream
        self.held = 0
        """Bytes of the request's body held in the process's budget (:meth:`read_client_body`)."""
        self.grant = NO_GRANT
        """The fair-share slots the request holds (:meth:`admit_limits`), given back at its end."""
        self.scopes: list[LimitScope] = []

    async def run(self) -> None:
        """Serve the request; always ends with request metrics and the request line's fields
        filled in (:class:`gateway.app.ProxyApp` logs it), and its body's bytes given back to
        the in-flight budget."""
        try:
            await self.handle()
        finally:
            if self.grant is not NO_GRANT:
                await self.rt.limiter.release(self.grant)  # type: ignore[union-attr]
            if self.held:
                self.rt.bodies.give(self.held)  # type: ignore[union-attr]
            refused = self.scope.get(access.REFUSED_KEY)  # the connection layer answered it (a bound)
            if refused is not None:
                self.summary.outcome = refused[1]
            s, line = self.summary, self.line
            self.reporter.request(s, time.perf_counter() - self.started, line.trace_id)
            line.binding, line.method, line.outcome = s.binding.value, s.method, s.outcome
            line.task_id, line.context_id, line.bridge = s.task_id, s.context_id, s.bridge

    async def handle(self) -> None:
        """Read, parse and answer the request (the binding's part)."""
        raise NotImplementedError

    async def read_client_body(self) -> bytes:
        """The request's body, read whole within ``limits.max_body_bytes`` and held in the
        process's in-flight budget (``limits.max_inflight_body_bytes``) until the request ends.

        Raises:
            BodyTooLargeError, BodyBudgetError, ClientGoneError: as
                :func:`~gateway.proxy.forward.read_body` (a budget refusal is counted here).
        """
        try:
            body = await read_body(self.receive, self.scope, self.rt.config.limits.max_body_bytes, self.rt.bodies)
        except BodyBudgetError:
            self.summary.outcome = "at_capacity"
            self.reporter.limit_reached("max_inflight_body_bytes", "client")
            raise
        if self.rt.bodies is not None:
            self.held = len(body)
        return body

    async def identify(self) -> Caller | None:
        """Who is asking (docs/callers.md §2, §5): with ``auth.jwt``, the bearer token is
        checked first — a refused one is answered here in the binding's form
        (:meth:`refuse_auth`), counted and ``None`` returned, nothing having reached the
        worker; then the caller's :class:`~gateway.invariants.model.Caller`."""
        subject = None
        if self.rt.auth is not None:
            try:
                claims = await self.rt.auth.verify(self.scope)
            except AuthFailure as failure:
                self.summary.outcome = "unauthenticated"
                self.reporter.report(Count("auth_failures", (self.summary.binding.value, failure.reason)))
                await self.refuse_auth(failure)
                return None
            sub = claims.get("sub")
            subject = sub if isinstance(sub, str) and sub else None
        keys = self.rt.callers
        if keys is None:
            return NO_CALLER
        return keys.caller(keys.identity_of(self.scope, subject))

    async def refuse_auth(self, failure: AuthFailure) -> None:
        """Answer a refused credential in the binding's error form (docs/callers.md §5)."""
        raise NotImplementedError

    def header(self, name: bytes) -> str | None:
        """A request header's value (``name`` lower-case), or ``None``."""
        for key, value in self.scope["headers"]:
            if key.lower() == name:
                return value.decode("latin-1")
        return None

    def card_rewrite(self, operation: Operation) -> CardRewrite | None:
        """How an extended Agent Card answer is rewritten for this client, by the public
        card's rules (docs/protocol.md §4.4, §4.5; it is per client and never cached); ``None``
        for any other operation."""
        if operation is not Operation.EXTENDED_CARD:
            return None
        upstream = self.route.upstream
        rewrite = functools.partial(
            rewrite_card, upstream_url=upstream.url,
            public_base=public_base(self.rt.config.public, self.route, self.scope),
            keep_unguarded=upstream.card.unguarded_interfaces == "keep")
        if upstream.card.signed != "verbatim" or self.rt.signer is not None:
            return rewrite
        return lambda doc: doc if is_signed(doc) else rewrite(doc)

    def signed_card_rewrite(self, rewrite: CardRewrite | None) -> CardRewrite | None:
        """With a gateway key (``card.signing``), ``rewrite`` of an extended Agent Card answer
        framed by the signature rules (docs/protocol.md §4.5): the worker's signatures checked
        on the card as it came, then the rewrite (bridged or not), then the gateway's signature
        (:meth:`gateway.proxy.card.CardCache.extended`). Without one, ``rewrite`` itself."""
        signer = self.rt.signer
        if rewrite is None or signer is None:
            return rewrite
        cache = self.rt.card_cache(self.route.upstream)
        jku = signer.jku(public_base(self.rt.config.public, self.route, self.scope))
        return lambda doc: cache.extended(doc, rewrite, jku)

    def bridge_to(self, client: ProtocolVersion, binding: Binding, cards: CardCache) -> ProtocolVersion | None:
        """The worker version to bridge this request to (docs/bridge.md §3.1), or ``None`` to
        proxy it as it is: ``bridge.enabled`` and :func:`gateway.exchange.bridge.worker_version`
        over what the worker speaks (:meth:`~gateway.proxy.card.CardCache.speaks`)."""
        if not self.rt.config.bridge.enabled:
            return None
        return worker_version(client, binding, cards.speaks())

    @staticmethod
    def bridged_card_rewrite(rewrite: CardRewrite | None, client: ProtocolVersion) -> CardRewrite | None:
        """An extended Agent Card answer of a bridged request: in the client's version
        (:func:`gateway.a2a.card.bridge_card`), then rewritten as usual."""
        if rewrite is None:
            return None

        def bridged(doc: dict[str, Any]) -> dict[str, Any]:
            try:
                doc = bridge_card(doc, client)
            except CardBridgeError:  # no guarded interface to bridge: as the worker wrote it
                pass
            return rewrite(doc)

        return bridged

    async def refuse(self, exchange: RequestExchange, code: int, message: str, *, status: int = 200) -> None:
        """Answer ``exchange``'s request with A2A error ``code`` in its binding's form (``status``
        as for :meth:`RequestExchange.error`), sending nothing to the worker (a refused push
        webhook, docs/push.md §4)."""
        self.summary = exchange.summary
        self.summary.outcome = "rejected" if status == 200 else "ledger_error"
        driver = Driver(self.rt, self.route, self.scope, self.send, self.reporter, exchange.ex.operation)
        try:
            await driver.respond(exchange.error(status, code, message))
        finally:
            await driver.aclose()

    async def push_step(self, exchange: RequestExchange, card: CardView, doc: Any,
                        config_id: str | None) -> PushStep | None:
        """What the push relay does to this request (docs/push.md §1): nothing unless push is
        on and the request will be forwarded — in enforce mode a refusal of the exchange's own
        (the card does not admit it) comes first; in observe mode such a request is forwarded
        all the same, so its push configs are rewritten and checked like any.
        ``None``: the ledger failed and the client was answered 503."""
        push, ex = self.rt.push, exchange.ex
        if push is None or not push.handles(ex.operation):
            return NOTHING
        if not relays(ex.operation, doc, ex.task_id) or not exchange.forwards():
            return NOTHING
        gen = intake(self.upstream, ex.operation, ex.version, ex.binding, doc, ex.task_id, config_id, ex.tenant,
                     callback_base=callback_base(self.rt, self.route, self.scope), limits=push.limits)
        try:
            step: PushStep = await self.perform(gen, ex.operation)
            return step
        except LedgerError:
            await self.refuse(exchange, jsonrpc.INTERNAL_ERROR, "gateway task ledger unavailable", status=503)
            return None

    async def admit_limits(self, exchange: RequestExchange, doc: Any) -> bool:
        """The fair-share limits (docs/limits.md), before anything of the request is stored or
        sent on: True to go on (holding :attr:`grant`); False when a limit was reached — the
        client is answered HTTP 429 with ``Retry-After`` in its binding's and version's form,
        counted (``a2a_gateway_limited_total``), logged, and kept on the task's timeline when
        the request names a task. A store that fails lets the request through (logged)."""
        limiter = self.rt.limiter
        if limiter is None or not limiter.active:
            return True
        ex = exchange.ex
        self.scopes = limiter.scopes(self.upstream, ex.tenant, Caller(ex.caller, ex.caller_matches))
        if not self.scopes:
            return True
        push = self.rt.push
        hooks = len(client_webhooks(ex.operation, doc)) if (
            push is not None and push.handles(ex.operation) and ex.operation in CONFIG_OPERATIONS) else 0
        new_task = ex.task_id is None and ex.operation in (Operation.SEND, Operation.STREAM)
        if new_task and limiter.counts_live and self.rt.retries is not None:
            new_task = not await self.rt.retries.taken(self, exchange)  # a retry makes no task (docs/limits.md §1)
        try:
            self.grant, refusal = await limiter.admit(
                self.scopes, new_task=new_task, stream=exchange.streaming, push_configs=hooks)
        except LedgerError as exc:
            self.rt.log.warning("limit_store_failed", extra={"upstream": self.upstream, "error": str(exc)})
            return True
        if refusal is None:
            return True
        self.summary = exchange.summary
        self.summary.outcome = "limited"
        self.rt.metrics.limited.labels(self.upstream, refusal.limit).inc()
        self.rt.log.warning("limited", extra={"upstream": self.upstream, "limit": refusal.limit,
                                              "retry_in_s": refusal.retry_after})
        if ex.task_id:
            await self.rt.keep_timeline(self.upstream, ex.task_id, TimelineEntry(
                "request", "rejected", method=str(ex.operation), binding=ex.binding.value, version=ex.version.value,
                error=f"429 {refusal.limit}: {refusal.message}"), tenant=ex.tenant)
        status, body, headers = limited_answer(refusal, ex.binding, ex.version, getattr(self, "_reply_id", None))
        await send_json(self.send, status, body, headers=headers)
        return False

    async def drive_pushed(self, exchange: RequestExchange, push: PushStep) -> None:
        """:meth:`drive` ``exchange`` after the push relay's step for it (docs/push.md §1): a
        refused webhook is answered -32602 in the binding's form and nothing is forwarded;
        otherwise the worker's answer gives the client its own webhook back, and the send's
        inline configs are bound to the task the answer names."""
        if push.refusal is not None:
            await self.refuse(exchange, jsonrpc.INVALID_PARAMS, push.refusal[1])
            return
        if self.scopes and (push.created or push.pending):  # counted against limits.*.push_configs
            await self.rt.limiter.pushed(self.scopes, [e.callback_id for e in (*push.created, *push.pending)])  # type: ignore[union-attr]
        exchange.rewrite_result = push.restore
        exchange.pending_push = tuple(entry.callback_id for entry in push.pending)
        await self.drive(exchange)
        relay = self.rt.push
        if relay is not None and (push.created or push.replaced or push.pending):
            summary = exchange.summary
            await self.perform(settle(push, summary.outcome, summary.task_id, relay.limits), "push")

    async def perform(self, gen: Any, operation: str) -> Any:
        """Perform an exchange that answers the client nothing (the push relay's intake and
        settling, docs/push.md §1) with a driver of its own; returns what it returns."""
        driver = Driver(self.rt, self.route, self.scope, self.send, self.reporter, operation)
        try:
            await driver.run(gen)
        finally:
            await driver.aclose()
        return driver.value

    async def drive(self, exchange: RequestExchange) -> None:
        """Run the exchange until the client's response is complete, watching for the
        client's disconnect (and, for streams, the shutdown deadline); then let it finish
        unwatched (the post-terminal drain). A send with a retry key takes it first
        (:meth:`gateway.proxy.retries.Retries.begin`); a keyed unary send is not watched: it
        runs to the worker's answer for its retry (docs/retries.md §2)."""
        self.summary = exchange.summary
        streaming = exchange.streaming
        if streaming:  # an empty Last-Event-ID means none, as in an EventSource's first request
            exchange.last_event_id = (self.header(b"last-event-id") or "").strip() or None
        turn = None  # the send's retry key, when it owns one (docs/retries.md)
        if self.rt.retries is not None and exchange.ex.operation in SEND_OPERATIONS:
            turn = await self.rt.retries.begin(self, exchange)
        driver = Driver(self.rt, self.route, self.scope, self.send, self.reporter,
                        exchange.ex.operation,  # a StrEnum: the v1.0 method name
                        task_id=exchange.ex.task_id)
        driver.grant = self.grant
        driver.retry = turn if streaming else None  # a stream's task goes under its key at once
        keep = turn is not None and not streaming  # a keyed unary send runs to the worker's answer
        if turn is not None:  # its outcome is under its key before the client has it
            driver.before_respond = functools.partial(turn.finish, exchange)
        tracing = self.rt.tracing
        if tracing is not None:  # off: no span object is built (docs/observability.md §1)
            driver.span = self._server_span(tracing, exchange)
            driver.card, driver.version = exchange.card.doc, exchange.ex.version.value
            self.line.trace_id = tracing.trace_id(driver.span)
        gen = exchange.run()
        stop = self.rt.drain_expired if streaming else None
        done: bool | None
        try:
            if keep:  # not watched: the client's leaving does not cancel it; the retry finds the outcome
                finished, done = True, await driver.run(gen)
            else:
                work = driver.run(gen, until_ended=streaming)  # a stream may drain after its end
                finished, done = await until_disconnect(self.receive, work, stop=stop)
            if self.grant.stream is not None:  # the client's stream is over: its slot is free
                await self.rt.limiter.release_stream(self.grant)  # type: ignore[union-attr]
            if not finished:
                gen.close()
                if self.rt.drain_expired.is_set():
                    self.summary.outcome = "shutdown"
                    if driver.started:
                        await driver.end_for_shutdown()
                        self.summary.close_reason = "shutdown"
                    else:
                        await driver.respond(exchange.error(503, jsonrpc.INTERNAL_ERROR,
                                                            "gateway shutting down; retry"))
                else:
                    self.summary.outcome = "client_disconnected"
                    if self.summary.close_reason is not None:
                        self.summary.close_reason = "client_disconnected"
            elif not done:
                await driver.run(gen)
        finally:
            await driver.aclose()
            if turn is not None:
                await turn.finish(exchange)
            if driver.span is not None:
                s = self.summary
                Tracing.end_server(driver.span, outcome=s.outcome, status=driver.status, task_id=s.task_id,
                                   context_id=s.context_id, state=driver.state)

    def _server_span(self, tracing: Tracing, exchange: RequestExchange) -> Any:
        """The request's ``SERVER`` span, with what the request says (method, version, task,
        message, the tenant it is judged under — JSON-RPC's ``params.tenant``, REST's path) and
        the upstream's Agent Card (name, version)."""
        message = jsonrpc.request_message(exchange.params)  # params.message, or v0.3 REST's request
        message_id = message.get("messageId") if message is not None else None
        ex = exchange.ex
        began = time.time_ns() - int((time.perf_counter() - self.started) * 1e9)  # the request's start
        return tracing.server_span(
            self.scope, start_time=began, method=str(ex.operation.value), version=ex.version.value, binding=ex.binding.value,
            task_id=ex.task_id, message_id=message_id if isinstance(message_id, str) else None,
            tenant=ex.tenant or None, card=exchange.card.doc)
