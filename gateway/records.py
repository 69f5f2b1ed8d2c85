"""What the task ledger hands back besides the task record, sans I/O: the replay window's
events (docs/resume.md §1), the live tasks of the sweep's scan (docs/sweep.md §1) and the
push configs the gateway relays (docs/push.md §1).

These sit below both the ledger (which makes them) and the exchange layer (which reads them),
so storage never imports the exchange (docs/architecture.md §3). Plain frozen values, no
behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass

Key = tuple[str, str, str]
"""A task's key: ``(upstream, tenant, task_id)``."""


@dataclass(frozen=True, slots=True)
class WindowEvent:
    """One event of a task's replay window: its gateway-issued ``event_id`` (opaque, the
    SSE ``id:``), its ``lineage`` (the ``event_id`` of the first event of the client stream it
    was delivered on; a resumed stream goes on in the lineage it resumed) and the exchange's
    ``payload`` bytes (opaque to the ledger; :mod:`gateway.exchange.window` is their
    encoding)."""

    event_id: str
    lineage: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class Replay:
    """The answer to :meth:`~gateway.ledger.base.TaskLedger.events_after`: ``found`` when the
    asked-for id is in the task's window; then ``lineage`` is its lineage and ``events`` the
    window's later events of that lineage, oldest first (possibly none). Not found: ``lineage``
    ``None``, no events."""

    found: bool
    lineage: str | None = None
    events: tuple[WindowEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class LiveTask:
    """A live (non-terminal) task as the ledger's scan lists it
    (:meth:`~gateway.ledger.base.TaskLedger.live_before`): enough to name it and to page on.
    ``observed_at`` is wall-clock seconds since the epoch; ``tenant`` is ``""`` for none."""

    upstream: str
    tenant: str
    task_id: str
    observed_at: float

    @property
    def key(self) -> Key:
        """``(upstream, tenant, task_id)``."""
        return (self.upstream, self.tenant, self.task_id)


@dataclass(frozen=True, slots=True)
class PushConfigEntry:
    """One push config the gateway relays (docs/push.md §1), keyed by its ``callback_id`` (the
    unguessable last segment of the callback URL the worker was given). ``task_id`` is ``""``
    while an inline config of a send waits for the worker to name the task. ``data`` is opaque
    to the ledger (:class:`gateway.exchange.push.PushConfigData` is its form: the client's URL, token and
    authentication, the worker's token, the client's version and binding)."""

    callback_id: str
    upstream: str
    task_id: str
    data: bytes
    tenant: str = ""
