"""gateway/a2a/card_signing.py: what a card signature covers, byte for byte as a2a-sdk 1.3's own
canonicalizer computes it (``a2a.utils.signing``, run here in-process on the card as its client
reads it); @a2a-js/sdk 1.3's is compared in tests/e2e/test_card_signing_sdk.py (a node process).
docs/protocol.md §4.2, §4.5."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from a2a.utils.signing import _canonicalize_agent_card
from google.protobuf.descriptor import FieldDescriptor

from gateway.a2a.card import rewrite_card
from gateway.a2a.card_bridge import served_card
from gateway.a2a.card_signing import (
    AGENT_CARD_SCHEMA,
    canonical,
    card_signatures,
    protected_header,
    python_sdk_reading,
    signed_view,
    signing_inputs,
    verification_input,
    with_signatures,
)
from tests.support.cards import GRPC_IFACE, TOCK_CARD, TOCK_V03

OAUTH_PKCE = {"oauth2SecurityScheme": {"description": "idp", "flows": {"authorizationCode": {
    "authorizationUrl": "https://idp/auth", "tokenUrl": "https://idp/token", "scopes": {"r": "read", "e": ""},
    "pkceRequired": True}}}}
RICH: dict[str, Any] = {
    **TOCK_CARD,
    "supportedInterfaces": [GRPC_IFACE, *TOCK_CARD["supportedInterfaces"]],
    "provider": {"url": "https://p.example", "organization": ""},
    "documentationUrl": "", "iconUrl": "https://p.example/i.png",
    "capabilities": {"streaming": False, "pushNotifications": True, "extendedAgentCard": False, "extensions": [
        {"uri": "urn:x", "required": False, "description": "", "params": {
            "n": 30, "f": 0.5, "big": 2 ** 60, "s": "é\u2028\"\\", "e": "", "z": None, "l": [],
            "nested": {"a": [1, None, {}, "x"]}, "t": True, "no": False}},
        {"uri": "urn:y", "required": True}]},
    "securitySchemes": {"key": {"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}},
                        "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}},
                        "mtls": {"mtlsSecurityScheme": {}}},
    "securityRequirements": [{"schemes": {"key": {"list": []}}}, {"schemes": {"bearer": {"list": ["a", "b"]}}}],
    "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"], "examples": [],
                "inputModes": ["text/plain"], "securityRequirements": [{"schemes": {"key": {"list": ["x"]}}}]}],
    "signatures": [{"protected": "e30", "signature": "c2ln"}],
    "somethingElse": {"x": 1}, "url": "http://legacy/", "preferredTransport": "JSONRPC",
}
CARDS = {"tock": TOCK_CARD, "tock-v03": TOCK_V03, "rich": RICH, "oauth-pkce": {**TOCK_CARD, "securitySchemes": {"o": OAUTH_PKCE}}}


def gateway_forms() -> dict[str, dict[str, Any]]:
    """Every test card as the gateway serves it: rewritten, then both versions listed."""
    out = dict(CARDS)
    for name, card in CARDS.items():
        rewritten = rewrite_card(card, upstream_url="http://localhost:8080/a2a/tock/", public_base="https://gw/x/")
        out[name + "-served"] = served_card(rewritten, bridge=True)
    return out


def sdk_canonical(card: dict[str, Any]) -> bytes:
    """a2a-sdk 1.3's canonical bytes of ``card`` as its client reads and verifies it."""
    return _canonicalize_agent_card(parse_agent_card(copy.deepcopy(card))).encode()


# ------------------------------------------------------------------------------ the schema


def _schema_of(descriptor: Any) -> Any:
    out = {}
    for f in descriptor.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            value = f.message_type.fields_by_name["value"]
            leaf = _schema_of(value.message_type) if value.message_type is not None else "string"
            out[f.json_name] = ("map", leaf)
            continue
        if f.message_type is not None:
            leaf = "struct" if f.message_type.full_name == "google.protobuf.Struct" else _schema_of(f.message_type)
        elif f.type == FieldDescriptor.TYPE_BOOL:
            leaf = "optional bool" if f.has_presence else "bool"
        else:
            assert f.type == FieldDescriptor.TYPE_STRING, f.full_name  # no number or enum in a card
            leaf = "string"
        out[f.json_name] = ("list", leaf) if f.is_repeated else leaf
    return out


def test_the_schema_is_the_sdks_agent_card_descriptor() -> None:
    assert AGENT_CARD_SCHEMA == _schema_of(AgentCard.DESCRIPTOR)


# ------------------------------------------------------------------------------ byte for byte


@pytest.mark.parametrize("name", sorted(gateway_forms()))
def test_the_sdks_canonical_bytes_are_one_of_the_signing_inputs(name: str) -> None:
    card = gateway_forms()[name]
    forms = signing_inputs(card)
    assert sdk_canonical(card) in forms
    assert forms[0] == verification_input(card) == canonical(signed_view(card))


def test_a_worker_signed_proto_card_has_the_bytes_the_gateway_verifies() -> None:
    """An SDK worker signs its proto card and serves it mixed (``agent_card_to_dict``): the
    gateway's reading of the served JSON is what was signed."""
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict

    proto = parse_agent_card(copy.deepcopy(RICH))
    assert verification_input(agent_card_to_dict(proto)) == _canonicalize_agent_card(proto).encode()


def test_only_a_mixed_card_whose_v03_form_says_less_has_two_readings() -> None:
    forms = gateway_forms()
    assert len(signing_inputs(forms["oauth-pkce-served"])) == 2  # the v0.3 flows lack pkceRequired
    assert [len(signing_inputs(forms[n])) for n in ("tock-served", "tock-v03-served", "rich-served")] == [1, 1, 1]
    assert b'"pkceRequired":true' in signing_inputs(forms["oauth-pkce-served"])[0]
    assert b"pkceRequired" not in signing_inputs(forms["oauth-pkce-served"])[1]


def test_the_reading_drops_what_the_sdks_drop_and_keeps_what_they_keep() -> None:
    view = signed_view(RICH)
    assert "signatures" not in view and "somethingElse" not in view and "url" not in view
    assert "documentationUrl" not in view and view["provider"] == {"url": "https://p.example"}
    caps = view["capabilities"]
    assert caps["streaming"] is False and caps["extendedAgentCard"] is False  # presence: kept
    assert "required" not in caps["extensions"][0] and caps["extensions"][1]["required"] is True
    assert caps["extensions"][0]["params"] == {"n": 30, "f": 0.5, "big": float(2 ** 60), "s": "é\u2028\"\\",
                                               "nested": {"a": [1, "x"]}, "t": True, "no": False}
    assert view["securityRequirements"] == [{"schemes": {"bearer": {"list": ["a", "b"]}}}]
    assert "mtls" not in view["securitySchemes"]  # all defaults: nothing left
    assert RICH["capabilities"]["extensions"][0]["params"]["z"] is None  # the input is untouched


def test_python_sdk_reading_converts_legacy_members_as_its_resolver_does() -> None:
    legacy = {"name": "n", "url": "http://w/", "additionalInterfaces": [{"url": "http://w/rest", "transport": "HTTP+JSON"}],
              "supportsAuthenticatedExtendedCard": True, "security": [{"k": ["s"]}],
              "securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "X"}}}
    reading = python_sdk_reading(legacy)
    assert reading["supportedInterfaces"] == [
        {"url": "http://w/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3.0"},
        {"url": "http://w/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3.0"}]
    assert reading["capabilities"] == {"extendedAgentCard": True}
    assert reading["securityRequirements"] == [{"schemes": {"k": {"list": ["s"]}}}]
    assert reading["securitySchemes"] == {"k": {"apiKeySecurityScheme": {"location": "header", "name": "X"}}}
    assert "url" in legacy and legacy["securitySchemes"]["k"]["type"] == "apiKey"  # untouched


def test_an_integer_past_two_to_the_53_outside_a_struct_has_no_canonical_form() -> None:
    with pytest.raises(ValueError):
        signing_inputs({**TOCK_CARD, "name": 2 ** 60})


# ------------------------------------------------------------------------------ signature objects


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize(("protected", "expected"), [
    (_b64(b'{"alg":"ES256","kid":"k","typ":"JOSE","jku":"https://g/j"}'),
     {"alg": "ES256", "kid": "k", "typ": "JOSE", "jku": "https://g/j"}),
    (_b64(b"[1]"), None), ("%%%", None), ("", None), (None, None), (_b64(b"{nope"), None),
])
def test_protected_header_is_decoded_or_refused(protected: Any, expected: Any) -> None:
    assert protected_header({"protected": protected, "signature": "x"}) == expected


def test_signatures_are_read_and_replaced() -> None:
    card = {**TOCK_CARD, "signatures": [{"protected": "a", "signature": "b"}, "junk"]}
    assert card_signatures(card) == [{"protected": "a", "signature": "b"}]
    assert card_signatures(TOCK_CARD) == [] and card_signatures({**TOCK_CARD, "signatures": "x"}) == []
    replaced = with_signatures(card, [{"protected": "c", "signature": "d"}])
    assert replaced["signatures"] == [{"protected": "c", "signature": "d"}] and list(replaced)[-1] == "signatures"
    assert card["signatures"][0]["protected"] == "a"
