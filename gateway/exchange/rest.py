"""One HTTP+JSON (REST) exchange, sans I/O: the REST wire form of
:class:`~gateway.exchange.request.RequestExchange`.

Implements the REST binding (docs/protocol.md §1.3, §6.3, §7 and §11 pitfalls 6, 9-11): the
same admission, ledger and engine as JSON-RPC (one record per task, whatever the binding), in
REST's form:

* a worker answer with HTTP 2xx is the result itself (a Task, ``{"task"|"message": …}``,
  ``{"tasks": […]}``); an HTTP 4xx/5xx with a ``google.rpc.Status`` body is an A2A error,
  classified by its ``ErrorInfo`` reason (else its HTTP status);
* refusals of the gateway's own have the error's HTTP status (docs/protocol.md §6.1; 503
  while the card or the ledger is unavailable) and the client's version's body: a
  ``google.rpc.Status`` for v1.0, ``{"code", "message", "type"}`` for v0.3 (§1.5);
* stream events are bare StreamResponses (``data: {"task": …}``), errors ``event: error``
  with the same error body;
* the gateway's own ``GetTask`` and resubscribe go on the client's road: the same base path
  (tenant, the worker's REST prefix) and version (``/v1`` for v0.3).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.a2a import jsonrpc, rest
from gateway.a2a.rest import RestCall
from gateway.a2a.sse import Event, encode_event
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import NestingTooDeepError, UpstreamError
from gateway.exchange.commands import Answer, CommandGenerator, Open, Post, Respond
from gateway.exchange.model import Policy, Summary
from gateway.exchange.request import CardRewrite, RequestExchange, error_message, retry_after
from gateway.invariants.admission import CardView
from gateway.invariants.model import NO_CALLER, Caller, Exchange


class RestExchange(RequestExchange):
    """One client REST request for an A2A operation, from admission to the last byte.

    Args:
        call: the recognised operation (:func:`gateway.a2a.rest.match`).
        http_method: the client's HTTP method (forwarded as is).
        body: the request body as the client sent it (``b""`` for none).
        params: the request as JSON-RPC ``params`` would carry it
            (:func:`gateway.a2a.rest.request_params`).
        card, policy, rewrite_card: as for :class:`~gateway.exchange.request.RequestExchange`.
        tenant: the call's A2A tenant (:func:`gateway.a2a.rest.rest_tenant`, docs/callers.md §1).
        caller: who is asking (docs/callers.md §2; default: callers not told apart).
    """

    def __init__(self, call: RestCall, http_method: str, body: bytes, params: dict[str, Any],
                 card: CardView, policy: Policy, rewrite_card: CardRewrite | None = None, *,
                 tenant: str = "", caller: Caller = NO_CALLER) -> None:
        message = jsonrpc.request_message(params)
        task_id = call.task_id
        context_id = None
        if message is not None:
            task_id = jsonrpc.member(message, "taskId", "task_id") or task_id
            context_id = jsonrpc.member(message, "contextId", "context_id")
        ex = Exchange(policy.upstream, call.operation, call.version, task_id, policy.mode,
                      card_etag=card.etag, card_generation=card.generation, binding=Binding.REST,
                      tenant=tenant,
                      caller=caller.fingerprint, caller_matches=caller.matches)
        summary = Summary(call.operation.value, task_id=task_id, context_id=context_id,
                          binding=Binding.REST)
        super().__init__(ex, params, summary, card, policy, rewrite_card)
        self.call = call
        self.http_method = http_method
        self.body = body
        self.streaming = call.streaming

    # --- requests to the worker ----------------------------------------------------------------

    def forward(self) -> Post:
        return Post(self.body, self.http_method)

    def open_stream(self) -> Open:
        return Open(self.body, self.http_method)

    def probe_request(self, task_id: str) -> Post:
        return Post(b"", "GET", self.call.task_get_target(task_id))

    def subscribe_request(self, task_id: str) -> Open:
        return Open(b"", "POST", self.call.subscribe_target(task_id))

    def resubscribe(self, task_id: str, reason: str | None = None) -> CommandGenerator[Any]:
        """POST ``…/tasks/{id}:subscribe``, and GET when the worker answers 405: the spec
        and the proto disagree on the verb (docs/protocol.md §1.3). Both marked ``reason``."""
        reply = yield Open(b"", "POST", self.call.subscribe_target(task_id), reason=reason)
        if isinstance(reply, Answer) and reply.status == 405:
            reply = yield Open(b"", "GET", self.call.subscribe_target(task_id), reason=reason)
        return reply

    # --- answers to the client -----------------------------------------------------------------

    def error(self, status: int, code: int, message: str, *, task_id: str | None = None) -> Respond:
        """A REST error of the gateway's own, in the client's version's form
        (:func:`gateway.a2a.rest.error_body`), with the code's HTTP status (or 503)."""
        meta = {"taskId": task_id} if task_id else None
        version = self.ex.version
        body = rest.error_body(code, message, metadata=meta, version=version,
                               status=None if status == 200 else status)
        http = status if status != 200 else rest.http_status(code, version)
        return Respond(http, jsonrpc.dumps(body))

    def own_result(self, result: Any) -> Respond:
        return Respond(200, jsonrpc.dumps(result))

    def transport_error(self, exc: UpstreamError) -> Respond:
        message = error_message(exc)
        if self.ex.version is ProtocolVersion.V0_3:
            body = rest.error_body(jsonrpc.INTERNAL_ERROR, message, version=ProtocolVersion.V0_3)
        else:
            body = rest.transport_error_body(exc.http_status, message)
        return Respond(exc.http_status, jsonrpc.dumps(body), headers=retry_after(exc))

    def decode(self, answer: Answer) -> CommandGenerator[tuple[dict[str, Any], bool]]:
        """HTTP 2xx: ``{"result": <body>}`` (``None`` for an empty body); HTTP 4xx with a JSON
        body, or 5xx with an A2A error body (a ``google.rpc.Status``, or the v0.3
        ``{code, message, type}``): ``{"error": <body>}``.

        Raises:
            UpstreamError: a redirect or a body that is not JSON (``status`` for HTTP 3xx and
                5xx, else ``invalid_response``), or a 5xx that is no A2A error (``status``).
        """
        yield from ()  # nothing to report: REST has no ids to fix
        return self.decode_own(answer), False

    def decode_own(self, answer: Answer) -> dict[str, Any]:
        content = answer.content
        if answer.status < 300 and not content.strip():
            return {"result": None}
        if 300 <= answer.status < 400:  # relayed, it would send the client round the gateway
            raise UpstreamError("status", f"worker answered HTTP {answer.status}, a redirect; the "
                                          "gateway neither follows nor relays it (is the REST path right?)")
        try:
            doc = jsonrpc.loads(content, self.policy.max_json_depth)
        except orjson.JSONDecodeError:
            reason = "status" if answer.status >= 500 else "invalid_response"
            raise UpstreamError(reason, f"worker answered HTTP {answer.status} with a body that is not JSON") from None
        except NestingTooDeepError as exc:
            raise UpstreamError("nesting_too_deep", f"worker answer: {exc}") from None
        if answer.status < 300:
            return {"result": doc}
        a2a_error = isinstance(doc, dict) and (isinstance(doc.get("error"), dict)
                                               or rest.error_code(0, doc) is not None)
        if answer.status >= 500 and not a2a_error:
            raise UpstreamError("status", f"worker answered HTTP {answer.status}")
        return {"error": doc}

    def error_code(self, answer: Answer, error: Any) -> object:
        return rest.error_code(answer.status, error)

    def reply(self, answer: Answer, doc: dict[str, Any], changed: bool, result: Any) -> Respond:
        body = answer.content if result is doc["result"] else jsonrpc.dumps(result)
        return Respond(answer.status, body, "raw", answer)

    def reply_error(self, answer: Answer, code: int, message: str, *,
                    task_id: str | None = None) -> Respond:
        return self.error(200, code, message, task_id=task_id)

    def relay_error(self, answer: Answer, doc: dict[str, Any], changed: bool) -> Respond:
        return Respond(answer.status, answer.content, "raw", answer)

    # --- stream events -------------------------------------------------------------------------

    def event_doc(self, event: Event) -> dict[str, Any] | None:
        try:
            doc = jsonrpc.loads(event.data, self.policy.max_json_depth)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(doc, dict):
            return None
        if event.event == "error" or (len(doc) == 1 and isinstance(doc.get("error"), dict)):
            return {"error": doc}
        return {"result": doc}

    def event_frame(self, event: Event, doc: dict[str, Any], result: Any) -> CommandGenerator[bytes]:
        yield from ()  # nothing to report: REST has no ids to fix
        data: bytes | str = event.data if result is doc["result"] else jsonrpc.dumps(result)
        return encode_event(data, event=event.event, id=event.id, retry=event.retry)

    def worker_error_frame(self, event: Event, doc: dict[str, Any]) -> bytes:
        return encode_event(event.data, event=event.event or "error", id=event.id)

    def result_frame(self, result: Any, event_id: str | None = None) -> bytes:
        return encode_event(jsonrpc.dumps(result), id=event_id)

    def error_frame(self, code: int, message: str) -> bytes:
        body = rest.error_body(code, message, version=self.ex.version)
        return encode_event(jsonrpc.dumps(body), event="error")

    def snapshot(self, task: dict[str, Any]) -> Any:
        """``{"task": Task}``: a StreamResponse in both versions (v0.3 REST is ProtoJSON)."""
        return {"task": task}
