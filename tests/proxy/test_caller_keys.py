"""gateway/proxy/callers.py: identities, fingerprints and secrets (docs/callers.md §2, §4)."""

from __future__ import annotations

import datetime
import logging
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.config import CallersConfig
from gateway.errors import ConfigError
from gateway.invariants.model import NO_CALLER
from gateway.proxy.callers import (
    SECRET_ENV,
    SECRET_FILE_NAME,
    CallerKeys,
    client_cert_subject,
    read_secrets,
    stored_secret,
)

S1, S2 = "first-secret-0123456789", "second-secret-0123456789"


def keys(*secrets: str, **config: object) -> CallerKeys:
    return CallerKeys(CallersConfig(**config), [s.encode() for s in secrets])


def scope(*headers: tuple[bytes, bytes], tls: dict[str, object] | None = None) -> dict[str, object]:
    return {"headers": list(headers), "extensions": {"tls": tls} if tls is not None else {}}


def test_the_same_identity_is_the_same_caller_and_another_is_not() -> None:
    k = keys(S1)
    alice = k.caller(k.identity_of(scope((b"authorization", b"Bearer alice"))))
    again = k.caller(k.identity_of(scope((b"Authorization", b"  Bearer alice "))))
    mallory = k.caller(k.identity_of(scope((b"authorization", b"Bearer mallory"))))
    assert alice == again and alice.fingerprint != mallory.fingerprint
    assert alice.fingerprint is not None and len(alice.fingerprint) == 22 and "alice" not in alice.fingerprint


def test_no_identity_is_the_caller_anonymous_which_no_identity_matches() -> None:
    k = keys(S1)
    anonymous = k.caller(k.identity_of(scope()))
    assert anonymous == k.caller(None) == keys(S2).caller(None)  # no secret in it: one across processes
    assert anonymous.fingerprint != k.caller(b"anonymous").fingerprint
    assert not anonymous.matches & k.caller(b"anonymous").matches


def test_the_source_is_part_of_the_fingerprint() -> None:
    by_header = keys(S1).caller(b"CN=alice")
    by_cert = keys(S1, identity="client_cert").caller(b"CN=alice")
    by_other_header = keys(S1, header="x-user").caller(b"CN=alice")
    assert len({by_header.fingerprint, by_cert.fingerprint, by_other_header.fingerprint}) == 3


def test_every_secret_matches_and_the_first_signs() -> None:
    old = keys(S2).caller(b"Bearer alice")
    rotated = keys(S1, S2).caller(b"Bearer alice")
    assert rotated.fingerprint == keys(S1).caller(b"Bearer alice").fingerprint
    assert old.fingerprint in rotated.matches and rotated.fingerprint in rotated.matches


def test_disabled_callers_are_not_told_apart() -> None:
    assert keys(S1, enabled=False).caller(b"Bearer alice") is NO_CALLER


def test_secrets_come_from_the_environment_first_then_the_file(tmp_path: Path) -> None:
    path = tmp_path / "secrets"
    path.write_text(f"# rotated 2026-12-01\n{S1}\n{S2}  # the old one\n")
    config = CallersConfig(secret_file=str(path))
    assert read_secrets(config, {}) == [S1.encode(), S2.encode()]
    assert read_secrets(config, {SECRET_ENV: f"{S2} {S1}"}) == [S2.encode(), S1.encode()]
    assert read_secrets(CallersConfig(), {}) == []


@pytest.mark.parametrize("content,problem", [("# nothing\n", "holds no secret"), ("short\n", "shorter than 16")])
def test_an_unusable_secret_file_stops_the_start(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "secrets"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        read_secrets(CallersConfig(secret_file=str(path)), {})
    assert problem in " ".join(info.value.problems) and "short\n" not in " ".join(info.value.problems)
    with pytest.raises(ConfigError):
        read_secrets(CallersConfig(secret_file=str(tmp_path / "missing")), {})


def test_without_a_secret_a_memory_ledger_gets_one_of_the_process_and_no_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """Nothing outlives a memory ledger: a random secret of the process is enough, and there
    is nothing to warn about (issue #35: every plain start warned)."""
    log = logging.getLogger("test-callers")
    with caplog.at_level(logging.WARNING, logger="test-callers"):
        one = CallerKeys.from_config(CallersConfig(), log, environ={})
        two = CallerKeys.from_config(CallersConfig(), log, environ={})
    assert one.generated and one.stored is None and caplog.records == []
    assert one.caller(b"Bearer alice").fingerprint != two.caller(b"Bearer alice").fingerprint


def test_without_a_secret_one_is_made_once_beside_the_sqlite_ledger_and_read_at_every_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue #35: without a configured secret each process made its own, so after a restart
    every client was a stranger. Now the secret is made once, mode 0600, beside the SQLite
    ledger, and every later start (another process) reads it: the same caller, the same
    fingerprint; no warning."""
    log = logging.getLogger("test-callers")
    url = f"sqlite:///{tmp_path}/gw/ledger.db"
    with caplog.at_level(logging.WARNING, logger="test-callers"):
        first = CallerKeys.from_config(CallersConfig(), log, environ={}, ledger_url=url)
        restarted = CallerKeys.from_config(CallersConfig(), log, environ={}, ledger_url=url)
    path = tmp_path / "gw" / SECRET_FILE_NAME
    assert first.stored == restarted.stored == path and first.generated
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert len(path.read_text().strip()) == 64
    assert first.caller(b"Bearer alice") == restarted.caller(b"Bearer alice")
    assert caplog.records == []
    configured = CallerKeys.from_config(CallersConfig(), log, environ={SECRET_ENV: S1}, ledger_url=url)
    assert configured.stored is None and configured.caller(b"Bearer alice") == keys(S1).caller(b"Bearer alice")


def test_processes_starting_together_all_read_the_one_secret(tmp_path: Path) -> None:
    """``serve --workers N`` starts its processes at once: whichever makes the file first,
    every one reads that secret (made aside, then linked into place: never half-written)."""
    import subprocess
    import sys

    code = ("import sys; from pathlib import Path; from gateway.proxy.callers import stored_secret; "
            "print(stored_secret(Path(sys.argv[1])).decode())")
    path = tmp_path / SECRET_FILE_NAME
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    secrets = {proc.communicate(timeout=60)[0].strip() for proc in procs}
    assert secrets == {path.read_text().strip()} and [p.returncode for p in procs] == [0] * 8
    assert sorted(f.name for f in tmp_path.iterdir()) == [SECRET_FILE_NAME]  # no temporary file left


def test_a_redis_ledger_keeps_it_in_the_state_directory_and_warns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A Redis ledger may be shared by other hosts, which keep secrets of their own: the one
    case where the warning still matters."""
    monkeypatch.setenv("A2A_GATEWAY_STATE_DIR", str(tmp_path / "state"))
    log = logging.getLogger("test-callers")
    with caplog.at_level(logging.WARNING, logger="test-callers"):
        k = CallerKeys.from_config(CallersConfig(), log, environ={}, ledger_url="redis://127.0.0.1:1/0")
    assert k.stored == tmp_path / "state" / SECRET_FILE_NAME and k.stored.exists()
    assert [r.getMessage() for r in caplog.records] == ["caller_secret_generated"]
    assert CallerKeys.from_config(CallersConfig(enabled=False), log, environ={},
                                  ledger_url="redis://127.0.0.1:1/0").stored is None


def test_an_unusable_kept_secret_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / SECRET_FILE_NAME).write_text("short\n")
    with pytest.raises(ConfigError) as info:
        stored_secret(tmp_path / SECRET_FILE_NAME)
    assert "holds no secret" in info.value.problems[0] and "short" not in info.value.problems[0]


def test_a_secret_that_cannot_be_kept_is_one_of_the_process_with_the_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory the gateway cannot write (a read-only state directory beside a Redis
    ledger): it still starts, as before issue #35, with a secret of the process and the warning."""
    import gateway.proxy.callers as callers

    def read_only(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(callers.tempfile, "mkstemp", read_only)  # as a directory mode 0500 does (but for root)
    (tmp_path / "ro").mkdir()
    log = logging.getLogger("test-callers")
    with caplog.at_level(logging.WARNING, logger="test-callers"):
        k = CallerKeys.from_config(CallersConfig(), log, environ={},
                                   ledger_url=f"sqlite:///{tmp_path}/ro/ledger.db")
    assert k.generated and k.stored is None
    assert [r.getMessage() for r in caplog.records] == ["caller_secret_generated"]


def _certificate(common_name: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_the_client_certificate_subject_is_read_from_the_asgi_tls_extension() -> None:
    pem = _certificate("alice")
    assert client_cert_subject(scope(tls={"client_cert_chain": [pem]})) == b"O=Example,CN=alice"
    assert client_cert_subject(scope(tls={"client_cert_name": "CN=bob"})) == b"CN=bob"
    assert client_cert_subject(scope(tls={"client_cert_chain": [pem], "client_cert_error": "bad"})) is None
    assert client_cert_subject(scope(tls={"client_cert_chain": []})) is None
    assert client_cert_subject(scope()) is None
    k = keys(S1, identity="client_cert")
    assert k.identity_of(scope((b"authorization", b"Bearer x"), tls={"client_cert_chain": [pem]})) == b"O=Example,CN=alice"
