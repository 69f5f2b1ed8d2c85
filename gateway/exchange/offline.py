"""An exchange performed without I/O: a dict ledger, a clock set by the caller and a scripted
worker. ``a2a-gateway replay`` and the tests drive the very exchange objects the gateway runs,
so a transcript of a whole stream — cut, probe and resubscribe included — replays offline.

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
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.sse import Event, SSEDecoder, encode_event
from gateway.errors import POOL_EXHAUSTED, LedgerError, TranscriptError, UpstreamError, VersionConflictError
from gateway.exchange.commands import (
    ENDED,
    OPENED,
    Answer,
    AppendEvent,
    AppendTimeline,
    Command,
    CommandGenerator,
    Count,
    Emit,
    Found,
    Load,
    Loaded,
    Open,
    Post,
    Read,
    ReadWindow,
    Respond,
    Store,
    StoreAndAppend,
)
from gateway.invariants.model import Clock, Finding, TaskRecord
from gateway.invariants.timeline import TimelineEntry
from gateway.records import Replay, WindowEvent


Key = tuple[str, str, str]


@dataclass
class Ledger:
    """The records of an offline run, keyed by (upstream, tenant, task id), with the real ledgers'
    bookkeeping beside them and the same compare-and-set (:class:`~gateway.ledger.base.TaskLedger`):
    ``versions`` holds each record's version (a record put into ``records`` directly, without
    one, counts as version 1) and ``resync`` the keys flagged ``needs_resync``
    (:meth:`mark_resync`); every :meth:`put` clears the flag."""

    records: dict[Key, TaskRecord] = field(default_factory=dict)
    versions: dict[Key, int] = field(default_factory=dict)
    resync: set[Key] = field(default_factory=set)
    windows: dict[Key, list[WindowEvent]] = field(default_factory=dict)
    """Each task's replay window, unbounded (ids ``"1"``, ``"2"``, … in append order)."""
    appended: int = 0

    def append_event(self, upstream: str, task_id: str, lineage: str | None, payload: bytes, *,
                     tenant: str = "") -> tuple[str, str]:
        """Add an event to the task's window; returns ``(event_id, lineage)``."""
        self.appended += 1
        event_id = str(self.appended)
        event = WindowEvent(event_id, lineage or event_id, payload)
        self.windows.setdefault((upstream, tenant, task_id), []).append(event)
        return event_id, event.lineage

    def events_after(self, upstream: str, task_id: str, event_id: str, *, tenant: str = "") -> Replay:
        """The window's events after ``event_id`` in its lineage (:class:`Replay`)."""
        events = self.windows.get((upstream, tenant, task_id), [])
        for index, event in enumerate(events):
            if event.event_id == event_id:
                return Replay(True, event.lineage,
                              tuple(e for e in events[index + 1:] if e.lineage == event.lineage))
        return Replay(False)

    def get(self, upstream: str, task_id: str, *, tenant: str = "") -> TaskRecord | None:
        """The record, or ``None``."""
        return self.records.get((upstream, tenant, task_id))

    def add(self, record: TaskRecord) -> None:
        """Hold ``record`` (as version 1) without a compare-and-set."""
        self.records[(record.upstream, record.tenant, record.task_id)] = record

    def load(self, upstream: str, task_id: str, clock: Clock, *, tenant: str = "") -> Loaded:
        """The record with its version and flag, read at ``clock``."""
        key = (upstream, tenant, task_id)
        record = self.records.get(key)
        if record is None:
            return Loaded(None, clock)
        return Loaded(record, clock, self.versions.get(key, 1), key in self.resync)

    def put(self, record: TaskRecord, expected_version: int) -> int:
        """Store ``record`` as version ``expected_version + 1`` and clear its flag.

        Returns the new version.

        Raises:
            VersionConflictError: the stored version is not ``expected_version`` (0: absent).
        """
        key = (record.upstream, record.tenant, record.task_id)
        current = self.versions.get(key, 1) if key in self.records else 0
        if current != expected_version:
            raise VersionConflictError(f"{key}: expected version {expected_version}")
        self.records[key] = record
        self.versions[key] = expected_version + 1
        self.resync.discard(key)
        return expected_version + 1

    def mark_resync(self) -> int:
        """Flag every non-terminal record ``needs_resync`` (a restart); returns how many."""
        live = {key for key, record in self.records.items() if not record.terminal}
        self.resync |= live
        return len(live)


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
class Offline:
    """Performs the commands of exchanges on ``upstream`` without I/O.

    ``now`` is the wall clock every :class:`Load` reads (the caller moves it). ``outputs``,
    ``findings`` and ``counts`` collect what the client received and what was reported;
    ``commands`` every command in order.
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
    _reply: Any = None
    _exc: BaseException | None = None
    _pending: Any = None
    value: Any = None
    """What the last exchange run to its end returned."""

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
            try:
                self._reply = self._perform(cmd)
            except (UpstreamError, VersionConflictError, LedgerError) as exc:
                self._exc = exc

    def resume(self, gen: CommandGenerator[Any]) -> bool:
        """Go on after :meth:`run` returned False: perform the waiting command, then run."""
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError("nothing to resume: the exchange has ended")
        try:
            self._reply = self._perform(pending)
        except (UpstreamError, VersionConflictError, LedgerError) as exc:
            self._exc = exc
        return self.run(gen)

    def _perform(self, cmd: Any) -> Any:
        kind = type(cmd)
        if kind is Load:
            if cmd.task_id is None:
                return Loaded(None, Clock(self.now))
            return self.ledger.load(self.upstream, cmd.task_id, Clock(self.now), tenant=cmd.tenant)
        if kind is Store:
            return self.ledger.put(cmd.record, cmd.expected_version)
        if kind is AppendEvent:
            return self.ledger.append_event(self.upstream, cmd.task_id, cmd.lineage, cmd.payload,
                                            tenant=cmd.tenant)
        if kind is StoreAndAppend:  # the append only when the compare-and-set held
            version = self.ledger.put(cmd.record, cmd.expected_version)
            event = cmd.event
            return (version, *self.ledger.append_event(self.upstream, event.task_id, event.lineage,
                                                       event.payload, tenant=event.tenant))
        if kind is ReadWindow:
            return self.ledger.events_after(self.upstream, cmd.task_id, cmd.after, tenant=cmd.tenant)
        if kind in (Post, Open, Read):
            return self._act(kind, self.worker.popleft())
        if kind is Respond:
            self.outputs.append(Output(False, cmd.status, _response_doc(cmd)))
        elif kind is Emit:
            self.outputs.extend(_frames(cmd.frame))
        elif kind is Found:
            self.findings.extend(cmd.findings)
        elif kind is Count:
            self.counts.append(cmd)
        elif kind is AppendTimeline:
            self.timeline.append((cmd.task_id, dataclasses.replace(cmd.entry, at=self.now)))
        # StartStream, Flush, EndStream, Deadline, Sleep, MarkCardStale, Degraded, Log: nothing
        return None

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
