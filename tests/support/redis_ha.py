"""Real Redis processes for the high-availability tests: servers with any options (a replica,
TLS, ACL users), Sentinels, and a primary + replica + three Sentinels group, all on 127.0.0.1
with ephemeral ports; every process started here is stopped here.

Public API
----------
- ``require_redis_sentinel()`` -> the redis-sentinel binary (skip when missing, fail under CI).
- ``RedisProcess(args, port=None)``: a ``redis-server`` with extra options; ``start()``,
  ``kill9()``, ``stop()``, ``client(**kw)`` (a sync redis-py client), ``.port``, ``.url``.
- ``SentinelProcess(master_port, port=None, quorum=2, …)``: a ``redis-sentinel`` monitoring
  ``SERVICE`` at ``127.0.0.1:master_port``.
- ``LinkProxy(target_port)``: a TCP relay for the replication link; ``hold()`` stops relaying
  (what the primary sends is dropped, as in a partition), ``stop()``.
- ``ha_group(service=…, lagging_link=False)`` -> context manager yielding :class:`HaGroup`
  (primary, replica, three Sentinels; with ``lagging_link`` the replica reaches the primary
  through a :class:`LinkProxy`) once the replica's link is up and every Sentinel sees the
  replica and the two other Sentinels.
- ``poll(predicate, timeout, message)``: poll a readiness condition with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from tests.support.redis_server import require_redis_server
from tests.support.servers import free_port

SERVICE = "ledger"
T = TypeVar("T")


def require_redis_sentinel() -> str:
    """The redis-sentinel binary; skip the test when missing (fail under CI, which installs it)."""
    binary = shutil.which("redis-sentinel")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("redis-sentinel is not installed; .ci/run must install it")
        pytest.skip("redis-sentinel is not installed (apt-get install redis-sentinel)")
    return binary


def poll(predicate: Callable[[], T], timeout: float, message: str, interval: float = 0.02) -> T:
    """``predicate()`` once it is truthy (errors count as not yet); AssertionError with
    ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (redis.exceptions.RedisError, OSError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} (within {timeout} s; last error: {last!r})")
        time.sleep(interval)  # polling a readiness condition, bounded by the deadline


class _Process:
    """One Redis-family process: a command line, a work directory, start / kill -9 / stop."""

    def __init__(self, port: int | None) -> None:
        self.port = port or free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="a2a-gw-redis-ha-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.workdir / "server.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def client_kwargs(self) -> dict[str, Any]:
        return {}

    def start(self, timeout: float = 10.0) -> None:
        """Start (again) on the same port and wait until it answers ``PING``."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir)
        client = self.client(socket_connect_timeout=0.2, socket_timeout=1)
        try:
            poll(lambda: self.alive() and client.ping(), timeout,
                 f"{type(self).__name__} on port {self.port} did not start: {self.log_text()[-2000:]}")
        finally:
            client.close()

    def alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"exited: {self.log_text()[-2000:]}")
        return True

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **{"socket_timeout": 2, **self.client_kwargs(), **kwargs})

    def kill9(self) -> None:
        """SIGKILL, and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 5 s), and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class RedisProcess(_Process):
    """``redis-server`` on 127.0.0.1 without persistence, plus ``args`` (``--replicaof …``,
    ``--user …``, the ``--tls-*`` files). ``tls``: ``port`` is the TLS port and there is no
    plain one. ``client_options``: how the test's own client connects."""

    def __init__(self, args: Sequence[str] = (), port: int | None = None,
                 client_options: dict[str, Any] | None = None, tls: bool = False) -> None:
        super().__init__(port)
        self.args = list(args)
        self.client_options = client_options or {}
        self.tls = tls

    def command(self) -> list[str]:
        port = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        return [require_redis_server(), *port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--repl-diskless-sync-delay", "0", "--dir", str(self.workdir), "--logfile", str(self.log),
                *self.args]

    def client_kwargs(self) -> dict[str, Any]:
        return self.client_options

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"


class SentinelProcess(_Process):
    """``redis-sentinel`` on 127.0.0.1 monitoring ``service`` at ``127.0.0.1:master_port``:
    down after ``down_after_ms`` of silence, failing over with ``quorum`` votes.
    ``requirepass``: the Sentinel's own password; ``auth_pass``: the data nodes'."""

    def __init__(self, master_port: int, *, port: int | None = None, service: str = SERVICE,
                 quorum: int = 2, down_after_ms: int = 1000, failover_timeout_ms: int = 10000,
                 requirepass: str | None = None, auth_pass: str | None = None) -> None:
        super().__init__(port)
        lines = [f"port {self.port}", "bind 127.0.0.1", f"dir {self.workdir}", f"logfile {self.log}",
                 f"sentinel monitor {service} 127.0.0.1 {master_port} {quorum}",
                 f"sentinel down-after-milliseconds {service} {down_after_ms}",
                 f"sentinel failover-timeout {service} {failover_timeout_ms}",
                 f"sentinel parallel-syncs {service} 1"]
        if auth_pass:
            lines.append(f"sentinel auth-pass {service} {auth_pass}")
        if requirepass:
            lines.append(f"requirepass {requirepass}")
            self.client_options: dict[str, Any] = {"password": requirepass}
        else:
            self.client_options = {}
        self.service = service
        self.conf = self.workdir / "sentinel.conf"
        self.conf.write_text("\n".join(lines) + "\n")  # Sentinel rewrites it: its own copy

    def command(self) -> list[str]:
        return [require_redis_sentinel(), str(self.conf)]

    def client_kwargs(self) -> dict[str, Any]:
        return self.client_options

    def master(self) -> dict[str, Any]:
        """``SENTINEL MASTER service`` as a dict (bytes decoded)."""
        client = self.client(decode_responses=True)
        try:
            return client.sentinel_master(self.service)
        finally:
            client.close()


class LinkProxy:
    """A TCP relay on 127.0.0.1 to ``127.0.0.1:target_port`` (the replica's link to its
    primary). :meth:`hold` models a partition of that link: from then on nothing is relayed in
    either direction (bytes are read and dropped, so the primary's output never backs up), and
    a connection whose other side closes is closed. :meth:`stop` closes everything."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.held = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self._spawn(self._accept)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="link-proxy")
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return  # stopped
            try:
                up = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
                up.settimeout(None)
            except OSError:
                down.close()
                continue
            with self._lock:
                if self._closed:
                    down.close()
                    up.close()
                    return
                self._sockets += [down, up]
            self._spawn(self._pump, up, down)
            self._spawn(self._pump, down, up)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self.held.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def hold(self) -> None:
        """From now on relay nothing (a partition of the link)."""
        self.held.set()

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            sockets, threads = list(self._sockets), list(self._threads)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in threads:
            thread.join(timeout=5)


@dataclass
class HaGroup:
    """A primary, a replica and three Sentinels."""

    primary: RedisProcess
    replica: RedisProcess
    sentinels: list[SentinelProcess]
    service: str
    link: LinkProxy | None = None

    def url(self, db: int = 0) -> str:
        """The ledger URL: ``redis+sentinel://`` with all three Sentinels."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/{db}"

    def master_port(self) -> int:
        """The primary's port as the first Sentinel that answers reports it."""
        for s in self.sentinels:
            try:
                return int(s.master()["port"])
            except (redis.exceptions.RedisError, OSError):
                continue
        raise AssertionError("no Sentinel answers")


def replica_link_up(replica: RedisProcess, master_port: int) -> bool:
    info = replica.client().info("replication")
    return (info.get("role") == "slave" and int(info.get("master_port", 0)) == master_port
            and info.get("master_link_status") == "up")


def sentinels_agree(sentinels: Sequence[SentinelProcess], master_port: int, replicas: int = 1) -> bool:
    """Every Sentinel names ``master_port`` as primary, sees ``replicas`` replicas and all other
    Sentinels, and none thinks the primary down."""
    for s in sentinels:
        m = s.master()
        if (int(m["port"]) != master_port or int(m["num-slaves"]) < replicas
                or int(m["num-other-sentinels"]) < len(sentinels) - 1 or m["is_sdown"] or m["is_odown"]):
            return False
    return True


@contextmanager
def ha_group(service: str = SERVICE, *, lagging_link: bool = False, down_after_ms: int = 1000,
             timeout: float = 30.0) -> Iterator[HaGroup]:
    """Start a primary, its replica and three Sentinels (quorum 2); yield once all agree.

    ``lagging_link``: the replica replicates through a :class:`LinkProxy` (so the test can
    partition the link); the Sentinels' ``failover-timeout`` is then long enough (60 s) that
    they do not "fix" the replica's configuration (it names the proxy's port, not the
    primary's) during the test.
    """
    require_redis_sentinel()
    with ExitStack() as stack:
        primary = RedisProcess()
        stack.callback(primary.cleanup)
        primary.start()
        link = LinkProxy(primary.port) if lagging_link else None
        if link is not None:
            stack.callback(link.stop)
        upstream = link.port if link is not None else primary.port
        replica = RedisProcess(["--replicaof", "127.0.0.1", str(upstream)])
        stack.callback(replica.cleanup)
        replica.start()
        poll(lambda: replica_link_up(replica, upstream), timeout, "the replica did not sync")
        sentinels = []
        for _ in range(3):
            s = SentinelProcess(primary.port, service=service, down_after_ms=down_after_ms,
                                failover_timeout_ms=60000 if lagging_link else 10000)
            stack.callback(s.cleanup)
            s.start()
            sentinels.append(s)
        poll(lambda: sentinels_agree(sentinels, primary.port), timeout,
             "the Sentinels did not discover the replica and each other")
        yield HaGroup(primary, replica, sentinels, service, link)
