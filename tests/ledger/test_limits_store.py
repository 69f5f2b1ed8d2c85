"""The fair-share counts (gateway/ledger/limits.py; docs/limits.md §4): GCRA's arithmetic as a
pure function, and one contract for the stores — beside a memory or SQLite ledger (in the
process), a Redis ledger and a Redis Cluster ledger (on the server, over the ledger's client)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.ledger.limits import MemoryLimitStore, RedisLimitStore, gcra, limit_store
from gateway.ledger.memory import MemoryLedger


class TestGcra:
    def test_a_full_bucket_lets_a_burst_through_then_paces(self) -> None:
        tat, now = 0.0, 100.0
        for _ in range(3):  # burst 3 at 1 request per second
            tat, wait = gcra(tat, now, 1.0, 3)
            assert wait == 0.0
        held, wait = gcra(tat, now, 1.0, 3)
        assert held == tat and wait == pytest.approx(1.0)

    def test_the_bucket_refills_at_the_rate(self) -> None:
        tat, _ = gcra(0.0, 100.0, 2.0, 1)
        _, wait = gcra(tat, 100.25, 2.0, 1)
        assert wait == pytest.approx(0.25)
        _, wait = gcra(tat, 100.5, 2.0, 1)
        assert wait == 0.0


@pytest.fixture(params=["memory", "redis", pytest.param("redis-cluster", marks=pytest.mark.slow)])
async def store(request: pytest.FixtureRequest, make_ledger: Any) -> Any:
    """A store of each kind, the Redis ones over a ledger of their own key prefix."""
    if request.param == "memory":
        assert isinstance(limit_store(MemoryLedger()), MemoryLimitStore)
        return MemoryLimitStore()
    led = await make_ledger()
    made = limit_store(led)
    assert isinstance(made, RedisLimitStore)
    return made


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The ledger backend the store's Redis ledger is made with (``make_ledger``'s)."""
    return str(request.node.callspec.params["store"])


async def test_take_gives_a_burst_then_a_wait(store: Any) -> None:
    assert [await store.take("rate:caller:a", 0.01, 2) for _ in range(2)] == [0.0, 0.0]
    wait = await store.take("rate:caller:a", 0.01, 2)
    assert 90 < wait <= 100
    assert await store.take("rate:caller:b", 0.01, 2) == 0.0  # another scope, another bucket


async def test_acquire_adds_to_every_set_or_to_none(store: Any) -> None:
    keys = [("live:caller:a", 2), ("live:tenant:t", 1)]
    assert await store.acquire(keys, "p:1", 3600) == -1
    assert await store.acquire(keys, "p:2", 3600) == 1  # the tenant's set is full
    assert await store.count("live:caller:a") == 1 and await store.count("live:tenant:t") == 1
    await store.release([k for k, _ in keys], "p:1")
    assert await store.count("live:caller:a") == 0 and await store.count("live:tenant:t") == 0


async def test_a_bound_task_stays_until_it_ends(store: Any) -> None:
    keys = ["live:caller:a", "live:upstream:w"]
    assert await store.acquire([(k, 5) for k in keys], "p:1", 3600) == -1
    await store.bind(keys, "p:1", "t\0w\0\0t-1")
    assert [m for m, _ in await store.members("live:caller:a")] == ["t\0w\0\0t-1"]
    assert await store.acquire([(k, 5) for k in keys], "p:2", 0.0) == -1  # a task never goes stale by age
    assert await store.count("live:upstream:w") == 2
    await store.end("t\0w\0\0t-1")
    assert [m for m, _ in await store.members("live:upstream:w")] == ["p:2"]
    await store.end("t\0w\0\0t-1")  # twice: nothing more happens


async def test_stale_slots_are_dropped_at_the_next_acquire(store: Any) -> None:
    assert await store.acquire([("streams:caller:a", 1)], "s:1", 3600) == -1
    assert await store.acquire([("streams:caller:a", 1)], "s:2", 3600) == 0
    assert await store.acquire([("streams:caller:a", 1)], "s:2", -1.0) == -1  # s:1 is older than now + 1 s


async def test_add_and_discard(store: Any) -> None:
    await store.add(["push:caller:a"], ["cb-1", "cb-2"])
    assert await store.count("push:caller:a") == 2
    await store.discard("push:caller:a", ["cb-1"])
    assert [m for m, _ in await store.members("push:caller:a")] == ["cb-2"]
