"""``bench.run --profile``: py-spy samples of the memory gateway under SendMessage saturation
and under SSE, summarized by component and frame (py-spy: the ``bench`` extra)."""

from __future__ import annotations

import asyncio
import collections
import shutil
import subprocess
import time
from pathlib import Path

from bench.load import SEND_BODY, probe_target, run_wrk, sse_streams, wrk_script
from bench.targets import PY, RESULTS, ROOT, Env, gateways


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
        return "PROFILE: skipped (py-spy not installed: pip install -e '.[bench]')"
    s = env.settings
    out = [f"PROFILE of gw-memory with py-spy (record --rate 200, blocking mode for whole stacks, "
           f"{s.profile_seconds:g}s per workload: wrk SendMessage saturation -c{s.wrk_connections}, then back-to-back "
           "SSE streams; separate from the measured runs)"]
    with gateways(env, 99, only=("gw-memory",)) as gws:
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
                    script = wrk_script(env.tmp, "SendMessage", SEND_BODY)
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
