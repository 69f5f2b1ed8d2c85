"""Ledger benchmark: transitions per second and bytes per tracked task, for each backend.

    python -m bench.ledger_bench [--tasks N] [--concurrency C] [--memory-tasks N]
                                 [--backends memory,sqlite,redis]
                                 [--events N] [--events-per-stream N]

For each backend, N tasks each go WORKING → COMPLETED the way the proxy does it: ledger
``get``, engine ``check_payload``, ledger ``put`` (compare-and-set), so a "transition" is one
judged and stored event. "sequential" drives the tasks one after another (one operation in
flight: the per-operation latency); "concurrent" splits the same number of fresh tasks over C
asyncio tasks in one event loop (default 32, like the gateway benchmark's 32 connections), so C
operations are in flight at once. The event loop is uvloop when installed, as in the gateway.
Bytes per tracked task: memory — ``tracemalloc`` growth over
``--memory-tasks`` tasks (default 1 000 000; ids are allocated inside the measurement, as in
production); SQLite — database file size over N; Redis — ``used_memory`` growth over N
(a private ``redis-server`` on 127.0.0.1 is started and stopped; skipped when not installed).

The replay window (docs/resume.md §2): ``--events`` events (default 16 000) of 200-byte payloads
are appended in streams of ``--events-per-stream`` (default 500: under the per-task bound, so
nothing is trimmed), each stream one task and one lineage, with the default limits. "appends/s"
is ``append_event`` alone, "put+append/s" a ``put`` of the task's record before each append (as
on a token stream: the record moves, then the event is kept before it is forwarded); each one
at a time (the streams one after another) and concurrent (the streams spread over C asyncio
tasks). Bytes per event: memory — ``tracemalloc`` growth over an appends-only pass; SQLite —
growth of the database files over it; Redis — ``used_memory`` growth over it.
Prints the tables and writes them to ``bench/results/ledger-<date>.txt``. No timing assertions.
"""

from __future__ import annotations

from bench import run_and_save

import argparse
import asyncio
import dataclasses
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gateway import __version__
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.version import ProtocolVersion
from gateway.invariants import engine
from gateway.a2a.states import TaskState
from gateway.invariants.model import Clock, Exchange, StreamState, TaskRecord
from gateway.ledger import ledger_from_url
from gateway.ledger.base import TaskLedger

EX = Exchange("worker", Operation.STREAM, ProtocolVersion.V1_0, None)


def _events(task_id: str, context_id: str) -> tuple[dict[str, object], dict[str, object]]:
    working = {"task": {"id": task_id, "contextId": context_id, "status": {"state": "TASK_STATE_WORKING"}}}
    done = {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": {
        "state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-29T20:45:38.476Z"}}}
    return working, done


async def _transition(ledger: TaskLedger, result: dict[str, object], stream: StreamState) -> StreamState:
    task_id = engine.payload_task_id(result)
    assert task_id is not None
    stored = await ledger.get("worker", task_id)
    record = stored.record if stored is not None else None
    outcome = engine.check_payload(EX, stream, record, result, Clock(time.time()))
    if outcome.record is not None:
        await ledger.put(outcome.record, stored.version if stored is not None else 0)
    return outcome.stream or stream


async def _run_tasks(ledger: TaskLedger, n: int) -> float:
    """Drive ``n`` tasks through two transitions each; returns elapsed seconds."""
    started = time.perf_counter()
    for _ in range(n):
        working, done = _events(str(uuid.uuid4()), str(uuid.uuid4()))
        stream = await _transition(ledger, working, StreamState())
        await _transition(ledger, done, stream)
    return time.perf_counter() - started


async def _run_concurrent(ledger: TaskLedger, n: int, concurrency: int) -> float:
    """Drive ``n`` tasks through two transitions each from ``concurrency`` asyncio tasks at once;
    returns elapsed seconds."""
    async def worker(count: int) -> None:
        for _ in range(count):
            working, done = _events(str(uuid.uuid4()), str(uuid.uuid4()))
            stream = await _transition(ledger, working, StreamState())
            await _transition(ledger, done, stream)

    shares = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
    started = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in shares))
    return time.perf_counter() - started


async def memory_bytes_per_task(n: int) -> float:
    """``tracemalloc`` growth per tracked (completed) task in the memory backend."""
    ledger = ledger_from_url("memory", max_tasks=n + 1)
    await ledger.open()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    await _run_tasks(ledger, n)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / n


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _redis() -> Iterator[str | None]:
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.02)  # polling for readiness, bounded by the deadline
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


async def bench_backend(name: str, url: str, n: int, concurrency: int) -> tuple[float, float, float | None]:
    """(sequential and concurrent transitions per second, bytes per task or None) for one
    backend. The concurrent pass runs on a fresh ledger (another SQLite file, another Redis key
    prefix), so both start empty and the size is that of the sequential pass's N tasks."""
    ledger = ledger_from_url(url, max_tasks=n + 1)
    await ledger.open()
    used_before = None
    if name == "redis":
        import redis.asyncio as aioredis

        probe = aioredis.Redis.from_url(url)
        used_before = (await probe.info("memory"))["used_memory"]
    elapsed = await _run_tasks(ledger, n)
    per_task: float | None = None
    if name == "redis":
        per_task = ((await probe.info("memory"))["used_memory"] - used_before) / n
        await probe.aclose()
    await ledger.close()
    if name == "sqlite":
        path = Path(url.removeprefix("sqlite://"))
        size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
        per_task = size / n
    fresh = ledger_from_url(url.replace(".db", "-concurrent.db"), max_tasks=n + 1)
    if name == "redis":
        fresh.prefix = "concurrent"  # type: ignore[attr-defined]
    await fresh.open()
    concurrent = await _run_concurrent(fresh, n, concurrency)
    await fresh.close()
    return 2 * n / elapsed, 2 * n / concurrent, per_task


# -- the replay window ------------------------------------------------------------------------

#: A token-stream event as the exchange would keep it (about 200 bytes).
WINDOW_PAYLOAD = (b'{"artifactUpdate":{"taskId":"6db7f1c2-5d0e-4b1a-9a55-0c1f2e3d4b5a",'
                  b'"contextId":"c-1","artifact":{"artifactId":"a-1","parts":[{"text":"tok '
                  b'tok tok tok"}]},"append":true,"lastChunk":false},"kind":"x"}').ljust(200, b" ")


async def _window_stream(ledger: TaskLedger, events: int, with_put: bool) -> None:
    """One client stream of one new task: ``events`` appends (after a ``put`` each)."""
    task_id = str(uuid.uuid4())
    record = TaskRecord(upstream="worker", task_id=task_id, context_id="c-1",
                        state=TaskState.WORKING, observed_at=time.time())
    version = await ledger.put(record, 0) if with_put else 0
    lineage = None
    for _ in range(events):
        if with_put:
            version = await ledger.put(dataclasses.replace(record, observed_at=time.time()), version)
        _, lineage = await ledger.append_event("worker", task_id, lineage, WINDOW_PAYLOAD, time.time())


async def _window_pass(ledger: TaskLedger, n: int, per_stream: int, concurrency: int,
                       with_put: bool) -> float:
    """``n`` events in streams of ``per_stream``, the streams spread over ``concurrency``
    asyncio tasks (1: one after another); returns events per second."""
    streams = max(1, n // per_stream)
    shares = [streams // concurrency + (1 if i < streams % concurrency else 0) for i in range(concurrency)]

    async def worker(count: int) -> None:
        for _ in range(count):
            await _window_stream(ledger, per_stream, with_put)

    started = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in shares if k))
    return streams * per_stream / (time.perf_counter() - started)


async def bench_window(name: str, url: str, n: int, per_stream: int,
                       concurrency: int) -> tuple[list[float], float | None]:
    """([appends/s, concurrent, put+append/s, concurrent], bytes per event or None) for one
    backend; each pass on a fresh ledger (another SQLite file, another Redis key prefix)."""
    rates: list[float] = []
    per_event: float | None = None
    passes = [(1, False), (concurrency, False), (1, True), (concurrency, True)]
    for k, (conc, with_put) in enumerate(passes):
        target = url.replace(".db", f"-window{k}.db")
        ledger = ledger_from_url(target, max_tasks=n + 1)
        if name == "redis":
            ledger.prefix = f"window{k}"  # type: ignore[attr-defined]
        await ledger.open()
        probe = None
        if name == "redis" and k == 0:
            import redis.asyncio as aioredis

            probe = aioredis.Redis.from_url(url)
            used_before = (await probe.info("memory"))["used_memory"]
        rates.append(await _window_pass(ledger, n, per_stream, conc, with_put))
        if probe is not None:
            per_event = ((await probe.info("memory"))["used_memory"] - used_before) / n
            await probe.aclose()
        await ledger.close()
        if name == "sqlite" and k == 0:
            path = Path(target.removeprefix("sqlite://"))
            per_event = sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / n
    if name == "memory":
        ledger = ledger_from_url("memory", max_tasks=n + 1)
        await ledger.open()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        await _window_pass(ledger, n, per_stream, 1, False)
        per_event = (tracemalloc.get_traced_memory()[0] - before) / n
        tracemalloc.stop()
    return rates, per_event


async def main_async(args: argparse.Namespace) -> list[str]:
    lines = [f"a2a-gateway {__version__} ledger benchmark, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"{platform.platform()}",
             f"tasks per backend: {args.tasks} (2 judged transitions each); memory size over "
             f"{args.memory_tasks} tasks",
             f"event loop: {type(asyncio.get_running_loop()).__module__.split('.')[0]}; "
             f"concurrent: {args.concurrency} asyncio tasks", "",
             f"{'backend':<8} {'transitions/s':>14} {'concurrent/s':>13} {'bytes/task':>11}"]
    backends = args.backends.split(",")
    with tempfile.TemporaryDirectory() as tmp, _redis() as redis_url:
        for name in backends:
            if name == "memory":
                tps, ctps, _ = await bench_backend("memory", "memory", args.tasks, args.concurrency)
                per_task: float | None = await memory_bytes_per_task(args.memory_tasks)
            elif name == "sqlite":
                tps, ctps, per_task = await bench_backend("sqlite", f"sqlite:///{tmp}/ledger.db",
                                                          args.tasks, args.concurrency)
            elif name == "redis":
                if redis_url is None:
                    lines.append("redis    skipped: redis-server not installed")
                    continue
                tps, ctps, per_task = await bench_backend("redis", redis_url, args.tasks, args.concurrency)
            else:
                raise SystemExit(f"unknown backend {name}")
            size = f"{per_task:>11.0f}" if per_task is not None else f"{'-':>11}"
            lines.append(f"{name:<8} {tps:>14.0f} {ctps:>13.0f} {size}")
        lines += ["", f"replay window: {args.events} events per pass in streams of "
                      f"{args.events_per_stream}, {len(WINDOW_PAYLOAD)}-byte payloads, default limits; "
                      f"concurrent: {args.concurrency} asyncio tasks",
                  f"{'backend':<8} {'appends/s':>10} {'concurrent/s':>13} {'put+append/s':>13} "
                  f"{'concurrent/s':>13} {'us/append':>10} {'bytes/event':>12}"]
        for name in backends:
            url = {"memory": "memory", "sqlite": f"sqlite:///{tmp}/ledger.db", "redis": redis_url}[name]
            if url is None:
                lines.append("redis    skipped: redis-server not installed")
                continue
            rates, per_event = await bench_window(name, url, args.events, args.events_per_stream,
                                                  args.concurrency)
            size = f"{per_event:>12.0f}" if per_event is not None else f"{'-':>12}"
            lines.append(f"{name:<8} {rates[0]:>10.0f} {rates[1]:>13.0f} {rates[2]:>13.0f} "
                         f"{rates[3]:>13.0f} {1e6 / rates[0]:>10.1f} {size}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per backend (default 20000)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="asyncio tasks in flight for the concurrent figure (default 32)")
    parser.add_argument("--memory-tasks", type=int, default=1_000_000,
                        help="tasks for the memory size measurement (default 1000000)")
    parser.add_argument("--backends", default="memory,sqlite,redis")
    parser.add_argument("--events", type=int, default=16_000,
                        help="replay-window events per pass (default 16000)")
    parser.add_argument("--events-per-stream", type=int, default=500,
                        help="events per stream (task) in the window passes (default 500)")
    args = parser.parse_args()
    run_and_save(main_async(args), "ledger")


if __name__ == "__main__":
    main()
