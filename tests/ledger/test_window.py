"""The replay window's contract (docs/resume.md §2), every backend: memory, SQLite (a real
file), Redis (a real redis-server) and Redis Cluster (a real 3-primary cluster). Then what only SQLite or only Redis has: the schema's
migration, the bookkeeping against a recount, the key layout, expiry."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sqlite3
from contextlib import closing
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis

from gateway.a2a.states import TaskState
from gateway.errors import VersionConflictError
from gateway.invariants.model import TaskRecord
from gateway.ledger import codec
from gateway.ledger.base import Replay, Stored, TaskLedger, WindowEvent, WindowLimits
from gateway.ledger.memory import MemoryLedger
from gateway.ledger.redis import RedisLedger
from gateway.ledger.sqlite import SCHEMA_VERSION, SqliteLedger
from tests.ledger.conftest import MakeLedger

T0 = 1_000.0
#: Only the backends that outlive a process and are shared by several (a memory ledger is one
#: process's own).
DURABLE = pytest.mark.parametrize(
    "backend", ["sqlite", "redis", pytest.param("redis-cluster", marks=pytest.mark.slow)], indirect=True)


def rec(task_id: str = "t-1", state: TaskState = TaskState.WORKING) -> TaskRecord:
    return TaskRecord(upstream="w", task_id=task_id, context_id="c-1", state=state, observed_at=T0)


async def after(led: TaskLedger, event_id: str, task_id: str = "t-1", upstream: str = "w") -> Replay:
    return await led.events_after(upstream, task_id, event_id)


async def payloads_after(led: TaskLedger, event_id: str, task_id: str = "t-1") -> list[bytes] | None:
    """The payloads after ``event_id`` (``None``: not found)."""
    replay = await after(led, event_id, task_id)
    return [e.payload for e in replay.events] if replay.found else None


async def stream(led: TaskLedger, n: int, task_id: str = "t-1", *, lineage: str | None = None,
                 start: float = T0, size: int | None = None) -> list[str]:
    """Append ``n`` events to one lineage of ``task_id`` (a new one unless given); their ids."""
    ids = []
    for i in range(n):
        payload = f"{task_id}#{i}".encode() if size is None else bytes([65 + i % 26]) * size
        event_id, lineage = await led.append_event("w", task_id, lineage, payload, start + i)
        ids.append(event_id)
    return ids


# -- ids, order, lineages ---------------------------------------------------------------------

async def test_ids_are_new_and_later_ids_come_later_in_the_window(make_ledger: MakeLedger,
                                                                  backend: str) -> None:
    led = await make_ledger()
    ids = await stream(led, 6)
    assert len(set(ids)) == 6 and all(isinstance(i, str) and i for i in ids)
    for k, event_id in enumerate(ids):
        replay = await after(led, event_id)
        assert replay.found and replay.lineage == ids[0]
        assert [e.event_id for e in replay.events] == ids[k + 1:]
        assert [e.payload for e in replay.events] == [f"t-1#{i}".encode() for i in range(k + 1, 6)]
    if backend == "sqlite":  # the AUTOINCREMENT row id, as text
        assert [int(i) for i in ids] == sorted(int(i) for i in ids)
    if backend.startswith("redis"):  # the stream entry id (ordered), then the task's tag
        entries = [tuple(int(p) for p in i.split(".")[0].split("-")) for i in ids]
        assert entries == sorted(entries) and len({i.split(".")[1] for i in ids}) == 1


async def test_a_new_lineage_is_named_after_its_first_event(make_ledger: MakeLedger) -> None:
    led = await make_ledger()
    first, lineage = await led.append_event("w", "t-1", None, b"a", T0)
    second, same = await led.append_event("w", "t-1", lineage, b"b", T0 + 1)
    assert lineage == first and same == first and second != first


async def test_events_after_follow_the_lineage_of_the_asked_id(make_ledger: MakeLedger) -> None:
    """Two client streams of one task (two lineages) interleaved in its window: a replay has
    only the later events of the asked id's lineage."""
    led = await make_ledger()
    a1, la = await led.append_event("w", "t-1", None, b"a1", T0)
    b1, lb = await led.append_event("w", "t-1", None, b"b1", T0 + 1)
    a2, _ = await led.append_event("w", "t-1", la, b"a2", T0 + 2)
    b2, _ = await led.append_event("w", "t-1", lb, b"b2", T0 + 3)
    a3, _ = await led.append_event("w", "t-1", la, b"a3", T0 + 4)
    assert la == a1 and lb == b1 and la != lb
    assert await after(led, a1) == Replay(True, la, (WindowEvent(a2, la, b"a2"), WindowEvent(a3, la, b"a3")))
    assert await after(led, b1) == Replay(True, lb, (WindowEvent(b2, lb, b"b2"),))
    assert await after(led, a2) == Replay(True, la, (WindowEvent(a3, la, b"a3"),))


# -- a record and its event in one operation (put_with_event) -----------------------------------

async def test_put_with_event_stores_the_record_and_appends_the_event(make_ledger: MakeLedger) -> None:
    led = await make_ledger()
    version, first, lineage = await led.put_with_event(rec(), 0, None, b"e1", T0)
    assert version == 1 and lineage == first
    version, second, same = await led.put_with_event(rec(state=TaskState.COMPLETED), 1, lineage, b"e2", T0 + 1)
    assert (version, same) == (2, first) and second != first
    got = await led.get("w", "t-1")
    assert got is not None and got.version == 2 and got.record.state is TaskState.COMPLETED
    assert await after(led, first) == Replay(True, first, (WindowEvent(second, first, b"e2"),))
    # the same window as append_event's: a plain append goes on in the lineage
    third, _ = await led.append_event("w", "t-1", lineage, b"e3", T0 + 2)
    assert await payloads_after(led, first) == [b"e2", b"e3"] and third not in (first, second)


async def test_put_with_event_over_a_moved_version_keeps_neither(make_ledger: MakeLedger) -> None:
    led = await make_ledger()
    _, first, lineage = await led.put_with_event(rec(), 0, None, b"e1", T0)
    await led.put(rec(state=TaskState.INPUT_REQUIRED), 1)  # another writer: version 2
    with pytest.raises(VersionConflictError):
        await led.put_with_event(rec(state=TaskState.COMPLETED), 1, lineage, b"stale", T0 + 1)
    with pytest.raises(VersionConflictError):
        await led.put_with_event(rec(), 0, None, b"insert-over-existing", T0 + 1)
    got = await led.get("w", "t-1")
    assert got is not None and got.version == 2 and got.record.state is TaskState.INPUT_REQUIRED
    assert await payloads_after(led, first) == []  # no event of a lost compare-and-set


async def test_the_newest_id_is_found_with_nothing_after_it(make_ledger: MakeLedger) -> None:
    led = await make_ledger()
    ids = await stream(led, 3)
    assert await after(led, ids[-1]) == Replay(True, ids[0], ())


# -- bounds -----------------------------------------------------------------------------------

async def test_a_window_keeps_its_newest_events_by_count(make_ledger: MakeLedger) -> None:
    led = await make_ledger(WindowLimits(max_events_per_task=3))
    other = await stream(led, 2, "t-2")
    ids = await stream(led, 5)
    assert [(await after(led, i)).found for i in ids] == [False, False, True, True, True]
    assert await payloads_after(led, ids[2]) == [b"t-1#3", b"t-1#4"]
    assert await payloads_after(led, other[0], "t-2") == [b"t-2#1"]  # another task's window


async def test_a_window_keeps_its_newest_events_by_payload_bytes(make_ledger: MakeLedger) -> None:
    led = await make_ledger(WindowLimits(max_bytes_per_task=10))
    ids = await stream(led, 3, size=4)  # 12 bytes: the first goes
    assert not (await after(led, ids[0])).found
    assert await payloads_after(led, ids[1]) == [b"C" * 4]
    more, _ = await led.append_event("w", "t-1", ids[0], b"zz", T0 + 9)  # exactly 10 bytes: all stay
    assert await payloads_after(led, ids[1]) == [b"CCCC", b"zz"]
    empty, _ = await led.append_event("w", "t-1", ids[0], b"", T0 + 10)  # no bytes: still 10
    assert await payloads_after(led, ids[1]) == [b"CCCC", b"zz", b""]
    assert (await after(led, empty)).found and (await after(led, more)).found


async def test_a_trim_by_bytes_stops_at_exactly_the_bound(make_ledger: MakeLedger) -> None:
    led = await make_ledger(WindowLimits(max_bytes_per_task=10))
    a, la = await led.append_event("w", "t-1", None, b"a" * 6, T0)
    b, _ = await led.append_event("w", "t-1", la, b"b" * 4, T0 + 1)
    c, _ = await led.append_event("w", "t-1", la, b"c" * 6, T0 + 2)  # 16: a goes, 10 are left
    assert not (await after(led, a)).found
    assert await payloads_after(led, b) == [b"c" * 6]


async def test_a_payload_larger_than_the_window_empties_it(make_ledger: MakeLedger) -> None:
    """Not kept at all, and the task's earlier ids are unknown too (a counted gap); the
    window starts again with the next event, in the lineage it is given."""
    led = await make_ledger(WindowLimits(max_bytes_per_task=10))
    ids = await stream(led, 2)
    other = await stream(led, 1, "t-2")
    big, lineage = await led.append_event("w", "t-1", ids[0], b"x" * 11, T0 + 5)
    assert lineage == ids[0] and big not in ids
    assert [(await after(led, i)).found for i in [*ids, big]] == [False] * 3
    assert (await after(led, other[0], "t-2")).found
    nxt, same = await led.append_event("w", "t-1", lineage, b"small", T0 + 6)
    assert same == ids[0] and await after(led, nxt) == Replay(True, ids[0], ())
    assert not (await after(led, big)).found


async def test_the_total_cap_drops_the_oldest_events_whatever_their_task(make_ledger: MakeLedger) -> None:
    led = await make_ledger(WindowLimits(max_events_total=4))
    a1, la = await led.append_event("w", "a", None, b"a1", T0)
    b1, lb = await led.append_event("w", "b", None, b"b1", T0 + 1)
    a2, _ = await led.append_event("w", "a", la, b"a2", T0 + 2)
    b2, _ = await led.append_event("w", "b", lb, b"b2", T0 + 3)
    assert [(await after(led, i, t)).found for i, t in ((a1, "a"), (b1, "b"), (a2, "a"), (b2, "b"))] == [True] * 4
    a3, _ = await led.append_event("w", "a", la, b"a3", T0 + 4)  # 5 > 4: a1 goes
    assert not (await after(led, a1, "a")).found
    assert await payloads_after(led, b1, "b") == [b"b2"]
    c1, _ = await led.append_event("w", "c", None, b"c1", T0 + 5)  # b1 goes
    assert not (await after(led, b1, "b")).found
    assert await payloads_after(led, a2, "a") == [b"a3"]
    c2, _ = await led.append_event("w", "c", c1, b"c2", T0 + 6)  # a2 goes
    c3, _ = await led.append_event("w", "c", c1, b"c3", T0 + 7)  # b2 goes: task b is empty
    found = {i: (await after(led, i, t)).found
             for i, t in ((a2, "a"), (b2, "b"), (a3, "a"), (c1, "c"), (c2, "c"), (c3, "c"))}
    assert found == {a2: False, b2: False, a3: True, c1: True, c2: True, c3: True}


async def test_appends_over_the_cap_at_once_drop_the_oldest_events_across_windows(
        make_ledger: MakeLedger) -> None:
    """Three appends called at once over a full ledger drop the three oldest events, taken
    from two windows in the order of their ``at`` (not the whole oldest window)."""
    led = await make_ledger(WindowLimits(max_events_total=5))
    order = ["a", "b", "a", "b", "a"]
    old = [((await led.append_event("w", t, None, b"x", T0 + i))[0], t) for i, t in enumerate(order)]
    c = await asyncio.gather(*(led.append_event("w", "c", None, b"c", T0 + 10 + i) for i in range(3)))
    found = [(await after(led, i, t)).found for i, t in [*old, *((e, "c") for e, _ in c)]]
    assert found == [False, False, False, True, True, True, True, True]


async def test_the_byte_total_cap_drops_the_oldest_events_whatever_their_task(make_ledger: MakeLedger) -> None:
    """``max_bytes_total`` as ``max_events_total``: the oldest events of the whole ledger go
    until the payload bytes of all windows are within it (exactly at it stays)."""
    led = await make_ledger(WindowLimits(max_bytes_total=10))
    a1, la = await led.append_event("w", "a", None, b"aaa", T0)  # 3
    b1, lb = await led.append_event("w", "b", None, b"bb", T0 + 1)  # 5
    a2, _ = await led.append_event("w", "a", la, b"aaaa", T0 + 2)  # 9
    e1, _ = await led.append_event("w", "b", lb, b"", T0 + 3)  # 9: nothing goes for no bytes
    b2, _ = await led.append_event("w", "b", lb, b"b", T0 + 4)  # exactly 10: all stay
    assert [(await after(led, i, t)).found for i, t in ((a1, "a"), (b1, "b"), (a2, "a"), (e1, "b"), (b2, "b"))] == [True] * 5
    c1, _ = await led.append_event("w", "c", None, b"cc", T0 + 5)  # 12: a1 goes (9)
    assert not (await after(led, a1, "a")).found
    assert await payloads_after(led, b1, "b") == [b"", b"b"]
    c2, _ = await led.append_event("w", "c", c1, b"ccccc", T0 + 6)  # 14: b1 and a2 go (8)
    found = {i: (await after(led, i, t)).found
             for i, t in ((b1, "b"), (a2, "a"), (e1, "b"), (b2, "b"), (c1, "c"), (c2, "c"))}
    assert found == {b1: False, a2: False, e1: True, b2: True, c1: True, c2: True}
    c3, _ = await led.append_event("w", "c", c1, b"c" * 9, T0 + 7)  # 17: e1 (no bytes), b2, c1, c2 go (9)
    assert [(await after(led, i, t)).found for i, t in ((e1, "b"), (b2, "b"), (c1, "c"), (c2, "c"))] == [False] * 4
    assert await after(led, c3, "c") == Replay(True, c1, ())


async def test_a_payload_larger_than_the_byte_total_empties_the_ledger(make_ledger: MakeLedger) -> None:
    """Within its task's own bound but over the total one: every event goes, itself last."""
    led = await make_ledger(WindowLimits(max_bytes_per_task=100, max_bytes_total=10))
    old = await stream(led, 3, "t-2", size=3)
    big, _ = await led.append_event("w", "t-1", None, b"x" * 11, T0 + 5)
    assert [(await after(led, i, "t-2")).found for i in old] == [False] * 3
    assert not (await after(led, big)).found
    nxt, _ = await led.append_event("w", "t-1", None, b"y" * 10, T0 + 6)
    assert await after(led, nxt) == Replay(True, nxt, ())


async def test_appends_over_the_byte_cap_at_once_keep_it(make_ledger: MakeLedger, backend: str) -> None:
    """Appends called at once over a full ledger keep the byte total within its cap: exactly
    the oldest go (memory, SQLite); Redis may drop a few more while they overlap, within the
    cap (docs/resume.md §2.3), and its bookkeeping ends right."""
    led = await make_ledger(WindowLimits(max_bytes_total=40))
    old = [((await led.append_event("w", t, None, b"o" * 4, T0 + i))[0], t)
           for i, t in enumerate(["a", "b", "a", "b", "a", "b", "a", "b", "a", "b"])]  # 40 bytes
    new = await asyncio.gather(*(led.append_event("w", "c", None, b"n" * 6, T0 + 20 + i) for i in range(3)))
    found = [(await after(led, i, t)).found for i, t in old]
    kept_new = [(await after(led, i, "c")).found for i, _ in new]
    held = 4 * sum(found) + 6 * sum(kept_new)
    if backend == "redis":
        assert all(kept_new) and found == sorted(found) and 40 - 3 * 6 <= held <= 40, (found, held)
        _consistent(await _redis_view(led))  # type: ignore[arg-type]
    else:
        assert found == [False] * 5 + [True] * 5 and all(kept_new) and held == 38


async def test_unknown_malformed_and_other_tasks_ids_are_not_found(make_ledger: MakeLedger) -> None:
    led = await make_ledger(WindowLimits(max_events_per_task=2))
    mine = await stream(led, 3)
    theirs = await stream(led, 1, "t-2")
    elsewhere, _ = await led.append_event("other", "t-1", None, b"x", T0)
    assert (await after(led, mine[1])).found
    malformed = ["", " ", "0", "-1", "abc", "1.5", "１２", "+", "-", "$", ">", "(1-0", "1-0", "0-0",
                 "1-0.00000000", "99999999999999999999999999", "9223372036854775808",
                 "18446744073709551616-0.00000000", "99999999999999999999-99999999999999999999.0a0b0c0d",
                 "a1b2c3d4.1", "a1b2c3d4.", f" {mine[1]}", f"{mine[1]} ", f"{mine[1]}\n", mine[1].upper() + "X",
                 f"0{mine[1]}", f"+{mine[1]}",
                 "%s" % ("9" * 5000)]
    for event_id in [mine[0], *theirs, elsewhere, *malformed]:
        assert await after(led, event_id) == Replay(False), event_id
    assert await after(led, mine[1], "t-2") == Replay(False)  # mine, asked of another task
    assert await after(led, mine[1], upstream="other") == Replay(False)
    assert await after(led, mine[1], "no-such-task") == Replay(False)
    assert (await after(led, mine[1])).found  # and nothing of that broke the window


async def test_prune_events_deletes_the_events_older_than_the_cutoff(make_ledger: MakeLedger) -> None:
    led = await make_ledger()
    ids = await stream(led, 3, start=100.0)  # at 100, 101, 102
    other = await stream(led, 2, "t-2", start=50.0)  # at 50, 51
    assert await led.prune_events(101.0) == 3  # at 101 is not before 101
    assert [(await after(led, i)).found for i in ids] == [False, True, True]
    assert await led.prune_events(101.5) == 1
    assert [(await after(led, i)).found for i in ids] == [False, False, True]
    assert [(await after(led, i, "t-2")).found for i in other] == [False, False]
    assert await led.prune_events(101.5) == 0
    later, _ = await led.append_event("w", "t-1", ids[0], b"later", 200.0)
    assert await payloads_after(led, ids[2]) == [b"later"]
    assert await led.prune_events(1e12) == 2
    assert not (await after(led, later)).found
    again = await stream(led, 1, start=300.0)  # the window starts again
    assert await after(led, again[0]) == Replay(True, again[0], ())


# -- durability, several processes, call order --------------------------------------------------

@DURABLE
async def test_the_window_survives_close_and_reopen(make_ledger: MakeLedger) -> None:
    limits = WindowLimits(max_events_per_task=4)
    led = await make_ledger(limits)
    ids = await stream(led, 3)
    await led.close()
    again = await make_ledger(limits)
    assert await payloads_after(again, ids[0]) == [b"t-1#1", b"t-1#2"]
    more, lineage = await again.append_event("w", "t-1", ids[0], b"new-1", T0 + 10)
    assert lineage == ids[0] and more not in ids
    assert await payloads_after(again, ids[0]) == [b"t-1#1", b"t-1#2", b"new-1"]
    await again.append_event("w", "t-1", ids[0], b"new-2", T0 + 11)  # 5 > 4: the count went on
    assert not (await after(again, ids[0])).found
    assert await payloads_after(again, ids[1]) == [b"t-1#2", b"new-1", b"new-2"]


@DURABLE
async def test_two_ledgers_on_one_store_share_ids_and_order(make_ledger: MakeLedger) -> None:
    """Two processes (replicas) on one SQLite file / one Redis: each reads the other's ids,
    and their appends land in one order that keeps each one's call order."""
    a, b = await make_ledger(), await make_ledger()
    first, lineage = await a.append_event("w", "t-1", None, b"a-0", T0)
    second, _ = await b.append_event("w", "t-1", lineage, b"b-0", T0 + 1)
    third, _ = await a.append_event("w", "t-1", lineage, b"a-1", T0 + 2)
    for led in (a, b):
        assert [e.event_id for e in (await after(led, first)).events] == [second, third]
        assert (await after(led, second)).events == (WindowEvent(third, lineage, b"a-1"),)
    results = await asyncio.gather(
        *(led.append_event("w", "t-1", lineage, f"{name}-{i}".encode(), T0 + 3 + i)
          for i in range(2, 12) for name, led in (("a", a), ("b", b))))
    got = (await after(b, first)).events
    assert len(got) == 22 and len({e.event_id for e in got}) == 22
    assert {e.event_id for e in got[2:]} == {event_id for event_id, _ in results}
    assert [e.payload for e in got if e.payload.startswith(b"a")] == [f"a-{i}".encode() for i in range(1, 12)]
    assert [e.payload for e in got if e.payload.startswith(b"b")] == [b"b-0"] + [f"b-{i}".encode() for i in range(2, 12)]


@DURABLE
async def test_two_ledgers_on_one_store_share_the_total_cap(make_ledger: MakeLedger) -> None:
    """One after the other, two processes keep the cap exactly (at the same time: docs/resume.md
    §2.3 says how far apart Redis may be)."""
    limits = WindowLimits(max_events_total=3)
    a, b = await make_ledger(limits), await make_ledger(limits)
    ids = []
    for i in range(6):
        led, task = (a, "ta") if i % 2 == 0 else (b, "tb")
        ids.append(((await led.append_event("w", task, None, b"e", T0 + i))[0], task))
    assert [(await after(a, i, t)).found for i, t in ids] == [False, False, False, True, True, True]


async def test_appends_and_puts_called_at_once_keep_call_order(make_ledger: MakeLedger) -> None:
    """Called without awaiting in between (SQLite: one batch; Redis: one pipeline): each read
    sees exactly the calls made before it — appends and puts alike — and none made after it."""
    led = await make_ledger()
    first, lineage = await led.append_event("w", "t-1", None, b"0", T0)
    results = await asyncio.gather(
        led.put(rec(), 0),
        led.append_event("w", "t-1", lineage, b"1", T0 + 1),
        led.events_after("w", "t-1", first),
        led.get("w", "t-1"),
        led.append_event("w", "t-1", lineage, b"2", T0 + 2),
        led.put(rec(state=TaskState.COMPLETED), 1),
        led.events_after("w", "t-1", first),
        led.get("w", "t-1"),
        led.append_event("w", "t-1", lineage, b"3", T0 + 3),
        led.events_after("w", "t-1", first),
    )
    put1, (e1, _), seen1, got1, (e2, _), put2, seen2, got2, (e3, _), seen3 = results
    assert put1 == 1 and put2 == 2
    assert [e.event_id for e in seen1.events] == [e1]
    assert isinstance(got1, Stored) and got1.version == 1 and got1.record.state is TaskState.WORKING
    assert [e.event_id for e in seen2.events] == [e1, e2]
    assert isinstance(got2, Stored) and got2.version == 2 and got2.record.state is TaskState.COMPLETED
    assert [e.payload for e in seen3.events] == [b"1", b"2", b"3"] and seen3.events[-1].event_id == e3


async def test_many_tasks_appended_at_once_keep_each_tasks_call_order(make_ledger: MakeLedger) -> None:
    led = await make_ledger()
    firsts = await asyncio.gather(*(led.append_event("w", f"t-{t}", None, b"0", T0) for t in range(20)))
    calls = [(t, i) for i in range(1, 11) for t in range(20)]
    random.Random(7).shuffle(calls)  # each task's events stay in order: sort by i within task
    calls.sort(key=lambda c: c[1])
    await asyncio.gather(*(led.append_event("w", f"t-{t}", firsts[t][1], f"{i}".encode(), T0 + i)
                           for t, i in calls))
    for t in range(20):
        assert await payloads_after(led, firsts[t][0], f"t-{t}") == [f"{i}".encode() for i in range(1, 11)]


# -- SQLite ------------------------------------------------------------------------------------

# The schema version 1 created (tasks, task_counts and its triggers; no events).
_V1_SCHEMA = """
CREATE TABLE tasks (
    upstream TEXT NOT NULL, task_id TEXT NOT NULL, version INTEGER NOT NULL, state TEXT NOT NULL,
    terminal INTEGER NOT NULL, resync INTEGER NOT NULL DEFAULT 0, observed_at REAL NOT NULL,
    record BLOB NOT NULL, PRIMARY KEY (upstream, task_id)) WITHOUT ROWID;
CREATE INDEX tasks_terminal_observed ON tasks (terminal, observed_at);
CREATE TABLE task_counts (state TEXT NOT NULL PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_counts (state, n) VALUES (NEW.state, 1) ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER tasks_count_update AFTER UPDATE OF state ON tasks WHEN OLD.state IS NOT NEW.state BEGIN
    UPDATE task_counts SET n = n - 1 WHERE state = OLD.state;
    INSERT INTO task_counts (state, n) VALUES (NEW.state, 1) ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1 WHERE state = OLD.state;
END;
PRAGMA user_version = 1;
"""


def _v1_database(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(_V1_SCHEMA)
        for i, state in enumerate([TaskState.WORKING, TaskState.WORKING, TaskState.COMPLETED]):
            r = rec(f"old-{i}", state)
            conn.execute("INSERT INTO tasks (version, state, terminal, observed_at, record, upstream, task_id) "
                         "VALUES (1, ?, ?, ?, ?, ?, ?)",
                         (r.state.value, int(r.terminal), r.observed_at, codec.encode(r), r.upstream, r.task_id))
        conn.commit()


def _tables(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")}


async def test_sqlite_a_version_1_database_gains_the_window_at_open(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    _v1_database(path)
    assert "events" not in _tables(path)
    led = SqliteLedger(path)
    await led.open()
    try:
        assert await led.count_by_state() == {"TASK_STATE_WORKING": 2, "TASK_STATE_COMPLETED": 1}
        got = await led.get("w", "old-1")
        assert got is not None and got.record == rec("old-1") and got.version == 1
        ids = await stream(led, 2)
        assert await payloads_after(led, ids[0]) == [b"t-1#1"]
    finally:
        await led.close()
    assert {"events", "event_windows", "event_total", "events_window_insert", "events_window_delete"} <= _tables(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert _kept(path) == _recount(path) == ({("w", "t-1"): (2, 10)}, 2, 10)  # the byte total too


async def test_sqlite_ledgers_opening_a_version_1_database_at_once_migrate_it_once(tmp_path: Path) -> None:
    """Four ledgers (four threads, as ``serve --workers 4``) open one version-1 file at the
    same moment: one migrates; all append to the one window, and the counts are right."""
    for attempt in range(3):
        path = tmp_path / f"v1-{attempt}.db"
        _v1_database(path)
        ledgers = [SqliteLedger(path) for _ in range(4)]
        await asyncio.gather(*(led.open() for led in ledgers))
        try:
            first, lineage = await ledgers[0].append_event("w", "t-1", None, b"0", T0)
            await asyncio.gather(*(led.append_event("w", "t-1", lineage, f"{k}".encode(), T0 + k)
                                   for k, led in enumerate(ledgers, 1)))
            for led in ledgers:
                assert await led.count_by_state() == {"TASK_STATE_WORKING": 2, "TASK_STATE_COMPLETED": 1}
                assert sorted(e.payload for e in (await after(led, first)).events) == [b"1", b"2", b"3", b"4"]
        finally:
            for led in ledgers:
                await led.close()
        assert _recount(path)[0] == _kept(path)[0]


def _recount(path: Path) -> tuple[dict[tuple[str, str], tuple[int, int]], int, int]:
    """The windows and the totals (events, payload bytes), counted from the events themselves."""
    with closing(sqlite3.connect(path)) as conn:
        windows = {(u, t): (n, b) for u, t, n, b in conn.execute(
            "SELECT upstream, task_id, COUNT(*), SUM(length(payload)) FROM events GROUP BY upstream, task_id")}
        return windows, *conn.execute("SELECT COUNT(*), COALESCE(SUM(length(payload)), 0) FROM events").fetchone()


def _kept(path: Path) -> tuple[dict[tuple[str, str], tuple[int, int]], int, int]:
    """The windows and the totals as the bookkeeping tables hold them."""
    with closing(sqlite3.connect(path)) as conn:
        windows = {(u, t): (n, b) for u, t, n, b in conn.execute("SELECT upstream, task_id, n, bytes FROM event_windows")}
        return windows, *conn.execute("SELECT n, bytes FROM event_total").fetchone()


async def test_sqlite_the_window_bookkeeping_equals_a_recount(tmp_path: Path) -> None:
    limits = WindowLimits(max_events_per_task=5, max_bytes_per_task=40, max_events_total=30, max_bytes_total=200)
    led = SqliteLedger(tmp_path / "l.db", window=limits)
    await led.open()
    rng = random.Random(3)
    try:
        for step in range(400):
            task = f"t-{rng.randrange(12)}"
            await asyncio.gather(*(led.append_event("w", task, None, b"x" * rng.randrange(0, 30), float(step * 10 + k))
                                   for k in range(rng.randint(1, 3))))
            if step % 50 == 49:
                assert await led.prune_events(float(step * 10 - 200)) >= 0
                assert _kept(led.path) == _recount(led.path)
        windows, total, total_bytes = _recount(led.path)
        assert _kept(led.path) == (windows, total, total_bytes) and 0 < total <= 30 and 0 < total_bytes <= 200
        assert all(n <= 5 and b <= 40 for n, b in windows.values())
    finally:
        await led.close()


async def test_sqlite_a_failed_append_leaves_nothing_and_fails_only_itself(tmp_path: Path) -> None:
    """An append whose trim fails (here: a trigger refuses the delete) is undone to its
    savepoint; the other calls of its transaction are committed."""
    led = SqliteLedger(tmp_path / "l.db", window=WindowLimits(max_events_per_task=1))
    await led.open()
    try:
        first, lineage = await led.append_event("w", "t-1", None, b"0", T0)
        with closing(sqlite3.connect(led.path)) as other:
            other.execute("CREATE TRIGGER refuse BEFORE DELETE ON events BEGIN SELECT RAISE(ABORT, 'refused'); END")
            other.commit()
        results = await asyncio.gather(
            led.put(rec("t-a"), 0),
            led.append_event("w", "t-1", lineage, b"1", T0 + 1),  # must trim: refused
            led.append_event("w", "t-2", None, b"x", T0 + 2),  # needs no trim
            led.put(rec("t-b"), 0),
            return_exceptions=True)
        assert results[0] == 1 and results[3] == 1
        assert isinstance(results[1], sqlite3.DatabaseError) and "refused" in str(results[1])
        assert isinstance(results[2], tuple)
        assert await after(led, first) == Replay(True, lineage, ())
        assert (await after(led, results[2][0], "t-2")).found
        assert _kept(led.path) == _recount(led.path) and _recount(led.path)[1] == 2
    finally:
        await led.close()


async def test_sqlite_an_append_is_committed_when_it_returns(tmp_path: Path) -> None:
    led = SqliteLedger(tmp_path / "l.db")
    await led.open()
    try:
        ids = await asyncio.gather(*(led.append_event("w", "t-1", None, b"e", T0 + i) for i in range(10)))
        with closing(sqlite3.connect(led.path)) as other:
            assert {str(i) for (i,) in other.execute("SELECT id FROM events")} == {i for i, _ in ids}
    finally:
        await led.close()


# -- Redis -------------------------------------------------------------------------------------

RedisView = tuple[dict[bytes, int], int, dict[bytes, float], dict[bytes, tuple[int, int, float]],
                  dict[bytes, int], int]


async def _redis_view(led: RedisLedger) -> RedisView:
    """(counts, event total, index) as the bookkeeping holds them, per window what its keys
    hold: (entries, bytes field, at of the oldest entry), then (sizes, byte total) as the
    bookkeeping holds them."""
    await led._call("PING")  # after every command queued so far (some are sent unawaited)
    r = led._redis
    index_key, counts_key, sizes_key, total_key, bytes_key = led._windows_keys()
    counts = {m: int(n) for m, n in (await r.hgetall(counts_key)).items()}
    sizes = {m: int(n) for m, n in (await r.hgetall(sizes_key)).items()}
    total = int(await r.get(total_key) or 0)
    total_bytes = int(await r.get(bytes_key) or 0)
    index = dict(await r.zrange(index_key, 0, -1, withscores=True))
    actual = {}
    for member in set(counts) | set(index) | set(sizes):
        upstream, task_id = orjson.loads(member)
        entries = await r.xrange(led._events_key(upstream, task_id))
        size = int(await r.hget(led._window_key(upstream, task_id), "bytes") or 0)
        if entries:
            assert size == sum(len(f[b"payload"]) for _, f in entries)
            actual[member] = (len(entries), size, float(entries[0][1][b"at"]))
    return counts, total, index, actual, sizes, total_bytes


def _consistent(view: RedisView) -> None:
    """The bookkeeping is exactly what the windows hold (one process, calls not overlapping)."""
    counts, total, index, actual, sizes, total_bytes = view
    assert counts == {m: n for m, (n, _, _) in actual.items()}
    assert sizes == {m: b for m, (_, b, _) in actual.items()}
    assert index == {m: at for m, (_, _, at) in actual.items()}
    assert total == sum(counts.values()) and total_bytes == sum(sizes.values())


async def _redis_ledger(redis_url: str, name: str, limits: WindowLimits | None = None) -> RedisLedger:
    led = RedisLedger(redis_url, prefix=f"{name}-{random.getrandbits(32):08x}", window=limits)
    await led.open()
    return led


async def test_redis_the_bookkeeping_equals_what_the_windows_hold(redis_url: str) -> None:
    limits = WindowLimits(max_events_per_task=5, max_bytes_per_task=40, max_events_total=30, max_bytes_total=200)
    led = await _redis_ledger(redis_url, "recount", limits)
    rng = random.Random(5)
    try:
        for step in range(300):
            task = f"t-{rng.randrange(12)}"
            await led.append_event("w", task, None, b"x" * rng.randrange(0, 30), float(step))
            if step % 60 == 59:
                await led.prune_events(float(step - 40))
                _consistent(await _redis_view(led))
        view = await _redis_view(led)
        _consistent(view)
        assert 0 < view[1] <= 30 and 0 < view[5] <= 200 and all(n <= 5 and b <= 40 for n, b, _ in view[3].values())
    finally:
        await led.close()


async def test_redis_keys_come_only_from_the_key_methods(redis_url: str) -> None:
    """A layout that puts each task in a hash slot of its own (what Redis Cluster needs) is
    only a matter of the key methods: every key the window writes is one of theirs."""
    class Tagged(RedisLedger):
        def _events_key(self, upstream: str, task_id: str, tenant: str = "") -> str:
            return f"{self.prefix}:{{{upstream}/{tenant}/{task_id}}}:ev"

        def _window_key(self, upstream: str, task_id: str, tenant: str = "") -> str:
            return f"{self.prefix}:{{{upstream}/{tenant}/{task_id}}}:win"

    led = Tagged(redis_url, prefix=f"tagged{random.getrandbits(32):08x}",
                 window=WindowLimits(max_events_per_task=3, max_bytes_per_task=20, max_events_total=5))
    await led.open()
    try:
        tasks = [f"t-{i}" for i in range(4)]
        for i in range(20):
            await led.append_event("w", tasks[i % 4], None, b"y" * (i % 7), float(i))
        await led.prune_events(12.0)
        allowed = set(led._windows_keys()) | {k for t in tasks for k in (led._events_key("w", t), led._window_key("w", t))}
        keys = {k.decode() async for k in led._redis.scan_iter(match=f"{led.prefix}*")}
        assert keys and keys <= allowed, keys - allowed
        assert any(k.endswith(":ev") for k in keys) and any(k.endswith(":win") for k in keys)
        _consistent(await _redis_view(led))
    finally:
        await led.close()


async def test_redis_each_script_touches_only_the_keys_it_is_given(redis_url: str) -> None:
    """What Redis Cluster would need of a script (with hash tags, docs/resume.md §4.6): every
    command it runs names only its ``KEYS`` — one task's stream and hash, or keys of the
    bookkeeping over all windows, never some of both. Watched with ``MONITOR`` through
    appends that trim by count and by bytes, empty a window, meet both total caps, and a
    prune."""
    import threading

    import redis as sync_redis

    seen: list[dict[str, object]] = []
    ready = threading.Event()

    def watch() -> None:
        with closing(sync_redis.Redis.from_url(redis_url)) as client, client.monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                seen.append(command)
                if command["command"] == "ECHO monitor-done":
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert ready.wait(10)
    led = await _redis_ledger(redis_url, "monitor", WindowLimits(max_events_per_task=3, max_bytes_per_task=12,
                                                                 max_events_total=5, max_bytes_total=20))
    try:
        for i in range(12):
            await led.append_event("w", f"t-{i % 3}", None, b"z" * (i % 6) if i != 7 else b"z" * 13, float(i))
        await led.prune_events(9.0)
        await led._call("ECHO", "monitor-done")
    finally:
        await led.close()
    watcher.join(10)
    assert not watcher.is_alive()
    keys: list[str] = []
    ran: dict[str, set[str]] = {"task": set(), "all": set()}
    everyone = list(led._windows_keys())
    for command in seen:
        words = str(command["command"]).split(" ")
        if command["client_type"] != "lua":
            if words[0] == "EVALSHA" and words[3].startswith(led.prefix):
                keys = words[3:3 + int(words[2])]
            continue
        named = words[1:] if words[0] in ("DEL", "HDEL") else words[1:2]
        if words[0] == "HDEL":
            named = named[:1]
        assert set(named) <= set(keys), (words[:3], keys)
        if set(keys) <= set(everyone):
            ran["all"].add(words[0])
        else:  # one task's two keys
            assert len(keys) == 2 and not set(keys) & set(everyone)
            assert len({k.split(":", 2)[2] for k in keys}) == 1, keys
            ran["task"].add(words[0])
    assert {"XADD", "XRANGE", "XTRIM", "HINCRBY", "PEXPIRE", "DEL"} <= ran["task"]
    assert {"HGET", "HSET", "HDEL", "ZADD", "ZREM", "INCRBY", "HVALS", "SET"} <= ran["all"]


async def test_redis_window_keys_expire_after_the_retention(redis_url: str) -> None:
    led = await _redis_ledger(redis_url, "ttl", WindowLimits(retention_seconds=30.0))
    try:
        await stream(led, 2)
        for key in (led._events_key("w", "t-1"), led._window_key("w", "t-1")):
            assert 25_000 < await led._redis.pttl(key) <= 30_000, key
    finally:
        await led.close()


async def test_redis_an_emptied_window_keeps_its_stream_and_last_id(redis_url: str) -> None:
    """A window emptied by an oversize payload keeps its (empty) stream until it expires, so
    the stream's last id stays and the window's next id is later than every earlier one,
    whatever the server's clock does meanwhile."""
    led = await _redis_ledger(redis_url, "emptied", WindowLimits(max_bytes_per_task=10, retention_seconds=30.0))
    try:
        await stream(led, 2)
        big, _ = await led.append_event("w", "t-1", None, b"x" * 11, T0 + 5)
        key = led._events_key("w", "t-1")
        info = await led._redis.xinfo_stream(key)
        assert info["length"] == 0 and info["last-generated-id"].decode() == big.split(".")[0]
        assert 25_000 < await led._redis.pttl(key) <= 30_000
        await led._call("PING")
        assert (await _redis_view(led))[:3] == ({}, 0, {}) and (await _redis_view(led))[4:] == ({}, 0)
        nxt, _ = await led.append_event("w", "t-1", None, b"y", T0 + 6)
        assert await after(led, nxt) == Replay(True, nxt, ())
        _consistent(await _redis_view(led))
    finally:
        await led.close()


async def test_redis_a_window_that_expired_stops_counting(redis_url: str) -> None:
    """Its keys gone (as expiry leaves it: deleted here), the window's events leave the total
    when the cap, the prune or the task's next append meets it."""
    led = await _redis_ledger(redis_url, "expired", WindowLimits(max_events_total=4))
    r = led._redis

    async def expire(task_id: str) -> None:
        await led._call("PING")  # after the commands sent unawaited
        await r.delete(led._events_key("w", task_id), led._window_key("w", task_id))

    try:
        await stream(led, 3, "gone")
        await expire("gone")
        ids = await stream(led, 4, "b", start=T0 + 10)  # total 7 > 4: the cap meets "gone" first
        assert all([(await after(led, i, "b")).found for i in ids])
        _consistent(await _redis_view(led))
        await expire("b")
        again = await stream(led, 2, "b", start=T0 + 20)  # a new window of the same task
        assert [(await after(led, i, "b")).found for i in again] == [True, True]
        _consistent(await _redis_view(led))
        await stream(led, 1, "c", start=T0 + 30)
        await expire("c")
        assert await led.prune_events(1e12) == 2  # b's two; c had already gone
        _consistent(await _redis_view(led))
        assert (await _redis_view(led))[1] == 0
    finally:
        await led.close()


async def test_redis_another_tasks_entry_id_is_not_found(redis_url: str) -> None:
    """Stream entry ids are unique only within a stream: the same entry id in another task's
    stream is not that task's event (the id carries the task's tag)."""
    led = await _redis_ledger(redis_url, "collide")
    try:
        mine, _ = await led.append_event("w", "t-1", None, b"mine", T0)
        entry = mine.split(".")[0]
        await led._redis.xadd(led._events_key("w", "t-2"), {"lineage": "", "payload": b"theirs", "at": "1.0"}, id=entry)
        assert await after(led, mine, "t-2") == Replay(False)
        assert await after(led, mine) == Replay(True, mine, ())
    finally:
        await led.close()


async def test_redis_lost_scripts_are_reloaded_and_nothing_counts_twice(redis_url: str) -> None:
    """After ``SCRIPT FLUSH`` (a restarted server): the refused appends (and puts) are sent
    again once, reads called after them see them, and no bookkeeping command is repeated."""
    led = await _redis_ledger(redis_url, "noscript", WindowLimits(max_events_total=50))
    try:
        first, lineage = await led.append_event("w", "t-1", None, b"0", T0)
        admin = aioredis.Redis.from_url(redis_url)
        await admin.script_flush()
        await admin.aclose()
        results = await asyncio.gather(
            led.append_event("w", "t-1", lineage, b"1", T0 + 1),
            led.put(rec(), 0),
            led.events_after("w", "t-1", first),
            led.append_event("w", "t-2", None, b"x", T0 + 2),
            led.get("w", "t-1"),
            led.append_event("w", "t-1", lineage, b"2", T0 + 3),
            led.events_after("w", "t-1", first),
        )
        assert results[1] == 1 and isinstance(results[4], Stored)
        assert [e.payload for e in results[2].events] == [b"1"]
        assert [e.payload for e in results[6].events] == [b"1", b"2"]
        view = await _redis_view(led)
        _consistent(view)
        assert view[1] == 4
    finally:
        await led.close()


async def test_redis_a_stale_index_score_is_corrected_not_obeyed(redis_url: str) -> None:
    """A window indexed as older than it is (its bookkeeping lost, say by a replica that died
    between script and bookkeeping) is put right when the cap meets it; the cap then drops the
    event that is really the oldest."""
    led = await _redis_ledger(redis_url, "stale", WindowLimits(max_events_total=3))
    try:
        a = await stream(led, 2, "a", start=10.0)
        b = await stream(led, 1, "b", start=12.0)
        index = led._windows_keys()[0]
        await led._call("PING")  # after the commands sent unawaited
        await led._redis.zadd(index, {orjson.dumps(["w", "b"]): 1.0})
        await stream(led, 1, "c", start=13.0)  # 4 > 3
        assert [(await after(led, i, "a")).found for i in a] == [False, True]
        assert (await after(led, b[0], "b")).found
        _consistent(await _redis_view(led))
    finally:
        await led.close()


async def test_redis_drifted_bookkeeping_heals_when_the_prune_meets_the_window(redis_url: str) -> None:
    """Counts off (as a replica that died between a script and its bookkeeping leaves them):
    the prune sets a window's count to what its stream holds, and the total with it."""
    led = await _redis_ledger(redis_url, "drift")
    try:
        await stream(led, 3, "a", start=10.0)
        await stream(led, 2, "b", start=20.0)
        index, counts, _, total, _ = led._windows_keys()
        await led._call("PING")  # after the commands sent unawaited
        await led._redis.hincrby(counts, orjson.dumps(["w", "a"]), 5)
        await led._redis.incrby(total, 5)
        await led._redis.zadd(index, {orjson.dumps(["w", "b"]): 0.5})  # and b indexed too old
        assert await led.prune_events(11.0) == 1  # a's first; b is met (and put right) too
        view = await _redis_view(led)
        _consistent(view)
        assert view[1] == 4 and view[2] == {orjson.dumps(["w", "a"]): 11.0, orjson.dumps(["w", "b"]): 20.0}
    finally:
        await led.close()


async def test_redis_skewed_totals_are_recounted_by_prune_events(redis_url: str) -> None:
    """Totals set wrong with raw commands (nothing the ledger does can skew them apart from
    the windows' counts now, but a process of another version or an operator could): too low,
    the cap is not enforced; too high, appends would trim live windows. The next
    ``prune_events`` — even one that deletes nothing — recounts both totals from the windows."""
    led = await _redis_ledger(redis_url, "skew", WindowLimits(max_events_total=5, max_bytes_total=1000))
    try:
        _, _, _, total_key, bytes_key = led._windows_keys()
        first = await stream(led, 4, "a", start=10.0, size=10)
        await led._call("PING")  # after the commands sent unawaited
        await led._redis.set(total_key, -100)  # too low
        more = await stream(led, 3, "b", start=20.0, size=10)  # 7 events, the total says -97: no cap
        assert all([(await after(led, i, "a")).found for i in first])
        assert (await _redis_view(led))[1] == -97
        assert await led.prune_events(0.0) == 0  # nothing is that old: only the bookkeeping is put right
        view = await _redis_view(led)
        _consistent(view)
        assert (view[1], view[5]) == (7, 70)
        nxt = await stream(led, 1, "b", start=30.0, size=10)  # 8 > 5: the cap holds again
        assert [(await after(led, i, "a")).found for i in first] == [False, False, False, True]
        assert all([(await after(led, i, "b")).found for i in [*more, *nxt]])
        await led._call("PING")
        await led._redis.set(bytes_key, 10**12)  # too high: the next append would empty every window
        assert await led.prune_events(0.0) == 0
        view = await _redis_view(led)
        _consistent(view)
        assert (view[1], view[5]) == (5, 50)
        last = await stream(led, 1, "c", start=40.0, size=10)  # 6 > 5: only the oldest goes
        assert not (await after(led, first[3], "a")).found
        assert all([(await after(led, i, "b")).found for i in [*more, *nxt]])
        assert (await after(led, last[0], "c")).found
        _consistent(await _redis_view(led))
    finally:
        await led.close()


async def test_redis_overlapping_trims_and_appends_heal_at_the_next_prune(redis_url: str) -> None:
    """Prunes, cap trims and appends of the same windows overlapping in one process: the totals
    always equal the sum of the windows' counts and sizes (one script moves them together),
    a window's count may lag what it holds while they overlap, and a prune that overlaps
    nothing sets every one right."""
    led = await _redis_ledger(redis_url, "overlap", WindowLimits(max_events_per_task=6, max_events_total=20,
                                                                 max_bytes_total=150))
    rng = random.Random(11)
    try:
        for round_ in range(8):
            at = T0 + 100 * round_
            calls = [led.append_event("w", f"t-{rng.randrange(5)}", None, b"p" * rng.randrange(0, 12), at + k)
                     for k in range(30)]
            calls.insert(rng.randrange(len(calls)), led.prune_events(at - 20))
            calls.insert(rng.randrange(len(calls)), led.prune_events(at + 5))
            await asyncio.gather(*calls)
            counts, total, _, _, sizes, total_bytes = await _redis_view(led)
            assert total == sum(counts.values()) and total_bytes == sum(sizes.values())
        await led.prune_events(0.0)
        view = await _redis_view(led)
        _consistent(view)
        assert view[1] <= 20 and view[5] <= 150
    finally:
        await led.close()


async def test_redis_after_a_refused_script_only_reads_are_sent_again(redis_url: str) -> None:
    """A write in the pipeline of a refused script went through: sending it again would count
    twice (the window's bookkeeping increments); a read after it is sent again and sees it."""
    from gateway.ledger.redis import _APPEND_SHA

    led = await _redis_ledger(redis_url, "redo")
    try:
        admin = aioredis.Redis.from_url(redis_url)
        await admin.script_flush()
        await admin.aclose()
        counter = f"{led.prefix}:counter"
        script, incr, get = await asyncio.gather(
            led._call("EVALSHA", _APPEND_SHA, 2, led._events_key("w", "t-1"), led._window_key("w", "t-1"),
                      "", b"p", "1.0", 10, 100, 60_000),
            led._call("INCRBY", counter, 1),
            led._call("GET", counter))
        assert script[1] == 1 and incr == 1 and get == b"1"
        assert await led._redis.get(counter) == b"1"
        assert await led._redis.xlen(led._events_key("w", "t-1")) == 1
    finally:
        await led.close()


async def test_redis_an_append_the_server_refuses_raises_and_counts_nothing(redis_url: str) -> None:
    from redis.exceptions import ResponseError

    led = await _redis_ledger(redis_url, "refused")
    try:
        await stream(led, 2, "ok")
        await led._redis.set(led._events_key("w", "bad"), "not a stream")
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await led.append_event("w", "bad", None, b"x", T0)
        await led._call("PING")  # after the commands sent unawaited
        _consistent(await _redis_view(led))
        assert (await _redis_view(led))[1] == 2
    finally:
        await led.close()


def test_the_window_limits_reach_every_backend(tmp_path: Path) -> None:
    from gateway.ledger import ledger_from_url

    limits = WindowLimits(7, 70, 700, 7000, 7.0)
    for url in ("memory", f"sqlite:///{tmp_path}/l.db", "redis://127.0.0.1:1/0"):
        assert ledger_from_url(url, window=limits)._window_limits == limits  # type: ignore[attr-defined]
    assert dataclasses.astuple(MemoryLedger()._window_limits) == (1000, 1024 * 1024, 100_000, 256 * 1024 * 1024, 3600.0)
