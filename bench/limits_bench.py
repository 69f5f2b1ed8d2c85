"""Fair shares under load (issue #32, docs/limits.md): a caller held at its limit leaves another
caller's added latency where it was.

    python -m bench.limits_bench [--rate 100] [--noisy-rate 500] [--limit 50] [--seconds 5]
                                 [--runs 3] [--no-contrast]

One canned worker (:mod:`bench.canned_worker`) behind one gateway process (``memory`` ledger)
whose config limits the caller ``Authorization: Bearer noisy`` to ``--limit`` requests per
second (burst the same); the quiet caller (``Bearer quiet``) has no limit. Each run has three
phases, one after the other:

* **direct** — the quiet caller's ``SendMessage`` at ``--rate`` req/s straight to the worker;
* **alone** — the same through the gateway;
* **noisy** — the same through the gateway while the noisy caller sends ``--noisy-rate``
  req/s (by default ten times its limit: most of its requests are answered HTTP 429).

Reported: the quiet caller's p50 / p99 in each phase, its added latency (gateway − direct) alone
and beside the noisy caller, and their ratio (1.0: unchanged), taken within each run, with the
median over ``--runs``; the noisy caller's answers by status. For contrast (unless
``--no-contrast``), one run through a second gateway without the limit, where every noisy
request reaches the worker. The client, worker and gateway share the machine's cores (stated in
the output); no timing assertion anywhere. Saved to ``bench/results/limits-<ts>.txt``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import run_and_save
from bench.load import SEND_BODY, Conn, check_send, pct, with_id
from bench.targets import HOST, PY, ROOT, Proc, child_env, free_port, wait_port, wait_ready
from gateway import __version__


def request(port: int, body: bytes, caller: str) -> bytes:
    return (f"POST / HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
            f"A2A-Version: 1.0\r\nAuthorization: {caller}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


async def fixed_rate(port: int, caller: str, rate: float, seconds: float, pool_size: int = 8,
                     check: bool = True) -> dict[str, Any]:
    """``SendMessage`` on a fixed schedule as ``caller``; latency from the request's write,
    answers counted by status."""
    n = int(rate * seconds)
    pool: asyncio.Queue[Conn] = asyncio.Queue()
    conns = [Conn(port) for _ in range(pool_size)]
    for c in conns:
        await c._ensure()
        pool.put_nowait(c)
    lat: list[float] = []
    statuses: collections.Counter[str] = collections.Counter()

    async def one(i: int) -> None:
        conn = await pool.get()
        try:
            t0 = time.perf_counter()
            status, body = await asyncio.wait_for(conn.request(request(port, with_id(SEND_BODY, 1000 + i), caller)), 10)
            lat.append(time.perf_counter() - t0)
            problem = check_send(status, body, 1000 + i) if check and status == 200 else None
            statuses[problem[:60] if problem else str(status)] += 1
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            statuses[type(exc).__name__] += 1
            conn.close()
        finally:
            pool.put_nowait(conn)

    loop = asyncio.get_running_loop()
    tasks = []
    start = loop.time() + 0.02
    try:
        for i in range(n):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule, not a synchronization
            tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    finally:
        for c in conns:
            c.close()
    ms = [x * 1000 for x in lat]
    return {"p50": pct(ms, 50), "p99": pct(ms, 99), "statuses": dict(statuses)}


def config(path: Path, worker_port: int, port: int, admin_port: int, limit: float | None) -> Path:
    limits = "" if limit is None else f"""
limits:
  callers:
    "Bearer noisy": {{requests_per_second: {limit}, burst: {max(1, int(limit))}}}
"""
    path.write_text(f"""
listen: {{host: {HOST}, port: {port}}}
admin: {{host: {HOST}, port: {admin_port}}}
upstreams: [{{name: worker, url: "http://{HOST}:{worker_port}/", prefix: /}}]
ledger: {{url: memory}}
log: {{level: error}}
""" + limits)
    return path


def _gateway(rundir: Path, name: str, worker_port: int, limit: float | None, stack: contextlib.ExitStack) -> int:
    port, admin_port = free_port(), free_port()
    cfg = config(rundir / f"{name}.yaml", worker_port, port, admin_port, limit)
    gw = Proc(name, [PY, "-m", "gateway", "serve", "--config", str(cfg)], rundir / f"{name}.log",
              cwd=ROOT, env=child_env())
    stack.callback(gw.stop)
    wait_ready(f"http://{HOST}:{admin_port}/readyz", gw)
    return port


async def one_run(args: argparse.Namespace, worker_port: int, port: int) -> dict[str, Any]:
    """direct, alone, then quiet beside noisy: one run's figures and its two ratios."""
    direct = await fixed_rate(worker_port, "Bearer quiet", args.rate, args.seconds)
    alone = await fixed_rate(port, "Bearer quiet", args.rate, args.seconds)
    quiet, noisy = await asyncio.gather(
        fixed_rate(port, "Bearer quiet", args.rate, args.seconds),
        fixed_rate(port, "Bearer noisy", args.noisy_rate, args.seconds, pool_size=16))
    out: dict[str, Any] = {"direct": direct, "alone": alone, "quiet": quiet, "noisy": noisy}
    for q in ("p50", "p99"):
        before, after = alone[q] - direct[q], quiet[q] - direct[q]
        out[f"added_{q}"] = (before, after)
        out[f"ratio_{q}"] = after / before if before > 0 else float("nan")
    return out


async def main_async(args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="a2a-gw-limits-") as tmp, contextlib.ExitStack() as stack:
        rundir = Path(tmp)
        worker_port = free_port()
        worker = Proc("worker", [PY, "-m", "bench.canned_worker", "--port", str(worker_port)],
                      rundir / "worker.log", cwd=ROOT, env=child_env())
        stack.callback(worker.stop)
        wait_port(worker_port, worker)
        port = _gateway(rundir, "gateway", worker_port, args.limit, stack)
        await fixed_rate(port, "Bearer quiet", args.rate, 1.0)  # warm-up, not reported
        runs = [await one_run(args, worker_port, port) for _ in range(args.runs)]
        contrast = None
        if args.contrast:  # the same noisy caller through a gateway without the limit
            open_port = _gateway(rundir, "gateway-unlimited", worker_port, None, stack)
            await fixed_rate(open_port, "Bearer quiet", args.rate, 1.0)
            contrast = await one_run(args, worker_port, open_port)
    lines = [f"a2a-gateway {__version__} · limits bench (issue #32) · {time.strftime('%Y-%m-%d %H:%M:%S')}",
             f"cores: {os.cpu_count()} shared by the client, the worker and the gateway (one process, memory ledger)",
             f"quiet caller: SendMessage at {args.rate:g} req/s for {args.seconds:g} s, no limit; "
             f"noisy caller: {args.noisy_rate:g} req/s against its limit of {args.limit:g} req/s; "
             f"{args.runs} run(s), each: direct, gateway alone, gateway beside the noisy caller",
             "",
             f"{'run / phase':<34}{'p50 ms':>9}{'p99 ms':>9}  answers"]
    for n, run in enumerate(runs, 1):
        for key, label in (("direct", "direct (quiet)"), ("alone", "gateway, quiet alone"),
                           ("quiet", "gateway, quiet + noisy"), ("noisy", "gateway, the noisy caller")):
            r = run[key]
            lines.append(f"{f'{n} {label}':<34}{r['p50']:>9.2f}{r['p99']:>9.2f}  {r['statuses']}")
    lines.append("")
    for q in ("p50", "p99"):
        ratios = [run[f"ratio_{q}"] for run in runs]
        each = ", ".join(f"{run['added_' + q][0]:.2f} -> {run['added_' + q][1]:.2f} ms" for run in runs)
        lines.append(f"quiet caller's added latency {q} (alone -> beside the limited noisy caller): {each}; "
                     f"ratio median {statistics.median(ratios):.2f} (each run: "
                     f"{', '.join(f'{r:.2f}' for r in ratios)})")
    noisy = runs[-1]["noisy"]["statuses"]
    lines.append(f"noisy caller (last run): {noisy.get('429', 0)} of {sum(noisy.values())} answered 429 "
                 f"(limit {args.limit:g}/s over {args.seconds:g} s)")
    if contrast is not None:
        lines += ["", "contrast, the same load through a gateway without the limit:",
                  f"{'gateway, quiet alone':<34}{contrast['alone']['p50']:>9.2f}{contrast['alone']['p99']:>9.2f}",
                  f"{'gateway, quiet + noisy':<34}{contrast['quiet']['p50']:>9.2f}{contrast['quiet']['p99']:>9.2f}",
                  f"{'gateway, the noisy caller':<34}{contrast['noisy']['p50']:>9.2f}{contrast['noisy']['p99']:>9.2f}"
                  f"  {contrast['noisy']['statuses']}",
                  f"quiet caller's added latency ratio: p50 {contrast['ratio_p50']:.2f}, p99 {contrast['ratio_p99']:.2f}"]
    lines += ["", "A ratio near 1.0 means the quiet caller's added latency stayed where it was. On a shared "
              "2-core machine a ratio below 1 is noise (a busier event loop wakes sooner), not a gain."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="the quiet caller's requests per second")
    parser.add_argument("--noisy-rate", type=float, default=500.0, help="the noisy caller's requests per second")
    parser.add_argument("--limit", type=float, default=50.0, help="the noisy caller's limit, requests per second")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--runs", type=int, default=3, help="runs; each ratio is taken within one run")
    parser.add_argument("--no-contrast", dest="contrast", action="store_false",
                        help="skip the run through a gateway without the limit")
    run_and_save(main_async(parser.parse_args()), "limits")


if __name__ == "__main__":
    main()
