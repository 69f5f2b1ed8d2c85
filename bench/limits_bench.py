"""Fair shares under load (issue #32, docs/limits.md): a caller held at its limit leaves another
caller's added latency where it was.

    python -m bench.limits_bench [--rate 100] [--noisy-rate 500] [--limit 50] [--seconds 5]

One canned worker (:mod:`bench.canned_worker`) behind one gateway process (``memory`` ledger)
whose config limits the caller ``Authorization: Bearer noisy`` to ``--limit`` requests per
second (burst the same); the quiet caller (``Bearer quiet``) has no limit. Three phases, one
after the other, in one run:

* **direct** — the quiet caller's ``SendMessage`` at ``--rate`` req/s straight to the worker;
* **alone** — the same through the gateway;
* **noisy** — the same through the gateway while the noisy caller sends ``--noisy-rate``
  req/s (by default ten times its limit: most of its requests are answered HTTP 429).

Reported: the quiet caller's p50 / p99 in each phase, its added latency (gateway − direct) alone
and beside the noisy caller, and their ratio (1.0: unchanged); the noisy caller's answers by
status. The client, worker and gateway share the machine's cores (stated in the output); no
timing assertion anywhere. Saved to ``bench/results/limits-<ts>.txt``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
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


def config(path: Path, worker_port: int, port: int, admin_port: int, limit: float) -> Path:
    path.write_text(f"""
listen: {{host: {HOST}, port: {port}}}
admin: {{host: {HOST}, port: {admin_port}}}
upstreams: [{{name: worker, url: "http://{HOST}:{worker_port}/", prefix: /}}]
ledger: {{url: memory}}
log: {{level: error}}
limits:
  callers:
    "Bearer noisy": {{requests_per_second: {limit}, burst: {max(1, int(limit))}}}
""")
    return path


async def main_async(args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="a2a-gw-limits-") as tmp, contextlib.ExitStack() as stack:
        rundir = Path(tmp)
        worker_port, port, admin_port = free_port(), free_port(), free_port()
        worker = Proc("worker", [PY, "-m", "bench.canned_worker", "--port", str(worker_port)],
                      rundir / "worker.log", cwd=ROOT, env=child_env())
        stack.callback(worker.stop)
        wait_port(worker_port, worker)
        cfg = config(rundir / "gateway.yaml", worker_port, port, admin_port, args.limit)
        gw = Proc("gateway", [PY, "-m", "gateway", "serve", "--config", str(cfg)], rundir / "gateway.log",
                  cwd=ROOT, env=child_env())
        stack.callback(gw.stop)
        wait_ready(f"http://{HOST}:{admin_port}/readyz", gw)
        await fixed_rate(port, "Bearer quiet", args.rate, 1.0)  # warm-up, not reported
        direct = await fixed_rate(worker_port, "Bearer quiet", args.rate, args.seconds)
        alone = await fixed_rate(port, "Bearer quiet", args.rate, args.seconds)
        quiet, noisy = await asyncio.gather(
            fixed_rate(port, "Bearer quiet", args.rate, args.seconds),
            fixed_rate(port, "Bearer noisy", args.noisy_rate, args.seconds, pool_size=16))
    added = {"p50": (alone["p50"] - direct["p50"], quiet["p50"] - direct["p50"]),
             "p99": (alone["p99"] - direct["p99"], quiet["p99"] - direct["p99"])}
    lines = [f"a2a-gateway {__version__} · limits bench (issue #32) · {time.strftime('%Y-%m-%d %H:%M:%S')}",
             f"cores: {os.cpu_count()} shared by the client, the worker and the gateway (one process, memory ledger)",
             f"quiet caller: SendMessage at {args.rate:g} req/s for {args.seconds:g} s, no limit; "
             f"noisy caller: {args.noisy_rate:g} req/s against its limit of {args.limit:g} req/s",
             "",
             f"{'phase':<28}{'p50 ms':>9}{'p99 ms':>9}  answers",
             f"{'direct (quiet)':<28}{direct['p50']:>9.2f}{direct['p99']:>9.2f}  {direct['statuses']}",
             f"{'gateway, quiet alone':<28}{alone['p50']:>9.2f}{alone['p99']:>9.2f}  {alone['statuses']}",
             f"{'gateway, quiet + noisy':<28}{quiet['p50']:>9.2f}{quiet['p99']:>9.2f}  {quiet['statuses']}",
             f"{'gateway, the noisy caller':<28}{noisy['p50']:>9.2f}{noisy['p99']:>9.2f}  {noisy['statuses']}",
             ""]
    for q in ("p50", "p99"):
        before, after = added[q]
        ratio = after / before if before > 0 else float("nan")
        lines.append(f"quiet caller's added latency {q}: alone {before:.2f} ms, beside the noisy caller "
                     f"{after:.2f} ms, ratio {ratio:.2f}")
    limited = noisy["statuses"].get("429", 0)
    lines.append(f"noisy caller: {limited} of {sum(noisy['statuses'].values())} answered 429 "
                 f"(limit {args.limit:g}/s over {args.seconds:g} s)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="the quiet caller's requests per second")
    parser.add_argument("--noisy-rate", type=float, default=500.0, help="the noisy caller's requests per second")
    parser.add_argument("--limit", type=float, default=50.0, help="the noisy caller's limit, requests per second")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    run_and_save(main_async(parser.parse_args()), "limits")


if __name__ == "__main__":
    main()
