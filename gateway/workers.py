"""``serve --workers N``: N gateway processes accepting on one listening socket.

One Python process uses one core (README, Performance). The supervisor binds the listen
address and the admin address once and starts N ordinary single-process gateways (``serve …
--workers 1``) that inherit both sockets (:data:`LISTEN_FD_ENV`, :data:`ADMIN_FD_ENV`); the
kernel spreads new connections over them. The task ledger must be one they share — SQLite
(one file, compare-and-set across processes) or Redis; a memory ledger is refused, since each
process would judge against its own.

* Metrics: Prometheus multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, a private temporary
  directory): whichever worker answers the admin ``/metrics`` reports the sum over all of them.
* Restart recovery runs once, here: live tasks are flagged for a resync before the workers
  start, and the workers skip it, so one worker starting after another never flags tasks the
  other is serving.
* Signals: SIGTERM / SIGINT go to every worker (each drains as a single gateway does, see
  ``listen.shutdown_grace_seconds``); SIGHUP goes to every worker (each re-reads the config file).
  A worker that dies is started again; one that dies within :data:`STARTUP_SECONDS` of its
  start stops the whole gateway (exit 1): it would only die again.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from types import FrameType

LISTEN_FD_ENV = "A2A_GATEWAY_LISTEN_FD"
"""Environment variable naming the inherited listening socket's file descriptor."""
ADMIN_FD_ENV = "A2A_GATEWAY_ADMIN_FD"
"""Environment variable naming the inherited admin listener's file descriptor (unset:
``admin.enabled: false``)."""
STARTUP_SECONDS = 10.0
"""A worker that exits sooner than this after its start is a failed start, not a crash."""
_POLL_SECONDS = 0.2


def supervise(argv: Sequence[str], *, host: str, port: int, admin: tuple[str, int] | None,
              workers: int, grace_seconds: float, log: logging.Logger) -> int:
    """Run ``workers`` gateway processes on one socket until SIGTERM/SIGINT.

    Args:
        argv: the ``serve`` command line to give each worker (``--workers 1`` is appended).
        host, port: the listen address (bound here, once).
        admin: the admin listener's (host, port), bound here too; ``None``: no admin listener.
        grace_seconds: the workers' drain time; each gets 10 s more before it is killed.

    Returns:
        0 when every worker stopped cleanly, 1 when a worker failed to start or did not stop
        cleanly, 3 when an address cannot be bound.
    """
    try:
        sock = socket.create_server((host, port), backlog=2048)
    except OSError as exc:
        log.error("listen_failed", extra={"listen": f"{host}:{port}", "error": str(exc)})
        return 3
    sock.set_inheritable(True)
    inherited = [sock]
    env = {**os.environ, LISTEN_FD_ENV: str(sock.fileno())}
    env.pop(ADMIN_FD_ENV, None)
    if admin is not None:
        try:
            admin_sock = socket.create_server(admin, backlog=128)
        except OSError as exc:
            sock.close()
            log.error("listen_failed", extra={"admin": f"{admin[0]}:{admin[1]}", "error": str(exc)})
            return 3
        admin_sock.set_inheritable(True)
        inherited.append(admin_sock)
        env[ADMIN_FD_ENV] = str(admin_sock.fileno())
    metrics_dir = tempfile.mkdtemp(prefix="a2a-gateway-metrics-")
    env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    command = [sys.executable, "-m", "gateway", *argv, "--workers", "1"]
    procs: list[subprocess.Popen[bytes]] = []
    started: list[float] = []
    stop = {"signal": 0}

    def start(slot: int) -> None:
        proc = subprocess.Popen(command, env=env, pass_fds=[s.fileno() for s in inherited])
        if slot < len(procs):
            procs[slot], started[slot] = proc, time.monotonic()
        else:
            procs.append(proc)
            started.append(time.monotonic())

    def forward(signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGHUP:
            stop["signal"] = signum
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if signum != signal.SIGHUP else signal.SIGHUP)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    code = 0
    try:
        for slot in range(workers):
            start(slot)
        log.info("workers_started", extra={"listen": f"{host}:{port}", "pids": [p.pid for p in procs]})
        while not stop["signal"]:
            time.sleep(_POLL_SECONDS)
            for slot, proc in enumerate(procs):
                if stop["signal"] or proc.poll() is None:
                    continue
                _forget(metrics_dir, proc.pid)
                failed_start = time.monotonic() - started[slot] < STARTUP_SECONDS
                log.error("worker_exited", extra={"pid": proc.pid, "exit_code": proc.returncode,
                                                  "restart": not failed_start})
                if failed_start:
                    code = 1
                    forward(signal.SIGTERM, None)
                    break
                start(slot)
        deadline = time.monotonic() + grace_seconds + 10
        for proc in procs:
            try:
                exit_code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                exit_code = proc.wait()
            if exit_code != 0:
                code = 1
        log.info("workers_stopped", extra={"exit_codes": [p.returncode for p in procs]})
    finally:
        for listener in inherited:
            listener.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return code


def _forget(metrics_dir: str, pid: int) -> None:
    """Drop a dead worker's live gauges (its counters stay in the sums)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, metrics_dir)
