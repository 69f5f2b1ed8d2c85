"""What ``python -m bench.run`` measures: child processes, ports, tool discovery and the
machine's versions, nginx's config, and the gateways of one run (one uvicorn process per ledger, ``--workers 2`` on
SQLite, and with ``--granian`` the memory gateway under granian).

The targets, all on 127.0.0.1 in front of the canned worker (:mod:`bench.canned_worker`):

* ``direct`` — no proxy; ``nginx`` — 1 worker process, upstream keepalive pool;
* ``gw-memory`` / ``gw-sqlite`` / ``gw-redis`` — ``python -m gateway serve``, one process;
* ``gw-sqlite-x2`` — ``serve --workers 2`` (a supervisor and two worker processes);
* ``gw-memory-granian`` — the same app and memory ledger under granian
  (:mod:`bench.granian_app`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson

from gateway import __version__

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
PY = sys.executable
HOST = "127.0.0.1"
GRANIAN = "gw-memory-granian"
TARGETS = ("direct", "nginx", "gw-memory", "gw-sqlite", "gw-redis", "gw-sqlite-x2", GRANIAN)
GATEWAYS = ("gw-memory", "gw-sqlite", "gw-redis", "gw-sqlite-x2", GRANIAN)
SDK_TARGETS = ("direct", "nginx", "gw-memory", "gw-sqlite")  # --sdk-worker
CALIBRATION = {"cal-hello": "hello", "cal-httpx": "httpx_proxy", "cal-raw": "raw_proxy"}
# what a missing tool costs (the note printed instead of an error)
TOOL_USE = {"nginx": "the nginx target", "wrk": "the saturation workloads (SendMessage, GetTask)"}


@dataclasses.dataclass
class Settings:
    runs: int
    duration: float  # wrk seconds per target and workload
    warmup: float  # wrk warm-up seconds (discarded)
    rate: float  # fixed-rate requests per second
    rate_seconds: float
    sse_streams: int  # sequential mixed-shape streams per target
    engine_seconds: float
    wrk_threads: int
    wrk_connections: int
    quick: bool
    profile: bool
    profile_seconds: float
    calibrate: bool = False
    sdk_worker: bool = False
    sse_concurrency: int = 16  # keep-alive connections of the append-chunk SSE workload
    sse_concurrent_streams: int = 320  # append-chunk streams per target, across those connections
    install_tools: bool = False
    granian: bool = False


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


def _exited(proc: Proc) -> RuntimeError:
    return RuntimeError(f"{proc.name} exited early: {proc.log.read_text(errors='replace')[-2000:]}")


def wait_port(port: int, proc: Proc, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise _exited(proc)
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
                raise _exited(proc)
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            time.sleep(0.1)  # bounded by the deadline
    raise RuntimeError(f"{proc.name}: {url} not ready within {timeout}s")


_RUN_CALLER_SECRET = secrets.token_hex(32)


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # the gateways of a run share one caller secret, as a deployment's replicas would (no
    # caller_secret_generated warning in every gateway's log)
    env.setdefault("A2A_GATEWAY_CALLER_SECRET", _RUN_CALLER_SECRET)
    return env


# --------------------------------------------------------------------------- tools


def find_tool(binary: str) -> str | None:
    """Path of ``binary`` on PATH or in /usr/sbin, /usr/bin; ``None`` when missing."""
    return shutil.which(binary) or next((p for p in (f"/usr/sbin/{binary}", f"/usr/bin/{binary}")
                                         if os.access(p, os.X_OK)), None)


def _apt_install(packages: list[str], notes: list[str]) -> None:
    """``apt-get install -y packages`` (one ``apt-get update`` and a retry when it fails)."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        notes.append(f"--install-tools: cannot install {' '.join(packages)} (not root / no apt-get)")
        return
    print(f"installing {' '.join(packages)} with apt-get ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in range(2):
        if attempt:
            subprocess.run(["apt-get", "update", "-qq"], env=env, timeout=300,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        rc = subprocess.run(["apt-get", "install", "-y", "-qq", *packages], env=env, timeout=600,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode
        if rc == 0:
            return


def discover_tools(install: bool, notes: list[str]) -> dict[str, str | None]:
    """Paths of nginx, wrk and redis-server (``None``: missing, with a note saying what is
    skipped). ``install`` (``--install-tools``): apt-get installs a missing nginx or wrk first."""
    tools = {b: find_tool(b) for b in TOOL_USE}
    missing = [b for b, path in tools.items() if path is None]
    if missing and install:
        _apt_install(missing, notes)
        tools.update({b: find_tool(b) for b in missing})
    for b in missing:
        if tools[b] is None:
            hint = "apt-get install failed" if install else "--install-tools installs it with apt-get"
            notes.append(f"{b} not installed: {TOOL_USE[b]} skipped ({hint})")
    tools["redis-server"] = find_tool("redis-server")
    if tools["redis-server"] is None:
        notes.append("redis-server not installed: gw-redis skipped (apt-get install redis-server)")
    return tools


def granian_available(install: bool, notes: list[str]) -> bool:
    """Whether granian can be imported by the gateway's interpreter; ``install``
    (``--install-tools``): pip installs it when missing (the ``bench`` extra's pin)."""
    if importlib.util.find_spec("granian") is None and install:
        print("installing granian with pip ...", flush=True)
        subprocess.run([PY, "-m", "pip", "install", "-q", "granian>=1.6"], timeout=600, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        importlib.invalidate_caches()
    if importlib.util.find_spec("granian") is None:
        notes.append(f"granian not installed: {GRANIAN} skipped (pip install -e '.[bench]', or --install-tools)")
        return False
    return True


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


def start_nginx(nginx: str, tmp: Path, worker_port: int, name: str = "nginx") -> tuple[int, Proc]:
    """An nginx in front of ``worker_port``, its files under ``tmp``: (port, process)."""
    port = free_port()
    conf = nginx_conf(tmp, port, worker_port)
    proc = Proc(name, [nginx, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(conf),
                       "-g", "daemon off;"], tmp / "nginx.out")
    try:
        wait_port(port, proc)
    except RuntimeError:
        proc.stop()
        raise
    return port, proc


# --------------------------------------------------------------------------- the machine


def machine_info() -> dict[str, str]:
    """Versions of the machine, the tools and the gateway's libraries, for the report's header."""
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
        "uvloop": pv("uvloop"), "granian": pv("granian"),
    }


# --------------------------------------------------------------------------- the run's targets


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
    granian: bool = False  # --granian and granian is importable


def _start_redis(redis_bin: str, rundir: Path) -> tuple[str, Proc]:
    port = free_port()
    redis = Proc("redis-server", [redis_bin, "--port", str(port), "--bind", HOST, "--save", "",
                                  "--appendonly", "no", "--dir", str(rundir)], rundir / "redis.log")
    wait_port(port, redis)
    return f"redis://{HOST}:{port}/0", redis


def _start_uvicorn_gateway(name: str, ledger: str, upstream_port: int, rundir: Path) -> tuple[int, Proc]:
    port, admin_port = free_port(), free_port()
    workers = ["--workers", "2"] if name.endswith("-x2") else []
    gw = Proc(name, [PY, "-m", "gateway", "serve", "--upstream", f"http://{HOST}:{upstream_port}/",
                     "--port", str(port), "--admin-port", str(admin_port), "--ledger", ledger, *workers],
              rundir / f"{name}.log", cwd=ROOT, env=child_env())
    gw.admin_port = admin_port
    return port, gw


def _start_granian_gateway(upstream_port: int, rundir: Path) -> tuple[int, Proc]:
    """The memory gateway under granian (one worker, uvloop, HTTP/1), the same config as
    ``serve --upstream URL --ledger memory``; ``/readyz`` and ``/metrics`` on the traffic port
    (:mod:`bench.granian_app`)."""
    port = free_port()
    config = rundir / "granian-config.json"
    config.write_bytes(orjson.dumps({"upstreams": [{"name": "worker", "url": f"http://{HOST}:{upstream_port}/",
                                                    "prefix": "/"}], "ledger": {"url": "memory"}}))
    env = {**child_env(), "A2A_BENCH_GATEWAY_CONFIG": str(config)}
    gw = Proc(GRANIAN, [PY, "-m", "granian", "--interface", "asgi", "--host", HOST, "--port", str(port),
                        "--workers", "1", "--loop", "uvloop", "--http", "1", "--no-ws", "--log-level", "warning",
                        "--no-access-log", "bench.granian_app:app"],
              rundir / f"{GRANIAN}.log", cwd=ROOT, env=env)
    gw.admin_port = port
    return port, gw


@contextlib.contextmanager
def gateways(env: Env, run: int, upstream_port: int | None = None, only: tuple[str, ...] = GATEWAYS,
             prefix: str = "run") -> Iterator[dict[str, tuple[int, Proc]]]:
    """Start the gateways in ``only`` (and a private redis-server) for one run, in front of the
    canned worker or of ``upstream_port``; stop them after. Yields name → (port, process),
    each one ready (``/readyz`` 200)."""
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
            ledgers["gw-redis"], redis = _start_redis(env.redis_bin, rundir)
            procs.append(redis)
        for name, url in ledgers.items():
            started[name] = _start_uvicorn_gateway(name, url, upstream_port, rundir)
            procs.append(started[name][1])
        if env.granian and GRANIAN in only:
            started[GRANIAN] = _start_granian_gateway(upstream_port, rundir)
            procs.append(started[GRANIAN][1])
        for _, gw in started.values():
            wait_ready(f"http://{HOST}:{gw.admin_port}/readyz", gw)
        yield started
    finally:
        for p in reversed(procs):
            p.stop()
