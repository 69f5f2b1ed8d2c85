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
from gateway.proxy.callers import SECRET_ENV, CallerKeys, client_cert_subject, read_secrets

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


def test_without_a_secret_a_random_one_is_made_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test-callers")
    with caplog.at_level(logging.WARNING, logger="test-callers"):
        one = CallerKeys.from_config(CallersConfig(), log, environ={})
        two = CallerKeys.from_config(CallersConfig(), log, environ={})
    assert one.generated and [r.getMessage() for r in caplog.records] == ["caller_secret_generated"] * 2
    assert one.caller(b"Bearer alice").fingerprint != two.caller(b"Bearer alice").fingerprint


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
