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
the fingerprints recorded from now on; every one of them matches. With none configured, a
random secret of this process is used, with a warning: nothing is disclosed, but after a
restart (or in another process) no identified caller matches until the worker has answered
it again (the anonymous caller needs no secret).
Secrets are never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets as _random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.config import CallersConfig
from gateway.errors import ConfigError
from gateway.invariants.model import NO_CALLER, Caller

SECRET_ENV = "A2A_GATEWAY_CALLER_SECRET"
MIN_SECRET_CHARS = 16
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

    def __init__(self, config: CallersConfig, secrets: list[bytes]) -> None:
        self.enabled = config.enabled
        self.identity = config.identity
        self.header = config.header.lower().encode("latin-1")
        self.kind = (f"header:{config.header.lower()}" if config.identity == "header"
                     else config.identity).encode()
        self.generated = not secrets
        self._secrets = secrets or [_random.token_bytes(32)]

    @classmethod
    def from_config(cls, config: CallersConfig, log: logging.Logger,
                    environ: Mapping[str, str] | None = None) -> CallerKeys:
        """:func:`read_secrets` of ``environ`` (default ``os.environ``) and ``config``; warns
        ``caller_secret_generated`` when there is none (docs/callers.md §4).

        Raises:
            ConfigError: as :func:`read_secrets`.
        """
        keys = cls(config, read_secrets(config, os.environ if environ is None else environ))
        if keys.enabled and keys.generated:
            log.warning("caller_secret_generated", extra={
                "detail": f"no {SECRET_ENV} or callers.secret_file: caller fingerprints use a "
                          "random secret of this process; after a restart, and in other "
                          "processes or replicas, callers are recognised only once the worker "
                          "answered them again (docs/callers.md §4)"})
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
