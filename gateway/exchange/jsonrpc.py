"""One JSON-RPC exchange, sans I/O: admit → forward → judge the answer → respond.

Implements the JSON-RPC binding (docs/protocol.md §1.2, §3.4 and §6) and
docs/field-cases.md F05, F09, F15, F16 and F17 (b). The endpoint (gateway/proxy/jsonrpc.py)
parses the body, reads the upstream's card and builds the exchange; the driver
(gateway/proxy/driver.py) runs :meth:`JsonRpcExchange.run`, doing what each yielded command
says (docs/architecture.md, "The exchange layer"):

* card-governed admission of new tasks and capabilities (refused: -32004 / -32003, HTTP 503
  with -32603 while the card is unavailable);
* a message with ``taskId``, a cancel or a subscribe is checked against the ledger first: a
  forced ``GetTask`` only for a reason (restart, card unreachable, ETag changed, heartbeat
  gap), then -32004 / -32002 answered here for a terminal task — for a v0.3 streaming call as
  an SSE stream with one error event, the form v0.3 SDK clients read;
* the worker's answer is judged and stored before it is sent, always with the client's id;
  a worker error hiding a terminal task is rewritten after a confirming ``GetTask``;
* a worker transport failure becomes -32603 with HTTP 502/504, never an invented state;
* streaming methods continue in :class:`~gateway.exchange.stream.StreamExchange`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import MethodInfo, Operation, Request
from gateway.a2a.payloads import locate
from gateway.a2a.sse import encode_event
from gateway.a2a.version import ProtocolVersion
from gateway.errors import LedgerError, UpstreamError
from gateway.exchange.commands import Answer, Count, Found, Loaded, Log, MarkCardStale, Post, Respond
from gateway.exchange.judge import Steps, clear_resync, judge, load
from gateway.exchange.model import Policy, Summary
from gateway.exchange.stream import StreamExchange
from gateway.invariants import engine
from gateway.invariants.admission import CARD_UNAVAILABLE, CardView, admit, forced_get_reason
from gateway.invariants.model import Action, Exchange, Finding, Mode, TaskRecord


def decode_answer(answer: Answer) -> dict[str, Any]:
    """The worker's JSON-RPC response object (exactly one of ``result`` / ``error``).

    Raises:
        UpstreamError: HTTP 5xx (``status``), or a body that is not a JSON-RPC response
            object (``invalid_response``).
    """
    if answer.status >= 500:
        raise UpstreamError("status", f"worker answered HTTP {answer.status}")
    try:
        doc = orjson.loads(answer.content)
    except orjson.JSONDecodeError:
        raise UpstreamError("invalid_response", "worker answered with a body that is not JSON") from None
    clean = jsonrpc.clean_response(doc)
    if clean is None:
        raise UpstreamError("invalid_response", "worker answered with a non-JSON-RPC body")
    return clean


def same_id(doc: dict[str, Any], req: Request) -> bool:
    """True when a worker's response carries the client's id, with the same JSON type."""
    worker = doc.get("id")
    return worker == req.id and type(worker) is type(req.id)


class JsonRpcExchange:
    """One client JSON-RPC request for an A2A method, from admission to the last byte.

    Args:
        req: the parsed request; ``body`` its bytes as the client sent them (forwarded as is).
        info: the method's :class:`~gateway.a2a.jsonrpc.MethodInfo`.
        card: the upstream's card as the driver holds it now.
        policy: the settings (:class:`~gateway.exchange.model.Policy`).
    """

    def __init__(self, req: Request, body: bytes, info: MethodInfo, card: CardView,
                 policy: Policy) -> None:
        self.req = req
        self.body = body
        self.info = info
        self.card = card
        self.policy = policy
        task_id = jsonrpc.request_task_id(info, req.params)
        self.ex = Exchange(policy.upstream, info.operation, info.version, task_id, policy.mode,
                           card_etag=card.etag)
        message = req.params.get("message") if isinstance(req.params, dict) else None
        context_id = message.get("contextId") if isinstance(message, dict) else None
        self.summary = Summary(info.name, task_id=task_id,
                               context_id=context_id if isinstance(context_id, str) else None)

    def run(self) -> Generator[Any, Any, Summary]:
        """The whole exchange; returns its :class:`~gateway.exchange.model.Summary`."""
        try:
            if (yield from self._admit()) and (yield from self._admit_task_action()):
                if self.info.streaming:
                    yield from StreamExchange(self).run()
                else:
                    yield from self._unary()
        except LedgerError as exc:
            self.summary.outcome = "ledger_error"
            yield Log("error", "ledger_error", (("upstream", self.policy.upstream), ("error", str(exc))))
            yield self.error(503, jsonrpc.INTERNAL_ERROR, "gateway task ledger unavailable")
        return self.summary

    # --- answering ----------------------------------------------------------------------------

    def error(self, status: int, code: int, message: str, *, task_id: str | None = None) -> Respond:
        """A JSON-RPC error response with the client's id. A refusal of a v0.3 streaming call
        is an SSE stream with one error event: v0.3 SDK clients read nothing else on a stream
        (docs/field-cases.md F17 (b)); v1.0 clients get plain JSON, as v1.0 workers answer."""
        meta = {"taskId": task_id} if task_id else None
        doc = jsonrpc.error_response(self.req.id, code, message, version=self.ex.version,
                                     metadata=meta)
        return self.respond(status, jsonrpc.dumps(doc))

    def respond(self, status: int, body: bytes, *, relay: Answer | None = None) -> Respond:
        """A whole JSON-RPC response ``body`` in the form the client reads: for a v0.3
        streaming call answered with HTTP 200 — a refusal of the gateway's or the worker's
        own JSON answer — an SSE stream carrying it as its one event (docs/field-cases.md F17
        (b), F09); plain JSON otherwise."""
        if status == 200 and self.info.streaming and self.ex.version is ProtocolVersion.V0_3:
            return Respond(200, encode_event(body), "sse", relay)
        return Respond(status, body, "json", relay)

    def fail_upstream(self, exc: UpstreamError) -> Steps:
        """Answer a worker transport failure: -32603 with the client's id, HTTP 502/504."""
        self.summary.outcome = "upstream_error"
        yield Count("upstream_errors", (exc.reason,))
        yield Log("warning", "upstream_request_failed",
                  (("upstream", self.policy.upstream), ("reason", exc.reason), ("error", str(exc))))
        doc = jsonrpc.error_response(self.req.id, jsonrpc.INTERNAL_ERROR, f"upstream error: {exc}")
        yield Respond(exc.http_status, jsonrpc.dumps(doc))

    # --- admission ----------------------------------------------------------------------------

    def _admit(self) -> Generator[Any, Any, bool]:
        """Card-governed admission (new tasks, capabilities); answers the refusal itself."""
        p = self.policy
        refusal = admit(self.ex, self.req.params, self.card, allow_stale=p.allow_stale,
                        required_skill=p.required_skill, skill_key=p.skill_key)
        if refusal is None:
            return True
        action = "observed" if p.mode is Mode.OBSERVE else "enforced"
        yield Count("rejections", (self.info.name, refusal.reason, action))
        if p.mode is Mode.OBSERVE:
            return True
        self.summary.outcome = "not_admitted"
        status = 503 if refusal.reason == CARD_UNAVAILABLE else 200
        yield self.error(status, refusal.code, refusal.message)
        return False

    def _admit_task_action(self) -> Generator[Any, Any, bool]:
        """A message with ``taskId``, a cancel or a subscribe: check freshness (a forced
        ``GetTask`` only for a reason) and refuse it here when the task is terminal (F05).
        Only these actions read the ledger before forwarding."""
        ex = self.ex
        if not engine.is_task_action(ex):
            return True
        loaded = yield from load(self.policy, ex.task_id)
        record = loaded.record
        reason = forced_get_reason(record, self.card, needs_resync=loaded.needs_resync,
                                   now=loaded.clock.wall,
                                   heartbeat_seconds=self.policy.heartbeat_seconds)
        if reason is not None and record is not None:
            record = yield from self.forced_get(loaded, reason)
        admission = engine.check_request(ex, record)
        if admission.findings:
            yield Found(tuple(admission.findings), ex.task_id, self.info.name)
        if admission.action is not Action.REJECT or admission.error is None:
            return True
        self.summary.outcome = "rejected"
        code, message = admission.error
        yield self.error(200, code, message, task_id=ex.task_id)
        return False

    def forced_get(self, loaded: Loaded, reason: str) -> Generator[Any, Any, TaskRecord | None]:
        """``GetTask`` to the worker before acting on the task ``loaded`` holds (its record may
        be stale), counted in ``a2a_gateway_forced_get_total{reason}``; a fresh state that
        differs from the record is a ``stale_record`` divergence. The ``needs_resync`` flag is
        cleared even when the worker gives no task. Returns the fresh record."""
        record = loaded.record
        assert record is not None
        yield Count("forced_gets", (reason,))
        _, fresh = yield from self._probe(self.ex.task_id or record.task_id)
        if fresh.record is not None and fresh.needs_resync:
            yield from clear_resync(self.policy, fresh)  # the worker did not answer with a task
            fresh = yield from load(self.policy, record.task_id)
        elif fresh.record is None:
            yield from clear_resync(self.policy, loaded)
        current = fresh.record
        if current is not None and current.state is not record.state:
            detail = (f"task {record.task_id} recorded {record.state.value}, worker says "
                      f"{current.state.value} ({reason})")
            yield Found((Finding("divergence", "stale_record", detail),), record.task_id)
        return current

    def probe_task(self, task_id: str) -> Generator[Any, Any, tuple[Any, TaskRecord | None]]:
        """Ask the worker ``GetTask`` for ``task_id`` (same version, same client headers); the
        answer goes through the engine and the ledger.

        Returns ``(task, record)``: the Task as the client would receive it (normalized,
        corrected; ``None`` when the worker gave no task) and the stored record."""
        task, loaded = yield from self._probe(task_id)
        return task, loaded.record

    def _probe(self, task_id: str) -> Generator[Any, Any, tuple[Any, Loaded]]:
        """:meth:`probe_task`, returning the whole :class:`Loaded` read after it (the record
        with its ledger bookkeeping)."""
        body = jsonrpc.dumps(jsonrpc.task_get_request(task_id, self.ex.version))
        task = None
        try:
            answer = yield Post(body)
            doc = decode_answer(answer)
        except UpstreamError as exc:
            yield Count("upstream_errors", (exc.reason,))
            doc = {}
        if "result" in doc:
            get_ex = dataclasses.replace(self.ex, operation=Operation.GET, task_id=task_id)
            outcome = yield from judge(self.policy, get_ex, None, doc["result"])
            task = outcome.result if outcome.action is Action.FORWARD else None
        return task, (yield from load(self.policy, task_id))

    # --- the answer ---------------------------------------------------------------------------

    def _unary(self) -> Steps:
        try:
            answer = yield Post(self.body)
        except UpstreamError as exc:
            yield from self.fail_upstream(exc)
            return
        yield from self.answer(answer)

    def answer(self, answer: Answer) -> Steps:
        """Judge a buffered worker answer and send it to the client (also a streaming request
        answered with plain JSON, F09: as JSON, or as one SSE event for a v0.3 client)."""
        if answer.status in (401, 403, 404):  # may mean a changed card: re-check admission
            yield MarkCardStale()
        if 400 <= answer.status < 500 and not answer.json:
            self.summary.outcome = "upstream_status"
            yield Respond(answer.status, answer.content, "raw", answer)
            return
        try:
            doc = decode_answer(answer)
        except UpstreamError as exc:
            yield from self.fail_upstream(exc)
            return
        out_doc, changed = yield from self._judge_answer(doc)
        body = jsonrpc.dumps(out_doc) if changed else answer.content
        yield self.respond(answer.status, body, relay=answer)

    def client_id(self, doc: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
        """``doc`` with the client's id (F16); a worker that changed it is a
        ``jsonrpc_id_mismatch`` divergence."""
        if same_id(doc, self.req):
            return doc
        finding = Finding("divergence", "jsonrpc_id_mismatch", str(doc.get("id")))
        yield Found((finding,), self.ex.task_id)
        return {**doc, "id": self.req.id}

    def _judge_answer(self, doc: dict[str, Any]) -> Generator[Any, Any, tuple[dict[str, Any], bool]]:
        """Run the engine on a unary answer. Returns ``(document, changed)``; the document
        always carries the client's id."""
        fixed = yield from self.client_id(doc)
        changed = fixed is not doc
        if "error" in doc:
            error = yield from self.rewrite_error(doc["error"])
            if error is not doc["error"]:
                return {"jsonrpc": "2.0", "id": self.req.id, "error": error}, True
            self.summary.outcome = "worker_error"
            return fixed, changed
        item = locate(doc["result"])
        self.summary.task_id = self.summary.task_id or item.task_id
        self.summary.context_id = self.summary.context_id or item.context_id
        outcome = yield from judge(self.policy, self.ex, None, doc["result"])
        if outcome.action is Action.REJECT and outcome.error is not None:
            self.summary.outcome = "invalid_agent_response"
            code, message = outcome.error
            return jsonrpc.error_response(self.req.id, code, message, version=self.ex.version), True
        if outcome.result is not doc["result"]:
            return {**fixed, "result": outcome.result}, True
        return fixed, changed

    def rewrite_error(self, error: Any) -> Generator[Any, Any, Any]:
        """F05 (c) / F15: a worker error to an action on a task that is in fact terminal is
        rewritten to -32004 (messages, subscribe) or -32002 (cancel), after a ``GetTask`` to
        the worker confirms the terminal state. Otherwise ``error`` is returned unchanged."""
        ex = self.ex
        code = error.get("code") if isinstance(error, dict) else None
        if not engine.wants_terminal_probe(ex, code) or ex.task_id is None:
            return error
        _, record = yield from self.probe_task(ex.task_id)
        if record is None or not record.terminal:
            return error
        new_code, message = engine.terminal_error(ex, record)
        yield Count("error_rewrites", (jsonrpc.code_label(code), jsonrpc.code_label(new_code)))
        self.summary.outcome = "rewritten"
        return jsonrpc.error_object(new_code, message, version=ex.version,
                                    metadata={"taskId": record.task_id})
