"""A real redis-server on 127.0.0.1 for tests: started on a free port, stopped at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from tests.support.servers import free_port


def require_redis_server() -> str:
    """The redis-server binary; skip the test when missing (fail under CI, which installs it)."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed; .ci/run must install it")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    return binary


@contextmanager
def redis_server(timeout: float = 10.0) -> Iterator[str]:
    """Start ``redis-server`` (no persistence) and yield its ``redis://127.0.0.1:PORT/0`` URL."""
    binary = require_redis_server()
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="a2a-gw-redis-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir, "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.2)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start: {proc.stderr.read() if proc.stderr else ''!r}") from None
                time.sleep(0.02)  # polling a readiness condition, bounded by the deadline
        yield url
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        shutil.rmtree(workdir, ignore_errors=True)
