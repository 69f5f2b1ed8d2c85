"""Property: SQLite and Redis keep the same replay window as the memory reference.

Random programs of appends (three tasks, new or continued lineages, payloads of 0–9 bytes),
reads (``events_after`` one of the newest ids, asked of its own task or of another one, or a
malformed id) and prunes (of the events older than a few calls) run against all three backends
with small limits, one call after the other, ``at`` increasing by one per call. Ids differ in text between backends, so every id is compared by
the position of the append that issued it: each read must give the same found flag, lineage
and sequence of (event, lineage, payload), each prune the same count.

Settings as the fuzz suite's (tests/fuzz/conftest.py): derandomized, no example database, no
deadline, a bounded number of examples; ``A2A_FUZZ_EXAMPLES=N`` runs N random ones instead.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.ledger.base import TaskLedger, WindowLimits
from gateway.ledger.memory import MemoryLedger
from gateway.ledger.redis import RedisLedger
from gateway.ledger.sqlite import SqliteLedger

_DEEP = os.environ.get("A2A_FUZZ_EXAMPLES", "").strip()
SETTINGS = settings(
    derandomize=not _DEEP,
    database=None,
    deadline=None,
    print_blob=True,
    max_examples=int(_DEEP) if _DEEP.isdigit() else 80,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TASKS = [("w", "a"), ("w", "b"), ("v", "a")]
MALFORMED = ["", "0", "-1", "x.1", "1-0", "1-0.00000000", "99999999999999999999", "1.5"]

# small limits, each sometimes out of the way, so each trim is met alone and together (a byte
# total of 6 is under the largest payload: such an event empties the whole ledger)
limits = st.builds(WindowLimits, max_events_per_task=st.sampled_from([4, 100, 3, 2, 1]),
                   max_bytes_per_task=st.sampled_from([40, 16, 10_000]),
                   max_events_total=st.sampled_from([8, 4, 10_000]),
                   max_bytes_total=st.sampled_from([10**9, 30, 12, 6]),
                   retention_seconds=st.just(3600.0))
# append: to a task, in a new lineage, in its newest lineage, or in the lineage of the k-th
# append (maybe another task's: the ledger takes any lineage text), with a payload of n bytes
task = st.sampled_from([0, 0, 0, 1, 2])  # mostly one task: long windows, many lineages in one
append = st.tuples(st.just("append"), task,
                   st.sampled_from(["same", "same", "same", "new", "any"]), st.integers(0, 10**6),
                   st.sampled_from([2, 1, 3, 0, 4, 9]))
# read: of a task, after its k-th newest event (asked of another task, or a malformed id,
# now and then)
read = st.tuples(st.just("read"), task, st.sampled_from([2, 2, 3, 1, 5]),
                 st.sampled_from([0] * 6 + [1, 2]),  # another task now and then
                 st.sampled_from([None] * 6 * len(MALFORMED) + MALFORMED))
# prune: the events older than `back` calls ago
prune = st.tuples(st.just("prune"), st.sampled_from([12, 8, 20, 4, 0]))
op = st.sampled_from([append] * 6 + [read] * 4 + [prune]).flatmap(lambda kind: kind)
programs = st.lists(op, min_size=10, max_size=50)


async def _run(led: TaskLedger, program: list[tuple[Any, ...]]) -> list[Any]:
    """The program's outcomes with every id replaced by the position of its append."""
    ids: list[str] = []
    tasks: list[int] = []
    newest: dict[int, str] = {}  # task -> the lineage of its newest append
    lineages: list[str] = []
    position: dict[str, int] = {}
    trace: list[Any] = []
    for step, op in enumerate(program):
        at = float(step)
        if op[0] == "append":
            _, task, how, k, size = op
            lineage = None
            if how == "same" and task in newest:
                lineage = newest[task]
            elif how == "any" and lineages:
                lineage = lineages[k % len(lineages)]
            payload = (f"{len(ids)}:".encode() + b"." * size)[:size]
            event_id, lineage = await led.append_event(*TASKS[task], lineage, payload, at)
            assert event_id not in position
            position[event_id] = len(ids)
            ids.append(event_id)
            tasks.append(task)
            lineages.append(lineage)
            newest[task] = lineage
            trace.append(("append", position[lineage]))
        elif op[0] == "read":
            _, task, k, other, malformed = op
            mine = [event_id for event_id, t in zip(ids, tasks) if t == task]
            if malformed is not None or not mine:
                event_id = malformed or ""
            else:
                event_id = mine[-min(k, len(mine))]
            task = (task + other) % len(TASKS)
            replay = await led.events_after(*TASKS[task], event_id)
            assert replay.found or (replay.lineage is None and replay.events == ())
            trace.append(("read", replay.found, position.get(replay.lineage or ""),
                          [(position[e.event_id], position[e.lineage], e.payload) for e in replay.events]))
        else:
            trace.append(("prune", await led.prune_events(at - op[1])))
    return trace


@SETTINGS
@given(limits=limits, program=programs)
def test_sqlite_and_redis_keep_the_window_the_memory_reference_keeps(
        redis_url: str, limits: WindowLimits, program: list[tuple[Any, ...]]) -> None:
    async def run_all() -> tuple[list[Any], list[Any], list[Any]]:
        with tempfile.TemporaryDirectory() as tmp:
            ledgers: list[TaskLedger] = [
                MemoryLedger(window=limits),
                SqliteLedger(Path(tmp) / "l.db", window=limits),
                RedisLedger(redis_url, prefix=f"model{uuid.uuid4().hex[:12]}", window=limits),
            ]
            for led in ledgers:
                await led.open()
            try:
                memory, sqlite, redis = [await _run(led, program) for led in ledgers]
            finally:
                for led in ledgers:
                    await led.close()
        return memory, sqlite, redis

    memory, sqlite, redis = asyncio.run(run_all())
    assert sqlite == memory
    assert redis == memory
