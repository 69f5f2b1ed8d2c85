"""The load of ``python -m bench.run``: request bodies, a raw keep-alive HTTP/1.1 client, the
probes, and the workloads (fixed rate, sequential and concurrent SSE, ``wrk`` saturation).

Each workload returns a plain dict of figures (milliseconds as ``*_ms``, rates per second)
and counts what went wrong in ``errors`` instead of raising.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import json
import re
import resource
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.targets import HOST, Settings

STREAM_EVENTS = 100
GET_TASK_ID = "t-get-1"

# ~1 KB SendMessage body (docs/protocol.md §3.4).
_TEXT = ("Summarize the quarterly report for the operations team, list the three largest risks, "
         "and propose one mitigation for each; keep it under two hundred words. ") * 6
SEND_BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
    "message": {"messageId": "bench-m-1", "role": "ROLE_USER", "parts": [{"text": _TEXT.strip()}]},
    "configuration": {"historyLength": 0}}})
GET_BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                         "params": {"id": GET_TASK_ID, "historyLength": 0}})


def _stream_body(text: str, message_id: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}})


STREAM_BODY = _stream_body("stream please", "bench-s-1")  # the canned worker's mixed shape
TOKENS_BODY = _stream_body("tokens please", "bench-t-1")  # its append-chunk shape
# --sdk-worker: the real a2a-sdk demo worker (demo/worker.py); "hi" completes a task with an artifact.
SDK_SEND_BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
    "message": {"messageId": "bench-sdk-m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
    "configuration": {"historyLength": 0}}})
SDK_STREAM_BODY = _stream_body("hi", "bench-sdk-s-1")
_FAILURES = (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError)


# --------------------------------------------------------------------------- raw HTTP client


def raw_request(port: int, body: bytes) -> bytes:
    return (f"POST / HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
            f"A2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


_RUN = uuid.uuid4().hex[:8].encode()  # messageIds of this run: unique, or sends are retries (docs/retries.md)
_MESSAGE_ID = re.compile(rb'"messageId":"([^"]*)"')
_sent = itertools.count()


def with_id(body: bytes, rid: int) -> bytes:
    """``body`` with the JSON-RPC id ``rid`` and, for a send, a messageId no other request of
    any run has: the same messageId again is a retry, answered from its key (docs/retries.md)."""
    body = body.replace(b'"id":1,', b'"id":%d,' % rid, 1)
    return _MESSAGE_ID.sub(lambda m: b'"messageId":"%s-%s-%d"' % (m.group(1), _RUN, next(_sent)), body, 1)


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
        keep = b"\r\nconnection: close" not in lower
        pos = lower.find(b"\r\ncontent-length:")
        if pos >= 0:
            end = lower.find(b"\r\n", pos + 2)
            parts = [await r.readexactly(int(lower[pos + 17:end]))]
        elif b"\r\ntransfer-encoding: chunked" in lower:
            parts = await self._chunked(r, on_chunk)
            on_chunk = None
        elif status not in (204, 304):
            parts = []
            while data := await r.read(65536):
                if on_chunk:
                    on_chunk(data)
                parts.append(data)
            keep, on_chunk = False, None
        else:
            parts = []
        if on_chunk and parts:
            on_chunk(parts[0])
        if not keep:
            self.close()
        return status, b"".join(parts)

    @staticmethod
    async def _chunked(r: asyncio.StreamReader, on_chunk: Callable[[bytes], None] | None) -> list[bytes]:
        parts = []
        while True:
            line = await r.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                while (await r.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return parts
            data = (await r.readexactly(size + 2))[:-2]
            if on_chunk:
                on_chunk(data)
            parts.append(data)


def check_send(status: int, body: bytes, rid: int) -> str | None:
    if status != 200:
        return f"HTTP {status}"
    if b'"error"' in body[:200]:
        return "jsonrpc error: " + body[:200].decode(errors="replace")
    if not body.startswith(b'{"jsonrpc":"2.0","id":%d,' % rid) or b"TASK_STATE_COMPLETED" not in body:
        return "unexpected answer: " + body[:200].decode(errors="replace")
    return None


async def probe_target(port: int, *, sdk: bool = False) -> list[str]:
    """One SendMessage, one GetTask (canned worker only) and one stream of each shape (canned
    worker: mixed and append-chunk) through the target, checked in full. ``sdk``: the target
    is in front of the real a2a-sdk worker ("hi" bodies; its answer must carry an artifact;
    one stream of any number of events)."""
    problems = []
    conn = Conn(port)
    send_body = SDK_SEND_BODY if sdk else SEND_BODY
    streams = [SDK_STREAM_BODY] if sdk else [STREAM_BODY, TOKENS_BODY]
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
        for rid, stream_body in enumerate(streams, start=9):
            res = await asyncio.wait_for(one_stream(conn, raw_request(port, with_id(stream_body, rid)), rid, expect), 10)
            if res[3]:
                problems.append(f"stream probe: {res[3]}")
    except _FAILURES as exc:
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
        except _FAILURES as exc:
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


@dataclasses.dataclass
class _Tally:
    """What the streams of one SSE workload saw."""

    times: list[float] = dataclasses.field(default_factory=list)  # ms per stream
    firsts: list[float] = dataclasses.field(default_factory=list)  # ms to the first chunk
    errors: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    events: int = 0


async def _stream_lane(port: int, rids: range, body: bytes, expect: int | None, tally: _Tally,
                       timeout: float = 10) -> None:
    """Streams ``rids`` one after the other over one keep-alive connection."""
    conn = Conn(port)
    try:
        for rid in rids:
            try:
                total, first, n, problem = await asyncio.wait_for(
                    one_stream(conn, raw_request(port, with_id(body, rid)), rid, expect), timeout)
            except _FAILURES as exc:
                tally.errors[type(exc).__name__] += 1
                conn.close()
                continue
            tally.events += n
            tally.times.append(total * 1000)
            tally.firsts.append(first * 1000)
            if problem:
                tally.errors[problem[:80]] += 1
    finally:
        conn.close()


async def sse_streams(port: int, count: int, body: bytes = STREAM_BODY,
                      expect: int | None = STREAM_EVENTS) -> dict[str, Any]:
    """``count`` sequential streams over one keep-alive connection."""
    tally = _Tally()
    started = time.perf_counter()
    await _stream_lane(port, range(5000, 5000 + count), body, expect, tally)
    elapsed = time.perf_counter() - started
    return {"streams": count, "events": tally.events, "seconds": elapsed, "events_per_s": tally.events / elapsed,
            "streams_per_s": count / elapsed,
            "stream_ms_p50": pct(tally.times, 50), "stream_ms_p99": pct(tally.times, 99),
            "first_event_ms_p50": pct(tally.firsts, 50), "errors": dict(tally.errors)}


async def sse_concurrent(port: int, count: int, concurrency: int, body: bytes = TOKENS_BODY) -> dict[str, Any]:
    """``count`` streams (default: the append-chunk shape) over ``concurrency`` keep-alive
    connections at once, each connection running its share of them one after the other.
    ``events_per_s``: all events read / wall seconds from the first request to the last event."""
    tally = _Tally()
    shares = [count // concurrency + (1 if i < count % concurrency else 0) for i in range(concurrency)]
    lanes = [range(20_000 + 10_000 * i, 20_000 + 10_000 * i + n) for i, n in enumerate(shares) if n]
    started = time.perf_counter()
    await asyncio.gather(*(_stream_lane(port, rids, body, STREAM_EVENTS, tally, timeout=30) for rids in lanes))
    elapsed = time.perf_counter() - started
    return {"streams": count, "connections": len(lanes), "events": tally.events, "seconds": elapsed,
            "events_per_s": tally.events / elapsed, "streams_per_s": count / elapsed,
            "stream_ms_p50": pct(tally.times, 50), "stream_ms_p99": pct(tally.times, 99),
            "first_event_ms_p50": pct(tally.firsts, 50), "errors": dict(tally.errors)}


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
    non2xx = 0
    for line in text.splitlines():
        if line.startswith("WRKJSON "):
            doc = json.loads(line[8:])
        elif "Non-2xx or 3xx responses:" in line:
            non2xx = int(line.split(":")[1])
    if not doc:
        raise RuntimeError(f"wrk produced no summary (rc {out.returncode}): {text[-1000:]}")
    secs = doc["duration_us"] / 1e6
    return {"rps": doc["requests"] / secs, "requests": doc["requests"], "non2xx": max(non2xx, doc["status"]),
            "socket_errors": doc["connect"] + doc["read"] + doc["write"] + doc["timeout"],
            "p50_ms": doc["p50"] / 1000, "p99_ms": doc["p99"] / 1000, "p999_ms": doc["p999"] / 1000,
            "mean_ms": doc["mean"] / 1000, "max_ms": doc["max"] / 1000,
            "client_cpu_us_per_req": wrk_cpu / max(1, doc["requests"]) * 1e6}


def wrk_script(tmp: Path, name: str, body: bytes) -> Path:
    """The wrk Lua script that POSTs ``body``, written as ``tmp/<name>.lua``."""
    script = tmp / f"{name}.lua"
    script.write_text(WRK_LUA % body.decode())
    return script
