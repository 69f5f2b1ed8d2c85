"""The SSE side of a streaming exchange, sans I/O (``SendStreamingMessage``,
``message/stream``, ``SubscribeToTask``, ``tasks/resubscribe``).

Implements docs/protocol.md §7 and §11 pitfalls 5-7 and docs/field-cases.md F03, F04, F06,
F08, F09 and F17 (a):

* the worker's stream is decoded as it is read and relayed event by event — each event
  parsed once, judged, stored, then queued in the client's binding's form (JSON-RPC: with the
  client's id; the worker's own ``data`` text when nothing changed); the events of one read go out in one write (:class:`Flush`);
  comments (pings) are relayed, and on the task's own stream they count as a sign of life;
* after a terminal event the client's stream ends at once; in enforce mode the worker's stream
  is then read on for ``drain_seconds`` so late events are counted, never delivered; a v0.3
  stream also ends after an interrupted status (it carries ``final: true``);
* a non-JSON event, an event over ``max_event_bytes`` or a refused payload ends the stream
  with an error event (``event: error``) in the binding's error form; a ledger failure the
  same (-32603);
* an event for another task or context is dropped; when the worker's stream ends and every
  event it sent was dropped so (nothing reached the client), the client gets that refusal as
  an error event — the -32006 a unary answer would get — never an empty stream;
* a bridged ``SubscribeToTask`` whose worker's version does not send the Task first (a v1.0
  client of a v0.3 worker, docs/bridge.md §3.2) gets the gateway's own ``GetTask`` snapshot as
  its first event, judged and stored like any probe (a terminal task refuses the subscribe);
  the worker's own snapshot, when it sends one in the same state, is not repeated;
* a streaming request answered with plain JSON is answered as that JSON (F09), or for a
  v0.3 client as one SSE event carrying it (F17 (b));
* a worker stream that ends before its task did (F08 (ii)) is never passed off as finished:
  ``GetTask`` first; a terminal task is sent as a last snapshot, otherwise the gateway
  resubscribes and drops the repeated snapshot the new stream starts with — at most
  ``resubscribe_attempts`` times with doubling backoff, then a -32603 error event;
* with the replay window on (docs/resume.md §1), every event delivered for a task is added to
  the task's window before it is queued and carries the gateway's event id as its SSE ``id:``
  (the worker's own ids are not relayed); a ``SubscribeToTask`` with ``Last-Event-ID``
  (:meth:`StreamExchange.resume`) gets the window's later events first, then the live stream.

Keep-alive comments to the client, the client's disconnect and the shutdown deadline are the
driver's: they decide nothing about a task.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Protocol

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.bridge import dialect_of
from gateway.a2a.payloads import Item, Kind, generation_of, locate
from gateway.a2a.sse import Comment, Event, SSEDecoder, encode_comment
from gateway.a2a.states import TaskState, normalize_state
from gateway.a2a.version import ProtocolVersion
from gateway.errors import (
    POOL_EXHAUSTED,
    EventTooLargeError,
    LedgerError,
    NestingTooDeepError,
    UnencodableError,
    UnknownStateError,
    UpstreamError,
)
from gateway.exchange import window
from gateway.exchange.commands import (
    ENDED,
    OPENED,
    Answer,
    AppendEvent,
    CommandGenerator,
    Count,
    Deadline,
    Degraded,
    Emit,
    EndStream,
    Flush,
    Log,
    Open,
    Read,
    ReadWindow,
    Sleep,
    StartStream,
)
from gateway.exchange.judge import judge, load, touch
from gateway.exchange.model import Policy, Summary
from gateway.invariants.model import Action, Exchange, Mode, Outcome, StreamState, TaskRecord
from gateway.records import Replay


class RequestSide(Protocol):
    """What the stream side uses of the exchange that owns it: the binding's request side
    (:class:`~gateway.exchange.request.RequestExchange`), which also knows the binding's
    wire form of requests, events and errors."""

    ex: Exchange
    policy: Policy
    summary: Summary
    pending_push: tuple[str, ...]
    snapshot_first: bool
    """A subscribe whose worker does not send the current Task first: the gateway's own
    ``GetTask`` snapshot goes first (docs/bridge.md §3.2)."""

    def open_stream(self) -> Open: ...

    def open_upstream(self) -> CommandGenerator[Any]: ...

    def resubscribe_own(self, task_id: str) -> CommandGenerator[Any]: ...

    def fail_upstream(self, exc: UpstreamError) -> CommandGenerator[None]: ...

    def fresh_record(self) -> CommandGenerator[TaskRecord | None]: ...

    def refuse_task_action(self, record: TaskRecord | None) -> CommandGenerator[bool]: ...

    def may_answer_locally(self, record: TaskRecord) -> CommandGenerator[bool]: ...

    def answer(self, answer: Answer) -> CommandGenerator[None]: ...

    def adopt_pushed_task(self, task_id: str) -> CommandGenerator[bool]: ...

    def probe_task(self, task_id: str, reason: str = "probe") -> CommandGenerator[tuple[Any, TaskRecord | None]]: ...

    def error(self, status: int, code: int, message: str, *, task_id: str | None = None) -> Any: ...

    def event_doc(self, event: Event) -> dict[str, Any] | None:
        """The event as ``{"result": …}`` / ``{"error": …}``, ``None`` when it is no A2A
        stream response; raises :class:`~gateway.errors.NestingTooDeepError`."""
        ...

    def event_frame(self, event: Event, doc: dict[str, Any], result: Any) -> CommandGenerator[bytes]: ...

    def worker_error_frame(self, event: Event, doc: dict[str, Any]) -> bytes: ...

    def result_frame(self, result: Any, event_id: str | None = None) -> bytes: ...

    def error_frame(self, code: int, message: str) -> bytes: ...

    def snapshot(self, task: dict[str, Any]) -> Any: ...


_V03 = ProtocolVersion.V0_3
_READ, _FLUSH = Read(), Flush()  # field-less commands: one instance each
_REFUSED = object()  # a subscribe refused before its stream (StreamExchange._subscribe_snapshot)


class Next(enum.Enum):
    """What the relay does after an event or a read."""

    CONTINUE = "continue"
    CLOSE_AND_DRAIN = "close_and_drain"  # terminal event delivered
    CLOSE = "close"  # error event sent, or a normal end
    CUT = "cut"  # the worker's stream ended (EOF or reset) without a terminal event


class StreamExchange:
    """Relays the worker's SSE stream(s) for one streaming request of ``owner``."""

    def __init__(self, owner: RequestSide) -> None:
        self.owner = owner
        self.policy = owner.policy
        self.ex = owner.ex
        self.summary = owner.summary
        self.stream = StreamState(task_id=owner.ex.task_id)
        self.decoder = SSEDecoder(self.policy.max_event_bytes)
        self._backlog: list[Event | Comment] = []
        self._last_state: TaskState | None = None
        self._skip_snapshot: TaskState | None = None
        self._cut_error: str | None = None
        self._message_reply = False  # the stream began with a Message: that is the whole reply
        self.lineage: str | None = None  # the replay window lineage of this client stream
        self.dialect = dialect_of(owner.ex.version, owner.ex.binding)
        self._appended: str | None = None  # the window id the judge's store gave the event
        self._delivered = False  # an event (or an error event) went to the client
        self._refusal: tuple[int, str] | None = None  # the first event dropped as refused, its error

    def run(self) -> CommandGenerator[None]:
        """Open the upstream stream and relay it; answers JSON when the worker did."""
        snapshot: Any = None  # (task, record) to send first, once the worker's stream is open
        if self.owner.snapshot_first and self.ex.task_id:
            snapshot = yield from self._subscribe_snapshot(self.ex.task_id)
            if snapshot is _REFUSED:
                return
        try:
            reply = yield from self.owner.open_upstream()
        except UpstreamError as exc:
            yield from self.owner.fail_upstream(exc)
            return
        if isinstance(reply, Answer):
            yield from self.owner.answer(reply)
            return
        self.summary.close_reason = "upstream_closed"
        yield StartStream()
        first = None if snapshot is None else self._send_snapshot(*snapshot)
        nxt = yield from self._pump_upstreams(first)
        yield EndStream()
        if nxt is Next.CLOSE_AND_DRAIN and self.ex.mode is Mode.ENFORCE:
            yield from self._drain()

    def resume(self, after: str) -> CommandGenerator[None]:
        """A ``SubscribeToTask`` / ``tasks/resubscribe`` with ``Last-Event-ID: after``
        (docs/resume.md §1.2). The task's window after ``after`` (in its lineage) goes out
        first, with its ids, then the live stream in the same lineage; an id the window does
        not hold is a gap (counted, logged): the task's snapshot (a ``GetTask``) goes out first
        instead, and the repeated snapshot the worker's stream starts with is dropped. A task
        the ledger holds terminal is answered from the window alone (and a ``GetTask`` snapshot
        when the window ends before its terminal event), never subscribed upstream. A task the
        gateway has no record of, or whose record has not seen this caller (docs/callers.md
        §3), is subscribed as without the header."""
        task_id = self.ex.task_id
        assert task_id is not None
        try:
            replay: Replay = yield ReadWindow(task_id, after, self.ex.tenant)
        except LedgerError:
            if not self.policy.fail_open:
                raise
            yield Count("unchecked")  # no window to read: relayed as without the header
            yield from self.run()
            return
        record = yield from self.owner.fresh_record()
        if record is None or not (yield from self.owner.may_answer_locally(record)):
            yield from self.run()  # no record, or not this caller's: as without the header
            return
        if record.terminal and replay.found and not replay.events:
            # the client had the last event of its stream: a subscribe to a terminal task,
            # refused as without the header (an EventSource's reconnect ends here)
            if (yield from self.owner.refuse_task_action(record)):
                yield from self.run()
            return
        if record.terminal:
            self.summary.close_reason = "terminal"
            yield StartStream()
            yield from self._pump_upstreams(self._replay(replay, after), live=False)
            yield EndStream()
            return
        try:
            reply = yield from self.owner.open_upstream()
        except UpstreamError as exc:
            yield Count("upstream_errors", (exc.reason,))
            reply = exc
        # the replay goes out whatever the worker answered: a subscription it refused is then
        # handled as a stream cut before its task ended (probe, terminal snapshot or resubscribe)
        self.summary.close_reason = "upstream_closed"
        yield StartStream()
        nxt = yield from self._pump_upstreams(self._replay(replay, after), refused=None if reply is OPENED else reply)
        yield EndStream()
        if nxt is Next.CLOSE_AND_DRAIN and self.ex.mode is Mode.ENFORCE:
            yield from self._drain()

    def attach(self, task_id: str) -> CommandGenerator[None]:
        """A retried ``SendStreamingMessage`` / ``message/stream`` whose first call's task is
        ``task_id`` (docs/retries.md §2): the task's snapshot (a ``GetTask`` to the worker,
        judged and stored as every probe), then — while the task is not terminal — the live
        events of a ``SubscribeToTask`` of the gateway's own, the worker's repeated snapshot
        dropped. Never a second send: a task the worker no longer gives is an error (-32603)."""
        self.ex = dataclasses.replace(self.ex, task_id=task_id)
        self.stream = dataclasses.replace(self.stream, task_id=task_id)
        task, record = yield from self.owner.probe_task(task_id, "retry")
        if not isinstance(task, dict):
            self.summary.outcome = "stream_error"
            yield self.owner.error(200, jsonrpc.INTERNAL_ERROR,
                                   f"task {task_id} of the first request could not be read from the agent",
                                   task_id=task_id)
            return
        if record is not None and record.terminal:
            self.summary.close_reason = "terminal"
            yield StartStream()
            yield from self._send_snapshot(task, record)
            yield EndStream()
            return
        try:
            reply = yield from self.owner.resubscribe_own(task_id)
        except UpstreamError as exc:
            yield Count("upstream_errors", (exc.reason,))
            reply = exc
        if reply is OPENED:
            self.decoder = SSEDecoder(self.policy.max_event_bytes)
        self.summary.close_reason = "upstream_closed"
        yield StartStream()
        nxt = yield from self._pump_upstreams(self._send_snapshot(task, record),
                                              refused=None if reply is OPENED else reply)
        yield EndStream()
        if nxt is Next.CLOSE_AND_DRAIN and self.ex.mode is Mode.ENFORCE:
            yield from self._drain()

    def _replay(self, replay: Replay, after: str) -> CommandGenerator[None]:
        """Send the window's events of ``replay`` (or, for a gap, the task's snapshot)."""
        task_id = self.stream.task_id
        assert task_id is not None
        events = None
        if replay.found:
            try:
                events = [(e.event_id, *window.decode(e.payload, self.dialect, self.policy.max_json_depth + 1))
                          for e in replay.events]
            except ValueError:
                events = None
        if events is None:
            yield Count("resumes", ("gap",))
            yield Log("warning", "replay_gap", (("upstream", self.policy.upstream), ("task_id", task_id),
                                                ("last_event_id", after[:128])))
            yield from self._probe_snapshot(task_id)
            return
        yield Count("resumes", ("resumed",))
        if events:
            yield Count("replayed_events", (), len(events))
        self.lineage = replay.lineage
        for event_id, result, terminal in events:
            yield Emit(self.owner.result_frame(result, event_id))
            self._delivered = True
            self.summary.events += 1
            if terminal:
                self.stream = dataclasses.replace(self.stream, terminal=True)
                return
            item = locate(result)
            state = self._state_of(item)
            if state is not None and state is not TaskState.UNSPECIFIED:
                self._last_state = state
        if not self.stream.terminal:
            record = (yield from load(self.policy, task_id, self.ex.tenant)).record
            if record is not None and record.terminal:  # the window ends before the terminal event
                yield from self._probe_snapshot(task_id)

    def _subscribe_snapshot(self, task_id: str) -> CommandGenerator[Any]:
        """The current Task a subscribe starts with when its worker does not send it first
        (docs/bridge.md §3.2): a ``GetTask`` to the worker, judged and stored as every probe.
        Returns ``(task, record)`` to send once the worker's stream is open; ``None`` to go on
        without one (the worker gave no task, or a terminal task that is not this caller's to
        refuse, or observe mode); :data:`_REFUSED` when a terminal task was refused here."""
        yield Count("forced_gets", ("subscribe_snapshot",))
        task, record = yield from self.owner.probe_task(task_id, "subscribe_snapshot")
        if record is not None and record.terminal:
            if not (yield from self.owner.refuse_task_action(record)):
                return _REFUSED  # -32004, as for a task the ledger held as terminal (F05)
            return None  # the worker decides, as without the snapshot
        return (task, record) if isinstance(task, dict) else None

    def _probe_snapshot(self, task_id: str) -> CommandGenerator[None]:
        """``GetTask`` the task and send it as one event (in the window); the worker's own
        snapshot at the start of the live stream is then dropped when its state is the same."""
        task, record = yield from self.owner.probe_task(task_id, "resume_snapshot")
        if not isinstance(task, dict):
            yield self._error_event(jsonrpc.INTERNAL_ERROR, f"task {task_id}: the worker gave no task to resume from")
            self.stream = dataclasses.replace(self.stream, terminal=True)  # nothing more to send
            return
        yield from self._send_snapshot(task, record)

    def _send_snapshot(self, task: dict[str, Any], record: TaskRecord | None) -> CommandGenerator[None]:
        """Send the probed ``task`` as one event (in the window); the worker's own snapshot at
        the start of its stream is then dropped when its state is the same."""
        terminal = record is not None and record.terminal
        result = yield from self._emit_snapshot(task, terminal)
        if result is None:
            self.stream = dataclasses.replace(self.stream, terminal=True)
            return
        self.summary.events += 1
        if terminal:
            self.stream = dataclasses.replace(self.stream, terminal=True)
            return
        state = self._state_of(locate(result))
        if state is not None and state is not TaskState.UNSPECIFIED:
            self._last_state = self._skip_snapshot = state
        generation = generation_of(task)
        if generation is not None:  # the live stream's snapshot is new only past this one
            self.stream = dataclasses.replace(self.stream, generation=generation)

    def _emit_snapshot(self, task: dict[str, Any], terminal: bool) -> CommandGenerator[Any]:
        """Send the worker's Task (judged) as one event of the gateway's own, in the window
        first; its payload, or ``None`` when it could not be written (an error event went
        instead)."""
        try:
            result = self.owner.snapshot(task)
            event_id = yield from self._append(result, terminal)
            yield Emit(self.owner.result_frame(result, event_id))
            self._delivered = True
        except UnencodableError as exc:
            yield self._error_event(jsonrpc.INVALID_AGENT_RESPONSE, f"worker task refused: {exc}")
            return None
        return result

    def _append(self, result: Any, terminal: bool) -> CommandGenerator[str | None]:
        """Add ``result`` (about to be delivered) to the task's replay window; its event id,
        ``None`` with the window off, for a payload of no task, or (``fail_open``) when the
        ledger failed.

        Raises:
            LedgerError: the ledger failed and ``policy.fail_open`` is off.
            UnencodableError: ``result`` is nested too deeply to store.
        """
        task_id = self.stream.task_id
        if not self.policy.replay or task_id is None:
            return None
        payload = window.encode(result, self.dialect, terminal)
        try:
            event_id, self.lineage = yield AppendEvent(task_id, self.lineage, payload, self.ex.tenant)
        except LedgerError:
            if not self.policy.fail_open:
                raise
            yield Count("unchecked")
            return None
        return str(event_id)

    def _finish(self) -> None:
        self.summary.task_id = self.summary.task_id or self.stream.task_id
        self.summary.context_id = self.summary.context_id or self.stream.context_id

    def _pump_upstreams(self, first: CommandGenerator[Any] | None = None, *, live: bool = True,
                        refused: Answer | UpstreamError | None = None) -> CommandGenerator[Next]:
        """Relay the worker's stream(s) (after ``first``, a resume's replay; with ``live``
        off, only that; ``refused``: the worker did not open the resumed subscription)."""
        attempt = 0
        try:
            if first is not None:
                yield from first
                if self.stream.terminal or not live:
                    return Next.CLOSE
                yield _FLUSH
            if isinstance(refused, UpstreamError) and refused.reason == POOL_EXHAUSTED:
                # nothing went wrong upstream: the gateway is at capacity; retrying would only wait
                # on the pool again (the error event says so, as a refused request would)
                yield self._error_event(jsonrpc.INTERNAL_ERROR, str(refused))
                return Next.CLOSE
            if refused is not None:
                self._cut_error = (f"upstream error: {refused}" if isinstance(refused, UpstreamError)
                                   else f"worker answered the subscription with HTTP {refused.status}")
                nxt = yield from self._after_cut(attempt)
                if nxt is not Next.CONTINUE:
                    return nxt
                attempt += 1
            while True:
                nxt = yield from self._pump_one()
                if nxt is not Next.CUT:
                    return nxt
                if self._refusal is not None and not self._delivered:
                    # every event of the worker's stream was refused: say so, as a unary answer would
                    self.summary.close_reason = "refused"
                    yield self._error_event(*self._refusal)
                    self.summary.outcome = "invalid_agent_response"
                    return Next.CLOSE
                yield _FLUSH
                nxt = yield from self._after_cut(attempt)
                if nxt is not Next.CONTINUE:
                    return nxt
                attempt += 1
        except LedgerError as exc:
            yield Log("error", "ledger_error", (("upstream", self.policy.upstream), ("error", str(exc))))
            yield self._error_event(jsonrpc.INTERNAL_ERROR, "gateway task ledger unavailable")
            return Next.CLOSE
        finally:
            self._finish()

    def _pump_one(self) -> CommandGenerator[Next]:
        """Relay one upstream response until it ends or the stream must close: the items of
        each read are judged and stored in order, their frames queued, then flushed in one
        write. (One generator level for the whole read: it runs per SSE event.)"""
        while True:
            try:
                chunk = yield _READ
            except UpstreamError as err:
                yield Count("upstream_errors", (err.reason,))
                self._cut_error = f"upstream error: {err}"
                return Next.CUT
            if chunk is ENDED:
                break
            try:
                items = self.decoder.feed(chunk)
            except EventTooLargeError as exc:
                yield Count("upstream_errors", ("event_too_large",))
                yield self._error_event(jsonrpc.INVALID_AGENT_RESPONSE, str(exc))
                return Next.CLOSE
            for index, item in enumerate(items):
                if type(item) is Comment:
                    yield Emit(encode_comment(item.text))
                    if self.stream.task_id is not None:  # a ping on the task's own stream: alive
                        yield from touch(self.stream.task_id, self.ex.tenant)
                    continue
                nxt = yield from self._on_event(item)
                if nxt is not Next.CONTINUE:
                    self._backlog = items[index + 1 :]
                    return nxt  # what is queued goes out with the end of the stream
            yield _FLUSH
        nxt = yield from self._at_eof()
        return Next.CUT if nxt is Next.CONTINUE else nxt

    def _at_eof(self) -> CommandGenerator[Next]:
        """The worker closed the stream. A dangling last frame (no closing blank line) is
        used only when it is complete JSON, so the client gets exactly one copy (F08 (i))."""
        if not self.decoder.has_pending:
            return Next.CONTINUE
        event = self.decoder.flush()
        if event is not None:
            try:
                orjson.loads(event.data)
            except orjson.JSONDecodeError:
                event = None
        if event is None:
            yield Count("upstream_errors", ("truncated_stream",))
            yield self._error_event(jsonrpc.INTERNAL_ERROR, "upstream stream ended in the middle of an event")
            return Next.CLOSE
        return (yield from self._on_event(event))

    def _after_cut(self, attempt: int) -> CommandGenerator[Next]:
        """The worker's stream ended before its task did (F08 (ii)): probe, then a terminal
        snapshot or a resubscribe, bounded by ``resubscribe_attempts``."""
        task_id = self.stream.task_id
        if task_id is None or self.stream.terminal or self._message_reply:
            if self._cut_error is not None:  # nothing to resume: say why the stream ended
                yield self._error_event(jsonrpc.INTERNAL_ERROR, self._cut_error)
            # a direct Message (the whole reply, docs/protocol.md §7, also to a message naming
            # an existing task), or already ended: a normal close
            return Next.CLOSE
        record = (yield from load(self.policy, task_id, self.ex.tenant)).record
        if record is not None and record.state.is_interrupted:
            return Next.CLOSE  # workers close streams on interrupted states (docs/protocol.md §7)
        p = self.policy
        yield Degraded("stream_lost", 1)
        while attempt < p.resubscribe_attempts:
            if attempt:
                yield Sleep(p.resubscribe_backoff_seconds * 2 ** (attempt - 1))
            attempt += 1
            yield Count("forced_gets", ("upstream_eof",))
            task, record = yield from self.owner.probe_task(task_id, "upstream_eof")
            if record is not None and record.terminal and isinstance(task, dict):
                yield from self._emit_snapshot(task, True)
                self.stream = dataclasses.replace(self.stream, terminal=True)
                yield from self._done_after_cut("terminal_snapshot")
                return Next.CLOSE
            if (yield from self._resubscribe(task_id)):
                yield from self._done_after_cut("resubscribed")
                return Next.CONTINUE
        yield from self._done_after_cut("gave_up")
        yield self._error_event(jsonrpc.INTERNAL_ERROR,
                                f"upstream stream of task {task_id} was lost and could not be resumed")
        return Next.CLOSE

    def _done_after_cut(self, outcome: str) -> CommandGenerator[None]:
        yield Count("resubscribes", (outcome,))
        yield Degraded("stream_lost", 0)
        yield Log("warning", "stream_cut", (("upstream", self.policy.upstream), ("outcome", outcome),
                                            ("task_id", self.stream.task_id)))

    def _resubscribe(self, task_id: str) -> CommandGenerator[bool]:
        """Open ``SubscribeToTask`` upstream for the stream's task; True when it streams."""
        try:
            reply = yield from self.owner.resubscribe_own(task_id)
        except UpstreamError:
            return False
        if isinstance(reply, Answer):
            return False
        self.decoder = SSEDecoder(self.policy.max_event_bytes)
        self._skip_snapshot = self._last_state
        self._cut_error = None
        return True

    def _on_event(self, event: Event, *, deliver: bool = True) -> CommandGenerator[Next]:
        reason, problem = "invalid_response", "worker sent an SSE event that is not an A2A stream response"
        try:
            doc = self.owner.event_doc(event)
        except NestingTooDeepError as exc:
            doc, reason, problem = None, "nesting_too_deep", f"worker event refused: {exc}"
        if doc is None:
            yield Count("upstream_errors", (reason,))
            if deliver:
                yield self._error_event(jsonrpc.INVALID_AGENT_RESPONSE, problem)
            return Next.CLOSE
        self.summary.events += 1
        if "error" in doc:
            yield Count("sse_events", ("error",))
            self.summary.outcome = "worker_error"
            if deliver:
                if self.policy.replay and event.id is not None:  # ids on this stream are the gateway's
                    event = Event(event.data, event.event, None, event.retry)
                try:
                    yield Emit(self.owner.worker_error_frame(event, doc))
                    self._delivered = True
                except UnencodableError as exc:
                    yield self._error_event(jsonrpc.INVALID_AGENT_RESPONSE, f"worker event refused: {exc}")
                    return Next.CLOSE
            return Next.CONTINUE
        result = doc["result"]
        item = locate(result)
        yield Count("sse_events", (item.kind.value,))
        if item.kind is Kind.MESSAGE and self.summary.events == 1:
            self._message_reply = True
        if self.owner.pending_push and self.ex.task_id is None and self.stream.task_id is None and item.task_id:
            if (yield from self.owner.adopt_pushed_task(item.task_id)):  # docs/push.md §1.3
                self.ex = self.owner.ex
        seen = self.stream.generation
        self._appended = None
        outcome = yield from judge(self.policy, self.ex, self.stream, result, direction="event",
                                   window=self if deliver and self.policy.replay else None)
        self.stream = outcome.stream or self.stream
        if outcome.action is Action.REJECT and outcome.error is not None:
            self.summary.close_reason = "refused"
            if deliver:
                yield self._error_event(*outcome.error)
            return Next.CLOSE
        if outcome.action is Action.DROP or not deliver:
            if deliver and outcome.error is not None and self._refusal is None:
                self._refusal = outcome.error  # told to the client if nothing else reaches it
            return Next.CONTINUE
        if outcome.result is not result:
            item = locate(outcome.result)
        state = self._state_of(item)
        skip, self._skip_snapshot = self._skip_snapshot, None
        if self._repeated_snapshot(skip, item, state, seen, self.stream):
            return Next.CONTINUE
        if state is not None and state is not TaskState.UNSPECIFIED:
            self._last_state = state
        try:
            if self.policy.replay:
                event_id = self._appended
                if event_id is None:  # the judge stored nothing, or the window append failed with it
                    event_id = yield from self._append(outcome.result, outcome.close)
                event = Event(event.data, event.event, event_id, event.retry)
            frame = yield from self.owner.event_frame(event, doc, outcome.result)
        except UnencodableError as exc:
            self.summary.close_reason = "refused"
            yield self._error_event(jsonrpc.INVALID_AGENT_RESPONSE, f"worker event refused: {exc}")
            return Next.CLOSE
        yield Emit(frame)
        self._delivered = True
        if outcome.close:
            self.summary.close_reason = "terminal"
            return Next.CLOSE_AND_DRAIN
        if self.ex.version is _V03 and item.kind is Kind.STATUS and self.ex.mode is Mode.ENFORCE \
                and state is not None and state.is_interrupted:
            # the event went out with final: true; v0.3 clients wait for the close (F17 (a))
            self.summary.close_reason = "interrupted"
            return Next.CLOSE
        return Next.CONTINUE

    @staticmethod
    def _repeated_snapshot(skip: TaskState | None, item: Item, state: TaskState | None,
                           seen: int | None, stream: StreamState) -> bool:
        """True for the unchanged snapshot a resubscribe starts with (F08 (ii)), which is not
        delivered; one whose generation moved on carries what happened in between
        (docs/resume.md §3.2) and is."""
        return skip is not None and state is skip and item.kind is Kind.TASK \
            and not _advanced(seen, stream.generation)

    # -- the judge's window (judge.WindowSink): the event goes in with the record's store --

    def window_event(self, outcome: Outcome) -> AppendEvent | None:
        """The window append of the event judged as ``outcome`` (see
        :class:`~gateway.exchange.judge.WindowSink`): ``None`` for an event that will not be
        delivered — refused, dropped, the repeated snapshot of a resubscribe — or that cannot
        be encoded (its delivery then fails as without the judge's append)."""
        if outcome.action is Action.DROP or (outcome.action is Action.REJECT and outcome.error is not None):
            return None
        stream = outcome.stream or self.stream
        if stream.task_id is None:
            return None
        if self._skip_snapshot is not None:
            item = locate(outcome.result)
            if self._repeated_snapshot(self._skip_snapshot, item, self._state_of(item), self.stream.generation, stream):
                return None
        try:
            payload = window.encode(outcome.result, self.dialect, outcome.close)
        except UnencodableError:
            return None
        return AppendEvent(stream.task_id, self.lineage, payload, self.ex.tenant)

    def appended(self, event_id: str, lineage: str) -> None:
        """The judge kept the event in the window with the record, as ``event_id``."""
        self._appended, self.lineage = str(event_id), lineage

    def _drain(self) -> CommandGenerator[None]:
        """After a terminal event: read on, bounded in time, to count late events (F04)."""
        backlog, self._backlog = self._backlog, []
        try:
            yield Deadline(self.policy.drain_seconds)
            for item in backlog:
                if isinstance(item, Event):
                    yield from self._on_event(item, deliver=False)
            while (chunk := (yield _READ)) is not ENDED:
                for item in self.decoder.feed(chunk):
                    if isinstance(item, Event):
                        yield from self._on_event(item, deliver=False)
            if self.decoder.has_pending:
                event = self.decoder.flush()
                if event is not None:
                    yield from self._on_event(event, deliver=False)
        except (TimeoutError, UpstreamError, EventTooLargeError, LedgerError):
            return

    def _state_of(self, item: Item) -> TaskState | None:
        if item.kind not in (Kind.TASK, Kind.STATUS):
            return None
        try:
            return normalize_state(item.raw_state, self.ex.spelling).state
        except UnknownStateError:
            return None

    def _error_event(self, code: int, message: str) -> Emit:
        self.summary.outcome = "stream_error"
        self._delivered = True
        return Emit(self.owner.error_frame(code, message))


def _advanced(before: int | None, after: int | None) -> bool:
    """True when a stream's task generation moved past ``before`` (both known)."""
    return before is not None and after is not None and after > before
