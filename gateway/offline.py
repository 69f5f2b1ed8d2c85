"""An exchange performed without network I/O: the gateway's own
:class:`~gateway.ledger.memory.MemoryLedger`, a clock set by the caller and a scripted worker.
``a2a-gateway replay`` and the tests drive the very exchange objects the gateway runs, with the
very ledger handlers the gateway runs (:class:`~gateway.perform.Performer`, whose offline
subclass :class:`Offline` is), so a transcript of a whole stream — cut, probe and resubscribe
included — replays offline as the gateway would judge it.

Worker acts (plain dicts, the transcript's ``worker`` list) answer the worker commands in
order:

==========================================  =================================================
act                                          answers
==========================================  =================================================
``{"answer": {JSON-RPC response}}``          :class:`Post`, or :class:`Open` answered with JSON
``{"open": true}``                           :class:`Open`: an event stream is open
``{"events": [result | response, …]}``       :class:`Read`: one read carrying these events
``{"end": true}``                            :class:`Read`: the worker closed the stream
``{"cut": true}``                            :class:`Read`: the connection dropped (-32603 class)
``{"fail": "connect" | "timeout"}``          :class:`Post` / :class:`Open`: the worker is unreachable
==========================================  =================================================

A ``result`` in ``events`` is wrapped as ``{"jsonrpc": "2.0", "id": <the client's id>,
"result": …}``. When a worker command finds no act left, :meth:`Offline.run` returns and the
exchange waits there, to be resumed with more acts.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.sse import Event, SSEDecoder, encode_event
from gateway.errors import POOL_EXHAUSTED, TranscriptError, UpstreamError
from gateway.exchange.commands import (
    ENDED,
    OPENED,
    REPORTS,
    Answer,
    CheckWebhook,
    Command,
    CommandGenerator,
    Count,
    Deadline,
    Emit,
    EndStream,
    Flush,
    Found,
    Loaded,
    MarkCardStale,
    NewCallback,
    Open,
    Post,
    Read,
    ReadBody,
    Respond,
    Sleep,
    StartStream,
)
from gateway.invariants.model import Clock, Finding, TaskRecord
from gateway.invariants.timeline import TimelineEntry
from gateway.ledger.memory import MemoryLedger
from gateway.perform import THROWN, Performer
from gateway.records import Key, WindowEvent

T = TypeVar("T")


def run_now(step: Awaitable[T]) -> T:
    """The result of ``step``, a coroutine that never suspends (the memory ledger's calls, the
    offline handlers): run to its end at once, no event loop.

    Raises:
        RuntimeError: it suspended (it awaited real I/O).
    """
    assert isinstance(step, Coroutine)
    try:
        step.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    step.close()
    raise RuntimeError("an offline step awaited something: it is not offline")


class Ledger:
    """The ledger of an offline run: a :class:`~gateway.ledger.memory.MemoryLedger` (``memory``,
    event ids ``"1"``, ``"2"``, … in append order) with synchronous reads and writes for
    transcripts and tests. The views (:attr:`records`, :attr:`versions`, :attr:`resync`,
    :attr:`windows`) are copies."""

    def __init__(self, memory: MemoryLedger | None = None) -> None:
        self.memory = memory if memory is not None else MemoryLedger(run_id="")

    def get(self, upstream: str, task_id: str, *, tenant: str = "") -> TaskRecord | None:
        """The record, or ``None``."""
        stored = run_now(self.memory.get(upstream, task_id, tenant=tenant))
        return stored.record if stored is not None else None

    def load(self, upstream: str, task_id: str, clock: Clock, *, tenant: str = "") -> Loaded:
        """The record with its version and flag, read at ``clock``."""
        stored = run_now(self.memory.get(upstream, task_id, tenant=tenant))
        if stored is None:
            return Loaded(None, clock)
        return Loaded(stored.record, clock, stored.version, stored.needs_resync)

    def put(self, record: TaskRecord, expected_version: int) -> int:
        """Compare-and-set ``record`` over ``expected_version`` (:meth:`MemoryLedger.put`).

        Raises:
            VersionConflictError: the stored version is not ``expected_version`` (0: absent).
        """
        return run_now(self.memory.put(record, expected_version))

    def add(self, record: TaskRecord) -> None:
        """Hold ``record`` over whatever is held (a new version; no compare-and-set to lose)."""
        stored = run_now(self.memory.get(record.upstream, record.task_id, tenant=record.tenant))
        self.put(record, stored.version if stored is not None else 0)

    def flag(self, upstream: str, task_id: str, flag: bool = True, *, tenant: str = "") -> None:
        """Set (or clear) one record's ``needs_resync`` flag without a write."""
        self.memory.set_resync(upstream, task_id, flag, tenant=tenant)

    def mark_resync(self) -> int:
        """Flag every non-terminal record ``needs_resync`` (a restart of a durable ledger);
        returns how many."""
        live = [key for key, stored in self.memory.records().items() if not stored.record.terminal]
        for upstream, tenant, task_id in live:
            self.memory.set_resync(upstream, task_id, True, tenant=tenant)
        return len(live)

    @property
    def records(self) -> dict[Key, TaskRecord]:
        """Every record, by ``(upstream, tenant, task_id)``."""
        return {key: stored.record for key, stored in self.memory.records().items()}

    @property
    def versions(self) -> dict[Key, int]:
        """Every record's version."""
        return {key: stored.version for key, stored in self.memory.records().items()}

    @property
    def resync(self) -> set[Key]:
        """The keys flagged ``needs_resync``."""
        return {key for key, stored in self.memory.records().items() if stored.needs_resync}

    @property
    def windows(self) -> dict[Key, list[WindowEvent]]:
        """Each task's replay window, oldest first (tasks with none are absent)."""
        out = {}
        for upstream, tenant, task_id in self.memory.records():
            events = self.memory.window(upstream, task_id, tenant=tenant)
            if events:
                out[(upstream, tenant, task_id)] = events
        return out


@dataclass(frozen=True, slots=True)
class Output:
    """One thing the client received: a whole response (``frame`` False) or one SSE event.
    ``doc`` is its JSON document (``None`` for an SSE comment)."""

    frame: bool
    status: int
    doc: Any
    event: str | None = None
    id: str | None = None


@dataclass
class Offline(Performer):
    """Performs the commands of exchanges on ``upstream`` without network I/O: the ledger
    commands by :class:`~gateway.perform.Performer`'s handlers over ``ledger.memory``, the
    worker's from the scripted acts of ``worker``, the client's collected.

    ``now`` is the wall clock every :class:`Load` reads (the caller moves it). ``outputs``,
    ``findings`` and ``counts`` collect what the client received and what was reported;
    ``commands`` every command in order. ``request_body`` answers a ``ReadBody`` (a push
    notification's); callbacks made offline are ``cb-1``, ``cb-2``, … with worker tokens
    ``wt-1``, ``wt-2``, …, and every webhook may be reached.
    """

    upstream: str = "default"
    ledger: Ledger = field(default_factory=Ledger)
    now: float = 1_780_000_000.0
    req_id: Any = None
    worker: deque[dict[str, Any]] = field(default_factory=deque)
    outputs: list[Output] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    counts: list[Count] = field(default_factory=list)
    timeline: list[tuple[str, TimelineEntry]] = field(default_factory=list)
    """``(task_id, entry)`` of every :class:`AppendTimeline`, at :attr:`now`."""
    commands: list[Command] = field(default_factory=list)
    request_body: bytes = b""
    _reply: Any = None
    _exc: BaseException | None = None
    _pending: Any = None
    _callbacks: int = 0
    value: Any = None
    """What the last exchange run to its end returned."""

    HANDLERS = dict(Performer.HANDLERS)  # filled in below the class

    # --- the Performer's hooks ------------------------------------------------------------------

    @property
    def port(self) -> MemoryLedger:
        return self.ledger.memory

    @property
    def upstream_name(self) -> str:
        return self.upstream

    def clock(self) -> float:
        return self.now

    async def keep_timeline(self, task_id: str, entry: TimelineEntry, tenant: str) -> None:
        self.timeline.append((task_id, dataclasses.replace(entry, at=self.now)))

    # --- the run ----------------------------------------------------------------------------------

    def run(self, gen: CommandGenerator[Any]) -> bool:
        """Perform ``gen``'s commands until it returns (True) or waits for a worker act that
        is not scripted yet (False; :meth:`run` again after adding acts)."""
        while True:
            try:
                if self._exc is not None:
                    exc, self._exc = self._exc, None
                    cmd = gen.throw(exc)
                else:
                    cmd = gen.send(self._reply)
            except StopIteration as stop:
                self._reply, self.value = None, stop.value
                return True
            self._reply = None
            if not isinstance(cmd, Command):
                raise TypeError(f"not a command: {cmd!r}")
            self.commands.append(cmd)
            if type(cmd) in (Post, Open, Read) and not self.worker:
                self._pending = cmd
                return False
            self._perform(cmd)

    def resume(self, gen: CommandGenerator[Any]) -> bool:
        """Go on after :meth:`run` returned False: perform the waiting command, then run."""
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError("nothing to resume: the exchange has ended")
        self._perform(pending)
        return self.run(gen)

    def _perform(self, cmd: Command) -> None:
        """Perform one command through the table; its reply (or what it threw) goes back in
        at the next step."""
        handler = self.HANDLERS.get(type(cmd))
        if handler is None:
            if type(cmd) not in REPORTS:
                raise TypeError(f"not a command: {cmd!r}")
            if isinstance(cmd, Found):
                self.findings.extend(cmd.findings)
            elif isinstance(cmd, Count):
                self.counts.append(cmd)
            return
        try:
            self._reply = run_now(handler(self, cmd))
        except THROWN as exc:
            self._exc = exc

    # --- the worker, scripted ---------------------------------------------------------------------

    async def _worker(self, cmd: Post | Open | Read) -> Any:
        return self._act(type(cmd), self.worker.popleft())

    def _act(self, kind: type, act: dict[str, Any]) -> Any:
        """The reply (or the failure) a worker act gives to a worker command.

        Raises:
            TranscriptError: the act is malformed or does not answer this command.
        """
        fail = act.get("fail")
        if fail == "timeout":  # the messages the live upstream client gives
            raise UpstreamError("timeout", "worker timed out (ReadTimeout)", http_status=504)
        if fail == "connect":
            raise UpstreamError("connect", "worker unreachable: connection failed")
        if fail == "pool":  # the upstream's connection pool had none free (the gateway at capacity)
            raise UpstreamError(POOL_EXHAUSTED, "gateway at capacity: all connections to the worker in use",
                                http_status=503, retry_after=1)
        status = act.get("status", 200)
        if "answer" in act and kind is not Read and type(status) is int:
            return Answer(status, jsonrpc.dumps(act["answer"]))
        if act.get("open") is True and kind is Open:
            return OPENED
        if act.get("end") is True and kind is Read:
            return ENDED
        if act.get("cut") is True and kind is Read:
            raise UpstreamError("protocol", "worker connection failed (ReadError)")
        if isinstance(act.get("bytes"), bytes) and kind is Read:  # raw SSE text, as the worker wrote it
            return act["bytes"]
        events = act.get("events")
        if isinstance(events, list) and kind is Read:
            return b"".join(encode_event(jsonrpc.dumps(self._response(e))) for e in events)
        want = {Post: 'an "answer" or a "fail"', Open: '"open", an "answer" or a "fail"',
                Read: '"events", "end" or "cut"'}[kind]
        raise TranscriptError(f"worker act {act!r} cannot answer {kind.__name__}: it needs {want}")

    def _response(self, event: Any) -> Any:
        if isinstance(event, dict) and event.get("jsonrpc") == "2.0":
            return event
        return {"jsonrpc": "2.0", "id": self.req_id, "result": event}

    # --- the client, collected; the rest, nothing -----------------------------------------------------

    async def _respond(self, cmd: Respond) -> None:
        self.outputs.append(Output(False, cmd.status, _response_doc(cmd)))

    async def _emit(self, cmd: Emit) -> None:
        self.outputs.extend(_frames(cmd.frame))

    async def _read_body(self, cmd: Any) -> bytes:
        return self.request_body

    async def _new_callback(self, cmd: NewCallback) -> tuple[str, str]:
        self._callbacks += 1
        return f"cb-{self._callbacks}", f"wt-{self._callbacks}"

    async def _nothing(self, cmd: Any) -> None:
        """StartStream, Flush, EndStream, Deadline, Sleep, MarkCardStale, CheckWebhook: nothing."""


Offline.HANDLERS.update({
    Post: Offline._worker, Open: Offline._worker, Read: Offline._worker,
    Respond: Offline._respond, Emit: Offline._emit, ReadBody: Offline._read_body,
    NewCallback: Offline._new_callback, CheckWebhook: Offline._nothing,
    StartStream: Offline._nothing, Flush: Offline._nothing, EndStream: Offline._nothing,
    Deadline: Offline._nothing, Sleep: Offline._nothing, MarkCardStale: Offline._nothing,
})


def _response_doc(cmd: Respond) -> Any:
    if cmd.media == "sse":
        frames = _frames(cmd.body)
        return frames[0].doc if frames else None
    try:
        return orjson.loads(cmd.body)
    except orjson.JSONDecodeError:
        return cmd.body.decode("utf-8", "replace")


def _frames(data: bytes) -> list[Output]:
    out = []
    for item in SSEDecoder().feed(data):
        if isinstance(item, Event):
            out.append(Output(True, 200, orjson.loads(item.data), item.event, item.id))
        else:
            out.append(Output(True, 200, None, "comment"))
    return out
