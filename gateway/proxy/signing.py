"""Agent Card signatures: the gateway's own (signing the served card) and the worker's
(verifying the fetched card). docs/protocol.md §4.2, §4.5.

What is signed is decided by the pure core (:mod:`gateway.a2a.card_signing`: the v1.0 reading
of the card without ``signatures``, RFC 8785); this module holds the keys and does the
cryptography, with well-kept libraries: ``cryptography`` loads the PEM keys and makes the
signatures, PyJWT's algorithm table frames and checks them (JWS, RFC 7515, compact form split
into ``protected`` and ``signature`` as ``AgentCardSignature`` carries them).

* :class:`CardSigner` — ``card.signing``: the signing key (and, during a rotation, the one being
  retired), the JWKS the gateway publishes, and :meth:`CardSigner.sign`, which appends one
  signature per key and per canonical form (:func:`~gateway.a2a.card_signing.signing_inputs`).
  ECDSA signatures are deterministic (RFC 6979) where the installed ``cryptography`` can make
  them, so a served card — and its ETag — is the same bytes in every process.
* :class:`CardTrust` — ``upstreams[].card.trust``: the keys a worker's signature may be checked
  against (a JWKS file, pinned PEM keys, a JWKS URL fetched through the upstream's client and
  cached, an allowed ``jku``) and :meth:`CardTrust.verify`, whose :class:`Verdict` says
  ``verified``, ``unsigned`` or ``invalid`` with a bounded reason (``bad_signature``,
  ``unknown_kid``, ``key_fetch_failed``, ``unsigned``).

PyJWT and cryptography are imported only when a gateway signs or verifies cards (docs/performance.md:
about 19 MB of RSS a gateway without them never pays).
"""

from __future__ import annotations

import base64
import importlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from gateway.a2a.card import is_signed
from gateway.a2a.card_signing import (
    card_signatures,
    protected_header,
    signing_inputs,
    verification_input,
    with_signatures,
)
from gateway.config import CardSigningConfig, CardTrustConfig, SigningKeyConfig, UpstreamConfig
from gateway.errors import ConfigError, UpstreamError
from gateway.ledger import redact

if TYPE_CHECKING:
    from gateway.observability.metrics import Metrics
    from gateway.proxy.transport import UpstreamClient

REFETCH_SECONDS = 30.0
"""The least time between two fetches of one JWKS made for a key it does not hold."""
MAX_SIGNATURES = 8
"""The most signatures of one card that are checked (the first ones): each may name a key to
fetch, and the card is the worker's to write."""
MAX_JKU_SETS = 8
"""The most JWKS URLs (``jku``) kept per upstream; the oldest is forgotten first."""

#: Why a card's signatures were not accepted (bounded: metric label values).
REASONS = ("bad_signature", "unknown_kid", "key_fetch_failed", "unsigned")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _payload(doc: dict[str, Any]) -> str | Verdict:
    """The JWS payload a signature of ``doc`` covers (base64url of its canonical v1.0 bytes), or
    the verdict when there is nothing to check: ``unsigned``, or a card that has no such bytes."""
    if not is_signed(doc):
        return Verdict("unsigned", "unsigned", "the card carries no signature")
    try:
        return _b64(verification_input(doc))
    except ValueError as exc:
        return Verdict("invalid", "bad_signature", str(exc))


def _algorithm_of(key: Any) -> str:
    """The JWS algorithm a private or public key signs with by default."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        by_curve = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
        if key.curve.name not in by_curve:
            raise ValueError(f"EC curve {key.curve.name} is not one of P-256, P-384, P-521")
        return by_curve[key.curve.name]
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey
                  | ed448.Ed448PrivateKey | ed448.Ed448PublicKey):
        return "EdDSA"
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise ValueError(f"an RSA key of {key.key_size} bits (2048 at least)")
        return "RS256"
    raise ValueError(f"a {type(key).__name__}: not an EC, Ed25519 or RSA key")


def _fits(algorithm: str, default: str) -> bool:
    """Whether a key whose default algorithm is ``default`` can sign with ``algorithm``."""
    if default == "RS256":
        return algorithm[:2] in ("RS", "PS")
    return algorithm == default


def _signer_for(algorithm: str) -> Any:
    """PyJWT's algorithm object for ``algorithm``; ECDSA made deterministic (RFC 6979) when
    the installed ``cryptography`` and OpenSSL can."""
    from jwt.algorithms import get_default_algorithms

    algo = get_default_algorithms()[algorithm]
    if not algorithm.startswith("ES"):
        return algo
    from cryptography.hazmat.primitives.asymmetric import ec
    from jwt.utils import der_to_raw_signature

    try:
        probe = ec.generate_private_key(ec.SECP256R1())
        probe.sign(b"probe", ec.ECDSA(algo.hash_alg(), deterministic_signing=True))
    except Exception:  # noqa: BLE001 - cryptography < 44 (TypeError) or OpenSSL < 3.2: randomized
        return algo

    class Deterministic(type(algo)):  # type: ignore[misc]
        def sign(self, msg: bytes, key: Any) -> bytes:
            der = key.sign(msg, ec.ECDSA(self.hash_alg(), deterministic_signing=True))
            return der_to_raw_signature(der, key.curve)

    return Deterministic(algo.hash_alg)


@dataclass(frozen=True)
class SigningKey:
    """One loaded private key: its ``kid``, JWS ``algorithm``, the public JWK it publishes and
    whether it signs (a retired key during a rotation may be published only)."""

    kid: str
    algorithm: str
    private: Any
    jwk: dict[str, Any]
    signs: bool = True
    _algo: Any = field(default=None, repr=False, compare=False)

    def sign(self, payload: bytes, jku: str | None) -> dict[str, Any]:
        """An ``AgentCardSignature`` over ``payload`` (the canonical bytes)."""
        header: dict[str, Any] = {"alg": self.algorithm, "kid": self.kid, "typ": "JOSE"}
        if jku:
            header["jku"] = jku
        protected = _b64(orjson.dumps(header, option=orjson.OPT_SORT_KEYS))
        signing_input = f"{protected}.{_b64(payload)}".encode("ascii")
        return {"protected": protected, "signature": _b64(self._algo.sign(signing_input, self.private))}


def load_signing_key(config: SigningKeyConfig, where: str, *, signs: bool = True) -> SigningKey:
    """Load a PEM private key.

    Raises:
        ConfigError: at ``where`` (``card.signing.key_file``): the file cannot be read, is not a
            private key, or is a key of a kind or size the gateway does not sign with, or does
            not fit ``algorithm``.
    """
    from cryptography.hazmat.primitives import serialization
    from jwt.algorithms import get_default_algorithms

    try:
        data = Path(config.key_file).read_bytes()
    except OSError as exc:
        raise ConfigError([f"{where}: {config.key_file}: {exc.strerror}"]) from None
    try:
        private = serialization.load_pem_private_key(data, password=None)
        default = _algorithm_of(private)
    except (ValueError, TypeError) as exc:
        raise ConfigError([f"{where}: {config.key_file}: not a usable private key ({exc})"]) from None
    algorithm = config.algorithm or default
    if not _fits(algorithm, default):
        raise ConfigError([f"{where}: {config.key_file}: a {default[:2]} key cannot sign {algorithm}"])
    public = get_default_algorithms()[algorithm].to_jwk(private.public_key(), as_dict=True)
    jwk = {**public, "kid": config.kid, "alg": algorithm, "use": "sig"}
    return SigningKey(config.kid, algorithm, private, jwk, signs, _signer_for(algorithm))


class CardSigner:
    """The gateway's card signatures (``card.signing``): loaded at start.

    Raises:
        ConfigError: a key file that does not load (at its YAML path).
    """

    def __init__(self, config: CardSigningConfig) -> None:
        self.config = config
        keys = [load_signing_key(config, "card.signing.key_file")]
        if config.previous is not None:
            keys.append(load_signing_key(config.previous, "card.signing.previous.key_file",
                                         signs=config.previous.sign))
        self.keys = keys
        self.kid = keys[0].kid
        self.algorithm = keys[0].algorithm
        self.jwks_body = orjson.dumps({"keys": [k.jwk for k in keys]})
        """The published JWKS, serialized once (its bytes and ETag never change while running)."""

    def jku(self, mount_base: str) -> str:
        """The ``jku`` of a card served under a mount whose public base URL is ``mount_base``."""
        from gateway.config import JWKS_PATH

        return self.config.jku or mount_base.rstrip("/") + JWKS_PATH

    def sign(self, doc: dict[str, Any], jku: str | None) -> dict[str, Any]:
        """``doc`` with its ``signatures`` replaced by the gateway's: one per signing key (the
        current one first) and per canonical form the SDKs read
        (:func:`~gateway.a2a.card_signing.signing_inputs`).

        Raises:
            ValueError: the card has no canonical form (then it is served unsigned).
        """
        forms = signing_inputs(doc)
        signatures = [key.sign(form, jku) for key in self.keys if key.signs for form in forms]
        return with_signatures(doc, signatures)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a worker card's signatures came to. ``state``: ``verified``, ``unsigned`` or
    ``invalid``; ``reason`` (not verified): one of :data:`REASONS`; ``detail``: for people;
    ``kid``: the key of the signature that verified."""

    state: str
    reason: str | None = None
    detail: str | None = None
    kid: str | None = None


class _KeyFetchFailed(Exception):
    pass


@dataclass
class _RemoteSet:
    keys: dict[str, Any]
    fetched_at: float


def _jwks_keys(data: bytes, where: str) -> dict[str, Any]:
    """The keys of a JWKS document by ``kid``.

    Raises:
        ValueError: not a JWKS, or no usable key with a ``kid`` in it.
    """
    import jwt

    try:
        found = jwt.PyJWKSet.from_dict(orjson.loads(data))
    except (orjson.JSONDecodeError, jwt.PyJWKError, jwt.PyJWKSetError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{where}: not a usable JWKS ({exc})") from None
    keys = {k.key_id: k.key for k in found.keys if k.key_id}
    if not keys:
        raise ValueError(f"{where}: no key with a kid")
    return keys


class CardTrust:
    """The keys one upstream's card signatures are checked against, and the check
    (``upstreams[].card.trust``).

    Raises:
        ConfigError: (at construction) ``jwks_file`` or a pinned key cannot be loaded.
    """

    def __init__(self, upstream: UpstreamConfig, client: UpstreamClient, metrics: Metrics,
                 log: logging.Logger, *, where: str | None = None) -> None:
        from cryptography.hazmat.primitives import serialization

        self.upstream = upstream
        self.config: CardTrustConfig = upstream.card.trust
        self.client = client
        self.metrics = metrics
        self.log = log
        self._static: dict[str, Any] = {}
        at = f"{where or f'upstreams[{upstream.name}]'}.card.trust"  # its YAML path
        if self.config.jwks_file is not None:
            try:
                self._static.update(_jwks_keys(Path(self.config.jwks_file).read_bytes(), self.config.jwks_file))
            except (OSError, ValueError) as exc:
                raise ConfigError([f"{at}.jwks_file: {getattr(exc, 'strerror', None) or exc}"]) from None
        for i, pinned in enumerate(self.config.keys):
            try:
                key = serialization.load_pem_public_key(Path(pinned.public_key_file).read_bytes())
                _algorithm_of(key)
            except (OSError, ValueError, TypeError) as exc:
                raise ConfigError([f"{at}.keys[{i}].public_key_file: {pinned.public_key_file}: "
                                   f"{getattr(exc, 'strerror', None) or exc}"]) from None
            self._static[pinned.kid] = key
        self._remote: dict[str, _RemoteSet] = {}  # JWKS URL -> its keys
        importlib.import_module("jwt")  # loaded at start, not inside the first card fetch

    def held_kids(self) -> list[str]:
        """The key ids held now (pinned, from the file, from fetched sets)."""
        kids = set(self._static)
        for remote in self._remote.values():
            kids.update(remote.keys)
        return sorted(kids)

    async def verify(self, doc: dict[str, Any]) -> Verdict:
        """Check ``doc``'s signatures: ``verified`` when one of them verifies over the card's
        v1.0 reading (:func:`~gateway.a2a.card_signing.verification_input`) with a trusted key
        and an accepted algorithm; ``unsigned`` without signatures (a non-empty list); else
        ``invalid`` — ``bad_signature`` (a trusted key, but the signature does not hold:
        a changed member, a wrong key, a malformed signature), ``key_fetch_failed`` (a key
        source could not be fetched and no key was found), ``unknown_kid`` (no trusted key has
        the named ``kid``). Fetches keys (bounded by the upstream's timeouts) only when the
        signature names a key not held. Never raises."""
        payload = _payload(doc)
        if isinstance(payload, Verdict):
            return payload
        reasons: list[tuple[str, str]] = []
        for signature in card_signatures(doc)[:MAX_SIGNATURES]:
            reasons.append(await self._check(signature, payload))
            if reasons[-1][0] == "verified":
                return Verdict("verified", kid=reasons[-1][1])
        if not reasons:
            return Verdict("invalid", "bad_signature", "no signature is an object")
        for wanted in ("bad_signature", "key_fetch_failed", "unknown_kid"):
            for reason, detail in reasons:
                if reason == wanted:
                    return Verdict("invalid", reason, detail)
        return Verdict("invalid", *reasons[0])

    def verify_held(self, doc: dict[str, Any]) -> Verdict:
        """:meth:`verify` with the keys held now only (no fetch): for the extended card, which
        is rewritten inside an exchange."""
        payload = _payload(doc)
        if isinstance(payload, Verdict):
            return payload
        reason = ("unknown_kid", "no signature names a held key")
        for signature in card_signatures(doc)[:MAX_SIGNATURES]:
            header = protected_header(signature)
            kid = header.get("kid") if header else None
            key = self._held(kid) if isinstance(kid, str) else None
            if key is None:
                continue
            reason = self._verify_with(signature, header, key, payload)
            if reason[0] == "verified":
                return Verdict("verified", kid=kid)
        return Verdict("invalid", *reason)

    def _held(self, kid: str) -> Any:
        if kid in self._static:
            return self._static[kid]
        for remote in self._remote.values():
            if kid in remote.keys:
                return remote.keys[kid]
        return None

    async def _check(self, signature: dict[str, Any], payload: str) -> tuple[str, str]:
        """``("verified", kid)`` or ``(reason, detail)`` for one signature."""
        header = protected_header(signature)
        if header is None:
            return "bad_signature", "the protected header is not base64url JSON"
        kid, jku = header.get("kid"), header.get("jku")
        if not isinstance(kid, str) or not kid:
            return "unknown_kid", "the protected header names no kid"
        try:
            key = await self._key(kid, jku if isinstance(jku, str) else None)
        except _KeyFetchFailed as exc:
            return "key_fetch_failed", str(exc)
        if key is None:
            return "unknown_kid", f"no trusted key has kid {kid!r}"
        return self._verify_with(signature, header, key, payload)

    def _verify_with(self, signature: dict[str, Any], header: dict[str, Any], key: Any,
                     payload: str) -> tuple[str, str]:
        import jwt

        alg = header.get("alg")
        if alg not in self.config.algorithms:
            return "bad_signature", f"algorithm {alg!r} is not accepted"
        token = f"{signature.get('protected')}.{payload}.{signature.get('signature')}"
        try:
            jwt.api_jws.PyJWS().decode_complete(token, key, algorithms=[alg])
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            return "bad_signature", f"signature of kid {header.get('kid')!r} does not verify ({exc})"
        return "verified", str(header.get("kid"))

    async def _key(self, kid: str, jku: str | None) -> Any:
        """The trusted key named ``kid``: pinned or from the file, else from the JWKS URL and
        the signature's ``jku`` when allowed — fetched when not held, when the set is older than
        ``cache_seconds``, or when it lacks ``kid`` and was fetched over
        :data:`REFETCH_SECONDS` ago. ``None`` when no source has it.

        Raises:
            _KeyFetchFailed: a source had to be fetched, failed, and no source had the key.
        """
        if kid in self._static:
            return self._static[kid]
        urls = [u for u in (self.config.jwks_url, jku) if u]
        urls = [u for u in dict.fromkeys(urls) if u == self.config.jwks_url or self._jku_allowed(u)]
        failure: str | None = None
        for url in urls:
            try:
                keys = await self._remote_keys(url, kid)
            except _KeyFetchFailed as exc:
                failure = str(exc)
                continue
            if kid in keys:
                return keys[kid]
        if failure is not None:
            raise _KeyFetchFailed(failure)
        return None

    def _jku_allowed(self, url: str) -> bool:
        return any(url.startswith(prefix) for prefix in self.config.jku_allowed)

    async def _remote_keys(self, url: str, kid: str) -> dict[str, Any]:
        held = self._remote.get(url)
        now = time.monotonic()
        due = held is None or now - held.fetched_at >= self.config.cache_seconds or (
            kid not in held.keys and now - held.fetched_at >= REFETCH_SECONDS)
        if not due:
            assert held is not None
            return held.keys
        try:
            keys = await self._fetch(url)
        except _KeyFetchFailed:
            if held is not None:  # a failed fetch keeps the keys already held, retried later
                held.fetched_at = now
                return held.keys
            raise
        self._remote[url] = _RemoteSet(keys, now)
        while len(self._remote) > MAX_JKU_SETS + 1:
            self._remote.pop(next(iter(self._remote)))
        return keys

    async def _fetch(self, url: str) -> dict[str, Any]:
        name = self.upstream.name
        try:
            answer = await self.client.fetch("GET", url, headers={"accept": "application/json"},
                                             timeout=self.upstream.timeouts, upstream=self.upstream)
            if answer.status_code != 200:
                raise ValueError(f"HTTP {answer.status_code}")
            keys = _jwks_keys(answer.content, "the answer")
        except (UpstreamError, ValueError) as exc:
            self.metrics.card_jwks_fetches.labels(name, "failed").inc()
            self.log.warning("card_jwks_fetch_failed", extra={"upstream": name, "url": redact(url), "error": str(exc)})
            raise _KeyFetchFailed(f"JWKS {redact(url)}: {exc}") from None
        self.metrics.card_jwks_fetches.labels(name, "ok").inc()
        return keys
