"""The one table of command handlers over the :class:`~gateway.ledger.base.TaskLedger` port.

An exchange (:mod:`gateway.exchange`) yields commands; a *performer* does what each says and
feeds the reply (or the exception) back in. :class:`Performer` holds what every performer does
the same way — the ledger commands (tasks, the replay window, push configs, the push outbox) —
in its table :attr:`Performer.HANDLERS`; its subclasses add the worker and the client and
override what they do differently:

* :class:`gateway.proxy.driver.Driver`, the online performer: a real upstream client and client
  socket, the instrumented ledger (:class:`~gateway.proxy.instrumented.InstrumentedLedger`:
  every call timed and counted), a stream's held record;
* :class:`gateway.offline.Offline`, the offline one: a scripted worker, the client's documents
  collected, over a :class:`~gateway.ledger.memory.MemoryLedger` — the same handlers, so a
  transcript replays as the gateway would judge it (docs/architecture.md, "The exchange layer").

A new command is registered by writing its handler, ``async def _handler(self, cmd) -> reply``,
on the class that performs it and adding ``CommandClass: Class._handler`` to that class's
``HANDLERS`` dict (``HANDLERS = {**Base.HANDLERS, ...}`` in a subclass); a command no table
names is a report (``Count``, ``Found``, ``Degraded``, ``Log``) or a ``TypeError``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from gateway.errors import (
    BodyTooLargeError,
    ClientGoneError,
    LedgerError,
    PushLimitError,
    UpstreamError,
    VersionConflictError,
)
from gateway.exchange.commands import (
    AppendEvent,
    AppendTimeline,
    Command,
    DeletePushConfig,
    Enqueue,
    GetPushConfig,
    Load,
    Loaded,
    NewCallback,
    PushBound,
    PushConfigs,
    PutPushConfig,
    ReadWindow,
    Store,
    StoreAndAppend,
)
from gateway.invariants.model import Clock
from gateway.invariants.timeline import TimelineEntry
from gateway.ledger.base import TaskLedger
from gateway.records import PushConfigEntry, Replay


Handler = Callable[[Any, Any], Awaitable[Any]]
"""A command handler: ``await handler(performer, cmd)`` is the command's reply."""

THROWN: tuple[type[BaseException], ...] = (LedgerError, UpstreamError, VersionConflictError, TimeoutError,
                                           PushLimitError, BodyTooLargeError, ClientGoneError)
"""What a handler raises that is thrown into the exchange (anything else is a bug, and ends
the run)."""


class Performer:
    """Performs the ledger commands of exchanges on the upstream :attr:`upstream_name` against
    the ledger :attr:`port`. Subclasses add their own commands to :attr:`HANDLERS` and set the
    hooks: :attr:`port` (the online driver's is the instrumented ledger: every call timed and
    counted), :attr:`upstream_name`, :meth:`clock` (the wall clock), :meth:`keep_timeline`,
    :meth:`enqueued` and :attr:`outbox_limits`."""

    __slots__ = ()

    HANDLERS: ClassVar[dict[type[Command], Handler]] = {}
    """Command class -> handler (filled in below the class)."""

    # --- the hooks -------------------------------------------------------------------------------

    @property
    def port(self) -> TaskLedger:
        """The ledger the commands are performed against."""
        raise NotImplementedError

    @property
    def upstream_name(self) -> str:
        """The upstream whose tasks the commands name."""
        raise NotImplementedError

    def clock(self) -> float:
        """The wall clock, in seconds since the epoch (the time a ``Load`` reads)."""
        return time.time()

    @property
    def outbox_limits(self) -> tuple[int, int]:
        """``(max per task, max in all)`` of the push outbox."""
        return 100, 10_000

    async def keep_timeline(self, task_id: str, entry: TimelineEntry, tenant: str) -> None:
        """Keep a timeline entry (never raises: the timeline explains, it decides nothing)."""

    def enqueued(self) -> None:
        """An outbox entry was added (the online driver wakes the delivery loop)."""

    # --- the ledger ------------------------------------------------------------------------------

    async def _load(self, cmd: Load) -> Loaded:
        task_id = cmd.task_id
        if task_id is None:
            return Loaded(None, Clock(self.clock()))
        ledger, upstream, tenant = self.port, self.upstream_name, cmd.tenant
        stored = await ledger.get(upstream, task_id, tenant=tenant)
        if stored is None:
            return Loaded(None, Clock(self.clock()))
        return Loaded(stored.record, Clock(self.clock()), stored.version, stored.needs_resync)

    async def _store(self, cmd: Store) -> int:
        ledger = self.port
        version: int = await ledger.put(cmd.record, cmd.expected_version)
        return version

    async def _store_and_append(self, cmd: StoreAndAppend) -> tuple[int, str, str]:
        ledger, event = self.port, cmd.event
        reply: tuple[int, str, str] = await ledger.put_with_event(
            cmd.record, cmd.expected_version, event.lineage, event.payload, self.clock())
        return reply

    async def _append_event(self, cmd: AppendEvent) -> tuple[str, str]:
        ledger, upstream = self.port, self.upstream_name
        reply: tuple[str, str] = await ledger.append_event(
            upstream, cmd.task_id, cmd.lineage, cmd.payload, self.clock(), tenant=cmd.tenant)
        return reply

    async def _read_window(self, cmd: ReadWindow) -> Replay:
        ledger, upstream = self.port, self.upstream_name
        replay: Replay = await ledger.events_after(
            upstream, cmd.task_id, cmd.after, tenant=cmd.tenant)
        return replay

    async def _append_timeline(self, cmd: AppendTimeline) -> None:
        await self.keep_timeline(cmd.task_id, cmd.entry, cmd.tenant)

    # --- push configs and the outbox (docs/push.md) -------------------------------------------------

    async def _push_bound(self, cmd: PushBound) -> frozenset[str]:
        ledger = self.port
        tasks = set()
        for callback_id in cmd.callback_ids:
            entry = await ledger.get_push_config(callback_id)
            if entry is not None and entry.task_id:
                tasks.add(entry.task_id)
        return frozenset(tasks)

    async def _push_configs(self, cmd: PushConfigs) -> list[PushConfigEntry]:
        ledger, upstream = self.port, self.upstream_name
        entries: list[PushConfigEntry] = await ledger.push_configs(
            upstream, cmd.task_id, tenant=cmd.tenant)
        return entries

    async def _get_push_config(self, cmd: GetPushConfig) -> PushConfigEntry | None:
        ledger = self.port
        entry: PushConfigEntry | None = await ledger.get_push_config(
            cmd.callback_id)
        return entry

    async def _put_push_config(self, cmd: PutPushConfig) -> None:
        ledger = self.port
        await ledger.put_push_config(
            cmd.entry, self.clock(), max_per_task=cmd.max_per_task, max_total=cmd.max_total)

    async def _delete_push_config(self, cmd: DeletePushConfig) -> bool:
        ledger = self.port
        deleted: bool = await ledger.delete_push_config(cmd.callback_id)
        return deleted

    async def _enqueue(self, cmd: Enqueue) -> str:
        ledger, upstream = self.port, self.upstream_name
        per_task, total = self.outbox_limits
        entry_id: str = await ledger.outbox_add(
            upstream, cmd.task_id, cmd.callback_id, cmd.body, self.clock(), tenant=cmd.tenant,
            max_per_task=per_task, max_total=total)
        self.enqueued()
        return entry_id

    async def _new_callback(self, cmd: NewCallback) -> tuple[str, str]:
        return secrets.token_urlsafe(24), secrets.token_urlsafe(24)


Performer.HANDLERS = {
    Load: Performer._load, Store: Performer._store, StoreAndAppend: Performer._store_and_append,
    AppendEvent: Performer._append_event, ReadWindow: Performer._read_window,
    AppendTimeline: Performer._append_timeline,
    PushBound: Performer._push_bound, PushConfigs: Performer._push_configs,
    GetPushConfig: Performer._get_push_config, PutPushConfig: Performer._put_push_config,
    DeletePushConfig: Performer._delete_push_config, Enqueue: Performer._enqueue,
    NewCallback: Performer._new_callback,
}
