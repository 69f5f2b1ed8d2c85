"""`a2a-gateway serve` as a real process, its admin listener and its connection bounds:
``--admin-port 0`` and the ``admin_listening`` line, the admin flags and their environment
variables, clear start-up failures (an admin port in use: exit 3; an unreadable or empty
token file: exit 2), the bounds of ``listen:`` in force, the descriptor limit raised."""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.scripted_worker import ScriptedWorker
from tests.support.servers import free_port, serve_in_thread, wait_until

WAIT = 5.0


@pytest.fixture
def worker() -> Iterator[str]:
    with serve_in_thread(ScriptedWorker()) as srv:
        yield srv.url


class Gateway:
    """A ``serve`` process whose stderr (JSON lines) is read from a file as it grows."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.stderr_path = tmp_path / "gateway.stderr"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", *args],
                                         stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **(env or {})})

    def lines(self) -> list[dict[str, Any]]:
        text = self.stderr_path.read_text()
        return [orjson.loads(line) for line in text.splitlines()[:-1 if not text.endswith("\n") else None]
                if line.strip()]

    def logged(self, event: str) -> dict[str, Any] | None:
        """The first ``event`` line logged so far."""
        assert self.proc.poll() is None, self.stderr_path.read_text()
        return next((doc for doc in self.lines() if doc["event"] == event), None)

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=20)


def test_admin_port_0_is_logged_and_answers_while_the_traffic_port_relays(worker: str, tmp_path: Path) -> None:
    port = free_port()
    gw = Gateway(tmp_path, "--upstream", worker, "--port", str(port), "--ledger", "memory", "--admin-port", "0")
    try:
        admin = wait_until(lambda: gw.logged("admin_listening"), timeout=20)["admin"]
        starting = gw.logged("starting")
        assert starting is not None
        assert starting["admin"] == "127.0.0.1:0" and starting["listen"] == f"127.0.0.1:{port}"
        host, admin_port = str(admin).rsplit(":", 1)
        assert host == "127.0.0.1" and int(admin_port) not in (0, port)
        with httpx.Client(trust_env=False, timeout=WAIT) as client:
            assert client.get(f"http://{admin}/healthz").json() == {"status": "ok"}
            # ready once the worker's card is in (fetched in the background from start-up on)
            wait_until(lambda: client.get(f"http://{admin}/readyz").status_code == 200, timeout=WAIT)
            assert "a2a_gateway_build_info" in client.get(f"http://{admin}/metrics").text
            assert client.get(f"http://127.0.0.1:{port}/metrics").status_code == 404  # the worker's 404
            assert client.get(f"http://127.0.0.1:{port}/healthz").status_code == 404
    finally:
        assert gw.stop() == 0
    [limit] = [doc for doc in gw.lines() if doc["event"] == "open_files_limit"]
    assert limit["soft"] == limit["hard"] or limit["hard"] == "unlimited"  # raised to the hard limit
    assert [doc for doc in gw.lines() if doc["event"] == "admin_without_token"] == []  # loopback only


class _Bound:
    def __init__(self, *address: object) -> None:
        self.address = address

    def getsockname(self) -> tuple[object, ...]:
        return self.address


@pytest.mark.parametrize(("address", "reach"), [
    (("127.0.0.1", 8081), None), (("127.0.0.2", 8081), None), (("::1", 8081, 0, 0), None),
    (("0.0.0.0", 8081), "network"), (("::", 8081, 0, 0), "network"), (("10.1.2.3", 8081), "network"),
    (("fe80::1%eth0", 8081, 0, 2), "network"),
])
def test_an_admin_listener_beyond_loopback_without_a_token_is_warned_about(address: tuple[object, ...],
                                                                          reach: str | None) -> None:
    """``admin_without_token`` is logged at start when the admin listener has no token and is
    bound beyond loopback (tests bind 127.0.0.1 only, so the decision is checked on its own)."""
    from gateway.server import _reach

    assert _reach(_Bound(*address)) == reach  # type: ignore[arg-type]


def test_admin_flags_override_the_config_file(worker: str, tmp_path: Path) -> None:
    port, admin_port = free_port(), free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"listen: {{port: {port}}}\nadmin: {{host: 127.0.0.2, port: 1}}\n"
                      f"ledger: {{url: memory}}\nupstreams: [{{name: w, url: '{worker}/'}}]\n")
    gw = Gateway(tmp_path, "--config", str(config), "--admin-host", "127.0.0.1",
                 env={"A2A_GATEWAY_ADMIN_PORT": str(admin_port)})
    try:
        listening = wait_until(lambda: gw.logged("admin_listening"), timeout=20)
        assert listening["admin"] == f"127.0.0.1:{admin_port}"
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{admin_port}/readyz", trust_env=False,
                                     timeout=WAIT).status_code == 200, timeout=WAIT)
    finally:
        assert gw.stop() == 0


def test_an_admin_port_in_use_exits_3_with_one_clear_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9/",
                               "--port", str(free_port()), "--admin-port", str(taken), "--ledger", "memory"],
                              capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    [failed] = [orjson.loads(line) for line in proc.stderr.splitlines() if '"listen_failed"' in line]
    assert failed["admin"] == f"127.0.0.1:{taken}" and "address already in use" in str(failed["error"]).lower()
    assert f"port {taken} is in use" in failed["hint"] and f"ss -ltnp 'sport = :{taken}'" in failed["hint"]
    assert "--admin-port" in failed["hint"]
    assert "Traceback" not in proc.stderr


def test_a_listen_port_in_use_names_the_port_and_how_to_find_its_holder() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9/",
                               "--port", str(taken), "--admin-port", "0", "--ledger", "memory"],
                              capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    [failed] = [orjson.loads(line) for line in proc.stderr.splitlines() if '"listen_failed"' in line]
    assert failed["listen"] == f"127.0.0.1:{taken}"
    assert failed["hint"] == (f"port {taken} is in use by another process; `ss -ltnp 'sport = :{taken}'` "
                              f"(or `lsof -iTCP:{taken} -sTCP:LISTEN`) names it; --port chooses another port")


@pytest.mark.parametrize("content", [None, "\n"])
def test_an_unreadable_or_empty_token_file_exits_2_with_one_line(tmp_path: Path, content: str | None) -> None:
    token = tmp_path / "token"
    if content is not None:
        token.write_text(content)
    config = tmp_path / "gateway.yaml"
    config.write_text(f"admin: {{token_file: '{token}'}}\nledger: {{url: memory}}\n"
                      "upstreams: [{name: w, url: 'http://127.0.0.1:9/'}]\n")
    proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(config),
                           "--port", str(free_port()), "--admin-port", str(free_port())],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line
    assert proc.stderr.startswith(f"admin.token_file: {token}: ")


def test_the_bounds_of_the_config_file_are_in_force(worker: str, tmp_path: Path) -> None:
    port, admin_port = free_port(), free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"listen: {{port: {port}, max_connections: 2, header_timeout_seconds: 2}}\n"
                      f"admin: {{port: {admin_port}}}\nledger: {{url: memory}}\n"
                      f"upstreams: [{{name: w, url: '{worker}/'}}]\n")
    gw = Gateway(tmp_path, "--config", str(config))
    try:
        wait_until(lambda: gw.logged("admin_listening"), timeout=20)
        admin = f"http://127.0.0.1:{admin_port}"
        held = [socket.create_connection(("127.0.0.1", port), timeout=WAIT) for _ in range(2)]
        try:
            wait_until(lambda: "a2a_gateway_open_connections 2.0" in httpx.get(admin + "/metrics", trust_env=False).text)
            with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as third:
                assert third.recv(4096).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            for sock in held:  # silent since the accept: closed at the header timeout
                assert sock.recv(4096).startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        finally:
            for sock in held:
                sock.close()
        text = httpx.get(admin + "/metrics", trust_env=False).text
        assert 'a2a_gateway_connections_refused_total{reason="max_connections"} 1.0' in text
        assert 'a2a_gateway_connections_refused_total{reason="header_timeout"} 2.0' in text
    finally:
        assert gw.stop() == 0
    refused = [(doc["reason"], doc["connections"]) for doc in gw.lines() if doc["event"] == "connections_refused"]
    assert refused == [("max_connections", 1), ("header_timeout", 1)]  # the first of each, at once


def test_max_connections_near_the_descriptor_limit_is_warned_at_start(worker: str, tmp_path: Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > 10_000_000:
        pytest.skip("no finite descriptor limit to come near")
    port, admin_port = free_port(), free_port()
    config_text = (f"listen: {{port: {port}, max_connections: {hard}}}\nadmin: {{port: {admin_port}}}\n"
                   f"ledger: {{url: memory}}\nupstreams: [{{name: w, url: '{worker}/'}}]\n")
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text)
    gw = Gateway(tmp_path, "--config", str(path))
    try:
        wait_until(lambda: gw.logged("admin_listening"), timeout=20)  # started: SIGTERM drains
        warning = gw.logged("max_connections_near_open_files_limit")
        assert warning is not None
    finally:
        assert gw.stop() == 0
    assert warning["max_connections"] == hard and warning["open_files_limit"] == hard
    assert re.search(r"ulimit|LimitNOFILE", str(warning["hint"]))
