"""One JSON-RPC exchange, sans I/O: the JSON-RPC wire form of
:class:`~gateway.exchange.request.RequestExchange`.

Implements the JSON-RPC binding (docs/protocol.md §1.2, §3.4, §6 and §7) and
docs/field-cases.md F16 and F17 (b). The endpoint (gateway/proxy/jsonrpc.py) parses the body,
reads the upstream's card and builds the exchange; the driver (gateway/proxy/driver.py) runs
it, doing what each yielded command says (docs/architecture.md, "The exchange layer"):

* every answer and event carries the client's id (a worker that changed it is a
  ``jsonrpc_id_mismatch`` divergence);
* refusals are JSON-RPC errors with HTTP 200 (503 while the card or the ledger is
  unavailable) — for a v0.3 streaming call as an SSE stream with one error event, the form
  v0.3 SDK clients read;
* a worker transport failure becomes -32603 with HTTP 502/504.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import MethodInfo, Request
from gateway.a2a.payloads import snapshot_result
from gateway.a2a.sse import Event, encode_event
from gateway.a2a.version import ProtocolVersion
from gateway.errors import NestingTooDeepError, UpstreamError
from gateway.exchange.commands import Answer, CommandGenerator, Found, Open, Post, Respond
from gateway.exchange.model import Policy, Summary
from gateway.exchange.request import CardRewrite, RequestExchange, error_message, retry_after
from gateway.invariants.admission import CardView
from gateway.invariants.model import NO_CALLER, Caller, Exchange, Finding


def decode_answer(answer: Answer, max_depth: int) -> dict[str, Any]:
    """The worker's JSON-RPC response object (exactly one of ``result`` / ``error``).

    Raises:
        UpstreamError: HTTP 5xx or a redirect (``status``), a body that is no JSON-RPC 2.0
            response object (``invalid_response``; :func:`gateway.a2a.jsonrpc.clean_response`)
            or one nested deeper than ``max_depth`` (``nesting_too_deep``).
    """
    if answer.status >= 500:
        raise UpstreamError("status", f"worker answered HTTP {answer.status}")
    if 300 <= answer.status < 400:  # relayed, it would send the client round the gateway
        raise UpstreamError("status", f"worker answered HTTP {answer.status}, a redirect; the "
                                      "gateway neither follows nor relays it (is the JSON-RPC path right?)")
    try:
        doc = jsonrpc.loads(answer.content, max_depth)
    except orjson.JSONDecodeError:
        raise UpstreamError("invalid_response", "worker answered with a body that is not JSON") from None
    except NestingTooDeepError as exc:
        raise UpstreamError("nesting_too_deep", f"worker answer: {exc}") from None
    clean = jsonrpc.clean_response(doc)
    if clean is None:
        raise UpstreamError("invalid_response", "worker answered with a body that is no JSON-RPC 2.0 "
                                                "response")
    return clean


def same_id(doc: dict[str, Any], req: Request) -> bool:
    """True when a worker's response carries the client's id, with the same JSON type (a
    missing ``id`` is never the client's, not even a null one)."""
    worker = doc.get("id", _MISSING)
    return worker == req.id and type(worker) is type(req.id)


_MISSING = object()


def relayed_with_client_id(content: bytes, req: Request, max_depth: int) -> bytes | None:
    """A worker's answer to a method no A2A version defines (relayed untouched otherwise)
    with the client's id put back, as every A2A method's answer has it (F16): a worker that
    could not read an id such as ``1e5`` answers ``"id": null``, one that read it as
    ``100000.0`` writes that. ``None``: relay ``content`` as it is (it carries the client's
    id as the client wrote it, the request was a notification, or it is no JSON-RPC
    response object)."""
    if not req.has_id:
        return None
    try:
        doc = jsonrpc.clean_response(jsonrpc.loads(content, max_depth))
    except (orjson.JSONDecodeError, NestingTooDeepError):
        return None
    if doc is None:
        return None
    if same_id(doc, req) and (type(req.reply_id) is not jsonrpc.ExactNumber
                              or jsonrpc.top_level_id(content) == (True, req.reply_id)):
        return None
    return jsonrpc.dumps({**doc, "id": req.reply_id})


class JsonRpcExchange(RequestExchange):
    """One client JSON-RPC request for an A2A method, from admission to the last byte.

    Args:
        req: the parsed request; ``body`` its bytes as the client sent them (forwarded as is).
        info: the method's :class:`~gateway.a2a.jsonrpc.MethodInfo`.
        card: the upstream's card as the driver holds it now.
        policy: the settings (:class:`~gateway.exchange.model.Policy`).
        rewrite_card: applied to a ``GetExtendedAgentCard`` answer.
        caller: who is asking (docs/callers.md §2; default: callers not told apart).
    """

    def __init__(self, req: Request, body: bytes, info: MethodInfo, card: CardView,
                 policy: Policy, rewrite_card: CardRewrite | None = None, *,
                 caller: Caller = NO_CALLER) -> None:
        task_id = jsonrpc.request_task_id(info, req.params)
        ex = Exchange(policy.upstream, info.operation, info.version, task_id, policy.mode,
                      card_etag=card.etag, card_generation=card.generation,
                      tenant=jsonrpc.request_tenant(info, req.params),
                      caller=caller.fingerprint, caller_matches=caller.matches)
        message = jsonrpc.request_message(req.params)
        context_id = jsonrpc.member(message, "contextId", "context_id") if message else None
        summary = Summary(info.name, task_id=task_id, context_id=context_id)
        super().__init__(ex, req.params, summary, card, policy, rewrite_card)
        self.req = req
        self.body = body
        self.streaming = info.streaming

    # --- requests to the worker ----------------------------------------------------------------

    def forward(self) -> Post:
        return Post(self.body)

    def open_stream(self) -> Open:
        return Open(self.body)

    def probe_request(self, task_id: str) -> Post:
        return Post(jsonrpc.dumps(jsonrpc.task_get_request(task_id, self.ex.version, self.ex.tenant)))

    def subscribe_request(self, task_id: str) -> Open:
        return Open(jsonrpc.dumps(jsonrpc.subscribe_request(self.req.reply_id, task_id, self.ex.version,
                                                            self.ex.tenant)))

    # --- answers to the client -----------------------------------------------------------------

    def error(self, status: int, code: int, message: str, *, task_id: str | None = None) -> Respond:
        """A JSON-RPC error response with the client's id. A refusal of a v0.3 streaming call
        is an SSE stream with one error event: v0.3 SDK clients read nothing else on a stream
        (docs/field-cases.md F17 (b)); v1.0 clients get plain JSON, as v1.0 workers answer."""
        return self.respond(status, jsonrpc.dumps(self._error_doc(code, message, task_id)))

    def _error_doc(self, code: int, message: str, task_id: str | None) -> dict[str, Any]:
        meta = {"taskId": task_id} if task_id else None
        return jsonrpc.error_response(self.req.reply_id, code, message, version=self.ex.version,
                                      metadata=meta)

    def respond(self, status: int, body: bytes, *, relay: Answer | None = None) -> Respond:
        """A whole JSON-RPC response ``body`` in the form the client reads: for a v0.3
        streaming call answered with HTTP 200 — a refusal of the gateway's or the worker's
        own JSON answer — an SSE stream carrying it as its one event (docs/field-cases.md F17
        (b), F09); plain JSON otherwise."""
        if status == 200 and self.streaming and self.ex.version is ProtocolVersion.V0_3:
            return Respond(200, encode_event(body), "sse", relay)
        return Respond(status, body, "json", relay)

    def own_result(self, result: Any) -> Respond:
        return self.respond(200, jsonrpc.dumps({"jsonrpc": "2.0", "id": self.req.reply_id, "result": result}))

    def transport_error(self, exc: UpstreamError) -> Respond:
        doc = jsonrpc.error_response(self.req.reply_id, jsonrpc.INTERNAL_ERROR, error_message(exc))
        return Respond(exc.http_status, jsonrpc.dumps(doc), headers=retry_after(exc))

    def decode(self, answer: Answer) -> CommandGenerator[tuple[dict[str, Any], bool]]:
        doc = decode_answer(answer, self.policy.max_json_depth)
        fixed = yield from self.client_id(doc)
        return fixed, fixed is not doc

    def decode_own(self, answer: Answer) -> dict[str, Any]:
        return decode_answer(answer, self.policy.max_json_depth)  # the probe's own id, never the client's

    def error_code(self, answer: Answer, error: Any) -> object:
        return error.get("code") if isinstance(error, dict) else None

    def reply(self, answer: Answer, doc: dict[str, Any], changed: bool, result: Any) -> Respond:
        if result is not doc["result"]:
            return self.respond(answer.status, jsonrpc.dumps({**doc, "result": result}), relay=answer)
        body = jsonrpc.dumps(doc) if changed else answer.content
        return self.respond(answer.status, body, relay=answer)

    def reply_error(self, answer: Answer, code: int, message: str, *,
                    task_id: str | None = None) -> Respond:
        body = jsonrpc.dumps(self._error_doc(code, message, task_id))
        return self.respond(answer.status, body, relay=answer)

    def relay_error(self, answer: Answer, doc: dict[str, Any], changed: bool) -> Respond:
        body = jsonrpc.dumps(doc) if changed else answer.content
        return self.respond(answer.status, body, relay=answer)

    def client_id(self, doc: dict[str, Any]) -> CommandGenerator[dict[str, Any]]:
        """``doc`` with the client's id (F16); a worker that changed it is a
        ``jsonrpc_id_mismatch`` divergence."""
        if same_id(doc, self.req):  # an id the client wrote as 1e5 goes back as 1e5, not 100000.0
            return doc if type(self.req.reply_id) is not jsonrpc.ExactNumber else {**doc, "id": self.req.reply_id}
        finding = Finding("divergence", "jsonrpc_id_mismatch", str(doc.get("id")))
        yield Found((finding,), self.ex.task_id, tenant=self.ex.tenant)
        return {**doc, "id": self.req.reply_id}

    # --- stream events -------------------------------------------------------------------------

    def event_doc(self, event: Event) -> dict[str, Any] | None:
        try:
            return jsonrpc.clean_response(jsonrpc.loads(event.data, self.policy.max_json_depth))
        except orjson.JSONDecodeError:
            return None

    def event_frame(self, event: Event, doc: dict[str, Any], result: Any) -> CommandGenerator[bytes]:
        fixed = yield from self.client_id(doc)
        if result is doc["result"] and fixed is doc:
            data: bytes | str = event.data
        else:
            data = jsonrpc.dumps({**fixed, "result": result})
        return encode_event(data, event=event.event, id=event.id, retry=event.retry)

    def worker_error_frame(self, event: Event, doc: dict[str, Any]) -> bytes:
        return encode_event(jsonrpc.dumps({**doc, "id": self.req.reply_id}), event=event.event)

    def result_frame(self, result: Any, event_id: str | None = None) -> bytes:
        return encode_event(jsonrpc.dumps({"jsonrpc": "2.0", "id": self.req.reply_id, "result": result}),
                            id=event_id)

    def error_frame(self, code: int, message: str) -> bytes:
        doc = jsonrpc.error_response(self.req.reply_id, code, message, version=self.ex.version)
        return encode_event(jsonrpc.dumps(doc), event="error")

    def snapshot(self, task: dict[str, Any]) -> Any:
        return snapshot_result(task, self.ex.version)
