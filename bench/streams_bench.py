"""Many long-lived streams at once (issue #17): N concurrent paced SSE streams through one
gateway process, beside nginx with the same streams.

    python -m bench.streams_bench [--streams 1000,5000] [--events 40] [--interval 0.5]
                                  [--targets nginx,gw-memory,gw-sqlite] [--ramp 500]

A paced worker (:class:`PacedWorker`, the canned worker of :mod:`bench.canned_worker` in its
own process, answering ``SendStreamingMessage`` with ``--events`` events ``--interval``
seconds apart: a Task WORKING, statusUpdates WORKING, a statusUpdate COMPLETED; each event
carries the worker's send time in ``metadata.sentAt``) serves every target:

* ``nginx`` — 1 worker process, ``proxy_buffering off``, ``worker_connections`` sized for N;
* ``gw-memory`` / ``gw-sqlite`` — ``python -m gateway serve`` (one process, the default
  config: the replay window on, upstream pool ``upstreams[].pool.max_connections`` 5 000)
  with the ``memory`` ledger or a fresh SQLite file.

For each target and N, this process (the client, raw asyncio on uvloop) opens N keep-alive
connections — ``--ramp`` new ones at a time, each batch once the previous one's streams have
their first event, so the listen backlog is never the bound — and posts one
``SendStreamingMessage`` on each. Reported:

* **completed** — streams that got HTTP 200, all ``--events`` events and the end of the body
  (failed ones by status or error);
* **RSS per open stream** — (the target's RSS when the most streams were open at once, sampled
  every 0.5 s − its RSS before the first) / the streams open then, in kB (nginx: master and
  worker processes together); "open at peak" says how many that was (fewer than N when the
  first streams end before the last ones open: the target could not keep up);
* **descriptors per stream** — the same for its open descriptors (``/proc/<pid>/fd``);
* **event delay p50 / p99** — the time from the worker's write of an event to this client's
  read of it, in ms, over every event of every stream (a loaded 2-core machine shows its
  queueing here first).

The client, the worker and the target share the machine's cores (stated in the output). Each
target and N is bounded in time: the streams' own length plus 60 s, then whatever is still
open is counted as not completed. This process raises its own soft ``RLIMIT_NOFILE`` to the
hard limit (its children — the worker, nginx, the gateway — inherit it); the gateway raises its
own at start anyway. Prints one table and saves it to ``bench/results/streams-<ts>.txt``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import run_and_save
from bench.canned_worker import ID_RE, METHOD_RE, SSE_HEAD, TS, Worker, serve_until_signal
from bench.targets import HOST, PY, ROOT, Proc, child_env, free_port, nginx_conf, wait_port, wait_ready
from gateway import __version__

SENT_RE = re.compile(rb'"sentAt":([0-9.]+)')


# --------------------------------------------------------------------------- the paced worker


class PacedWorker(Worker):
    """The canned worker with paced streams: ``events`` events, ``interval`` seconds apart,
    each stamped with its send time (``time.time()``)."""

    def __init__(self, host: str, port: int, events: int, interval: float) -> None:
        super().__init__(host, port)
        self.events = events
        self.interval = interval
        self.streams: set[asyncio.Task[None]] = set()

    def respond(self, body: bytes, writer: asyncio.StreamWriter) -> None:
        m = METHOD_RE.search(body)
        if not m or m.group(1) != b"SendStreamingMessage":
            super().respond(body, writer)
            return
        m = ID_RE.search(body)
        self.n += 1
        task = asyncio.ensure_future(self._stream(m.group(1) if m else b"null", self.n, writer))
        self.streams.add(task)
        task.add_done_callback(self.streams.discard)

    async def _stream(self, rid: bytes, n: int, writer: asyncio.StreamWriter) -> None:
        # Requests on one connection are sequential (the client waits for the stream's end),
        # so the connection's reader does not read the next request before this one is over.
        tid = b"t-paced-%d" % n
        ids = b'"taskId":"' + tid + b'","contextId":"c-paced-%d"' % n
        head = b'data: {"jsonrpc":"2.0","id":' + rid + b',"result":'
        writer.write(SSE_HEAD)
        try:
            for k in range(self.events):
                stamp = b'"metadata":{"sentAt":%.6f}' % time.time()
                if k == 0:
                    result = (b'{"task":{"id":"' + tid + b'","contextId":"c-paced-%d","status":{"state":'
                              b'"TASK_STATE_WORKING","timestamp":"' % n + TS + b'"},' + stamp + b"}}")
                else:
                    state = b"TASK_STATE_COMPLETED" if k == self.events - 1 else b"TASK_STATE_WORKING"
                    result = (b'{"statusUpdate":{' + ids + b',"status":{"state":"' + state
                              + b'","timestamp":"' + TS + b'"},' + stamp + b"}}")
                event = head + result + b"}\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                if k < self.events - 1:
                    await asyncio.sleep(self.interval)
            writer.write(b"0\r\n\r\n")
        except ConnectionError:
            writer.close()


async def serve_worker(port: int, events: int, interval: float) -> None:
    await serve_until_signal(PacedWorker(HOST, port, events, interval).handle, HOST, port, backlog=8192)


# --------------------------------------------------------------------------- the client


def stream_request(port: int, i: int) -> bytes:
    body = (b'{"jsonrpc":"2.0","id":%d,"method":"SendStreamingMessage","params":{"message":'
            b'{"messageId":"m-%d","role":"ROLE_USER","parts":[{"text":"stream"}]}}}' % (i, i))
    return (b"POST / HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            b"Accept: text/event-stream\r\nA2A-Version: 1.0\r\nContent-Length: %d\r\n\r\n"
            % (HOST.encode(), port, len(body))) + body


@dataclass
class Outcome:
    status: int = 0
    events: int = 0
    ended: bool = False
    error: str = ""
    delays: list[float] = field(default_factory=list)


async def one_stream(port: int, i: int, first: asyncio.Event, out: Outcome) -> None:
    """One stream on its own connection: parse the chunked SSE body, stamp each event."""
    try:
        reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 20)
    except OSError as exc:
        out.error = type(exc).__name__
        first.set()
        return
    try:
        writer.write(stream_request(port, i))
        head = await reader.readuntil(b"\r\n\r\n")
        out.status = int(head[9:12])
        if out.status != 200 or b"transfer-encoding: chunked" not in head.lower():
            first.set()
            return
        pending = b""
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                out.ended = True
                return
            pending += (await reader.readexactly(size + 2))[:-2]
            now = time.time()
            *done, pending = pending.split(b"\n\n")
            for frame in done:
                m = SENT_RE.search(frame)
                if m:
                    out.events += 1
                    out.delays.append(now - float(m.group(1)))
                    first.set()
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        out.error = type(exc).__name__
    finally:
        first.set()
        writer.close()


def rss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def fds(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/fd"))
    return total


def family(pid: int) -> list[int]:
    """``pid`` and its children (nginx's worker)."""
    with contextlib.suppress(OSError):
        return [pid, *(int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    return [pid]


async def measure(port: int, pid: int, n: int, events: int, interval: float, ramp: int) -> dict[str, object]:
    pids = family(pid)
    rss0, fd0 = rss_kb(pids), fds(pids)
    outcomes = [Outcome() for _ in range(n)]
    tasks: list[asyncio.Task[None]] = []
    started = time.monotonic()
    deadline = started + events * interval + 60
    peak = (0, rss0, fd0)  # (streams open, RSS, descriptors) when the most were open at once

    async def sample() -> None:
        nonlocal peak
        while True:
            await asyncio.sleep(0.5)
            now_open = sum(1 for o in outcomes if o.events and not o.ended and not o.error)
            if now_open >= peak[0]:
                peak = (now_open, rss_kb(pids), fds(pids))

    sampler = asyncio.ensure_future(sample())
    for base in range(0, n, ramp):
        firsts = []
        for i in range(base, min(n, base + ramp)):
            first = asyncio.Event()
            firsts.append(first)
            tasks.append(asyncio.ensure_future(one_stream(port, i, first, outcomes[i])))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(1.0, deadline - time.monotonic())):
                await asyncio.gather(*(f.wait() for f in firsts))
    opened = time.monotonic() - started
    done, pending = await asyncio.wait(tasks, timeout=max(1.0, deadline - time.monotonic()))
    sampler.cancel()
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    open_now, rss1, fd1 = peak
    delays = sorted(d for o in outcomes for d in o.delays)
    completed = sum(1 for o in outcomes if o.status == 200 and o.ended and o.events == events)
    failures: dict[str, int] = {}
    for o in outcomes:
        if not (o.status == 200 and o.ended and o.events == events):
            key = o.error or (f"HTTP {o.status}" if o.status != 200 else f"{o.events} events")
            failures[key] = failures.get(key, 0) + 1
    peak = max(open_now, 1)
    return {
        "streams": n, "completed": completed, "failures": failures, "open_at_peak": open_now,
        "ramp_s": round(opened, 1), "wall_s": round(time.monotonic() - started, 1),
        "rss_before_mb": round(rss0 / 1024, 1), "rss_peak_mb": round(rss1 / 1024, 1),
        "rss_per_stream_kb": round((rss1 - rss0) / peak, 1),
        "fds_per_stream": round((fd1 - fd0) / peak, 2),
        "delay_p50_ms": round(1000 * statistics.median(delays), 1) if delays else None,
        "delay_p99_ms": round(1000 * delays[int(0.99 * (len(delays) - 1))], 1) if delays else None,
        "events": len(delays),
    }


# --------------------------------------------------------------------------- targets


@contextlib.contextmanager
def target(name: str, tmp: Path, worker_port: int, n: int):  # type: ignore[no-untyped-def]
    """Start ``name`` in front of the worker; yields (port, pid)."""
    port = free_port()
    if name == "nginx":
        ndir = tmp / f"nginx-{n}"
        ndir.mkdir()
        conf = nginx_conf(ndir, port, worker_port)
        text = conf.read_text().replace(f"listen {HOST}:{port};", f"listen {HOST}:{port} backlog=4096;")
        text = text.replace("events { worker_connections 4096; }",
                                        f"worker_rlimit_nofile {2 * n + 1024};\n"
                                        f"events {{ worker_connections {2 * n + 512}; }}")
        conf.write_text(text)
        nginx = os.environ.get("NGINX", "/usr/sbin/nginx")
        proc = Proc("nginx", [nginx, "-p", str(ndir), "-e", str(ndir / "error.log"), "-c", str(conf),
                              "-g", "daemon off;"], ndir / "nginx.out")
        try:
            wait_port(port, proc)
            time.sleep(0.2)  # let the worker process start (its pid is measured)
            yield port, proc.pid
        finally:
            proc.stop()
        return
    ledger = "memory" if name == "gw-memory" else f"sqlite:///{tmp}/ledger-{n}.db"
    admin = free_port()
    proc = Proc(name, [PY, "-m", "gateway", "serve", "--upstream", f"http://{HOST}:{worker_port}/",
                       "--port", str(port), "--admin-port", str(admin), "--ledger", ledger],
                tmp / f"{name}-{n}.log", cwd=ROOT, env=child_env())
    try:
        wait_ready(f"http://{HOST}:{admin}/readyz", proc)
        yield port, proc.pid
    finally:
        metrics = ""
        with contextlib.suppress(Exception):
            import httpx
            metrics = httpx.get(f"http://{HOST}:{admin}/metrics", timeout=5).text
        proc.stop()
        errors = [ln for ln in metrics.splitlines()
                  if ln.startswith("a2a_gateway_upstream_errors_total{") and not ln.endswith(" 0.0")]
        target.last_errors = errors  # type: ignore[attr-defined]


async def main_async(args: argparse.Namespace) -> list[str]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the bench's own, inherited by its children
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    sizes = [int(x) for x in args.streams.split(",")]
    names = args.targets.split(",")
    rows: list[dict[str, object]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="streams-bench-") as tmpdir:
        tmp = Path(tmpdir)
        for n in sizes:
            if 2 * n + 256 > limit:
                notes.append(f"N={n} skipped: {2 * n + 256} descriptors needed, RLIMIT_NOFILE {limit}")
                continue
            for name in names:
                wport = free_port()
                worker = Proc("paced-worker", [PY, "-m", "bench.streams_bench", "--serve-worker", str(wport),
                                               "--events", str(args.events), "--interval", str(args.interval)],
                              tmp / f"worker-{name}-{n}.log", cwd=ROOT, env=child_env())
                try:
                    wait_port(wport, worker)
                    with target(name, tmp, wport, n) as (port, pid):
                        print(f"{name} N={n} ...", flush=True)
                        row = await measure(port, pid, n, args.events, args.interval, args.ramp)
                    row["target"] = name
                    errors = getattr(target, "last_errors", [])
                    if name != "nginx" and errors:
                        row["gateway_upstream_errors"] = errors
                    target.last_errors = []  # type: ignore[attr-defined]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                finally:
                    worker.stop()
    lines = [f"streams bench — a2a-gateway {__version__}, {time.strftime('%Y-%m-%d %H:%M:%S')}",
             f"machine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
             f"RLIMIT_NOFILE {limit}",
             f"workload: N concurrent SendStreamingMessage streams, {args.events} events "
             f"{args.interval} s apart (~{args.events * args.interval:.0f} s each), opened {args.ramp} at a time; "
             "client, paced worker and target share the cores; gateways with the default config "
             "(replay window on, pool 5 000 per upstream)",
             "",
             f"{'target':<10}{'N':>6}{'completed':>11}{'open at peak':>14}{'RSS before':>12}{'RSS peak':>10}{'kB/stream':>11}"
             f"{'fds/stream':>12}{'delay p50':>11}{'delay p99':>11}{'ramp s':>8}  failures"]
    for r in rows:
        lines.append(f"{r['target']:<10}{r['streams']:>6}{r['completed']:>11}{r['open_at_peak']:>14}{r['rss_before_mb']:>10}MB"
                     f"{r['rss_peak_mb']:>8}MB{r['rss_per_stream_kb']:>11}{r['fds_per_stream']:>12}"
                     f"{str(r['delay_p50_ms']) + 'ms':>11}{str(r['delay_p99_ms']) + 'ms':>11}{r['ramp_s']:>8}  "
                     f"{r['failures'] or '-'}")
    for r in rows:
        if r.get("gateway_upstream_errors"):
            lines.append(f"{r['target']} N={r['streams']}: {r['gateway_upstream_errors']}")
    lines += ["", *notes, "raw: " + json.dumps(rows)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="1000,5000", help="comma-separated N values")
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--targets", default="nginx,gw-memory,gw-sqlite")
    parser.add_argument("--ramp", type=int, default=500, help="streams opened at a time")
    parser.add_argument("--serve-worker", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_worker:
        import uvloop
        uvloop.run(serve_worker(args.serve_worker, args.events, args.interval))
        return
    if sys.platform != "linux":
        raise SystemExit("needs /proc (Linux)")
    run_and_save(main_async(args), "streams")


if __name__ == "__main__":
    main()
