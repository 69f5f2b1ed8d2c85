"""A worker whose card sends credentials in another header than ``callers.header`` is warned
about at the card fetch (docs/callers.md §2.2): its clients carry no ``callers.header``, so
they would all be the one caller ``anonymous`` and see each other's local answers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cards import TOCK_CARD, TOCK_V03

API_KEY_V10 = {"apiKey": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}}
API_KEY_V03 = {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}
BEARER_V10 = {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}


@pytest.mark.parametrize("card", [{**TOCK_CARD, "securitySchemes": API_KEY_V10},
                                  {**TOCK_V03, "securitySchemes": API_KEY_V03}], ids=["v10", "v03"])
def test_an_api_key_header_the_gateway_does_not_read_is_warned_about(make_harness: Any, gateway_warnings: Any,
                                                                      card: dict[str, Any]) -> None:
    make_harness(card=card, upstream_path="/a2a/tock/")
    [warning] = gateway_warnings("caller_identity_not_in_card")
    assert (warning.upstream, warning.header, warning.card_headers) == (  # type: ignore[attr-defined]
        "worker", "authorization", ["x-api-key"])
    assert "callers.header" in warning.hint  # type: ignore[attr-defined]


@pytest.mark.parametrize(("schemes", "overrides"), [
    (API_KEY_V10, {"callers": {"header": "X-API-Key"}}),   # the gateway reads the card's header
    (BEARER_V10, {}),                                       # Authorization, the default
    ({**API_KEY_V10, **BEARER_V10}, {}),                    # one of the card's headers
    (API_KEY_V10, {"callers": {"enabled": False}}),         # callers not told apart: nothing to warn of
    ({}, {}),                                               # no security schemes
], ids=["header-set", "bearer", "either", "callers-off", "none"])
def test_no_warning_when_the_gateway_reads_a_header_the_card_names(make_harness: Any, gateway_warnings: Any,
                                                                   schemes: dict[str, Any],
                                                                   overrides: dict[str, Any]) -> None:
    h = make_harness(card={**TOCK_CARD, "securitySchemes": schemes}, upstream_path="/a2a/tock/", **overrides)
    assert h.metric("a2a_gateway_card_fetches_total", outcome="fresh") >= 1  # the card was read
    assert gateway_warnings("caller_identity_not_in_card") == []
