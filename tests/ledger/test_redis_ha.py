"""The Redis ledger's high-availability parts (docs/resume.md §4): ``redis+sentinel://`` URLs,
credentials (URL, password files, the Sentinels' own), TLS with a client certificate and an ACL
user, and replica acknowledgement (``min_replica_acks``) against a real primary and replica.
The failover itself, through a gateway: tests/e2e/test_redis_failover.py."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.exceptions import AuthenticationError, ConnectionError as RedisConnectionError

from gateway.a2a.states import TaskState
from gateway.invariants.model import TaskRecord
from gateway.ledger import ledger_from_url, redact
from gateway.ledger.redis import (
    ReplicaAckError,
    RedisLedger,
    RedisOptions,
    SentinelURL,
    parse_sentinel_url,
)
from tests.support.redis_ha import RedisProcess, SentinelProcess, poll, replica_link_up


def rec(task_id: str = "t-1", state: TaskState = TaskState.WORKING) -> TaskRecord:
    return TaskRecord(upstream="w", task_id=task_id, context_id="c-1", state=state, observed_at=1000.0)


# ------------------------------------------------------------------------------ URLs


def test_a_sentinel_url_names_sentinels_service_db_and_the_data_nodes_credentials() -> None:
    parsed = parse_sentinel_url("redis+sentinel://app:s%40cret@s1:26380,s2,[::1]:26381/ledger/3")
    assert parsed == SentinelURL((("s1", 26380), ("s2", 26379), ("::1", 26381)), "ledger", 3,
                                 "app", "s@cret", False, {})
    assert parse_sentinel_url("redis+sentinel://s1/ledger") == SentinelURL((("s1", 26379),), "ledger")
    assert parse_sentinel_url("redis+sentinel://:pw@s1/ledger").username is None


def test_a_sentinel_url_takes_redis_py_query_arguments_and_tls() -> None:
    parsed = parse_sentinel_url("rediss+sentinel://s1:26379/ledger/0?ssl_ca_certs=/ca.pem"
                                "&ssl_certfile=/c.pem&ssl_keyfile=/c.key&ssl_check_hostname=false"
                                "&socket_timeout=5")
    assert parsed.tls and parsed.db == 0
    assert parsed.options == {"ssl_ca_certs": "/ca.pem", "ssl_certfile": "/c.pem", "ssl_keyfile": "/c.key",
                              "ssl_check_hostname": False, "socket_timeout": 5.0}
    assert parse_sentinel_url("redis+sentinel://s1/ledger?db=2").db == 2


@pytest.mark.parametrize("url, problem", [
    ("redis+sentinel://s1:26379", "no Sentinel service name"),
    ("redis+sentinel://s1:26379/", "no Sentinel service name"),
    ("redis+sentinel://s1:port/ledger", "bad Sentinel port"),
    ("redis+sentinel://s1:0/ledger", "bad Sentinel port"),
    ("redis+sentinel://s1,,s2/ledger", "without a host"),
    ("redis+sentinel://s1/ledger/zero", "must be a number"),
    ("redis+sentinel://s1/ledger?ssl_ca_certs=/ca.pem", r"need rediss\+sentinel"),
])
def test_a_bad_sentinel_url_is_a_value_error(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ledger_from_url(url)


def test_a_bad_sentinel_url_error_does_not_show_the_password() -> None:
    with pytest.raises(ValueError) as info:
        ledger_from_url("redis+sentinel://app:hunter2@s1:bad/ledger")
    assert "hunter2" not in str(info.value) and "app:***@" in str(info.value)


def test_every_redis_url_form_builds_a_redis_ledger() -> None:
    for url in ("redis://h:6379/0", "rediss://u:p@h:6380/1?ssl_ca_certs=/ca.pem", "unix:///run/r.sock?db=2",
                "redis+sentinel://h:26379/ledger/0", "rediss+sentinel://h1,h2/ledger"):
        assert isinstance(ledger_from_url(url), RedisLedger), url
    with pytest.raises(ValueError):
        ledger_from_url("redis://h:6379/0?socket_timeout=soon")  # redis-py's own check, at build


@pytest.mark.parametrize("url, shown", [
    ("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0"),
    ("rediss://app:hunter2@h:6380/0?ssl_ca_certs=/ca.pem", "rediss://app:***@h:6380/0?ssl_ca_certs=/ca.pem"),
    ("redis+sentinel://app:hunter2@s1:26379,s2:26379/ledger/0", "redis+sentinel://app:***@s1:26379,s2:26379/ledger/0"),
    ("rediss://h/0?ssl_password=hunter2&ssl_keyfile=/k", "rediss://h/0?ssl_password=***&ssl_keyfile=/k"),
    ("redis://h/0?password=hunter2", "redis://h/0?password=***"),
    ("redis://app@h/0", "redis://app@h/0"),
    ("memory", "memory"),
])
def test_redact_hides_every_password(url: str, shown: str) -> None:
    assert redact(url) == shown


# ------------------------------------------------------------------------- replica acks


@pytest.fixture(scope="module")
def replicated() -> Iterator[tuple[RedisProcess, RedisProcess]]:
    """A primary and one replica, linked."""
    primary = RedisProcess()
    replica = RedisProcess(["--replicaof", "127.0.0.1", str(primary.port)])
    try:
        primary.start()
        replica.start()
        poll(lambda: replica_link_up(replica, primary.port), 20, "the replica did not sync")
        yield primary, replica
    finally:
        replica.cleanup()
        primary.cleanup()


async def _ledger(url: str, prefix: str, **options: object) -> RedisLedger:
    led = ledger_from_url(url, redis=RedisOptions(**options))  # type: ignore[arg-type]
    assert isinstance(led, RedisLedger)
    led.prefix = prefix
    await led.open()
    return led


async def test_a_terminal_put_returns_once_the_replica_holds_it(replicated: tuple[RedisProcess, RedisProcess]) -> None:
    primary, replica = replicated
    led = await _ledger(primary.url, "acked", min_replica_acks=1, replica_ack_timeout=5.0)
    reader = replica.client()
    try:
        for i in range(20):
            await led.put(rec(f"t-{i}"), 0)
            assert await led.put(rec(f"t-{i}", TaskState.COMPLETED), 1) == 2
            # WAIT said the replica processed it: it reads it at once, no polling
            assert reader.hget(led._key("w", f"t-{i}"), "s") == b"TASK_STATE_COMPLETED"
        # many at once: gathered into a few barriers, every one acknowledged
        results = await asyncio.gather(*(led.put(rec(f"u-{i}", TaskState.FAILED), 0) for i in range(200)))
        assert results == [1] * 200
        assert all(reader.hget(led._key("w", f"u-{i}"), "v") == b"1" for i in range(200))
        barriers = int(reader.get("acked:acks"))  # one INCR per barrier
        assert barriers <= 20 + 3, "one each for the 20 sequential puts; the 200 concurrent share"
        assert led.replica_ack_failures == 0
    finally:
        reader.close()
        await led.close()


async def test_too_few_acknowledgements_fail_the_terminal_put_but_not_the_others(
        replicated: tuple[RedisProcess, RedisProcess]) -> None:
    """Two acknowledgements wanted, one replica: the terminal put fails after the timeout
    (counted), its write stays on the primary; gets and live puts called while the barrier
    waits return before it.

    Told by the order of events, not by how long each took (a shared machine may be slow):
    the live calls are all answered while the terminal put is still waiting, and it fails
    no sooner than the server's ``WAIT`` timer allows."""
    primary, _ = replicated
    timeout = 1.5  # 20 round trips must fit in it, however loaded the machine
    led = await _ledger(primary.url, "short", min_replica_acks=2, replica_ack_timeout=timeout)
    try:
        await led.put(rec("t-done"), 0)
        started = time.monotonic()
        terminal = asyncio.ensure_future(led.put(rec("t-done", TaskState.COMPLETED), 1))
        deadline = started + 30
        while led._acker is None and not terminal.done():  # its compare-and-set was answered
            assert time.monotonic() < deadline, "the terminal put's barrier never started"
            await asyncio.sleep(0.001)
        assert not terminal.done(), terminal
        for i in range(10):
            await led.put(rec(f"t-live-{i}"), 0)
            assert (await led.get("w", f"t-live-{i}")) is not None
        assert not terminal.done(), "the live calls waited for the barrier"
        with pytest.raises(ReplicaAckError, match=f"acknowledged by 1 of 2 replicas within {timeout} s"):
            await terminal
        failed_after = time.monotonic() - started
        assert failed_after >= timeout * 0.9, failed_after  # WAIT waited out its timeout
        assert led.replica_ack_failures == 1
        stored = await led.get("w", "t-done")  # not undone: the primary holds it
        assert stored is not None and stored.version == 2 and stored.record.terminal
    finally:
        await led.close()


async def test_a_write_missing_from_the_server_that_answers_the_barrier_fails(
        replicated: tuple[RedisProcess, RedisProcess]) -> None:
    """After a failover the barrier reaches the promoted replica; a write that never got there
    must not be acknowledged by its WAIT."""
    primary, _ = replicated
    led = await _ledger(primary.url, "lost", min_replica_acks=1, replica_ack_timeout=2.0)
    try:
        await led.put(rec("t-here", TaskState.COMPLETED), 0)
        results = await asyncio.gather(led._replicated(led._key("w", "t-here"), 1),
                                       led._replicated(led._key("w", "t-gone"), 1),
                                       led._replicated(led._key("w", "t-here"), 2),
                                       return_exceptions=True)
        assert results[0] is None
        assert isinstance(results[1], ReplicaAckError) and "not on the primary" in str(results[1])
        assert isinstance(results[2], ReplicaAckError)
    finally:
        await led.close()


async def test_acknowledgement_off_waits_for_nothing(replicated: tuple[RedisProcess, RedisProcess]) -> None:
    primary, _ = replicated
    led = await _ledger(primary.url, "off")
    try:
        assert await led.put(rec("t-1", TaskState.COMPLETED), 0) == 1
        assert led._ack_client is None and not led._held
    finally:
        await led.close()


# ------------------------------------------------------------------------------ Sentinel


@pytest.fixture
def secrets(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, value in (("data", "data-pw\n"), ("sentinel", "sentinel-pw")):
        out[name] = tmp_path / f"{name}.password"
        out[name].write_text(value)
    return out


async def test_a_sentinel_url_reaches_the_primary_with_separate_credentials(secrets: dict[str, Path]) -> None:
    """The data node wants ACL user ``app``; the Sentinel wants its own password; the ledger
    has each from its own file."""
    primary = RedisProcess(["--user", "default", "off", "--user", "app", "on", ">data-pw", "~*", "&*", "+@all",
                            "--user", "sentinel-user", "on", ">data-pw", "allchannels", "+@all"],
                           client_options={"username": "app", "password": "data-pw"})
    sentinel = SentinelProcess(primary.port, quorum=1, requirepass="sentinel-pw", auth_pass="data-pw")
    try:
        primary.start()
        # Sentinel authenticates with `auth-pass` as the default user: give it one
        admin = primary.client()
        admin.execute_command("ACL", "SETUSER", "default", "on", ">data-pw", "allchannels", "+@all")
        admin.close()
        sentinel.start()
        poll(lambda: int(sentinel.master()["port"]) == primary.port and not sentinel.master()["is_sdown"], 20,
             "the Sentinel does not see the primary")
        url = f"redis+sentinel://app@127.0.0.1:{sentinel.port}/ledger/0"
        led = await _ledger(url, "sentinel", password_file=str(secrets["data"]),
                            sentinel_password_file=str(secrets["sentinel"]))
        try:
            await led.put(rec(), 0)
            got = await led.get("w", "t-1")
            assert got is not None and got.version == 1
        finally:
            await led.close()
        wrong = secrets["data"].with_name("wrong")
        wrong.write_text("nope")
        bad_sentinel = ledger_from_url(url, redis=RedisOptions(password_file=str(secrets["data"]),
                                                               sentinel_password_file=str(wrong)))
        with pytest.raises((AuthenticationError, RedisConnectionError)):
            await bad_sentinel.open()
        await bad_sentinel.close()
        bad_data = ledger_from_url(url, redis=RedisOptions(password_file=str(wrong),
                                                           sentinel_password_file=str(secrets["sentinel"])))
        with pytest.raises(AuthenticationError):
            await bad_data.open()
        await bad_data.close()
    finally:
        sentinel.cleanup()
        primary.cleanup()


async def test_an_unreadable_password_file_fails_the_open(tmp_path: Path) -> None:
    led = ledger_from_url("redis://127.0.0.1:1/0", redis=RedisOptions(password_file=str(tmp_path / "absent")))
    with pytest.raises(OSError):
        await led.open()
    await led.close()


# ---------------------------------------------------------------------------------- TLS


def _certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (openssl)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        if os.environ.get("CI"):
            pytest.fail("openssl is not installed; .ci/run must install it")
        pytest.skip("openssl is not installed (apt-get install openssl)")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=directory, check=True, capture_output=True, timeout=30)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test-ca")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "1", "-extfile", "san.ext")
    return {n: directory / n for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


async def test_tls_with_a_client_certificate_and_an_acl_user(tmp_path: Path, secrets: dict[str, Path]) -> None:
    """``rediss://`` with redis-py's own query arguments for the CA and the client certificate;
    the ACL user in the URL, its password from a file. No client certificate: refused."""
    certs = _certificates(tmp_path)
    tls = {"ssl": True, "ssl_ca_certs": str(certs["ca.pem"]), "ssl_certfile": str(certs["client.pem"]),
           "ssl_keyfile": str(certs["client.key"])}
    server = RedisProcess(["--tls-cert-file", str(certs["server.pem"]), "--tls-key-file", str(certs["server.key"]),
                           "--tls-ca-cert-file", str(certs["ca.pem"]), "--tls-auth-clients", "yes",
                           "--user", "default", "off", "--user", "app", "on", ">data-pw", "~*", "&*", "+@all"],
                          tls=True, client_options={**tls, "username": "app", "password": "data-pw"})
    try:
        server.start()
        query = f"ssl_ca_certs={certs['ca.pem']}&ssl_certfile={certs['client.pem']}&ssl_keyfile={certs['client.key']}"
        url = f"rediss://app@127.0.0.1:{server.port}/0?{query}"
        led = await _ledger(url, "tls", password_file=str(secrets["data"]))
        try:
            await led.put(rec(state=TaskState.COMPLETED), 0)
            got = await led.get("w", "t-1")
            assert got is not None and got.record.state is TaskState.COMPLETED
        finally:
            await led.close()
        no_cert = ledger_from_url(f"rediss://app@127.0.0.1:{server.port}/0?ssl_ca_certs={certs['ca.pem']}",
                                  redis=RedisOptions(password_file=str(secrets["data"])))
        with pytest.raises(RedisConnectionError):
            await no_cert.open()
        await no_cert.close()
        plain = ledger_from_url(f"redis://app@127.0.0.1:{server.port}/0",
                                redis=RedisOptions(password_file=str(secrets["data"])))
        with pytest.raises(RedisConnectionError):
            await plain.open()
        await plain.close()
    finally:
        server.cleanup()

