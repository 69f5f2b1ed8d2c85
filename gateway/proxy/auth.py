"""Caller authentication at the gateway: bearer JWTs checked before anything reaches a worker
(docs/callers.md §5). Off unless ``auth.jwt`` is configured.

A token is accepted when it is signed by a key of the configured JWKS with one of the
configured (asymmetric) algorithms, names the configured issuer and audience, and is within
its ``exp`` / ``nbf`` / ``iat`` (with ``leeway_seconds``). PyJWT does the checking; this module
keeps the keys: a ``jwks_file`` is read at start, a ``jwks_url`` is fetched on first use and
again after ``cache_seconds``, or sooner (at most every :data:`REFETCH_SECONDS`) when a token
names a key the set does not hold (the issuer rotated its keys). A fetch that fails keeps the
keys already held; with none held the request is answered "cannot verify now" (HTTP 503).

Every failure is a :class:`AuthFailure` with a bounded ``reason`` (the label of
``a2a_gateway_auth_failures_total``) and a message for the client that never echoes the token.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from gateway.config import JwtConfig
from gateway.errors import ConfigError

if TYPE_CHECKING:
    import jwt  # at run time imported where used: PyJWT brings cryptography, ~19 MB of RSS
                # a gateway without auth.jwt never needs

REFETCH_SECONDS = 30.0
"""The least time between two JWKS fetches made for a key the set does not hold."""
MAX_JWKS_BYTES = 1024 * 1024
MAX_TOKEN_BYTES = 16 * 1024

#: The reasons a request is refused (bounded: the metric's label values).
REASONS = ("missing", "invalid", "expired", "audience", "issuer", "unknown_key", "jwks_unavailable")


class AuthFailure(Exception):
    """A request whose credentials the gateway refuses: ``reason`` (one of :data:`REASONS`),
    ``status`` (401, or 503 for ``jwks_unavailable``) and a message safe to show."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = 503 if reason == "jwks_unavailable" else 401

    def www_authenticate(self) -> bytes:
        """The ``WWW-Authenticate`` value of the 401 answer (RFC 6750 §3): ``Bearer`` alone
        for a request without a token, with ``error="invalid_token"`` otherwise."""
        if self.reason == "missing":
            return b'Bearer realm="a2a-gateway"'
        return b'Bearer realm="a2a-gateway", error="invalid_token"'


def bearer_token(scope: Mapping[str, Any]) -> str | None:
    """The token of the request's ``Authorization: Bearer …`` header, or ``None``."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


class JwtVerifier:
    """Checks bearer JWTs against ``auth.jwt`` (:class:`~gateway.config.JwtConfig`).

    Raises:
        ConfigError: (at construction) the ``jwks_file`` cannot be read or holds no usable key.
    """

    def __init__(self, config: JwtConfig, log: logging.Logger) -> None:
        self.config = config
        self.log = log
        self._keys: jwt.PyJWKSet | None = None
        self._fetched_at = float("-inf")
        self._lock = asyncio.Lock()
        self._http: httpx.AsyncClient | None = None
        importlib.import_module("jwt")  # loaded at start, not inside the first request's loop turn
        if config.jwks_file is not None:
            try:
                self._keys = _key_set(Path(config.jwks_file).read_bytes())
            except (OSError, ValueError) as exc:
                raise ConfigError([f"auth.jwt.jwks_file: {config.jwks_file}: {exc}"]) from None

    async def verify(self, scope: Mapping[str, Any]) -> dict[str, Any]:
        """The verified claims of the request's bearer token.

        Raises:
            AuthFailure: no token, or one the gateway does not accept.
        """
        import jwt

        token = bearer_token(scope)
        if token is None:
            raise AuthFailure("missing", "authentication required: a bearer token")
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthFailure("invalid", "the bearer token is not a valid JWT")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise AuthFailure("invalid", "the bearer token is not a valid JWT") from None
        key = await self._key(header.get("kid"))
        cfg = self.config
        try:
            return jwt.decode(token, key, algorithms=cfg.algorithms, audience=cfg.audience,
                              issuer=cfg.issuer, leeway=cfg.leeway_seconds,
                              options={"require": ["exp", "iss", "aud"]})
        except jwt.ExpiredSignatureError:
            raise AuthFailure("expired", "the bearer token has expired") from None
        except jwt.InvalidAudienceError:
            raise AuthFailure("audience", "the bearer token is not for this audience") from None
        except jwt.InvalidIssuerError:
            raise AuthFailure("issuer", "the bearer token is not from the expected issuer") from None
        except (jwt.InvalidTokenError, jwt.PyJWKError, ValueError, TypeError):
            raise AuthFailure("invalid", "the bearer token is not valid") from None

    async def _key(self, kid: Any) -> jwt.PyJWK:
        """The key a token names (``kid``; without one, the set's only key)."""
        keys = await self._current()
        found = _find(keys, kid)
        if found is None and self.config.jwks_url is not None \
                and time.monotonic() - self._fetched_at >= REFETCH_SECONDS:
            keys = await self._current(force=True)  # the issuer may have rotated its keys
            found = _find(keys, kid)
        if found is None:
            raise AuthFailure("unknown_key", "the bearer token is signed by an unknown key")
        return found

    async def _current(self, *, force: bool = False) -> jwt.PyJWKSet:
        """The key set: the file's, or the URL's — fetched when none is held, when it is
        older than ``cache_seconds``, or when ``force``d; a failed fetch keeps the old set."""
        cfg = self.config
        if cfg.jwks_url is None:
            assert self._keys is not None
            return self._keys
        stale = time.monotonic() - self._fetched_at >= cfg.cache_seconds
        if self._keys is not None and not stale and not force:
            return self._keys
        async with self._lock:
            if self._keys is None or force or time.monotonic() - self._fetched_at >= cfg.cache_seconds:
                await self._fetch()
        if self._keys is None:
            raise AuthFailure("jwks_unavailable", "the gateway cannot verify credentials now; retry")
        return self._keys

    async def _fetch(self) -> None:
        cfg = self.config
        assert cfg.jwks_url is not None
        self._fetched_at = time.monotonic()  # a failure is not retried at once either
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=cfg.fetch_timeout_seconds, trust_env=False)
        try:
            async with self._http.stream("GET", cfg.jwks_url, headers={"accept": "application/json"}) as response:
                response.raise_for_status()
                content = b""
                async for chunk in response.aiter_bytes():  # read no further than the bound
                    content += chunk
                    if len(content) > MAX_JWKS_BYTES:
                        raise ValueError(f"larger than {MAX_JWKS_BYTES} bytes")
            self._keys = _key_set(content)
        except (httpx.HTTPError, ValueError) as exc:
            self.log.warning("jwks_fetch_failed", extra={"url": cfg.jwks_url, "error": str(exc),
                                                         "keys_held": self._keys is not None})

    async def aclose(self) -> None:
        """Close the JWKS client, if one was opened."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _key_set(data: bytes) -> jwt.PyJWKSet:
    """A JWKS document's usable keys.

    Raises:
        ValueError: not a JWKS, or no usable key in it.
    """
    import jwt

    try:
        doc = orjson.loads(data)
        return jwt.PyJWKSet.from_dict(doc)
    except (orjson.JSONDecodeError, jwt.PyJWKError, jwt.PyJWKSetError, KeyError, TypeError) as exc:
        raise ValueError(f"not a usable JWKS ({exc})") from None


def _find(keys: jwt.PyJWKSet, kid: Any) -> jwt.PyJWK | None:
    if kid is None:
        return keys.keys[0] if len(keys.keys) == 1 else None
    for key in keys.keys:
        if key.key_id == kid:
            return key
    return None
