"""`a2a-gateway serve` as a real process: graceful shutdown with an open stream, JSON logs,
clear start-up failures."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.scripted_worker import Event, Gate, ScriptedWorker
from tests.support.servers import free_port, serve_in_thread, subprocess_server, wait_until


@pytest.fixture
def worker() -> Iterator[tuple[ScriptedWorker, str]]:
    w = ScriptedWorker()
    with serve_in_thread(w) as srv:
        yield w, srv.url


def test_sigterm_ends_open_streams_cleanly_and_exits_zero(worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    w, wurl = worker
    gate = Gate(timeout=20)
    w.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}),
        gate,
    ])
    port, admin_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port), "--ledger", f"sqlite:///{tmp_path}/ledger.db",
           "--shutdown-grace", "0.5"]
    url = f"http://127.0.0.1:{port}"
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}})
    with subprocess_server(cmd, f"http://127.0.0.1:{admin_port}/readyz") as proc:
        with httpx.Client(trust_env=False, timeout=10) as client:
            headers = {"A2A-Version": "1.0", "content-type": "application/json"}
            with client.stream("POST", url + "/", content=body, headers=headers) as r:
                chunks = r.iter_raw()
                raw = next(chunks)
                assert b"t-1" in raw
                proc.send_signal(signal.SIGTERM)
                raw += b"".join(chunks)  # ends cleanly: no RemoteProtocolError
        assert proc.wait(timeout=10) == 0
        stderr = proc.stderr_text()
    gate.release()
    assert raw.endswith(b": gateway shutting down; resubscribe to continue\n\n")
    lines = [orjson.loads(line) for line in stderr.splitlines() if line.strip()]  # all JSON
    closed = [line for line in lines if line["event"] == "stream_closed"]
    assert closed and closed[0]["reason"] == "shutdown" and closed[0]["task_id"] == "t-1"
    assert any(line["event"] == "starting" for line in lines)


def test_unusable_ledger_is_one_clear_line_not_a_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9/",
         "--port", str(free_port()), "--ledger", f"sqlite:///{blocker}/ledger.db"],
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 1
    assert "ledger sqlite:///" in proc.stderr and "cannot open" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_port_in_use_exits_3(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9/",
             "--port", str(port), "--admin-port", str(free_port()), "--ledger", "memory"],
            capture_output=True, text=True, timeout=30,
        )
    assert proc.returncode == 3
    assert "address already in use" in proc.stderr.lower()
    assert "Traceback" not in proc.stderr


def test_a_pid_file_from_flag_env_or_config_lets_one_gateway_run(
        worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    _, wurl = worker
    pid_file = tmp_path / "run" / "gateway.pid"  # its directory is created
    port, admin_port = free_port(), free_port()
    serve = [sys.executable, "-m", "gateway", "serve", "--ledger", "memory"]
    config = tmp_path / "gateway.yaml"
    config.write_text(f"listen: {{port: {free_port()}, pid_file: '{pid_file}'}}\nledger: {{url: memory}}\n"
                      f"admin: {{port: {free_port()}}}\n"
                      f"upstreams:\n  - {{name: worker, url: '{wurl}/', prefix: /}}\n")
    with subprocess_server([*serve, "--upstream", wurl, "--port", str(port), "--admin-port", str(admin_port),
                            "--pid-file", str(pid_file)], f"http://127.0.0.1:{admin_port}/readyz") as proc:
        assert pid_file.read_text() == f"{proc.pid}\n"
        held = f"a2a-gateway serve: another a2a-gateway (pid {proc.pid}) holds {pid_file}: "
        by_env = subprocess.run([*serve, "--upstream", wurl, "--port", str(free_port()),
                                 "--admin-port", str(free_port())], capture_output=True,
                                text=True, timeout=30, env={**os.environ, "A2A_GATEWAY_PID_FILE": str(pid_file)})
        by_config = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(config)],
                                   capture_output=True, text=True, timeout=30)
        for second in (by_env, by_config):
            assert second.returncode == 3 and second.stderr.startswith(held), second.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    assert pid_file.read_text() == ""


def test_ledger_cli_reads_what_the_gateway_stored(worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    w, wurl = worker
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    w.on("GetTask", json_result={"id": "t-9", "contextId": "c-9", "status": {"state": "completed"}})
    w.on("GetTask", json_result={"id": "t-9", "contextId": "c-acme", "status": {"state": "working"}})
    port, admin_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port), "--ledger", ledger]
    with subprocess_server(cmd, f"http://127.0.0.1:{admin_port}/readyz"):
        for params in ({"id": "t-9"}, {"id": "t-9", "tenant": "acme"}):
            httpx.post(f"http://127.0.0.1:{port}/", trust_env=False,
                       headers={"A2A-Version": "1.0", "Authorization": "Bearer alice"},
                       json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": params})
    show = subprocess.run([sys.executable, "-m", "gateway", "ledger", "show", "t-9", "--json", "--ledger", ledger],
                          capture_output=True, text=True, timeout=30)
    assert show.returncode == 0, show.stderr
    record = orjson.loads(show.stdout)[0]["record"]
    assert record["state"] == "TASK_STATE_COMPLETED" and record["context_id"] == "c-9"
    assert record["tenant"] == "" and record["callers"] == 1  # how many, never the fingerprints
    acme = subprocess.run([sys.executable, "-m", "gateway", "ledger", "show", "--tenant", "acme", "t-9",
                           "--json", "--ledger", ledger], capture_output=True, text=True, timeout=30)
    assert acme.returncode == 0, acme.stderr
    record = orjson.loads(acme.stdout)[0]["record"]
    assert (record["tenant"], record["context_id"], record["state"]) == ("acme", "c-acme", "TASK_STATE_WORKING")
    beta = subprocess.run([sys.executable, "-m", "gateway", "ledger", "show", "--tenant", "beta", "t-9",
                           "--ledger", ledger], capture_output=True, text=True, timeout=30)
    assert beta.returncode == 1 and "in tenant 'beta'" in beta.stderr
    stats = subprocess.run([sys.executable, "-m", "gateway", "ledger", "--ledger", ledger, "stats"],
                           capture_output=True, text=True, timeout=30)
    assert orjson.loads(stats.stdout)["by_state"] == {"TASK_STATE_COMPLETED": 1, "TASK_STATE_WORKING": 1}
    missing = subprocess.run([sys.executable, "-m", "gateway", "ledger", "stats", "--ledger",
                              f"sqlite:///{tmp_path}/nope.db"], capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1 and not (tmp_path / "nope.db").exists()


def test_sighup_reloads_config_without_dropping_open_streams(tmp_path: Path) -> None:
    first, second = ScriptedWorker(), ScriptedWorker()
    gate = Gate(timeout=20)
    first.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}),
        gate,
        Event(result={"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"}}}),
    ])
    second.on("GetTask", json_result={"id": "t-2", "contextId": "c-2", "status": {"state": "working"}}, times=None)
    port, admin_port = free_port(), free_port()
    config = tmp_path / "gateway.yaml"

    def write(upstreams: str) -> None:
        config.write_text(f"listen: {{port: {port}}}\nadmin: {{port: {admin_port}}}\n"
                          f"ledger: {{url: memory}}\nupstreams:\n{upstreams}")

    with serve_in_thread(first) as w1, serve_in_thread(second) as w2:
        write(f"  - {{name: a, url: '{w1.url}/', prefix: /a}}\n")
        url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
        cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
        with subprocess_server(cmd, admin + "/readyz") as proc, httpx.Client(trust_env=False, timeout=10) as client:
            body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}})
            get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "t-2"}}
            with client.stream("POST", url + "/a/", content=body,
                               headers={"A2A-Version": "1.0", "content-type": "application/json"}) as r:
                chunks = r.iter_raw()
                assert b"t-1" in next(chunks)
                assert client.post(url + "/b/", json=get).status_code == 404  # not mounted yet
                write(f"  - {{name: a, url: '{w1.url}/', prefix: /a}}\n"
                      f"  - {{name: b, url: '{w2.url}/', prefix: /b}}\n")
                proc.send_signal(signal.SIGHUP)
                wait_until(lambda: 'a2a_gateway_config_reloads_total{outcome="applied"} 1.0'
                           in client.get(admin + "/metrics").text)
                assert client.post(url + "/b/", json=get).json()["result"]["status"]["state"] == "TASK_STATE_WORKING"
                write("  - {name: a, url: 'ftp://nope', prefix: /a}\n")  # invalid: refused
                proc.send_signal(signal.SIGHUP)
                wait_until(lambda: 'a2a_gateway_config_reloads_total{outcome="refused"} 1.0'
                           in client.get(admin + "/metrics").text)
                assert "result" in client.post(url + "/b/", json=get).json()  # old config in force
                gate.release()
                rest = b"".join(chunks)
            assert b"TASK_STATE_COMPLETED" in rest  # the stream opened before the reloads finished normally


def test_sigterm_lets_a_stream_finish_within_the_grace(worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    w, wurl = worker
    gate = Gate(timeout=20)
    w.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-2", "contextId": "c-2", "status": {"state": "TASK_STATE_WORKING"}}}),
        gate,
        Event(result={"statusUpdate": {"taskId": "t-2", "contextId": "c-2", "status": {"state": "TASK_STATE_COMPLETED"}}}),
    ])
    port, admin_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port), "--ledger", "memory", "--shutdown-grace", "20"]
    url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}})
    with subprocess_server(cmd, admin + "/readyz") as proc, httpx.Client(trust_env=False, timeout=10) as client:
        with client.stream("POST", url + "/", content=body,
                           headers={"A2A-Version": "1.0", "content-type": "application/json"}) as r:
            chunks = r.iter_raw()
            assert b"t-2" in next(chunks)
            proc.send_signal(signal.SIGTERM)
            wait_until(lambda: b'"event":"draining"' in proc.stderr_text().encode().replace(b" ", b""))
            # the admin listener outlives the drain: not ready, still alive
            ready = client.get(admin + "/readyz")
            assert (ready.status_code, ready.json()["status"]) == (503, "not ready")
            assert client.get(admin + "/healthz").status_code == 200
            gate.release()  # the worker finishes while the gateway drains
            rest = b"".join(chunks)
        assert proc.wait(timeout=10) == 0
    assert b"TASK_STATE_COMPLETED" in rest and b"shutting down" not in rest


ROOT = Path(__file__).resolve().parents[2]


def test_the_example_config_runs_in_front_of_the_demo_worker(tmp_path: Path) -> None:
    """config/gateway.example.yaml as shipped, its one upstream the demo worker's default URL;
    the ports, the worker URL and the state directory given by A2A_GATEWAY_* variables (which
    win over the file): a message goes through and completes, the default SQLite ledger is made
    in the state directory (mode 0700), and ``ledger stats`` finds it there."""
    from gateway.config import load_config

    example = ROOT / "config" / "gateway.example.yaml"
    assert [u.url for u in load_config(example).upstreams] == ["http://127.0.0.1:9999/"]  # demo.worker's default
    worker_port, port, admin_port = free_port(), free_port(), free_port()
    state = tmp_path / "state"
    env = {"A2A_GATEWAY_UPSTREAM": f"http://127.0.0.1:{worker_port}/", "A2A_GATEWAY_PORT": str(port),
           "A2A_GATEWAY_ADMIN_PORT": str(admin_port), "A2A_GATEWAY_STATE_DIR": str(state)}
    worker_cmd = [sys.executable, "-m", "demo.worker", "--port", str(worker_port), "--log-level", "warning"]
    gateway_cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(example)]
    with subprocess_server(worker_cmd, f"http://127.0.0.1:{worker_port}/.well-known/agent-card.json", cwd=ROOT), \
            subprocess_server(gateway_cmd, f"http://127.0.0.1:{admin_port}/readyz", env=env, cwd=ROOT) as gw:
        r = httpx.post(f"http://127.0.0.1:{port}/", trust_env=False, timeout=10, headers={"A2A-Version": "1.0"},
                       json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                           "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
                           "configuration": {"returnImmediately": False}}})
        task = r.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        gw.send_signal(signal.SIGTERM)
        assert gw.wait(timeout=10) == 0
        lines = [orjson.loads(line) for line in gw.stderr_text().splitlines() if line.strip()]
    assert (state / "ledger.db").is_file() and (state.stat().st_mode & 0o777) == 0o700
    starting = next(line for line in lines if line["event"] == "starting")
    assert starting["state_dir"] == str(state) and starting["ledger"] == f"sqlite://{state}/ledger.db"
    # uvicorn's process lines once, though two uvicorn servers (traffic, admin) run in it
    events = [line["event"] for line in lines]
    assert [sum(e.startswith(w) for e in events) for w in ("Started server process", "Finished server process",
                                                          "Shutting down")] == [1, 1, 1], events
    stats = subprocess.run([sys.executable, "-m", "gateway", "ledger", "stats"], cwd=tmp_path,
                           env={**os.environ, "A2A_GATEWAY_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)},
                           capture_output=True, text=True, timeout=30)
    assert orjson.loads(stats.stdout)["by_state"] == {"TASK_STATE_COMPLETED": 1}


def test_a_sqlite_ledger_in_a_missing_directory_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9/",
                           "--port", str(free_port()), "--ledger", f"sqlite:///{missing}/ledger.db"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert f"the directory {missing} does not exist" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "nonexistent").exists()


def test_sighup_without_a_config_file_says_why_nothing_happened(
        worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    _, wurl = worker
    port, admin_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", wurl, "--port", str(port),
           "--admin-port", str(admin_port), "--ledger", "memory"]
    with subprocess_server(cmd, f"http://127.0.0.1:{admin_port}/readyz") as proc:
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "config_reload_skipped" in proc.stderr_text(), message="the skipped-reload line")
        assert proc.poll() is None  # still serving
        assert httpx.get(f"http://127.0.0.1:{admin_port}/readyz", trust_env=False).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        stderr = proc.stderr_text()
    (line,) = [orjson.loads(ln) for ln in stderr.splitlines() if "config_reload_skipped" in ln]
    assert line["level"] == "warning" and "--config" in line["reason"]


def test_a_stderr_nobody_reads_never_stalls_the_gateway(worker: tuple[ScriptedWorker, str], tmp_path: Path) -> None:
    """Issue #35 (docs/known-limits.md before it): log lines were written on the event loop,
    so a stderr pipe nobody reads stopped the gateway once the pipe was full. Now a thread
    writes them: with the pipe full and ``log.max_queued_lines`` waiting, lines are dropped
    and counted (``a2a_gateway_log_dropped_total``), every request is still answered, and
    SIGTERM still ends the process (exit 0) with the pipe still full."""
    w, wurl = worker
    long_id = "t-" + "x" * 4000  # each request line carries it twice: ~8 KB, the pipe is full in ~8
    w.on_path("GET", f"/tasks/{long_id}", json_body={"id": long_id, "contextId": "c-1",
                                                     "status": {"state": "TASK_STATE_WORKING"}}, times=None)
    port, admin_port = free_port(), free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"listen: {{port: {port}}}\nadmin: {{port: {admin_port}}}\nledger: {{url: memory}}\n"
                      "log: {flush_seconds: 0, max_queued_lines: 20}\n"
                      f"upstreams:\n  - {{name: worker, url: '{wurl}/', prefix: /}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(config)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:  # nobody reads proc.stderr until the end
        admin = f"http://127.0.0.1:{admin_port}"
        wait_until(lambda: _status(admin + "/readyz") == 200, timeout=20, message="the gateway ready")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=10) as http:
            for _ in range(60):  # about 480 KB of lines: far past the pipe's 64 KiB
                r = http.get(f"/tasks/{long_id}", headers={"A2A-Version": "1.0"})
                assert r.status_code == 200 and r.json()["id"] == long_id
        metrics = httpx.get(admin + "/metrics", trust_env=False, timeout=10).text
        dropped = [float(line.split()[-1]) for line in metrics.splitlines()
                   if line.startswith("a2a_gateway_log_dropped_total ")]
        assert dropped and dropped[0] > 0, dropped
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0  # the log thread, still blocked, does not hold the exit
        assert proc.stderr is not None
        *lines, cut = proc.stderr.read().decode().split("\n")  # cut: "", or a line the pipe filled up in
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert lines and all(orjson.loads(line)["event"] for line in lines)  # JSON lines only, never a traceback
    assert cut == "" or cut.startswith('{"ts"')


def _status(url: str) -> int:
    try:
        return httpx.get(url, trust_env=False, timeout=2).status_code
    except httpx.HTTPError:
        return 0
