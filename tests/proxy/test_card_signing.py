"""Signed Agent Cards through the real gateway (docs/protocol.md §4.5): a worker's signed card is
verified against the keys the operator trusts, rewritten and signed again with the gateway's
own key; a card whose signatures do not hold is invalid. The worker signatures are made by
a2a-sdk 1.3's own signer, the gateway's are checked by a2a-sdk 1.3's own verifier."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from a2a.utils.signing import InvalidSignaturesError

from gateway.a2a.card_signing import protected_header, signing_inputs
from gateway.app import build_app
from gateway.config import JWKS_PATH, parse_config
from gateway.errors import ConfigError
from tests.proxy.conftest import Harness
from tests.support.card_keys import KeyPair, make_key, sdk_sign, sdk_verify, write_jwks
from tests.support.cards import TOCK_CARD
from tests.support.scripted_worker import default_card

V1 = {"A2A-Version": "1.0"}
CARD_PATH = "/.well-known/agent-card.json"


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, KeyPair]:
    """The gateway's key, the one being retired, the worker's, and a stranger's."""
    return {"gateway": make_key(tmp_path, "gw-2", "ec"), "old": make_key(tmp_path, "gw-1", "ed25519"),
            "worker": make_key(tmp_path, "worker-1", "ec"), "stranger": make_key(tmp_path, "worker-1x", "rsa")}


def signing(key: KeyPair, **more: Any) -> dict[str, Any]:
    return {"gateway_card": {"signing": {"key_file": str(key.private_pem), "kid": key.kid, **more}}}


def send(h: Harness, req_id: str) -> Any:
    message = {"messageId": f"m-{req_id}", "role": "ROLE_USER", "parts": [{"text": "go"}]}
    return h.rpc({"jsonrpc": "2.0", "id": req_id, "method": "SendMessage", "params": {"message": message}},
                 headers=V1)


def served(h: Harness, prefix: str = "") -> tuple[Any, dict[str, Any]]:
    r = h.http.get(h.gateway.url + prefix + CARD_PATH, headers=V1)
    assert r.status_code == 200, r.text
    return r, r.json()


def gateway_jwks(h: Harness, prefix: str = "") -> dict[str, Any]:
    r = h.http.get(h.gateway.url + prefix + JWKS_PATH)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    return r.json()


def headers_of(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [protected_header(s) or {} for s in card["signatures"]]


def admitted(h: Harness) -> None:
    """A new task goes through to the worker."""
    h.worker.on("SendMessage", json_result={"task": {"id": "t-1", "contextId": "c",
                                                      "status": {"state": "TASK_STATE_WORKING"}}})
    assert send(h, "new").json()["result"]["task"]["id"] == "t-1"
    assert [r.method for r in h.rpc_calls()] == ["SendMessage"]


def refused_as_invalid(h: Harness, gateway_warnings: Any, cause: str) -> None:
    """The card is invalid for ``cause``: a new task gets the card-invalid answer and nothing
    reaches the worker; counted, logged, shown by the readiness status."""
    r = send(h, "new")
    assert r.status_code == 503 and r.json()["error"]["code"] == -32603
    assert f"is invalid ({cause})" in r.json()["error"]["message"]
    assert h.rpc_calls() == []
    assert h.metric("a2a_gateway_card_fetches_total", outcome="invalid") >= 1
    assert h.metric("a2a_gateway_card_signature_checks_total", result=cause) >= 1
    assert h.metric("a2a_gateway_card_worker_signature", upstream="worker", signature="invalid") == 1
    warned = gateway_warnings("card_invalid")
    assert warned and warned[0].cause == cause and warned[0].reason.startswith(f"signature {cause}:")
    status = h.runtime.card_status()["worker"]
    assert status["card"] == "invalid" and status["admitting_new_tasks"] is False
    assert h.http.get(h.gateway.url + CARD_PATH).status_code == 502  # no card is served


# ------------------------------------------------------------------------------ the gateway signs


def test_an_unsigned_worker_card_is_served_signed_and_verifies_with_the_gateways_jwks(
        make_harness: Any, keys: dict[str, KeyPair]) -> None:
    h = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/", upstream={"prefix": "/a2a/tick"},
                     public={"url": "https://gw.example.net"}, **signing(keys["gateway"]))
    r, card = served(h, "/a2a/tick")
    assert {i["url"] for i in card["supportedInterfaces"]} == {"https://gw.example.net/a2a/tick/",
                                                              "https://gw.example.net/a2a/tick/rest"}
    [header] = headers_of(card)
    assert header == {"alg": "ES256", "kid": "gw-2", "typ": "JOSE",
                      "jku": "https://gw.example.net/a2a/tick" + JWKS_PATH}
    jwks = gateway_jwks(h, "/a2a/tick")
    assert [k["kid"] for k in jwks["keys"]] == ["gw-2"] and "d" not in jwks["keys"][0]  # public only
    sdk_verify(card, jwks)  # a2a-sdk 1.3's verifier, on the card as its client reads it
    with pytest.raises(InvalidSignaturesError):  # and it does cover what a client follows
        sdk_verify({**card, "supportedInterfaces": TOCK_CARD["supportedInterfaces"]}, jwks)
    assert h.metric("a2a_gateway_card_worker_signature", upstream="worker", signature="unsigned") == 1
    assert h.metric("a2a_gateway_card_signing_key_info", kid="gw-2", algorithm="ES256", role="current") == 1
    assert h.metric("a2a_gateway_card_served_signed", upstream="worker", kid="gw-2") == 1
    assert h.metric("a2a_gateway_card_served_verbatim", upstream="worker") == 0


def test_the_etag_follows_the_signed_bytes_and_is_stable(make_harness: Any, keys: dict[str, KeyPair]) -> None:
    h = make_harness(card=TOCK_CARD, **signing(keys["gateway"]))
    first, _ = served(h)
    again, _ = served(h)
    assert first.content == again.content  # deterministic: the same bytes every time
    assert first.headers["etag"] == again.headers["etag"]
    import hashlib
    assert first.headers["etag"] == '"' + hashlib.sha256(first.content).hexdigest()[:32] + '"'
    not_modified = h.http.get(h.gateway.url + CARD_PATH, headers={"If-None-Match": first.headers["etag"]})
    assert not_modified.status_code == 304
    other_host, _ = h.http.get(h.gateway.url + CARD_PATH, headers={"Host": "gw.example.org"}), None
    assert other_host.headers["etag"] != first.headers["etag"]  # another base: other URLs, other jku
    jwks = h.http.get(h.gateway.url + JWKS_PATH)
    assert h.http.get(h.gateway.url + JWKS_PATH, headers={"If-None-Match": jwks.headers["etag"]}).status_code == 304


def test_sign_unsigned_false_serves_an_unsigned_card_unsigned(make_harness: Any, keys: dict[str, KeyPair]) -> None:
    h = make_harness(card={**TOCK_CARD, "signatures": []}, **signing(keys["gateway"], sign_unsigned=False))
    _, card = served(h)
    assert card["signatures"] == []
    assert h.metric("a2a_gateway_card_served_signed", upstream="worker", kid="gw-2") == 0


@pytest.mark.parametrize("kind", ["ec", "ed25519", "rsa"])
def test_every_key_kind_signs_a_card_the_sdk_verifies(make_harness: Any, tmp_path: Path, kind: str) -> None:
    key = make_key(tmp_path, f"gw-{kind}", kind)
    h = make_harness(card=default_card(), **signing(key))
    _, card = served(h)
    assert headers_of(card)[0]["alg"] == key.alg
    sdk_verify(card, gateway_jwks(h))


def test_a_mixed_card_read_two_ways_gets_one_signature_per_reading(make_harness: Any,
                                                                   keys: dict[str, KeyPair]) -> None:
    """A v1.0 OAuth2 flow with pkceRequired: the bridged card's v0.3 form lacks it, and a2a-sdk
    1.3's resolver reads the v0.3 form; @a2a-js/sdk reads the v1.0 one (docs/protocol.md §4.5)."""
    oauth = {"oauth2SecurityScheme": {"flows": {"authorizationCode": {
        "authorizationUrl": "https://idp/auth", "tokenUrl": "https://idp/token", "scopes": {"a": "all"},
        "pkceRequired": True}}}}
    card = {**TOCK_CARD, "securitySchemes": {"o": oauth}, "securityRequirements": [{"schemes": {"o": {"list": ["a"]}}}]}
    h = make_harness(card=card, upstream_path="/a2a/tock/", **signing(keys["gateway"]))
    _, served_card = served(h)
    assert "type" in served_card["securitySchemes"]["o"]  # the bridge added the v0.3 form
    assert len(served_card["signatures"]) == len(signing_inputs(served_card)) == 2
    sdk_verify(served_card, gateway_jwks(h))


# ------------------------------------------------------------------------------ worker signatures


def test_a_worker_card_signed_by_the_sdk_is_verified_and_signed_again(make_harness: Any, keys: dict[str, KeyPair],
                                                                      tmp_path: Path) -> None:
    signed = sdk_sign(default_card(), keys["worker"])
    trust = {"jwks_file": str(write_jwks(tmp_path / "worker.jwks", keys["worker"]))}
    h = make_harness(card=signed, upstream={"card": {"trust": trust}}, **signing(keys["gateway"]))
    _, card = served(h)
    assert [s["kid"] for s in headers_of(card)] == ["gw-2"]  # the worker's signature is replaced
    assert card["supportedInterfaces"][0]["url"] == h.gateway.url + "/"
    sdk_verify(card, gateway_jwks(h))
    assert h.metric("a2a_gateway_card_signature_checks_total", result="verified") == 1
    assert h.metric("a2a_gateway_card_worker_signature", upstream="worker", signature="verified") == 1
    admitted(h)


def test_a_tampered_member_makes_the_card_invalid(make_harness: Any, keys: dict[str, KeyPair], tmp_path: Path,
                                                  gateway_warnings: Any) -> None:
    tampered = {**sdk_sign(default_card(), keys["worker"]), "description": "changed after signing"}
    trust = {"jwks_file": str(write_jwks(tmp_path / "worker.jwks", keys["worker"]))}
    h = make_harness(card=tampered, upstream={"card": {"trust": trust}}, **signing(keys["gateway"]))
    refused_as_invalid(h, gateway_warnings, "bad_signature")


def test_a_signature_by_a_wrong_key_makes_the_card_invalid(make_harness: Any, keys: dict[str, KeyPair],
                                                           tmp_path: Path, gateway_warnings: Any) -> None:
    forged = sdk_sign(default_card(), keys["stranger"], kid="worker-1")  # the trusted kid, another key
    trust = {"keys": [{"kid": "worker-1", "public_key_file": str(keys["worker"].public_pem)}]}
    h = make_harness(card=forged, upstream={"card": {"trust": trust}}, **signing(keys["gateway"]))
    refused_as_invalid(h, gateway_warnings, "bad_signature")


def test_an_unknown_kid_makes_the_card_invalid(make_harness: Any, keys: dict[str, KeyPair], tmp_path: Path,
                                               gateway_warnings: Any) -> None:
    unknown = sdk_sign(default_card(), keys["stranger"])
    trust = {"jwks_file": str(write_jwks(tmp_path / "worker.jwks", keys["worker"]))}
    h = make_harness(card=unknown, upstream={"card": {"trust": trust}}, **signing(keys["gateway"]))
    refused_as_invalid(h, gateway_warnings, "unknown_kid")


def test_a_signed_card_without_trusted_keys_is_invalid(make_harness: Any, keys: dict[str, KeyPair],
                                                       gateway_warnings: Any) -> None:
    """With a gateway key, a signed card is verified: no key trusted, nothing verifies."""
    h = make_harness(card=sdk_sign(default_card(), keys["worker"]), **signing(keys["gateway"]))
    refused_as_invalid(h, gateway_warnings, "unknown_kid")


def test_the_last_good_card_stays_when_a_tampered_one_follows(make_harness: Any, keys: dict[str, KeyPair],
                                                              tmp_path: Path) -> None:
    good = sdk_sign(default_card(), keys["worker"])
    trust = {"jwks_file": str(write_jwks(tmp_path / "worker.jwks", keys["worker"]))}
    h = make_harness(card=None, upstream={"card": {"trust": trust}}, **signing(keys["gateway"]))
    h.worker.default_card = None
    h.worker.on_path("GET", CARD_PATH, json_body=good, times=1)
    h.runtime.cards["worker"].mark_stale()
    _, first = served(h)
    h.worker.on_path("GET", CARD_PATH, json_body={**good, "name": "evil"}, times=1)
    h.runtime.cards["worker"].mark_stale()
    _, second = served(h)
    assert second == first and second["name"] == "scripted"
    assert h.metric("a2a_gateway_card_signature_checks_total", result="bad_signature") == 1


def test_a_jwks_url_is_fetched_cached_and_its_failure_is_a_reason(make_harness: Any, keys: dict[str, KeyPair],
                                                                   gateway_warnings: Any) -> None:
    signed = sdk_sign(default_card(), keys["worker"])
    host = make_harness(card=None)  # a server for the JWKS
    host.worker.on_path("GET", "/keys.json", json_body={"keys": [keys["worker"].jwk()]}, times=None)
    trusting = make_harness(card=signed, upstream={"card": {"trust": {"jwks_url": _base(host) + "/keys.json"}}},
                            **signing(keys["gateway"]))
    served(trusting)
    assert trusting.metric("a2a_gateway_card_worker_signature", upstream="worker", signature="verified") == 1
    assert trusting.metric("a2a_gateway_card_jwks_fetches_total", outcome="ok") == 1
    trusting.worker.on_path("GET", CARD_PATH, json_body={**signed, "signatures": signed["signatures"]}, times=1)
    trusting.runtime.cards["worker"].mark_stale()
    served(trusting)  # the card fetched again is verified with the keys held (cache_seconds)
    assert trusting.metric("a2a_gateway_card_signature_checks_total", result="verified") == 2
    assert trusting.metric("a2a_gateway_card_jwks_fetches_total", outcome="ok") == 1
    failing = make_harness(card=signed, upstream={"card": {"trust": {"jwks_url": _base(host) + "/missing.json"}}},
                           **signing(keys["gateway"]))
    assert failing.metric("a2a_gateway_card_jwks_fetches_total", outcome="failed") == 1
    assert failing.metric("a2a_gateway_card_signature_checks_total", result="key_fetch_failed") == 1
    assert gateway_warnings("card_jwks_fetch_failed")


def _base(h: Harness) -> str:
    """The scripted worker's base URL behind harness ``h``."""
    return h.runtime.cards["worker"].upstream.url.rstrip("/")


@pytest.mark.parametrize("allowed", [True, False])
def test_a_jku_is_followed_only_when_allowed(make_harness: Any, keys: dict[str, KeyPair], allowed: bool) -> None:
    host = make_harness(card=None)
    host.worker.on_path("GET", "/jwks/worker.json", json_body={"keys": [keys["worker"].jwk()]}, times=None)
    jku = _base(host) + "/jwks/worker.json"
    signed = sdk_sign(default_card(), keys["worker"], jku=jku)
    trust = {"jku_allowed": [_base(host) + "/jwks/"] if allowed else []}
    h = make_harness(card=signed, upstream={"card": {"trust": trust}}, **signing(keys["gateway"]))
    state = "verified" if allowed else "invalid"
    assert h.metric("a2a_gateway_card_worker_signature", upstream="worker", signature=state) == 1
    fetched = [r for r in host.worker.requests if r.path == "/jwks/worker.json"]
    assert len(fetched) == (1 if allowed else 0)


def test_required_refuses_an_unsigned_card(make_harness: Any, keys: dict[str, KeyPair],
                                           gateway_warnings: Any) -> None:
    h = make_harness(card=default_card(), upstream={"card": {"trust": {"signatures": "required"}}})
    refused_as_invalid(h, gateway_warnings, "unsigned")


def test_optional_accepts_a_card_whose_signatures_fail_as_unsigned(make_harness: Any, keys: dict[str, KeyPair],
                                                                   gateway_warnings: Any) -> None:
    tampered = {**sdk_sign(default_card(), keys["worker"]), "description": "changed"}
    h = make_harness(card=tampered, upstream={"card": {"trust": {"signatures": "optional"}}},
                     **signing(keys["gateway"]))
    _, card = served(h)
    assert [s["kid"] for s in headers_of(card)] == ["gw-2"]  # sign_unsigned: signed as an unsigned one
    assert h.metric("a2a_gateway_card_worker_signature", upstream="worker", signature="unverified") == 1
    assert gateway_warnings("card_signature_unverified")
    admitted(h)


def test_trust_without_a_gateway_key_verifies_and_keeps_todays_serving(make_harness: Any,
                                                                       keys: dict[str, KeyPair],
                                                                       tmp_path: Path) -> None:
    signed = sdk_sign(default_card(), keys["worker"])
    trust = {"jwks_file": str(write_jwks(tmp_path / "worker.jwks", keys["worker"]))}
    h = make_harness(card=signed, upstream={"card": {"trust": trust}})
    _, card = served(h)
    assert card == signed  # card.signed: verbatim, as without verification
    assert h.metric("a2a_gateway_card_worker_signature", upstream="worker", signature="verified") == 1


# ------------------------------------------------------------------------------ rotation


def test_during_a_rotation_clients_holding_the_old_or_the_new_jwks_both_verify(
        make_harness: Any, keys: dict[str, KeyPair]) -> None:
    before = make_harness(card=TOCK_CARD, **signing(keys["old"]))
    old_jwks = gateway_jwks(before)
    during = make_harness(card=TOCK_CARD, **signing(keys["gateway"], previous={
        "key_file": str(keys["old"].private_pem), "kid": keys["old"].kid}))
    new_jwks = gateway_jwks(during)
    assert [k["kid"] for k in new_jwks["keys"]] == ["gw-2", "gw-1"]  # sign with the new, publish both
    _, card = served(during)
    assert [(h["kid"], h["alg"]) for h in headers_of(card)] == [("gw-2", "ES256"), ("gw-1", "EdDSA")]
    sdk_verify(card, old_jwks)
    sdk_verify(card, new_jwks)
    assert during.metric("a2a_gateway_card_signing_key_info", kid="gw-1", role="previous") == 1
    after = make_harness(card=TOCK_CARD, **signing(keys["gateway"], previous={
        "key_file": str(keys["old"].private_pem), "kid": keys["old"].kid, "sign": False}))
    _, card = served(after)
    assert [h["kid"] for h in headers_of(card)] == ["gw-2"]
    assert [k["kid"] for k in gateway_jwks(after)["keys"]] == ["gw-2", "gw-1"]
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(card, old_jwks)


# ------------------------------------------------------------------------------ extended card


def test_the_extended_card_is_signed_too(make_harness: Any, keys: dict[str, KeyPair], tmp_path: Path) -> None:
    card = default_card(extendedAgentCard=True)
    trust = {"jwks_file": str(write_jwks(tmp_path / "worker.jwks", keys["worker"]))}
    h = make_harness(card=sdk_sign(card, keys["worker"]), upstream={"card": {"trust": trust}},
                     **signing(keys["gateway"]))
    extended = sdk_sign({**card, "description": "for you"}, keys["worker"])
    h.worker.on("GetExtendedAgentCard", json_result=extended)
    r = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}, headers=V1)
    got = r.json()["result"]
    assert got["description"] == "for you" and got["supportedInterfaces"][0]["url"] == h.gateway.url + "/"
    assert [s["kid"] for s in headers_of(got)] == ["gw-2"]
    sdk_verify(got, gateway_jwks(h))
    h.worker.on("GetExtendedAgentCard", json_result={**extended, "description": "tampered"})
    r = h.rpc({"jsonrpc": "2.0", "id": 2, "method": "GetExtendedAgentCard", "params": {}}, headers=V1)
    assert "signatures" not in r.json()["result"]  # refused signatures: served rewritten, unsigned


# ------------------------------------------------------------------------------ config


def test_a_key_file_that_does_not_load_is_a_config_error_at_its_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    config = parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/"}],
                           "ledger": {"url": "memory"}, "card": {"signing": {"key_file": str(bad), "kid": "k"}}})
    with pytest.raises(ConfigError) as err:
        build_app(config)
    assert err.value.problems[0].startswith("card.signing.key_file: ")
    missing = parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/", "card": {"trust": {
        "jwks_file": str(tmp_path / "none.json")}}}], "ledger": {"url": "memory"}})
    with pytest.raises(ConfigError) as err:
        build_app(missing)
    assert err.value.problems[0].startswith("upstreams[0].card.trust.jwks_file: ")
    from gateway.cli import missing_on_this_host

    assert missing_on_this_host(missing) == [
        f"upstreams[0].card.trust.jwks_file: {tmp_path / 'none.json'}: not found on this host"]


def test_a_configured_algorithm_and_jku_are_what_the_signature_says(make_harness: Any, tmp_path: Path) -> None:
    key = make_key(tmp_path, "gw-pss", "rsa")
    key.alg = "PS256"
    h = make_harness(card=TOCK_CARD, **signing(key, algorithm="PS256", jku="https://keys.example.net/gw.json"))
    _, card = served(h)
    assert headers_of(card) == [{"alg": "PS256", "kid": "gw-pss", "typ": "JOSE", "jku": "https://keys.example.net/gw.json"}]
    jwks = gateway_jwks(h)
    assert jwks["keys"][0]["alg"] == "PS256" and jwks["keys"][0]["kty"] == "RSA"
    sdk_verify(card, jwks)


def test_an_algorithm_the_key_cannot_make_is_a_config_error(tmp_path: Path) -> None:
    key = make_key(tmp_path, "k", "ec")
    config = parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/"}], "ledger": {"url": "memory"},
                           "card": {"signing": {"key_file": str(key.private_pem), "kid": "k", "algorithm": "RS256"}}})
    with pytest.raises(ConfigError, match="card.signing.key_file: .*cannot sign RS256"):
        build_app(config)


def test_the_status_page_shows_the_worker_signature_and_the_signing_kid(make_harness: Any,
                                                                        keys: dict[str, KeyPair]) -> None:
    h = make_harness(card=default_card(), **signing(keys["gateway"]))
    page = h.http.get(h.admin.url + "/status").text
    assert '<td class="signature unsigned">unsigned</td>' in page
    assert '<td class="signing-kid">gw-2</td>' in page
    plain = make_harness(card=default_card())  # no verification, no key: as before
    page = plain.http.get(plain.admin.url + "/status").text
    assert '<td class="signature no">no</td>' in page and '<td class="signing-kid">-</td>' in page


def _b64json(text: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def test_the_signature_covers_the_canonical_bytes_of_the_served_card(make_harness: Any,
                                                                     keys: dict[str, KeyPair]) -> None:
    """The JWS payload is the JCS of the served card's v1.0 reading: rebuilt here from the
    served JSON and checked with PyJWT as a compact JWS."""
    import jwt

    h = make_harness(card=TOCK_CARD, **signing(keys["gateway"]))
    _, card = served(h)
    [payload] = signing_inputs(card)
    sig = card["signatures"][0]
    token = sig["protected"] + "." + base64.urlsafe_b64encode(payload).rstrip(b"=").decode() + "." + sig["signature"]
    key = jwt.PyJWK(gateway_jwks(h)["keys"][0])
    assert jwt.api_jws.PyJWS().decode(token, key.key, algorithms=["ES256"]) == payload
    assert _b64json(sig["protected"])["typ"] == "JOSE"
    assert copy.deepcopy(card) == card
