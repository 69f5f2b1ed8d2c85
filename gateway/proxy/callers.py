"""Who is asking: the caller's identity read from the request, and its keyed fingerprints
(docs/callers.md §2, §4).

The gateway never stores an identity. It records on each task the fingerprints of the
callers the worker answered about it, and gives an answer built from the ledger only to a
caller whose fingerprint is there (the decision is the pure core's:
:func:`gateway.invariants.engine.caller_seen`). A fingerprint is
``base64url(HMAC-SHA256(secret, KIND NUL VALUE))[:22]`` (128 bits): ``KIND`` says where the
identity came from (``header:authorization``, ``client_cert``, ``jwt_subject``), so equal text
from two sources never matches. A request with no identity is the one caller
:data:`ANONYMOUS`, whose fixed fingerprint no identity can have (docs/callers.md §2.3).

Secrets (docs/callers.md §4): ``A2A_GATEWAY_CALLER_SECRET`` (when set and not empty) or the
file ``callers.secret_file``, one or more secrets separated by whitespace (a file: one per
line, ``#`` comments), each at least :data:`MIN_SECRET_CHARS` characters. The first one signs
the fingerprints recorded from now on; every one of them matches. With none configured, the
gateway makes one secret once and keeps it in the file :data:`SECRET_FILE_NAME` (mode 0600)
beside its SQLite ledger (the state directory by default), or in the state directory for a
Redis ledger: every start and every process of ``serve --workers N`` reads the same one, so
callers stay recognised across restarts (:func:`stored_secret`). Only a Redis ledger warns
(``caller_secret_generated``): other hosts sharing it keep secrets of their own. A memory
ledger, which nothing outlives, uses a random secret of the process (the anonymous caller
needs no secret). Secrets are never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets as _random
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.config import CallersConfig
from gateway.errors import ConfigError
from gateway.invariants.model import NO_CALLER, Caller

SECRET_ENV = "A2A_GATEWAY_CALLER_SECRET"
MIN_SECRET_CHARS = 16
SECRET_FILE_NAME = "caller-secret"
"""The generated secret's file, beside the SQLite ledger or in the state directory."""
ANONYMOUS = Caller("anonymous", frozenset({"anonymous"}))
"""The caller of every request without an identity: a fixed fingerprint (it names nobody, so
it needs no secret, and it stays the same across restarts, processes and rotations), which no
keyed fingerprint (22 characters) can equal."""


def read_secrets(config: CallersConfig, environ: Mapping[str, str]) -> list[bytes]:
    """The caller secrets, signing secret first (docs/callers.md §4); empty when none is
    configured.

    Raises:
        ConfigError: the file cannot be read, or holds no secret, or a secret is shorter than
            :data:`MIN_SECRET_CHARS` (the message never shows a secret).
    """
    text = environ.get(SECRET_ENV, "")
    where = SECRET_ENV
    if not text.strip() and config.secret_file:
        where = "callers.secret_file"
        try:
            text = Path(config.secret_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([f"callers.secret_file: {config.secret_file}: cannot be read "
                               f"({getattr(exc, 'strerror', None) or type(exc).__name__})"]) from None
        if not _tokens(text):
            raise ConfigError([f"callers.secret_file: {config.secret_file}: holds no secret"])
    found = _tokens(text)
    for index, secret in enumerate(found):
        if len(secret) < MIN_SECRET_CHARS:
            raise ConfigError([f"{where}: secret {index + 1} is shorter than {MIN_SECRET_CHARS} characters"])
    return [s.encode() for s in found]


def secret_path(ledger_url: str) -> Path | None:
    """Where the generated secret is kept for a ledger (docs/callers.md §4): the directory of
    a SQLite ledger (the state directory for the default one), the state directory
    (:func:`~gateway.config.state_dir`) for a Redis ledger; ``None`` for a memory ledger."""
    if ledger_url == "memory":
        return None
    if ledger_url.startswith("sqlite:"):
        from gateway.ledger import sqlite_path

        return sqlite_path(ledger_url).absolute().parent / SECRET_FILE_NAME
    from gateway.config import state_dir

    return state_dir() / SECRET_FILE_NAME


def stored_secret(path: Path) -> bytes:
    """The secret kept at ``path``, made once when the file is missing: 32 random bytes as 64
    hex digits, written to a file of mode 0600 (its directory made with mode 0700) that is
    then hard-linked into place, so processes starting together (``serve --workers N``) all
    read the one that got there first, never a half-written one.

    Raises:
        OSError: the file is missing and cannot be made (a read-only directory).
        ConfigError: the file is there but cannot be read, or holds no secret of at least
            :data:`MIN_SECRET_CHARS` characters (the message never shows it).
    """
    where = f"caller secret {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{where}: cannot be read ({getattr(exc, 'strerror', None) or type(exc).__name__})"]) from None
    if text is None:
        text = _make_secret(path)  # OSError: the caller decides
    found = _tokens(text)
    if not found or len(found[0]) < MIN_SECRET_CHARS:
        raise ConfigError([f"{where}: holds no secret of {MIN_SECRET_CHARS} characters or more; "
                           "delete it to have a new one made (callers seen so far become strangers)"])
    return found[0].encode()


def _make_secret(path: Path) -> str:
    """Write a new secret to ``path`` unless one is there (atomically); the text kept there."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = _random.token_hex(32) + "\n"
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temp, path)  # in place only if still missing
        except FileExistsError:
            return path.read_text(encoding="utf-8")  # another process made it first
    finally:
        os.unlink(temp)
    return text


def _tokens(text: str) -> list[str]:
    lines = (line.split("#", 1)[0] for line in text.splitlines())
    return [token for line in lines for token in line.split()]


class CallerKeys:
    """Reads a request's caller identity and makes its :class:`~gateway.invariants.model.Caller`.

    Args:
        config: ``callers`` (``enabled``, ``identity``, ``header``).
        secrets: the secrets, signing secret first (:func:`read_secrets`); empty: a random
            secret of this process (``generated`` is then True).
    """

    def __init__(self, config: CallersConfig, secrets: list[bytes], *, generated: bool | None = None,
                 stored: Path | None = None) -> None:
        self.enabled = config.enabled
        self.identity = config.identity
        self.header = config.header.lower().encode("latin-1")
        self.kind = (f"header:{config.header.lower()}" if config.identity == "header"
                     else config.identity).encode()
        self.generated = not secrets if generated is None else generated
        """No secret was configured (the gateway's own: :attr:`stored`, or one of the process)."""
        self.stored = stored
        """The file of the gateway's own secret (:func:`stored_secret`), when it is one."""
        self._secrets = secrets or [_random.token_bytes(32)]

    @classmethod
    def from_config(cls, config: CallersConfig, log: logging.Logger,
                    environ: Mapping[str, str] | None = None, *, ledger_url: str = "memory") -> CallerKeys:
        """:func:`read_secrets` of ``environ`` (default ``os.environ``) and ``config``; without
        any, the gateway's own secret kept for ``ledger_url`` (:func:`secret_path`,
        :func:`stored_secret`; a memory ledger: one of the process), with a
        ``caller_secret_generated`` warning for a Redis ledger only, whose other hosts keep
        secrets of their own (docs/callers.md §4).

        Where the secret cannot be kept (a read-only directory), a random secret of the process
        is used, with the warning.

        Raises:
            ConfigError: as :func:`read_secrets`, or the kept secret's file is unusable.
        """
        secrets = read_secrets(config, os.environ if environ is None else environ)
        if secrets or not config.enabled:
            return cls(config, secrets)
        path = secret_path(ledger_url)
        if path is None:  # nothing outlives the process: a secret of its own is enough
            return cls(config, [])
        try:
            secret = stored_secret(path)
        except OSError as exc:  # nowhere to keep it: a secret of the process, as before
            log.warning("caller_secret_generated", extra={
                "path": str(path), "error": exc.strerror,
                "detail": f"no {SECRET_ENV} or callers.secret_file, and the secret cannot be kept in "
                          "this file: caller fingerprints use a random secret of this process, so "
                          "after a restart, and in other processes, callers are recognised only once "
                          "the worker answered them again (docs/callers.md §4)"})
            return cls(config, [])
        keys = cls(config, [secret], generated=True, stored=path)
        if not ledger_url.startswith("sqlite:"):
            log.warning("caller_secret_generated", extra={
                "path": str(path),
                "detail": f"no {SECRET_ENV} or callers.secret_file: caller fingerprints use the "
                          "secret kept in this file, which restarts and --workers processes on this "
                          "host share; other hosts sharing this Redis ledger keep their own, so a "
                          "caller is recognised there only once the worker answered it again: give "
                          "every replica the same secret (docs/callers.md §4)"})
        return keys

    def identity_of(self, scope: Mapping[str, Any], jwt_subject: str | None = None) -> bytes | None:
        """The caller's identity in ``scope`` as the configured ``callers.identity`` reads it
        (docs/callers.md §2.2): the header's first value, the client certificate's subject
        (the ASGI TLS extension), or ``jwt_subject`` (the verified token's ``sub``); ``None``
        when the request has none."""
        if self.identity == "jwt_subject":
            return jwt_subject.encode("utf-8", "surrogatepass") if jwt_subject else None
        if self.identity == "client_cert":
            return client_cert_subject(scope)
        for name, value in scope.get("headers", ()):
            if name.lower() == self.header:
                value = value.strip()
                return value or None
        return None

    def retry_secret(self) -> bytes:
        """The key under which retry keys are digested before they are stored
        (docs/retries.md §3): derived from the signing secret, so replicas that share it
        share their retry keys."""
        return hmac.new(self._secrets[0], b"a2a-gateway retry keys", hashlib.sha256).digest()

    def caller(self, identity: bytes | None) -> Caller:
        """The :class:`~gateway.invariants.model.Caller` of ``identity`` (``None``: the caller
        ``anonymous``); :data:`~gateway.invariants.model.NO_CALLER` with ``callers.enabled:
        false``."""
        if not self.enabled:
            return NO_CALLER
        if identity is None:
            return ANONYMOUS
        message = self.kind + b"\x00" + identity
        prints = [_fingerprint(secret, message) for secret in self._secrets]
        return Caller(prints[0], frozenset(prints))


def _fingerprint(secret: bytes, message: bytes) -> str:
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:16]).decode().rstrip("=")


def client_cert_subject(scope: Mapping[str, Any]) -> bytes | None:
    """The subject of the client's TLS certificate, from the ASGI TLS extension
    (``scope["extensions"]["tls"]``, docs/callers.md §2.2): its ``client_cert_name`` (an RFC
    4514 name) when the server gives one, else the subject of the first certificate of
    ``client_cert_chain`` (PEM) as RFC 4514 text; ``None`` without a verified client
    certificate (none given, or a ``client_cert_error``)."""
    tls = (scope.get("extensions") or {}).get("tls")
    if not isinstance(tls, Mapping) or tls.get("client_cert_error"):
        return None
    name = tls.get("client_cert_name")
    if isinstance(name, str) and name:
        return name.encode("utf-8", "surrogatepass")
    chain = tls.get("client_cert_chain")
    if not chain:
        return None
    try:
        from cryptography import x509  # only with TLS client certificates in use

        cert = x509.load_pem_x509_certificate(chain[0].encode() if isinstance(chain[0], str) else chain[0])
    except (ValueError, TypeError):
        return None
    return cert.subject.rfc4514_string().encode("utf-8", "surrogatepass")
