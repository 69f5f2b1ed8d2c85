"""TLS on both sides of a real ``a2a-gateway serve`` process (gateway/tls.py): clients over
HTTPS (``listen.tls``), mutual TLS required / optional, a certificate reloaded on SIGHUP and
seen by a new connection; upstream workers on HTTPS with a private CA and one that requires a
client certificate (``upstreams[].tls``), for requests and Agent Card fetches alike.

Certificates are made here with the ``cryptography`` package: one private CA signs the
gateway's server certificate (127.0.0.1), the worker's, and the client certificates."""

from __future__ import annotations

import contextlib
import datetime
import signal
import ssl
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.scripted_worker import ScriptedWorker
from tests.support.servers import free_port, serve_in_thread, subprocess_server, wait_until

pytestmark = pytest.mark.slow

GET_TASK = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}
TASK = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}
V1 = {"A2A-Version": "1.0"}


@dataclass
class Pki:
    """A private CA and what it signed, as PEM files in ``root``."""

    root: Path
    ca_key: ec.EllipticCurvePrivateKey
    ca_cert: x509.Certificate

    @property
    def ca_file(self) -> str:
        return str(self.root / "ca.pem")

    def issue(self, name: str, *, server: bool, common_name: str | None = None) -> tuple[str, str]:
        """A certificate signed by the CA (for 127.0.0.1 when ``server``): (cert file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or name)]))
                   .issuer_name(self.ca_cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            import ipaddress

            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        cert_file, key_file = self.root / f"{name}.pem", self.root / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return str(cert_file), str(key_file)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "a2a-gateway test CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    (root / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Pki(root, key, cert)


@pytest.fixture
def worker() -> ScriptedWorker:
    w = ScriptedWorker()
    w.on("GetTask", json_result=TASK, times=None)
    return w


@dataclass
class Gateway:
    url: str
    proc: object


@contextlib.contextmanager
def _gateway(tmp_path: Path, upstream: str, *, listen_tls: str = "", upstream_tls: str = "",
             ledger: str = "memory", extra: str = "") -> Iterator[Gateway]:
    port, admin_port = free_port(), free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"listen: {{port: {port}{', tls: ' + listen_tls if listen_tls else ''}}}\n"
        f"admin: {{port: {admin_port}}}\nledger: {{url: '{ledger}'}}\nlog: {{flush_seconds: 0}}\n{extra}"
        f"upstreams:\n  - {{name: worker, url: '{upstream}/', prefix: /"
        f"{', tls: ' + upstream_tls if upstream_tls else ''}}}\n")
    cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
    scheme = "https" if listen_tls else "http"
    with subprocess_server(cmd, f"http://127.0.0.1:{admin_port}/healthz") as proc:
        yield Gateway(f"{scheme}://127.0.0.1:{port}", proc)


def _client(pki: Pki, cert: tuple[str, str] | None = None) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=pki.ca_file)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return httpx.Client(verify=ctx, trust_env=False, timeout=10)


def _peer_common_name(url: str, pki: Pki) -> str:
    """The CN of the certificate a new TLS connection to ``url`` is served."""
    import socket

    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=pki.ca_file)
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        cert = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def test_clients_reach_the_gateway_over_https(pki: Pki, worker: ScriptedWorker, tmp_path: Path) -> None:
    cert, key = pki.issue("gateway", server=True)
    with serve_in_thread(worker) as srv:
        with _gateway(tmp_path, srv.url, listen_tls=f"{{cert_file: '{cert}', key_file: '{key}'}}") as gw:
            with _client(pki) as http:
                assert http.post(gw.url + "/", json=GET_TASK, headers=V1).json()["result"]["id"] == "t-1"
                card = http.get(gw.url + "/.well-known/agent-card.json", headers=V1).json()
            # the served card names the gateway's own https URL
            assert all(i["url"].startswith(gw.url) for i in card["supportedInterfaces"])
            with pytest.raises(httpx.HTTPError):  # plain HTTP to a TLS port is no request
                httpx.get(gw.url.replace("https", "http") + "/", trust_env=False, timeout=5)


@pytest.mark.parametrize("mode", ["required", "optional"])
def test_mutual_tls_required_refuses_a_client_without_a_certificate(
        pki: Pki, worker: ScriptedWorker, tmp_path: Path, mode: str) -> None:
    cert, key = pki.issue("gateway", server=True)
    client = pki.issue("client", server=False)
    tls = f"{{cert_file: '{cert}', key_file: '{key}', client_ca_file: '{pki.ca_file}', client_cert: {mode}}}"
    with serve_in_thread(worker) as srv:
        with _gateway(tmp_path, srv.url, listen_tls=tls) as gw:
            with _client(pki, client) as http:
                assert http.post(gw.url + "/", json=GET_TASK, headers=V1).status_code == 200
            with _client(pki) as http:
                if mode == "required":
                    with pytest.raises(httpx.HTTPError):
                        http.post(gw.url + "/", json=GET_TASK, headers=V1)
                else:
                    assert http.post(gw.url + "/", json=GET_TASK, headers=V1).status_code == 200


def test_client_certificates_name_the_callers_of_a_task(pki: Pki, worker: ScriptedWorker, tmp_path: Path) -> None:
    """``callers.identity: client_cert`` (docs/callers.md §2.2): two clients with their own
    verified certificates are two callers of the task; without a certificate, the one
    ``anonymous`` caller."""
    import subprocess

    cert, key = pki.issue("gateway", server=True)
    tls = f"{{cert_file: '{cert}', key_file: '{key}', client_ca_file: '{pki.ca_file}', client_cert: optional}}"
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    with serve_in_thread(worker) as srv:
        with _gateway(tmp_path, srv.url, listen_tls=tls, ledger=ledger,
                      extra="callers: {identity: client_cert}\n") as gw:
            for who in ("alice", "bob", None, "alice"):
                with _client(pki, pki.issue(who, server=False) if who else None) as http:
                    assert http.post(gw.url + "/", json=GET_TASK, headers=V1).status_code == 200
            show = subprocess.run([sys.executable, "-m", "gateway", "ledger", "show", "t-1", "--ledger", ledger,
                                   "--json"], capture_output=True, text=True, timeout=30)
    assert show.returncode == 0, show.stderr
    (shown,) = orjson.loads(show.stdout)
    assert shown["record"]["callers"] == 3  # alice (one subject, whichever certificate), bob, anonymous


def test_sighup_reloads_the_certificate_for_new_connections(pki: Pki, worker: ScriptedWorker, tmp_path: Path) -> None:
    """The files are replaced in place and SIGHUP sent: a new connection gets the new
    certificate, the listener stays; broken files are refused and the old one stays."""
    cert, key = pki.issue("gateway", server=True, common_name="first")
    with serve_in_thread(worker) as srv:
        with _gateway(tmp_path, srv.url, listen_tls=f"{{cert_file: '{cert}', key_file: '{key}'}}") as gw:
            assert _peer_common_name(gw.url, pki) == "first"
            with _client(pki) as http:  # a connection opened before the reload
                assert http.post(gw.url + "/", json=GET_TASK, headers=V1).status_code == 200
                new_cert, new_key = pki.issue("gateway-next", server=True, common_name="second")
                Path(cert).write_bytes(Path(new_cert).read_bytes())
                Path(key).write_bytes(Path(new_key).read_bytes())
                gw.proc.send_signal(signal.SIGHUP)  # type: ignore[attr-defined]
                wait_until(lambda: '"tls_reloaded"' in gw.proc.stderr_text(), message="tls_reloaded")  # type: ignore[attr-defined]
                assert _peer_common_name(gw.url, pki) == "second"
                assert http.post(gw.url + "/", json=GET_TASK, headers=V1).status_code == 200
            Path(key).write_text("not a key")
            gw.proc.send_signal(signal.SIGHUP)  # type: ignore[attr-defined]
            wait_until(lambda: '"tls_reload_refused"' in gw.proc.stderr_text(), message="tls_reload_refused")  # type: ignore[attr-defined]
            assert _peer_common_name(gw.url, pki) == "second"


def _https_worker(pki: Pki, worker: ScriptedWorker, *, require_client_cert: bool = False):
    cert, key = pki.issue("worker", server=True)
    config = {"ssl_certfile": cert, "ssl_keyfile": key}
    if require_client_cert:
        config |= {"ssl_ca_certs": pki.ca_file, "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return serve_in_thread(worker, config=config)


def test_an_https_worker_with_a_private_ca(pki: Pki, worker: ScriptedWorker, tmp_path: Path) -> None:
    """With ``tls.ca_file`` the card is fetched and requests go through; without it the
    worker's certificate is not trusted, and the card warning says ``cause: tls``."""
    with _https_worker(pki, worker) as srv:
        upstream = srv.url.replace("http://", "https://")
        with _gateway(tmp_path, upstream, upstream_tls=f"{{ca_file: '{pki.ca_file}'}}") as gw:
            r = httpx.post(gw.url + "/", json=GET_TASK, headers=V1, trust_env=False, timeout=10)
            assert r.json()["result"]["id"] == "t-1"
        with _gateway(tmp_path, upstream) as gw:
            wait_until(lambda: '"card_unreachable"' in gw.proc.stderr_text(), message="card_unreachable")  # type: ignore[attr-defined]
            warning = next(orjson.loads(ln) for ln in gw.proc.stderr_text().splitlines()  # type: ignore[attr-defined]
                           if '"card_unreachable"' in ln)
            assert warning["cause"] == "tls" and warning["url"].startswith(upstream)


def test_a_worker_that_requires_a_client_certificate(pki: Pki, worker: ScriptedWorker, tmp_path: Path) -> None:
    client_cert, client_key = pki.issue("gateway-client", server=False)
    with _https_worker(pki, worker, require_client_cert=True) as srv:
        upstream = srv.url.replace("http://", "https://")
        tls = f"{{ca_file: '{pki.ca_file}', cert_file: '{client_cert}', key_file: '{client_key}'}}"
        with _gateway(tmp_path, upstream, upstream_tls=tls) as gw:
            r = httpx.post(gw.url + "/", json=GET_TASK, headers=V1, trust_env=False, timeout=10)
            assert r.json()["result"]["id"] == "t-1"
        with _gateway(tmp_path, upstream, upstream_tls=f"{{ca_file: '{pki.ca_file}'}}") as gw:
            r = httpx.post(gw.url + "/", json=GET_TASK, headers=V1, trust_env=False, timeout=10)
            assert r.status_code == 502 and r.json()["error"]["code"] == -32603  # the worker refused it


def test_unreadable_tls_files_exit_2_naming_the_key(pki: Pki, tmp_path: Path) -> None:
    import subprocess

    config = tmp_path / "gateway.yaml"
    config.write_text(f"listen: {{port: {free_port()}, tls: {{cert_file: /nonexistent.pem, key_file: /nonexistent.key}}}}\n"
                      f"admin: {{port: {free_port()}}}\nledger: {{url: memory}}\n"
                      "upstreams:\n  - {name: w, url: 'http://127.0.0.1:9/'}\n")
    proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(config)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.startswith("listen.tls.cert_file / key_file: ")


def test_an_encrypted_key_exits_2_instead_of_prompting_for_a_passphrase(pki: Pki, tmp_path: Path) -> None:
    """With a terminal, OpenSSL would ask for the key's passphrase there and ``serve`` (or a
    SIGHUP reload) would wait for it forever; the gateway refuses the key instead."""
    import fcntl
    import os
    import subprocess
    import termios

    cert_file, plain = pki.issue("encrypted", server=True)
    key = serialization.load_pem_private_key(Path(plain).read_bytes(), None)
    Path(plain).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.BestAvailableEncryption(b"secret")))
    config = tmp_path / "gateway.yaml"
    config.write_text(f"listen: {{port: {free_port()}, tls: {{cert_file: '{cert_file}', key_file: '{plain}'}}}}\n"
                      f"admin: {{port: {free_port()}}}\nledger: {{url: memory}}\n"
                      "upstreams:\n  - {name: w, url: 'http://127.0.0.1:9/'}\n")
    controller, terminal = os.openpty()

    def on_a_terminal() -> None:  # the child's controlling terminal: where OpenSSL would prompt
        os.setsid()
        fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)

    try:
        proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(config)],
                              stdin=terminal, capture_output=True, text=True, timeout=30,
                              preexec_fn=on_a_terminal)
    finally:
        os.close(controller)
        os.close(terminal)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("listen.tls.cert_file / key_file: the key file is encrypted")
