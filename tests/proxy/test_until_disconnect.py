"""``until_disconnect``: the work runs in the caller's task and a watcher cancels it when the
client leaves or the drain signal fires; nobody else's cancellation is swallowed.

Plain asyncio with a fake ASGI ``receive``; no server needed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.proxy.forward import until_disconnect


class Client:
    """A fake ASGI ``receive``: blocks until :meth:`leave`, then says ``http.disconnect``."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()
        self.calls = 0

    async def receive(self) -> dict[str, Any]:
        self.calls += 1
        await self.gone.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self.gone.set()


async def test_finished_work_returns_its_result_and_leaves_no_watcher() -> None:
    client = Client()
    before = len(asyncio.all_tasks())

    async def work() -> str:
        await asyncio.sleep(0)
        assert len(asyncio.all_tasks()) == before  # a quick exchange starts no watcher task
        return "done"

    assert await until_disconnect(client.receive, work()) == (True, "done")
    assert client.calls == 0
    await asyncio.sleep(0)  # let the cancelled watcher finish
    assert len(asyncio.all_tasks()) == before
    assert asyncio.current_task().cancelling() == 0


async def test_disconnect_cancels_the_work_and_runs_its_finally() -> None:
    client = Client()
    started, cleaned = asyncio.Event(), []

    async def work() -> str:
        try:
            started.set()
            await asyncio.Event().wait()  # a worker that never answers
            return "never"
        finally:
            cleaned.append(True)

    async def leave_later() -> None:
        await started.wait()
        client.leave()

    leaver = asyncio.ensure_future(leave_later())
    assert await until_disconnect(client.receive, work()) == (False, None)
    await leaver
    assert cleaned == [True]
    assert asyncio.current_task().cancelling() == 0
    await asyncio.sleep(0)  # the caller's task is usable afterwards: no stray cancellation


async def test_stop_signal_cancels_the_work() -> None:
    client, stop = Client(), asyncio.Event()

    async def work() -> None:
        stop.set()
        await asyncio.Event().wait()

    assert await until_disconnect(client.receive, work(), stop=stop) == (False, None)
    await asyncio.sleep(0)


async def test_work_errors_propagate() -> None:
    client = Client()

    async def work() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await until_disconnect(client.receive, work())


async def test_someone_elses_cancellation_is_not_swallowed() -> None:
    client = Client()
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    caller = asyncio.ensure_future(until_disconnect(client.receive, work()))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_signal_while_work_swallows_the_cancel_still_returns_the_result() -> None:
    """A work that catches the cancellation and finishes anyway: its result is kept, and the
    caller's task carries no leftover cancellation."""
    client = Client()

    async def work() -> str:
        client.leave()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "finished anyway"
        return "never"

    assert await until_disconnect(client.receive, work()) == (True, "finished anyway")
    assert asyncio.current_task().cancelling() == 0
    await asyncio.sleep(0)


async def test_disconnect_and_stop_together_cancel_the_work_once() -> None:
    """Both signals at once (a client leaving during the drain): one cancellation, absorbed."""
    client, stop = Client(), asyncio.Event()
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    async def both() -> None:
        await started.wait()
        client.leave()
        stop.set()

    trigger = asyncio.ensure_future(both())
    assert await until_disconnect(client.receive, work(), stop=stop) == (False, None)
    await trigger
    assert asyncio.current_task().cancelling() == 0
    await asyncio.sleep(0)


async def test_a_failing_receive_counts_as_a_disconnect() -> None:
    async def receive() -> dict[str, Any]:
        raise OSError("transport gone")

    async def work() -> None:
        await asyncio.Event().wait()

    assert await until_disconnect(receive, work()) == (False, None)
    assert asyncio.current_task().cancelling() == 0
