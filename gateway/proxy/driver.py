"""The driver: runs one exchange generator, doing what each command says and nothing else.

An exchange (:mod:`gateway.exchange`) decides every task's fate; this module only performs
its commands against the real ledger, worker and client, and feeds the replies (or the
exceptions) back in. What is left here is what is about time and sockets, never about a task:

* ledger calls are timed and failures counted (the runtime's ledger is an
  :class:`~gateway.proxy.instrumented.InstrumentedLedger`); a failure is thrown into the
  exchange as :class:`~gateway.errors.LedgerError`;
* worker calls go through the upstream client; a transport failure is thrown in as
  :class:`~gateway.errors.UpstreamError`, a read past a :class:`Deadline` as ``TimeoutError``;
  every upstream response is closed in ``finally`` (docs/architecture.md, convention 11: not in a
  background task);
* SSE frames are queued on :class:`Emit` and written on :class:`Flush`: the events of one
  upstream read go out in one write, or in several when the ledger is slow
  (:data:`FLUSH_AFTER`); frames are never held while the relay waits for the worker;
* a keep-alive comment goes to the client after ``streams.keepalive_seconds`` of silence (a
  timer per open stream, no task: a task exists only while a comment is being written);
* an open client stream counts in ``a2a_gateway_open_streams{upstream}`` from its head to its
  end, and its task in :attr:`Runtime.streams` (the sweep skips it, docs/sweep.md §2);
* report commands go to :class:`~gateway.observability.reporter.Reporter`;
* a timeline entry (:class:`AppendTimeline`) is written to the ledger before the exchange goes
  on (so before the payload it explains is forwarded); a failed write is counted
  (``a2a_gateway_ledger_errors_total{operation="append_timeline"}``) and the request goes on;
* with tracing on (``span`` set, docs/observability.md §1), every call to the worker is a
  ``CLIENT`` span under the request's span, its ``traceparent`` sent to the worker; a
  stream's span lasts until its response is closed.

What a driver holds per open stream is small and bounded: the worker's response (aiohttp
reads it in pieces of at most its ``read_bufsize``, 64 KiB), the frames of one upstream read
not yet written, and one timer; the event being assembled is the exchange's (its SSE decoder,
bounded by ``limits.max_event_bytes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx

from gateway.a2a.jsonrpc import Operation
from gateway.a2a.sse import encode_comment
from gateway.a2a.states import TERMINAL_STATES
from gateway.errors import UpstreamError, VersionConflictError
from gateway.exchange.commands import (
    ENDED,
    OPENED,
    REPORTS,
    Answer,
    CheckWebhook,
    CommandGenerator,
    Deadline,
    Emit,
    EndStream,
    Flush,
    Load,
    Loaded,
    MarkCardStale,
    Open,
    Post,
    Read,
    ReadBody,
    Respond,
    Sleep,
    StartStream,
    Store,
    StoreAndAppend,
)
from gateway.invariants.model import Clock, TaskRecord
from gateway.invariants.timeline import TimelineEntry
from gateway.ledger.base import Stored, TaskLedger
from gateway.observability.reporter import Reporter
from gateway.perform import THROWN, Performer
from gateway.proxy.forward import (
    Route,
    client_response_headers,
    is_event_stream,
    read_body,
    upstream_request_headers,
)
from gateway.proxy.limits import NO_GRANT
from gateway.proxy.runtime import Runtime
from gateway.proxy.types import Receive, Scope, Send
from gateway.push.ssrf import Refused, check_webhook

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]
FLUSH_AFTER = 0.002
"""Seconds of ledger work the frames of one upstream read may wait for: before the next event
is judged, the frames already stored are sent when the oldest has waited this long or the
previous event alone took this long. So a stored event waits for at most one store that turns
slow after fast ones; with a fast ledger a read still costs one write."""
_BODY_HEADERS = ("content-length", "content-encoding", "content-type")
_STREAM_HEADERS = (*_BODY_HEADERS, "cache-control", "x-accel-buffering")
T = TypeVar("T")
_BODILESS = frozenset({"GET", "HEAD", "DELETE"})
_NO_HEADERS = httpx.Headers()


class Driver(Performer):
    """Performs the commands of one exchange for one client request: the online
    :class:`~gateway.perform.Performer` (its ledger handlers, every call timed and counted by
    :class:`~gateway.proxy.instrumented.InstrumentedLedger`), with the worker, the client and a
    stream's held record."""

    __slots__ = ("rt", "route", "scope", "client_send", "reporter", "operation", "started", "ended",
                 "_reply", "_exc", "_head_headers", "_responses", "_chunks", "_deadline", "_out",
                 "_out_since", "_last_load", "_last_write", "_keepalive_timer", "_keepalive_send",
                 "_streaming", "_stream_task", "_stream_tenant", "_stream_key", "span", "status", "state", "card",
                 "_stream_span", "version", "task_id", "_held", "grant", "retry", "before_respond", "receive", "value")

    def __init__(self, rt: Runtime, route: Route, scope: Scope, send: Send, reporter: Reporter,
                 operation: str, *, task_id: str | None = None, tenant: str = "") -> None:
        self.rt = rt
        self.route = route
        self.scope = scope
        self.client_send = send
        self.reporter = reporter
        self.operation = operation
        self.started = False  # the response head is sent
        self.ended = False  # the client's response is complete
        self._reply: Any = None
        self._exc: BaseException | None = None
        self._head_headers: httpx.Headers | None = None
        self._responses: list[httpx.Response] = []
        self._chunks: AsyncIterator[bytes] | None = None
        self._deadline: float | None = None
        self._out: list[bytes] = []  # frames judged and stored, not yet sent
        self._out_since = 0.0  # monotonic time the oldest of them was queued
        self._last_load = 0.0  # monotonic time the last event's judging (or its read) began
        self._last_write = time.monotonic()
        self._keepalive_timer: asyncio.TimerHandle | None = None
        self._keepalive_send: asyncio.Future[None] | None = None  # a comment being written
        self._streaming = False  # counted in a2a_gateway_open_streams
        self._stream_task = task_id  # the task the request names (None: learnt from the stream)
        self._stream_tenant = tenant  # its A2A tenant (docs/callers.md §1)
        self._stream_key: tuple[str, str, str] | None = None  # in rt.streams while streaming
        self.span: Any = None  # the request's server span (tracing on)
        self.card: Any = None  # the Agent Card the request was admitted under (span attributes)
        self.version: str | None = None  # the A2A version of the request sent on (span attribute)
        self.task_id: str | None = task_id  # the task the client's request names (span attribute)
        self._stream_span: Any = None  # the client span of the open upstream stream
        self.status: int | None = None  # the HTTP status sent to the client
        self.state: str | None = None  # the canonical state last read or stored (tracing on)
        # (tenant, task id) -> the record this exchange last read or stored, with its version and
        # flag: what answers a Load(cached=True) (docs/architecture.md, "A stream holds its record")
        self._held: dict[tuple[str, str], tuple[Stored, int]] = {}
        self.grant = NO_GRANT  # the request's fair-share slots (docs/limits.md; set by the endpoint)
        self.retry: Any = None  # the send's retry key it owns (gateway.proxy.retries.Turn), if any
        # awaited once before a whole response is sent: a keyed send's outcome goes under its key
        # before the client has it (docs/retries.md §2)
        self.before_respond: Callable[[], Awaitable[None]] | None = None
        self.receive: Receive | None = None  # the client's body, for ReadBody (a push callback)
        self.value: Any = None  # what the last exchange run to its end returned

    # --- the Performer's hooks ------------------------------------------------------------------

    @property
    def port(self) -> TaskLedger:
        return self.rt.ledger

    @property
    def upstream_name(self) -> str:
        return self.route.upstream.name

    @property
    def outbox_limits(self) -> tuple[int, int]:
        cfg = self.rt.config.push
        return cfg.max_outbox_per_task, cfg.max_outbox_total

    async def keep_timeline(self, task_id: str, entry: TimelineEntry, tenant: str) -> None:
        await self.rt.keep_timeline(self.route.upstream.name, task_id, entry, tenant=tenant)

    def enqueued(self) -> None:
        if self.rt.push is not None:
            self.rt.push.wake.set()  # the delivery loop looks at once

    # --- the run ----------------------------------------------------------------------------------

    async def run(self, gen: CommandGenerator[Any], *, until_ended: bool = False) -> bool:
        """Perform ``gen``'s commands until it returns (True), or — with ``until_ended`` —
        until the client's response is complete (False; call again to go on)."""
        report = self.reporter.report
        handlers = self.HANDLERS
        while True:
            try:
                if self._exc is not None:
                    exc, self._exc = self._exc, None
                    cmd = gen.throw(exc)
                else:
                    cmd = gen.send(self._reply)
            except StopIteration as stop:
                self.value = stop.value
                return True
            self._reply = None
            kind = type(cmd)
            if kind is Emit:  # the per-event commands that need no await, done in place
                if not self._out:
                    self._out_since = time.monotonic()
                self._out.append(cmd.frame)
                continue
            if kind is Flush and not self._out:
                continue
            handler = handlers.get(kind)
            if handler is None:
                if kind not in REPORTS:
                    raise TypeError(f"not a command: {cmd!r}")
                report(cmd, self.operation, self.span)  # Count, Found, Degraded, Log
            else:
                try:
                    self._reply = await handler(self, cmd)
                except THROWN as exc:
                    self._exc = exc
            if until_ended and self.ended:
                return False

    async def aclose(self) -> None:
        """Stop the keep-alive, close every upstream response and uncount the stream."""
        sending = self._keepalive_send
        self._stop_keepalive()
        self._uncount()
        if sending is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await sending
        for response in self._responses:
            await response.aclose()
        self._responses = []
        self._end_stream_span()

    def _end_stream_span(self) -> None:
        if self._stream_span is not None:
            span, self._stream_span = self._stream_span, None
            span.end()

    async def end_for_shutdown(self) -> None:
        """Shutdown: end the client's stream cleanly; it can resume with ``SubscribeToTask``."""
        if self.started and not self.ended:
            self._out.append(encode_comment("gateway shutting down; resubscribe to continue"))
            await self._end_stream(EndStream())

    # --- ledger ---------------------------------------------------------------------------------

    async def _load(self, cmd: Load) -> Loaded:
        now = time.monotonic()
        if self._out and (now - self._out_since >= FLUSH_AFTER or now - self._last_load >= FLUSH_AFTER):
            await self._flush(None)  # the ledger is slow: stored events do not wait for more
        self._last_load = now
        task_id = cmd.task_id
        if task_id is None:
            return Loaded(None, Clock(time.time()))
        ledger, upstream, tenant = self.rt.ledger, self.route.upstream.name, cmd.tenant
        if self._streaming and self._stream_key is None:  # a new task's stream: its first event
            self._open_stream_of(task_id, tenant)
        held = self._held.get((tenant, task_id)) if cmd.cached else None
        if held is not None and held[1] == getattr(ledger, "evicted", 0):
            stored = held[0]
            return Loaded(stored.record, Clock(time.time()), stored.version, stored.needs_resync, cached=True)
        stored = await ledger.get(upstream, task_id, tenant=tenant)
        if stored is None:
            self._held.pop((tenant, task_id), None)
            return Loaded(None, Clock(time.time()))
        if self._streaming:
            self._hold(stored)
        if self.span is not None and self.operation is not Operation.LIST:  # a2a.task.state
            self.state = stored.record.state.value
        return Loaded(stored.record, Clock(time.time()), stored.version, stored.needs_resync)

    def _hold(self, stored: Stored) -> None:
        """Keep ``stored`` as this exchange's last read or store of its task (a stream keeps
        the few tasks it touches; a unary exchange keeps none), with the ledger's eviction count
        at the time: a memory ledger that evicted a record since may hold the task anew at the
        same version (versions start again at 1), so the held record no longer answers."""
        record = stored.record
        self._held[(record.tenant, record.task_id)] = (stored, getattr(self.rt.ledger, "evicted", 0))

    async def _store(self, cmd: Store) -> int:
        record = cmd.record
        version: int = await self._put(record, self.rt.ledger.put(record, cmd.expected_version))
        self._stored(record, version)
        await self._limit_stored(record)
        if self.retry is not None:  # the send's task is known: under its retry key (docs/retries.md §2)
            await self.retry.note_task(record.task_id)
        return version

    async def _store_and_append(self, cmd: StoreAndAppend) -> tuple[int, str, str]:
        record, event = cmd.record, cmd.event
        reply: tuple[int, str, str] = await self._put(record, self.rt.ledger.put_with_event(
            record, cmd.expected_version, event.lineage, event.payload, time.time()))
        self._stored(record, reply[0])
        await self._limit_stored(record)
        if self.retry is not None:
            await self.retry.note_task(record.task_id)
        return reply

    async def _put(self, record: TaskRecord, call: Awaitable[T]) -> T:
        """One compare-and-set ledger call; a lost one forgets the held record of its task."""
        try:
            return await call
        except VersionConflictError:
            self._held.pop((record.tenant, record.task_id), None)
            raise

    def _stored(self, record: TaskRecord, version: int) -> None:
        if self._streaming:
            self._hold(Stored(record, version))
        if self.span is not None and self.operation is not Operation.LIST:  # a2a.task.state
            self.state = record.state.value

    async def _limit_stored(self, record: TaskRecord) -> None:
        """A live-task slot (docs/limits.md §1): bound to a new task at its first live record,
        freed when any road stores the task terminal."""
        limiter = self.rt.limiter
        if limiter is None:
            return
        terminal = record.state in TERMINAL_STATES
        if (terminal and limiter.counts_live) or (not terminal and self.grant.pending is not None):
            await limiter.stored(self.grant, self.route.upstream.name, record.tenant, record.task_id, terminal)

    async def _check_webhook(self, cmd: CheckWebhook) -> tuple[str, str] | None:
        try:
            await check_webhook(cmd.url, self.rt.config.push)
        except Refused as refused:
            return refused.reason, str(refused)
        return None

    # --- the worker -------------------------------------------------------------------------------

    def _request(self, cmd: Post | Open) -> tuple[str, list[tuple[bytes, bytes]], bytes | None]:
        """URL, headers and body of a request to the worker: the client's own path and query
        (``target`` ``None``) or the exchange's ``target`` below the upstream's base URL."""
        headers = upstream_request_headers(
            self.scope, identity=True, trusted_proxies=self.rt.config.public.trusted_proxies)
        if cmd.target is None:
            url = self.route.url(self.scope.get("query_string", b""))
        else:  # the gateway's own request (a REST probe or resubscribe): its own Accept
            url = self.route.upstream.url.rstrip("/") + cmd.target
            accept = b"text/event-stream" if type(cmd) is Open else b"application/json"
            headers = [h for h in headers if h[0] != b"accept"] + [(b"accept", accept)]
        if cmd.a2a_version is not None:
            headers = bridged_headers(headers, cmd.a2a_version)
        if self.rt.replay:  # the client's Last-Event-ID names a gateway event id, not the worker's
            headers = [h for h in headers if h[0] != b"last-event-id"]
        if cmd.method in _BODILESS:  # a probe GET made from the client's POST has no body
            return url, [h for h in headers if h[0] != b"content-type"], None
        return url, headers, cmd.body

    def _client_span(self, cmd: Post | Open, url: str) -> Any:
        """The ``CLIENT`` span of a call to the worker (docs/observability.md §1)."""
        if cmd.reason is None:
            method = self.operation
        else:
            method = "GetTask" if type(cmd) is Post else "SubscribeToTask"
        tracing = self.rt.tracing
        assert tracing is not None
        return tracing.client_span(self.span, method=str(method), http_method=cmd.method, url=url,
                                   version=cmd.a2a_version if cmd.a2a_version is not None else self.version,
                                   task_id=self.task_id, reason=cmd.reason, card=self.card)

    def _start_client_span(self, cmd: Post | Open, url: str, headers: Any) -> tuple[Any, Any]:
        """With tracing on, the call's ``CLIENT`` span and ``headers`` carrying it as the
        worker's ``traceparent``; off: ``(None, headers)``, nothing built."""
        if self.span is None:
            return None, headers
        span = self._client_span(cmd, url)
        return span, self.rt.tracing.propagate(span, headers)  # type: ignore[union-attr]

    def _end_client_span(self, span: Any, *, status: int | None = None, error: str | None = None) -> None:
        if span is not None:
            self.rt.tracing.end_client(span, status=status, error=error)  # type: ignore[union-attr]

    async def _post(self, cmd: Post) -> Answer:
        url, headers, body = self._request(cmd)
        span, headers = self._start_client_span(cmd, url, headers)
        try:
            answer = await self.rt.client.fetch(cmd.method, url, headers=headers, content=body,
                                                timeout=self.route.upstream.timeouts,
                                                upstream=self.route.upstream)
        except UpstreamError as exc:
            self._end_client_span(span, error=exc.reason)
            raise
        self._end_client_span(span, status=answer.status_code)
        return _answer(answer.status_code, answer.content, answer.headers)

    async def _open(self, cmd: Open) -> Any:
        url, headers, body = self._request(cmd)
        for earlier in self._responses:  # a resubscribe: the cut stream is over
            await earlier.aclose()
        self._responses = []
        self._end_stream_span()
        span, headers = self._start_client_span(cmd, url, headers)
        try:
            response = await self.rt.client.send(cmd.method, url, headers=headers, content=body,
                                                 timeout=self.route.upstream.timeouts,
                                                 upstream=self.route.upstream)
        except UpstreamError as exc:
            self._end_client_span(span, error=exc.reason)
            raise
        self._responses.append(response)
        if response.status_code >= 300 or not is_event_stream(response.headers):
            content = await self.rt.client.read(response)
            self._end_client_span(span, status=response.status_code)
            return _answer(response.status_code, content, response.headers)
        if span is not None:
            span.set_attribute("http.response.status_code", response.status_code)
            self._stream_span = span  # ends when the stream's response is closed
        if self._head_headers is None:
            self._head_headers = response.headers
        self._chunks = response.aiter_bytes()
        return OPENED

    async def _read(self, cmd: Read) -> bytes | object:
        assert self._chunks is not None
        try:
            if self._deadline is None:
                data = await anext(self._chunks)
            else:
                async with asyncio.timeout_at(self._deadline):
                    data = await anext(self._chunks)
        except StopAsyncIteration:
            return ENDED
        self._last_load = time.monotonic()  # the events of this read start fresh (FLUSH_AFTER)
        return data

    async def _set_deadline(self, cmd: Deadline) -> None:
        self._deadline = asyncio.get_running_loop().time() + cmd.seconds

    # --- the client -------------------------------------------------------------------------------

    async def respond(self, cmd: Respond) -> None:
        """Send one whole response (:class:`Respond`), after :attr:`before_respond`."""
        if self.before_respond is not None:
            hook, self.before_respond = self.before_respond, None
            await hook()
        relayed = cmd.relay.headers if cmd.relay is not None else _NO_HEADERS
        if cmd.media == "raw":
            headers = client_response_headers(relayed, drop=("content-length", "content-encoding"))
        else:
            sse = cmd.media == "sse"
            drop = _STREAM_HEADERS if sse else _BODY_HEADERS
            headers = client_response_headers(relayed, drop=drop)
            headers += SSE_HEADERS if sse else JSON_HEADERS
        if cmd.headers:
            headers += cmd.headers
        headers.append((b"content-length", str(len(cmd.body)).encode()))
        self.started = True
        self.status = cmd.status
        await self.client_send({"type": "http.response.start", "status": cmd.status, "headers": headers})
        await self.client_send({"type": "http.response.body", "body": cmd.body})
        self.ended = True

    async def _read_body(self, cmd: ReadBody) -> bytes:
        assert self.receive is not None
        return await read_body(self.receive, self.scope, cmd.limit)

    async def _start_stream(self, cmd: StartStream) -> None:
        relayed = client_response_headers(self._head_headers or httpx.Headers(), drop=_STREAM_HEADERS)
        self.started = True
        self.status = 200
        await self.client_send({"type": "http.response.start", "status": 200,
                                "headers": [*relayed, *SSE_HEADERS]})
        self._last_write = time.monotonic()
        self._streaming = True
        self.rt.metrics.open_streams.labels(self.route.upstream.name).inc()
        if self._stream_task is not None:
            self._open_stream_of(self._stream_task, self._stream_tenant)
        self._arm_keepalive(self.rt.config.streams.keepalive_seconds)

    async def _flush(self, cmd: Flush | None) -> None:
        if self._out:
            body, self._out = b"".join(self._out), []
            self._last_write = time.monotonic()
            await self.client_send({"type": "http.response.body", "body": body, "more_body": True})

    async def _end_stream(self, cmd: EndStream) -> None:
        self._stop_keepalive()
        body, self._out = b"".join(self._out), []
        self.ended = True
        self._uncount()
        await self.client_send({"type": "http.response.body", "body": body, "more_body": False})

    def _uncount(self) -> None:
        if self._streaming:
            self._streaming = False
            self.rt.metrics.open_streams.labels(self.route.upstream.name).dec()
        if self._stream_key is not None:
            self.rt.streams.closed(self._stream_key)
            self._stream_key = None

    def _open_stream_of(self, task_id: str, tenant: str) -> None:
        """The open client stream is (``tenant``, ``task_id``)'s: the sweep passes over the
        task until the stream ends (docs/sweep.md §2)."""
        self._stream_key = (self.route.upstream.name, tenant, task_id)
        self.rt.streams.opened(self._stream_key)

    def _arm_keepalive(self, delay: float) -> None:
        self._keepalive_timer = asyncio.get_running_loop().call_later(delay, self._keepalive_due)

    def _keepalive_due(self) -> None:
        """An SSE comment to the client after ``streams.keepalive_seconds`` of silence, below
        common proxy idle timeouts (F08); never while a read's events are being stored (a
        timer callback: the comment's write is the only task, and only while it runs)."""
        self._keepalive_timer = None
        if self.ended:
            return
        interval = self.rt.config.streams.keepalive_seconds
        wait = interval - (time.monotonic() - self._last_write)
        if wait > 0:
            self._arm_keepalive(wait)
        elif self._out or self._keepalive_send is not None:  # a read's events are being stored;
            self._arm_keepalive(interval)  # their write comes soon
        else:
            self._last_write = time.monotonic()
            self._keepalive_send = asyncio.ensure_future(self._send_keepalive(interval))

    async def _send_keepalive(self, interval: float) -> None:
        try:
            await self.client_send({"type": "http.response.body", "body": encode_comment("keepalive"),
                                    "more_body": True})
        except Exception:  # the client is gone: its disconnect ends the exchange
            return
        finally:
            self._keepalive_send = None
        if not self.ended and self._keepalive_timer is None and self._streaming:
            self._arm_keepalive(interval)

    def _stop_keepalive(self) -> None:
        if self._keepalive_timer is not None:
            self._keepalive_timer.cancel()
            self._keepalive_timer = None
        if self._keepalive_send is not None:
            self._keepalive_send.cancel()
            self._keepalive_send = None

    # --- time and the card --------------------------------------------------------------------------

    async def _sleep(self, cmd: Sleep) -> None:
        await asyncio.sleep(cmd.seconds)

    async def _mark_stale(self, cmd: MarkCardStale) -> None:
        self.rt.card_cache(self.route.upstream).mark_stale()


Driver.HANDLERS = {
    **Performer.HANDLERS,
    Load: Driver._load, Store: Driver._store, StoreAndAppend: Driver._store_and_append,
    Post: Driver._post, Open: Driver._open, Read: Driver._read, Deadline: Driver._set_deadline,
    Respond: Driver.respond, StartStream: Driver._start_stream, Flush: Driver._flush, EndStream: Driver._end_stream,
    Sleep: Driver._sleep, MarkCardStale: Driver._mark_stale, CheckWebhook: Driver._check_webhook,
    ReadBody: Driver._read_body,
}
"""What performs each command: :class:`~gateway.perform.Performer`'s ledger handlers, the
ones the driver does its own way, and the worker's and the client's (``Emit`` is queued in
:meth:`Driver.run` itself; any other command is a report for the Reporter). A new command:
a handler method here, and its entry in this dict."""


_EXTENSIONS = (b"a2a-extensions", b"x-a2a-extensions")


def bridged_headers(headers: list[tuple[bytes, bytes]], version: str) -> list[tuple[bytes, bytes]]:
    """``headers`` of a bridged request in the worker's version (docs/bridge.md §3):
    ``A2A-Version: version`` instead of the client's (none for ``""``, the v0.3 way), and the
    client's extensions header also under the name the worker's version reads
    (``A2A-Extensions`` in v1.0, ``X-A2A-Extensions`` in v0.3) when it lacks it."""
    out = [h for h in headers if h[0] != b"a2a-version"]
    names = {name for name, _ in out}
    wanted = _EXTENSIONS[1] if version.startswith("0.") or not version else _EXTENSIONS[0]
    if wanted not in names:
        out += [(wanted, value) for name, value in headers if name in _EXTENSIONS]
    if version:
        out.append((b"a2a-version", version.encode("latin-1")))
    return out


def _answer(status: int, content: bytes, headers: httpx.Headers) -> Answer:
    """The reply to Post/Open; the media type is looked up only where it is read (4xx)."""
    return Answer(status, content, _is_json(headers) if 400 <= status < 500 else True, headers)


def _is_json(headers: httpx.Headers) -> bool:
    ctype = headers.get("content-type", "").split(";")[0].strip().lower()
    return ctype == "application/json" or ctype.endswith("+json")

