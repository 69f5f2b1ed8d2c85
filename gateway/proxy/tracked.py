"""The ``a2a_gateway_tracked_tasks`` gauge, refreshed from the ledger in the background.

A ``/metrics`` scrape only reads the gauge; this loop is what asks the ledger, once every
``admin.tracked_refresh_seconds``, whatever the scrape rate. Each ask is one
``count_by_state`` (a few entries, however many tasks the ledger holds) through
:class:`~gateway.proxy.instrumented.InstrumentedLedger`, so it is timed as operation ``count`` and
a failure is counted and logged there; the gauge then keeps its last values until the next
refresh succeeds.
"""

from __future__ import annotations

import asyncio

from gateway.errors import LedgerError
from gateway.proxy.runtime import Runtime


async def refresh_tracked_forever(runtime: Runtime, every: float) -> None:
    """Set ``a2a_gateway_tracked_tasks`` from ``runtime.ledger.count_by_state()`` now and then
    every ``every`` seconds (after each refresh ends), until cancelled. Never returns; a
    :class:`~gateway.errors.LedgerError` skips that refresh and raises nothing."""
    while True:
        try:
            counts = await runtime.ledger.count_by_state()
        except LedgerError:
            pass
        else:
            runtime.metrics.set_tracked(counts)
        await asyncio.sleep(every)
