"""A real 3-primary Redis Cluster on 127.0.0.1 for tests: three ``redis-server --cluster-enabled
yes`` on free ports (each with its cluster bus on a free port too, ``--cluster-port``), joined by
``redis-cli --cluster create … --cluster-replicas 0``, stopped and removed at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.redis_server import require_redis_server
from tests.support.servers import free_port

PRIMARIES = 3


@contextmanager
def redis_cluster(timeout: float = 30.0) -> Iterator[str]:
    """Start the cluster and yield its ``redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``
    URL once every node reports ``cluster_state:ok`` (within ``timeout`` seconds, else
    RuntimeError). Skips the test when redis-server or redis-cli is missing (fails under CI)."""
    binary = require_redis_server()
    cli = shutil.which("redis-cli")
    if cli is None:
        if os.environ.get("CI"):
            pytest.fail("redis-cli is not installed; .ci/run must install it (redis-tools)")
        pytest.skip("redis-cli is not installed (apt-get install redis-tools)")
    workdir = Path(tempfile.mkdtemp(prefix="a2a-gw-cluster-"))
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        stack.callback(_stop, procs)
        for i in range(PRIMARIES):
            port, bus = free_port(), free_port()
            node = workdir / f"n{i}"
            node.mkdir()
            log = open(node / "log", "wb")
            stack.callback(log.close)
            procs.append(subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(node), "--protected-mode", "yes", "--cluster-enabled", "yes",
                 "--cluster-config-file", str(node / "nodes.conf"), "--cluster-port", str(bus),
                 "--cluster-node-timeout", "5000"],
                stdout=log, stderr=subprocess.STDOUT))
            ports.append(port)
        deadline = time.monotonic() + timeout
        clients = [redis.Redis(host="127.0.0.1", port=p, socket_connect_timeout=0.2) for p in ports]
        for client in clients:
            stack.callback(client.close)
        for client in clients:
            _until(deadline, procs, workdir, lambda c=client: c.ping())
        created = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports), "--cluster-replicas", "0",
             "--cluster-yes"], capture_output=True, timeout=max(1.0, deadline - time.monotonic()))
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout!r} {created.stderr!r}")
        for client in clients:
            _until(deadline, procs, workdir,
                   lambda c=client: b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"))
        yield "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)


def _until(deadline: float, procs: list[subprocess.Popen[bytes]], workdir: Path, ready: object) -> None:
    """Poll ``ready()`` (a readiness condition) until it is true, bounded by ``deadline``."""
    while True:
        try:
            if ready():  # type: ignore[operator]
                return
        except redis.exceptions.ConnectionError:
            pass
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            logs = {p.name: (p / "log").read_text(errors="replace")[-2000:] for p in sorted(workdir.glob("n*"))}
            raise RuntimeError(f"the Redis Cluster did not come up: {logs}")
        time.sleep(0.05)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
