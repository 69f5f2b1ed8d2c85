"""One contract, every backend: memory, SQLite (a real file), Redis (a real redis-server) and
Redis Cluster (a real 3-primary cluster, tests/ledger/conftest.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sqlite3
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from gateway.a2a.states import TaskState
from gateway.invariants.model import ArtifactRecord, TaskRecord
from gateway.ledger import codec, ledger_from_url, sqlite_path
from gateway.errors import VersionConflictError
from gateway.ledger.base import Stored, TaskLedger
from gateway.ledger.memory import MemoryLedger
from gateway.ledger.sqlite import SCHEMA_VERSION, SqliteLedger
from tests.ledger.conftest import BACKENDS
from tests.support.redis_server import redis_server


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=BACKENDS)
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskLedger]:
    if request.param == "memory":
        url = "memory"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/ledger.db"
    elif request.param == "redis-cluster":
        url = request.getfixturevalue("redis_cluster_url")
    else:
        base = request.getfixturevalue("redis_url")
        url = base
    led = ledger_from_url(url)
    if request.param.startswith("redis"):
        led.prefix = f"t{uuid.uuid4().hex[:12]}"  # type: ignore[attr-defined]  # isolate tests on one server
    await led.open()
    yield led
    await led.close()


def rec(task_id: str = "t-1", state: TaskState = TaskState.WORKING, **kw: object) -> TaskRecord:
    base = TaskRecord(upstream="w", task_id=task_id, context_id="c-1", state=state,
                      observed_at=1000.0)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


async def test_absent_task_reads_none(ledger: TaskLedger) -> None:
    assert await ledger.get("w", "nope") is None


async def test_put_then_get_round_trips_every_field(ledger: TaskLedger) -> None:
    original = rec(state=TaskState.CANCELED, poisoned=True,
                   terminal_status={"state": "TASK_STATE_CANCELED", "timestamp": "2026-11-29T20:45:38Z"},
                   artifacts={"a-1": ArtifactRecord(sealed=True, parts=2), "a-2": ArtifactRecord(False, 1)},
                   card_etag='"e-1"', generation=2**63 - 1, pending_get="generation_gap")
    version = await ledger.put(original, 0)
    got = await ledger.get("w", "t-1")
    assert version == 1 and isinstance(got, Stored)
    assert got.version == 1 and not got.needs_resync
    assert got.record == original
    for field in dataclasses.fields(TaskRecord):
        assert getattr(got.record, field.name) == getattr(original, field.name), field.name


@pytest.mark.parametrize("generation,pending_get", [(None, None), (0, None), (7, "generation_regression")])
async def test_generations_round_trip_including_none_and_zero(ledger: TaskLedger, generation: int | None,
                                                              pending_get: str | None) -> None:
    """docs/resume.md §3.1: ``None`` (never sent), ``0`` (not implemented) and ≥ 1 differ."""
    original = rec(generation=generation, pending_get=pending_get)
    await ledger.put(original, 0)
    got = await ledger.get("w", "t-1")
    assert got is not None and got.record == original
    assert (got.record.generation, got.record.pending_get) == (generation, pending_get)


def test_a_document_written_before_generations_reads_as_none() -> None:
    """The durable ledgers keep records across upgrades: a document without ``g`` / ``pg``
    (every record stored before docs/resume.md §3) decodes with neither, and a record without
    them is stored without them (its size unchanged)."""
    old = (b'{"u":"w","t":"t-1","c":"c-1","s":"WORKING","oa":1000.0,"ts":null,"p":false,'
           b'"a":{"a-1":[true,2]},"e":"\\"e-1\\""}')
    record = codec.decode(old)
    assert record.generation is None and record.pending_get is None
    assert record.state is TaskState.WORKING and record.card_etag == '"e-1"'
    assert codec.encode(record) == old
    assert codec.decode(codec.encode(dataclasses.replace(record, generation=0))).generation == 0


@pytest.mark.parametrize("bad", [b'"g":-1', b'"g":"5"', b'"g":true', b'"g":1.5', b'"pg":5'])
def test_a_malformed_generation_is_not_a_record(bad: bytes) -> None:
    doc = b'{"u":"w","t":"t-1","c":null,"s":"WORKING","oa":1.0,"ts":null,"p":false,"a":{},"e":null,' + bad + b"}"
    with pytest.raises(ValueError, match="not a stored task record"):
        codec.decode(doc)


async def test_compare_and_set_rejects_a_stale_version(ledger: TaskLedger) -> None:
    await ledger.put(rec(), 0)
    with pytest.raises(VersionConflictError):
        await ledger.put(rec(state=TaskState.COMPLETED), 0)  # insert over an existing record
    await ledger.put(rec(state=TaskState.COMPLETED), 1)
    with pytest.raises(VersionConflictError):
        await ledger.put(rec(state=TaskState.FAILED), 1)  # stale: version is now 2
    got = await ledger.get("w", "t-1")
    assert got is not None and got.record.state is TaskState.COMPLETED and got.version == 2


async def test_two_concurrent_writers_cannot_both_win(ledger: TaskLedger) -> None:
    """Two events for one task, judged from the same version: exactly one transition wins."""
    await ledger.put(rec(), 0)
    states = (TaskState.COMPLETED, TaskState.CANCELED)
    results = await asyncio.gather(*(ledger.put(rec(state=s), 1) for s in states),
                                   return_exceptions=True)
    wins = [s for s, r in zip(states, results) if r == 2]
    losses = [r for r in results if isinstance(r, VersionConflictError)]
    assert len(wins) == 1 and len(losses) == 1
    got = await ledger.get("w", "t-1")
    assert got is not None and got.record.state is wins[0]


async def test_tasks_are_keyed_by_upstream_and_task_id(ledger: TaskLedger) -> None:
    await ledger.put(rec(), 0)
    await ledger.put(dataclasses.replace(rec(state=TaskState.FAILED), upstream="other"), 0)
    a, b = await ledger.get("w", "t-1"), await ledger.get("other", "t-1")
    assert a is not None and b is not None
    assert a.record.state is TaskState.WORKING and b.record.state is TaskState.FAILED


async def test_count_by_state_follows_transitions(ledger: TaskLedger) -> None:
    await ledger.put(rec("t-1"), 0)
    await ledger.put(rec("t-2"), 0)
    await ledger.put(rec("t-1", TaskState.COMPLETED), 1)
    counts = await ledger.count_by_state()
    assert counts.get("TASK_STATE_WORKING") == 1 and counts.get("TASK_STATE_COMPLETED") == 1


async def test_mark_resync_flags_only_live_tasks_of_durable_backends(ledger: TaskLedger) -> None:
    """The flag sits beside the record (the record itself is unchanged), the version does not
    move, and the next put of the record clears it."""
    await ledger.put(rec("t-live"), 0)
    await ledger.put(rec("t-done", TaskState.COMPLETED), 0)
    flagged = await ledger.mark_resync()
    live, done = await ledger.get("w", "t-live"), await ledger.get("w", "t-done")
    assert live is not None and done is not None
    assert not done.needs_resync
    assert live.record == rec("t-live") and live.version == 1
    if isinstance(ledger, MemoryLedger):
        assert flagged == 0 and not live.needs_resync  # nothing survives a restart anyway
    else:
        assert flagged == 1 and live.needs_resync
        assert await ledger.put(live.record, live.version) == 2  # stored unchanged: cleared
        again = await ledger.get("w", "t-live")
        assert again is not None and not again.needs_resync and again.record == live.record


async def test_prune_deletes_only_old_terminal_tasks(ledger: TaskLedger) -> None:
    await ledger.put(rec("t-old-done", TaskState.COMPLETED, observed_at=100.0), 0)
    await ledger.put(rec("t-new-done", TaskState.COMPLETED, observed_at=900.0), 0)
    await ledger.put(rec("t-old-live", TaskState.WORKING, observed_at=100.0), 0)
    assert await ledger.prune(older_than=500.0) == 1
    assert await ledger.get("w", "t-old-done") is None
    assert await ledger.get("w", "t-new-done") is not None
    assert await ledger.get("w", "t-old-live") is not None
    assert (await ledger.count_by_state()).get("TASK_STATE_COMPLETED") == 1


async def test_memory_ledger_is_bounded_and_evicts_terminal_first() -> None:
    led = MemoryLedger(max_tasks=3)
    await led.put(rec("t-1", TaskState.COMPLETED), 0)
    await led.put(rec("t-2"), 0)
    await led.put(rec("t-3"), 0)
    await led.put(rec("t-4"), 0)
    assert led.evicted == 1
    assert await led.get("w", "t-1") is None  # the terminal one went first
    assert await led.get("w", "t-2") is not None
    await led.put(rec("t-5"), 0)
    assert await led.get("w", "t-2") is None and led.evicted == 2


async def test_sqlite_record_survives_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sub/dir/ledger.db"
    assert sqlite_path(url) == tmp_path / "sub/dir/ledger.db"
    first = ledger_from_url(url)
    await first.open()
    await first.put(rec(state=TaskState.CANCELED), 0)
    await first.close()
    second = ledger_from_url(url)
    await second.open()
    got = await second.get("w", "t-1")
    await second.close()
    assert got is not None and got.record.state is TaskState.CANCELED and got.version == 1


def test_ledger_urls() -> None:
    assert sqlite_path("sqlite:data/l.db") == Path("data/l.db")
    assert sqlite_path("sqlite:///abs/l.db") == Path("/abs/l.db")
    assert type(ledger_from_url("memory")).__name__ == "MemoryLedger"
    assert type(ledger_from_url("redis://127.0.0.1:6379/0")).__name__ == "RedisLedger"
    with pytest.raises(ValueError, match="unknown ledger URL"):
        ledger_from_url("postgres://x")


async def test_many_concurrent_writers_from_one_version_exactly_the_first_called_wins(
        ledger: TaskLedger) -> None:
    """Sixteen puts judged from the same version, called at once (SQLite: one transaction;
    Redis: one pipeline): exactly one wins — the first one called — and every other one raises
    VersionConflictError."""
    await ledger.put(rec(), 0)
    states = [TaskState.COMPLETED, TaskState.CANCELED, TaskState.FAILED, TaskState.INPUT_REQUIRED] * 4
    results = await asyncio.gather(*(ledger.put(rec(state=s, observed_at=1000.0 + i), 1)
                                     for i, s in enumerate(states)), return_exceptions=True)
    assert results[0] == 2
    assert all(isinstance(r, VersionConflictError) for r in results[1:]), results
    got = await ledger.get("w", "t-1")
    assert got is not None and got.version == 2 and got.record.state is TaskState.COMPLETED


async def test_concurrent_inserts_of_one_new_task_have_one_winner(ledger: TaskLedger) -> None:
    results = await asyncio.gather(*(ledger.put(rec(observed_at=float(i)), 0) for i in range(8)),
                                   return_exceptions=True)
    assert results[0] == 1
    assert [type(r) for r in results[1:]] == [VersionConflictError] * 7


async def test_operations_on_one_task_apply_in_call_order(ledger: TaskLedger) -> None:
    """Called at once without awaiting in between: each get sees exactly the puts called
    before it, and a put judged from the version an earlier put creates succeeds."""
    results = await asyncio.gather(
        ledger.get("w", "t-1"),
        ledger.put(rec(), 0),
        ledger.get("w", "t-1"),
        ledger.put(rec(state=TaskState.COMPLETED), 1),
        ledger.get("w", "t-1"),
        ledger.put(rec(state=TaskState.FAILED), 1),  # stale by now
        ledger.get("w", "t-1"),
        return_exceptions=True,
    )
    before, first, after_first, second, after_second, stale, last = results
    assert before is None
    assert first == 1
    assert isinstance(after_first, Stored) and after_first.version == 1
    assert after_first.record.state is TaskState.WORKING
    assert second == 2
    assert isinstance(after_second, Stored) and after_second.record.state is TaskState.COMPLETED
    assert isinstance(stale, VersionConflictError)
    assert isinstance(last, Stored) and last.version == 2 and last.record.state is TaskState.COMPLETED


async def test_many_concurrent_transitions_of_distinct_tasks_all_land(ledger: TaskLedger) -> None:
    await asyncio.gather(*(ledger.put(rec(f"t-{i}"), 0) for i in range(200)))
    await asyncio.gather(*(ledger.put(rec(f"t-{i}", TaskState.COMPLETED), 1) for i in range(200)))
    got = await asyncio.gather(*(ledger.get("w", f"t-{i}") for i in range(200)))
    assert all(r is not None and r.version == 2 and r.record.terminal for r in got)
    assert (await ledger.count_by_state()).get("TASK_STATE_COMPLETED") == 200


# -- counts by state: kept as records change, exact --------------------------------------------

LIVE_STATES = [s for s in TaskState if not s.is_terminal]


async def test_counts_equal_a_recount_through_random_puts_prunes_and_a_reopen(
        ledger: TaskLedger) -> None:
    """Rounds of puts called at once (new tasks, transitions, terminal states, re-puts of
    terminal tasks, and stale puts that must lose), prunes, and for SQLite a close and reopen:
    after each step the counts equal a recount of what the ledger should hold."""
    rng = random.Random(13)
    held: dict[str, tuple[int, TaskRecord]] = {}  # task id -> (version, record)
    next_id = 0

    async def expect_counts() -> None:
        assert await ledger.count_by_state() == dict(Counter(r.state.value for _, r in held.values()))

    for round_no in range(24):
        picked = rng.sample(sorted(held), min(len(held), rng.randint(0, 20)))
        calls: list[tuple[TaskRecord, int, bool]] = []  # (record, expected version, must win)
        for task_id in picked:
            version, old = held[task_id]
            state = old.state if old.terminal else rng.choice(list(TaskState))
            calls.append((rec(task_id, state, observed_at=rng.uniform(0, 1000)), version, True))
            if rng.random() < 0.2:  # the same version once more, called later: it loses
                calls.append((rec(task_id, rng.choice(LIVE_STATES)), version, False))
        for _ in range(rng.randint(1, 20)):
            next_id += 1
            calls.append((rec(f"t-{next_id}", rng.choice(list(TaskState)),
                              observed_at=rng.uniform(0, 1000)), 0, True))
        results = await asyncio.gather(*(ledger.put(r, v) for r, v, _ in calls),
                                       return_exceptions=True)
        for (record, version, wins), result in zip(calls, results):
            if wins:
                assert result == version + 1
                held[record.task_id] = (version + 1, record)
            else:
                assert isinstance(result, VersionConflictError)
        await expect_counts()
        if round_no % 4 == 3:
            cutoff = rng.uniform(0, 1000)
            doomed = [t for t, (_, r) in held.items() if r.terminal and r.observed_at < cutoff]
            assert await ledger.prune(older_than=cutoff) == len(doomed)
            for task_id in doomed:
                del held[task_id]
            await expect_counts()
        if round_no == 12:
            await ledger.mark_resync()  # flags live tasks; no state moves
            await expect_counts()
            if isinstance(ledger, SqliteLedger):
                await ledger.close()
                await ledger.open()
                await expect_counts()
    assert held and any(r.terminal for _, r in held.values())
    if isinstance(ledger, SqliteLedger):  # the kept counts against the tasks table itself
        with closing(sqlite3.connect(ledger.path)) as conn:
            recount = dict(conn.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state"))
        assert await ledger.count_by_state() == recount


async def test_memory_counts_follow_evictions() -> None:
    led = MemoryLedger(max_tasks=3)
    await led.put(rec("t-1", TaskState.COMPLETED), 0)
    await led.put(rec("t-2"), 0)
    await led.put(rec("t-3", TaskState.INPUT_REQUIRED), 0)
    await led.put(rec("t-4"), 0)  # evicts t-1, the terminal one
    assert await led.count_by_state() == {"TASK_STATE_WORKING": 2, "TASK_STATE_INPUT_REQUIRED": 1}
    await led.put(rec("t-3", TaskState.CANCELED, observed_at=10.0), 1)
    await led.put(rec("t-5"), 0)  # evicts t-3, now the only terminal one
    assert led.evicted == 2
    assert await led.count_by_state() == {"TASK_STATE_WORKING": 3}
    await led.put(rec("t-6", TaskState.INPUT_REQUIRED), 0)  # evicts t-2, the oldest of all
    assert led.evicted == 3 and await led.get("w", "t-2") is None
    assert await led.count_by_state() == {"TASK_STATE_WORKING": 2, "TASK_STATE_INPUT_REQUIRED": 1}


# -- SQLite group commit: one transaction per batch, each operation with its own outcome ---------

async def _sqlite(tmp_path: Path, name: str = "ledger.db") -> SqliteLedger:
    led = SqliteLedger(tmp_path / name)
    await led.open()
    return led


async def test_sqlite_a_failing_statement_fails_only_its_own_call(tmp_path: Path) -> None:
    led = await _sqlite(tmp_path)
    try:
        results = await asyncio.gather(
            led.put(rec("t-1"), 0),
            led._submit(lambda c: c.execute("UPDATE no_such_table SET x = 1"), write=True),
            led.put(rec("t-2"), 0),
            return_exceptions=True,
        )
        assert results[0] == 1 and results[2] == 1
        assert isinstance(results[1], sqlite3.OperationalError)
    finally:
        await led.close()
    again = await _sqlite(tmp_path)
    try:
        assert await again.get("w", "t-1") is not None and await again.get("w", "t-2") is not None
    finally:
        await again.close()


async def test_sqlite_a_lost_transaction_reruns_each_call_alone(tmp_path: Path) -> None:
    """An operation that ends the batch's transaction (here: by force) fails alone; the other
    calls of the batch run again, each in a transaction of its own, and are committed."""
    def sabotage(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise sqlite3.OperationalError("boom")

    led = await _sqlite(tmp_path)
    try:
        await led.put(rec("t-1"), 0)
        results = await asyncio.gather(
            led.put(rec("t-1", TaskState.COMPLETED), 1),
            led._submit(sabotage, write=True),
            led.put(rec("t-2"), 0),
            led.put(rec("t-1", TaskState.FAILED), 1),  # still loses to the first put
            return_exceptions=True,
        )
        assert results[0] == 2 and results[2] == 1
        assert isinstance(results[1], sqlite3.OperationalError)
        assert isinstance(results[3], VersionConflictError)
    finally:
        await led.close()
    again = await _sqlite(tmp_path)
    try:
        one, two = await again.get("w", "t-1"), await again.get("w", "t-2")
        assert one is not None and one.record.state is TaskState.COMPLETED and one.version == 2
        assert two is not None
    finally:
        await again.close()


async def test_sqlite_a_returned_put_is_committed_for_other_connections(tmp_path: Path) -> None:
    """Write-before-forward: once put returns, another connection (another process sharing
    the file) reads the record — no waiting for close or a later batch."""
    led = await _sqlite(tmp_path)
    try:
        await asyncio.gather(*(led.put(rec(f"t-{i}"), 0) for i in range(20)))
        with sqlite3.connect(tmp_path / "ledger.db") as other:
            assert other.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 20
    finally:
        await led.close()


async def test_sqlite_compare_and_set_holds_across_two_ledgers_on_one_file(tmp_path: Path) -> None:
    """Two ledgers on one file (as two gateway processes): batches of puts from the same
    versions race, and exactly one put per task wins."""
    a, b = await _sqlite(tmp_path), await _sqlite(tmp_path)
    try:
        await asyncio.gather(*(a.put(rec(f"t-{i}"), 0) for i in range(50)))
        puts = [(rec(f"t-{i}", state), led) for i in range(50)
                for led, state in ((a, TaskState.COMPLETED), (b, TaskState.CANCELED))]
        results = await asyncio.gather(*(led.put(record, 1) for record, led in puts),
                                       return_exceptions=True)
        wins = [record for (record, _), r in zip(puts, results) if r == 2]
        assert len(wins) == 50 and len({w.task_id for w in wins}) == 50
        assert sum(isinstance(r, VersionConflictError) for r in results) == 50
        for w in wins:
            got = await b.get("w", w.task_id)
            assert got is not None and got.version == 2 and got.record.state is w.state
    finally:
        await a.close()
        await b.close()


# -- SQLite: a database of an earlier version gains its counts at open -------------------------

# The schema as 0.1.0 up to 88c5522 created it: no task_counts, no triggers, user_version 0.
_OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    upstream    TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    state       TEXT    NOT NULL,
    terminal    INTEGER NOT NULL,
    resync      INTEGER NOT NULL DEFAULT 0,
    observed_at REAL    NOT NULL,
    record      BLOB    NOT NULL,
    PRIMARY KEY (upstream, task_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_terminal_observed ON tasks (terminal, observed_at);
"""
_OLD_INSERT = ("INSERT INTO tasks (version, state, terminal, resync, observed_at, record, upstream, "
               "task_id) VALUES (?, ?, ?, 0, ?, ?, ?, ?)")
_OLD_STATES = [TaskState.WORKING] * 3 + [TaskState.COMPLETED] * 2 + [TaskState.INPUT_REQUIRED]
_OLD_COUNTS = {"TASK_STATE_WORKING": 3, "TASK_STATE_COMPLETED": 2, "TASK_STATE_INPUT_REQUIRED": 1}


def _old_database(path: Path) -> None:
    """A ledger file as the earlier version left it, with the tasks of ``_OLD_STATES``."""
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(_OLD_SCHEMA)
        conn.executemany(_OLD_INSERT, [
            (1, r.state.value, int(r.terminal), r.observed_at, codec.encode(r), r.upstream, r.task_id)
            for r in (rec(f"old-{i}", state) for i, state in enumerate(_OLD_STATES))])
        conn.commit()


async def test_sqlite_a_database_of_the_earlier_schema_is_migrated_at_open(tmp_path: Path) -> None:
    """The counts are filled once from the tasks; then the triggers keep them, for this
    ledger's writes and for a writer that knows nothing of them (an earlier version sharing the
    file); a second open does not count again."""
    path = tmp_path / "old.db"
    _old_database(path)
    led = SqliteLedger(path)
    await led.open()
    try:
        assert await led.count_by_state() == _OLD_COUNTS
        await led.put(rec("old-0", TaskState.COMPLETED), 1)
        await led.put(rec("new-1", TaskState.SUBMITTED), 0)
        assert await led.count_by_state() == {"TASK_STATE_WORKING": 2, "TASK_STATE_COMPLETED": 3,
                                              "TASK_STATE_INPUT_REQUIRED": 1,
                                              "TASK_STATE_SUBMITTED": 1}
        with closing(sqlite3.connect(path)) as other:  # the earlier version's statements
            other.execute(_OLD_INSERT, (1, "TASK_STATE_WORKING", 0, 1.0, b"{}", "w", "raw"))
            other.execute("UPDATE tasks SET state = 'TASK_STATE_FAILED', terminal = 1 "
                          "WHERE task_id = 'old-1'")
            other.execute("DELETE FROM tasks WHERE task_id = 'old-3'")  # COMPLETED
            other.commit()
            assert other.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        expected = {"TASK_STATE_WORKING": 2, "TASK_STATE_COMPLETED": 2,
                    "TASK_STATE_INPUT_REQUIRED": 1, "TASK_STATE_SUBMITTED": 1,
                    "TASK_STATE_FAILED": 1}
        assert await led.count_by_state() == expected
    finally:
        await led.close()
    again = SqliteLedger(path)
    await again.open()
    try:
        assert await again.count_by_state() == expected
        got = await again.get("w", "old-2")
        assert got is not None and got.record == rec("old-2") and got.version == 1
    finally:
        await again.close()


async def test_sqlite_ledgers_opening_an_earlier_database_at_once_count_each_task_once(
        tmp_path: Path) -> None:
    """Four ledgers (four connections on four threads, as ``serve --workers 4``) open the same
    earlier-version file at the same moment: one migrates, the others find it done."""
    for attempt in range(5):
        path = tmp_path / f"old-{attempt}.db"
        _old_database(path)
        ledgers = [SqliteLedger(path) for _ in range(4)]
        await asyncio.gather(*(led.open() for led in ledgers))
        try:
            for led in ledgers:
                assert await led.count_by_state() == _OLD_COUNTS
        finally:
            for led in ledgers:
                await led.close()


async def test_redis_lost_script_resends_puts_and_the_reads_after_them(redis_url: str) -> None:
    """After ``SCRIPT FLUSH`` (a restarted server): the refused puts are sent again, each
    wins its own compare-and-set once, and a get called after a put sees it."""
    import redis.asyncio as aioredis

    led = ledger_from_url(redis_url)
    led.prefix = "noscript"  # type: ignore[attr-defined]
    await led.open()
    try:
        await led.put(rec("t-0"), 0)
        admin = aioredis.Redis.from_url(redis_url)
        await admin.script_flush()
        await admin.aclose()
        first, seen, done = await asyncio.gather(
            led.put(rec("t-1"), 0), led.get("w", "t-1"),
            led.put(rec("t-0", state=TaskState.COMPLETED), 1))
        assert first == 1 and seen is not None and seen.version == 1
        assert done == 2 and (await led.get("w", "t-0")).record.state is TaskState.COMPLETED
    finally:
        await led.close()
