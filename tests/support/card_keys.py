"""Keys and signatures for the signed-card tests (docs/protocol.md §4.5): key pairs written as
PEM files and JWKS documents, a worker card signed with a2a-sdk 1.3's own signer
(``a2a.utils.signing.create_agent_card_signer``), and a2a-sdk 1.3's own verifier run on a card as
its client reads it (``parse_agent_card``)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import create_agent_card_signer, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from google.protobuf.json_format import MessageToDict

ALGORITHMS = ["ES256", "ES384", "ES512", "EdDSA", "RS256", "PS256"]


@dataclass
class KeyPair:
    """A private key, its ``kid`` and JWS ``alg``, and where its PEM files were written."""

    kid: str
    alg: str
    private: Any
    private_pem: Path
    public_pem: Path

    def jwk(self) -> dict[str, Any]:
        """The public JWK (with ``kid`` and ``alg``)."""
        found = jwt.algorithms.get_default_algorithms()[self.alg].to_jwk(self.private.public_key(), as_dict=True)
        return {**found, "kid": self.kid, "alg": self.alg}

    def private_jwk(self) -> dict[str, Any]:
        """The private JWK (for the JS SDK's signer)."""
        found = jwt.algorithms.get_default_algorithms()[self.alg].to_jwk(self.private, as_dict=True)
        return {**found, "kid": self.kid, "alg": self.alg}


def make_key(directory: Path, kid: str, kind: str = "ec") -> KeyPair:
    """A new key pair (``ec``: P-256 / ES256, ``ed25519``: EdDSA, ``rsa``: 2048 bits / RS256),
    its PEM files in ``directory`` named after ``kid``."""
    if kind == "ec":
        private: Any = ec.generate_private_key(ec.SECP256R1())
        alg = "ES256"
    elif kind == "ed25519":
        private, alg = ed25519.Ed25519PrivateKey.generate(), "EdDSA"
    else:
        private, alg = rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"
    private_pem = directory / f"{kid}.key.pem"
    private_pem.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    public_pem = directory / f"{kid}.pub.pem"
    public_pem.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo))
    return KeyPair(kid, alg, private, private_pem, public_pem)


def write_jwks(path: Path, *keys: KeyPair) -> Path:
    """A JWKS file of the public keys."""
    path.write_text(json.dumps({"keys": [k.jwk() for k in keys]}))
    return path


def sdk_sign(card: dict[str, Any], key: KeyPair, *, kid: str | None = None, jku: str | None = None) -> dict[str, Any]:
    """``card`` with one more signature made by a2a-sdk 1.3's own signer (over its proto
    reading, as a worker built on the SDK signs its card), signed as ``kid`` (default: the
    key's). The card's other members are returned as they were."""
    header: dict[str, Any] = {"alg": key.alg, "kid": kid or key.kid, "typ": "JOSE"}
    if jku is not None:
        header["jku"] = jku
    proto = parse_agent_card(copy.deepcopy(card))
    signed = create_agent_card_signer(key.private, header)(proto)  # type: ignore[arg-type]
    signature = MessageToDict(signed.signatures[-1])
    return {**card, "signatures": [*card.get("signatures", []), signature]}


def sdk_verify(card: dict[str, Any], jwks: dict[str, Any]) -> None:
    """Run a2a-sdk 1.3's verifier on ``card`` as its client reads it, with the keys of
    ``jwks``; raises its ``SignatureVerificationError`` when no signature holds."""
    keys = {k["kid"]: jwt.PyJWK(k) for k in jwks["keys"]}

    def key_provider(kid: str | None, jku: str | None) -> Any:
        if kid not in keys:
            raise jwt.PyJWKError(f"unknown kid {kid}")
        return keys[kid]

    create_signature_verifier(key_provider, ALGORITHMS)(parse_agent_card(copy.deepcopy(card)))
