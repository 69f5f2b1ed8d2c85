"""Scrape benchmark: what counting the tasks by state costs with a large ledger, and what it
does to the traffic meanwhile (issue #13 item 3).

    python -m bench.scrape_bench [--tasks N] [--seconds S] [--old-reps N] [--puts N] [--rounds N]
                                 [--memory-tasks N]

"old" is ``SELECT state, COUNT(*) FROM tasks GROUP BY state`` (what ``count_by_state`` ran
before ``task_counts``), "new" is ``count_by_state`` as it is now (``task_counts``, kept by
triggers). Both run in this one process on the same file, through the ledger's own thread.

1. Fill: a SQLite ledger of ``--tasks`` (default 300 000) tasks, inserted with direct SQL (the
   backend's own ``INSERT``) in one transaction: mostly terminal, as under a 7-day retention.
   The records are real codec documents with uuid4 ids.
2. ``count_by_state`` latency on that file, old and new: p50 and max.
3. ``put`` with and without the triggers: fresh files, the same ledger, one of them with the
   three triggers dropped (so: the old schema); ``--puts`` tasks each stored twice (insert
   WORKING, update to COMPLETED), one at a time and from 32 concurrent callers, in ``--rounds``
   rounds that run both in alternating order. Reported: median puts/s and CPU time per put
   (this process, event loop and ledger thread), and the median over rounds of each round's
   extra CPU per put with the triggers (paired, so the machine's other load cancels out best).
4. SendMessage-like latency under scraping: one client stores new tasks one after another as a
   ``SendMessage`` does (ledger ``get`` then ``put``), timed end to end, while 0, 1 or 4 loops
   call old or new as fast as they can on the same ledger for ``--seconds`` (at least 5 messages
   each): p50 and p99 in ms, and the scrapes done.
5. The memory backend at ``--memory-tasks`` (default 100 000, its default bound): the old
   ``Counter`` over every record on the event loop vs the kept counter.

Prints one table and writes it to ``bench/results/scrape-<date>.txt``. No timing assertions.
"""

from __future__ import annotations

from bench import run_and_save

import argparse
import asyncio
import dataclasses
import os
import platform
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path

from gateway import __version__
from gateway.a2a.states import TaskState
from gateway.invariants.model import ArtifactRecord, TaskRecord
from gateway.ledger import codec
from gateway.ledger.memory import MemoryLedger
from gateway.ledger.sqlite import _INSERT, SqliteLedger

OLD_COUNT = "SELECT state, COUNT(*) FROM tasks GROUP BY state"
TRIGGERS = ("tasks_count_insert", "tasks_count_update", "tasks_count_delete")
# The states of a ledger under retention: mostly finished tasks, a few live ones.
MIX = ([TaskState.COMPLETED] * 80 + [TaskState.FAILED] * 8 + [TaskState.CANCELED] * 4
       + [TaskState.WORKING] * 5 + [TaskState.INPUT_REQUIRED] * 2 + [TaskState.SUBMITTED])


def record(state: TaskState, observed_at: float) -> TaskRecord:
    """A task record of the size the gateway stores (ids, a terminal status, an artifact)."""
    status = {"state": state.value, "timestamp": "2026-11-29T20:45:38.476Z"} if state.is_terminal else None
    return TaskRecord(upstream="worker", task_id=str(uuid.uuid4()), context_id=str(uuid.uuid4()),
                      state=state, observed_at=observed_at, terminal_status=status,
                      artifacts={"result": ArtifactRecord(sealed=state.is_terminal, parts=1)},
                      card_etag='W/"5f2b"')


def fill(path: Path, n: int) -> dict[str, int]:
    """Insert ``n`` tasks into the ledger file at ``path`` (schema already created); returns
    the states inserted."""
    rng = random.Random(13)
    states: Counter[str] = Counter()

    def rows():
        now = time.time()
        for i in range(n):
            r = record(rng.choice(MIX), now - 7 * 86400 * i / n)
            states[r.state.value] += 1
            yield (1, r.state.value, int(r.terminal), r.observed_at, codec.encode(r), r.upstream,
                   r.task_id)

    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        conn.executemany(_INSERT, rows())
        conn.execute("COMMIT")
    return dict(states)


def old_count(ledger: SqliteLedger) -> Awaitable[list[tuple[str, int]]]:
    """The earlier ``count_by_state`` query, queued on the ledger's thread like any call."""
    return ledger._submit(lambda c: c.execute(OLD_COUNT).fetchall(), write=False)


async def latencies(call: Callable[[], Awaitable[object]], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        started = time.perf_counter()
        await call()
        out.append(time.perf_counter() - started)
    return out


async def put_pass(ledger: SqliteLedger, n: int, concurrency: int) -> tuple[float, float]:
    """``n`` tasks each inserted WORKING then updated to COMPLETED, spread over ``concurrency``
    callers: (puts per second, CPU seconds of this process per put: both threads)."""
    async def caller(count: int) -> None:
        for _ in range(count):
            working = record(TaskState.WORKING, time.time())
            await ledger.put(working, 0)
            await ledger.put(dataclasses.replace(working, state=TaskState.COMPLETED,
                                                 observed_at=time.time()), 1)

    shares = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(caller(k) for k in shares if k))
    return 2 * n / (time.perf_counter() - started), (time.process_time() - cpu) / (2 * n)


PutFigures = dict[tuple[str, int], tuple[float, float]]


async def put_rates(tmp: Path, n: int, rounds: int) -> tuple[PutFigures, dict[int, float]]:
    """(without/with triggers, concurrency) → median (puts/s, CPU s per put) over ``rounds``
    rounds, each running both on fresh files, in alternating order; and per concurrency the
    median over rounds of the extra CPU per put with the triggers, in percent (a paired
    figure: less sensitive to the load of the machine's other users than either median)."""
    seen: dict[tuple[str, int], list[tuple[float, float]]] = {}
    extra: dict[int, list[float]] = {1: [], 32: []}
    for round_no in range(rounds):
        variants = ("without", "with") if round_no % 2 == 0 else ("with", "without")
        this_round: dict[tuple[str, int], float] = {}
        for variant in variants:
            path = tmp / f"puts-{variant}-{round_no}.db"
            ledger = SqliteLedger(path)
            await ledger.open()
            if variant == "without":
                with closing(sqlite3.connect(path)) as conn:
                    for name in TRIGGERS:
                        conn.execute(f"DROP TRIGGER {name}")
            for concurrency in (1, 32):
                rate, cpu = await put_pass(ledger, n, concurrency)
                seen.setdefault((variant, concurrency), []).append((rate, cpu))
                this_round[(variant, concurrency)] = cpu
            await ledger.close()
        for concurrency in extra:
            extra[concurrency].append(
                (this_round[("with", concurrency)] / this_round[("without", concurrency)] - 1) * 100)
    figures = {key: (statistics.median(r for r, _ in values), statistics.median(c for _, c in values))
               for key, values in seen.items()}
    return figures, {c: statistics.median(v) for c, v in extra.items()}


async def under_scraping(ledger: SqliteLedger, scrape: Callable[[], Awaitable[object]],
                         scrapers: int, seconds: float) -> tuple[list[float], int]:
    """SendMessage-like latencies (get + put of a new task) while ``scrapers`` loops call
    ``scrape``; returns them and the number of scrapes done."""
    running = True

    async def scraper() -> int:
        done = 0
        while running:
            await scrape()
            done += 1
        return done

    loops = [asyncio.create_task(scraper()) for _ in range(scrapers)]
    await asyncio.sleep(0.05)  # the scrapers are under way
    out: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(out) < 5:
        new = record(TaskState.SUBMITTED, time.time())
        started = time.perf_counter()
        await ledger.get(new.upstream, new.task_id)
        await ledger.put(new, 0)
        out.append(time.perf_counter() - started)
    running = False
    return out, sum(await asyncio.gather(*loops))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}" if seconds < 0.01 else f"{seconds * 1000:.1f}"


def p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * 0.99))]


async def memory_counts(n: int) -> tuple[float, float]:
    """(old, new) median seconds of one count over ``n`` records in the memory backend."""
    ledger = MemoryLedger(max_tasks=n)
    rng = random.Random(13)
    for _ in range(n):
        await ledger.put(record(rng.choice(MIX), 0.0), 0)

    async def old_count_memory() -> dict[str, int]:  # count_by_state before the kept counter
        return dict(Counter(s.record.state.value for s in ledger._records.values()))

    assert await old_count_memory() == await ledger.count_by_state()
    old = await latencies(old_count_memory, 20)
    new = await latencies(ledger.count_by_state, 2000)
    return statistics.median(old), statistics.median(new)


async def main_async(args: argparse.Namespace) -> list[str]:
    lines = [f"a2a-gateway {__version__} scrape benchmark, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"SQLite {sqlite3.sqlite_version}, {platform.platform()}",
             f"event loop: {type(asyncio.get_running_loop()).__module__.split('.')[0]}; load "
             f"average at start {os.getloadavg()[0]:.2f} (the machine is shared)", ""]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path = tmp / "big.db"
        ledger = SqliteLedger(path)
        await ledger.open()
        await ledger.close()
        started = time.perf_counter()
        states = fill(path, args.tasks)
        fill_s = time.perf_counter() - started
        size = sum(p.stat().st_size for p in tmp.glob("big.db*"))
        lines.append(f"SQLite ledger: {args.tasks} tasks filled in {fill_s:.1f} s "
                     f"({size / 2**20:.0f} MiB with WAL), {len(states)} states")
        ledger = SqliteLedger(path)
        await ledger.open()
        try:
            assert dict(await old_count(ledger)) == await ledger.count_by_state() == states
            old = await latencies(lambda: old_count(ledger), args.old_reps)
            new = await latencies(ledger.count_by_state, 2000)
            lines += ["", f"count_by_state on {args.tasks} tasks (through the ledger thread)",
                      f"{'query':<34} {'p50 ms':>9} {'max ms':>9} {'calls':>6}",
                      f"{'old: GROUP BY over tasks':<34} {ms(statistics.median(old)):>9} "
                      f"{ms(max(old)):>9} {len(old):>6}",
                      f"{'new: task_counts':<34} {ms(statistics.median(new)):>9} "
                      f"{ms(max(new)):>9} {len(new):>6}"]

            lines += ["", f"SendMessage-like latency (get + put of a new task, one client) on "
                          f"{args.tasks} tasks, {args.seconds:.0f} s per row",
                      f"{'scrapers':<34} {'p50 ms':>9} {'p99 ms':>9} {'msgs':>6} {'scrapes':>8}"]
            scenarios: list[tuple[str, Callable[[], Awaitable[object]], int]] = [
                ("none", ledger.count_by_state, 0),
                ("1 x old", lambda: old_count(ledger), 1),
                ("1 x new", ledger.count_by_state, 1),
                ("4 x old", lambda: old_count(ledger), 4),
                ("4 x new", ledger.count_by_state, 4),
            ]
            for label, scrape, scrapers in scenarios:
                lat, scrapes = await under_scraping(ledger, scrape, scrapers, args.seconds)
                lines.append(f"{label:<34} {ms(statistics.median(lat)):>9} {ms(p99(lat)):>9} "
                             f"{len(lat):>6} {scrapes:>8}")
            assert dict(await old_count(ledger)) == await ledger.count_by_state()
        finally:
            await ledger.close()

        figures, extra = await put_rates(tmp, args.puts, args.rounds)
        lines += ["", f"put on a fresh file, {args.puts} tasks x 2 puts (insert, transition) per "
                      f"pass, median of {args.rounds} rounds in alternating order; CPU: this "
                      "process, both threads",
                  f"{'schema':<34} {'puts/s 1':>9} {'cpu us':>7} {'puts/s 32':>10} {'cpu us':>7}"]
        for variant, label in (("without", "without triggers (old schema)"),
                               ("with", "with triggers (task_counts)")):
            (one, cpu_one), (many, cpu_many) = figures[(variant, 1)], figures[(variant, 32)]
            lines.append(f"{label:<34} {one:>9.0f} {cpu_one * 1e6:>7.1f} {many:>10.0f} "
                         f"{cpu_many * 1e6:>7.1f}")
        lines.append(f"{'triggers: extra CPU per put':<34} {'':>9} {extra[1]:>6.1f}% {'':>10} "
                     f"{extra[32]:>6.1f}%")

    old_mem, new_mem = await memory_counts(args.memory_tasks)
    lines += ["", f"memory backend, {args.memory_tasks} tasks: count_by_state p50 "
                  f"old (Counter over every record, on the event loop) {old_mem * 1e6:.0f} us, "
                  f"new (kept counter) {new_mem * 1e6:.1f} us"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300_000, help="tasks in the SQLite ledger")
    parser.add_argument("--seconds", type=float, default=4.0,
                        help="seconds per scraping scenario (default 4)")
    parser.add_argument("--puts", type=int, default=2_000,
                        help="tasks per put pass (default 2000, 2 puts each)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of put passes (default 9)")
    parser.add_argument("--old-reps", type=int, default=10, help="timed old GROUP BY queries")
    parser.add_argument("--memory-tasks", type=int, default=100_000)
    args = parser.parse_args()
    run_and_save(main_async(args), "scrape")


if __name__ == "__main__":
    main()
