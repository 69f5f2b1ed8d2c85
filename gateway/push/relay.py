"""The push relay on the running gateway (docs/push.md): ``rt.push``, what the rest of the
shell asks of push. Every decision is an exchange of :mod:`gateway.exchange.push` (the configs
rewritten on the way in, a worker's notification to a callback, a task update the sweep
judged) performed by the one driver (:mod:`gateway.proxy.driver`); this object holds what the
exchanges need of the running gateway — whether push is on, its bounds, the outbox's wake-up
— and :meth:`PushRelay.deliver_observed` for the sweep (docs/push.md §2.1).

It imports nothing of the proxy: the driver that performs its exchanges is handed in at
construction (:func:`gateway.app.build_app`), so the import graph keeps push below proxy
(docs/architecture.md §3).

Secrets: the client's webhook token and credentials live only in the ledger's push config
entry; they are never logged, never in a metric and never sent to the worker. The worker's
token is kept as its SHA-256 only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gateway.a2a.jsonrpc import Operation
from gateway.a2a.version import ProtocolVersion
from gateway.config import PushConfig
from gateway.exchange.commands import CommandGenerator
from gateway.exchange.push import (
    ANSWER_OPERATIONS,
    CALLBACK_PATH,
    CONFIG_OPERATIONS,
    NOTHING,
    PushConfigData,
    PushLimits,
    PushStep,
    observed,
)

__all__ = ["CALLBACK_PATH", "NOTHING", "PushConfigData", "PushRelay", "PushStep", "request_config_id"]

T = TypeVar("T")

_OPERATIONS = CONFIG_OPERATIONS | ANSWER_OPERATIONS | {Operation.PUSH_DELETE}

Perform = Callable[[str, CommandGenerator[Any]], Awaitable[Any]]
"""Performs an exchange no client asked for on the named upstream and returns its result (a
client-less driver; :func:`gateway.proxy.push.perform_for`)."""


class PushRelay:
    """The push relay of one gateway process (``rt.push``).

    Args:
        settings: the ``push`` section of the config in force (called each time: a reload
            changes it).
        perform: what performs an exchange of :mod:`gateway.exchange.push` on an upstream.
    """

    def __init__(self, settings: Callable[[], PushConfig], perform: Perform) -> None:
        self.settings = settings
        self.perform = perform
        self.wake = asyncio.Event()
        """Set when an entry was added to the outbox (the delivery loop looks at once)."""

    @property
    def enabled(self) -> bool:
        """``push.enabled``."""
        return self.settings().enabled

    @property
    def limits(self) -> PushLimits:
        """The bounds on relayed configs under the config in force."""
        cfg = self.settings()
        return PushLimits(cfg.max_configs_per_task, cfg.max_configs_total)

    def handles(self, operation: Operation) -> bool:
        """True when requests of ``operation`` go through the intake exchange
        (:func:`gateway.exchange.push.intake`)."""
        return self.enabled and operation in _OPERATIONS

    async def deliver_observed(self, upstream: str, task_id: str, stream_response: dict[str, Any], *,
                               tenant: str = "") -> int:
        """Enqueue one already-judged, already-recorded v1.0 StreamResponse (e.g. ``{"task":
        {...}}`` from the sweep's GetTask answer, docs/push.md §2.1) for every push config of
        the task under ``(upstream, tenant, task_id)``: the :func:`~gateway.exchange.push.observed`
        exchange. Returns how many outbox entries were added (0: the task has no push config,
        or push is off).

        Raises:
            LedgerError: the ledger failed. PushLimitError: the outbox is full (entries added
                before it stay).
        """
        if not self.enabled:
            return 0
        added: int = await self.perform(upstream, observed(task_id, stream_response, tenant, self.limits))
        return added


def request_config_id(operation: Operation, version: ProtocolVersion, params: Any) -> str | None:
    """The config id a JSON-RPC get / delete names: v1.0 ``params.id``, v0.3
    ``params.pushNotificationConfigId``."""
    if not isinstance(params, dict) or operation is not Operation.PUSH_DELETE:
        return None
    key = "pushNotificationConfigId" if version is ProtocolVersion.V0_3 else "id"
    value = params.get(key)
    return value if isinstance(value, str) and value else None
