"""One run of ``python -m bench.run``: every workload against every target, the CPU and memory
of the target processes, the gateways' ``/metrics`` and logs.

A run's result is a plain dict: ``wrk[workload][target]``, ``fixed[target]``, ``sse[target]``
(sequential mixed-shape streams), ``ssec[target]`` (concurrent append-chunk streams),
``rss[gateway]`` (``idle`` / ``loaded`` per process), ``probe``, ``metrics``, ``logs``,
``engine``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.engine import engine_bench
from bench.load import (GET_BODY, SDK_SEND_BODY, SDK_STREAM_BODY, SEND_BODY, fixed_rate, probe_target, run_wrk,
                        self_cpu, sse_concurrent, sse_streams, wrk_script)
from bench.targets import HOST, PY, ROOT, SDK_TARGETS, TARGETS, Env, Proc, child_env, free_port, gateways, \
    start_nginx, wait_ready

CLK_TCK = os.sysconf("SC_CLK_TCK")
Ports = dict[str, tuple[int, Proc]]


# --------------------------------------------------------------------------- CPU and memory


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live children (nginx's and granian's workers, ``serve --workers``')."""
    with contextlib.suppress(OSError):
        return [pid, *(int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    return [pid]


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its live children, in seconds."""
    total = 0.0
    for p in process_tree(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def memory(pid: int) -> list[dict[str, Any]]:
    """Per process of :func:`process_tree`: ``pid``, ``role`` (``main``; ``child N``),
    ``rss_kb`` (VmRSS) and ``hwm_kb`` (VmHWM, the peak RSS so far) from /proc/PID/status."""
    out = []
    for i, p in enumerate(process_tree(pid)):
        fields: dict[str, Any] = {"pid": p, "role": "main" if i == 0 else f"child {i}"}
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields["rss_kb" if key == "VmRSS" else "hwm_kb"] = int(value.split()[0])
        out.append(fields)
    return out


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


# --------------------------------------------------------------------------- one run


def _rotated(names: list[str], run: int) -> list[str]:
    """``names`` rotated by ``run``, so no target is always first."""
    k = run % len(names)
    return names[k:] + names[:k]


async def _probe_all(env: Env, run: int, ports: Ports, order: list[str], out: dict[str, Any],
                     sdk: bool = False) -> None:
    for t in order:
        for _ in range(20):  # a gateway may still be fetching the worker's card
            problems = await probe_target(ports[t][0], sdk=sdk)
            if not problems:
                break
            await asyncio.sleep(0.25)
        out[t] = problems
        if problems:
            env.notes.append(f"run {run + 1}: {'sdk ' if sdk else ''}{t} probe problems: {problems}")


def _wrk_one(env: Env, script: Path, port: int, proc: Proc, worker: Proc, proxied: bool) -> dict[str, Any]:
    """wrk (after its warm-up) against ``port``; with the CPU per request of ``proc`` (when
    ``proxied``) and of ``worker``."""
    s = env.settings
    assert env.wrk is not None
    if s.warmup > 0:
        run_wrk(env.wrk, script, port, s.warmup, s)
    c0, w0 = cpu_seconds(proc.pid), cpu_seconds(worker.pid)
    res = run_wrk(env.wrk, script, port, s.duration, s)
    c1, w1 = cpu_seconds(proc.pid), cpu_seconds(worker.pid)
    if proxied:
        res["proxy_cpu_us_per_req"] = (c1 - c0) / max(1, res["requests"]) * 1e6
    res["worker_cpu_us_per_req"] = (w1 - w0) / max(1, res["requests"]) * 1e6
    return res


def _print_wrk(label: str, t: str, res: dict[str, Any], sockerr: bool = True) -> None:
    print(f"  {label} {t:<17} {res['rps']:>9.0f} req/s  p50 {res['p50_ms']:.2f} ms  p99 {res['p99_ms']:.2f} ms  "
          f"non2xx {res['non2xx']}" + (f"  sockerr {res['socket_errors']}" if sockerr else ""), flush=True)


async def _wrk_workloads(env: Env, run: int, ports: Ports, order: list[str], out: dict[str, Any]) -> None:
    assert env.worker is not None
    for workload, body in (("SendMessage", SEND_BODY), ("GetTask", GET_BODY)):
        script = wrk_script(env.tmp, workload, body)
        out["wrk"][workload] = {}
        for t in order:
            port, proc = ports[t]
            res = out["wrk"][workload][t] = _wrk_one(env, script, port, proc, env.worker, t != "direct")
            _print_wrk(f"run {run + 1} wrk {workload:<11}", t, res)
            await asyncio.sleep(0.3)
        if workload == "SendMessage":
            for t, (port, proc) in env.calibration.items():
                res = _wrk_one(env, script, port, proc, env.worker, True)
                out.setdefault("calibration", {}).setdefault("wrk", {})[t] = res
                _print_wrk(f"run {run + 1} wrk {workload:<11}", t, res, sockerr=False)
                await asyncio.sleep(0.3)


async def _fixed_workloads(env: Env, run: int, ports: Ports, order: list[str], out: dict[str, Any]) -> None:
    s = env.settings
    for t in order:
        port, _ = ports[t]
        await fixed_rate(port, s.rate, min(1.0, s.rate_seconds / 4))  # warm-up, discarded
        c0 = self_cpu()
        res = await fixed_rate(port, s.rate, s.rate_seconds)
        res["client_cpu_us_per_req"] = (self_cpu() - c0) / max(1, res["requests"]) * 1e6
        out["fixed"][t] = res
        print(f"  run {run + 1} fixed {s.rate:.0f}/s      {t:<17} p50 {res['p50_ms']:.3f} ms  "
              f"p99 {res['p99_ms']:.3f} ms  p99.9 {res['p999_ms']:.3f} ms  errors {sum(res['errors'].values())}",
              flush=True)
    for t, (port, _) in env.calibration.items():
        check = t != "cal-hello"
        await fixed_rate(port, s.rate, min(1.0, s.rate_seconds / 4), check=check)
        res = await fixed_rate(port, s.rate, s.rate_seconds, check=check)
        out.setdefault("calibration", {}).setdefault("fixed", {})[t] = res
        print(f"  run {run + 1} fixed {s.rate:.0f}/s      {t:<17} p50 {res['p50_ms']:.3f} ms  "
              f"p99 {res['p99_ms']:.3f} ms  errors {sum(res['errors'].values())}", flush=True)


def _per_event(res: dict[str, Any], key: str, seconds: float) -> None:
    res[key] = seconds / max(1, res["events"]) * 1e6


async def _sse_workloads(env: Env, run: int, ports: Ports, order: list[str], out: dict[str, Any]) -> None:
    """Sequential mixed-shape streams over one connection (``sse``)."""
    s = env.settings
    for t in order:
        port, proc = ports[t]
        await sse_streams(port, max(3, s.sse_streams // 20))  # warm-up, discarded
        c0, me0 = cpu_seconds(proc.pid), self_cpu()
        res = await sse_streams(port, s.sse_streams)
        _per_event(res, "client_cpu_us_per_event", self_cpu() - me0)
        if t != "direct":
            _per_event(res, "proxy_cpu_us_per_event", cpu_seconds(proc.pid) - c0)
        out["sse"][t] = res
        print(f"  run {run + 1} sse sequential   {t:<17} {res['events_per_s']:>9.0f} events/s  "
              f"stream p50 {res['stream_ms_p50']:.2f} ms  errors {sum(res['errors'].values())}", flush=True)


async def _sse_concurrent_workloads(env: Env, run: int, ports: Ports, order: list[str], out: dict[str, Any]) -> None:
    """Append-chunk streams over ``--sse-concurrency`` connections at once (``ssec``)."""
    s = env.settings
    assert env.worker is not None
    for t in order:
        port, proc = ports[t]
        await sse_concurrent(port, s.sse_concurrency, s.sse_concurrency)  # warm-up: one stream per connection
        c0, w0, me0 = cpu_seconds(proc.pid), cpu_seconds(env.worker.pid), self_cpu()
        res = await sse_concurrent(port, s.sse_concurrent_streams, s.sse_concurrency)
        _per_event(res, "client_cpu_us_per_event", self_cpu() - me0)
        _per_event(res, "worker_cpu_us_per_event", cpu_seconds(env.worker.pid) - w0)
        if t != "direct":
            _per_event(res, "proxy_cpu_us_per_event", cpu_seconds(proc.pid) - c0)
        out["ssec"][t] = res
        cpu = f"{res['proxy_cpu_us_per_event']:.1f}" if t != "direct" else "-"
        print(f"  run {run + 1} sse c{s.sse_concurrency} chunks  {t:<17} {res['events_per_s']:>9.0f} events/s  "
              f"proxy CPU {cpu} us/event  "
              f"errors {sum(res['errors'].values())}", flush=True)


async def measure_run(env: Env, run: int) -> dict[str, Any]:
    """Every workload against every target of one run (fresh gateways)."""
    out: dict[str, Any] = {"wrk": {}, "fixed": {}, "sse": {}, "ssec": {}, "cpu": {}, "probe": {}, "rss": {}}
    with gateways(env, run) as gws:
        assert env.worker is not None
        out["rss"] = {name: {"idle": memory(proc.pid)} for name, (_, proc) in gws.items()}  # before any load
        ports: Ports = {"direct": (env.worker_port, env.worker)}
        if env.nginx_port and env.nginx:
            ports["nginx"] = (env.nginx_port, env.nginx)
        ports.update(gws)
        order = out["order"] = _rotated([t for t in TARGETS if t in ports], run)
        await _probe_all(env, run, ports, order, out["probe"])
        if env.wrk:
            await _wrk_workloads(env, run, ports, order, out)
        await _fixed_workloads(env, run, ports, order, out)
        await _sse_workloads(env, run, ports, order, out)
        await _sse_concurrent_workloads(env, run, ports, order, out)
        for name, (_, proc) in gws.items():
            out["rss"][name]["loaded"] = memory(proc.pid)
        out["metrics"] = {name: scrape(proc.admin_port) for name, (_, proc) in gws.items()}
        logs = {name: proc.log for name, (_, proc) in gws.items()}
    out["logs"] = {name: scan_log(path) for name, path in logs.items()}
    out["engine"] = engine_bench(env.settings.engine_seconds)
    print(f"  run {run + 1} engine {out['engine']['obs_per_s']:>9.0f} observations/s", flush=True)
    return out


# --------------------------------------------------------------------------- --sdk-worker


async def _sdk_workloads(env: Env, run: int, ports: Ports, order: list[str], worker: Proc,
                         out: dict[str, Any]) -> None:
    s = env.settings
    if env.wrk:
        script = wrk_script(env.tmp, "SdkSendMessage", SDK_SEND_BODY)
        for t in order:
            port, proc = ports[t]
            res = out["wrk"][t] = _wrk_one(env, script, port, proc, worker, t != "direct")
            _print_wrk(f"run {run + 1} sdk wrk SendMessage", t, res)
            await asyncio.sleep(0.3)
    for t in order:
        port, proc = ports[t]
        await sse_streams(port, max(3, s.sse_streams // 20), SDK_STREAM_BODY, None)  # warm-up, discarded
        c0 = cpu_seconds(proc.pid)
        res = await sse_streams(port, s.sse_streams, SDK_STREAM_BODY, None)
        if t != "direct":
            _per_event(res, "proxy_cpu_us_per_event", cpu_seconds(proc.pid) - c0)
        out["sse"][t] = res
        print(f"  run {run + 1} sdk sse              {t:<17} {res['events_per_s']:>9.0f} events/s  "
              f"{res['events'] / max(1, res['streams']):.1f} events/stream  stream p50 "
              f"{res['stream_ms_p50']:.2f} ms  errors {sum(res['errors'].values())}", flush=True)


async def measure_sdk_run(env: Env, run: int) -> dict[str, Any]:
    """--sdk-worker: SendMessage saturation (wrk) and SSE with the real a2a-sdk demo worker as the
    upstream of direct / nginx / gw-memory / gw-sqlite. The worker, its nginx and the gateways are
    fresh for each run (the worker's in-memory task store grows with every request)."""
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
        ports: Ports = {"direct": (wport, worker)}
        if env.nginx_bin:
            (sdir / "nginx").mkdir()
            ports["nginx"] = start_nginx(env.nginx_bin, sdir / "nginx", wport, "sdk-nginx")
            stack.callback(ports["nginx"][1].stop)
        gws = stack.enter_context(gateways(env, run, upstream_port=wport, only=("gw-memory", "gw-sqlite"),
                                           prefix="sdk-gw"))
        ports.update(gws)
        order = out["order"] = _rotated([t for t in SDK_TARGETS if t in ports], run)
        await _probe_all(env, run, ports, order, out["probe"], sdk=True)
        await _sdk_workloads(env, run, ports, order, worker, out)
        out["metrics"] = {name: scrape(proc.admin_port) for name, (_, proc) in gws.items()}
        logs = {name: proc.log for name, (_, proc) in gws.items()}
    out["logs"] = {name: scan_log(path) for name, path in logs.items()}
    return out
