"""`a2a-gateway serve --workers N` as real processes: N gateways on one socket (and one admin
socket), one shared SQLite ledger, metrics summed over the workers, signals forwarded, clean
exit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.scripted_worker import ScriptedWorker
from tests.support.servers import free_port, serve_in_thread, subprocess_server, wait_until

GET = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}
WORKING = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}


@pytest.fixture
def worker() -> Iterator[tuple[ScriptedWorker, str]]:
    w = ScriptedWorker()
    with serve_in_thread(w) as srv:
        yield w, srv.url


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def listening_inode(port: int) -> str:
    """The inode of the socket listening on 127.0.0.1:``port`` (from /proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":  # state LISTEN
                return fields[9]
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds open."""
    fd_dir = Path(f"/proc/{pid}/fd")
    links = [os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)]
    return {link[len("socket:["):-1] for link in links if link.startswith("socket:[")}


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            total += float(m.group(2))
    return total


def test_a_memory_ledger_is_refused_with_several_workers() -> None:
    proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9/",
                           "--port", str(free_port()), "--admin-port", str(free_port()),
                           "--ledger", "memory", "--workers", "2"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "shared ledger" in proc.stderr and "Traceback" not in proc.stderr


def test_two_workers_share_the_socket_the_ledger_and_the_metrics(
        worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    w, wurl = worker
    w.on("GetTask", json_result=WORKING, times=None)
    config = tmp_path / "gateway.yaml"
    config.write_text(f"upstreams:\n  - {{name: worker, url: '{wurl}/', prefix: /}}\n"
                      f"ledger: {{url: 'sqlite:///{tmp_path}/ledger.db'}}\n"
                      "admin: {tracked_refresh_seconds: 0.2}\n")
    port, admin_port = free_port(), free_port()
    url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port),
           "--admin-port", str(admin_port), "--workers", "2", "--shutdown-grace", "1"]
    with subprocess_server(cmd, admin + "/readyz") as proc:
        wait_until(lambda: len(children(proc.pid)) == 2, message="two worker processes")
        with httpx.Client(trust_env=False, timeout=10) as client:
            # both workers started (each fetched the card once), so both handle SIGHUP
            wait_until(lambda: metric(client.get(admin + "/metrics").text,
                                      "a2a_gateway_card_fetches_total", outcome="fresh") == 2)
            # one admin socket, bound by the supervisor, accepted on by both workers
            admin_socket = listening_inode(admin_port)
            assert all(admin_socket in socket_inodes(pid) for pid in children(proc.pid))
            for i in range(30):  # a new connection each: the kernel spreads them over the workers
                with httpx.Client(trust_env=False, timeout=10) as one:
                    r = one.post(url + "/", json={**GET, "id": i}, headers={"A2A-Version": "1.0"})
                assert r.json()["result"]["status"]["state"] == "TASK_STATE_WORKING" and r.json()["id"] == i
            for _ in range(6):  # whichever worker answers, on a new admin connection: the sum of both
                with httpx.Client(trust_env=False, timeout=10) as one:
                    text = one.get(admin + "/metrics").text
                assert metric(text, "a2a_gateway_requests_total", method="GetTask") == 30
            # the tracked-task gauge is refreshed from the ledger in the background, not by a scrape
            wait_until(lambda: metric(client.get(admin + "/metrics").text, "a2a_gateway_tracked_tasks",
                                      state="TASK_STATE_WORKING") == 1)
            assert client.get(url + "/metrics").status_code == 404  # the traffic port: the worker's
            proc.send_signal(signal.SIGHUP)  # forwarded: each worker re-reads the file
            wait_until(lambda: metric(client.get(admin + "/metrics").text,
                                      "a2a_gateway_config_reloads_total", outcome="applied") == 2)
        workers = children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        stderr = proc.stderr_text()
    lines = [orjson.loads(line) for line in stderr.splitlines() if line.strip()]
    assert [line["needs_resync"] for line in lines if line["event"] == "ledger_opened"] == [0]  # once
    assert [line["exit_codes"] for line in lines if line["event"] == "workers_stopped"] == [[0, 0]]
    assert [line["admin"] for line in lines if line["event"] == "admin_listening"] == [f"127.0.0.1:{admin_port}"] * 2
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_a_worker_that_dies_at_start_stops_the_gateway(
        worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    _, wurl = worker
    port, admin_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port), "--ledger", f"sqlite:///{tmp_path}/ledger.db", "--workers", "2"]
    with subprocess_server(cmd, f"http://127.0.0.1:{admin_port}/readyz") as proc:
        wait_until(lambda: len(children(proc.pid)) == 2, message="two worker processes")
        victim = children(proc.pid)[0]
        subprocess.run(["kill", "-9", str(victim)], check=True)
        assert proc.wait(timeout=20) == 1
        stderr = proc.stderr_text()
    exited = [orjson.loads(line) for line in stderr.splitlines() if '"worker_exited"' in line]
    assert exited and exited[0]["pid"] == victim and exited[0]["restart"] is False
