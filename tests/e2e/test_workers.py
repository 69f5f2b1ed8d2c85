"""`a2a-gateway serve --workers N` as real processes: N gateways on one socket (and one admin
socket), one shared SQLite ledger, metrics summed over the workers, signals forwarded, clean
exit; the workers die with their supervisor (kill -9 included), and the supervisor's pid file
keeps a second gateway off the same ledger."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.workers import SUPERVISOR_FD_ENV, SUPERVISOR_PID_ENV
from tests.support.scripted_worker import Event, Gate, ScriptedWorker
from tests.support.servers import ServerProcess, free_port, serve_in_thread, subprocess_server, wait_until

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


def gone(pid: int) -> bool:
    """No process ``pid`` any more (a zombie that nobody reaps counts as gone)."""
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def workers_started(proc: ServerProcess) -> list[int]:
    """The worker pids of the supervisor's ``workers_started`` line (``[]`` until it is logged)."""
    for line in proc.stderr_text().splitlines():
        if '"workers_started"' in line:
            return [int(pid) for pid in orjson.loads(line)["pids"]]
    return []


def open_files(pid: int) -> set[str]:
    """What the file descriptors of process ``pid`` point at (one closing meanwhile is skipped)."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return found


def events(stderr: str) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def answers(url: str) -> bool:
    try:
        return httpx.get(url, trust_env=False, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


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
    started = sorted((line["worker"], line["pid"], line["supervisor_pid"]) for line in lines
                     if line["event"] == "worker_started")
    assert [w for w, _, _ in started] == [0, 1] and sorted(p for _, p, _ in started) == sorted(workers)
    assert {s for _, _, s in started} == {proc.pid}
    # every line carries the pid of the process that wrote it: the supervisor's or a worker's
    assert {line["pid"] for line in lines} <= {proc.pid, *workers}
    assert {line["pid"] for line in lines if line["event"] == "workers_started"} == {proc.pid}
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
    assert exited and exited[0]["worker_pid"] == victim and exited[0]["restart"] is False


def test_kill_9_of_the_supervisor_takes_the_workers_with_it_and_a_restart_works(
        worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    w, wurl = worker
    w.on("GetTask", json_result=WORKING, times=None)
    port, admin_port = free_port(), free_port()
    url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port),
           "--ledger", f"sqlite:///{tmp_path}/ledger.db", "--workers", "2", "--shutdown-grace", "1"]
    pids: list[int] = []
    try:
        with subprocess_server(cmd, admin + "/readyz") as proc:
            pids = wait_until(lambda: workers_started(proc), message="the workers_started line")
            assert len(pids) == 2 and sorted(pids) == sorted(children(proc.pid))
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=10) == -signal.SIGKILL
            wait_until(lambda: all(gone(pid) for pid in pids), timeout=15, message="both workers gone")
    finally:  # no orphan outlives a failed test
        for pid in pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
    with subprocess_server(cmd, admin + "/readyz") as fresh:  # same port, same ledger, same pid file
        r = httpx.post(url + "/", json=GET, headers={"A2A-Version": "1.0"}, trust_env=False, timeout=10)
        assert r.json()["result"]["status"]["state"] == "TASK_STATE_WORKING"
        assert (tmp_path / "ledger.db.pid").read_text() == f"{fresh.pid}\n"


def test_a_second_gateway_on_the_same_ledger_exits_3_and_the_first_keeps_serving(
        worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    w, wurl = worker
    w.on("GetTask", json_result=WORKING, times=None)
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    pid_file = tmp_path / "ledger.db.pid"
    port, admin_port = free_port(), free_port()
    url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port),
           "--ledger", ledger, "--workers", "2", "--shutdown-grace", "1"]
    with subprocess_server(cmd, admin + "/readyz") as proc:
        assert pid_file.read_text() == f"{proc.pid}\n"
        pids = wait_until(lambda: workers_started(proc), message="the workers_started line")
        for pid in pids:  # the lock is the supervisor's alone
            assert str(pid_file) not in open_files(pid)
        second = subprocess.run([sys.executable, "-m", "gateway", "serve", "--upstream", wurl,
                                 "--port", str(free_port()), "--admin-port", str(free_port()),
                                 "--ledger", ledger],
                                capture_output=True, text=True, timeout=30)
        assert second.returncode == 3
        assert second.stderr.splitlines() == [
            f"a2a-gateway serve: another a2a-gateway (pid {proc.pid}) holds {pid_file}: stop it "
            "first, or give it another ledger/pid_file"]
        stats = subprocess.run([sys.executable, "-m", "gateway", "ledger", "stats", "--ledger", ledger],
                               capture_output=True, text=True, timeout=30)
        assert stats.returncode == 0, stats.stderr  # the read-only CLI takes no lock
        r = httpx.post(url + "/", json=GET, headers={"A2A-Version": "1.0"}, trust_env=False, timeout=10)
        assert r.json()["result"]["status"]["state"] == "TASK_STATE_WORKING"
        assert answers(admin + "/readyz") and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    assert pid_file.read_text() == ""  # emptied at the clean exit (the lock, not the file, counts)


def test_a_busy_address_is_named_with_a_hint(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9/",
                               "--port", str(port), "--ledger", f"sqlite:///{tmp_path}/ledger.db",
                               "--workers", "2"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    failed = [line for line in events(proc.stderr) if line["event"] == "listen_failed"]
    assert failed and failed[0]["listen"] == f"127.0.0.1:{port}"
    assert "another a2a-gateway" in str(failed[0]["hint"]) and f":{port}" in str(failed[0]["hint"])


def test_the_supervisor_pipe_alone_drains_a_worker(worker: tuple[ScriptedWorker, str]) -> None:
    """This test process plays the supervisor and stays alive (no parent-death signal): the
    worker learns of the end only from the pipe, and drains as on SIGTERM."""
    w, wurl = worker
    gate = Gate(timeout=20)
    w.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}),
        gate,
    ])
    watched, alive = os.pipe()
    port, admin_port = free_port(), free_port()
    url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port),
           "--ledger", "memory", "--shutdown-grace", "0.5"]
    env = {SUPERVISOR_FD_ENV: str(watched), SUPERVISOR_PID_ENV: str(os.getpid())}
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}})
    try:
        with subprocess_server(cmd, admin + "/readyz", env=env, pass_fds=(watched,)) as proc:
            with httpx.Client(trust_env=False, timeout=10) as client:
                with client.stream("POST", url + "/", content=body,
                                   headers={"A2A-Version": "1.0", "content-type": "application/json"}) as r:
                    chunks = r.iter_raw()
                    raw = next(chunks)
                    assert b"t-1" in raw and proc.poll() is None
                    os.close(alive)  # the "supervisor" is gone
                    alive = -1
                    raw += b"".join(chunks)
            assert proc.wait(timeout=10) == 0
            stderr = proc.stderr_text()
    finally:
        gate.release()
        for fd in (watched, alive):
            if fd >= 0:
                os.close(fd)
    assert raw.endswith(b": gateway shutting down; resubscribe to continue\n\n")
    names = [line["event"] for line in events(stderr)]
    assert "supervisor_lost" in names and names.index("supervisor_lost") < names.index("draining")
    assert [line["supervisor_pid"] for line in events(stderr) if line["event"] == "supervisor_lost"] == [os.getpid()]


PARENT = """\
import os, subprocess, sys
env = {**os.environ, "%s": sys.argv[1], "%s": str(os.getpid())}
child = subprocess.Popen(sys.argv[2:], env=env, pass_fds=(int(sys.argv[1]),), stdout=subprocess.DEVNULL)
print(child.pid, flush=True)
child.wait()
""" % (SUPERVISOR_FD_ENV, SUPERVISOR_PID_ENV)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_parent_death_signal_alone_drains_a_worker(
        worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    """A stand-in supervisor starts the gateway; this test holds the pipe's write end open, so
    when the stand-in is killed only the parent-death signal tells the gateway."""
    _, wurl = worker
    watched, alive = os.pipe()
    port, admin_port = free_port(), free_port()
    admin = f"http://127.0.0.1:{admin_port}"
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port), "--ledger", "memory", "--shutdown-grace", "0.5"]
    log = tmp_path / "stderr"
    gateway = 0
    with open(log, "wb") as err:
        parent = subprocess.Popen([sys.executable, "-c", PARENT, str(watched), *cmd], stdout=subprocess.PIPE,
                                  stderr=err, stdin=subprocess.DEVNULL, pass_fds=(watched,), text=True)
    stdout = parent.stdout
    assert stdout is not None
    try:
        gateway = int(stdout.readline())
        wait_until(lambda: answers(admin + "/readyz"), timeout=20, message="the gateway ready")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: gone(gateway), timeout=15, message="the gateway gone")
    finally:
        if gateway and not gone(gateway):
            os.kill(gateway, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
        stdout.close()
        os.close(watched)
        os.close(alive)
    names = [line["event"] for line in events(log.read_text())]
    assert "draining" in names and "supervisor_lost" not in names


@pytest.mark.slow
def test_a_worker_that_dies_later_is_restarted_in_its_slot_and_says_so(
        worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    """Past the start-up window a dead worker is a crash: the supervisor logs
    ``worker_exited`` and ``worker_restarted`` (slot, old and new pid), and the new worker
    announces itself with the same slot."""
    import time

    from gateway.workers import STARTUP_SECONDS

    _, wurl = worker
    port, admin_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port), "--ledger", f"sqlite:///{tmp_path}/ledger.db", "--workers", "2"]
    with subprocess_server(cmd, f"http://127.0.0.1:{admin_port}/readyz") as proc:
        wait_until(lambda: len(children(proc.pid)) == 2, message="two worker processes")
        begun = time.monotonic()  # the workers started before this
        # a crash only counts as one past the start-up window (a death within it stops the gateway)
        wait_until(lambda: time.monotonic() - begun > STARTUP_SECONDS + 0.5, timeout=STARTUP_SECONDS + 5,
                   message="the start-up window is over")
        before = children(proc.pid)
        victim = before[0]
        subprocess.run(["kill", "-9", str(victim)], check=True)
        wait_until(lambda: "\"worker_restarted\"" in proc.stderr_text(), timeout=20, message="worker_restarted")
        wait_until(lambda: len(children(proc.pid)) == 2 and victim not in children(proc.pid),
                   message="the slot filled again")
        (new_pid,) = set(children(proc.pid)) - set(before)
        wait_until(lambda: proc.stderr_text().count('"worker_started"') == 3, message="the new worker's line")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        lines = [orjson.loads(line) for line in proc.stderr_text().splitlines() if line.strip()]
    (restarted,) = [line for line in lines if line["event"] == "worker_restarted"]
    assert restarted["old_pid"] == victim and restarted["pid"] == proc.pid
    slot = restarted["worker"]
    again = [line for line in lines if line["event"] == "worker_started" and line["pid"] == restarted["new_pid"]]
    assert again and again[0]["worker"] == slot
    assert restarted["new_pid"] == new_pid
