"""The request side of one exchange, whatever the binding: admit → forward → judge → respond.

Implements docs/field-cases.md F05, F09, F15 and F17 (b) for every binding; the wire form of
each binding is a subclass (:class:`~gateway.exchange.jsonrpc.JsonRpcExchange`,
:class:`~gateway.exchange.rest.RestExchange`), so a task is judged by one code path however
the client reached it (docs/architecture.md, "The exchange layer"):

* card-governed admission of new tasks and capabilities (refused: -32004 / -32003, HTTP 503
  while the card is unavailable);
* a message with ``taskId``, a cancel or a subscribe is checked against the ledger first: a
  forced ``GetTask`` only for a reason (restart, card unreachable, ETag changed, heartbeat
  gap) — sent over the client's own binding, which the worker serves — then -32004 / -32002
  answered here for a terminal task, to a caller seen on the task (anyone else's request
  goes to the worker, which decides: docs/callers.md §3);
* the worker's answer is judged and stored before it is sent; a worker error hiding a
  terminal task is rewritten after a confirming ``GetTask``; an extended Agent Card is
  rewritten like the public one, never cached;
* a worker transport failure becomes a transport-class error (HTTP 502/504), never an
  invented state;
* streaming operations continue in :class:`~gateway.exchange.stream.StreamExchange`.

A subclass gives the binding's wire form: how the client's request is sent on, how an answer
and a stream event are read, how a refusal, an error and an event are written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.payloads import locate
from gateway.a2a.sse import Event
from gateway.a2a.states import TaskState, moves_on
from gateway.errors import POOL_EXHAUSTED, LedgerError, UnencodableError, UpstreamError
from gateway.exchange.commands import (
    Answer,
    AppendTimeline,
    CommandGenerator,
    Count,
    Found,
    Loaded,
    Log,
    MarkCardStale,
    Open,
    Post,
    PushBound,
    Respond,
)
from gateway.exchange import retries
from gateway.exchange.judge import clear_resync, judge, load
from gateway.exchange.model import Policy, Summary
from gateway.exchange.stream import StreamExchange
from gateway.invariants import engine
from gateway.invariants.admission import CARD_UNAVAILABLE, CardView, admit, forced_get_reason
from gateway.invariants.model import Action, Exchange, Finding, Mode, TaskRecord
from gateway.invariants.timeline import request_entry, rewrite_entry

CardRewrite = Callable[[dict[str, Any]], dict[str, Any]]
"""Rewrites an Agent Card for the client (its interface URLs to the gateway's); pure."""


def caught_up(upstream: str, record: TaskRecord, seen: TaskState, reason: str) -> CommandGenerator[None]:
    """The worker's answer to the gateway's own ``GetTask`` (a forced one, the sweep's) shows
    the task in ``seen``, not the ``record``'s state (docs/field-cases.md F22): a state the task
    came to along its lifecycle (:func:`~gateway.a2a.states.moves_on`: the gateway had not seen
    it yet) is progress, a ``task_moved_on`` debug line; anything else — a task back in
    submitted — contradicts the record: a ``stale_record`` divergence."""
    if moves_on(record.state, seen):
        yield Log("debug", "task_moved_on", (("upstream", upstream), ("task_id", record.task_id),
                                             ("recorded", record.state.value), ("state", seen.value),
                                             ("reason", reason)))
        return
    detail = f"task {record.task_id} recorded {record.state.value}, worker says {seen.value} ({reason})"
    yield Found((Finding("divergence", "stale_record", detail),), record.task_id, tenant=record.tenant)


def error_message(exc: UpstreamError) -> str:
    """The text a client reads for ``exc``: ``upstream error: …`` for a failure of the
    worker's; the capacity message as it is for ``pool_exhausted`` (it starts with
    ``gateway at capacity``: nothing went wrong upstream)."""
    return str(exc) if exc.reason == POOL_EXHAUSTED else f"upstream error: {exc}"


def retry_after(exc: UpstreamError) -> tuple[tuple[bytes, bytes], ...]:
    """The ``Retry-After`` header of the answer to ``exc`` (:attr:`Respond.headers`), if it
    has one (``pool_exhausted``)."""
    if exc.retry_after is None:
        return ()
    return ((b"retry-after", str(exc.retry_after).encode()),)


class RequestExchange:
    """One client request for an A2A operation, from admission to the last byte.

    Args:
        ex: the request as the engine sees it (:class:`~gateway.invariants.model.Exchange`).
        params: the request's parameters as JSON-RPC carries them (admission reads the message).
        summary: the request's :class:`~gateway.exchange.model.Summary` (filled in as it goes).
        card: the upstream's card as the driver holds it now.
        policy: the settings (:class:`~gateway.exchange.model.Policy`).
        rewrite_card: applied to an extended Agent Card answer (``None``: leave it).
    """

    streaming: bool = False
    last_event_id: str | None = None
    """The client's ``Last-Event-ID`` on a ``SubscribeToTask`` (set by the endpoint): the
    stream resumes after that event from the replay window (docs/resume.md §1.2)."""
    rewrite_result: Callable[[Any], Any] | None = None
    """Applied to a unary answer's judged result before it is sent (set by the endpoint: the
    push relay gives push configs back the client's webhook, docs/push.md §1)."""
    snapshot_first: bool = False
    """A ``SubscribeToTask`` whose worker does not send the current Task first (a v1.0 client
    bridged to a v0.3 worker, set by the bridge): the stream starts with the gateway's own
    ``GetTask`` snapshot (docs/bridge.md §3.2)."""
    pending_push: tuple[str, ...] = ()
    """The callback ids of the inline push configs this send carried (set by the endpoint):
    when a notification to one of them recorded the new task before the worker's answer came,
    the answer is judged as being about that task, not as a reused task id (docs/push.md §1)."""
    retry: Any = None
    """A retried send's :class:`~gateway.exchange.retries.Decision` (set by the shell,
    docs/retries.md): the first call's outcome is given back instead of forwarding."""
    unsent: bool = False
    """The worker never got the request: the connection to it could not be made (refused,
    DNS, TLS handshake; :meth:`fail_upstream`). A retry of such a send may go again
    (docs/retries.md §2)."""
    judged: Any = None
    """The judged result of a unary answer, as sent (the shell keeps a Message answer for a
    retry, docs/retries.md §2)."""

    def __init__(self, ex: Exchange, params: Any, summary: Summary, card: CardView,
                 policy: Policy, rewrite_card: CardRewrite | None = None) -> None:
        self.ex = ex
        self.params = params
        self.summary = summary
        summary.tenant = ex.tenant
        self.card = card
        self.policy = policy
        self.rewrite_card = rewrite_card

    def run(self) -> CommandGenerator[Summary]:
        """The whole exchange; returns its :class:`~gateway.exchange.model.Summary`."""
        try:
            if not (yield from self._admit()):
                pass
            elif self.retry is not None:
                yield from retries.replay(self, self.retry)
            elif self.resumes():
                assert self.last_event_id is not None
                yield from StreamExchange(self).resume(self.last_event_id)
            elif (yield from self._admit_task_action()):
                if self.streaming:
                    yield from StreamExchange(self).run()
                else:
                    yield from self._unary()
        except LedgerError as exc:
            self.summary.outcome = "ledger_error"
            yield Log("error", "ledger_error", (("upstream", self.policy.upstream), ("error", str(exc))))
            yield self.error(503, jsonrpc.INTERNAL_ERROR, "gateway task ledger unavailable")
        return self.summary

    # --- the binding's wire form (subclasses) ----------------------------------------------------

    def forward(self) -> Post:
        """The client's request as sent on to the worker."""
        raise NotImplementedError

    def open_stream(self) -> Open:
        """The client's streaming request as sent on to the worker."""
        raise NotImplementedError

    def open_upstream(self) -> CommandGenerator[Any]:
        """Open :meth:`open_stream` upstream; returns the reply (:data:`OPENED` or the
        worker's :class:`Answer`). Throws :class:`~gateway.errors.UpstreamError`."""
        return (yield self.open_stream())

    def probe_request(self, task_id: str) -> Post:
        """The gateway's own ``GetTask`` for ``task_id`` on the client's binding and version."""
        raise NotImplementedError

    def subscribe_request(self, task_id: str) -> Open:
        """The gateway's own ``SubscribeToTask`` for ``task_id`` (a resubscribe after a cut)."""
        raise NotImplementedError

    def resubscribe(self, task_id: str, reason: str | None = None) -> CommandGenerator[Any]:
        """Open :meth:`subscribe_request` upstream, each request marked with ``reason`` (the
        :class:`Open`'s); returns the reply (:data:`OPENED` or the worker's :class:`Answer`).
        Throws :class:`~gateway.errors.UpstreamError`."""
        return (yield dataclasses.replace(self.subscribe_request(task_id), reason=reason))

    def resubscribe_own(self, task_id: str) -> CommandGenerator[Any]:
        """:meth:`resubscribe`, its requests marked as the gateway's own (``reason``
        ``resubscribe``: the driver's client span says so)."""
        return (yield from self.resubscribe(task_id, "resubscribe"))

    def error(self, status: int, code: int, message: str, *, task_id: str | None = None) -> Respond:
        """A refusal of the gateway's own: A2A error ``code`` in the binding's form. ``status``
        is 200 for an A2A refusal (the binding picks its HTTP status) or 503 for "not now"."""
        raise NotImplementedError

    def own_result(self, result: Any) -> Respond:
        """A unary answer of the gateway's own carrying ``result`` (a retry's replay,
        docs/retries.md §2)."""
        raise NotImplementedError

    def transport_error(self, exc: UpstreamError) -> Respond:
        """The answer to a worker transport failure (HTTP 502/504), or to "gateway at
        capacity" (HTTP 503 with the ``Retry-After`` of :func:`retry_after`), with the text of
        :func:`error_message`."""
        raise NotImplementedError

    def decode(self, answer: Answer) -> CommandGenerator[tuple[dict[str, Any], bool]]:
        """The worker's answer as ``({"result": …} | {"error": …}, changed)``; ``changed``
        when the document differs from the bytes as sent (a fixed JSON-RPC id).

        Raises:
            UpstreamError: an answer that is no A2A answer (``status``, ``invalid_response``).
        """
        raise NotImplementedError

    def decode_own(self, answer: Answer) -> dict[str, Any]:
        """The worker's answer to a request of the gateway's own (its ``GetTask`` probe), as
        :meth:`decode` reads it but with no check that concerns the client (its id).

        Raises:
            UpstreamError: as :meth:`decode`.
        """
        raise NotImplementedError

    def error_code(self, answer: Answer, error: Any) -> object:
        """The A2A / JSON-RPC code of a worker error (for the terminal-task rewrite)."""
        raise NotImplementedError

    def reply(self, answer: Answer, doc: dict[str, Any], changed: bool, result: Any) -> Respond:
        """Relay the worker's answer ``doc`` with ``result`` (the judged one) in place."""
        raise NotImplementedError

    def reply_error(self, answer: Answer, code: int, message: str, *,
                    task_id: str | None = None) -> Respond:
        """Answer the worker's ``answer`` with A2A error ``code`` instead (a rewrite, a
        refused payload)."""
        raise NotImplementedError

    def relay_error(self, answer: Answer, doc: dict[str, Any], changed: bool) -> Respond:
        """Relay a worker's error answer as it is (``doc`` when ``changed``)."""
        raise NotImplementedError

    def event_doc(self, event: Event) -> dict[str, Any] | None:
        """One worker SSE event as ``{"result": …}`` or ``{"error": …}`` (``None``: not an
        A2A event)."""
        raise NotImplementedError

    def event_frame(self, event: Event, doc: dict[str, Any], result: Any) -> CommandGenerator[bytes]:
        """The encoded SSE frame relaying ``event`` (read as ``doc``) with ``result`` in place."""
        raise NotImplementedError

    def worker_error_frame(self, event: Event, doc: dict[str, Any]) -> bytes:
        """The encoded SSE frame relaying a worker's error event."""
        raise NotImplementedError

    def result_frame(self, result: Any, event_id: str | None = None) -> bytes:
        """An encoded SSE frame of the gateway's own carrying ``result`` (with the SSE ``id:``
        ``event_id``)."""
        raise NotImplementedError

    def error_frame(self, code: int, message: str) -> bytes:
        """An encoded ``event: error`` frame of the gateway's own."""
        raise NotImplementedError

    def snapshot(self, task: dict[str, Any]) -> Any:
        """A Task as one stream event's payload in the client's form."""
        raise NotImplementedError

    # --- answering ----------------------------------------------------------------------------

    def fail_upstream(self, exc: UpstreamError) -> CommandGenerator[None]:
        """Answer a worker transport failure: HTTP 502/504, counted
        (``upstream_errors{reason}``) and logged (``upstream_request_failed``). No pooled
        connection to the worker (``pool_exhausted``) is no failure of the worker's: "gateway
        at capacity", HTTP 503 with ``Retry-After``, outcome ``at_capacity``, logged as
        ``gateway_at_capacity``."""
        at_capacity = exc.reason == POOL_EXHAUSTED
        self.summary.outcome = "at_capacity" if at_capacity else "upstream_error"
        self.unsent = exc.reason == "connect"  # no connection: no byte of it reached the worker
        yield Count("upstream_errors", (exc.reason,))
        yield Log("warning", "gateway_at_capacity" if at_capacity else "upstream_request_failed",
                  (("upstream", self.policy.upstream), ("reason", exc.reason), ("error", str(exc))))
        yield self.transport_error(exc)

    # --- admission ----------------------------------------------------------------------------

    def forwards(self) -> bool:
        """Whether admission lets the request go on to the worker: the card admits it, or
        observe mode forwards it all the same (what the push relay's intake waits for,
        docs/push.md §1: a refused request's configs are neither checked nor stored)."""
        p = self.policy
        return p.mode is Mode.OBSERVE or admit(self.ex, self.params, self.card, allow_stale=p.allow_stale,
                                               required_skill=p.required_skill, skill_key=p.skill_key) is None

    def _admit(self) -> CommandGenerator[bool]:
        """Card-governed admission (new tasks, capabilities); answers the refusal itself."""
        p = self.policy
        refusal = admit(self.ex, self.params, self.card, allow_stale=p.allow_stale,
                        required_skill=p.required_skill, skill_key=p.skill_key)
        if refusal is None:
            return True
        action = "observed" if p.mode is Mode.OBSERVE else "enforced"
        yield Count("rejections", (self.summary.method, refusal.reason, action))
        if p.mode is Mode.OBSERVE:
            return True
        self.summary.outcome = "not_admitted"
        status = 503 if refusal.reason == CARD_UNAVAILABLE else 200
        yield self.error(status, refusal.code, refusal.message)
        return False

    def resumes(self) -> bool:
        """True for a ``SubscribeToTask`` / ``tasks/resubscribe`` with ``Last-Event-ID`` while
        the replay window is on (docs/resume.md §1.2)."""
        return (self.last_event_id is not None and self.policy.replay and self.streaming
                and self.ex.operation is Operation.SUBSCRIBE and bool(self.ex.task_id))

    def fresh_record(self) -> CommandGenerator[TaskRecord | None]:
        """The ledger's record of the task the request names, after a forced ``GetTask`` when
        there is a reason to doubt it (:func:`~gateway.invariants.admission.forced_get_reason`)."""
        loaded = yield from load(self.policy, self.ex.task_id, self.ex.tenant)
        record = loaded.record
        reason = forced_get_reason(record, self.card, needs_resync=loaded.needs_resync,
                                   now=loaded.clock.wall,
                                   heartbeat_seconds=self.policy.heartbeat_seconds)
        if reason is not None and record is not None:
            record = yield from self.forced_get(loaded, reason)
        if record is not None:  # the log line names the task's context even when the client did not
            self.summary.context_id = self.summary.context_id or record.context_id
        return record

    def _admit_task_action(self) -> CommandGenerator[bool]:
        """A message with ``taskId``, a cancel or a subscribe: check freshness (a forced
        ``GetTask`` only for a reason) and refuse it here when the task is terminal (F05).
        Only these actions read the ledger before forwarding."""
        if not engine.is_task_action(self.ex):
            return True
        record = yield from self.fresh_record()
        return (yield from self.refuse_task_action(record))

    def refuse_task_action(self, record: TaskRecord | None) -> CommandGenerator[bool]:
        """Check the task action against ``record`` (:func:`~gateway.invariants.engine.check_request`)
        and answer a refusal itself (-32004 / -32002 for a terminal task, F05). True when the
        action may go on."""
        ex = self.ex
        admission = engine.check_request(ex, record)
        if admission.action is Action.REJECT and record is not None \
                and not (yield from self.may_answer_locally(record)):
            return True  # not this caller's task as far as the gateway knows: the worker decides
        if admission.findings:
            yield Found(tuple(admission.findings), ex.task_id, self.summary.method, tenant=ex.tenant)
        entry = request_entry(ex, record, admission)
        if entry is not None and ex.task_id is not None:
            yield AppendTimeline(ex.task_id, entry, ex.tenant)
        if admission.action is not Action.REJECT or admission.error is None:
            return True
        self.summary.outcome = "rejected"
        code, message = admission.error
        yield self.error(200, code, message, task_id=ex.task_id)
        return False

    def may_answer_locally(self, record: TaskRecord) -> CommandGenerator[bool]:
        """True when an answer built from ``record`` may go to this request's caller
        (:func:`~gateway.invariants.engine.caller_seen`, docs/callers.md §3). Otherwise the
        skipped local answer is counted
        (``a2a_gateway_local_answer_skipped_total{reason="unknown_caller"}``) and logged with
        the task id, and the request goes to the worker."""
        if engine.caller_seen(self.ex, record):
            return True
        yield Count("local_answer_skipped", ("unknown_caller",))
        yield Log("info", "local_answer_skipped", (("upstream", self.policy.upstream),
                                                   ("task_id", record.task_id),
                                                   ("reason", "unknown_caller")))
        return False

    def forced_get(self, loaded: Loaded, reason: str) -> CommandGenerator[TaskRecord | None]:
        """``GetTask`` to the worker before acting on the task ``loaded`` holds (its record may
        be stale), counted in ``a2a_gateway_forced_get_total{reason}``; a fresh state that
        differs from the record is progress or a ``stale_record`` divergence (:func:`caught_up`).
        The ``needs_resync`` flag is cleared even when the worker gives no task. Returns the
        fresh record."""
        record = loaded.record
        assert record is not None
        yield Count("forced_gets", (reason,))
        _, fresh = yield from self._probe(self.ex.task_id or record.task_id, reason)
        if fresh.record is not None and fresh.needs_resync:
            yield from clear_resync(self.policy, fresh)  # the worker did not answer with a task
            fresh = yield from load(self.policy, record.task_id, self.ex.tenant)
        elif fresh.record is None:
            yield from clear_resync(self.policy, loaded)
        current = fresh.record
        if current is not None and current.state is not record.state:
            yield from caught_up(self.policy.upstream, record, current.state, reason)
        return current

    def probe_task(self, task_id: str, reason: str = "probe") -> CommandGenerator[tuple[Any, TaskRecord | None]]:
        """Ask the worker ``GetTask`` for ``task_id`` (same binding and version, same client
        headers) for ``reason`` (``upstream_eof``, ``worker_error``…: the request's span and
        the task's timeline say why); the answer goes through the engine and the ledger.

        Returns ``(task, record)``: the Task as the client would receive it (normalized,
        corrected; ``None`` when the worker gave no task) and the stored record."""
        task, loaded = yield from self._probe(task_id, reason)
        return task, loaded.record

    def _probe(self, task_id: str, reason: str) -> CommandGenerator[tuple[Any, Loaded]]:
        """:meth:`probe_task`, returning the whole :class:`Loaded` read after it (the record
        with its ledger bookkeeping)."""
        task = None
        try:
            answer = yield dataclasses.replace(self.probe_request(task_id), reason=reason)
            doc = self.decode_own(answer)
        except UpstreamError as exc:
            yield Count("upstream_errors", (exc.reason,))
            doc = {}
        if "result" in doc:
            get_ex = dataclasses.replace(self.ex, operation=Operation.GET, task_id=task_id)
            outcome = yield from judge(self.policy, get_ex, None, doc["result"], direction="probe",
                                       forced_get=reason)
            task = outcome.result if outcome.action is Action.FORWARD else None
        return task, (yield from load(self.policy, task_id, self.ex.tenant))

    # --- the answer ---------------------------------------------------------------------------

    def _unary(self) -> CommandGenerator[None]:
        try:
            answer = yield self.forward()
        except UpstreamError as exc:
            yield from self.fail_upstream(exc)
            return
        yield from self.answer(answer)

    def answer(self, answer: Answer) -> CommandGenerator[None]:
        """Judge a buffered worker answer and send it to the client (also a streaming request
        answered with plain JSON, F09)."""
        if answer.status in (401, 403) or (answer.status == 404 and not answer.json):
            yield MarkCardStale()  # may mean a changed card (a REST 404 in JSON is TaskNotFound)
        if 400 <= answer.status < 500 and not answer.json:
            self.summary.outcome = "upstream_status"
            yield Respond(answer.status, answer.content, "raw", answer)
            return
        try:
            doc, changed = yield from self.decode(answer)
        except UpstreamError as exc:
            yield from self.fail_upstream(exc)
            return
        if "error" in doc:
            rewrite = yield from self.rewrite_error(self.error_code(answer, doc["error"]))
            if rewrite is None:
                self.summary.outcome = "worker_error"
                yield self._encodable(answer, lambda: self.relay_error(answer, doc, changed))
            else:
                code, message, task_id = rewrite
                yield self.reply_error(answer, code, message, task_id=task_id)
            return
        result = doc["result"]
        item = locate(result)
        self.summary.task_id = self.summary.task_id or item.task_id
        self.summary.context_id = self.summary.context_id or item.context_id
        if self.pending_push and item.task_id and self.ex.task_id is None:
            yield from self.adopt_pushed_task(item.task_id)
        outcome = yield from judge(self.policy, self.ex, None, result)
        if outcome.action is Action.REJECT and outcome.error is not None:
            self.summary.outcome = "invalid_agent_response"
            yield self.reply_error(answer, *outcome.error)
            return
        judged = outcome.result
        if self.ex.operation is Operation.EXTENDED_CARD and self.rewrite_card is not None \
                and isinstance(judged, dict):
            judged = self.rewrite_card(judged)
        if self.rewrite_result is not None:
            judged = self.rewrite_result(judged)
        self.judged = judged
        yield self._encodable(answer, lambda: self.reply(answer, doc, changed, judged))

    def adopt_pushed_task(self, task_id: str) -> CommandGenerator[bool]:
        """The worker's answer (or first stream event) names ``task_id``: when this send's
        inline push configs are bound to it already (:attr:`pending_push`: a notification
        recorded the task first, docs/push.md §1.3), the exchange is about that task from now
        on. True when it is."""
        try:
            bound = yield PushBound(self.pending_push)
        except LedgerError:
            return False
        if task_id not in bound:
            return False
        self.ex = dataclasses.replace(self.ex, task_id=task_id)
        return True

    def _encodable(self, answer: Answer, respond: Callable[[], Respond]) -> Respond:
        """``respond()``, or — when the worker's payload, once changed, is nested too deeply
        to write — a refusal as an invalid agent response (-32006), never a 500."""
        try:
            return respond()
        except UnencodableError as exc:
            self.summary.outcome = "invalid_agent_response"
            return self.reply_error(answer, jsonrpc.INVALID_AGENT_RESPONSE, f"worker answer refused: {exc}")

    def rewrite_error(self, code: object) -> CommandGenerator[tuple[int, str, str] | None]:
        """F05 (c) / F15: a worker error (A2A ``code``) to an action on a task that is in fact
        terminal is rewritten to -32004 (messages, subscribe) or -32002 (cancel), after a
        ``GetTask`` to the worker confirms the terminal state. Returns ``(code, message,
        task_id)`` of the rewrite, or ``None`` to relay the worker's error."""
        ex = self.ex
        if not engine.wants_terminal_probe(ex, code) or ex.task_id is None:
            return None
        _, record = yield from self.probe_task(ex.task_id, "worker_error")
        if record is None or not record.terminal or not (yield from self.may_answer_locally(record)):
            return None
        new_code, message = engine.terminal_error(ex, record)
        yield Count("error_rewrites", (jsonrpc.code_label(code), jsonrpc.code_label(new_code)))
        yield AppendTimeline(record.task_id, rewrite_entry(ex, record, code, new_code, message), ex.tenant)
        self.summary.outcome = "rewritten"
        return new_code, message, record.task_id
