"""Load → judge → compare-and-set → store: the one loop every exchange (and replay, and the
engine's test playbook) runs for a worker payload, as generator steps (docs/architecture.md,
"The exchange layer"). Pure: it yields :mod:`~gateway.exchange.commands` and never touches
storage itself.

The ledger change is stored before the payload is forwarded (write-before-forward). A lost
compare-and-set race reloads and judges again, up to :data:`CAS_ATTEMPTS` times. A write that
would only move the observation time by less than :data:`OBSERVATION_WRITE_SECONDS` is
skipped (a stream of WORKING updates does not rewrite the record per event), unless the record
is flagged ``needs_resync``: every store clears that flag (:class:`~gateway.exchange.commands.Store`).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Protocol

from gateway.a2a.jsonrpc import Operation
from gateway.errors import LedgerError, VersionConflictError
from gateway.exchange.commands import (
    AppendEvent,
    AppendTimeline,
    CommandGenerator,
    Count,
    Found,
    Load,
    Loaded,
    Store,
    StoreAndAppend,
)
from gateway.exchange.model import Policy
from gateway.invariants import engine
from gateway.invariants.model import Action, Exchange, Outcome, StreamState, TaskRecord
from gateway.invariants.timeline import payload_entry

CAS_ATTEMPTS = 8
OBSERVATION_WRITE_SECONDS = 1.0

_content = operator.attrgetter(*(f.name for f in dataclasses.fields(TaskRecord)
                                 if f.name != "observed_at"))
"""A record's fields other than its observation time, as a tuple."""


def only_fresher(old: TaskRecord | None, new: TaskRecord) -> bool:
    """True when ``new`` differs from ``old`` only by an observation time less than
    :data:`OBSERVATION_WRITE_SECONDS` later (observation times only matter at heartbeat
    granularity)."""
    if old is None or new.observed_at - old.observed_at >= OBSERVATION_WRITE_SECONDS:
        return False
    return bool(_content(new) == _content(old))


class WindowSink(Protocol):
    """Where a stream event's judge puts the event into the replay window together with the
    record (:class:`~gateway.exchange.commands.StoreAndAppend`): the stream side."""

    def window_event(self, outcome: Outcome) -> AppendEvent | None:
        """The window append of the event judged as ``outcome``; ``None`` when it is not
        delivered (refused, dropped, a repeated snapshot) or the window is off."""
        ...

    def appended(self, event_id: str, lineage: str) -> None:
        """The append of :meth:`window_event` was kept with the record, as ``event_id``."""
        ...


def load(policy: Policy, task_id: str | None, tenant: str = "") -> CommandGenerator[Loaded]:
    """The record of ``task_id`` in ``tenant`` and the time.

    Raises:
        LedgerError: the ledger failed and ``policy.fail_open`` is off (with it, the failure
            reads as "no record").
    """
    try:
        loaded: Loaded = yield Load(task_id, tenant)
    except LedgerError:
        if not policy.fail_open:
            raise
        loaded = yield Load(None)
    return loaded


def judge(
    policy: Policy, ex: Exchange, stream: StreamState | None, result: Any, *,
    direction: str = "answer", forced_get: str | None = None, window: WindowSink | None = None,
    stored: list[tuple[TaskRecord | None, TaskRecord]] | None = None,
) -> CommandGenerator[Outcome]:
    """Judge one worker payload (a unary ``result`` or one stream event's ``result``) and
    store its ledger change first. A ``ListTasks`` result is judged task by task
    (:func:`judge_list`). Once stored, an observation worth it goes into the task's timeline
    (:func:`~gateway.invariants.timeline.payload_entry`, as ``direction``: ``answer``,
    ``event`` or ``probe``, with the ``forced_get`` reason of a probe). A payload the engine
    does not refuse records the exchange's caller as seen on its task
    (:func:`~gateway.invariants.engine.with_caller`, docs/callers.md §2): the worker answered
    that caller about that task.

    A stream event (``window`` given) is judged first against the record its stream last
    read or stored (``Load(cached=True)``; docs/architecture.md, "A stream holds its record"):
    when the outcome changes the record, the compare-and-set over that version proves the record
    current, and the event goes into the replay window in the same ledger operation
    (``window.window_event``); when it changes nothing, the record is read again, and the
    event judged again only if it moved.

    With ``stored``, the store that won is appended to it as ``(the record the last Load read
    before it, the record stored)`` — never a state a concurrent writer recorded meanwhile (the
    sweep's, docs/sweep.md §4).

    Returns the engine's :class:`~gateway.invariants.model.Outcome`, its findings reported.

    Raises:
        LedgerError: the ledger failed and ``policy.fail_open`` is off; with it the payload is
            forwarded unchecked (``a2a_gateway_unchecked_total``).
    """
    if ex.operation is Operation.LIST:
        return (yield from judge_list(policy, ex, result))
    task_id = engine.payload_task_id(result)
    load = fresh = Load(task_id, ex.tenant)
    if window is not None and task_id is not None:
        load = Load(task_id, ex.tenant, cached=True)
    again: Loaded | None = None  # a record read already, to be judged on
    try:
        for _ in range(CAS_ATTEMPTS):  # one generator level: this runs once per SSE event
            if again is None:
                loaded: Loaded = yield load
            else:
                loaded, again = again, None
            load = fresh
            record = loaded.record
            outcome = engine.check_payload(ex, stream, record, result, loaded.clock)
            new = outcome.record
            if ex.caller is not None and outcome.action is not Action.REJECT \
                    and (new is not None or not loaded.needs_resync):  # a store clears the flag
                seen_on = new if new is not None else record
                if seen_on is not None and ex.caller not in seen_on.callers:
                    new = outcome.record = engine.with_caller(ex, seen_on)
            if new is not None and (loaded.needs_resync or not only_fresher(record, new)):
                event = window.window_event(outcome) if window is not None else None
                if event is not None and (event.task_id, event.tenant) != (new.task_id, new.tenant):
                    event = None  # another task's record (a Message naming it): the event is the stream's
                try:
                    if event is None:
                        yield Store(new, loaded.version)
                    else:
                        _, event_id, lineage = yield StoreAndAppend(new, loaded.version, event)
                        window.appended(event_id, lineage)  # type: ignore[union-attr]
                except VersionConflictError:
                    yield Count("ledger_conflicts")
                    continue
                if stored is not None:
                    stored.append((record, new))
            elif loaded.cached:  # nothing to store proves the held record current: read it
                current: Loaded = yield fresh
                if current.version != loaded.version or current.record != record \
                        or current.needs_resync != loaded.needs_resync:
                    again = current
                    continue
            if outcome.findings:
                yield Found(tuple(outcome.findings), task_id or ex.task_id, tenant=ex.tenant)
            noted = task_id or ex.task_id
            if noted is not None:
                entry = payload_entry(ex, direction, record, outcome, result, forced_get=forced_get)
                if entry is not None:
                    yield AppendTimeline(noted, entry, ex.tenant)
            return outcome
        raise LedgerError(f"task {task_id}: too many concurrent updates")
    except LedgerError:
        if not policy.fail_open:
            raise
        yield Count("unchecked")
        return Outcome(Action.FORWARD, result, stream)


def judge_list(policy: Policy, ex: Exchange, result: Any) -> CommandGenerator[Outcome]:
    """Judge a ``ListTasks`` result ``{"tasks": [Task…], …}``: each Task as the answer to a
    ``GetTask`` for it — normalized, stored, and corrected when the ledger holds it terminal
    (a poisoned task is listed with its recorded terminal status). A task the engine refuses
    (an unknown state) refuses the whole list. Anything else is forwarded as it is."""
    tasks = result.get("tasks") if isinstance(result, dict) else None
    if not isinstance(tasks, list):
        return Outcome(Action.FORWARD, result)
    out: list[Any] = []
    for task in tasks:
        task_id = task.get("id") if isinstance(task, dict) else None
        if not isinstance(task_id, str) or not task_id:
            out.append(task)
            continue
        get_ex = dataclasses.replace(ex, operation=Operation.GET, task_id=task_id)
        outcome = yield from judge(policy, get_ex, None, task)
        if outcome.action is Action.REJECT:
            return outcome
        out.append(outcome.result)
    if all(a is b for a, b in zip(out, tasks, strict=True)):
        return Outcome(Action.FORWARD, result)
    return Outcome(Action.FORWARD, {**result, "tasks": out})


def touch(task_id: str, tenant: str = "") -> CommandGenerator[None]:
    """Record a sign of life of a live task without a payload (a ping on its own stream):
    ``observed_at`` moves on, nothing else. Best effort: a lost race or a ledger failure is
    ignored (the next event records the time anyway). A record flagged ``needs_resync`` is left
    alone: a store would clear the flag, which only an observation of the task's state may do
    (and until then its observation time decides nothing: ``restart`` comes first)."""
    try:
        loaded: Loaded = yield Load(task_id, tenant)
        record = loaded.record
        if record is None or record.terminal or loaded.needs_resync:
            return
        fresher = dataclasses.replace(record, observed_at=loaded.clock.wall)
        if only_fresher(record, fresher):
            return
        yield Store(fresher, loaded.version)
    except (VersionConflictError, LedgerError):
        return


def clear_resync(policy: Policy, loaded: Loaded) -> CommandGenerator[None]:
    """Drop the ``needs_resync`` flag of the loaded record: it is stored unchanged over its
    loaded version, which clears the flag (:class:`~gateway.exchange.commands.Store`). A lost
    race means someone else stored the record, which cleared it too.

    Raises:
        LedgerError: the ledger failed and ``policy.fail_open`` is off (with it, the flag
            stays for the next action).
    """
    if loaded.record is not None and loaded.needs_resync:
        try:
            yield Store(loaded.record, loaded.version)
        except VersionConflictError:
            pass
        except LedgerError:
            if not policy.fail_open:
                raise
