"""Benchmark harness: the gateway measured side by side with a direct connection and with nginx.

    python -m bench.run [--quick] [--runs N] [--duration S] [--install-tools] [--granian]
                        [--sse-concurrency N] [--profile] [--calibrate] [--sdk-worker]

One command, one machine, everything on 127.0.0.1. A canned A2A v1.0 worker
(:mod:`bench.canned_worker`) answers at once; the same workloads go to each target
(:mod:`bench.targets`):

* ``direct``    — client → canned worker;
* ``nginx``     — client → nginx (1 worker process, upstream keepalive pool,
  ``proxy_http_version 1.1``, ``proxy_buffering off``) → canned worker;
* ``gw-memory`` / ``gw-sqlite`` / ``gw-redis`` — client → ``python -m gateway serve`` (one
  uvicorn worker; ledger ``memory``, a fresh ``sqlite:///…`` file, a private ``redis-server``)
  → canned worker;
* ``gw-sqlite-x2`` — the same with ``--workers 2`` (two gateway processes on one socket, one
  SQLite file; CPU figures count both and the supervisor);
* ``gw-memory-granian`` (``--granian``) — the memory gateway's app under granian, a Rust ASGI
  server (:mod:`bench.granian_app`).

Workloads (:mod:`bench.load`; each figure is the median over ``--runs`` runs; every ratio and
difference is taken within one run, then the median of those is reported):

* saturation throughput, ``wrk`` with a Lua script POSTing a ~1 KB ``SendMessage`` and a
  ``GetTask`` (non-2xx responses and socket errors are counted and reported);
* added latency at a fixed rate (``SendMessage``, default 200 req/s for 5 s) from a raw-asyncio
  client over a small keep-alive pool: p50 / p99 / p99.9 and gateway − direct in ms;
* SSE sequential, the mixed shape: ``SendStreamingMessage`` streams of 100 events (WORKING
  status and artifact updates in turn) one after the other on one connection, read
  incrementally; events/s through one target and per-event added latency;
* SSE append-chunk, concurrent (the goal workload of issue #16): streams of 100 events (a
  Task, one artifact in 98 ``append`` chunks, COMPLETED) over ``--sse-concurrency`` (16)
  keep-alive connections at once, each running its share of ``--sse-concurrent-streams``
  one after the other; events/s and CPU per event of the target's processes;
* pure engine: ``gateway.invariants.engine.check_payload`` observations/s on one core over
  pre-built task / statusUpdate / artifactUpdate payloads with a dict ledger (:mod:`bench.engine`).

Gateway ``/metrics`` (on each gateway's admin listener) are scraped after each run
(divergences, non-ok outcomes, upstream and ledger errors are reported), the gateway logs
are scanned for warnings and errors, and each gateway process's memory is read from
``/proc`` when it is ready and after the load (:mod:`bench.measure`).
nginx and wrk are used when installed; ``--install-tools`` installs missing ones with
``apt-get install -y nginx wrk`` (and granian with pip, with ``--granian``). Without it a
missing tool is a note in the output and what needs it is skipped; the Redis target is
skipped with a note when ``redis-server`` is missing. The client (wrk, this process) shares the
machine's cores with the servers; that is stated in the output. ``--profile`` additionally
samples the memory gateway with ``py-spy`` (the ``bench`` extra) under SendMessage saturation
and under SSE, and summarizes the top frames (:mod:`bench.profile`).

Output (:mod:`bench.report`): one table with the goals of issues #5 and #16, printed and saved
with machine info to ``bench/results/run-<ts>.txt``, raw numbers to
``bench/results/run-<ts>.json``. No timing assertions: goals are reported as met or not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.measure import measure_run, measure_sdk_run
from bench.profile import profile
from bench.report import report
from bench.targets import (CALIBRATION, HOST, PY, RESULTS, ROOT, Env, Proc, Settings, child_env, discover_tools,
                           free_port, granian_available, machine_info, start_nginx, wait_port)


def _start_calibration(env: Env, stack: contextlib.ExitStack) -> None:
    cal_env = {**child_env(), "CALIBRATION_UPSTREAM_PORT": str(env.worker_port)}
    for t, app in CALIBRATION.items():
        port = free_port()
        proc = Proc(t, [PY, "-m", "uvicorn", f"bench.calibration_apps:{app}", "--host", HOST,
                        "--port", str(port), "--log-level", "warning", "--no-access-log"],
                    env.tmp / f"{t}.log", cwd=ROOT, env=cal_env)
        stack.callback(proc.stop)
        env.calibration[t] = (port, proc)
    for port, proc in env.calibration.values():
        wait_port(port, proc)


async def _measure(env: Env, stack: contextlib.ExitStack) -> list[dict[str, Any]]:
    """Start the canned worker, nginx and the calibration apps; every run."""
    s = env.settings
    env.worker = Proc("canned-worker", [PY, "-m", "bench.canned_worker", "--port", str(env.worker_port)],
                      env.tmp / "worker.log", cwd=ROOT, env=child_env())
    stack.callback(env.worker.stop)
    wait_port(env.worker_port, env.worker)
    if env.nginx_bin:
        env.nginx_port, env.nginx = start_nginx(env.nginx_bin, env.tmp, env.worker_port)
        stack.callback(env.nginx.stop)
    if s.calibrate:
        _start_calibration(env, stack)
    runs: list[dict[str, Any]] = []
    for r in range(s.runs):
        print(f"run {r + 1}/{s.runs} ...", flush=True)
        runs.append(await measure_run(env, r))
        if s.sdk_worker:
            t_sdk = time.monotonic()
            runs[-1]["sdk"] = await measure_sdk_run(env, r)
            runs[-1]["sdk"]["wall_seconds"] = time.monotonic() - t_sdk
    return runs


async def main_async(s: Settings) -> int:
    notes: list[str] = []
    tools = discover_tools(s.install_tools, notes)
    granian = s.granian and granian_available(s.install_tools, notes)
    machine = machine_info()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(exist_ok=True)
    profile_text = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="a2a-bench-") as tmpname, contextlib.ExitStack() as stack:
        env = Env(s, Path(tmpname), free_port(), None, tools["wrk"], tools["redis-server"], notes,
                  nginx_bin=tools["nginx"], granian=granian)
        runs = await _measure(env, stack)
        if s.profile:
            print("profiling gw-memory with py-spy ...", flush=True)
            profile_text = await profile(env, stamp)
    elapsed = time.monotonic() - started
    sdk_wall = sum((r.get("sdk") or {}).get("wall_seconds", 0) for r in runs)
    notes.append(f"wall time {elapsed:.0f}s" + (f" (of which --sdk-worker {sdk_wall:.0f}s)" if sdk_wall else ""))
    if not runs:
        text = f"a2a-gateway {machine['gateway']} ({machine['git']}) — {machine['date']}\n{profile_text or ''}"
        print(text)
        (RESULTS / f"profile-{stamp}.txt").write_text(text + "\n")
        print(f"\nsaved to bench/results/profile-{stamp}.txt")
        return 0
    text, doc = report(runs, s, machine, notes, profile_text)
    print()
    print(text)
    (RESULTS / f"run-{stamp}.txt").write_text(text + "\n")
    (RESULTS / f"run-{stamp}.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2, default=str))
    print(f"\nsaved to bench/results/run-{stamp}.txt and .json")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 run, short durations")
    parser.add_argument("--runs", type=int, help="runs (default 3; --quick: 1)")
    parser.add_argument("--duration", type=float, help="wrk seconds per target and workload (default 8; --quick: 2)")
    parser.add_argument("--rate", type=float, default=200, help="fixed-rate requests/s (default 200)")
    parser.add_argument("--rate-seconds", type=float, help="fixed-rate seconds (default 5; --quick: 2)")
    parser.add_argument("--sse-streams", type=int,
                        help="sequential mixed-shape streams per target (default 200; --quick: 30)")
    parser.add_argument("--sse-concurrency", type=int, default=16,
                        help="concurrent keep-alive connections of the append-chunk SSE workload (default 16)")
    parser.add_argument("--sse-concurrent-streams", type=int,
                        help="append-chunk streams per target, across those connections (default 320; --quick: 64)")
    parser.add_argument("--wrk-threads", type=int, default=1)
    parser.add_argument("--wrk-connections", type=int, default=32)
    parser.add_argument("--install-tools", action="store_true",
                        help="apt-get install -y nginx wrk when missing (and pip install granian with --granian); "
                        "without it a missing tool skips what needs it, with a note")
    parser.add_argument("--granian", action="store_true",
                        help="also measure the memory gateway under granian (gw-memory-granian), "
                        "through every workload")
    parser.add_argument("--profile", action="store_true", help="also profile gw-memory with py-spy")
    parser.add_argument("--calibrate", action="store_true",
                        help="also measure bare uvicorn, a minimal httpx proxy and a minimal raw-asyncio "
                        "proxy (SendMessage saturation and fixed rate; adds ~50 s per run)")
    parser.add_argument("--sdk-worker", action="store_true",
                        help="also measure SendMessage saturation and SSE with the real a2a-sdk demo worker "
                        "(demo/worker.py) as the upstream: direct, nginx, gw-memory, gw-sqlite")
    return parser


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    q = args.quick
    s = Settings(
        runs=args.runs if args.runs is not None else (1 if q else 3),
        duration=args.duration or (2 if q else 8), warmup=0.0 if q else 1.0,
        rate=args.rate, rate_seconds=args.rate_seconds or (2 if q else 5),
        sse_streams=args.sse_streams or (30 if q else 200), engine_seconds=0.5 if q else 2.0,
        wrk_threads=args.wrk_threads, wrk_connections=args.wrk_connections, quick=q,
        profile=args.profile, profile_seconds=5 if q else 10, calibrate=args.calibrate,
        sdk_worker=args.sdk_worker, sse_concurrency=args.sse_concurrency,
        sse_concurrent_streams=args.sse_concurrent_streams or (64 if q else 320),
        install_tools=args.install_tools, granian=args.granian,
    )
    if s.runs < 0 or s.duration <= 0 or s.rate <= 0 or s.sse_concurrency < 1:
        parser.error("runs >= 0, duration > 0, rate > 0 and sse-concurrency >= 1")
    try:
        import uvloop
    except ImportError:
        raise SystemExit(asyncio.run(main_async(s))) from None
    raise SystemExit(uvloop.run(main_async(s)))


if __name__ == "__main__":
    main()
