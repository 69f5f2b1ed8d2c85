"""Benchmark harness: the gateway measured side by side with a direct connection and with nginx.

    python -m bench.run [--quick] [--runs N] [--duration S] [--profile] [--calibrate] [--sdk-worker]

One command, one machine, everything on 127.0.0.1. A canned A2A v1.0 worker
(:mod:`bench.canned_worker`) answers at once; the same workloads go to six targets:

* ``direct``    — client → canned worker;
* ``nginx``     — client → nginx (1 worker process, upstream keepalive pool,
  ``proxy_http_version 1.1``, ``proxy_buffering off``) → canned worker;
* ``gw-memory`` / ``gw-sqlite`` / ``gw-redis`` — client → ``python -m gateway serve`` (one
  uvicorn worker; ledger ``memory``, a fresh ``sqlite:///…`` file, a private ``redis-server``)
  → canned worker;
* ``gw-sqlite-x2`` — the same with ``--workers 2`` (two gateway processes on one socket, one
  SQLite file; CPU figures count both).

Workloads (each figure is the median over ``--runs`` runs; every ratio and difference is taken
within one run, then the median of those is reported):

* saturation throughput, ``wrk`` with a Lua script POSTing a ~1 KB ``SendMessage`` and a
  ``GetTask`` (non-2xx responses and socket errors are counted and reported);
* added latency at a fixed rate (``SendMessage``, default 200 req/s for 5 s) from a raw-asyncio
  client over a small keep-alive pool: p50 / p99 / p99.9 and gateway − direct in ms;
* SSE: sequential ``SendStreamingMessage`` streams of 100 events read incrementally; events/s
  through one target and per-event added latency (stream time − direct stream time) / 100;
* pure engine: ``gateway.invariants.engine.check_payload`` observations/s on one core over
  pre-built task / statusUpdate / artifactUpdate payloads with a dict ledger.

Gateway ``/metrics`` (on each gateway's admin listener) are scraped after each run
(divergences, non-ok outcomes, upstream and ledger errors are reported), and the gateway logs
are scanned for warnings and errors.
nginx and wrk are installed with ``apt-get install -y`` when missing; the Redis target is
skipped with a note when ``redis-server`` is missing. The client (wrk, this process) shares the
machine's cores with the servers; that is stated in the output. ``--profile`` additionally
samples the memory gateway with ``py-spy`` (when installed) under SendMessage saturation and
under SSE, and summarizes the top frames.

Output: one table, printed and saved with machine info to ``bench/results/run-<ts>.txt``,
raw numbers to ``bench/results/run-<ts>.json``. No timing assertions: goals are reported as
met or not.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway import __version__

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
PY = sys.executable
HOST = "127.0.0.1"
TARGETS = ("direct", "nginx", "gw-memory", "gw-sqlite", "gw-redis", "gw-sqlite-x2")
GATEWAYS = ("gw-memory", "gw-sqlite", "gw-redis", "gw-sqlite-x2")
CALIBRATION = {"cal-hello": "hello", "cal-httpx": "httpx_proxy", "cal-raw": "raw_proxy"}
STREAM_EVENTS = 100
GET_TASK_ID = "t-get-1"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# ~1 KB SendMessage body (docs/protocol.md §3.4).
_TEXT = ("Summarize the quarterly report for the operations team, list the three largest risks, "
         "and propose one mitigation for each; keep it under two hundred words. ") * 6
SEND_BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
    "message": {"messageId": "bench-m-1", "role": "ROLE_USER", "parts": [{"text": _TEXT.strip()}]},
    "configuration": {"historyLength": 0}}})
GET_BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                         "params": {"id": GET_TASK_ID, "historyLength": 0}})
STREAM_BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
    "message": {"messageId": "bench-s-1", "role": "ROLE_USER", "parts": [{"text": "stream please"}]}}})
# --sdk-worker: the real a2a-sdk demo worker (demo/worker.py); "hi" completes a task with an artifact.
SDK_TARGETS = ("direct", "nginx", "gw-memory", "gw-sqlite")
SDK_SEND_BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
    "message": {"messageId": "bench-sdk-m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
    "configuration": {"historyLength": 0}}})
SDK_STREAM_BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
    "message": {"messageId": "bench-sdk-s-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}})


@dataclasses.dataclass
class Settings:
    runs: int
    duration: float  # wrk seconds per target and workload
    warmup: float  # wrk warm-up seconds (discarded)
    rate: float  # fixed-rate requests per second
    rate_seconds: float
    sse_streams: int
    engine_seconds: float
    wrk_threads: int
    wrk_connections: int
    quick: bool
    profile: bool
    profile_seconds: float
    calibrate: bool = False
    sdk_worker: bool = False


# --------------------------------------------------------------------------- processes


class Proc:
    """A child process with its output in a log file; stopped by PID in ``stop``.
    ``admin_port``: a gateway's admin listener (``/readyz``, ``/metrics``)."""

    admin_port: int | None = None

    def __init__(self, name: str, argv: list[str], log: Path, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self._fh = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.p = subprocess.Popen(argv, stdout=self._fh, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                  stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self) -> None:
        try:
            if self.p.poll() is None:
                self.p.terminate()
                try:
                    self.p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.p.kill()
                    self.p.wait(timeout=10)
        finally:
            self._fh.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: Proc, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited early: {proc.log.read_text(errors='replace')[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)  # bounded by the deadline
    raise RuntimeError(f"{proc.name} did not listen on {port} within {timeout}s")


def wait_ready(url: str, proc: Proc, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(trust_env=False, timeout=2) as client:
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited early: {proc.log.read_text(errors='replace')[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            time.sleep(0.1)  # bounded by the deadline
    raise RuntimeError(f"{proc.name}: {url} not ready within {timeout}s")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its live children (nginx workers), in seconds."""
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for p in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def ensure_tool(binary: str, package: str, notes: list[str]) -> str | None:
    """Path of ``binary``; installs ``package`` with apt-get when missing (root only)."""
    found = shutil.which(binary) or next((p for p in (f"/usr/sbin/{binary}", f"/usr/bin/{binary}")
                                         if os.access(p, os.X_OK)), None)
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        notes.append(f"{binary} missing and cannot be installed (not root / no apt-get)")
        return None
    print(f"installing {package} with apt-get ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in range(2):
        if attempt:
            subprocess.run(["apt-get", "update", "-qq"], env=env, timeout=300,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        rc = subprocess.run(["apt-get", "install", "-y", "-qq", package], env=env, timeout=600,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode
        if rc == 0:
            break
    found = shutil.which(binary) or next((p for p in (f"/usr/sbin/{binary}", f"/usr/bin/{binary}")
                                         if os.access(p, os.X_OK)), None)
    if not found:
        notes.append(f"apt-get install {package} failed; {binary} workloads skipped")
    return found


def nginx_conf(tmp: Path, listen: int, worker_port: int) -> Path:
    for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / sub).mkdir(exist_ok=True)
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf = tmp / "nginx.conf"
    conf.write_text(f"""{user}worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000000;
    upstream worker {{
        server {HOST}:{worker_port};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen {HOST}:{listen};
        location / {{
            proxy_pass http://worker;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
""")
    return conf


# --------------------------------------------------------------------------- raw HTTP client


def raw_request(port: int, body: bytes) -> bytes:
    return (f"POST / HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
            f"A2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def with_id(body: bytes, rid: int) -> bytes:
    return body.replace(b'"id":1,', b'"id":%d,' % rid, 1)


class Conn:
    """One keep-alive HTTP/1.1 connection: Content-Length, chunked or close-delimited bodies."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    async def _ensure(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.r is None or self.w is None:
            self.r, self.w = await asyncio.open_connection(HOST, self.port, limit=1 << 20)
        return self.r, self.w

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
        self.r = self.w = None

    async def request(self, raw: bytes, on_chunk: Callable[[bytes], None] | None = None) -> tuple[int, bytes]:
        """Send ``raw``; returns (status, body). ``on_chunk`` sees each body chunk as it comes."""
        r, w = await self._ensure()
        w.write(raw)
        head = await r.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        parts: list[bytes] = []
        keep = b"\r\nconnection: close" not in lower
        pos = lower.find(b"\r\ncontent-length:")
        if pos >= 0:
            end = lower.find(b"\r\n", pos + 2)
            data = await r.readexactly(int(lower[pos + 17:end]))
            if on_chunk:
                on_chunk(data)
            parts.append(data)
        elif b"\r\ntransfer-encoding: chunked" in lower:
            while True:
                line = await r.readuntil(b"\r\n")
                size = int(line.split(b";", 1)[0], 16)
                if size == 0:
                    while (await r.readuntil(b"\r\n")) != b"\r\n":
                        pass  # trailers
                    break
                data = (await r.readexactly(size + 2))[:-2]
                if on_chunk:
                    on_chunk(data)
                parts.append(data)
        elif status not in (204, 304):
            while data := await r.read(65536):
                if on_chunk:
                    on_chunk(data)
                parts.append(data)
            keep = False
        if not keep:
            self.close()
        return status, b"".join(parts)


def check_send(status: int, body: bytes, rid: int) -> str | None:
    if status != 200:
        return f"HTTP {status}"
    if b'"error"' in body[:200]:
        return "jsonrpc error: " + body[:200].decode(errors="replace")
    if not body.startswith(b'{"jsonrpc":"2.0","id":%d,' % rid) or b"TASK_STATE_COMPLETED" not in body:
        return "unexpected answer: " + body[:200].decode(errors="replace")
    return None


async def probe_target(port: int, *, sdk: bool = False) -> list[str]:
    """One SendMessage, one GetTask (canned worker only) and one stream through the target,
    checked in full. ``sdk``: the target is in front of the real a2a-sdk worker ("hi" bodies;
    its answer must carry an artifact; any number of stream events)."""
    problems = []
    conn = Conn(port)
    send_body, stream_body = (SDK_SEND_BODY, SDK_STREAM_BODY) if sdk else (SEND_BODY, STREAM_BODY)
    try:
        status, body = await asyncio.wait_for(conn.request(raw_request(port, with_id(send_body, 7))), 10)
        doc = orjson.loads(body) if status == 200 else {}
        task = (doc.get("result") or {}).get("task") or {}
        if (status != 200 or doc.get("id") != 7 or task.get("status", {}).get("state") != "TASK_STATE_COMPLETED"
                or (sdk and not task.get("artifacts"))):
            problems.append(f"SendMessage probe: HTTP {status} {body[:300]!r}")
        if not sdk:
            status, body = await asyncio.wait_for(conn.request(raw_request(port, with_id(GET_BODY, 8))), 10)
            doc = orjson.loads(body) if status == 200 else {}
            if status != 200 or doc.get("id") != 8 or (doc.get("result") or {}).get("id") != GET_TASK_ID:
                problems.append(f"GetTask probe: HTTP {status} {body[:300]!r}")
        expect = None if sdk else STREAM_EVENTS
        res = await asyncio.wait_for(one_stream(conn, raw_request(port, with_id(stream_body, 9)), 9, expect), 10)
        if res[3]:
            problems.append(f"stream probe: {res[3]}")
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        problems.append(f"probe failed: {type(exc).__name__}: {exc}")
    finally:
        conn.close()
    return problems

async def one_stream(conn: Conn, raw: bytes, rid: int,
                     expect: int | None = STREAM_EVENTS) -> tuple[float, float, int, str | None]:
    """One SSE stream read incrementally: (seconds to the end, seconds to the first chunk,
    events, problem or None). ``expect=None`` (real a2a-sdk worker, which formats JSON with
    spaces): any number of events, the last one parsed and checked."""
    first: list[float] = []

    def on_chunk(_: bytes) -> None:
        if not first:
            first.append(time.perf_counter())

    t0 = time.perf_counter()
    status, body = await conn.request(raw, on_chunk)
    t1 = time.perf_counter()
    lines = [ln for ln in body.split(b"\n") if ln.startswith(b"data:")]
    problem = None
    if status != 200:
        problem = f"HTTP {status}: {body[:200]!r}"
    elif b"event: error" in body or b'"error"' in body:
        problem = "error event: " + body[-300:].decode(errors="replace")
    elif expect is None:
        problem = _check_sdk_last_event(lines, rid)
    elif len(lines) != expect:
        problem = f"{len(lines)} events instead of {expect}"
    elif b"TASK_STATE_COMPLETED" not in lines[-1] or (b'"id":%d,' % rid) not in lines[-1]:
        problem = "last event is not COMPLETED with the request id: " + lines[-1][:200].decode(errors="replace")
    return t1 - t0, (first[0] - t0) if first else t1 - t0, len(lines), problem


def _check_sdk_last_event(lines: list[bytes], rid: int) -> str | None:
    if not lines:
        return "no events"
    try:
        doc = orjson.loads(lines[-1][5:])
    except orjson.JSONDecodeError:
        return "last event is not JSON: " + lines[-1][:200].decode(errors="replace")
    state = (((doc.get("result") or {}).get("statusUpdate") or {}).get("status") or {}).get("state")
    if doc.get("id") != rid or state != "TASK_STATE_COMPLETED":
        return "last event is not COMPLETED with the request id: " + lines[-1][:200].decode(errors="replace")
    return None


# --------------------------------------------------------------------------- workloads


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


async def fixed_rate(port: int, rate: float, seconds: float, pool_size: int = 8,
                     check: bool = True) -> dict[str, Any]:
    """SendMessage at a fixed schedule; latency from the moment a request is written."""
    n = int(rate * seconds)
    raws = [raw_request(port, with_id(SEND_BODY, 1000 + i)) for i in range(n)]
    pool: asyncio.Queue[Conn] = asyncio.Queue()
    conns = [Conn(port) for _ in range(pool_size)]
    for c in conns:
        await c._ensure()
        pool.put_nowait(c)
    lat: list[float] = []
    errors: collections.Counter[str] = collections.Counter()
    late = 0

    async def one(i: int) -> None:
        conn = await pool.get()
        try:
            t0 = time.perf_counter()
            status, body = await asyncio.wait_for(conn.request(raws[i]), 10)
            lat.append(time.perf_counter() - t0)
            problem = check_send(status, body, 1000 + i) if check else (
                None if status == 200 else f"HTTP {status}")
            if problem:
                errors[problem[:80]] += 1
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            errors[f"{type(exc).__name__}"] += 1
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
                await asyncio.sleep(delay)
            elif delay < -0.005:
                late += 1
            tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        for c in conns:
            c.close()
    ms = [x * 1000 for x in lat]
    return {"requests": n, "ok": len(ms) - sum(errors.values()), "errors": dict(errors),
            "late_starts": late, "p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99),
            "p999_ms": pct(ms, 99.9), "mean_ms": statistics.fmean(ms) if ms else float("nan"),
            "max_ms": max(ms) if ms else float("nan")}


async def sse_streams(port: int, count: int, body: bytes = STREAM_BODY,
                      expect: int | None = STREAM_EVENTS) -> dict[str, Any]:
    """``count`` sequential streams over one keep-alive connection."""
    conn = Conn(port)
    times, firsts = [], []
    errors: collections.Counter[str] = collections.Counter()
    events = 0
    started = time.perf_counter()
    try:
        for i in range(count):
            rid = 5000 + i
            try:
                total, first, n, problem = await asyncio.wait_for(
                    one_stream(conn, raw_request(port, with_id(body, rid)), rid, expect), 10)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                errors[type(exc).__name__] += 1
                conn.close()
                continue
            events += n
            times.append(total * 1000)
            firsts.append(first * 1000)
            if problem:
                errors[problem[:80]] += 1
    finally:
        conn.close()
    elapsed = time.perf_counter() - started
    return {"streams": count, "events": events, "seconds": elapsed, "events_per_s": events / elapsed,
            "streams_per_s": count / elapsed,
            "stream_ms_p50": pct(times, 50), "stream_ms_p99": pct(times, 99),
            "first_event_ms_p50": pct(firsts, 50), "errors": dict(errors)}


WRK_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
wrk.body = [==[%s]==]
function done(summary, latency, requests)
  io.write(string.format(
    "WRKJSON {\\"requests\\":%%d,\\"duration_us\\":%%d,\\"bytes\\":%%d,\\"status\\":%%d,\\"connect\\":%%d,\\"read\\":%%d,\\"write\\":%%d,\\"timeout\\":%%d,\\"p50\\":%%d,\\"p90\\":%%d,\\"p99\\":%%d,\\"p999\\":%%d,\\"mean\\":%%f,\\"max\\":%%d}\\n",
    summary.requests, summary.duration, summary.bytes, summary.errors.status,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.mean, latency.max))
end
"""


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_wrk(wrk: str, script: Path, port: int, seconds: float, s: Settings) -> dict[str, Any]:
    argv = [wrk, f"-t{s.wrk_threads}", f"-c{s.wrk_connections}", f"-d{max(1, round(seconds))}s",
            "--timeout", "5s", "-s", str(script), f"http://{HOST}:{port}/"]
    cpu0 = children_cpu()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    wrk_cpu = children_cpu() - cpu0
    text = out.stdout + out.stderr
    doc: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith("WRKJSON "):
            doc = json.loads(line[8:])
    if not doc:
        raise RuntimeError(f"wrk produced no summary (rc {out.returncode}): {text[-1000:]}")
    non2xx = 0
    for line in text.splitlines():
        if "Non-2xx or 3xx responses:" in line:
            non2xx = int(line.split(":")[1])
    secs = doc["duration_us"] / 1e6
    return {"rps": doc["requests"] / secs, "requests": doc["requests"], "non2xx": max(non2xx, doc["status"]),
            "socket_errors": doc["connect"] + doc["read"] + doc["write"] + doc["timeout"],
            "p50_ms": doc["p50"] / 1000, "p99_ms": doc["p99"] / 1000, "p999_ms": doc["p999"] / 1000,
            "mean_ms": doc["mean"] / 1000, "max_ms": doc["max"] / 1000,
            "client_cpu_us_per_req": wrk_cpu / max(1, doc["requests"]) * 1e6}


def engine_bench(seconds: float, tasks: int = 1000) -> dict[str, Any]:
    """check_payload observations/s over pre-built streams (10 events per task)."""
    from gateway.a2a.jsonrpc import Operation
    from gateway.a2a.version import ProtocolVersion
    from gateway.invariants import engine
    from gateway.invariants.model import Clock, Exchange, StreamState

    ex = Exchange("worker", Operation.STREAM, ProtocolVersion.V1_0, None)
    ts = "2026-11-29T20:45:38.476Z"
    payloads: list[tuple[str, dict[str, Any]]] = []
    for i in range(tasks):
        tid, cid = f"t-{i}", f"c-{i}"
        ids = {"taskId": tid, "contextId": cid}
        payloads.append((tid, {"task": {"id": tid, "contextId": cid,
                                        "status": {"state": "TASK_STATE_WORKING", "timestamp": ts}}}))
        for k in range(8):
            if k % 2 == 0:
                payloads.append((tid, {"statusUpdate": {**ids, "status": {"state": "TASK_STATE_WORKING",
                                                                           "timestamp": ts}}}))
            else:
                payloads.append((tid, {"artifactUpdate": {**ids, "artifact": {
                    "artifactId": "a-1", "parts": [{"text": f"chunk {k}"}]}, "append": k > 1,
                    "lastChunk": False}}))
        payloads.append((tid, {"statusUpdate": {**ids, "status": {"state": "TASK_STATE_COMPLETED",
                                                                   "timestamp": ts}}}))
    check = engine.check_payload
    observations = findings = 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while True:
        ledger: dict[str, Any] = {}
        streams: dict[str, StreamState] = {}
        clock = Clock(time.time())  # one per pass: the engine's cost, not the clock's
        for tid, result in payloads:
            record = ledger.get(tid)
            stream = streams.get(tid) or StreamState()
            outcome = check(ex, stream, record, result, clock)
            if outcome.record is not None:
                ledger[tid] = outcome.record
            streams[tid] = outcome.stream or stream
            findings += sum(1 for f in outcome.findings if f.category != "normalization")
        observations += len(payloads)
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - started
    return {"observations": observations, "seconds": elapsed, "obs_per_s": observations / elapsed,
            "divergence_or_rejection_findings": findings}


# --------------------------------------------------------------------------- metrics and logs

_WATCHED = ("a2a_gateway_divergences_total", "a2a_gateway_upstream_errors_total",
            "a2a_gateway_local_rejections_total", "a2a_gateway_ledger_errors_total",
            "a2a_gateway_ledger_conflicts_total", "a2a_gateway_unchecked_total",
            "a2a_gateway_error_rewrites_total", "a2a_gateway_forced_get_total",
            "a2a_gateway_upstream_degraded")


def scrape(port: int | None) -> dict[str, Any]:
    """The interesting non-zero series of the gateway's /metrics (``port``: its admin listener)."""
    try:
        text = httpx.get(f"http://{HOST}:{port}/metrics", trust_env=False, timeout=10).text
    except httpx.HTTPError as exc:
        return {"scrape_error": str(exc)}
    requests: dict[str, float] = {}
    odd: dict[str, float] = {}
    ledger_ops: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        try:
            v = float(value)
        except ValueError:
            continue
        name = series.split("{", 1)[0]
        if name == "a2a_gateway_requests_total":
            requests[series[len(name):]] = v
        elif name in _WATCHED and v:
            odd[series] = v
        elif name == "a2a_gateway_ledger_operation_duration_seconds_count":
            ledger_ops[series[len(name):]] = v
    not_ok = {k: v for k, v in requests.items() if 'outcome="ok"' not in k}
    return {"requests": requests, "not_ok": not_ok, "watched": odd, "ledger_ops": ledger_ops}


def scan_log(path: Path) -> dict[str, Any]:
    """Counts of warning/error lines by event in a gateway's JSON log."""
    counts: collections.Counter[str] = collections.Counter()
    samples: list[str] = []
    lines = 0
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        for raw in fh:
            lines += 1
            if b'"level":"info"' in raw:
                continue
            try:
                doc = orjson.loads(raw)
                key = f"{doc.get('level')}:{doc.get('event')}"
            except orjson.JSONDecodeError:
                key = "non-json"
            counts[key] += 1
            if len(samples) < 5:
                samples.append(raw.decode(errors="replace").strip()[:300])
    return {"lines": lines, "non_info": dict(counts), "samples": samples}


# --------------------------------------------------------------------------- orchestration


@dataclasses.dataclass
class Env:
    settings: Settings
    tmp: Path
    worker_port: int
    nginx_port: int | None
    wrk: str | None
    redis_bin: str | None
    notes: list[str]
    worker: Proc | None = None
    nginx: Proc | None = None
    calibration: dict[str, tuple[int, Proc]] = dataclasses.field(default_factory=dict)
    nginx_bin: str | None = None


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@contextlib.contextmanager
def gateways(env: Env, run: int, upstream_port: int | None = None, only: tuple[str, ...] = GATEWAYS,
             prefix: str = "run") -> Iterator[dict[str, tuple[int, Proc]]]:
    """Start the gateways in ``only`` (and a private redis-server) for one run, in front of the
    canned worker or of ``upstream_port``; stop them after."""
    procs: list[Proc] = []
    started: dict[str, tuple[int, Proc]] = {}
    rundir = env.tmp / f"{prefix}{run}"
    rundir.mkdir()
    upstream_port = upstream_port or env.worker_port
    try:
        ledgers = {"gw-memory": "memory", "gw-sqlite": f"sqlite:///{rundir}/ledger.db",
                   "gw-sqlite-x2": f"sqlite:///{rundir}/ledger-x2.db"}
        ledgers = {k: v for k, v in ledgers.items() if k in only}
        if env.redis_bin and "gw-redis" in only:
            rport = free_port()
            redis = Proc("redis-server", [env.redis_bin, "--port", str(rport), "--bind", HOST, "--save", "",
                                          "--appendonly", "no", "--dir", str(rundir)], rundir / "redis.log")
            procs.append(redis)
            wait_port(rport, redis)
            ledgers["gw-redis"] = f"redis://{HOST}:{rport}/0"
        for name, url in ledgers.items():
            port, admin_port = free_port(), free_port()
            workers = ["--workers", "2"] if name.endswith("-x2") else []
            gw = Proc(name, [PY, "-m", "gateway", "serve", "--upstream", f"http://{HOST}:{upstream_port}/",
                             "--port", str(port), "--admin-port", str(admin_port), "--ledger", url, *workers],
                      rundir / f"{name}.log", cwd=ROOT, env=child_env())
            gw.admin_port = admin_port
            procs.append(gw)
            started[name] = (port, gw)
        for name, (port, gw) in started.items():
            wait_ready(f"http://{HOST}:{gw.admin_port}/readyz", gw)
        yield started
    finally:
        for p in reversed(procs):
            p.stop()


async def measure_run(env: Env, run: int) -> dict[str, Any]:
    s = env.settings
    out: dict[str, Any] = {"wrk": {}, "fixed": {}, "sse": {}, "cpu": {}, "probe": {}}
    with gateways(env, run) as gws:
        ports: dict[str, tuple[int, Proc]] = {"direct": (env.worker_port, env.worker)}  # type: ignore[dict-item]
        if env.nginx_port and env.nginx:
            ports["nginx"] = (env.nginx_port, env.nginx)
        ports.update(gws)
        order = [t for t in TARGETS if t in ports]
        k = run % len(order)
        order = order[k:] + order[:k]  # rotate so no target is always first
        out["order"] = order
        for t in order:
            for attempt in range(20):  # a gateway may still be fetching the worker's card
                problems = await probe_target(ports[t][0])
                if not problems:
                    break
                await asyncio.sleep(0.25)
            out["probe"][t] = problems
            if problems:
                env.notes.append(f"run {run + 1}: {t} probe problems: {problems}")
        assert env.worker is not None
        if env.wrk:
            for workload, body in (("SendMessage", SEND_BODY), ("GetTask", GET_BODY)):
                script = env.tmp / f"{workload}.lua"
                script.write_text(WRK_LUA % body.decode())
                out["wrk"][workload] = {}
                for t in order:
                    port, proc = ports[t]
                    if s.warmup > 0:
                        run_wrk(env.wrk, script, port, s.warmup, s)
                    c0, w0 = cpu_seconds(proc.pid), cpu_seconds(env.worker.pid)
                    res = run_wrk(env.wrk, script, port, s.duration, s)
                    c1, w1 = cpu_seconds(proc.pid), cpu_seconds(env.worker.pid)
                    if t != "direct":
                        res["proxy_cpu_us_per_req"] = (c1 - c0) / max(1, res["requests"]) * 1e6
                    res["worker_cpu_us_per_req"] = (w1 - w0) / max(1, res["requests"]) * 1e6
                    out["wrk"][workload][t] = res
                    print(f"  run {run + 1} wrk {workload:<11} {t:<10} {res['rps']:>9.0f} req/s  "
                          f"p50 {res['p50_ms']:.2f} ms  p99 {res['p99_ms']:.2f} ms  non2xx {res['non2xx']}  "
                          f"sockerr {res['socket_errors']}", flush=True)
                    await asyncio.sleep(0.3)
                if workload == "SendMessage":
                    for t, (port, proc) in env.calibration.items():
                        if s.warmup > 0:
                            run_wrk(env.wrk, script, port, s.warmup, s)
                        c0 = cpu_seconds(proc.pid)
                        res = run_wrk(env.wrk, script, port, s.duration, s)
                        res["proxy_cpu_us_per_req"] = (cpu_seconds(proc.pid) - c0) / max(1, res["requests"]) * 1e6
                        out.setdefault("calibration", {}).setdefault("wrk", {})[t] = res
                        print(f"  run {run + 1} wrk {workload:<11} {t:<10} {res['rps']:>9.0f} req/s  "
                              f"p50 {res['p50_ms']:.2f} ms  p99 {res['p99_ms']:.2f} ms  non2xx {res['non2xx']}",
                              flush=True)
                        await asyncio.sleep(0.3)
        for t in order:
            port, _ = ports[t]
            await fixed_rate(port, s.rate, min(1.0, s.rate_seconds / 4))  # warm-up, discarded
            c0 = self_cpu()
            res = await fixed_rate(port, s.rate, s.rate_seconds)
            res["client_cpu_us_per_req"] = (self_cpu() - c0) / max(1, res["requests"]) * 1e6
            out["fixed"][t] = res
            print(f"  run {run + 1} fixed {s.rate:.0f}/s      {t:<10} p50 {res['p50_ms']:.3f} ms  "
                  f"p99 {res['p99_ms']:.3f} ms  p99.9 {res['p999_ms']:.3f} ms  errors {sum(res['errors'].values())}",
                  flush=True)
        for t, (port, _) in env.calibration.items():
            check = t != "cal-hello"
            await fixed_rate(port, s.rate, min(1.0, s.rate_seconds / 4), check=check)
            res = await fixed_rate(port, s.rate, s.rate_seconds, check=check)
            out.setdefault("calibration", {}).setdefault("fixed", {})[t] = res
            print(f"  run {run + 1} fixed {s.rate:.0f}/s      {t:<10} p50 {res['p50_ms']:.3f} ms  "
                  f"p99 {res['p99_ms']:.3f} ms  errors {sum(res['errors'].values())}", flush=True)
        for t in order:
            port, proc = ports[t]
            await sse_streams(port, max(3, s.sse_streams // 20))  # warm-up, discarded
            c0, me0 = cpu_seconds(proc.pid), self_cpu()
            res = await sse_streams(port, s.sse_streams)
            res["client_cpu_us_per_event"] = (self_cpu() - me0) / max(1, res["events"]) * 1e6
            if t != "direct":
                res["proxy_cpu_us_per_event"] = (cpu_seconds(proc.pid) - c0) / max(1, res["events"]) * 1e6
            out["sse"][t] = res
            print(f"  run {run + 1} sse              {t:<10} {res['events_per_s']:>9.0f} events/s  "
                  f"stream p50 {res['stream_ms_p50']:.2f} ms  errors {sum(res['errors'].values())}", flush=True)
        out["metrics"] = {name: scrape(proc.admin_port) for name, (_, proc) in gws.items()}
        logs = {name: proc.log for name, (_, proc) in gws.items()}
    out["logs"] = {name: scan_log(path) for name, path in logs.items()}
    out["engine"] = engine_bench(s.engine_seconds)
    print(f"  run {run + 1} engine {out['engine']['obs_per_s']:>9.0f} observations/s", flush=True)
    return out


async def measure_sdk_run(env: Env, run: int) -> dict[str, Any]:
    """--sdk-worker: SendMessage saturation (wrk) and SSE with the real a2a-sdk demo worker as the
    upstream of direct / nginx / gw-memory / gw-sqlite. The worker, its nginx and the gateways are
    fresh for each run (the worker's in-memory task store grows with every request)."""
    s = env.settings
    out: dict[str, Any] = {"wrk": {}, "sse": {}, "probe": {}}
    sdir = env.tmp / f"sdk{run}"
    sdir.mkdir()
    with contextlib.ExitStack() as stack:
        wport = free_port()
        worker = Proc("sdk-worker", [PY, "-m", "demo.worker", "--port", str(wport), "--public-url",
                                     f"http://{HOST}:{wport}/", "--log-level", "warning"],
                      sdir / "sdk-worker.log", cwd=ROOT, env=child_env())
        stack.callback(worker.stop)
        wait_ready(f"http://{HOST}:{wport}/.well-known/agent-card.json", worker)
        ports: dict[str, tuple[int, Proc]] = {"direct": (wport, worker)}
        if env.nginx_bin:
            nport = free_port()
            ndir = sdir / "nginx"
            ndir.mkdir()
            conf = nginx_conf(ndir, nport, wport)
            ngx = Proc("sdk-nginx", [env.nginx_bin, "-p", str(ndir), "-e", str(ndir / "error.log"), "-c", str(conf),
                                     "-g", "daemon off;"], ndir / "nginx.out")
            stack.callback(ngx.stop)
            wait_port(nport, ngx)
            ports["nginx"] = (nport, ngx)
        gws = stack.enter_context(gateways(env, run, upstream_port=wport, only=("gw-memory", "gw-sqlite"),
                                           prefix="sdk-gw"))
        ports.update(gws)
        order = [t for t in SDK_TARGETS if t in ports]
        k = run % len(order)
        order = order[k:] + order[:k]
        out["order"] = order
        for t in order:
            for _ in range(20):  # a gateway may still be fetching the worker's card
                problems = await probe_target(ports[t][0], sdk=True)
                if not problems:
                    break
                await asyncio.sleep(0.25)
            out["probe"][t] = problems
            if problems:
                env.notes.append(f"run {run + 1}: sdk {t} probe problems: {problems}")
        if env.wrk:
            script = env.tmp / "SdkSendMessage.lua"
            script.write_text(WRK_LUA % SDK_SEND_BODY.decode())
            for t in order:
                port, proc = ports[t]
                if s.warmup > 0:
                    run_wrk(env.wrk, script, port, s.warmup, s)
                c0, w0 = cpu_seconds(proc.pid), cpu_seconds(worker.pid)
                res = run_wrk(env.wrk, script, port, s.duration, s)
                c1, w1 = cpu_seconds(proc.pid), cpu_seconds(worker.pid)
                if t != "direct":
                    res["proxy_cpu_us_per_req"] = (c1 - c0) / max(1, res["requests"]) * 1e6
                res["worker_cpu_us_per_req"] = (w1 - w0) / max(1, res["requests"]) * 1e6
                out["wrk"][t] = res
                print(f"  run {run + 1} sdk wrk SendMessage {t:<10} {res['rps']:>9.0f} req/s  "
                      f"p50 {res['p50_ms']:.2f} ms  p99 {res['p99_ms']:.2f} ms  non2xx {res['non2xx']}  "
                      f"sockerr {res['socket_errors']}", flush=True)
                await asyncio.sleep(0.3)
        for t in order:
            port, proc = ports[t]
            await sse_streams(port, max(3, s.sse_streams // 20), SDK_STREAM_BODY, None)  # warm-up, discarded
            c0 = cpu_seconds(proc.pid)
            res = await sse_streams(port, s.sse_streams, SDK_STREAM_BODY, None)
            if t != "direct":
                res["proxy_cpu_us_per_event"] = (cpu_seconds(proc.pid) - c0) / max(1, res["events"]) * 1e6
            out["sse"][t] = res
            print(f"  run {run + 1} sdk sse              {t:<10} {res['events_per_s']:>9.0f} events/s  "
                  f"{res['events'] / max(1, res['streams']):.1f} events/stream  stream p50 "
                  f"{res['stream_ms_p50']:.2f} ms  errors {sum(res['errors'].values())}", flush=True)
        out["metrics"] = {name: scrape(proc.admin_port) for name, (_, proc) in gws.items()}
        logs = {name: proc.log for name, (_, proc) in gws.items()}
    out["logs"] = {name: scan_log(path) for name, path in logs.items()}
    return out


# --------------------------------------------------------------------------- derived figures


def derive(run: dict[str, Any]) -> dict[str, float]:
    """Ratios and differences within one run."""
    d: dict[str, float] = {}
    for wl, per in run["wrk"].items():
        for g in GATEWAYS:
            if g not in per:
                continue
            for base in ("direct", "nginx"):
                if base in per:
                    d[f"{wl} {g}/{base}"] = per[g]["rps"] / per[base]["rps"]
            if g != "gw-memory" and "gw-memory" in per:
                d[f"{wl} {g}/gw-memory"] = per[g]["rps"] / per["gw-memory"]["rps"]
    fx = run["fixed"]
    for t in TARGETS[1:]:
        if t in fx and "direct" in fx:
            for q in ("p50", "p99", "p999"):
                d[f"fixed {q} {t}-direct ms"] = fx[t][f"{q}_ms"] - fx["direct"][f"{q}_ms"]
    cal = run.get("calibration") or {}
    for t, res in (cal.get("wrk") or {}).items():
        for base in ("direct", "nginx"):
            if base in run["wrk"].get("SendMessage", {}):
                d[f"SendMessage {t}/{base}"] = res["rps"] / run["wrk"]["SendMessage"][base]["rps"]
        if "gw-memory" in run["wrk"].get("SendMessage", {}):
            d[f"SendMessage gw-memory/{t}"] = run["wrk"]["SendMessage"]["gw-memory"]["rps"] / res["rps"]
    for t, res in (cal.get("fixed") or {}).items():
        if "direct" in fx:
            for q in ("p50", "p99"):
                d[f"fixed {q} {t}-direct ms"] = res[f"{q}_ms"] - fx["direct"][f"{q}_ms"]
    sse = run["sse"]
    for t in TARGETS[1:]:
        if t in sse and "direct" in sse:
            d[f"sse {t} added ms/event"] = (sse[t]["stream_ms_p50"] - sse["direct"]["stream_ms_p50"]) / STREAM_EVENTS
            d[f"sse {t}/direct events/s"] = sse[t]["events_per_s"] / sse["direct"]["events_per_s"]
    sdk = run.get("sdk") or {}
    for g in ("gw-memory", "gw-sqlite"):
        for kind, key in (("wrk", "rps"), ("sse", "events_per_s")):
            per = sdk.get(kind) or {}
            if g not in per:
                continue
            for base in ("direct", "nginx"):
                if base in per and per[base][key]:
                    d[f"sdk {kind} {g}/{base}"] = per[g][key] / per[base][key]
        sse_sdk = sdk.get("sse") or {}
        if g in sse_sdk and "direct" in sse_sdk:
            d[f"sdk sse {g} added ms/stream"] = sse_sdk[g]["stream_ms_p50"] - sse_sdk["direct"]["stream_ms_p50"]
    return d


def median_of(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v == v]
    return statistics.median(vals) if vals else None


def get(run: dict[str, Any], *path: str) -> Any:
    cur: Any = run
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur


def med(runs: list[dict[str, Any]], *path: str) -> float | None:
    return median_of([get(r, *path) for r in runs])


def fmt(v: float | None, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


GOALS = [
    # (label, derived key or special, comparison, threshold, gateways)
    ("throughput SendMessage >= 0.5x nginx", "SendMessage {g}/nginx", ">=", 0.5),
    ("throughput GetTask >= 0.5x nginx", "GetTask {g}/nginx", ">=", 0.5),
    ("added latency p50 vs direct <= 0.5 ms (fixed rate)", "fixed p50 {g}-direct ms", "<=", 0.5),
    ("added latency p99 vs direct <= 2 ms (fixed rate)", "fixed p99 {g}-direct ms", "<=", 2.0),
    ("SSE added per event p50 <= 0.3 ms", "sse {g} added ms/event", "<=", 0.3),
    ("SSE >= 20000 events/s through one gateway", "@sse_eps {g}", ">=", 20000),
]


def report(runs: list[dict[str, Any]], s: Settings, machine: dict[str, str], notes: list[str],
           profile_text: str | None) -> tuple[str, dict[str, Any]]:
    derived_runs = [derive(r) for r in runs]
    keys = sorted({k for d in derived_runs for k in d})
    derived = {k: median_of([d.get(k) for d in derived_runs]) for k in keys}
    present = [t for t in TARGETS if any(t in get(r, "fixed") or {} for r in runs)]
    L: list[str] = []
    L.append(f"a2a-gateway {machine['gateway']} benchmark harness — {machine['date']}")
    L.append(f"machine: {machine['cores']} cores, {machine['cpu']}; Python {machine['python']}; "
             f"{machine['nginx']}; {machine['wrk']}; {machine['redis']}")
    L.append(f"gateway source: {machine['git']}; uvicorn {machine['uvicorn']}, httpx {machine['httpx']}, "
             f"starlette {machine['starlette']}, orjson {machine['orjson']}, uvloop {machine['uvloop']}")
    L.append(f"settings: runs {s.runs}{' (--quick)' if s.quick else ''}; wrk -t{s.wrk_threads} "
             f"-c{s.wrk_connections} {s.duration:g}s (+{s.warmup:g}s warm-up) per target and workload; "
             f"fixed rate {s.rate:g} req/s for {s.rate_seconds:g}s ({int(s.rate * s.rate_seconds)} requests, "
             f"8-connection keep-alive pool); SSE {s.sse_streams} sequential streams x {STREAM_EVENTS} "
             f"events; engine {s.engine_seconds:g}s")
    L.extend(textwrap.wrap("setup: all on 127.0.0.1; canned worker = 1 Python process (uvloop); nginx = 1 worker process, "
             "upstream keepalive 64; each gateway = 1 uvicorn worker (gw-sqlite-x2: --workers 2, "
             "CPU of both), default config (enforce mode, "
             "info-level JSON request logs to a file). The clients (wrk, 1 thread; this Python process) "
             "share the 2 cores with the servers, so every figure includes that contention; the client "
             "side is kept light (wrk in C, raw asyncio sockets, no httpx on the measured path). "
             "Figures are medians over runs; ratios/differences are computed within each run, then "
             "the median is taken. Target order rotates each run.", 110, subsequent_indent="  "))
    L.append("")
    w = 13
    head = f"{'figure':<40}" + "".join(f"{t:>{w}}" for t in present)
    L.append("ABSOLUTE FIGURES (median of runs)")
    L.append(head)
    L.append("-" * len(head))

    def row(label: str, path: Callable[[str], tuple[str, ...]], spec: str, only: tuple[str, ...] | None = None) -> None:
        cells = []
        for t in present:
            v = med(runs, *path(t)) if (only is None or t in only) else None
            cells.append(f"{fmt(v, spec):>{w}}")
        L.append(f"{label:<40}" + "".join(cells))

    for wl in ("SendMessage", "GetTask"):
        if not any(get(r, "wrk", wl) for r in runs):
            continue
        row(f"{wl} saturation req/s (wrk)", lambda t, wl=wl: ("wrk", wl, t, "rps"), ".0f")
        row(f"  latency p50 ms (wrk, c{s.wrk_connections})", lambda t, wl=wl: ("wrk", wl, t, "p50_ms"), ".2f")
        row("  latency p99 ms (wrk)", lambda t, wl=wl: ("wrk", wl, t, "p99_ms"), ".2f")
        row("  proxy CPU us/request", lambda t, wl=wl: ("wrk", wl, t, "proxy_cpu_us_per_req"), ".0f")
        row("  worker CPU us/request", lambda t, wl=wl: ("wrk", wl, t, "worker_cpu_us_per_req"), ".0f")
        row("  client (wrk) CPU us/request", lambda t, wl=wl: ("wrk", wl, t, "client_cpu_us_per_req"), ".0f")
        L.append(f"{'  non-2xx / socket errors (sum of runs)':<40}" + "".join(
            f"{str(sum(get(r, 'wrk', wl, t, 'non2xx') or 0 for r in runs)) + '/' + str(sum(get(r, 'wrk', wl, t, 'socket_errors') or 0 for r in runs)):>{w}}"
            for t in present))
    row(f"fixed {s.rate:g}/s SendMessage p50 ms", lambda t: ("fixed", t, "p50_ms"), ".3f")
    row("  p99 ms", lambda t: ("fixed", t, "p99_ms"), ".3f")
    row("  p99.9 ms", lambda t: ("fixed", t, "p999_ms"), ".3f")
    L.append(f"{'  added p50 vs direct ms':<40}" + "".join(
        f"{fmt(derived.get(f'fixed p50 {t}-direct ms') if t != 'direct' else None, '.3f'):>{w}}" for t in present))
    L.append(f"{'  added p99 vs direct ms':<40}" + "".join(
        f"{fmt(derived.get(f'fixed p99 {t}-direct ms') if t != 'direct' else None, '.3f'):>{w}}" for t in present))
    L.append(f"{'  added p99.9 vs direct ms':<40}" + "".join(
        f"{fmt(derived.get(f'fixed p999 {t}-direct ms') if t != 'direct' else None, '.3f'):>{w}}" for t in present))
    row("  client CPU us/request", lambda t: ("fixed", t, "client_cpu_us_per_req"), ".0f")
    L.append(f"{'  errors (sum of runs)':<40}" + "".join(
        f"{sum(sum((get(r, 'fixed', t, 'errors') or {}).values()) for r in runs):>{w}}" for t in present))
    row(f"SSE events/s ({STREAM_EVENTS}-event streams)", lambda t: ("sse", t, "events_per_s"), ".0f")
    row("  stream time p50 ms", lambda t: ("sse", t, "stream_ms_p50"), ".2f")
    row("  stream time p99 ms", lambda t: ("sse", t, "stream_ms_p99"), ".2f")
    row("  first event p50 ms", lambda t: ("sse", t, "first_event_ms_p50"), ".2f")
    L.append(f"{'  added per event p50 vs direct ms':<40}" + "".join(
        f"{fmt(derived.get(f'sse {t} added ms/event') if t != 'direct' else None, '.4f'):>{w}}" for t in present))
    row("  proxy CPU us/event", lambda t: ("sse", t, "proxy_cpu_us_per_event"), ".0f")
    row("  client CPU us/event", lambda t: ("sse", t, "client_cpu_us_per_event"), ".1f")
    L.append(f"{'  errors (sum of runs)':<40}" + "".join(
        f"{sum(sum((get(r, 'sse', t, 'errors') or {}).values()) for r in runs):>{w}}" for t in present))
    eng = med(runs, "engine", "obs_per_s")
    L.append(f"{'engine check_payload observations/s':<40}{fmt(eng, ',.0f'):>{w}}  (one core, in-process, no I/O)")
    L.append("")
    L.append("RATIOS (median of per-run ratios; throughput = wrk req/s)")
    gws = [g for g in GATEWAYS if g in present]
    cols = [f"{g}/{b}" for g in gws for b in ("direct", "nginx")] + [f"{g}/gw-memory" for g in gws if g != "gw-memory"]
    head = f"{'figure':<22}" + "".join(f"{c:>24}" for c in cols)
    L.append(head)
    L.append("-" * len(head))
    for wl in ("SendMessage", "GetTask"):
        L.append(f"{wl + ' req/s':<22}" + "".join(f"{fmt(derived.get(f'{wl} {c}'), '.3f'):>24}" for c in cols))
    sse_cells = []
    for c in cols:
        g, base = c.split("/")
        v = derived.get(f"sse {g}/direct events/s") if base == "direct" else None
        sse_cells.append(f"{fmt(v, '.3f'):>24}")
    L.append(f"{'SSE events/s':<22}" + "".join(sse_cells))
    L.append("")
    L.append("GOALS (issue: Benchmark harness)")
    head = f"{'goal':<52}" + "".join(f"{g:>16}" for g in gws)
    L.append(head)
    L.append("-" * len(head))
    verdicts: dict[str, dict[str, Any]] = {}

    def verdict(v: float | None, op: str, thr: float) -> str:
        if v is None:
            return "n/a"
        return "met" if (v >= thr if op == ">=" else v <= thr) else "NOT met"

    for label, key, op, thr in GOALS:
        cells = []
        for g in gws:
            if key.startswith("@sse_eps"):
                v = med(runs, "sse", g, "events_per_s")
            else:
                v = derived.get(key.format(g=g))
            vd = verdict(v, op, thr)
            verdicts.setdefault(label, {})[g] = {"value": v, "verdict": vd}
            spec = ".0f" if thr >= 100 else ".3f"
            cells.append(f"{fmt(v, spec) + ' ' + vd:>16}")
        L.append(f"{label:<52}" + "".join(cells))
    for label, key, thr, g in (("ledger: SQLite >= 0.8x memory (SendMessage req/s)", "SendMessage gw-sqlite/gw-memory", 0.8, "gw-sqlite"),
                               ("ledger: Redis >= 0.7x memory (SendMessage req/s)", "SendMessage gw-redis/gw-memory", 0.7, "gw-redis"),
                               ("ledger: SQLite >= 0.8x memory (GetTask req/s)", "GetTask gw-sqlite/gw-memory", 0.8, "gw-sqlite"),
                               ("ledger: Redis >= 0.7x memory (GetTask req/s)", "GetTask gw-redis/gw-memory", 0.7, "gw-redis")):
        v = derived.get(key)
        vd = verdict(v, ">=", thr)
        verdicts[label] = {g: {"value": v, "verdict": vd}}
        L.append(f"{label:<52}" + "".join(f"{fmt(v, '.3f') + ' ' + vd if x == g else '':>16}" for x in gws))
    vd = verdict(eng, ">=", 200_000)
    verdicts["engine >= 200000 observations/s"] = {"engine": {"value": eng, "verdict": vd}}
    L.append(f"{'engine >= 200,000 observations/s':<52}{fmt(eng, ',.0f') + ' ' + vd:>16}")
    cal_targets = [t for t in CALIBRATION if any(t in (get(r, "calibration", "wrk") or {}) for r in runs)]
    if cal_targets:
        L.append("")
        L.append("CALIBRATION (--calibrate): one uvicorn worker (uvloop, httptools) on this machine, same wrk and")
        L.append("fixed-rate settings. cal-hello answers a fixed body (no upstream); cal-httpx relays with httpx and")
        L.append("the gateway's pool limits, nothing else; cal-raw relays over a raw asyncio keep-alive pool.")
        head = f"{'figure':<40}" + "".join(f"{t:>{w}}" for t in cal_targets) + f"{'gw-memory':>{w}}"
        L.append(head)
        L.append("-" * len(head))

        def crow(label: str, key: str, spec: str, kind: str = "wrk") -> None:
            cells = [f"{fmt(med(runs, 'calibration', kind, t, key), spec):>{w}}" for t in cal_targets]
            gw = med(runs, kind, "SendMessage", "gw-memory", key) if kind == "wrk" else med(runs, kind, "gw-memory", key)
            L.append(f"{label:<40}" + "".join(cells) + f"{fmt(gw, spec):>{w}}")

        crow("SendMessage saturation req/s (wrk)", "rps", ".0f")
        crow("  latency p50 ms (wrk)", "p50_ms", ".2f")
        crow("  server CPU us/request", "proxy_cpu_us_per_req", ".0f")
        crow(f"fixed {s.rate:g}/s p50 ms", "p50_ms", ".3f", "fixed")
        crow("  p99 ms", "p99_ms", ".3f", "fixed")
        L.append(f"{'  added p50 vs direct ms':<40}" + "".join(
            f"{fmt(derived.get(f'fixed p50 {t}-direct ms'), '.3f'):>{w}}" for t in cal_targets)
            + f"{fmt(derived.get('fixed p50 gw-memory-direct ms'), '.3f'):>{w}}")
        L.append(f"{'  req/s / nginx req/s':<40}" + "".join(
            f"{fmt(derived.get(f'SendMessage {t}/nginx'), '.3f'):>{w}}" for t in cal_targets)
            + f"{fmt(derived.get('SendMessage gw-memory/nginx'), '.3f'):>{w}}")
        L.append(f"{'  gw-memory req/s / this':<40}" + "".join(
            f"{fmt(derived.get(f'SendMessage gw-memory/{t}'), '.3f'):>{w}}" for t in cal_targets))
    if any(r.get("sdk") for r in runs):
        L.append("")
        L.extend(sdk_section(runs, s, derived))
    L.append("")
    L.append("ODDITIES (gateway /metrics after each run, gateway logs, client-side checks)")
    odd = False
    wrk_calls = 2 if s.warmup > 0 else 1  # wrk invocations per target and workload
    in_flight = wrk_calls * s.wrk_connections
    for i, r in enumerate(runs):
        for g, m in (r.get("metrics") or {}).items():
            for k, v in (m.get("not_ok") or {}).items():
                why = ""
                if 'outcome="client_disconnected"' in k and v <= in_flight:
                    why = (f"  (expected: each wrk invocation ends with up to {s.wrk_connections} requests in "
                           f"flight; {wrk_calls} invocation(s) x {s.wrk_connections} = {in_flight} at most)")
                L.append(f"  run {i + 1} {g}: requests_total{k} = {v:.0f}{why}")
                odd = True
            for k, v in (m.get("watched") or {}).items():
                if k.startswith("a2a_gateway_upstream_degraded") and not v:
                    continue
                L.append(f"  run {i + 1} {g}: {k} = {v:g}")
                odd = True
            if m.get("scrape_error"):
                L.append(f"  run {i + 1} {g}: /metrics scrape failed: {m['scrape_error']}")
                odd = True
        for g, lg in (r.get("logs") or {}).items():
            if lg["non_info"]:
                L.append(f"  run {i + 1} {g} log: {lg['non_info']} e.g. {lg['samples'][:2]}")
                odd = True
        for kind in ("fixed", "sse"):
            for t, res in (r.get(kind) or {}).items():
                if res.get("errors"):
                    L.append(f"  run {i + 1} {kind} {t}: client-side errors {res['errors']}")
                    odd = True
        for wl, per in (r.get("wrk") or {}).items():
            for t, res in per.items():
                if res["non2xx"] or res["socket_errors"]:
                    L.append(f"  run {i + 1} wrk {wl} {t}: non-2xx {res['non2xx']}, socket errors {res['socket_errors']}")
                    odd = True
        if r.get("engine", {}).get("divergence_or_rejection_findings"):
            L.append(f"  run {i + 1} engine: {r['engine']['divergence_or_rejection_findings']} divergence/rejection findings")
            odd = True
    if not odd:
        L.append("  none: no non-ok outcomes, divergences, upstream/ledger errors, warnings, non-2xx or client-side errors")
    for n in notes:
        L.append(f"  note: {n}")
    if profile_text:
        L.append("")
        L.append(profile_text)
    doc = {"settings": dataclasses.asdict(s), "machine": machine, "runs": runs, "derived_per_run": derived_runs,
           "derived_median": derived, "goals": verdicts, "notes": notes}
    return "\n".join(L), doc


def sdk_section(runs: list[dict[str, Any]], s: Settings, derived: dict[str, float | None]) -> list[str]:
    """The "REAL a2a-sdk WORKER" section (--sdk-worker)."""
    w = 11
    present = [t for t in SDK_TARGETS if any(t in (get(r, "sdk", "sse") or {}) for r in runs)]
    L = ["REAL a2a-sdk WORKER (--sdk-worker)"]
    L.extend(textwrap.wrap(
        "upstream: demo/worker.py (a2a-sdk, uvicorn, 1 process, in-memory task store) instead of the canned "
        "worker; a fresh worker, nginx and gateways each run. SendMessage \"hi\" is blocking and answered with "
        f"a COMPLETED task + artifact; wrk settings as above. SSE: {s.sse_streams} sequential "
        "SendStreamingMessage \"hi\" streams (task, WORKING, artifact, COMPLETED). wrk counts HTTP status only; "
        "each target was probed once with a full JSON check before.", 110, subsequent_indent="  "))
    head = f"{'figure':<40}" + "".join(f"{t:>{w}}" for t in present)
    L.append(head)
    L.append("-" * len(head))

    def row(label: str, path: Callable[[str], tuple[str, ...]], spec: str) -> None:
        L.append(f"{label:<40}" + "".join(f"{fmt(med(runs, 'sdk', *path(t)), spec):>{w}}" for t in present))

    if any(get(r, "sdk", "wrk") for r in runs):
        row("SendMessage saturation req/s (wrk)", lambda t: ("wrk", t, "rps"), ".0f")
        row(f"  latency p50 ms (wrk, c{s.wrk_connections})", lambda t: ("wrk", t, "p50_ms"), ".2f")
        row("  latency p99 ms (wrk)", lambda t: ("wrk", t, "p99_ms"), ".2f")
        row("  proxy CPU us/request", lambda t: ("wrk", t, "proxy_cpu_us_per_req"), ".0f")
        row("  worker CPU us/request", lambda t: ("wrk", t, "worker_cpu_us_per_req"), ".0f")
        L.append(f"{'  non-2xx / socket errors (sum of runs)':<40}" + "".join(
            f"{str(sum(get(r, 'sdk', 'wrk', t, 'non2xx') or 0 for r in runs)) + '/' + str(sum(get(r, 'sdk', 'wrk', t, 'socket_errors') or 0 for r in runs)):>{w}}"
            for t in present))
    row("SSE events/s", lambda t: ("sse", t, "events_per_s"), ".0f")
    row("  streams/s", lambda t: ("sse", t, "streams_per_s"), ".0f")
    L.append(f"{'  events per stream':<40}" + "".join(
        f"{fmt(median_of([(get(r, 'sdk', 'sse', t, 'events') or 0) / max(1, get(r, 'sdk', 'sse', t, 'streams') or 1) for r in runs if get(r, 'sdk', 'sse', t)]), '.1f'):>{w}}"
        for t in present))
    row("  stream time p50 ms", lambda t: ("sse", t, "stream_ms_p50"), ".2f")
    row("  stream time p99 ms", lambda t: ("sse", t, "stream_ms_p99"), ".2f")
    row("  first event p50 ms", lambda t: ("sse", t, "first_event_ms_p50"), ".2f")
    L.append(f"{'  added stream time p50 vs direct ms':<40}" + "".join(
        f"{fmt(derived.get(f'sdk sse {t} added ms/stream'), '.3f'):>{w}}" for t in present))
    row("  proxy CPU us/event", lambda t: ("sse", t, "proxy_cpu_us_per_event"), ".0f")
    L.append(f"{'  errors (sum of runs)':<40}" + "".join(
        f"{sum(sum((get(r, 'sdk', 'sse', t, 'errors') or {}).values()) for r in runs):>{w}}" for t in present))
    gws = [g for g in ("gw-memory", "gw-sqlite") if g in present]
    cols = [f"{g}/{b}" for g in gws for b in ("direct", "nginx")]
    L.append("ratios (median of per-run ratios)")
    head = f"{'figure':<40}" + "".join(f"{c:>19}" for c in cols)
    L.append(head)
    L.append("-" * len(head))
    L.append(f"{'SendMessage req/s':<40}" + "".join(f"{fmt(derived.get(f'sdk wrk {c}'), '.3f'):>19}" for c in cols))
    L.append(f"{'SSE events/s':<40}" + "".join(f"{fmt(derived.get(f'sdk sse {c}'), '.3f'):>19}" for c in cols))
    odd = []
    in_flight = (2 if s.warmup > 0 else 1) * s.wrk_connections
    for i, r in enumerate(runs):
        sdk = r.get("sdk") or {}
        for t, problems in (sdk.get("probe") or {}).items():
            if problems:
                odd.append(f"  run {i + 1} {t}: probe problems {problems}")
        for g, m in (sdk.get("metrics") or {}).items():
            for k, v in (m.get("not_ok") or {}).items():
                why = ("  (expected: wrk ends with requests in flight)"
                       if 'outcome="client_disconnected"' in k and v <= in_flight else "")
                odd.append(f"  run {i + 1} {g}: requests_total{k} = {v:.0f}{why}")
            for k, v in (m.get("watched") or {}).items():
                if not (k.startswith("a2a_gateway_upstream_degraded") and not v):
                    odd.append(f"  run {i + 1} {g}: {k} = {v:g}")
            if m.get("scrape_error"):
                odd.append(f"  run {i + 1} {g}: /metrics scrape failed: {m['scrape_error']}")
        for g, lg in (sdk.get("logs") or {}).items():
            if lg["non_info"]:
                odd.append(f"  run {i + 1} {g} log: {lg['non_info']} e.g. {lg['samples'][:2]}")
        for t, res in (sdk.get("sse") or {}).items():
            if res.get("errors"):
                odd.append(f"  run {i + 1} sse {t}: client-side errors {res['errors']}")
    L.append("oddities (sdk gateways' /metrics and logs, probes, SSE checks):")
    L.extend(odd or ["  none"])
    return L


# --------------------------------------------------------------------------- profile


def _module_of(frame: str) -> str:
    """'func (pkg/mod.py:12)' -> a component: the top package, or gateway/<subpackage>."""
    path = frame.rsplit("(", 1)[-1].split(":", 1)[0].replace(str(ROOT) + "/", "")
    for marker in ("site-packages/", "lib/python3.11/", "lib/python3.12/"):
        path = path.split(marker, 1)[-1]
    parts = path.split("/")
    if parts[0] == "gateway" and len(parts) > 2:
        return "gateway/" + parts[1]
    return parts[0].removesuffix(".py") or "?"


def _short(frame: str) -> str:
    frame = frame.replace(str(ROOT) + "/", "")
    for marker in ("site-packages/", "lib/python3.11/", "lib/python3.12/"):
        if marker in frame:
            head, tail = frame.split("(", 1)
            return head + "(" + tail.split(marker, 1)[1]
    return frame


def summarize_raw(path: Path, top: int = 20) -> str:
    """Self time by component and by frame, and inclusive time of gateway frames, from
    py-spy's raw (collapsed) output."""
    self_c: collections.Counter[str] = collections.Counter()
    self_mod: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f for f in stack.split(";") if f]
        if not frames or not n.isdigit():
            continue
        count = int(n)
        total += count
        self_c[_short(frames[-1])] += count
        self_mod[_module_of(frames[-1])] += count
        for f in {_short(f) for f in frames}:
            incl[f] += count
    if not total:
        return "  (no samples)"
    lines = [f"  {total} samples (idle excluded)", "  self time by component:"]
    lines += [f"    {100 * c / total:5.1f}%  {m}" for m, c in self_mod.most_common(14)]
    lines.append("  top self frames:")
    lines += [f"    {100 * c / total:5.1f}%  {f}" for f, c in self_c.most_common(top)]
    lines.append("  inclusive, below the event loop (gateway/ frames and the HTTP client/server):")
    skip = ("<module>", "main (", "_serve (", "_run_server", "Server.run", "asyncio_run", "Runner.run",
            "_run_module_as_main", "_run_code")
    keep = ("gateway/", "httpx/", "httpcore/", "uvicorn/", "starlette/", "logging/", "prometheus_client/")
    lines += [f"    {100 * c / total:5.1f}%  {f}" for f, c in incl.most_common(500)
              if any(k in f for k in keep) and not any(sk in f for sk in skip)][:top]
    return "\n".join(lines)


async def profile(env: Env, stamp: str) -> str:
    pyspy = shutil.which("py-spy") or (str(Path(PY).parent / "py-spy") if (Path(PY).parent / "py-spy").exists() else None)
    if not pyspy:
        return "PROFILE: skipped (py-spy not installed: pip install py-spy)"
    s = env.settings
    out = [f"PROFILE of gw-memory with py-spy (record --rate 200, blocking mode for whole stacks, "
           f"{s.profile_seconds:g}s per workload: wrk SendMessage saturation -c{s.wrk_connections}, then back-to-back "
           "SSE streams; separate from the measured runs)"]
    with gateways(env, 99) as gws:
        port, gw = gws["gw-memory"]
        await probe_target(port)
        for wl in ("SendMessage", "SSE"):
            raw = env.tmp / f"profile-{wl}.txt"
            spy = subprocess.Popen(
                [pyspy, "record", "--pid", str(gw.pid), "--rate", "200",
                 "--duration", str(int(s.profile_seconds)), "--format", "raw", "-o", str(raw)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                await asyncio.sleep(1.0)  # py-spy attaches
                if wl == "SendMessage" and env.wrk:
                    script = env.tmp / "SendMessage.lua"
                    script.write_text(WRK_LUA % SEND_BODY.decode())
                    await asyncio.to_thread(run_wrk, env.wrk, script, port, s.profile_seconds, s)
                else:
                    deadline = time.monotonic() + s.profile_seconds
                    while time.monotonic() < deadline:
                        await sse_streams(port, 20)
            finally:
                try:
                    _, err = spy.communicate(timeout=s.profile_seconds + 30)
                except subprocess.TimeoutExpired:
                    spy.kill()
                    _, err = spy.communicate(timeout=10)
            if spy.returncode:
                out.append(f"  py-spy failed (rc {spy.returncode}): {err.decode(errors='replace')[-500:]}")
            if raw.exists():
                collapsed = RESULTS / f"profile-{stamp}-{wl}.collapsed.txt"
                shutil.copy(raw, collapsed)
                out.append(f"[{wl}] collapsed stacks (flamegraph.pl / speedscope input): bench/results/{collapsed.name}")
                out.append(summarize_raw(raw))
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def machine_info() -> dict[str, str]:
    def version(argv: list[str]) -> str:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
            return (p.stdout + p.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return f"{argv[0]}: not available"

    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    from importlib.metadata import PackageNotFoundError, version as pkg_version

    def pv(name: str) -> str:
        try:
            return pkg_version(name)
        except PackageNotFoundError:
            return "-"

    head = version(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "gateway"], capture_output=True,
                           text=True, check=False).stdout.strip().splitlines()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cores": str(os.cpu_count()), "cpu": cpu,
        "python": platform.python_version(), "platform": platform.platform(),
        "nginx": version([nginx, "-v"]), "wrk": version(["wrk", "--version"]).split(" Copyright")[0],
        "redis": version(["redis-server", "--version"]).split(" sha=")[0],
        "gateway": __version__,
        "git": f"{head}" + (f" + {len(dirty)} uncommitted path(s) under gateway/" if dirty else ""),
        "uvicorn": pv("uvicorn"), "httpx": pv("httpx"), "starlette": pv("starlette"), "orjson": pv("orjson"),
        "uvloop": pv("uvloop"),
    }


async def main_async(s: Settings) -> int:
    notes: list[str] = []
    wrk = ensure_tool("wrk", "wrk", notes)
    nginx = ensure_tool("nginx", "nginx", notes)
    redis_bin = shutil.which("redis-server")
    if not redis_bin:
        notes.append("redis-server not installed: gw-redis skipped (apt-get install redis-server)")
    machine = machine_info()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(exist_ok=True)
    runs: list[dict[str, Any]] = []
    profile_text = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="a2a-bench-") as tmpname, contextlib.ExitStack() as stack:
        tmp = Path(tmpname)
        env = Env(s, tmp, free_port(), None, wrk, redis_bin, notes, nginx_bin=nginx)
        env.worker = Proc("canned-worker", [PY, "-m", "bench.canned_worker", "--port", str(env.worker_port)],
                          tmp / "worker.log", cwd=ROOT, env=child_env())
        stack.callback(env.worker.stop)
        wait_port(env.worker_port, env.worker)
        if nginx:
            env.nginx_port = free_port()
            conf = nginx_conf(tmp, env.nginx_port, env.worker_port)
            env.nginx = Proc("nginx", [nginx, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(conf),
                                       "-g", "daemon off;"], tmp / "nginx.out")
            stack.callback(env.nginx.stop)
            wait_port(env.nginx_port, env.nginx)
        if s.calibrate:
            cal_env = {**child_env(), "CALIBRATION_UPSTREAM_PORT": str(env.worker_port)}
            for t, app in CALIBRATION.items():
                port = free_port()
                proc = Proc(t, [PY, "-m", "uvicorn", f"bench.calibration_apps:{app}", "--host", HOST,
                                "--port", str(port), "--log-level", "warning", "--no-access-log"],
                            tmp / f"{t}.log", cwd=ROOT, env=cal_env)
                stack.callback(proc.stop)
                env.calibration[t] = (port, proc)
            for t, (port, proc) in env.calibration.items():
                wait_port(port, proc)
        for r in range(s.runs):
            print(f"run {r + 1}/{s.runs} ...", flush=True)
            runs.append(await measure_run(env, r))
            if s.sdk_worker:
                t_sdk = time.monotonic()
                runs[-1]["sdk"] = await measure_sdk_run(env, r)
                runs[-1]["sdk"]["wall_seconds"] = time.monotonic() - t_sdk
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
    (RESULTS / f"run-{stamp}.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2,
                                                            default=str))
    print(f"\nsaved to bench/results/run-{stamp}.txt and .json")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 run, short durations")
    parser.add_argument("--runs", type=int, help="runs (default 3; --quick: 1)")
    parser.add_argument("--duration", type=float, help="wrk seconds per target and workload (default 8; --quick: 2)")
    parser.add_argument("--rate", type=float, default=200, help="fixed-rate requests/s (default 200)")
    parser.add_argument("--rate-seconds", type=float, help="fixed-rate seconds (default 5; --quick: 2)")
    parser.add_argument("--sse-streams", type=int, help="sequential streams per target (default 200; --quick: 30)")
    parser.add_argument("--wrk-threads", type=int, default=1)
    parser.add_argument("--wrk-connections", type=int, default=32)
    parser.add_argument("--profile", action="store_true", help="also profile gw-memory with py-spy")
    parser.add_argument("--calibrate", action="store_true",
                        help="also measure bare uvicorn, a minimal httpx proxy and a minimal raw-asyncio "
                        "proxy (SendMessage saturation and fixed rate; adds ~50 s per run)")
    parser.add_argument("--sdk-worker", action="store_true",
                        help="also measure SendMessage saturation and SSE with the real a2a-sdk demo worker "
                        "(demo/worker.py) as the upstream: direct, nginx, gw-memory, gw-sqlite")
    args = parser.parse_args()
    q = args.quick
    s = Settings(
        runs=args.runs if args.runs is not None else (1 if q else 3),
        duration=args.duration or (2 if q else 8), warmup=0.0 if q else 1.0,
        rate=args.rate, rate_seconds=args.rate_seconds or (2 if q else 5),
        sse_streams=args.sse_streams or (30 if q else 200), engine_seconds=0.5 if q else 2.0,
        wrk_threads=args.wrk_threads, wrk_connections=args.wrk_connections, quick=q,
        profile=args.profile, profile_seconds=5 if q else 10, calibrate=args.calibrate,
        sdk_worker=args.sdk_worker,
    )
    if s.runs < 0 or s.duration <= 0 or s.rate <= 0:
        parser.error("runs >= 0, duration > 0 and rate > 0")
    try:
        import uvloop
    except ImportError:
        raise SystemExit(asyncio.run(main_async(s))) from None
    raise SystemExit(uvloop.run(main_async(s)))


if __name__ == "__main__":
    main()
