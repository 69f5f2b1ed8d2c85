"""The retry stores (gateway/ledger/retries.py), one contract over the ledger backends: memory,
SQLite (a real file), Redis and Redis Cluster (real servers, tests/ledger/conftest.py)."""

from __future__ import annotations

import asyncio
import dataclasses

from gateway.exchange.retries import DONE, IN_FLIGHT, UNKNOWN, RetryEntry
from gateway.ledger.base import TaskLedger
from gateway.ledger.retries import RetryLimits, RetryStore, retry_store

NOW = 1_780_000_000.0


def entry(digest: str = "d-1", state: str = IN_FLIGHT, task_id: str | None = None) -> RetryEntry:
    return RetryEntry(digest, state, NOW, NOW, task_id)


def store_of(ledger: TaskLedger, **limits: float) -> RetryStore:
    return retry_store(ledger, RetryLimits(**limits))  # type: ignore[arg-type]


async def test_of_two_claims_of_one_key_exactly_one_takes_it(ledger: TaskLedger) -> None:
    store = store_of(ledger)
    results = await asyncio.gather(store.claim("k", entry("a"), NOW), store.claim("k", entry("b"), NOW))
    assert results.count(None) == 1
    winner, loser = ("a", 1) if results[0] is None else ("b", 0)
    assert results[loser] == entry(winner)  # the other one is told who holds the key
    assert await store.get("k", NOW) == entry(winner)


async def test_the_outcome_replaces_the_entry_and_a_release_frees_the_key(ledger: TaskLedger) -> None:
    store = store_of(ledger)
    assert await store.claim("k", entry(), NOW) is None
    done = dataclasses.replace(entry(state=DONE, task_id="t-1"), result=None)
    await store.put("k", done, NOW + 1)
    assert await store.claim("k", entry("other"), NOW + 2) == done
    await store.delete("k")
    assert await store.get("k", NOW + 2) is None
    assert await store.claim("k", entry("other"), NOW + 3) is None


async def test_a_key_lives_ttl_seconds(ledger: TaskLedger) -> None:
    store = store_of(ledger, ttl_seconds=60)
    assert await store.claim("k", entry(), NOW) is None
    assert await store.get("k", NOW + 59) == entry()
    if ledger.backend != "redis":  # Redis expires by its own clock (PX): checked by the key's TTL
        assert await store.get("k", NOW + 61) is None
        assert await store.claim("k", entry("new"), NOW + 61) is None


async def test_at_most_max_keys_are_kept_the_oldest_go_first(ledger: TaskLedger) -> None:
    store = store_of(ledger, max_keys=3)
    for n in range(5):
        assert await store.claim(f"k{n}", entry(f"d{n}"), NOW + n) is None
    kept = [n for n in range(5) if await store.get(f"k{n}", NOW + 5) is not None]
    assert kept == [2, 3, 4]


async def test_keys_in_flight_at_start_up_become_unknown_except_on_redis(ledger: TaskLedger) -> None:
    store = store_of(ledger)
    await store.claim("k", entry(task_id="t-1"), NOW)
    changed = await store.recover(NOW + 5)
    got = await store.get("k", NOW + 5)
    assert got is not None
    if ledger.backend == "redis":  # replicas may be running it: retries.in_flight_seconds decides
        assert changed == 0 and got.state == IN_FLIGHT
    else:
        assert changed == 1 and got.state == UNKNOWN and got.task_id == "t-1"
