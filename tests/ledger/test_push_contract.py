"""The push relay's ledger additions (docs/push.md §3), one contract over every backend:
push configs by callback id and by task, and the durable outbox (order per task, leases,
retries, bounds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import PushLimitError
from gateway.ledger import ledger_from_url
from gateway.ledger.base import PushConfigEntry, TaskLedger
from gateway.ledger.sqlite import SCHEMA_VERSION

BIG = 1000


def cfg(callback_id: str, task_id: str = "t-1", *, tenant: str = "", data: bytes = b'{"url":"x"}') -> PushConfigEntry:
    return PushConfigEntry(callback_id, "w", task_id, data, tenant)


async def add(ledger: TaskLedger, task_id: str, body: bytes, at: float = 100.0, **kw: object) -> str:
    limits = {"max_per_task": BIG, "max_total": BIG, **kw}
    return await ledger.outbox_add("w", task_id, "cb", body, at, **limits)  # type: ignore[arg-type]


async def test_push_configs_round_trip_by_callback_and_by_task(ledger: TaskLedger) -> None:
    data = bytes(range(256))  # opaque bytes survive every backend
    await ledger.put_push_config(cfg("cb-1", data=data), 10.0, max_per_task=BIG, max_total=BIG)
    await ledger.put_push_config(cfg("cb-2"), 11.0, max_per_task=BIG, max_total=BIG)
    await ledger.put_push_config(cfg("cb-3", "t-2"), 12.0, max_per_task=BIG, max_total=BIG)
    await ledger.put_push_config(cfg("cb-4", tenant="acme"), 13.0, max_per_task=BIG, max_total=BIG)
    got = await ledger.get_push_config("cb-1")
    assert got == cfg("cb-1", data=data)
    assert [e.callback_id for e in await ledger.push_configs("w", "t-1")] == ["cb-1", "cb-2"]
    assert [e.callback_id for e in await ledger.push_configs("w", "t-1", tenant="acme")] == ["cb-4"]
    assert await ledger.get_push_config("nope") is None
    assert await ledger.delete_push_config("cb-1") is True
    assert await ledger.delete_push_config("cb-1") is False
    assert [e.callback_id for e in await ledger.push_configs("w", "t-1")] == ["cb-2"]


async def test_a_pending_config_is_bound_to_its_task_by_a_second_put(ledger: TaskLedger) -> None:
    await ledger.put_push_config(cfg("cb-p", ""), 10.0, max_per_task=BIG, max_total=BIG)
    assert [e.callback_id for e in await ledger.push_configs("w", "")] == ["cb-p"]
    await ledger.put_push_config(cfg("cb-p", "t-9"), 20.0, max_per_task=BIG, max_total=BIG)
    assert await ledger.push_configs("w", "") == []
    assert [e.task_id for e in await ledger.push_configs("w", "t-9")] == ["t-9"]
    assert await ledger.prune_push_configs(15.0) == 1  # created at 10: the bind kept the time


async def test_push_configs_are_bounded_per_task_and_in_total(ledger: TaskLedger) -> None:
    await ledger.put_push_config(cfg("a"), 1.0, max_per_task=2, max_total=3)
    await ledger.put_push_config(cfg("b"), 1.0, max_per_task=2, max_total=3)
    await ledger.put_push_config(cfg("b", data=b"new"), 1.0, max_per_task=2, max_total=3)  # a replace
    with pytest.raises(PushLimitError):
        await ledger.put_push_config(cfg("c"), 1.0, max_per_task=2, max_total=3)
    await ledger.put_push_config(cfg("c", "t-2"), 1.0, max_per_task=2, max_total=3)
    with pytest.raises(PushLimitError):
        await ledger.put_push_config(cfg("d", "t-3"), 1.0, max_per_task=2, max_total=3)
    assert await ledger.get_push_config("d") is None
    assert (await ledger.get_push_config("b")).data == b"new"  # type: ignore[union-attr]


async def test_prune_push_configs_deletes_only_old_ones(ledger: TaskLedger) -> None:
    await ledger.put_push_config(cfg("old"), 10.0, max_per_task=BIG, max_total=BIG)
    await ledger.put_push_config(cfg("new"), 30.0, max_per_task=BIG, max_total=BIG)
    assert await ledger.prune_push_configs(20.0) == 1
    assert [e.callback_id for e in await ledger.push_configs("w", "t-1")] == ["new"]


async def test_outbox_delivers_a_task_in_order_one_at_a_time(ledger: TaskLedger) -> None:
    await add(ledger, "t-1", b"first")
    await add(ledger, "t-1", b"second")
    await add(ledger, "t-2", b"other", tenant="acme")
    assert await ledger.outbox_depth() == 3
    claimed = await ledger.outbox_claim(200.0, 30.0, 10)
    assert sorted(e.body for e in claimed) == [b"first", b"other"]
    assert {e.tenant for e in claimed if e.task_id == "t-2"} == {"acme"}
    assert await ledger.outbox_claim(200.0, 30.0, 10) == []  # leased: nothing until 230
    first = next(e for e in claimed if e.body == b"first")
    await ledger.outbox_done(first)
    nxt = await ledger.outbox_claim(201.0, 30.0, 10)
    assert [e.body for e in nxt] == [b"second"]
    assert await ledger.outbox_depth() == 2


async def test_a_lease_runs_out_and_a_retry_waits_with_one_more_attempt(ledger: TaskLedger) -> None:
    await add(ledger, "t-1", b"n")
    (entry,) = await ledger.outbox_claim(200.0, 30.0, 10)
    assert entry.attempts == 0 and entry.callback_id == "cb" and entry.upstream == "w"
    (again,) = await ledger.outbox_claim(231.0, 30.0, 10)  # the claimer died: another may
    assert again.entry_id == entry.entry_id
    await ledger.outbox_retry(again, 300.0)
    assert await ledger.outbox_claim(299.0, 30.0, 10) == []
    (third,) = await ledger.outbox_claim(300.0, 30.0, 10)
    assert third.attempts == 1 and third.body == b"n"
    await ledger.outbox_done(third)
    assert await ledger.outbox_depth() == 0
    assert await ledger.outbox_claim(1e9, 30.0, 10) == []


async def test_an_entry_not_yet_due_is_not_claimed(ledger: TaskLedger) -> None:
    await add(ledger, "t-1", b"later", at=500.0)
    assert await ledger.outbox_claim(499.0, 30.0, 10) == []
    assert len(await ledger.outbox_claim(500.0, 30.0, 10)) == 1


async def test_outbox_is_bounded_per_task_and_in_total(ledger: TaskLedger) -> None:
    await add(ledger, "t-1", b"1", max_per_task=2, max_total=3)
    await add(ledger, "t-1", b"2", max_per_task=2, max_total=3)
    with pytest.raises(PushLimitError):
        await add(ledger, "t-1", b"3", max_per_task=2, max_total=3)
    await add(ledger, "t-2", b"4", max_per_task=2, max_total=3)
    with pytest.raises(PushLimitError):
        await add(ledger, "t-3", b"5", max_per_task=2, max_total=3)
    assert await ledger.outbox_depth() == 3


async def test_claim_respects_its_limit(ledger: TaskLedger) -> None:
    for i in range(5):
        await add(ledger, f"t-{i}", b"x")
    assert len(await ledger.outbox_claim(200.0, 30.0, 2)) == 2
    assert len(await ledger.outbox_claim(200.0, 30.0, 10)) == 3


async def test_sqlite_outbox_survives_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ledger.db"
    first = ledger_from_url(url)
    await first.open()
    await first.outbox_add("w", "t-1", "cb", b"kept", 1.0, max_per_task=BIG, max_total=BIG)
    await first.put_push_config(cfg("cb"), 1.0, max_per_task=BIG, max_total=BIG)
    await first.close()
    second = ledger_from_url(url)
    await second.open()
    try:
        assert [e.body for e in await second.outbox_claim(2.0, 30.0, 10)] == [b"kept"]
        assert await second.get_push_config("cb") == cfg("cb")
    finally:
        await second.close()


async def test_a_version_2_sqlite_file_gains_the_push_tables_at_open(tmp_path: Path) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path}/ledger.db"
    first = ledger_from_url(url)
    await first.open()
    await first.close()
    with sqlite3.connect(tmp_path / "ledger.db") as conn:  # as a version-2 build left it
        conn.execute("DROP TABLE push_configs")
        conn.execute("DROP TABLE outbox")
        conn.execute("PRAGMA user_version = 2")
    second = ledger_from_url(url)
    await second.open()
    try:
        await second.outbox_add("w", "t-1", "cb", b"b", 1.0, max_per_task=BIG, max_total=BIG)
        assert await second.outbox_depth() == 1
    finally:
        await second.close()
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
