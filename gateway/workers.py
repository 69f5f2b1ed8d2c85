"""``serve --workers N``: N gateway processes accepting on one listening socket.

One Python process uses one core (docs/performance.md). The supervisor binds the listen
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
  A worker that dies is started again in its slot (``worker_exited``, then
  ``worker_restarted`` with the old and new pid); one that dies within :data:`STARTUP_SECONDS` of its
  start stops the whole gateway (exit 1): it would only die again.
* The workers die with the supervisor, however it ends (``kill -9`` included), so no orphan
  keeps the port: each drains as on SIGTERM (:func:`watch_supervisor`) — on the parent-death
  signal (Linux), and when the supervisor's end of a pipe only it holds closes
  (:data:`SUPERVISOR_FD_ENV`; logged as ``supervisor_lost``).
* The pid file (``listen.pid_file``, :mod:`gateway.pidfile`) is the supervisor's: it holds the
  lock, the workers neither inherit nor take it.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
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

from gateway.observability.logging import get_logger

LISTEN_FD_ENV = "A2A_GATEWAY_LISTEN_FD"
"""Environment variable naming the inherited listening socket's file descriptor."""
SUPERVISOR_FD_ENV = "A2A_GATEWAY_SUPERVISOR_FD"
"""Environment variable naming a worker's inherited read end of the supervisor pipe: nothing is
ever written to it; it reads end-of-file once the supervisor, the only holder of the write end,
is gone."""
SUPERVISOR_PID_ENV = "A2A_GATEWAY_SUPERVISOR_PID"
"""Environment variable holding the supervisor's pid (a worker's parent while it lives)."""
WORKER_INDEX_ENV = "A2A_GATEWAY_WORKER_INDEX"
"""Environment variable holding a worker's slot, 0 to N-1 (a restarted worker keeps its
slot); logged by the worker at start (``worker_started``)."""
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
        cleanly, 3 when an address cannot be bound (logged as ``listen_failed``; when it is in
        use, with a ``hint``).
    """
    sock = _bind("listen", (host, port), 2048, log)
    if sock is None:
        return 3
    sock.set_inheritable(True)
    # Only this process holds `alive` (pipe ends are not inherited, PEP 446): when it is gone,
    # however it goes, every worker reads end-of-file on `watched` (watch_supervisor).
    watched, alive = os.pipe()
    inherited = [sock]
    env = {**os.environ, LISTEN_FD_ENV: str(sock.fileno()),
           SUPERVISOR_FD_ENV: str(watched), SUPERVISOR_PID_ENV: str(os.getpid())}
    env.pop(ADMIN_FD_ENV, None)
    if admin is not None:
        admin_sock = _bind("admin", admin, 128, log)
        if admin_sock is None:
            sock.close()
            os.close(watched)
            os.close(alive)
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
        # SIGHUP ignored from the first instruction (an ignored signal stays ignored across
        # exec): a reload forwarded before the worker's handler is in place must not kill it
        proc = subprocess.Popen(command, env={**env, WORKER_INDEX_ENV: str(slot)}, pass_fds=[*(s.fileno() for s in inherited), watched],
                                preexec_fn=_ignore_sighup)
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
                log.error("worker_exited", extra={"worker": slot, "worker_pid": proc.pid, "exit_code": proc.returncode,
                                                  "restart": not failed_start})
                if failed_start:
                    code = 1
                    forward(signal.SIGTERM, None)
                    break
                old = proc.pid
                start(slot)
                log.warning("worker_restarted", extra={"worker": slot, "old_pid": old,
                                                       "new_pid": procs[slot].pid})
        for proc in procs:  # again: a worker started while the signal came may not have had it
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
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
        os.close(watched)
        os.close(alive)
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return code


def watch_supervisor() -> None:
    """Make this worker of ``serve --workers N`` drain and exit once its supervisor is gone.

    Call once, from inside the worker's running event loop and after SIGTERM handling is in
    place (uvicorn's ``Server.startup``). In a process the supervisor did not start (no
    :data:`SUPERVISOR_FD_ENV`) it does nothing. Two watches, either of which sends this
    process SIGTERM (when both do, the second changes nothing), so the supervisor's end starts
    the drain a SIGTERM always starts (``listen.shutdown_grace_seconds``, then exit 0):

    * Linux: the parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGTERM)``); when the
      supervisor died before it was armed (the parent is no longer :data:`SUPERVISOR_PID_ENV`),
      at once.
    * Everywhere: the supervisor pipe (:data:`SUPERVISOR_FD_ENV`) turning readable (end of
      file), logged as ``supervisor_lost``. It also covers what the parent-death signal
      misses: that signal follows the thread that started the worker, not the process.

    Raises:
        RuntimeError: no running event loop.
        OSError: ``prctl`` failed.
    """
    watched = os.environ.get(SUPERVISOR_FD_ENV)
    if watched is None:
        return
    supervisor = int(os.environ[SUPERVISOR_PID_ENV])
    loop = asyncio.get_running_loop()
    fd = int(watched)

    def lost() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        get_logger().warning("supervisor_lost", extra={"supervisor_pid": supervisor})
        os.kill(os.getpid(), signal.SIGTERM)

    loop.add_reader(fd, lost)
    if sys.platform == "linux":
        _die_with_parent(supervisor)


def _die_with_parent(supervisor: int) -> None:
    """SIGTERM to this process when its parent dies, and now if ``supervisor`` already has."""
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != supervisor:  # died before the signal was armed: it will never come
        os.kill(os.getpid(), signal.SIGTERM)


def _ignore_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _bind(listener: str, address: tuple[str, int], backlog: int, log: logging.Logger) -> socket.socket | None:
    """A listening socket on ``address``, or ``None`` after a ``listen_failed`` line (with a
    ``hint`` when the address is in use: another gateway, or a worker left by one)."""
    host, port = address
    try:
        return socket.create_server(address, backlog=backlog)
    except OSError as exc:
        failed = {listener: f"{host}:{port}", "error": str(exc)}
        if exc.errno == errno.EADDRINUSE:
            failed["hint"] = (f"another a2a-gateway, or a worker left by one, may still listen on "
                              f"{host}:{port}; `ss -ltnp 'sport = :{port}'` names the process")
        log.error("listen_failed", extra=failed)
        return None


def _forget(metrics_dir: str, pid: int) -> None:
    """Drop a dead worker's live gauges (its counters stay in the sums)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, metrics_dir)
