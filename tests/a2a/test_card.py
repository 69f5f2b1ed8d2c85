"""gateway/a2a/card.py: which cards count as signed, and the card the gateway serves — guarded
interfaces only, their URLs pointing at the gateway (docs/protocol.md §4.5; docs/field-cases.md
F10). Plain dicts in, plain values out."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.a2a.card import (
    advertised_urls,
    binding_label,
    card_problem,
    credential_headers,
    drop_unguarded,
    is_guarded,
    is_signed,
    jsonrpc_paths,
    rewrite_card,
    unguarded_interfaces,
)
from tests.support.cards import GRPC_IFACE, TOCK_CARD, TOCK_V03, WS_IFACE

UPSTREAM = "http://worker-a.internal:8080/a2a/tock/"
PUBLIC = "https://gw.example.net/a2a/tick/"
SIG = {"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln"}
GRPC, CUSTOM, V10, V03 = GRPC_IFACE, WS_IFACE, TOCK_CARD, TOCK_V03


def rewrite(doc: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return rewrite_card(doc, upstream_url=UPSTREAM, public_base=PUBLIC, **kwargs)


# ------------------------------------------------------------------------------ signed or not

@pytest.mark.parametrize(("signatures", "signed"), [
    (None, False), ([], False), ([SIG], True), ({"protected": "x"}, False), ("c2ln", False)])
def test_only_a_non_empty_signatures_list_is_signed(signatures: Any, signed: bool) -> None:
    assert is_signed({**V10, "signatures": signatures}) is signed


def test_a_card_without_signatures_is_unsigned() -> None:
    assert is_signed(V10) is False


def test_empty_signatures_are_rewritten_and_stay_an_empty_list() -> None:
    served = rewrite({**V10, "signatures": []})  # @a2a-js/sdk 1.3 sends this on every card
    assert served["signatures"] == []
    assert advertised_urls(served) == [PUBLIC, PUBLIC + "rest"]


@pytest.mark.parametrize("signatures", [[SIG], None, {"protected": "x"}])
def test_any_other_signatures_value_is_removed_by_a_rewrite(signatures: Any) -> None:
    assert "signatures" not in rewrite({**V10, "signatures": signatures})


# ------------------------------------------------------------------------------ guarded bindings

@pytest.mark.parametrize(("binding", "guarded"), [
    ("JSONRPC", True), ("jsonrpc", True), ("HTTP+JSON", True), ("Http+Json", True),
    ("GRPC", False), ("grpc", False), ("urn:example:websocket", False), ("", False), (None, False)])
def test_guarded_bindings_are_jsonrpc_and_http_json_in_any_case(binding: Any, guarded: bool) -> None:
    assert is_guarded(binding) is guarded


@pytest.mark.parametrize(("binding", "label"), [
    ("grpc", "GRPC"), ("GRPC", "GRPC"), ("urn:example:websocket", "other"),
    (None, "unspecified"), ("", "unspecified")])
def test_binding_labels(binding: Any, label: str) -> None:
    assert binding_label(binding) == label


def test_v10_unguarded_interfaces_are_dropped_by_default() -> None:
    card = {**V10, "supportedInterfaces": [GRPC, *V10["supportedInterfaces"], CUSTOM]}
    served = rewrite(card)
    assert served["supportedInterfaces"] == [
        {"url": PUBLIC, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": PUBLIC + "rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}]
    assert unguarded_interfaces(served) == {}
    assert unguarded_interfaces(card) == {"GRPC": 1, "other": 1}


def test_v10_unguarded_interfaces_are_kept_untouched_on_request() -> None:
    card = {**V10, "supportedInterfaces": [GRPC, *V10["supportedInterfaces"], CUSTOM]}
    served = rewrite(card, keep_unguarded=True)
    assert served["supportedInterfaces"] == [
        GRPC,
        {"url": PUBLIC, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": PUBLIC + "rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        CUSTOM]  # the custom binding's URL names the worker's path, and stays as it was
    assert unguarded_interfaces(served) == {"GRPC": 1, "other": 1}


def test_lower_case_guarded_bindings_are_rewritten_not_dropped() -> None:
    card = {**V10, "supportedInterfaces": [
        {"url": "http://localhost:8080/a2a/tock/", "protocolBinding": "jsonrpc", "protocolVersion": "1.0"}]}
    assert rewrite(card)["supportedInterfaces"][0]["url"] == PUBLIC


def test_v03_unguarded_additional_interfaces_are_dropped() -> None:
    card = {**V03, "additionalInterfaces": [
        {"url": "worker-a.internal:50051", "transport": "GRPC"},
        {"url": "http://localhost:8080/a2a/tock/rest", "transport": "HTTP+JSON"},
        {"url": "http://localhost:8080/a2a/tock/"}]}  # no transport: nothing the gateway guards
    served = rewrite(card)
    assert served["additionalInterfaces"] == [{"url": PUBLIC + "rest", "transport": "HTTP+JSON"}]
    assert served["url"] == PUBLIC


def test_v03_grpc_main_interface_is_replaced_by_the_first_guarded_additional_one() -> None:
    card = {**V03, "url": "worker-a.internal:50051", "preferredTransport": "GRPC",
            "additionalInterfaces": [{"url": "worker-a.internal:50051", "transport": "GRPC"},
                                     {"url": "http://localhost:8080/a2a/tock/rest", "transport": "HTTP+JSON"},
                                     {"url": "http://localhost:8080/a2a/tock/", "transport": "JSONRPC"}]}
    served = rewrite(card)
    assert (served["url"], served["preferredTransport"]) == (PUBLIC + "rest", "HTTP+JSON")
    assert served["additionalInterfaces"] == [{"url": PUBLIC + "rest", "transport": "HTTP+JSON"},
                                              {"url": PUBLIC, "transport": "JSONRPC"}]
    kept = rewrite(card, keep_unguarded=True)
    assert (kept["url"], kept["preferredTransport"]) == ("worker-a.internal:50051", "GRPC")
    assert unguarded_interfaces(kept) == {"GRPC": 1}  # named twice, one interface


def test_hybrid_card_grpc_main_interface_falls_back_to_a_legacy_supported_interface() -> None:
    """The SDK's hybrid card, docs/protocol.md §4.3: v0.3 members from the first 0.x interface."""
    card = {**V10, "supportedInterfaces": [
        {"url": "http://localhost:8080/a2a/tock/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "worker-a.internal:50051", "protocolBinding": "GRPC", "protocolVersion": "0.3"},
        {"url": "http://localhost:8080/a2a/tock/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}],
        "url": "worker-a.internal:50051", "preferredTransport": "GRPC", "protocolVersion": "0.3"}
    served = rewrite(card)
    assert (served["url"], served["preferredTransport"]) == (PUBLIC + "v03", "JSONRPC")
    assert [i["url"] for i in served["supportedInterfaces"]] == [PUBLIC, PUBLIC + "v03"]


def test_a_v10_interface_never_stands_in_for_the_v03_main_one() -> None:
    card = {**V10, "url": "worker-a.internal:50051", "preferredTransport": "GRPC",
            "protocolVersion": "0.3"}
    served = rewrite(card)
    assert (served["url"], served["preferredTransport"]) == ("worker-a.internal:50051", "GRPC")
    assert unguarded_interfaces(served) == {"GRPC": 1}


def test_nothing_guarded_left_keeps_the_card_valid_and_counted() -> None:
    grpc_only = {**V10, "supportedInterfaces": [GRPC]}
    served = rewrite(grpc_only)
    assert card_problem(served) is None
    assert served["supportedInterfaces"] == [GRPC]
    assert unguarded_interfaces(served) == {"GRPC": 1}
    v03_grpc = {**V03, "url": "worker-a.internal:50051", "preferredTransport": "GRPC",
                "additionalInterfaces": []}
    served03 = rewrite(v03_grpc)
    assert card_problem(served03) is None and served03["url"] == "worker-a.internal:50051"


def test_absent_preferred_transport_means_jsonrpc() -> None:
    card = {k: v for k, v in V03.items() if k != "preferredTransport"}
    assert rewrite(card)["url"] == PUBLIC
    assert unguarded_interfaces(card) == {}


def test_drop_unguarded_leaves_urls_as_written() -> None:
    card = {**V10, "supportedInterfaces": [GRPC, *V10["supportedInterfaces"]]}
    assert drop_unguarded(card)["supportedInterfaces"] == V10["supportedInterfaces"]


def test_rewrite_is_pure_and_deterministic() -> None:
    card = {**V10, "supportedInterfaces": [GRPC, *V10["supportedInterfaces"]], "signatures": [SIG]}
    before = copy.deepcopy(card)
    first, second = rewrite(card), rewrite(card)
    assert first == second and card == before
    assert {k: v for k, v in first.items() if k not in ("supportedInterfaces", "signatures")} == \
        {k: v for k, v in card.items() if k not in ("supportedInterfaces", "signatures")}


# ------------------------------------------------------------------------------ JSON-RPC paths

def test_jsonrpc_paths_are_the_advertised_json_rpc_paths_below_the_upstream() -> None:
    card = {**V10, "supportedInterfaces": [
        *V10["supportedInterfaces"],
        {"url": "http://pod-7:9000/a2a/tock/a2a/jsonrpc/", "protocolBinding": "jsonrpc", "protocolVersion": "1.0"},
        {"url": "http://pod-7:9000/elsewhere", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        GRPC]}
    assert jsonrpc_paths(card, UPSTREAM) == {"", "/a2a/jsonrpc", "/elsewhere"}
    assert jsonrpc_paths(V03, UPSTREAM) == {""}
    rest_only = {**V03, "preferredTransport": "HTTP+JSON", "additionalInterfaces": []}
    assert jsonrpc_paths(rest_only, UPSTREAM) == frozenset()


@pytest.mark.parametrize(("schemes", "headers"), [
    ({"k": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}}, {"x-api-key"}),
    ({"k": {"type": "apiKey", "in": "header", "name": "X-Key"}}, {"x-key"}),  # v0.3
    ({"k": {"apiKeySecurityScheme": {"location": "cookie", "name": "sid"}}}, {"cookie"}),
    ({"k": {"type": "apiKey", "in": "query", "name": "key"}}, set()),
    ({"b": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}, {"authorization"}),
    ({"o": {"oauth2SecurityScheme": {"flows": {}}}, "i": {"type": "openIdConnect", "openIdConnectUrl": "u"}},
     {"authorization"}),
    ({"m": {"mtlsSecurityScheme": {}}, "t": {"type": "mutualTLS"}}, set()),
    ({"x": "junk", "y": {"a": {}, "b": {}}, "z": {"apiKeySecurityScheme": "junk"}}, set()),
    ("junk", set()),
])
def test_credential_headers_are_where_the_card_s_schemes_send_credentials(schemes: Any, headers: set[str]) -> None:
    assert credential_headers({"securitySchemes": schemes}) == headers
    assert credential_headers({}) == frozenset()
