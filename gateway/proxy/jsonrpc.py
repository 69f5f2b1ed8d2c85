"""The JSON-RPC exchange: parse → admit → forward → judge the answer → store → respond.

Implements issue "Core gateway" for the JSON-RPC binding (PROTOCOL.md §1.2, §6, §9.4;
FIELD-CASES.md F05, F09, F15, F16):

* malformed client input is answered here, never forwarded, always HTTP 200 with the right
  JSON-RPC error and the client's id where readable (body over the cap: HTTP 413);
* a task action on a task the ledger holds as terminal is answered here (-32004 / -32002);
* unknown (non-A2A) methods are relayed untouched;
* streaming methods go to :mod:`gateway.proxy.streaming`;
* a worker transport failure becomes -32603 with the client's id, HTTP 502 (504 on timeout),
  never an invented task state and never the worker's stack text.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import httpx
import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation, Request
from gateway.a2a.payloads import locate
from gateway.errors import LedgerError, UpstreamError
from gateway.invariants import engine
from gateway.invariants.admission import CARD_UNAVAILABLE, CardView, admit, forced_get_reason
from gateway.invariants.model import Action, Exchange, Mode, Outcome, TaskRecord
from gateway.proxy.forward import (
    BodyTooLargeError,
    ClientGoneError,
    Route,
    client_response_headers,
    map_transport_error,
    read_body,
    until_disconnect,
    upstream_request_headers,
)
from gateway.observability.metrics import code_label
from gateway.proxy.runtime import Runtime
from gateway.proxy.streaming import StreamRelay
from gateway.proxy.transport import UpstreamAnswer
from gateway.proxy.types import Receive, Scope, Send

JSON_HEADERS = [(b"content-type", b"application/json")]
_BODY_HEADERS = ("content-length", "content-encoding", "content-type")


async def send_json(send: Send, status: int, doc: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Send a complete JSON response."""
    body = jsonrpc.dumps(doc)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*(headers or []), *JSON_HEADERS, (b"content-length", str(len(body)).encode())],
        }
    )
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
        self.method_label = "invalid"
        self.outcome = "ok"
        self.task_id: str | None = None
        self.context_id: str | None = None
        self.started = time.perf_counter()

    async def run(self) -> None:
        """Serve the request; always ends with one access-log line and request metrics."""
        try:
            await self._run()
        finally:
            duration = time.perf_counter() - self.started
            m = self.rt.metrics
            m.requests.labels(self.upstream, self.method_label, self.outcome).inc()
            m.duration.labels(self.upstream, self.method_label).observe(duration)
            self.rt.log.info(
                "request",
                extra={"upstream": self.upstream, "method": self.method_label,
                       "outcome": self.outcome, "task_id": self.task_id,
                       "context_id": self.context_id,
                       "duration_s": round(duration, 6)},
            )

    async def _run(self) -> None:
        limits = self.rt.config.limits
        try:
            body = await read_body(self.receive, self.scope, limits.max_body_bytes)
        except ClientGoneError:
            self.outcome = "client_disconnected"
            return
        except BodyTooLargeError:
            self.outcome = "too_large"
            msg = f"request body exceeds {limits.max_body_bytes} bytes"
            await send_json(self.send, 413, jsonrpc.error_response(None, jsonrpc.INVALID_REQUEST, msg))
            return
        parsed = jsonrpc.parse_request(body)
        if isinstance(parsed, jsonrpc.ParseFailure):
            self.outcome = "malformed"
            self.rt.metrics.rejections.labels(self.upstream, "invalid", f"jsonrpc_{-parsed.code}", "enforced").inc()
            await send_json(self.send, 200, parsed.error)
            return
        info = jsonrpc.lookup_method(parsed.method)
        if info is None:
            self.method_label = "other"
            await self._relay_unknown(body, parsed.id)
            return
        self.method_label = info.name
        self.task_id = jsonrpc.request_task_id(info, parsed.params)
        message = parsed.params.get("message") if isinstance(parsed.params, dict) else None
        if isinstance(message, dict) and isinstance(message.get("contextId"), str):
            self.context_id = message["contextId"]
        self.cards = self.rt.card_cache(self.route.upstream)
        card = await self.cards.current(self.header(b"a2a-version") or "")
        ex = Exchange(self.upstream, info.operation, info.version, self.task_id, self.rt.mode,
                      card_etag=card.etag)
        try:
            if await self._admit(ex, parsed, card):
                await self._exchange(ex, parsed, body, info.streaming, card)
        except LedgerError as exc:
            self.outcome = "ledger_error"
            self.rt.log.error("ledger_error", extra={"upstream": self.upstream, "error": str(exc)})
            doc = jsonrpc.error_response(parsed.id, jsonrpc.INTERNAL_ERROR, "gateway task ledger unavailable")
            await send_json(self.send, 503, doc)

    def header(self, name: bytes) -> str | None:
        """A request header's value (``name`` lower-case), or ``None``."""
        for key, value in self.scope["headers"]:
            if key.lower() == name:
                return value.decode("latin-1")
        return None

    async def _admit(self, ex: Exchange, req: Request, card: CardView) -> bool:
        """Card-governed admission (new tasks, capabilities); answers the refusal itself."""
        cfg = self.route.upstream.card
        refusal = admit(ex, req.params, card, allow_stale=cfg.on_unreachable == "allow_stale",
                        required_skill=cfg.required_skill,
                        skill_key=self.rt.config.admission.skill_metadata_key)
        if refusal is None:
            return True
        action = "observed" if ex.mode is Mode.OBSERVE else "enforced"
        self.rt.metrics.rejections.labels(self.upstream, self.method_label, refusal.reason, action).inc()
        if ex.mode is Mode.OBSERVE:
            return True
        self.outcome = "not_admitted"
        status = 503 if refusal.reason == CARD_UNAVAILABLE else 200
        doc = jsonrpc.error_response(req.id, refusal.code, refusal.message, version=ex.version)
        await send_json(self.send, status, doc)
        return False

    async def _exchange(
        self, ex: Exchange, req: Request, body: bytes, streaming: bool, card: CardView
    ) -> None:
        if engine.is_task_action(ex) and not await self._admit_task_action(ex, req, card):
            return
        if streaming:
            await StreamRelay(self, ex, req, body).run()
            return
        finished, _ = await until_disconnect(self.receive, self._unary(ex, req, body))
        if not finished:  # a client that gives up on a blocking call releases the worker call
            self.outcome = "client_disconnected"

    async def _admit_task_action(self, ex: Exchange, req: Request, card: CardView) -> bool:
        """A message with ``taskId``, a cancel or a subscribe: check freshness (forced GetTask
        only for a reason) and refuse it here when the task is terminal (F05). Only these
        actions read the ledger before forwarding; any other request goes straight on."""
        record = await self.rt.record_of(ex.upstream, ex.task_id)
        reason = forced_get_reason(record, card, now=time.time(),
                                   heartbeat_seconds=self.cards.heartbeat_seconds())
        if reason is not None and record is not None:
            record = await self.forced_get(ex, record, reason)
        admission = engine.check_request(ex, record)
        self.rt.count(ex, admission.findings, self.method_label)
        if admission.action is not Action.REJECT or admission.error is None:
            return True
        self.outcome = "rejected"
        code, message = admission.error
        meta = {"taskId": ex.task_id} if ex.task_id else None
        doc = jsonrpc.error_response(req.id, code, message, version=ex.version, metadata=meta)
        await send_json(self.send, 200, doc)
        return False

    async def _unary(self, ex: Exchange, req: Request, body: bytes) -> None:
        try:
            response = await self._post(body)
        except UpstreamError as exc:
            await self.fail_upstream(req, exc)
            return
        await self.answer_json(ex, req, response)

    async def _post(self, body: bytes) -> UpstreamAnswer:
        """POST ``body`` to the route's upstream and read the whole answer.

        Raises:
            UpstreamError: connection refused, timeout, reset, undecodable body.
        """
        try:
            return await self.rt.client.fetch(
                "POST", self._url(), headers=self._headers(), content=body,
                timeout=self.route.upstream.timeouts)
        except httpx.HTTPError as exc:
            raise map_transport_error(exc) from None

    async def open_stream(self, body: bytes) -> httpx.Response:
        """POST ``body`` to the route's upstream; returns once the response head is in, with
        the body still streaming (the caller closes it).

        Raises:
            UpstreamError: connection refused, timeout, reset.
        """
        try:
            return await self.rt.client.send(
                "POST", self._url(), headers=self._headers(), content=body,
                timeout=self.route.upstream.timeouts)
        except httpx.HTTPError as exc:
            raise map_transport_error(exc) from None

    def _url(self) -> str:
        return self.route.url(self.scope.get("query_string", b""))

    def _headers(self) -> list[tuple[bytes, bytes]]:
        return upstream_request_headers(
            self.scope, identity=True, trusted_proxies=self.rt.config.public.trusted_proxies)

    async def fail_upstream(self, req: Request, exc: UpstreamError) -> None:
        """Answer a worker transport failure: -32603 with the client's id, HTTP 502/504."""
        self.outcome = "upstream_error"
        self.rt.metrics.upstream_errors.labels(self.upstream, exc.reason).inc()
        self.rt.log.warning("upstream_request_failed",
                            extra={"upstream": self.upstream, "reason": exc.reason, "error": str(exc)})
        doc = jsonrpc.error_response(req.id, jsonrpc.INTERNAL_ERROR, f"upstream error: {exc}")
        await send_json(self.send, exc.http_status, doc)

    def decode_answer(self, response: UpstreamAnswer, content: bytes) -> dict[str, Any]:
        """The worker's JSON-RPC response object.

        Raises:
            UpstreamError: HTTP 5xx, or a body that is not a JSON-RPC response object.
        """
        if response.status_code >= 500:
            raise UpstreamError("status", f"worker answered HTTP {response.status_code}")
        try:
            doc = orjson.loads(content)
        except orjson.JSONDecodeError:
            raise UpstreamError("invalid_response", "worker answered with a body that is not JSON") from None
        clean = jsonrpc.clean_response(doc)
        if clean is None:
            raise UpstreamError("invalid_response", "worker answered with a non-JSON-RPC body")
        return clean

    async def answer_json(self, ex: Exchange, req: Request, response: UpstreamAnswer) -> None:
        """Judge a buffered worker answer and send it to the client (also used for a
        streaming request answered with plain JSON, F09)."""
        content = response.content
        if response.status_code in (401, 403, 404):  # may mean a changed card: re-check admission
            self.rt.card_cache(self.route.upstream).mark_stale()
        if 400 <= response.status_code < 500 and not _is_json(response):
            self.outcome = "upstream_status"
            await self._send_raw(response, content)
            return
        try:
            doc = self.decode_answer(response, content)
        except UpstreamError as exc:
            await self.fail_upstream(req, exc)
            return
        out_doc, changed = await self.judge_answer(ex, req, doc)
        headers = client_response_headers(response.headers, drop=_BODY_HEADERS)
        body = jsonrpc.dumps(out_doc) if changed else content
        await self.send({"type": "http.response.start", "status": response.status_code,
                         "headers": [*headers, *JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
        await self.send({"type": "http.response.body", "body": body})

    async def judge_answer(self, ex: Exchange, req: Request, doc: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Run the engine on a unary answer. Returns ``(document, changed)``; the document
        always carries the client's id."""
        changed = doc.get("id") != req.id or type(doc.get("id")) is not type(req.id)
        if changed:
            self.rt.count(ex, [engine.Finding("divergence", "jsonrpc_id_mismatch", str(doc.get("id")))])
        if "error" in doc:
            error = await self.rewrite_error(ex, req, doc["error"])
            if error is not doc["error"]:
                return {"jsonrpc": "2.0", "id": req.id, "error": error}, True
            self.outcome = "worker_error"
            return ({**doc, "id": req.id} if changed else doc), changed
        item = locate(doc["result"])
        self.task_id = self.task_id or item.task_id
        self.context_id = self.context_id or item.context_id
        outcome: Outcome = await self.rt.judge(ex, None, doc["result"])
        if outcome.action is Action.REJECT and outcome.error is not None:
            self.outcome = "invalid_agent_response"
            code, message = outcome.error
            return jsonrpc.error_response(req.id, code, message, version=ex.version), True
        if outcome.result is not doc["result"]:
            return {**doc, "id": req.id, "result": outcome.result}, True
        return ({**doc, "id": req.id} if changed else doc), changed

    async def rewrite_error(self, ex: Exchange, req: Request, error: Any) -> Any:
        """F05 (c) / F15: a worker error to an action on a task that is in fact terminal is
        rewritten to -32004 (messages, subscribe) or -32002 (cancel), after a GetTask to the
        worker confirms the terminal state. Otherwise the error is returned unchanged."""
        code = error.get("code") if isinstance(error, dict) else None
        if not engine.wants_terminal_probe(ex, code) or ex.task_id is None:
            return error
        _, record = await self.probe_task(ex)
        if record is None or not record.terminal:
            return error
        new_code, message = engine.terminal_error(ex, record)
        self.rt.metrics.error_rewrites.labels(self.upstream, code_label(code), code_label(new_code)).inc()
        self.outcome = "rewritten"
        return jsonrpc.error_object(new_code, message, version=ex.version, metadata={"taskId": record.task_id})

    async def forced_get(self, ex: Exchange, record: TaskRecord, reason: str) -> TaskRecord | None:
        """GetTask to the worker before acting on a task whose recorded state may be stale
        (``reason`` from :func:`~gateway.invariants.admission.forced_get_reason`). Counted in
        ``a2a_gateway_forced_get_total``; a fresh state that differs from the record is a
        ``stale_record`` divergence. Returns the fresh record."""
        self.rt.metrics.forced_gets.labels(self.upstream, reason).inc()
        _, fresh = await self.probe_task(ex)
        if fresh is not None and fresh.needs_resync:
            await self.rt.clear_resync(fresh)  # the worker did not answer with a task
            fresh = await self.rt.record_of(ex.upstream, ex.task_id)
        elif fresh is None:
            await self.rt.clear_resync(record)
        if fresh is not None and fresh.state is not record.state:
            detail = f"task {ex.task_id} recorded {record.state.value}, worker says {fresh.state.value} ({reason})"
            self.rt.count(ex, [engine.Finding("divergence", "stale_record", detail)])
        return fresh

    async def probe_task(self, ex: Exchange) -> tuple[Any, TaskRecord | None]:
        """Ask the worker ``GetTask`` for ``ex.task_id`` (same version, same client headers);
        the answer goes through the engine and the ledger.

        Returns ``(task, record)``: the Task as the client would receive it (normalized,
        corrected; ``None`` when the worker gave no task) and the stored record."""
        method = jsonrpc.TASK_GET_NAME[ex.version]
        probe = {"jsonrpc": "2.0", "id": "a2a-gateway-probe", "method": method,
                 "params": {"id": ex.task_id, "historyLength": 0}}
        try:
            response = await self._post(orjson.dumps(probe))
            doc = self.decode_answer(response, response.content)
        except UpstreamError as exc:
            self.rt.metrics.upstream_errors.labels(self.upstream, exc.reason).inc()
            return None, await self.rt.record_of(ex.upstream, ex.task_id)
        if "result" not in doc:
            return None, await self.rt.record_of(ex.upstream, ex.task_id)
        get_ex = dataclasses.replace(ex, operation=Operation.GET)
        outcome = await self.rt.judge(get_ex, None, doc["result"])
        task = outcome.result if outcome.action is Action.FORWARD else None
        return task, await self.rt.record_of(ex.upstream, ex.task_id)

    async def _send_raw(self, response: UpstreamAnswer, content: bytes) -> None:
        headers = client_response_headers(response.headers, drop=("content-length", "content-encoding"))
        await self.send({"type": "http.response.start", "status": response.status_code,
                         "headers": [*headers, (b"content-length", str(len(content)).encode())]})
        await self.send({"type": "http.response.body", "body": content})

    async def _relay_unknown(self, body: bytes, req_id: jsonrpc.JsonId) -> None:
        """A method no A2A version defines: relayed untouched (custom extension methods)."""
        try:
            response = await self._post(body)
        except UpstreamError as exc:
            self.outcome = "upstream_error"
            self.rt.metrics.upstream_errors.labels(self.upstream, exc.reason).inc()
            doc = jsonrpc.error_response(req_id, jsonrpc.INTERNAL_ERROR, f"upstream error: {exc}")
            await send_json(self.send, exc.http_status, doc)
            return
        await self._send_raw(response, response.content)


def _is_json(response: UpstreamAnswer) -> bool:
    ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return ctype == "application/json" or ctype.endswith("+json")
