"""gateway/a2a/card_bridge.py: which versions and bindings a card speaks, and the card in the
other version's shape, member by member (docs/bridge.md §2; docs/protocol.md §4.2-4.3). Plain
dicts in, plain values out; the genuine SDKs check the results in
tests/e2e/test_card_bridge_sdk.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.a2a.card import card_problem, rewrite_card
from gateway.a2a.card_bridge import (
    CardBridgeError,
    bridge_card,
    card_endpoints,
    card_versions,
    interface_version,
    served_card,
    speaks,
)
from gateway.a2a.version import Binding, ProtocolVersion
from tests.support.cards import GRPC_IFACE, TOCK_CARD, TOCK_V03, WS_IFACE

V03, V10 = ProtocolVersion.V0_3, ProtocolVersion.V1_0
RPC, REST = Binding.JSONRPC, Binding.REST
W = "http://localhost:8080/a2a/tock/"

# The members each version's AgentCard has (TYPES03; PROTO), and those of its capabilities.
V03_MEMBERS = {"protocolVersion", "name", "description", "url", "preferredTransport",
               "additionalInterfaces", "iconUrl", "provider", "version", "documentationUrl",
               "capabilities", "securitySchemes", "security", "defaultInputModes",
               "defaultOutputModes", "skills", "supportsAuthenticatedExtendedCard", "signatures"}
V10_MEMBERS = {"name", "description", "supportedInterfaces", "provider", "version",
               "documentationUrl", "capabilities", "securitySchemes", "securityRequirements",
               "defaultInputModes", "defaultOutputModes", "skills", "signatures", "iconUrl"}
V03_REQUIRED = {"protocolVersion", "name", "description", "url", "version", "capabilities",
                "defaultInputModes", "defaultOutputModes", "skills"}
V10_REQUIRED = {"name", "description", "supportedInterfaces", "version", "capabilities",
                "defaultInputModes", "defaultOutputModes", "skills"}
V03_CAPS = {"streaming", "pushNotifications", "stateTransitionHistory", "extensions"}
V10_CAPS = {"streaming", "pushNotifications", "extensions", "extendedAgentCard"}
V03_SKILL = {"id", "name", "description", "tags", "examples", "inputModes", "outputModes", "security"}
V10_SKILL = {"id", "name", "description", "tags", "examples", "inputModes", "outputModes",
             "securityRequirements"}


def assert_v03(card: dict[str, Any]) -> None:
    """A TYPES03 card and nothing else: what the repo's validator and a v0.3 client accept."""
    assert card_problem(card) is None
    assert V03_REQUIRED <= card.keys() <= V03_MEMBERS, card.keys() ^ V03_MEMBERS
    assert card["protocolVersion"] == "0.3.0"
    assert card["capabilities"].keys() <= V03_CAPS
    assert all(s.keys() <= V03_SKILL for s in card["skills"])
    assert all(i.keys() == {"url", "transport"} for i in card.get("additionalInterfaces", []))


def assert_v10(card: dict[str, Any]) -> None:
    """A PROTO card and nothing else (no v0.3 member a strict proto-JSON parser would refuse)."""
    assert card_problem(card) is None
    assert V10_REQUIRED <= card.keys() <= V10_MEMBERS, card.keys() ^ V10_MEMBERS
    assert card["capabilities"].keys() <= V10_CAPS
    assert all(s.keys() <= V10_SKILL for s in card["skills"])
    assert card["supportedInterfaces"]
    assert all(i["protocolVersion"] == "1.0" for i in card["supportedInterfaces"])


# ------------------------------------------------------------------------------ shared cards

SKILL = {"id": "plan", "name": "Plan", "description": "plans", "tags": ["time"],
         "examples": ["next tuesday"], "inputModes": ["text/plain"], "outputModes": ["application/json"]}
EXT = {"uri": "urn:example:ext", "description": "an extension", "required": False, "params": {"a": 1}}

# Every member both versions express, in each version's form (no loss on a round trip).
FULL_V10: dict[str, Any] = {
    "name": "Tock", "description": "scheduler", "version": "1.2.0",
    "supportedInterfaces": [
        {"url": W, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": W + "rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}],
    "provider": {"organization": "Example", "url": "https://example.org"},
    "documentationUrl": "https://example.org/docs", "iconUrl": "https://example.org/icon.png",
    "capabilities": {"streaming": True, "pushNotifications": False, "extensions": [EXT],
                     "extendedAgentCard": True},
    "securitySchemes": {
        "key": {"apiKeySecurityScheme": {"description": "k", "location": "header", "name": "X-Key"}},
        "bearer": {"httpAuthSecurityScheme": {"scheme": "bearer", "bearerFormat": "JWT"}},
        "oauth": {"oauth2SecurityScheme": {"oauth2MetadataUrl": "https://idp/.well-known", "flows": {
            "authorizationCode": {"authorizationUrl": "https://idp/auth", "tokenUrl": "https://idp/token",
                                  "refreshUrl": "https://idp/refresh", "scopes": {"read": "read"}}}}},
        "oidc": {"openIdConnectSecurityScheme": {"openIdConnectUrl": "https://idp/.well-known/openid"}},
        "mtls": {"mtlsSecurityScheme": {"description": "client certs"}}},
    "securityRequirements": [{"schemes": {"oauth": {"list": ["read"]}}},
                             {"schemes": {"key": {"list": []}, "mtls": {"list": []}}}],
    "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
    "skills": [{**SKILL, "securityRequirements": [{"schemes": {"bearer": {"list": []}}}]}],
}
FULL_V03: dict[str, Any] = {
    "protocolVersion": "0.3.0", "name": "Tock", "description": "scheduler", "version": "1.2.0",
    "url": W, "preferredTransport": "JSONRPC",
    "additionalInterfaces": [{"url": W, "transport": "JSONRPC"}, {"url": W + "rest", "transport": "HTTP+JSON"}],
    "provider": {"organization": "Example", "url": "https://example.org"},
    "documentationUrl": "https://example.org/docs", "iconUrl": "https://example.org/icon.png",
    "capabilities": {"streaming": True, "pushNotifications": False, "extensions": [EXT]},
    "supportsAuthenticatedExtendedCard": True,
    "securitySchemes": {
        "key": {"type": "apiKey", "description": "k", "name": "X-Key", "in": "header"},
        "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
        "oauth": {"type": "oauth2", "oauth2MetadataUrl": "https://idp/.well-known", "flows": {
            "authorizationCode": {"authorizationUrl": "https://idp/auth", "tokenUrl": "https://idp/token",
                                  "refreshUrl": "https://idp/refresh", "scopes": {"read": "read"}}}},
        "oidc": {"type": "openIdConnect", "openIdConnectUrl": "https://idp/.well-known/openid"},
        "mtls": {"type": "mutualTLS", "description": "client certs"}},
    "security": [{"oauth": ["read"]}, {"key": [], "mtls": []}],
    "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
    "skills": [{**SKILL, "security": [{"bearer": []}]}],
}
# What an a2a-sdk 1.3 worker with v0.3 compat serves (docs/protocol.md §4.3): both shapes.
MIXED: dict[str, Any] = {
    **TOCK_CARD,
    "supportedInterfaces": [
        {"url": W, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": W, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        {"url": W + "rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}],
    "url": W, "preferredTransport": "JSONRPC", "protocolVersion": "0.3",
}


# ------------------------------------------------------------------------------ versions

@pytest.mark.parametrize(("value", "version"), [
    ("1.0", V10), ("1.1", V10), ("1.0.2", V10), ("0.3", V03), ("0.3.0", V03), ("0.2.5", V03),
    ("", V03), (None, V03), ("2.0", None), ("junk", None), (1.0, None)])
def test_interface_versions(value: Any, version: Any) -> None:
    assert interface_version(value) == version


@pytest.mark.parametrize(("card", "endpoints"), [
    pytest.param(TOCK_CARD, {(V10, RPC): W, (V10, REST): W + "rest"}, id="v1.0-only"),
    pytest.param(TOCK_V03, {(V03, RPC): W}, id="v0.3-only"),
    pytest.param(MIXED, {(V10, RPC): W, (V03, RPC): W, (V10, REST): W + "rest"}, id="mixed-sdk"),
    pytest.param({**TOCK_CARD, "supportedInterfaces": [GRPC_IFACE, WS_IFACE]}, {}, id="grpc-only"),
    pytest.param({**TOCK_V03, "url": "worker:50051", "preferredTransport": "GRPC", "additionalInterfaces": []},
                 {}, id="v0.3-grpc-only"),
    pytest.param({**TOCK_CARD, "supportedInterfaces": [{"url": W, "protocolBinding": "jsonrpc", "protocolVersion": ""}]},
                 {(V03, RPC): W}, id="empty-protocolVersion-is-0.3"),
    pytest.param({**TOCK_CARD, "supportedInterfaces": [{"url": W, "protocolBinding": "JSONRPC", "protocolVersion": "2.0"}]},
                 {}, id="unknown-version"),
    pytest.param({k: v for k, v in TOCK_V03.items() if k not in ("protocolVersion", "preferredTransport")},
                 {(V03, RPC): W}, id="v0.3-defaults"),
    pytest.param({**TOCK_V03, "preferredTransport": "http+json",
                  "additionalInterfaces": [{"url": W + "x", "transport": "HTTP+JSON"},
                                           {"url": W + "rpc", "transport": "JSONRPC"}]},
                 {(V03, REST): W, (V03, RPC): W + "rpc"}, id="v0.3-first-wins-any-case"),
    pytest.param({**TOCK_CARD, "supportedInterfaces": [
        {"url": W + "a", "protocolBinding": "Http+Json", "protocolVersion": "1.1"},
        {"url": W + "b", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}]},
        {(V10, REST): W + "a"}, id="v1.0-first-wins-any-case"),
])
def test_card_endpoints_and_versions(card: dict[str, Any], endpoints: dict[Any, str]) -> None:
    assert card_endpoints(card) == endpoints
    assert list(card_endpoints(card)) == list(endpoints)  # in the card's order of preference
    assert card_versions(card) == frozenset(endpoints)


# ------------------------------------------------------------------------------ not bridged

@pytest.mark.parametrize("version", [V03, V10])
def test_the_mixed_sdk_card_is_not_bridged(version: ProtocolVersion) -> None:
    assert speaks(MIXED, V03) and speaks(MIXED, V10)
    assert bridge_card(MIXED, version) == MIXED


def test_a_card_of_the_wanted_version_comes_back_unchanged() -> None:
    assert bridge_card(TOCK_CARD, V10) == TOCK_CARD
    assert bridge_card(TOCK_V03, V03) == TOCK_V03


@pytest.mark.parametrize("version", [V03, V10])
def test_a_grpc_only_card_cannot_be_bridged(version: ProtocolVersion) -> None:
    with pytest.raises(CardBridgeError):
        bridge_card({**TOCK_CARD, "supportedInterfaces": [GRPC_IFACE]}, version)


# ------------------------------------------------------------------------------ member by member

_CAPS = {"streaming": True}
ROWS = [  # (row, v1.0 members, v0.3 members): each maps onto the other, both ways
    ("provider", {"provider": {"organization": "Ex", "url": "https://ex.org"}},
     {"provider": {"organization": "Ex", "url": "https://ex.org"}}),
    ("documentationUrl", {"documentationUrl": "https://ex.org/d"}, {"documentationUrl": "https://ex.org/d"}),
    ("iconUrl", {"iconUrl": "https://ex.org/i.png"}, {"iconUrl": "https://ex.org/i.png"}),
    ("name/description/version/modes",
     {"name": "N", "description": "D", "version": "9", "defaultInputModes": ["a/b"], "defaultOutputModes": ["c/d"]},
     {"name": "N", "description": "D", "version": "9", "defaultInputModes": ["a/b"], "defaultOutputModes": ["c/d"]}),
    ("streaming/pushNotifications", {"capabilities": {"streaming": False, "pushNotifications": True}},
     {"capabilities": {"streaming": False, "pushNotifications": True}}),
    ("extensions", {"capabilities": {**_CAPS, "extensions": [EXT, {"uri": "urn:x"}]}},
     {"capabilities": {**_CAPS, "extensions": [EXT, {"uri": "urn:x"}]}}),
    ("extendedAgentCard true", {"capabilities": {**_CAPS, "extendedAgentCard": True}},
     {"capabilities": _CAPS, "supportsAuthenticatedExtendedCard": True}),
    ("extendedAgentCard false", {"capabilities": {**_CAPS, "extendedAgentCard": False}},
     {"capabilities": _CAPS, "supportsAuthenticatedExtendedCard": False}),
    ("security", {"securityRequirements": [{"schemes": {"a": {"list": ["r", "w"]}, "b": {"list": []}}}]},
     {"security": [{"a": ["r", "w"], "b": []}]}),
    ("empty security", {"securityRequirements": []}, {"security": []}),
    ("skill", {"skills": [SKILL]}, {"skills": [SKILL]}),
    ("skill security", {"skills": [{**SKILL, "securityRequirements": [{"schemes": {"a": {"list": ["r"]}}}]}]},
     {"skills": [{**SKILL, "security": [{"a": ["r"]}]}]}),
    ("apiKey", {"securitySchemes": {"k": {"apiKeySecurityScheme": {"location": "query", "name": "key"}}}},
     {"securitySchemes": {"k": {"type": "apiKey", "in": "query", "name": "key"}}}),
    ("http", {"securitySchemes": {"h": {"httpAuthSecurityScheme": {"scheme": "basic", "description": "d"}}}},
     {"securitySchemes": {"h": {"type": "http", "scheme": "basic", "description": "d"}}}),
    ("oauth2 clientCredentials", {"securitySchemes": {"o": {"oauth2SecurityScheme": {"flows": {
        "clientCredentials": {"tokenUrl": "https://t", "scopes": {}}}}}}},
     {"securitySchemes": {"o": {"type": "oauth2", "flows": {
         "clientCredentials": {"tokenUrl": "https://t", "scopes": {}}}}}}),
    ("oauth2 implicit", {"securitySchemes": {"o": {"oauth2SecurityScheme": {"flows": {
        "implicit": {"authorizationUrl": "https://a", "scopes": {"s": "S"}}}}}}},
     {"securitySchemes": {"o": {"type": "oauth2", "flows": {
         "implicit": {"authorizationUrl": "https://a", "scopes": {"s": "S"}}}}}}),
    ("oauth2 password", {"securitySchemes": {"o": {"oauth2SecurityScheme": {"flows": {
        "password": {"tokenUrl": "https://t", "refreshUrl": "https://r", "scopes": {}}}}}}},
     {"securitySchemes": {"o": {"type": "oauth2", "flows": {
         "password": {"tokenUrl": "https://t", "refreshUrl": "https://r", "scopes": {}}}}}}),
    ("openIdConnect", {"securitySchemes": {"i": {"openIdConnectSecurityScheme": {"openIdConnectUrl": "https://i"}}}},
     {"securitySchemes": {"i": {"type": "openIdConnect", "openIdConnectUrl": "https://i"}}}),
    ("mutualTLS", {"securitySchemes": {"m": {"mtlsSecurityScheme": {}}}},
     {"securitySchemes": {"m": {"type": "mutualTLS"}}}),
]


@pytest.mark.parametrize(("v10", "v03"), [pytest.param(a, b, id=row) for row, a, b in ROWS])
def test_v10_member_to_v03(v10: dict[str, Any], v03: dict[str, Any]) -> None:
    out = bridge_card({**TOCK_CARD, **v10}, V03)
    assert_v03(out)
    assert {k: out.get(k) for k in v03} == v03


@pytest.mark.parametrize(("v10", "v03"), [pytest.param(a, b, id=row) for row, a, b in ROWS])
def test_v03_member_to_v10(v10: dict[str, Any], v03: dict[str, Any]) -> None:
    out = bridge_card({**TOCK_V03, **v03}, V10)
    assert_v10(out)
    assert {k: out.get(k) for k in v10} == v10


# ------------------------------------------------------------------------------ interfaces

def test_v10_interfaces_become_the_v03_url_and_additional_interfaces() -> None:
    out = bridge_card(TOCK_CARD, V03)
    assert (out["url"], out["preferredTransport"]) == (W, "JSONRPC")
    assert out["additionalInterfaces"] == [{"url": W, "transport": "JSONRPC"},
                                           {"url": W + "rest", "transport": "HTTP+JSON"}]


def test_the_first_v10_interface_is_the_v03_main_one_and_bindings_come_out_upper_case() -> None:
    card = {**TOCK_CARD, "supportedInterfaces": [
        GRPC_IFACE,
        {"url": W + "rest", "protocolBinding": "http+json", "protocolVersion": "1.0", "tenant": "t1"},
        {"url": W + "other", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": W, "protocolBinding": "JSONRPC", "protocolVersion": "1.1"}, WS_IFACE]}
    out = bridge_card(card, V03)
    assert (out["url"], out["preferredTransport"]) == (W + "rest", "HTTP+JSON")
    assert out["additionalInterfaces"] == [{"url": W + "rest", "transport": "HTTP+JSON"},
                                           {"url": W, "transport": "JSONRPC"}]  # one per binding


def test_v03_interfaces_become_v10_supported_interfaces_one_per_binding() -> None:
    card = {**TOCK_V03, "url": "worker:50051", "preferredTransport": "GRPC", "additionalInterfaces": [
        {"url": "worker:50051", "transport": "GRPC"}, {"url": W + "rest", "transport": "HTTP+JSON"},
        {"url": W, "transport": "jsonrpc"}, {"url": W + "again", "transport": "JSONRPC"}]}
    out = bridge_card(card, V10)
    assert out["supportedInterfaces"] == [
        {"url": W + "rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": W, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]


def test_a_v10_shaped_card_of_0x_interfaces_keeps_its_v10_members() -> None:
    card = {**FULL_V10, "supportedInterfaces": [
        {"url": W, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}, GRPC_IFACE]}
    out = bridge_card(card, V10)
    assert_v10(out)
    assert out == {**FULL_V10, "supportedInterfaces": [
        {"url": W, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}


# ------------------------------------------------------------------------------ losses

@pytest.mark.parametrize("version", [V03, V10])
def test_signatures_are_dropped(version: ProtocolVersion) -> None:
    sig = [{"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln"}]
    source = TOCK_CARD if version == V03 else TOCK_V03
    assert "signatures" not in bridge_card({**source, "signatures": sig}, version)
    assert "signatures" not in bridge_card({**source, "signatures": []}, version)


def test_state_transition_history_is_dropped() -> None:
    out = bridge_card({**TOCK_V03, "capabilities": {"streaming": True, "stateTransitionHistory": True}}, V10)
    assert out["capabilities"] == {"streaming": True}


def test_members_neither_version_defines_are_dropped() -> None:
    out03 = bridge_card({**TOCK_CARD, "x-vendor": 1, "capabilities": {"streaming": True, "x": 2},
                         "skills": [{**SKILL, "x": 3}]}, V03)
    assert "x-vendor" not in out03 and out03["capabilities"] == {"streaming": True}
    assert out03["skills"] == [SKILL]
    out10 = bridge_card({**TOCK_V03, "x-vendor": 1}, V10)
    assert "x-vendor" not in out10


def test_v10_only_oauth_members_are_dropped() -> None:
    flows = {"deviceCode": {"deviceAuthorizationUrl": "https://d", "tokenUrl": "https://t", "scopes": {}}}
    card = {**TOCK_CARD, "securitySchemes": {
        "dev": {"oauth2SecurityScheme": {"flows": flows}},
        "pkce": {"oauth2SecurityScheme": {"flows": {"authorizationCode": {
            "authorizationUrl": "https://a", "tokenUrl": "https://t", "scopes": {}, "pkceRequired": True}}}}}}
    out = bridge_card(card, V03)
    assert out["securitySchemes"] == {
        "dev": {"type": "oauth2", "flows": {}},  # no v0.3 flow left: the scheme says oauth2 only
        "pkce": {"type": "oauth2", "flows": {"authorizationCode": {
            "authorizationUrl": "https://a", "tokenUrl": "https://t", "scopes": {}}}}}


def test_of_several_v03_oauth_flows_v10_keeps_the_first() -> None:
    flows = {"password": {"tokenUrl": "https://p", "scopes": {}},
             "clientCredentials": {"tokenUrl": "https://c", "scopes": {}}}
    out = bridge_card({**TOCK_V03, "securitySchemes": {"o": {"type": "oauth2", "flows": flows}}}, V10)
    assert out["securitySchemes"]["o"] == {"oauth2SecurityScheme": {"flows": {
        "clientCredentials": {"tokenUrl": "https://c", "scopes": {}}}}}


def test_schemes_of_no_known_kind_are_dropped() -> None:
    out03 = bridge_card({**TOCK_CARD, "securitySchemes": {"x": {"futureScheme": {}}, "y": "junk"}}, V03)
    assert out03["securitySchemes"] == {}
    out10 = bridge_card({**TOCK_V03, "securitySchemes": {"x": {"type": "future"}}}, V10)
    assert out10["securitySchemes"] == {}


def test_interface_tenant_and_unguarded_interfaces_are_dropped() -> None:
    card = {**TOCK_CARD, "supportedInterfaces": [
        {"url": W, "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "acme"}, GRPC_IFACE, WS_IFACE]}
    out = bridge_card(card, V03)
    assert out["additionalInterfaces"] == [{"url": W, "transport": "JSONRPC"}]
    assert "tenant" not in str(out)


# ------------------------------------------------------------------------------ whole cards

def test_full_cards_convert_to_each_other() -> None:
    assert_v03(bridge_card(FULL_V10, V03))
    assert_v10(bridge_card(FULL_V03, V10))
    assert bridge_card(FULL_V10, V03) == FULL_V03
    assert bridge_card(FULL_V03, V10) == FULL_V10


def test_round_trips_keep_every_member_both_versions_express() -> None:
    assert bridge_card(bridge_card(FULL_V10, V03), V10) == FULL_V10
    assert bridge_card(bridge_card(FULL_V03, V10), V03) == FULL_V03
    lossy = {**FULL_V10, "signatures": [{"protected": "p", "signature": "s"}],
             "supportedInterfaces": [*FULL_V10["supportedInterfaces"], GRPC_IFACE]}
    assert bridge_card(bridge_card(lossy, V03), V10) == FULL_V10


@pytest.mark.parametrize(("card", "version"), [(FULL_V10, V03), (FULL_V03, V10)])
def test_the_input_card_is_not_modified(card: dict[str, Any], version: ProtocolVersion) -> None:
    before = copy.deepcopy(card)
    bridge_card(card, version)
    assert card == before


@pytest.mark.parametrize(("card", "version"), [(TOCK_CARD, V03), (TOCK_V03, V10), (FULL_V10, V03)])
def test_rewrite_then_bridge_points_at_the_gateway(card: dict[str, Any], version: ProtocolVersion) -> None:
    """The served card: the rewrite first, then the bridge, which copies the rewritten URLs; the
    other order gives the same URLs (the bridge keeps each binding's URL)."""
    upstream, public = "http://worker-a.internal:8080/a2a/tock/", "https://gw.example.net/a2a/tick/"

    def rewrite(doc: dict[str, Any]) -> dict[str, Any]:
        return rewrite_card(doc, upstream_url=upstream, public_base=public)

    served = bridge_card(rewrite(card), version)
    assert set(card_endpoints(served).values()) <= {public, public + "rest"}
    assert served == rewrite(bridge_card(card, version))


# ------------------------------------------------------ the served card (docs/bridge.md §2.2)

V03_TOP_LEVEL = ("url", "preferredTransport", "protocolVersion", "additionalInterfaces")


def test_the_served_card_of_a_v10_worker_lists_both_versions_in_both_shapes() -> None:
    """The worker's v1.0 interfaces first, then one bridged v0.3 interface per binding at the
    same URL; the v0.3 members merged in, a security scheme in both forms."""
    served = served_card(FULL_V10, bridge=True)
    v10_ifaces = FULL_V10["supportedInterfaces"]
    assert served["supportedInterfaces"][:len(v10_ifaces)] == v10_ifaces
    assert served["supportedInterfaces"][len(v10_ifaces):] == [
        {"url": url, "protocolBinding": binding.upper(), "protocolVersion": "0.3"}
        for (_, binding), url in _first_per_binding(v10_ifaces).items()]
    as_v03 = bridge_card(FULL_V10, V03)
    assert {k: served[k] for k in V03_TOP_LEVEL} == {k: as_v03[k] for k in V03_TOP_LEVEL}
    assert {k: served[k] for k in FULL_V10 if k != "supportedInterfaces"} == {
        k: v for k, v in FULL_V10.items() if k != "supportedInterfaces"} | {
        "securitySchemes": served["securitySchemes"], "skills": served["skills"]}
    for name, scheme in served["securitySchemes"].items():  # the v1.0 wrapper and the v0.3 tag
        assert FULL_V10["securitySchemes"][name].items() <= scheme.items()
        assert as_v03["securitySchemes"][name]["type"] == scheme["type"]
    assert card_versions(served) == {(V10, b) for _, b in card_versions(FULL_V10)} | {
        (V03, b) for _, b in card_versions(FULL_V10)}


def _first_per_binding(ifaces: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for i in ifaces:
        if i["protocolBinding"].upper() in ("JSONRPC", "HTTP+JSON"):
            out.setdefault((i["protocolVersion"], i["protocolBinding"].upper()), i["url"])
    return out


def test_the_served_card_of_a_v03_worker_keeps_its_members_and_adds_v10() -> None:
    served = served_card(TOCK_V03, bridge=True)
    assert {k: served[k] for k in TOCK_V03} == TOCK_V03  # every v0.3 member as the worker wrote it
    assert served["supportedInterfaces"] == [
        {"url": TOCK_V03["url"], "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},  # its own
        {"url": TOCK_V03["url"], "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]  # bridged
    full = served_card(FULL_V03, bridge=True)
    as_v10 = bridge_card(FULL_V03, V10)
    assert full["securityRequirements"] == as_v10["securityRequirements"]
    assert full["capabilities"]["extendedAgentCard"] is as_v10["capabilities"]["extendedAgentCard"]
    for name, scheme in as_v10["securitySchemes"].items():
        assert scheme.items() <= full["securitySchemes"][name].items()


def test_the_served_card_of_a_v10_shaped_card_of_0x_interfaces_adds_v10_interfaces() -> None:
    legacy = {**TOCK_CARD, "supportedInterfaces": [
        {**i, "protocolVersion": "0.3"} for i in TOCK_CARD["supportedInterfaces"]]}
    served = served_card(legacy, bridge=True)
    assert [i["protocolVersion"] for i in served["supportedInterfaces"]] == ["0.3", "0.3", "1.0", "1.0"]
    assert (served["url"], served["protocolVersion"]) == (TOCK_CARD["supportedInterfaces"][0]["url"], "0.3.0")


@pytest.mark.parametrize("card", [
    pytest.param({**TOCK_CARD, "supportedInterfaces": [*TOCK_CARD["supportedInterfaces"], {
        "url": "http://localhost:8080/a2a/tock/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]},
        id="both-versions"),
    pytest.param({**TOCK_CARD, "supportedInterfaces": [GRPC_IFACE]}, id="grpc-only"),
])
def test_a_card_of_both_versions_or_none_is_served_as_it_is(card: dict[str, Any]) -> None:
    assert served_card(card, bridge=True) is card


@pytest.mark.parametrize("card", [TOCK_CARD, TOCK_V03, FULL_V10, FULL_V03])
def test_without_the_bridge_the_workers_card_is_served_as_it_is(card: dict[str, Any]) -> None:
    assert served_card(card, bridge=False) is card


@pytest.mark.parametrize("card", [FULL_V10, FULL_V03])
def test_serving_does_not_modify_the_input_card(card: dict[str, Any]) -> None:
    before = copy.deepcopy(card)
    served_card(card, bridge=True)
    assert card == before
