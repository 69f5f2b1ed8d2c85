"""One contract, every backend: memory, SQLite (a real file), Redis (a real redis-server) and
Redis Cluster (a real 3-primary cluster, tests/ledger/conftest.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sqlite3
import uuid
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from gateway.a2a.states import TaskState
from gateway.invariants.model import ArtifactRecord, TaskRecord
from gateway.ledger import codec, ledger_from_url, sqlite_path
from gateway.errors import VersionConflictError
from gateway.ledger.base import LiveTask, Stored, TaskLedger
from gateway.ledger.memory import MemoryLedger
from gateway.ledger.sqlite import SCHEMA_VERSION, SqliteLedger


def rec(task_id: str = "t-1", state: TaskState = TaskState.WORKING, **kw: object) -> TaskRecord:
    base = TaskRecord(upstream="w", task_id=task_id, context_id="c-1", state=state,
                      observed_at=1000.0)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


async def test_absent_task_reads_none(ledger: TaskLedger) -> None:
    assert await ledger.get("w", "nope") is None


async def test_put_then_get_round_trips_every_field(ledger: TaskLedger) -> None:
    original = rec(state=TaskState.CANCELED, poisoned=True,
                   terminal_status={"state": "TASK_STATE_CANCELED", "timestamp": "2026-11-29T20:45:38Z"},
                   artifacts={"a-1": ArtifactRecord(sealed=True, parts=2), "a-2": ArtifactRecord(False, 1),
                              "a-3": ArtifactRecord(True, 3, bytes(range(16)))},
                   card_etag='"e-1"', generation=2**63 - 1, pending_get="generation_gap",
                   card_generation=7)
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


def test_a_document_written_before_artifact_digests_and_card_generations_reads_as_none() -> None:
    """docs/field-cases.md F18, F20: an artifact stored as ``[sealed, parts]`` has no digest and
    a document without ``cg`` no card generation; a record without them is stored as before,
    one with them round-trips."""
    old = (b'{"u":"w","t":"t-1","c":"c-1","s":"COMPLETED","oa":1000.0,"ts":null,"p":false,'
           b'"a":{"a-1":[true,2],"a-2":[false,1]},"e":null}')
    record = codec.decode(old)
    assert record.artifacts == {"a-1": ArtifactRecord(True, 2), "a-2": ArtifactRecord(False, 1)}
    assert record.artifacts["a-1"].digest is None and record.card_generation is None
    assert codec.encode(record) == old
    newer = dataclasses.replace(record, card_generation=3,
                                artifacts={"a-1": ArtifactRecord(True, 2, b"\xab" * 16)})
    assert codec.decode(codec.encode(newer)) == newer
    assert b'"a-1":[true,2,"' + b"ab" * 16 + b'"]' in codec.encode(newer) and b'"cg":3' in codec.encode(newer)


@pytest.mark.parametrize("bad", [b'"g":-1', b'"g":"5"', b'"g":true', b'"g":1.5', b'"pg":5',
                                 b'"cg":-2', b'"cg":"3"'])
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


async def test_the_readiness_probe_writes_and_changes_nothing_read(ledger: TaskLedger) -> None:
    """``probe()`` (``/readyz``'s write, issue #35) succeeds on a writable ledger, again and
    again, and leaves every record and count as they were."""
    await ledger.put(rec("t-1"), 0)
    before = (await ledger.get("w", "t-1"), await ledger.count_by_state())
    assert before[0] is not None
    for _ in range(3):
        await ledger.probe()
    assert (await ledger.get("w", "t-1"), await ledger.count_by_state()) == before


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
            assert other.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
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


# --- live_before: the sweep's scan (docs/sweep.md §5) ---------------------------------------------


async def _all_pages(ledger: TaskLedger, upstream: str, before: float, limit: int) -> list[LiveTask]:
    out: list[LiveTask] = []
    after = None
    for _ in range(1000):
        page = await ledger.live_before(upstream, before, limit=limit, after=after)
        assert len(page) <= limit
        out += page
        if len(page) < limit:
            return out
        after = page[-1]
    raise AssertionError("paging did not end")


async def test_live_before_lists_live_tasks_observed_before_the_time_oldest_first(ledger: TaskLedger) -> None:
    """Terminal tasks, tasks observed at or after ``before`` and other upstreams' tasks are
    never listed; the rest come oldest observation first, each with its key and time."""
    await ledger.put(rec("t-new", observed_at=900.0), 0)
    await ledger.put(rec("t-old", observed_at=100.0), 0)
    await ledger.put(rec("t-mid", TaskState.INPUT_REQUIRED, observed_at=500.0), 0)
    await ledger.put(rec("t-done", TaskState.FAILED, observed_at=50.0), 0)
    await ledger.put(rec("t-other", upstream="x", observed_at=60.0), 0)
    await ledger.put(rec("t-edge", observed_at=700.0), 0)
    page = await ledger.live_before("w", 700.0, limit=10)
    assert page == [LiveTask("w", "", "t-old", 100.0), LiveTask("w", "", "t-mid", 500.0)]
    assert await ledger.live_before("x", 700.0, limit=10) == [LiveTask("x", "", "t-other", 60.0)]
    assert await ledger.live_before("nobody", 1e12, limit=10) == []
    assert [t.task_id for t in await ledger.live_before("w", 1e12, limit=2)] == ["t-old", "t-mid"]


async def test_live_before_follows_the_record_through_puts(ledger: TaskLedger) -> None:
    """A task observed again moves to its new time; once terminal it is never listed again."""
    v_a = await ledger.put(rec("t-a", observed_at=100.0), 0)
    await ledger.put(rec("t-b", observed_at=200.0), 0)
    await ledger.put(rec("t-a", observed_at=300.0), v_a)
    assert [t.task_id for t in await ledger.live_before("w", 1e12, limit=10)] == ["t-b", "t-a"]
    assert [t.task_id for t in await ledger.live_before("w", 250.0, limit=10)] == ["t-b"]
    stored = await ledger.get("w", "t-b")
    assert stored is not None
    await ledger.put(rec("t-b", TaskState.FAILED, observed_at=400.0), stored.version)
    assert [t.task_id for t in await ledger.live_before("w", 1e12, limit=10)] == ["t-a"]
    assert await ledger.prune(older_than=1e12) == 1  # the terminal one goes; the live one stays
    assert [t.task_id for t in await ledger.live_before("w", 1e12, limit=10)] == ["t-a"]


async def test_live_before_pages_through_ties_reading_each_task_once(ledger: TaskLedger) -> None:
    """Paging with ``after`` (the last task of the previous page) lists every matching task
    exactly once, in non-decreasing ``observed_at``, ties of one time included."""
    times = [100.0, 100.0, 100.0, 200.0, 200.0, 300.0, 300.0, 300.0, 300.0, 400.0, 1e3 + 0.25]
    ids = [f"t-{i:02d}-{random.randrange(10**6)}" for i in range(len(times))]
    for task_id, at in zip(ids, times):
        await ledger.put(rec(task_id, observed_at=at), 0)
    for limit in (1, 2, 3, 4, 20):
        listed = await _all_pages(ledger, "w", 1e12, limit)
        assert sorted(t.task_id for t in listed) == sorted(ids), limit
        assert [t.observed_at for t in listed] == sorted(times), limit
        assert all(t.observed_at == dict(zip(ids, times))[t.task_id] for t in listed)
    assert {t.task_id for t in await _all_pages(ledger, "w", 300.0, 2)} == set(ids[:5])


async def test_live_before_lists_the_same_after_a_resync(ledger: TaskLedger) -> None:
    """The restart flag moves nothing the scan orders by."""
    await ledger.put(rec("t-a", observed_at=100.0), 0)
    await ledger.put(rec("t-b", TaskState.COMPLETED, observed_at=50.0), 0)
    before = await ledger.live_before("w", 1e12, limit=10)
    await ledger.mark_resync()
    assert await ledger.live_before("w", 1e12, limit=10) == before == [LiveTask("w", "", "t-a", 100.0)]


async def test_memory_live_before_forgets_evicted_tasks() -> None:
    led = MemoryLedger(max_tasks=2)
    await led.put(rec("t-1", observed_at=1.0), 0)
    await led.put(rec("t-2", observed_at=2.0), 0)
    await led.put(rec("t-3", observed_at=3.0), 0)  # evicts t-1, the least recently updated
    assert [t.task_id for t in await led.live_before("w", 1e12, limit=10)] == ["t-2", "t-3"]


@pytest.mark.parametrize("backend", ["redis", pytest.param("redis-cluster", marks=pytest.mark.slow)])
async def test_redis_resync_indexes_live_tasks_a_sweep_index_never_held(backend: str,
                                                                        request: pytest.FixtureRequest) -> None:
    """Tasks stored before the sweep's sorted set existed (here: the set deleted) are indexed
    again by the start-up resync scan."""
    url = request.getfixturevalue("redis_url" if backend == "redis" else "redis_cluster_url")
    led = ledger_from_url(url)
    led.prefix = f"t{uuid.uuid4().hex[:12]}"  # type: ignore[attr-defined]
    await led.open()
    try:
        await led.put(rec("t-a", observed_at=100.0), 0)
        await led.put(rec("t-b", TaskState.COMPLETED, observed_at=50.0), 0)
        await led.put(rec("t-c", tenant="a:b{%}", observed_at=200.0), 0)  # a tenant's key, escaped
        await led._redis.delete(led._observed_key("w"))  # type: ignore[attr-defined]
        assert await led.live_before("w", 1e12, limit=10) == []
        assert await led.mark_resync() == 2
        assert await led.live_before("w", 1e12, limit=10) == [LiveTask("w", "", "t-a", 100.0),
                                                              LiveTask("w", "a:b{%}", "t-c", 200.0)]
    finally:
        await led.close()


#: (tenant, task id) pairs that would spell one sweep-index member if the tenant were not escaped
_NUL_KEYS = [("a\x00b", "t-1"), ("a", "b\x00t-1"), ("%00", "t-1"), ("\x00", "t-1"), ("", "\x00t-1"), ("%", "t-1")]


async def test_live_before_keeps_tenants_with_a_nul_or_percent_apart(ledger: TaskLedger) -> None:
    """A tenant is any string a client sends, NUL and ``%`` included: the sweep's scan still
    names each (tenant, task) once, as it was stored (docs/callers.md §1)."""
    for n, (tenant, task_id) in enumerate(_NUL_KEYS):
        await ledger.put(rec(task_id, tenant=tenant, observed_at=100.0 + n), 0)
    listed = await _all_pages(ledger, "w", 1e12, 2)
    assert [(t.tenant, t.task_id) for t in listed] == _NUL_KEYS


@pytest.mark.parametrize("backend", ["redis", pytest.param("redis-cluster", marks=pytest.mark.slow)])
async def test_redis_resync_indexes_tenants_with_a_nul_or_percent_as_put_does(
        backend: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("redis_url" if backend == "redis" else "redis_cluster_url")
    led = ledger_from_url(url)
    led.prefix = f"t{uuid.uuid4().hex[:12]}"  # type: ignore[attr-defined]
    await led.open()
    try:
        for n, (tenant, task_id) in enumerate(_NUL_KEYS):
            await led.put(rec(task_id, tenant=tenant, observed_at=100.0 + n), 0)
        await led._redis.delete(led._observed_key("w"))  # type: ignore[attr-defined]
        assert await led.mark_resync() == len(_NUL_KEYS)
        assert [(t.tenant, t.task_id) for t in await _all_pages(led, "w", 1e12, 2)] == _NUL_KEYS
    finally:
        await led.close()


@pytest.mark.slow
async def test_redis_cluster_live_before_heals_a_lagging_index(request: pytest.FixtureRequest) -> None:
    """The cluster's sorted set is moved after the compare-and-set: an entry that lags the
    task (a lost ZREM of a terminal task, a stale score) is put right when it is listed."""
    led = ledger_from_url(request.getfixturevalue("redis_cluster_url"))
    led.prefix = f"t{uuid.uuid4().hex[:12]}"  # type: ignore[attr-defined]
    await led.open()
    try:
        await led.put(rec("t-done", TaskState.COMPLETED, observed_at=10.0), 0)
        await led.put(rec("t-live", observed_at=500.0), 0)
        client, key = led._redis, led._observed_key("w")  # type: ignore[attr-defined]
        await client.zadd(key, {led._observed_member("", "t-done"): 10.0,  # type: ignore[attr-defined]
                                led._observed_member("", "t-live"): 20.0})  # type: ignore[attr-defined]
        assert await led.live_before("w", 100.0, limit=10) == []
        assert await client.zscore(key, led._observed_member("", "t-done")) is None  # type: ignore[attr-defined]
        assert await led.live_before("w", 1e12, limit=10) == [LiveTask("w", "", "t-live", 500.0)]
    finally:
        await led.close()


# --- the task timeline (docs/observability.md §2) ------------------------------------------------

from gateway.ledger.base import TimelineEntry, TimelineLimits  # noqa: E402


def entry(at: float, verdict: str = "forwarded", **kw: object) -> TimelineEntry:
    return TimelineEntry("event", verdict, method="SendStreamingMessage", binding="jsonrpc", version="1.0",
                         at=at, **kw)  # type: ignore[arg-type]


async def test_timeline_round_trips_every_field_oldest_first(ledger: TaskLedger) -> None:
    first = entry(1000.5, state_received="completed", state="TASK_STATE_COMPLETED")
    second = TimelineEntry("request", "answered_locally", method="SendMessage", binding="rest", version="0.3",
                           state="TASK_STATE_COMPLETED",
                           findings=(("rejection", "terminal_task", "SendMessage on terminal t-1"),),
                           forced_get="heartbeat_gap", error="-32004 task t-1 is completed", at=1001.25)
    await ledger.append_timeline("w", "t-1", first)
    await ledger.append_timeline("w", "t-1", second)
    assert await ledger.timeline("w", "t-1") == [first, second]
    assert await ledger.timeline("w", "t-2") == []


async def test_timeline_is_keyed_by_upstream_tenant_and_task(ledger: TaskLedger) -> None:
    await ledger.append_timeline("w", "t-1", entry(1.0, "rewritten"))
    await ledger.append_timeline("w", "t-1", entry(2.0, "dropped"), tenant="acme")
    await ledger.append_timeline("v", "t-1", entry(3.0, "rejected"))
    assert [e.verdict for e in await ledger.timeline("w", "t-1")] == ["rewritten"]
    assert [e.verdict for e in await ledger.timeline("w", "t-1", tenant="acme")] == ["dropped"]
    assert [e.verdict for e in await ledger.timeline("v", "t-1")] == ["rejected"]


async def test_timeline_keeps_the_newest_entries_per_task(ledger: TaskLedger) -> None:
    ledger.timeline_limits = TimelineLimits(max_entries_per_task=3)  # type: ignore[attr-defined]
    for i in range(7):
        await ledger.append_timeline("w", "t-1", entry(float(i)))
    assert [e.at for e in await ledger.timeline("w", "t-1")] == [4.0, 5.0, 6.0]


async def test_timeline_keeps_at_most_max_tasks_timelines_least_recently_written_first(
        ledger: TaskLedger) -> None:
    ledger.timeline_limits = TimelineLimits(max_tasks=2)  # type: ignore[attr-defined]
    every = 64 if ledger.backend == "sqlite" else 1  # SQLite checks the task bound every 64 appends
    for i in range(every):
        await ledger.append_timeline("w", "old", entry(float(i)))
    await ledger.append_timeline("w", "t-1", entry(100.0))
    await ledger.append_timeline("w", "old", entry(101.0))  # written again: now the newest
    for i in range(every):
        await ledger.append_timeline("w", "t-2", entry(200.0 + i))
    kept = {t for t in ("old", "t-1", "t-2") if await ledger.timeline("w", t)}
    assert kept == {"old", "t-2"}


async def test_prune_timeline_deletes_old_entries(ledger: TaskLedger) -> None:
    await ledger.append_timeline("w", "t-old", entry(10.0))
    await ledger.append_timeline("w", "t-new", entry(10.0))
    await ledger.append_timeline("w", "t-new", entry(500.0))
    deleted = await ledger.prune_timeline(100.0)
    assert deleted >= 1
    assert await ledger.timeline("w", "t-old") == []
    assert [e.at for e in await ledger.timeline("w", "t-new")][-1] == 500.0


# -- tenants: the A2A tenant is part of every key (docs/callers.md §1) -------------------------


async def test_tenants_keep_separate_records_of_one_task_id(ledger: TaskLedger) -> None:
    """The same task id in no tenant, ``acme`` and ``beta`` (and tenants and ids that would
    spell one key if joined with ``:``): separate records, versions and compare-and-set."""
    keys = [("", "t-1"), ("acme", "t-1"), ("beta", "t-1"), ("a:b", "c"), ("a", "b:c"), ("{x}%", "t-1")]
    for n, (tenant, task_id) in enumerate(keys):
        assert await ledger.put(rec(task_id, tenant=tenant, context_id=f"c-{n}"), 0) == 1
    for n, (tenant, task_id) in enumerate(keys):
        got = await ledger.get("w", task_id, tenant=tenant)
        assert got is not None and got.record.tenant == tenant and got.record.context_id == f"c-{n}"
    await ledger.put(rec("t-1", TaskState.COMPLETED, tenant="acme", context_id="c-1"), 1)
    with pytest.raises(VersionConflictError):
        await ledger.put(rec("t-1", TaskState.CANCELED, tenant="acme"), 1)
    assert (await ledger.get("w", "t-1", tenant="beta")).record.state is TaskState.WORKING
    assert (await ledger.get("w", "t-1")).version == 1
    assert await ledger.get("w", "t-1", tenant="gamma") is None
    assert await ledger.count_by_state() == {"TASK_STATE_WORKING": 5, "TASK_STATE_COMPLETED": 1}


async def test_tenant_and_callers_round_trip(ledger: TaskLedger) -> None:
    original = rec("t-2", TaskState.COMPLETED, tenant="acme", callers=("fp-a", "fp-b"))
    await ledger.put(original, 0)
    got = await ledger.get("w", "t-2", tenant="acme")
    assert got is not None and got.record == original


async def test_a_tenants_terminal_records_are_pruned_like_any(ledger: TaskLedger) -> None:
    await ledger.put(rec("t-3", TaskState.COMPLETED, tenant="acme", observed_at=10.0), 0)
    await ledger.put(rec("t-3", TaskState.COMPLETED, observed_at=5000.0), 0)
    assert await ledger.prune(older_than=100.0) == 1
    assert await ledger.get("w", "t-3", tenant="acme") is None and await ledger.get("w", "t-3") is not None


async def test_tenants_keep_separate_replay_windows(ledger: TaskLedger) -> None:
    first, _ = await ledger.append_event("w", "t-1", None, b"acme-1", 1.0, tenant="acme")
    await ledger.append_event("w", "t-1", first, b"acme-2", 2.0, tenant="acme")
    other, _ = await ledger.append_event("w", "t-1", None, b"none-1", 3.0)
    acme = await ledger.events_after("w", "t-1", first, tenant="acme")
    assert acme.found and [e.payload for e in acme.events] == [b"acme-2"]
    assert not (await ledger.events_after("w", "t-1", first)).found  # another tenant's id
    assert not (await ledger.events_after("w", "t-1", first, tenant="beta")).found
    assert (await ledger.events_after("w", "t-1", other)).found
    assert not (await ledger.events_after("w", "t-1", other, tenant="acme")).found


# -- SQLite: a database of schema 2 gains the tenant at open ---------------------------------------

_V2_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tasks (
        upstream    TEXT    NOT NULL,
        task_id     TEXT    NOT NULL,
        version     INTEGER NOT NULL,
        state       TEXT    NOT NULL,
        terminal    INTEGER NOT NULL,
        resync      INTEGER NOT NULL DEFAULT 0,
        observed_at REAL    NOT NULL,
        record      BLOB    NOT NULL,
        PRIMARY KEY (upstream, task_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS tasks_terminal_observed ON tasks (terminal, observed_at)",
    """CREATE TABLE IF NOT EXISTS task_counts (
        state TEXT    NOT NULL PRIMARY KEY,
        n     INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TRIGGER IF NOT EXISTS tasks_count_insert AFTER INSERT ON tasks BEGIN
        INSERT INTO task_counts (state, n) VALUES (NEW.state, 1)
            ON CONFLICT (state) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER IF NOT EXISTS tasks_count_update AFTER UPDATE OF state ON tasks
    WHEN OLD.state IS NOT NEW.state BEGIN
        UPDATE task_counts SET n = n - 1 WHERE state = OLD.state;
        INSERT INTO task_counts (state, n) VALUES (NEW.state, 1)
            ON CONFLICT (state) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER IF NOT EXISTS tasks_count_delete AFTER DELETE ON tasks BEGIN
        UPDATE task_counts SET n = n - 1 WHERE state = OLD.state;
    END""",
    # Filled once, from the tasks the database already holds (none when it is new).
    "DELETE FROM task_counts",
    "INSERT INTO task_counts (state, n) SELECT state, COUNT(*) FROM tasks GROUP BY state",
    # -- version 2: the replay window (docs/resume.md §2.2) --
    # id is the event id (as text); AUTOINCREMENT: never reused, even after the newest row
    # went. lineage NULL: the event starts its own lineage (named after its id).
    """CREATE TABLE IF NOT EXISTS events (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        upstream TEXT    NOT NULL,
        task_id  TEXT    NOT NULL,
        lineage  TEXT,
        at       REAL    NOT NULL,
        size     INTEGER NOT NULL,
        payload  BLOB    NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS events_task ON events (upstream, task_id, id)",
    "CREATE INDEX IF NOT EXISTS events_at ON events (at)",
    # Per task: its events and their payload bytes (a row only while it has events); and the
    # events and payload bytes of all tasks (one row). Kept by triggers on events, like
    # task_counts.
    """CREATE TABLE IF NOT EXISTS event_windows (
        upstream TEXT    NOT NULL,
        task_id  TEXT    NOT NULL,
        n        INTEGER NOT NULL,
        bytes    INTEGER NOT NULL,
        PRIMARY KEY (upstream, task_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS event_total (
        one   INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
        n     INTEGER NOT NULL,
        bytes INTEGER NOT NULL
    )""",
    """CREATE TRIGGER IF NOT EXISTS events_window_insert AFTER INSERT ON events BEGIN
        INSERT INTO event_windows (upstream, task_id, n, bytes)
            VALUES (NEW.upstream, NEW.task_id, 1, NEW.size)
            ON CONFLICT (upstream, task_id) DO UPDATE SET n = n + 1, bytes = bytes + excluded.bytes;
        UPDATE event_total SET n = n + 1, bytes = bytes + NEW.size;
    END""",
    """CREATE TRIGGER IF NOT EXISTS events_window_delete AFTER DELETE ON events BEGIN
        UPDATE event_windows SET n = n - 1, bytes = bytes - OLD.size
            WHERE upstream = OLD.upstream AND task_id = OLD.task_id;
        DELETE FROM event_windows WHERE upstream = OLD.upstream AND task_id = OLD.task_id AND n <= 0;
        UPDATE event_total SET n = n - 1, bytes = bytes - OLD.size;
    END""",
    # Filled once, from the events the database already holds (none before version 2).
    "DELETE FROM event_windows",
    """INSERT INTO event_windows (upstream, task_id, n, bytes)
        SELECT upstream, task_id, COUNT(*), SUM(size) FROM events GROUP BY upstream, task_id""",
    "DELETE FROM event_total",
    "INSERT INTO event_total (one, n, bytes) SELECT 1, COUNT(*), COALESCE(SUM(size), 0) FROM events",
    "PRAGMA user_version = 2",
)



async def test_sqlite_a_schema_2_database_keeps_its_rows_under_no_tenant(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for statement in _V2_SCHEMA:
            conn.execute(statement)
        for i, state in enumerate(_OLD_STATES):
            r = rec(f"old-{i}", state)
            conn.execute(_OLD_INSERT, (3, r.state.value, int(r.terminal), r.observed_at, codec.encode(r),
                                       r.upstream, r.task_id))
        for i in range(3):
            conn.execute("INSERT INTO events (upstream, task_id, lineage, at, size, payload) "
                         "VALUES ('w', 'old-0', ?, ?, 2, ?)", (None if i == 0 else "1", float(i), b"e%d" % i))
    led = SqliteLedger(path)
    await led.open()
    try:
        assert await led.count_by_state() == _OLD_COUNTS
        got = await led.get("w", "old-1")
        assert got is not None and got.version == 3 and got.record == rec("old-1")
        assert await led.get("w", "old-1", tenant="acme") is None
        replay = await led.events_after("w", "old-0", "1")
        assert replay.found and [e.payload for e in replay.events] == [b"e1", b"e2"]
        assert not (await led.events_after("w", "old-0", "1", tenant="acme")).found
        await led.put(rec("old-1", tenant="acme"), 0)  # a task of the same id in a tenant
        await led.put(rec("old-1", TaskState.COMPLETED), 3)
        nxt, _ = await led.append_event("w", "old-0", "1", b"e3", 4.0)
        assert [e.payload for e in (await led.events_after("w", "old-0", "1")).events] == [b"e1", b"e2", b"e3"]
        assert int(nxt) == 4
        assert await led.count_by_state() == {"TASK_STATE_WORKING": 3, "TASK_STATE_COMPLETED": 3,
                                              "TASK_STATE_INPUT_REQUIRED": 1}
    finally:
        await led.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT n, bytes FROM event_windows WHERE task_id = 'old-0'").fetchone() == (4, 8)
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'tasks_before_tenants'").fetchone() is None
    again = SqliteLedger(path)
    await again.open()  # nothing more to migrate
    try:
        assert (await again.get("w", "old-1", tenant="acme")).record.tenant == "acme"
        assert (await again.get("w", "old-1")).record.state is TaskState.COMPLETED
    finally:
        await again.close()


async def test_live_before_names_each_tasks_tenant_and_pages_through_them(ledger: TaskLedger) -> None:
    """The sweep's scan lists one task id in several tenants as several tasks, each with its
    tenant (docs/sweep.md §5, docs/callers.md §1), and pages through their ties once each."""
    for tenant in ("", "acme", "a:b"):
        await ledger.put(rec("t-1", tenant=tenant, observed_at=100.0), 0)
    await ledger.put(rec("t-0", tenant="acme", observed_at=50.0), 0)
    listed = await _all_pages(ledger, "w", 1e12, 1)
    assert sorted((t.tenant, t.task_id) for t in listed) == [("", "t-1"), ("a:b", "t-1"), ("acme", "t-0"),
                                                             ("acme", "t-1")]
    assert listed[0] == LiveTask("w", "acme", "t-0", 50.0)
    stored = await ledger.get("w", "t-1", tenant="acme")
    assert stored is not None
    await ledger.put(rec("t-1", TaskState.FAILED, tenant="acme", observed_at=200.0), stored.version)
    assert sorted((t.tenant, t.task_id) for t in await _all_pages(ledger, "w", 1e12, 2)) == [
        ("", "t-1"), ("a:b", "t-1"), ("acme", "t-0")]


# --- card generations (docs/field-cases.md F20) ---------------------------------------------------


async def test_a_card_change_bumps_the_generation_even_back_to_an_old_etag(ledger: TaskLedger) -> None:
    assert await ledger.observe_card("w", "", '"A"') == 1  # the first card ever observed
    assert await ledger.observe_card("w", "", '"A"') == 1  # the same card again: no change
    assert await ledger.observe_card("w", "", '"B"') == 2
    assert await ledger.observe_card("w", "", '"A"') == 3  # back to A: still a change
    assert await ledger.observe_card("w", "", '"A"') == 3
    assert await ledger.observe_card("other", "", '"A"') == 1  # per upstream


async def test_card_variants_each_keep_their_etag(ledger: TaskLedger) -> None:
    """A worker that varies its card by A2A-Version: a variant seen for the first time is no
    change, each variant's own change is one."""
    assert await ledger.observe_card("w", "1.0", '"v1"') == 1
    assert await ledger.observe_card("w", "0.3", '"v03"') == 1
    assert await ledger.observe_card("w", "1.0", '"v1"') == 1
    assert await ledger.observe_card("w", "0.3", '"v03-b"') == 2
    assert await ledger.observe_card("w", "1.0", '"v1"') == 2


async def test_concurrent_observers_of_one_change_count_it_once(ledger: TaskLedger) -> None:
    """Replicas sharing the ledger that see the same new card at once bump it once."""
    assert await ledger.observe_card("w", "", '"A"') == 1
    seen = await asyncio.gather(*(ledger.observe_card("w", "", '"B"') for _ in range(8)))
    assert seen == [2] * 8


async def test_a_second_ledger_on_the_same_store_shares_the_generation(tmp_path: Path, redis_url: str) -> None:
    """The generation lives in the ledger, not the process: a second SQLite ledger on the same
    file, or a second Redis client with the same prefix, reads what the first recorded."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    for url in (f"sqlite:///{tmp_path}/ledger.db", redis_url):
        first, second = ledger_from_url(url), ledger_from_url(url)
        for led in (first, second):
            if url.startswith("redis"):
                led.prefix = prefix  # type: ignore[attr-defined]
            await led.open()
        try:
            assert await first.observe_card("w", "", '"A"') == 1
            assert await first.observe_card("w", "", '"B"') == 2
            assert await first.observe_card("w", "", '"A"') == 3
            assert await second.observe_card("w", "", '"A"') == 3  # nothing changed for it: the shared count
        finally:
            await first.close()
            await second.close()


async def test_a_version_3_sqlite_file_gains_card_generations(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ledger.db"
    first = ledger_from_url(url)
    await first.open()
    await first.put(rec(), 0)
    await first.close()
    with sqlite3.connect(tmp_path / "ledger.db") as conn:  # as a version-3 build left it
        conn.execute("DROP TABLE card_generations")
        conn.execute("PRAGMA user_version = 3")
    second = ledger_from_url(url)
    await second.open()
    try:
        assert await second.observe_card("w", "", '"A"') == 1
        assert (await second.get("w", "t-1")) is not None
    finally:
        await second.close()
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
