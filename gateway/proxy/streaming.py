"""SSE relay for the streaming methods (``SendStreamingMessage``, ``message/stream``,
``SubscribeToTask``, ``tasks/resubscribe``).

Implements PROTOCOL.md §7 and §11 pitfalls 5-7, FIELD-CASES.md F03, F04, F06, F08 (i), F09:

* the worker's stream is decoded incrementally and relayed event by event as it arrives —
  no whole-body buffering, no compression; comments (pings) are forwarded as comments;
* each event is parsed once, judged by the engine, stored in the ledger, then re-emitted with
  the client's JSON-RPC id; every frame written ends with a blank line;
* the events decoded from one upstream read go to the client in one write, after every one of
  them was judged and stored (write-before-forward holds per event), or in several writes
  when the ledger is slow (:data:`FLUSH_AFTER`); frames are never held while the relay waits
  for the worker, sleeps or resubscribes;
* after a terminal event the client's stream ends; in enforce mode the worker's stream is
  then drained for ``limits.post_terminal_drain_seconds`` so late events are counted, never
  delivered;
* a non-JSON event, an event over ``limits.max_event_bytes`` or a refused payload ends the
  stream with a JSON-RPC error event (``event: error``); a transport failure mid-stream ends it
  with -32603;
* a streaming request answered with plain JSON is answered as that JSON (F09);
* a client disconnect closes the upstream request; the upstream response is always closed in
  ``finally`` (STYLE.md: not in a background task).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import time
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Request
from gateway.a2a.payloads import Item, Kind, locate
from gateway.a2a.states import ProtocolVersion, TaskState, UnknownStateError, normalize_state
from gateway.a2a.sse import Comment, Event, EventTooLargeError, SSEDecoder, encode_comment, encode_event
from gateway.errors import LedgerError, UpstreamError
from gateway.invariants.model import Action, Exchange, Finding, Mode, StreamState
from gateway.proxy.forward import (
    client_response_headers,
    is_event_stream,
    map_transport_error,
    until_disconnect,
)
from gateway.proxy.transport import UpstreamAnswer

if TYPE_CHECKING:
    from gateway.proxy.jsonrpc import JsonRpcHandler

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]
FLUSH_AFTER = 0.002
"""Seconds of ledger work the frames of one upstream read may wait for: before the next event
is stored, the frames already stored are sent when the oldest has waited this long or the
last store alone took this long. So a stored event waits for at most one store that turns
slow after fast ones; with a fast ledger a read still costs one write."""
_DROP_HEADERS = ("content-length", "content-encoding", "content-type", "cache-control", "x-accel-buffering")


class _Next(enum.Enum):
    CONTINUE = "continue"
    CLOSE_AND_DRAIN = "close_and_drain"  # terminal event delivered
    CLOSE = "close"  # error event sent, or a normal end
    CUT = "cut"  # the worker's stream ended (EOF or reset) without a terminal event


class StreamRelay:
    """Relays one upstream SSE response to one client; a new instance per request."""

    def __init__(self, handler: JsonRpcHandler, ex: Exchange, req: Request, body: bytes) -> None:
        self.h = handler
        self.rt = handler.rt
        self.ex = ex
        self.req = req
        self.body = body
        self.stream = StreamState(task_id=ex.task_id)
        self.decoder = SSEDecoder(self.rt.config.limits.max_event_bytes)
        self.events = 0
        self.close_reason = "upstream_closed"
        self._backlog: list[Event | Comment] = []
        self._out: list[bytes] = []  # frames judged and stored, not yet sent
        self._out_since = 0.0  # monotonic time the oldest of them was queued
        self._chunks: Any = None
        self._responses: list[httpx.Response] = []
        self._last_write = time.monotonic()
        self._last_state: TaskState | None = None
        self._skip_snapshot: TaskState | None = None
        self._cut_error: str | None = None

    async def run(self) -> None:
        """Open the upstream stream and relay it; answers JSON when the worker did. A client
        that leaves before the worker answers releases the upstream request at once."""
        try:
            finished, response = await until_disconnect(
                self.h.receive, self.h.open_stream(self.body))
        except UpstreamError as exc:
            await self.h.fail_upstream(self.req, exc)
            return
        if not finished or response is None:
            self.h.outcome = "client_disconnected"
            return
        try:
            if response.status_code >= 300 or not is_event_stream(response.headers):
                finished, _ = await until_disconnect(self.h.receive, self._answer_json(response))
                if not finished:
                    self.h.outcome = "client_disconnected"
                return
            await self._relay(response)
        except httpx.HTTPError as exc:
            await self.h.fail_upstream(self.req, map_transport_error(exc))
        finally:
            await response.aclose()
            for extra in self._responses:
                await extra.aclose()

    async def _answer_json(self, response: httpx.Response) -> None:
        content = await response.aread()
        answer = UpstreamAnswer(response.status_code, response.headers, content)
        await self.h.answer_json(self.ex, self.req, answer)

    async def _relay(self, response: httpx.Response) -> None:
        started = time.perf_counter()
        headers = client_response_headers(response.headers, drop=_DROP_HEADERS)
        await self.h.send({"type": "http.response.start", "status": 200, "headers": [*headers, *SSE_HEADERS]})
        self._chunks = response.aiter_bytes()
        finished, nxt = await until_disconnect(self.h.receive, self._pump(),
                                               stop=self.rt.drain_expired)
        if finished:
            if nxt is _Next.CLOSE_AND_DRAIN and self.ex.mode is Mode.ENFORCE:
                await self._drain(self._chunks)
        elif self.rt.drain_expired.is_set():
            # Shutdown: end the client's stream cleanly; it can resume with SubscribeToTask.
            self.close_reason = "shutdown"
            self.h.outcome = "shutdown"
            await self._write(encode_comment("gateway shutting down; resubscribe to continue"))
            await self.h.send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            self.close_reason = "client_disconnected"
            self.h.outcome = "client_disconnected"
        self.h.task_id = self.h.task_id or self.stream.task_id
        self.h.context_id = self.h.context_id or self.stream.context_id
        self.rt.log.info(
            "stream_closed",
            extra={"upstream": self.ex.upstream, "method": self.h.method_label,
                   "task_id": self.stream.task_id, "context_id": self.stream.context_id,
                   "events": self.events,
                   "reason": self.close_reason,
                   "duration_s": round(time.perf_counter() - started, 6)},
        )

    async def _pump(self) -> _Next:
        """Relay until the stream ends; keep the client's connection alive meanwhile."""
        keepalive = asyncio.ensure_future(self._keepalive())
        try:
            nxt = await self._pump_upstreams()
        finally:
            keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keepalive
        body, self._out = b"".join(self._out), []
        await self.h.send({"type": "http.response.body", "body": body, "more_body": False})
        return nxt

    async def _keepalive(self) -> None:
        """An SSE comment to the client after ``streams.keepalive_seconds`` of silence, below
        common proxy idle timeouts (F08)."""
        interval = self.rt.config.streams.keepalive_seconds
        while True:
            wait = interval - (time.monotonic() - self._last_write)
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            if self._out:  # a read's events are being stored; their write comes soon
                await asyncio.sleep(interval)
                continue
            await self._write(encode_comment("keepalive"))  # carries no event frame

    async def _pump_upstreams(self) -> _Next:
        attempt = 0
        while True:
            nxt = await self._pump_one()
            if nxt is not _Next.CUT:
                return nxt
            await self._flush()
            nxt = await self._after_cut(attempt)
            if nxt is not _Next.CONTINUE:
                return nxt
            attempt += 1

    async def _pump_one(self) -> _Next:
        """Relay one upstream response until it ends or the stream must close."""
        try:
            async for chunk in self._chunks:
                try:
                    items = self.decoder.feed(chunk)
                except EventTooLargeError as exc:
                    self.rt.metrics.upstream_errors.labels(self.ex.upstream, "event_too_large").inc()
                    await self._error_event(jsonrpc.INVALID_AGENT_RESPONSE, str(exc))
                    return _Next.CLOSE
                nxt = await self._handle_items(items)
                if nxt is not _Next.CONTINUE:
                    return nxt  # what is pending goes out with the end of the stream (_pump)
                await self._flush()
            nxt = await self._at_eof()
            return _Next.CUT if nxt is _Next.CONTINUE else nxt
        except httpx.HTTPError as exc:
            err = map_transport_error(exc)
            self.rt.metrics.upstream_errors.labels(self.ex.upstream, err.reason).inc()
            self._cut_error = f"upstream error: {err}"
            return _Next.CUT
        except LedgerError as exc:
            self.rt.log.error("ledger_error", extra={"upstream": self.ex.upstream, "error": str(exc)})
            await self._error_event(jsonrpc.INTERNAL_ERROR, "gateway task ledger unavailable")
            return _Next.CLOSE

    async def _after_cut(self, attempt: int) -> _Next:
        """The worker's stream ended before its task did (F08 (ii)).

        Never ends the client's stream as if finished and never invents a state: asks
        ``GetTask``; a terminal task is sent as a last Task snapshot and the stream closes;
        otherwise the gateway resubscribes upstream (``SubscribeToTask`` /
        ``tasks/resubscribe``), drops the repeated unchanged snapshot, and relays on. Bounded
        by ``streams.resubscribe_attempts`` with doubling backoff; then a -32603 error event.
        """
        task_id = self.stream.task_id
        if task_id is None or self.stream.terminal:
            if self._cut_error is not None:  # nothing to resume: say why the stream ended
                await self._error_event(jsonrpc.INTERNAL_ERROR, self._cut_error)
            return _Next.CLOSE  # a direct Message, or already ended: a normal close
        record = await self.rt.record_of(self.ex.upstream, task_id)
        if record is not None and record.state.is_interrupted:
            return _Next.CLOSE  # the worker closes streams on interrupted states (SDK, §7)
        cfg = self.rt.config.streams
        upstream = self.ex.upstream
        self.rt.metrics.degraded.labels(upstream, "stream_lost").set(1)
        while attempt < cfg.resubscribe_attempts:
            if attempt:
                await asyncio.sleep(cfg.resubscribe_backoff_seconds * 2 ** (attempt - 1))
            attempt += 1
            self.rt.metrics.forced_gets.labels(upstream, "upstream_eof").inc()
            task_ex = dataclasses.replace(self.ex, task_id=task_id)
            task, record = await self.h.probe_task(task_ex)
            if record is not None and record.terminal and task is not None:
                await self._write_result(self._snapshot(task))
                self.stream = dataclasses.replace(self.stream, terminal=True)
                self._done_after_cut("terminal_snapshot")
                return _Next.CLOSE
            if await self._resubscribe(task_id):
                self._done_after_cut("resubscribed")
                return _Next.CONTINUE
        self._done_after_cut("gave_up")
        await self._error_event(jsonrpc.INTERNAL_ERROR,
                                f"upstream stream of task {task_id} was lost and could not be resumed")
        return _Next.CLOSE

    def _done_after_cut(self, outcome: str) -> None:
        self.rt.metrics.resubscribes.labels(self.ex.upstream, outcome).inc()
        self.rt.metrics.degraded.labels(self.ex.upstream, "stream_lost").set(0)
        self.rt.log.warning("stream_cut", extra={"upstream": self.ex.upstream, "outcome": outcome,
                                                 "task_id": self.stream.task_id})

    def _snapshot(self, task: Any) -> Any:
        """A Task as a stream event's ``result`` in the client's version."""
        if self.ex.version is ProtocolVersion.V1_0:
            return {"task": task}
        return task if isinstance(task, dict) and "kind" in task else {**task, "kind": "task"}

    async def _resubscribe(self, task_id: str) -> bool:
        """Open ``SubscribeToTask`` upstream for the stream's task; True when it streams."""
        method = "SubscribeToTask" if self.ex.version is ProtocolVersion.V1_0 else "tasks/resubscribe"
        body = {"jsonrpc": "2.0", "id": self.req.id, "method": method, "params": {"id": task_id}}
        try:
            response = await self.h.open_stream(jsonrpc.dumps(body))
        except UpstreamError:
            return False
        self._responses.append(response)
        if not is_event_stream(response.headers):
            await response.aclose()
            return False
        self._chunks = response.aiter_bytes()
        self.decoder = SSEDecoder(self.rt.config.limits.max_event_bytes)
        self._skip_snapshot = self._last_state
        self._cut_error = None
        return True

    async def _handle_items(self, items: list[Event | Comment]) -> _Next:
        """Judge and store the items of one upstream read; their frames are queued in order
        (:meth:`_emit`) and the caller sends them in one write (in several when the ledger is
        slow: :data:`FLUSH_AFTER`)."""
        slow = False
        for index, item in enumerate(items):
            if self._out and (slow or time.monotonic() - self._out_since >= FLUSH_AFTER):
                await self._flush()  # the ledger is slow: stored events do not wait for more
            started = time.monotonic()
            if isinstance(item, Comment):
                self._emit(encode_comment(item.text))
                if self.stream.task_id is not None:  # a ping on the task's own stream is a sign of life
                    await self.rt.touch(self.ex.upstream, self.stream.task_id)
            else:
                nxt = await self._on_event(item)
                if nxt is not _Next.CONTINUE:
                    self._backlog = items[index + 1 :]
                    return nxt
            slow = time.monotonic() - started >= FLUSH_AFTER
        return _Next.CONTINUE

    async def _at_eof(self) -> _Next:
        """The worker closed the stream. A dangling last frame (no closing blank line) is
        used only when it is complete JSON, so the client gets exactly one copy (F08 (i))."""
        if not self.decoder.has_pending:
            return _Next.CONTINUE
        event = self.decoder.flush()
        if event is not None:
            try:
                orjson.loads(event.data)
            except orjson.JSONDecodeError:
                event = None
        if event is None:
            self.rt.metrics.upstream_errors.labels(self.ex.upstream, "truncated_stream").inc()
            await self._error_event(jsonrpc.INTERNAL_ERROR, "upstream stream ended in the middle of an event")
            return _Next.CLOSE
        return await self._on_event(event)

    async def _on_event(self, event: Event, *, deliver: bool = True) -> _Next:
        try:
            doc = jsonrpc.clean_response(orjson.loads(event.data))
        except orjson.JSONDecodeError:
            doc = None
        if doc is None:
            self.rt.metrics.upstream_errors.labels(self.ex.upstream, "invalid_response").inc()
            if deliver:
                await self._error_event(jsonrpc.INVALID_AGENT_RESPONSE, "worker sent an SSE event that is not a JSON-RPC response")
            return _Next.CLOSE
        self.events += 1
        if "error" in doc:
            self.rt.metrics.sse_events.labels(self.ex.upstream, "error").inc()
            self.h.outcome = "worker_error"
            if deliver:
                self._emit(encode_event(jsonrpc.dumps({**doc, "id": self.req.id}), event=event.event))
            return _Next.CONTINUE
        result = doc["result"]
        item = locate(result)
        self.rt.metrics.sse_events.labels(self.ex.upstream, item.kind.value).inc()
        outcome = await self.rt.judge(self.ex, self.stream, result)
        self.stream = outcome.stream or self.stream
        if outcome.action is Action.REJECT and outcome.error is not None:
            self.close_reason = "refused"
            if deliver:
                await self._error_event(*outcome.error)
            return _Next.CLOSE
        if outcome.action is Action.DROP or not deliver:
            return _Next.CONTINUE
        if outcome.result is not result:
            item = locate(outcome.result)
        state = self._state_of(item)
        skip, self._skip_snapshot = self._skip_snapshot, None
        if skip is not None and state is skip and item.kind is Kind.TASK:
            return _Next.CONTINUE  # the unchanged snapshot a resubscribe starts with (F08 (ii))
        if state is not None and state is not TaskState.UNSPECIFIED:
            self._last_state = state
        same_id = doc.get("id") == self.req.id and type(doc.get("id")) is type(self.req.id)
        if not same_id:
            self.rt.count(self.ex, [Finding("divergence", "jsonrpc_id_mismatch", str(doc.get("id")))])
        if outcome.result is result and same_id:
            data: bytes | str = event.data
        else:
            data = jsonrpc.dumps({**doc, "id": self.req.id, "result": outcome.result})
        self._emit(encode_event(data, event=event.event, id=event.id, retry=event.retry))
        if outcome.close:
            self.close_reason = "terminal"
            return _Next.CLOSE_AND_DRAIN
        return _Next.CONTINUE

    async def _drain(self, chunks: Any) -> None:
        """After a terminal event: read on, bounded in time, to count late events (F04)."""
        backlog, self._backlog = self._backlog, []
        try:
            async with asyncio.timeout(self.rt.config.limits.post_terminal_drain_seconds):
                for item in backlog:
                    if isinstance(item, Event):
                        await self._on_event(item, deliver=False)
                async for chunk in chunks:
                    for item in self.decoder.feed(chunk):
                        if isinstance(item, Event):
                            await self._on_event(item, deliver=False)
                if self.decoder.has_pending:
                    event = self.decoder.flush()
                    if event is not None:
                        await self._on_event(event, deliver=False)
        except (TimeoutError, httpx.HTTPError, EventTooLargeError, LedgerError):
            return

    def _state_of(self, item: Item) -> TaskState | None:
        if item.kind not in (Kind.TASK, Kind.STATUS):
            return None
        try:
            return normalize_state(item.raw_state, self.ex.version).state
        except UnknownStateError:
            return None

    def _emit(self, frame: bytes) -> None:
        """Queue ``frame``; only for frames whose events were judged and stored."""
        if not self._out:
            self._out_since = time.monotonic()
        self._out.append(frame)

    async def _flush(self) -> None:
        """Send the queued frames in one write."""
        if self._out:
            body, self._out = b"".join(self._out), []
            self._last_write = time.monotonic()
            await self.h.send({"type": "http.response.body", "body": body, "more_body": True})

    async def _write(self, frame: bytes) -> None:
        """Send the queued frames, then ``frame``, in one write."""
        self._out.append(frame)
        await self._flush()

    async def _write_result(self, result: Any) -> None:
        """A gateway-made event carrying ``result`` with the client's id."""
        doc = {"jsonrpc": "2.0", "id": self.req.id, "result": result}
        await self._write(encode_event(jsonrpc.dumps(doc)))

    async def _error_event(self, code: int, message: str) -> None:
        self.h.outcome = "stream_error"
        doc = jsonrpc.error_response(self.req.id, code, message, version=self.ex.version)
        await self._write(encode_event(jsonrpc.dumps(doc), event="error"))
