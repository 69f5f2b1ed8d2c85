"""The version bridge's exchanges, sans I/O: a client of one A2A version, a worker of the other.

Implements docs/bridge.md §3. A bridged exchange is the client binding's exchange
(:class:`~gateway.exchange.jsonrpc.JsonRpcExchange`, :class:`~gateway.exchange.rest.RestExchange`)
with the worker's edge translated, so everything between — admission, the ledger, the
invariant engine, the refusals, the stream relay — runs once, on the client's version, as
for a worker that spoke it:

* what goes to the worker (the client's request, the gateway's own ``GetTask`` probe and
  resubscribe) is written in the worker's version: method name or REST path, params or body
  (:func:`gateway.a2a.bridge.convert_params`), the ``A2A-Version`` header;
* what comes back (an answer, an error, every stream event) is read into the client's
  version (:func:`~gateway.a2a.bridge.convert_result`, :func:`~gateway.a2a.bridge.convert_event`,
  :func:`~gateway.a2a.bridge.convert_error`) before it is judged, so the engine sees one form
  and re-spells states for the client as always; worker payloads are always re-encoded;
* a request the worker's version cannot express (v1.0 ``ListTasks`` to a v0.3 worker) is
  answered here with the client's form of the error the bridge names, never forwarded;
* a v1.0 client's ``SubscribeToTask`` to a v0.3 worker starts with the current Task, as
  v1.0 requires and ``tasks/resubscribe`` does not: the gateway's ``GetTask`` snapshot
  (:attr:`~gateway.exchange.request.RequestExchange.snapshot_first`).

:func:`worker_version` decides whether a request is bridged at all: only when the worker
does not speak the client's version on the client's binding and does speak the other one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gateway.a2a import bridge, jsonrpc, rest
from gateway.a2a.bridge import Dialect
from gateway.a2a.jsonrpc import MethodInfo, Operation, Request
from gateway.a2a.rest import RestCall
from gateway.a2a.sse import Event, encode_event
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import BridgeError
from gateway.exchange.commands import Answer, CommandGenerator, Count, Open, Post, Respond
from gateway.exchange.jsonrpc import JsonRpcExchange, decode_answer
from gateway.exchange.model import Policy, Summary
from gateway.exchange.request import CardRewrite
from gateway.exchange.rest import RestExchange
from gateway.invariants.admission import CardView
from gateway.invariants.model import NO_CALLER, Caller

Speaks = frozenset[tuple[ProtocolVersion, Binding]]
"""The versions and bindings a worker serves (from its card, or the configuration)."""

_OTHER = {ProtocolVersion.V0_3: ProtocolVersion.V1_0, ProtocolVersion.V1_0: ProtocolVersion.V0_3}


def worker_version(client: ProtocolVersion, binding: Binding, speaks: Speaks) -> ProtocolVersion | None:
    """The version to bridge a client's request to, or ``None`` to proxy it as it is.

    Bridged only when the worker is known (``speaks`` not empty) not to serve ``client`` on
    ``binding`` and to serve the other version on it (docs/bridge.md §3.1); the bridge keeps
    the binding."""
    if not speaks or (client, binding) in speaks:
        return None
    other = _OTHER[client]
    return other if (other, binding) in speaks else None


def _header(version: ProtocolVersion) -> str:
    """The ``A2A-Version`` a request in ``version`` carries: none for v0.3 (docs/protocol.md §5)."""
    return "" if version is ProtocolVersion.V0_3 else version.value


def _direction(client: ProtocolVersion, worker: ProtocolVersion) -> str:
    return f"{client.value}->{worker.value}"


class _Bridged:
    """What both bridged exchanges share: the two dialects, the refusal of a request the
    worker's version cannot express, and the worker payloads read into the client's form."""

    ex: Any
    summary: Summary
    policy: Policy
    client: Dialect
    worker: Dialect
    worker_version: ProtocolVersion
    refusal: BridgeError | None

    def _setup(self, worker_version: ProtocolVersion, binding: Binding) -> None:
        self.worker_version = worker_version
        self.client = bridge.dialect_of(self.ex.version, binding)
        self.worker = bridge.dialect_of(worker_version, binding)
        self.refusal = None
        self.summary.bridge = _direction(self.ex.version, worker_version)
        # SPEC §3.1.6: a v1.0 subscribe starts with the current Task; a v0.3 worker's
        # tasks/resubscribe need not (a2a-sdk 0.3 sends nothing before the next event)
        self.snapshot_first = (self.ex.operation is Operation.SUBSCRIBE and self.ex.version is ProtocolVersion.V1_0
                               and worker_version is ProtocolVersion.V0_3)

    def run(self) -> CommandGenerator[Summary]:
        yield Count("bridged", (self.summary.binding.value, self.ex.version.value, self.worker_version.value))
        if self.refusal is not None:
            self.summary.outcome = "not_bridged"
            yield self.error(200, self.refusal.code, self.refusal.message)  # type: ignore[attr-defined]
            return self.summary
        summary: Summary = yield from super().run()  # type: ignore[misc]
        return summary

    def _params(self, params: Any) -> Any:
        """``params`` in the worker's version; a :class:`BridgeError` is kept as the refusal."""
        try:
            return bridge.convert_params(self.ex.operation, params, self.client, self.worker)
        except BridgeError as exc:
            self.refusal = exc
            return None

    def _result(self, result: Any) -> Any:
        return bridge.convert_result(self.ex.operation, result, self.worker, self.client)


class BridgedJsonRpcExchange(_Bridged, JsonRpcExchange):
    """A JSON-RPC request of one version to a worker that speaks only the other one.

    Args:
        worker_version: the version the worker speaks (:func:`worker_version`).
        the rest: as for :class:`~gateway.exchange.jsonrpc.JsonRpcExchange`.
    """

    def __init__(self, req: Request, body: bytes, info: MethodInfo, card: CardView, policy: Policy,
                 worker_version: ProtocolVersion, rewrite_card: CardRewrite | None = None, *,
                 caller: Caller = NO_CALLER) -> None:
        super().__init__(req, body, info, card, policy, rewrite_card, caller=caller)
        self._setup(worker_version, Binding.JSONRPC)
        method = jsonrpc.method_name(info.operation, worker_version)
        params = self._params(req.params if req.params is not None else {})
        if method is None and self.refusal is None:
            self.refusal = BridgeError(jsonrpc.UNSUPPORTED_OPERATION,
                                       f"{info.name} has no equivalent in A2A {worker_version.value}, "
                                       "the version this agent speaks")
        self.worker_body = b""
        if self.refusal is None:
            self.worker_body = jsonrpc.dumps({"jsonrpc": "2.0", "id": req.reply_id, "method": method,
                                              "params": params})

    # --- requests to the worker ----------------------------------------------------------------

    def forward(self) -> Post:
        return Post(self.worker_body, a2a_version=_header(self.worker_version))

    def open_stream(self) -> Open:
        return Open(self.worker_body, a2a_version=_header(self.worker_version))

    def probe_request(self, task_id: str) -> Post:
        return Post(jsonrpc.dumps(jsonrpc.task_get_request(task_id, self.worker_version)),
                    a2a_version=_header(self.worker_version))

    def subscribe_request(self, task_id: str) -> Open:
        doc = jsonrpc.subscribe_request(self.req.reply_id, task_id, self.worker_version)
        return Open(jsonrpc.dumps(doc), a2a_version=_header(self.worker_version))

    # --- the worker's answers, read into the client's version ----------------------------------

    def _into_client(self, doc: dict[str, Any], convert: Any) -> dict[str, Any]:
        if "result" in doc:
            return {**doc, "result": convert(doc["result"])}
        return {**doc, "error": bridge.convert_error(doc["error"], self.worker, self.client)}

    def decode(self, answer: Answer) -> CommandGenerator[tuple[dict[str, Any], bool]]:
        doc = self._into_client(decode_answer(answer, self.policy.max_json_depth), self._result)
        fixed = yield from self.client_id(doc)
        return fixed, True  # always re-encoded: the worker's bytes are in its own version

    def decode_own(self, answer: Answer) -> dict[str, Any]:
        doc = decode_answer(answer, self.policy.max_json_depth)
        return self._into_client(doc, lambda result: bridge.convert_result(
            Operation.GET, result, self.worker, self.client))

    def event_doc(self, event: Event) -> dict[str, Any] | None:
        doc = super().event_doc(event)
        if doc is None:
            return None
        return self._into_client(doc, lambda result: bridge.convert_event(result, self.worker, self.client))

    def event_frame(self, event: Event, doc: dict[str, Any], result: Any) -> CommandGenerator[bytes]:
        fixed = yield from self.client_id(doc)
        return encode_event(jsonrpc.dumps({**fixed, "result": result}), event=event.event, id=event.id,
                            retry=event.retry)


class BridgedRestExchange(_Bridged, RestExchange):
    """A REST request of one version to a worker that speaks only the other one: the same
    operation on the worker's version's path below the same base (tenant, REST prefix).

    Args:
        worker_version: the version the worker speaks (:func:`worker_version`).
        query: the client's raw query string (``historyLength``, ListTasks filters), carried
            on without ``A2A-Version``.
        doc: the JSON body as parsed (send, stream, push create), sent converted.
        the rest: as for :class:`~gateway.exchange.rest.RestExchange`.
    """

    def __init__(self, call: RestCall, http_method: str, body: bytes, params: dict[str, Any],
                 card: CardView, policy: Policy, worker_version: ProtocolVersion, query: str = "",
                 doc: Any = None, rewrite_card: CardRewrite | None = None, *, tenant: str = "",
                 caller: Caller = NO_CALLER) -> None:
        super().__init__(call, http_method, body, params, card, policy, rewrite_card,
                         tenant=tenant, caller=caller)
        self._setup(worker_version, Binding.REST)
        self.worker_call = dataclasses.replace(call, version=worker_version, query=_without_version(call.query))
        kept = _without_version(query)
        self.worker_query = f"?{kept}" if kept else ""
        self.worker_body = b""
        op = call.operation
        if op in (Operation.SEND, Operation.STREAM, Operation.PUSH_CREATE):
            converted = self._params(doc if isinstance(doc, dict) else {})
            if self.refusal is None:
                self.worker_body = jsonrpc.dumps(converted)
        elif op is Operation.LIST:
            self._params(params)  # refused when the worker's version has no ListTasks

    def _target(self) -> str:
        return self.worker_call.operation_target() + self.worker_query

    # --- requests to the worker ----------------------------------------------------------------

    def forward(self) -> Post:
        return Post(self.worker_body, self.http_method, self._target(), _header(self.worker_version))

    def open_stream(self) -> Open:
        return Open(self.worker_body, self.http_method, self._target(), _header(self.worker_version))

    def open_upstream(self) -> CommandGenerator[Any]:
        """The client's stream opened upstream. A subscribe goes with the client's verb, and
        with the other one when the worker answers 405: the verb is disputed in both versions
        (docs/protocol.md §1.3) and the client's version's SDKs send the one their version's
        servers accept, not necessarily the one the worker's routes (a2a-sdk 0.3's REST
        server routes only GET, the 1.x clients send POST)."""
        reply = yield self.open_stream()
        if self.ex.operation is Operation.SUBSCRIBE and isinstance(reply, Answer) and reply.status == 405:
            other = "GET" if self.http_method.upper() == "POST" else "POST"
            reply = yield Open(b"", other, self._target(), _header(self.worker_version))
        return reply

    def probe_request(self, task_id: str) -> Post:
        return Post(b"", "GET", self.worker_call.task_get_target(task_id), _header(self.worker_version))

    def subscribe_request(self, task_id: str) -> Open:
        return Open(b"", "POST", self.worker_call.subscribe_target(task_id), _header(self.worker_version))

    def resubscribe(self, task_id: str, reason: str | None = None) -> CommandGenerator[Any]:
        reply = yield Open(b"", "POST", self.worker_call.subscribe_target(task_id), _header(self.worker_version),
                           reason)
        if isinstance(reply, Answer) and reply.status == 405:
            reply = yield Open(b"", "GET", self.worker_call.subscribe_target(task_id),
                               a2a_version=_header(self.worker_version), reason=reason)
        return reply

    # --- the worker's answers, read into the client's version ----------------------------------

    def _rest_error(self, status: int, body: Any) -> dict[str, Any]:
        """A worker's REST error body in the client's version's form (docs/protocol.md §6.3)."""
        code = rest.error_code(status, body)
        return rest.error_body(code if code is not None else jsonrpc.INTERNAL_ERROR, _message(body),
                               version=self.ex.version)

    def _into_client(self, status: int, doc: dict[str, Any], convert: Any) -> dict[str, Any]:
        if "result" in doc:
            return {"result": convert(doc["result"])}
        return {"error": self._rest_error(status, doc["error"])}

    def decode(self, answer: Answer) -> CommandGenerator[tuple[dict[str, Any], bool]]:
        yield from ()
        return self._into_client(answer.status, super().decode_own(answer), self._result), True

    def decode_own(self, answer: Answer) -> dict[str, Any]:
        return self._into_client(answer.status, super().decode_own(answer), lambda result: bridge.convert_result(
            Operation.GET, result, self.worker, self.client))

    def reply(self, answer: Answer, doc: dict[str, Any], changed: bool, result: Any) -> Respond:
        return Respond(200, jsonrpc.dumps(result), "json", answer)

    def relay_error(self, answer: Answer, doc: dict[str, Any], changed: bool) -> Respond:
        code = rest.error_code(answer.status, doc["error"])
        status = rest.http_status(code, self.ex.version) if code is not None else answer.status
        return Respond(status, jsonrpc.dumps(doc["error"]), "json", answer)

    def event_doc(self, event: Event) -> dict[str, Any] | None:
        doc = super().event_doc(event)
        if doc is None:
            return None
        return self._into_client(500, doc, lambda result: bridge.convert_event(result, self.worker, self.client))

    def event_frame(self, event: Event, doc: dict[str, Any], result: Any) -> CommandGenerator[bytes]:
        yield from ()
        return encode_event(jsonrpc.dumps(result), event=event.event, id=event.id, retry=event.retry)

    def worker_error_frame(self, event: Event, doc: dict[str, Any]) -> bytes:
        return encode_event(jsonrpc.dumps(doc["error"]), event=event.event or "error", id=event.id)


def _without_version(query: str) -> str:
    """A raw query string without its ``A2A-Version`` parameters (a bridged request carries
    the worker's version in the header)."""
    return "&".join(p for p in query.split("&") if p and not p.lower().startswith("a2a-version="))


def _message(body: Any) -> str:
    """The message of a REST error body of either version."""
    if isinstance(body, dict):
        inner = body.get("error")
        message = inner.get("message") if isinstance(inner, dict) else None
        if not isinstance(message, str):
            message = body.get("message")
        if isinstance(message, str):
            return message
    return "worker error"
