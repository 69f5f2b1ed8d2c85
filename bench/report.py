"""The report of ``python -m bench.run``: figures derived within each run (ratios,
differences, projections), medians over runs, the tables, the goals of issue #5 (the harness)
and of issue #16 (the gateway's own cost), memory per process, and what looked odd.

No timing assertions: every goal is reported as met or not met with its numbers.
"""

from __future__ import annotations

import dataclasses
import statistics
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from bench.load import STREAM_EVENTS
from bench.targets import CALIBRATION, GATEWAYS, GRANIAN, SDK_TARGETS, TARGETS, Settings

# --------------------------------------------------------------------------- derived figures


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _derive_wrk(run: dict[str, Any], d: dict[str, float]) -> None:
    for wl, per in run["wrk"].items():
        for g in GATEWAYS:
            if g not in per:
                continue
            for base in ("direct", "nginx"):
                if base in per:
                    d[f"{wl} {g}/{base}"] = per[g]["rps"] / per[base]["rps"]
            if g != "gw-memory" and "gw-memory" in per:
                d[f"{wl} {g}/gw-memory"] = per[g]["rps"] / per["gw-memory"]["rps"]
            cpu = _ratio(per[g].get("proxy_cpu_us_per_req"), (per.get("nginx") or {}).get("proxy_cpu_us_per_req"))
            if cpu is not None:
                d[f"{wl} cpu {g}/nginx"] = cpu
        x2, one = per.get("gw-sqlite-x2"), per.get("gw-sqlite")
        if x2 and one:
            d[f"{wl} gw-sqlite-x2/gw-sqlite"] = x2["rps"] / one["rps"]
            # one process: at most 1 s / its CPU per request on one core; two processes on two
            # dedicated cores: at most 2 s / the CPU per request of the pair (supervisor included)
            projection = _ratio(2 * one.get("proxy_cpu_us_per_req", 0), x2.get("proxy_cpu_us_per_req"))
            if projection is not None:
                d[f"{wl} gw-sqlite-x2 projection"] = projection


def _derive_fixed(run: dict[str, Any], d: dict[str, float]) -> None:
    fx = run["fixed"]
    for t in TARGETS[1:]:
        if t in fx and "direct" in fx:
            for q in ("p50", "p99", "p999"):
                d[f"fixed {q} {t}-direct ms"] = fx[t][f"{q}_ms"] - fx["direct"][f"{q}_ms"]


def _derive_calibration(run: dict[str, Any], d: dict[str, float]) -> None:
    cal = run.get("calibration") or {}
    send = run["wrk"].get("SendMessage", {})
    for t, res in (cal.get("wrk") or {}).items():
        for base in ("direct", "nginx"):
            if base in send:
                d[f"SendMessage {t}/{base}"] = res["rps"] / send[base]["rps"]
        if "gw-memory" in send:
            d[f"SendMessage gw-memory/{t}"] = send["gw-memory"]["rps"] / res["rps"]
    fx = run["fixed"]
    for t, res in (cal.get("fixed") or {}).items():
        if "direct" in fx:
            for q in ("p50", "p99"):
                d[f"fixed {q} {t}-direct ms"] = res[f"{q}_ms"] - fx["direct"][f"{q}_ms"]


def _derive_sse(run: dict[str, Any], d: dict[str, float]) -> None:
    sse = run["sse"]
    for t in TARGETS[1:]:
        if t in sse and "direct" in sse:
            d[f"sse {t} added ms/event"] = (sse[t]["stream_ms_p50"] - sse["direct"]["stream_ms_p50"]) / STREAM_EVENTS
    for kind in ("sse", "ssec"):  # sequential mixed shape; concurrent append-chunk
        per = run.get(kind) or {}
        for t in TARGETS[1:]:
            for base in ("direct", "nginx", "gw-memory"):
                if t in per and base in per and base != t:
                    d[f"{kind} {t}/{base} events/s"] = per[t]["events_per_s"] / per[base]["events_per_s"]


def _derive_sdk(run: dict[str, Any], d: dict[str, float]) -> None:
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


def derive(run: dict[str, Any]) -> dict[str, float]:
    """Ratios, differences and projections within one run."""
    d: dict[str, float] = {}
    for part in (_derive_wrk, _derive_fixed, _derive_calibration, _derive_sse, _derive_sdk):
        part(run, d)
    return d


# --------------------------------------------------------------------------- helpers


def median_of(values: Iterable[float | None]) -> float | None:
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


def _errors(runs: list[dict[str, Any]], *path: str) -> int:
    """Client-side errors at ``path`` (a dict of counts), summed over runs."""
    return sum(sum((get(r, *path, "errors") or {}).values()) for r in runs)


def _wrk_bad(runs: list[dict[str, Any]], *path: str) -> str:
    """"non-2xx/socket errors" of the wrk results at ``path``, summed over runs."""
    non2xx = sum(get(r, *path, "non2xx") or 0 for r in runs)
    return f"{non2xx}/{sum(get(r, *path, 'socket_errors') or 0 for r in runs)}"


@dataclasses.dataclass
class _Table:
    """Rows of one figure per target (the median over runs), under ``prefix`` in each run."""

    runs: list[dict[str, Any]]
    present: list[str]
    width: int
    label_width: int = 40
    prefix: tuple[str, ...] = ()
    lines: list[str] = dataclasses.field(default_factory=list)

    def head(self) -> None:
        head = f"{'figure':<{self.label_width}}" + "".join(f"{t:>{self.width}}" for t in self.present)
        self.lines += [head, "-" * len(head)]

    def cells(self, label: str, values: Iterable[str]) -> None:
        self.lines.append(f"{label:<{self.label_width}}" + "".join(f"{v:>{self.width}}" for v in values))

    def row(self, label: str, path: Callable[[str], tuple[str, ...]], spec: str) -> None:
        self.cells(label, (fmt(med(self.runs, *self.prefix, *path(t)), spec) for t in self.present))


def _width(names: Iterable[str], least: int = 13) -> int:
    return max([least, *(len(n) + 2 for n in names)])


# --------------------------------------------------------------------------- sections


def _header(s: Settings, machine: dict[str, str]) -> list[str]:
    lines = [
        f"a2a-gateway {machine['gateway']} benchmark harness — {machine['date']}",
        f"machine: {machine['cores']} cores, {machine['cpu']}; Python {machine['python']}; "
        f"{machine['nginx']}; {machine['wrk']}; {machine['redis']}; granian {machine['granian']}",
        f"gateway source: {machine['git']}; uvicorn {machine['uvicorn']}, httpx {machine['httpx']}, "
        f"starlette {machine['starlette']}, orjson {machine['orjson']}, uvloop {machine['uvloop']}",
        f"settings: runs {s.runs}{' (--quick)' if s.quick else ''}; wrk -t{s.wrk_threads} "
        f"-c{s.wrk_connections} {s.duration:g}s (+{s.warmup:g}s warm-up) per target and workload; "
        f"fixed rate {s.rate:g} req/s for {s.rate_seconds:g}s ({int(s.rate * s.rate_seconds)} requests, "
        f"8-connection keep-alive pool); SSE sequential: {s.sse_streams} mixed-shape streams x {STREAM_EVENTS} "
        f"events on 1 connection; SSE append-chunk: {s.sse_concurrent_streams} streams x {STREAM_EVENTS} events "
        f"over {s.sse_concurrency} concurrent connections; engine {s.engine_seconds:g}s",
    ]
    lines.extend(textwrap.wrap(
        "setup: all on 127.0.0.1; canned worker = 1 Python process (uvloop); nginx = 1 worker process, "
        "upstream keepalive 64; each gateway = 1 uvicorn worker (gw-sqlite-x2: --workers 2, "
        f"CPU of both and the supervisor; {GRANIAN}: the same app under granian, 1 worker), default config "
        "(enforce mode, info-level JSON request logs to a file). The clients (wrk, 1 thread; this Python "
        "process) share the 2 cores with the servers, so every figure includes that contention; the client "
        "side is kept light (wrk in C, raw asyncio sockets, no httpx on the measured path). "
        "Figures are medians over runs; ratios/differences are computed within each run, then "
        "the median is taken. Target order rotates each run.", 110, subsequent_indent="  "))
    return lines


def _absolute(runs: list[dict[str, Any]], s: Settings, derived: dict[str, float | None],
              present: list[str]) -> list[str]:
    tb = _Table(runs, present, _width(present))
    tb.lines.append("ABSOLUTE FIGURES (median of runs)")
    tb.head()
    for wl in ("SendMessage", "GetTask"):
        if not any(get(r, "wrk", wl) for r in runs):
            continue
        tb.row(f"{wl} saturation req/s (wrk)", lambda t, wl=wl: ("wrk", wl, t, "rps"), ".0f")
        tb.row(f"  latency p50 ms (wrk, c{s.wrk_connections})", lambda t, wl=wl: ("wrk", wl, t, "p50_ms"), ".2f")
        tb.row("  latency p99 ms (wrk)", lambda t, wl=wl: ("wrk", wl, t, "p99_ms"), ".2f")
        tb.row("  proxy CPU us/request", lambda t, wl=wl: ("wrk", wl, t, "proxy_cpu_us_per_req"), ".0f")
        tb.row("  worker CPU us/request", lambda t, wl=wl: ("wrk", wl, t, "worker_cpu_us_per_req"), ".0f")
        tb.row("  client (wrk) CPU us/request", lambda t, wl=wl: ("wrk", wl, t, "client_cpu_us_per_req"), ".0f")
        tb.cells("  non-2xx / socket errors (sum of runs)", (_wrk_bad(runs, "wrk", wl, t) for t in present))
    tb.row(f"fixed {s.rate:g}/s SendMessage p50 ms", lambda t: ("fixed", t, "p50_ms"), ".3f")
    tb.row("  p99 ms", lambda t: ("fixed", t, "p99_ms"), ".3f")
    tb.row("  p99.9 ms", lambda t: ("fixed", t, "p999_ms"), ".3f")
    for q, name in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
        tb.cells(f"  added {name} vs direct ms", (fmt(derived.get(f"fixed {q} {t}-direct ms")
                                                      if t != "direct" else None, ".3f") for t in present))
    tb.row("  client CPU us/request", lambda t: ("fixed", t, "client_cpu_us_per_req"), ".0f")
    tb.cells("  errors (sum of runs)", (str(_errors(runs, "fixed", t)) for t in present))
    tb.row("SSE sequential mixed events/s (1 conn)", lambda t: ("sse", t, "events_per_s"), ".0f")
    tb.row("  stream time p50 ms", lambda t: ("sse", t, "stream_ms_p50"), ".2f")
    tb.row("  stream time p99 ms", lambda t: ("sse", t, "stream_ms_p99"), ".2f")
    tb.row("  first event p50 ms", lambda t: ("sse", t, "first_event_ms_p50"), ".2f")
    tb.cells("  added per event p50 vs direct ms", (fmt(derived.get(f"sse {t} added ms/event")
                                                        if t != "direct" else None, ".4f") for t in present))
    tb.row("  proxy CPU us/event", lambda t: ("sse", t, "proxy_cpu_us_per_event"), ".0f")
    tb.row("  client CPU us/event", lambda t: ("sse", t, "client_cpu_us_per_event"), ".1f")
    tb.cells("  errors (sum of runs)", (str(_errors(runs, "sse", t)) for t in present))
    if any(r.get("ssec") for r in runs):
        tb.row(f"SSE append-chunk c{s.sse_concurrency} events/s", lambda t: ("ssec", t, "events_per_s"), ".0f")
        tb.row("  stream time p50 ms", lambda t: ("ssec", t, "stream_ms_p50"), ".2f")
        tb.row("  stream time p99 ms", lambda t: ("ssec", t, "stream_ms_p99"), ".2f")
        tb.row("  proxy CPU us/event", lambda t: ("ssec", t, "proxy_cpu_us_per_event"), ".1f")
        tb.row("  worker CPU us/event", lambda t: ("ssec", t, "worker_cpu_us_per_event"), ".1f")
        tb.row("  client CPU us/event", lambda t: ("ssec", t, "client_cpu_us_per_event"), ".1f")
        tb.cells("  errors (sum of runs)", (str(_errors(runs, "ssec", t)) for t in present))
    eng = med(runs, "engine", "obs_per_s")
    tb.lines.append(f"{'engine check_payload observations/s':<40}{fmt(eng, ',.0f'):>{tb.width}}"
                    "  (one core, in-process, no I/O)")
    return tb.lines


def _ratios(derived: dict[str, float | None], gws: list[str]) -> list[str]:
    """One row per gateway/base pair, one column per figure."""
    pairs = [f"{g}/{b}" for g in gws for b in ("direct", "nginx")] + [f"{g}/gw-memory" for g in gws if g != "gw-memory"]
    figures = {"SendMessage req/s": "SendMessage {c}", "GetTask req/s": "GetTask {c}",
               "SSE sequential events/s": "sse {c} events/s", "SSE append-chunk events/s": "ssec {c} events/s"}
    w = _width(figures, 14)
    head = f"{'gateway/base':<32}" + "".join(f"{f:>{w}}" for f in figures)
    lines = ["RATIOS (median of per-run ratios; throughput = wrk req/s)", head, "-" * len(head)]
    for c in pairs:
        lines.append(f"{c:<32}" + "".join(f"{fmt(derived.get(key.format(c=c)), '.3f'):>{w}}"
                                          for key in figures.values()))
    return lines


def _verdict(v: float | None, op: str, thr: float) -> str:
    if v is None:
        return "n/a"
    return "met" if (v >= thr if op == ">=" else v <= thr) else "NOT met"


GOALS = [
    # (label, derived key or special, comparison, threshold)
    ("throughput SendMessage >= 0.5x nginx", "SendMessage {g}/nginx", ">=", 0.5),
    ("throughput GetTask >= 0.5x nginx", "GetTask {g}/nginx", ">=", 0.5),
    ("added latency p50 vs direct <= 0.5 ms (fixed rate)", "fixed p50 {g}-direct ms", "<=", 0.5),
    ("added latency p99 vs direct <= 2 ms (fixed rate)", "fixed p99 {g}-direct ms", "<=", 2.0),
    ("SSE added per event p50 <= 0.3 ms", "sse {g} added ms/event", "<=", 0.3),
    ("SSE >= 20000 events/s through one gateway", "@sse_eps {g}", ">=", 20000),
]
LEDGER_GOALS = [
    ("ledger: SQLite >= 0.8x memory (SendMessage req/s)", "SendMessage gw-sqlite/gw-memory", 0.8, "gw-sqlite"),
    ("ledger: Redis >= 0.7x memory (SendMessage req/s)", "SendMessage gw-redis/gw-memory", 0.7, "gw-redis"),
    ("ledger: SQLite >= 0.8x memory (GetTask req/s)", "GetTask gw-sqlite/gw-memory", 0.8, "gw-sqlite"),
    ("ledger: Redis >= 0.7x memory (GetTask req/s)", "GetTask gw-redis/gw-memory", 0.7, "gw-redis"),
]


def _goals5(runs: list[dict[str, Any]], derived: dict[str, float | None],
            gws: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The goals of issue #5 (the benchmark harness), per gateway."""
    w = _width(gws, 16)
    head = f"{'goal':<52}" + "".join(f"{g:>{w}}" for g in gws)
    lines = ["GOALS (issue #5: Benchmark harness)", head, "-" * len(head)]
    verdicts: dict[str, dict[str, Any]] = {}
    for label, key, op, thr in GOALS:
        cells = []
        for g in gws:
            v = med(runs, "sse", g, "events_per_s") if key.startswith("@sse_eps") else derived.get(key.format(g=g))
            vd = _verdict(v, op, thr)
            verdicts.setdefault(label, {})[g] = {"value": v, "verdict": vd}
            cells.append(f"{fmt(v, '.0f' if thr >= 100 else '.3f') + ' ' + vd:>{w}}")
        lines.append(f"{label:<52}" + "".join(cells))
    for label, key, thr, g in LEDGER_GOALS:
        v = derived.get(key)
        vd = _verdict(v, ">=", thr)
        verdicts[label] = {g: {"value": v, "verdict": vd}}
        lines.append(f"{label:<52}" + "".join(f"{fmt(v, '.3f') + ' ' + vd if x == g else '':>{w}}" for x in gws))
    eng = med(runs, "engine", "obs_per_s")
    vd = _verdict(eng, ">=", 200_000)
    verdicts["engine >= 200000 observations/s"] = {"engine": {"value": eng, "verdict": vd}}
    lines.append(f"{'engine >= 200,000 observations/s':<52}{fmt(eng, ',.0f') + ' ' + vd:>{w}}")
    return lines, verdicts


@dataclasses.dataclass(frozen=True)
class Goal16:
    """One goal of issue #16: ``key`` (a derived figure, ``{g}`` the gateway) compared with
    ``threshold`` for the gateways in ``applies`` (``None``: every gateway; the others' values
    are shown in parentheses, for comparison); ``numbers``: what it is computed from."""

    label: str
    key: str
    op: str
    threshold: float
    applies: tuple[str, ...] | None
    numbers: tuple[str, tuple[str, ...], str, tuple[str, ...]]  # label, path with {t}, spec, targets


_SSEC_EPS = ("append-chunk events/s", ("ssec", "{t}", "events_per_s"), ".0f",
             ("nginx", "gw-memory", "gw-sqlite", "gw-redis", GRANIAN))
_CPU = ("SendMessage proxy CPU us/request", ("wrk", "SendMessage", "{t}", "proxy_cpu_us_per_req"), ".0f",
        ("nginx", *GATEWAYS))
_X2_RPS = ("SendMessage req/s", ("wrk", "SendMessage", "{t}", "rps"), ".0f", ("gw-sqlite", "gw-sqlite-x2"))
_X2_CPU = ("SendMessage proxy CPU us/request", ("wrk", "SendMessage", "{t}", "proxy_cpu_us_per_req"), ".0f",
           ("gw-sqlite", "gw-sqlite-x2"))
GOALS16 = [
    Goal16("SSE append-chunk: gw-sqlite >= 0.8x gw-memory", "ssec {g}/gw-memory events/s", ">=", 0.8,
           ("gw-sqlite",), _SSEC_EPS),
    Goal16("SSE append-chunk: gw-redis >= 0.8x gw-memory", "ssec {g}/gw-memory events/s", ">=", 0.8,
           ("gw-redis",), _SSEC_EPS),
    Goal16("SSE append-chunk: gw-memory >= 0.5x nginx", "ssec {g}/nginx events/s", ">=", 0.5,
           ("gw-memory",), _SSEC_EPS),
    Goal16("SendMessage proxy CPU/request <= 8x nginx's", "SendMessage cpu {g}/nginx", "<=", 8.0, None, _CPU),
    Goal16("added p50 at the fixed rate <= 0.4 ms (gw-sqlite)", "fixed p50 {g}-direct ms", "<=", 0.4,
           ("gw-sqlite",), ("fixed-rate p50 ms", ("fixed", "{t}", "p50_ms"), ".3f", ("direct", "gw-sqlite"))),
    Goal16("--workers 2 >= 1.6x one process (measured)", "SendMessage {g}/gw-sqlite", ">=", 1.6,
           ("gw-sqlite-x2",), _X2_RPS),
    Goal16("--workers 2 >= 1.6x one process (PROJECTION)", "SendMessage {g} projection", ">=", 1.6,
           ("gw-sqlite-x2",), _X2_CPU),
]
PROJECTION_NOTE = (
    "PROJECTION, not a measurement: on this machine wrk, the canned worker and the gateway share 2 cores, so "
    "the measured ratio cannot show what a second core gives. One process is bound by one core: its most is "
    "1 s / its CPU per request; two processes on two dedicated cores: 2 s / the CPU per request of the pair "
    "(both workers and the supervisor, measured in the same run). Projection = 2 x cpu_per_req(gw-sqlite) / "
    "cpu_per_req(gw-sqlite-x2). It rests on the load generator and the worker running elsewhere and on the "
    "shared SQLite file adding no wait beyond the CPU this run measured.")


def _goals16(runs: list[dict[str, Any]], derived: dict[str, float | None],
             gws: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The goals of issue #16, each with the numbers it is computed from."""
    w = _width(gws, 16)
    head = f"{'goal':<52}" + "".join(f"{g:>{w}}" for g in gws)
    lines = ["GOALS (issue #16: the gateway's own cost; ratios within each run, median of runs)", head,
             "-" * len(head)]
    verdicts: dict[str, dict[str, Any]] = {}
    for goal in GOALS16:
        cells = []
        for g in gws:
            v = derived.get(goal.key.format(g=g))
            if goal.applies is None or g in goal.applies:
                vd = _verdict(v, goal.op, goal.threshold)
                verdicts.setdefault(goal.label, {})[g] = {"value": v, "verdict": vd}
                cells.append(f"{fmt(v, '.3f')} {vd}")
            else:
                cells.append(f"({fmt(v, '.3f')})" if v is not None else "")
        lines.append(f"{goal.label:<52}" + "".join(f"{c:>{w}}" for c in cells))
        if goal is not GOALS16[-1] and goal.numbers == GOALS16[GOALS16.index(goal) + 1].numbers:
            continue  # the next goal says the same numbers
        label, path, spec, targets = goal.numbers
        shown = [f"{t} {fmt(med(runs, *(p.format(t=t) for p in path)), spec)}" for t in targets
                 if any(get(r, *(p.format(t=t) for p in path)) is not None for r in runs)]
        lines.append(f"    from {label}: {', '.join(shown) or 'not measured'}")
    lines.extend(textwrap.wrap(PROJECTION_NOTE, 110, initial_indent="  ", subsequent_indent="  "))
    lines.append("  (values in parentheses: the same ratio for a gateway the goal does not name, for comparison)")
    return lines, verdicts


def _process(run: dict[str, Any], g: str, phase: str, i: int) -> dict[str, Any]:
    procs = get(run, "rss", g, phase) or []
    return procs[i] if i < len(procs) else {}


def _rss(runs: list[dict[str, Any]], gws: list[str]) -> list[str]:
    """Memory per process of each gateway target: idle (after start, before any load) and
    loaded (after every workload: VmRSS, and VmHWM, the peak)."""
    lines = ["MEMORY per process (MB, median of runs; idle = ready, before any load; loaded = after every "
             "workload: VmRSS, and peak = VmHWM)",
             f"{'target':<22}{'process':<12}{'idle':>10}{'loaded':>10}{'peak':>10}", "-" * 64]
    for g in gws:
        count = max((len(get(r, "rss", g, "idle") or []) for r in runs), default=0)
        for i in range(count):
            def mb(phase: str, key: str, i: int = i) -> str:
                v = median_of(_process(r, g, phase, i).get(key) for r in runs)
                return fmt(v / 1024 if v is not None else None, ".1f")
            role = _process(runs[0], g, "idle", i).get("role", "?")
            if g == "gw-sqlite-x2":
                role = "supervisor" if i == 0 else f"worker {i}"
            elif g == GRANIAN:
                role = "granian" if i == 0 else f"worker {i}"
            lines.append(f"{g if i == 0 else '':<22}{role:<12}{mb('idle', 'rss_kb'):>10}"
                         f"{mb('loaded', 'rss_kb'):>10}{mb('loaded', 'hwm_kb'):>10}")
    return lines


def _calibration(runs: list[dict[str, Any]], s: Settings, derived: dict[str, float | None]) -> list[str]:
    cal_targets = [t for t in CALIBRATION if any(t in (get(r, "calibration", "wrk") or {}) for r in runs)]
    if not cal_targets:
        return []
    tb = _Table(runs, [*cal_targets, "gw-memory"], 13)
    tb.lines += [
        "",
        "CALIBRATION (--calibrate): one uvicorn worker (uvloop, httptools) on this machine, same wrk and",
        "fixed-rate settings. cal-hello answers a fixed body (no upstream); cal-httpx relays with httpx and",
        "the gateway's pool limits, nothing else; cal-raw relays over a raw asyncio keep-alive pool."]
    tb.head()

    def crow(label: str, key: str, spec: str, kind: str = "wrk") -> None:
        cells = [fmt(med(runs, "calibration", kind, t, key), spec) for t in cal_targets]
        gw = med(runs, kind, "SendMessage", "gw-memory", key) if kind == "wrk" else med(runs, kind, "gw-memory", key)
        tb.cells(label, [*cells, fmt(gw, spec)])

    crow("SendMessage saturation req/s (wrk)", "rps", ".0f")
    crow("  latency p50 ms (wrk)", "p50_ms", ".2f")
    crow("  server CPU us/request", "proxy_cpu_us_per_req", ".0f")
    crow(f"fixed {s.rate:g}/s p50 ms", "p50_ms", ".3f", "fixed")
    crow("  p99 ms", "p99_ms", ".3f", "fixed")
    tb.cells("  added p50 vs direct ms", [fmt(derived.get(f"fixed p50 {t}-direct ms"), ".3f")
                                          for t in [*cal_targets, "gw-memory"]])
    tb.cells("  req/s / nginx req/s", [fmt(derived.get(f"SendMessage {t}/nginx"), ".3f")
                                       for t in [*cal_targets, "gw-memory"]])
    tb.cells("  gw-memory req/s / this", [fmt(derived.get(f"SendMessage gw-memory/{t}"), ".3f") for t in cal_targets])
    return tb.lines


def sdk_section(runs: list[dict[str, Any]], s: Settings, derived: dict[str, float | None]) -> list[str]:
    """The "REAL a2a-sdk WORKER" section (--sdk-worker)."""
    present = [t for t in SDK_TARGETS if any(t in (get(r, "sdk", "sse") or {}) for r in runs)]
    tb = _Table(runs, present, 11, prefix=("sdk",))
    tb.lines.append("REAL a2a-sdk WORKER (--sdk-worker)")
    tb.lines.extend(textwrap.wrap(
        "upstream: demo/worker.py (a2a-sdk, uvicorn, 1 process, in-memory task store) instead of the canned "
        "worker; a fresh worker, nginx and gateways each run. SendMessage \"hi\" is blocking and answered with "
        f"a COMPLETED task + artifact; wrk settings as above. SSE: {s.sse_streams} sequential "
        "SendStreamingMessage \"hi\" streams (task, WORKING, artifact, COMPLETED). wrk counts HTTP status only; "
        "each target was probed once with a full JSON check before.", 110, subsequent_indent="  "))
    tb.head()
    if any(get(r, "sdk", "wrk") for r in runs):
        tb.row("SendMessage saturation req/s (wrk)", lambda t: ("wrk", t, "rps"), ".0f")
        tb.row(f"  latency p50 ms (wrk, c{s.wrk_connections})", lambda t: ("wrk", t, "p50_ms"), ".2f")
        tb.row("  latency p99 ms (wrk)", lambda t: ("wrk", t, "p99_ms"), ".2f")
        tb.row("  proxy CPU us/request", lambda t: ("wrk", t, "proxy_cpu_us_per_req"), ".0f")
        tb.row("  worker CPU us/request", lambda t: ("wrk", t, "worker_cpu_us_per_req"), ".0f")
        tb.cells("  non-2xx / socket errors (sum of runs)", (_wrk_bad(runs, "sdk", "wrk", t) for t in present))
    tb.row("SSE events/s", lambda t: ("sse", t, "events_per_s"), ".0f")
    tb.row("  streams/s", lambda t: ("sse", t, "streams_per_s"), ".0f")
    tb.cells("  events per stream", (fmt(median_of([
        (get(r, "sdk", "sse", t, "events") or 0) / max(1, get(r, "sdk", "sse", t, "streams") or 1)
        for r in runs if get(r, "sdk", "sse", t)]), ".1f") for t in present))
    tb.row("  stream time p50 ms", lambda t: ("sse", t, "stream_ms_p50"), ".2f")
    tb.row("  stream time p99 ms", lambda t: ("sse", t, "stream_ms_p99"), ".2f")
    tb.row("  first event p50 ms", lambda t: ("sse", t, "first_event_ms_p50"), ".2f")
    tb.cells("  added stream time p50 vs direct ms", (fmt(derived.get(f"sdk sse {t} added ms/stream"), ".3f")
                                                      for t in present))
    tb.row("  proxy CPU us/event", lambda t: ("sse", t, "proxy_cpu_us_per_event"), ".0f")
    tb.cells("  errors (sum of runs)", (str(_errors(runs, "sdk", "sse", t)) for t in present))
    cols = [f"{g}/{b}" for g in ("gw-memory", "gw-sqlite") if g in present for b in ("direct", "nginx")]
    head = f"{'figure':<40}" + "".join(f"{c:>19}" for c in cols)
    tb.lines += ["ratios (median of per-run ratios)", head, "-" * len(head)]
    tb.lines.append(f"{'SendMessage req/s':<40}" + "".join(f"{fmt(derived.get(f'sdk wrk {c}'), '.3f'):>19}" for c in cols))
    tb.lines.append(f"{'SSE events/s':<40}" + "".join(f"{fmt(derived.get(f'sdk sse {c}'), '.3f'):>19}" for c in cols))
    tb.lines.append("oddities (sdk gateways' /metrics and logs, probes, SSE checks):")
    tb.lines.extend(_sdk_oddities(runs, s) or ["  none"])
    return tb.lines


def _gateway_oddities(i: int, r: dict[str, Any], in_flight: int, explain: Callable[[float], str]) -> list[str]:
    """What run ``i``'s gateways' /metrics and logs show beyond plain successes."""
    odd = []
    for g, m in (r.get("metrics") or {}).items():
        for k, v in (m.get("not_ok") or {}).items():
            why = explain(v) if 'outcome="client_disconnected"' in k and v <= in_flight else ""
            odd.append(f"  run {i + 1} {g}: requests_total{k} = {v:.0f}{why}")
        for k, v in (m.get("watched") or {}).items():
            if not (k.startswith("a2a_gateway_upstream_degraded") and not v):
                odd.append(f"  run {i + 1} {g}: {k} = {v:g}")
        if m.get("scrape_error"):
            odd.append(f"  run {i + 1} {g}: /metrics scrape failed: {m['scrape_error']}")
    for g, lg in (r.get("logs") or {}).items():
        if lg["non_info"]:
            odd.append(f"  run {i + 1} {g} log: {lg['non_info']} e.g. {lg['samples'][:2]}")
    return odd


def _sdk_oddities(runs: list[dict[str, Any]], s: Settings) -> list[str]:
    odd = []
    in_flight = (2 if s.warmup > 0 else 1) * s.wrk_connections
    for i, r in enumerate(runs):
        sdk = r.get("sdk") or {}
        for t, problems in (sdk.get("probe") or {}).items():
            if problems:
                odd.append(f"  run {i + 1} {t}: probe problems {problems}")
        odd += _gateway_oddities(i, sdk, in_flight, lambda _: "  (expected: wrk ends with requests in flight)")
        for t, res in (sdk.get("sse") or {}).items():
            if res.get("errors"):
                odd.append(f"  run {i + 1} sse {t}: client-side errors {res['errors']}")
    return odd


def _oddities(runs: list[dict[str, Any]], s: Settings, notes: list[str]) -> list[str]:
    lines = ["ODDITIES (gateway /metrics after each run, gateway logs, client-side checks)"]
    wrk_calls = 2 if s.warmup > 0 else 1  # wrk invocations per target and workload
    in_flight = wrk_calls * s.wrk_connections
    expected = (f"  (expected: each wrk invocation ends with up to {s.wrk_connections} requests in "
                f"flight; {wrk_calls} invocation(s) x {s.wrk_connections} = {in_flight} at most)")
    odd = []
    for i, r in enumerate(runs):
        odd += _gateway_oddities(i, r, in_flight, lambda _: expected)
        for kind in ("fixed", "sse", "ssec"):
            for t, res in (r.get(kind) or {}).items():
                if res.get("errors"):
                    odd.append(f"  run {i + 1} {kind} {t}: client-side errors {res['errors']}")
        for wl, per in (r.get("wrk") or {}).items():
            for t, res in per.items():
                if res["non2xx"] or res["socket_errors"]:
                    odd.append(f"  run {i + 1} wrk {wl} {t}: non-2xx {res['non2xx']}, socket errors {res['socket_errors']}")
        if r.get("engine", {}).get("divergence_or_rejection_findings"):
            odd.append(f"  run {i + 1} engine: {r['engine']['divergence_or_rejection_findings']} divergence/rejection findings")
    lines += odd or ["  none: no non-ok outcomes, divergences, upstream/ledger errors, warnings, non-2xx or "
                     "client-side errors"]
    lines += [f"  note: {n}" for n in notes]
    return lines


def report(runs: list[dict[str, Any]], s: Settings, machine: dict[str, str], notes: list[str],
           profile_text: str | None) -> tuple[str, dict[str, Any]]:
    """The printed report and the JSON document (settings, machine, raw runs, derived figures,
    goal verdicts, notes)."""
    derived_runs = [derive(r) for r in runs]
    keys = sorted({k for d in derived_runs for k in d})
    derived = {k: median_of([d.get(k) for d in derived_runs]) for k in keys}
    present = [t for t in TARGETS if any(t in get(r, "fixed") or {} for r in runs)]
    gws = [g for g in GATEWAYS if g in present]
    goals5, verdicts = _goals5(runs, derived, gws)
    goals16, verdicts16 = _goals16(runs, derived, gws)
    L = [*_header(s, machine), "", *_absolute(runs, s, derived, present), "", *_ratios(derived, gws), "",
         *goals5, "", *goals16, "", *_rss(runs, gws), *_calibration(runs, s, derived)]
    if any(r.get("sdk") for r in runs):
        L += ["", *sdk_section(runs, s, derived)]
    L += ["", *_oddities(runs, s, notes)]
    if profile_text:
        L += ["", profile_text]
    doc = {"settings": dataclasses.asdict(s), "machine": machine, "runs": runs, "derived_per_run": derived_runs,
           "derived_median": derived, "goals": verdicts, "goals_issue16": verdicts16, "notes": notes}
    return "\n".join(L), doc
