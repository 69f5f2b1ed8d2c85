"""Signed Agent Cards with the genuine SDKs on both sides (docs/protocol.md §4.5): workers whose
card is signed with their SDK's own signer — @a2a-js/sdk 1.3 (``worker13.mjs --sign-jwk``) and
a2a-sdk 1.3 (the demo worker, its card signed with ``create_agent_card_signer``) — behind a
gateway that verifies them and signs its own card; a2a-sdk 1.3 and @a2a-js/sdk 1.3 clients with
their signature verifiers on (given the gateway's JWKS) accept the gateway's card, and every
call they make goes through the gateway. Byte for byte, the gateway's canonical form of a card is
@a2a-js/sdk 1.3's ``canonicalizeAgentCard`` (run in node, ``peers/cardsig13.mjs``)."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.utils.signing import create_agent_card_signer
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from demo.worker import build_worker_app
from gateway.a2a.card import rewrite_card
from gateway.a2a.card_bridge import served_card
from gateway.a2a.card_signing import signing_inputs
from gateway.app import build_app
from gateway.config import JWKS_PATH, parse_config
from tests.a2a.test_card_bridge import FULL_V03, FULL_V10
from tests.a2a.test_card_signing import CARDS
from tests.support.card_keys import KeyPair, make_key, sdk_verify, write_jwks
from tests.e2e.conftest import MetricsScrape
from tests.support.gateway import serve_gateway
from tests.support.peers import PEERS_DIR, _require, js_worker, run_peer
from tests.support.servers import RunningServer, serve_in_thread

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CARD_PATH = "/.well-known/agent-card.json"


@dataclass
class Stack:
    traffic: RunningServer
    admin: RunningServer
    gateway_key: KeyPair
    wrong_jwks_url: str

    def card_url(self, mount: str) -> str:
        return f"{self.traffic.url}/{mount}{CARD_PATH}"

    def jwks_url(self, mount: str) -> str:
        return f"{self.traffic.url}/{mount}{JWKS_PATH}"

    async def scrape(self) -> MetricsScrape:
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
            resp = await http.get(self.admin.url_for("/metrics"))
        resp.raise_for_status()
        return MetricsScrape(resp.text)


def py_signed_worker(key: KeyPair) -> Any:
    """The a2a-sdk 1.3 demo worker with its card signed by the SDK's own signer (the card
    object its routes serve, signed in place before it serves)."""
    app = build_worker_app("http://127.0.0.1:1/")
    create_agent_card_signer(key.private, {"alg": key.alg, "kid": key.kid, "typ": "JOSE"})(app.state.agent_card)  # type: ignore[arg-type]
    assert len(app.state.agent_card.signatures) == 1
    return app


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    keys_dir: Path = tmp_path_factory.mktemp("card-keys")
    gateway_key = make_key(keys_dir, "gw-1", "ec")
    js_key, py_key = make_key(keys_dir, "js-worker", "ec"), make_key(keys_dir, "py-worker", "ed25519")
    (keys_dir / "js.jwk").write_text(json.dumps(js_key.private_jwk()))
    stranger = make_key(tmp_path_factory.mktemp("stranger"), "gw-1", "ec")  # the gateway's kid, another key
    wrong = Starlette(routes=[Route("/jwks.json", lambda _: JSONResponse({"keys": [stranger.jwk()]}))])
    with ExitStack() as stack:
        js_base = stack.enter_context(js_worker(sign_jwk=keys_dir / "js.jwk"))
        py = stack.enter_context(serve_in_thread(py_signed_worker(py_key), name="signed-py-worker"))
        wrong_server = stack.enter_context(serve_in_thread(wrong, name="wrong-jwks"))
        config = parse_config({
            "listen": {"host": "127.0.0.1", "port": 0},
            "upstreams": [
                {"name": "js", "url": js_base + "/", "prefix": "/js", "card": {"trust": {
                    "jwks_file": str(write_jwks(keys_dir / "js.jwks", js_key)), "signatures": "required"}}},
                {"name": "py", "url": py.url + "/", "prefix": "/py", "card": {"trust": {
                    "keys": [{"kid": py_key.kid, "public_key_file": str(py_key.public_pem)}],
                    "signatures": "required"}}}],
            "ledger": {"url": "memory"},
            "card": {"signing": {"key_file": str(gateway_key.private_pem), "kid": gateway_key.kid}},
        })
        traffic, admin = stack.enter_context(serve_gateway(build_app(config, registry=CollectorRegistry()),
                                                           name="signing-gateway"))
        yield Stack(traffic, admin, gateway_key, wrong_server.url + "/jwks.json")


@pytest.mark.parametrize("mount", ["js", "py"])
@pytest.mark.parametrize("peer", ["py13", "js13"])
async def test_sdk_clients_verifying_signatures_accept_the_gateways_card_and_stay_on_it(
        stack: Stack, peer: str, mount: str) -> None:
    before = await stack.scrape()
    run = await run_peer(peer, stack.card_url(mount), [{"op": "send", "text": "signed"}, {"op": "get"}],
                         verify_jwks=stack.jwks_url(mount))
    where = run.transcript()
    assert run.done and run.returncode == 0 and not run.of("card_refused"), where
    assert set(run.client["verified"]["kids"]) == {"gw-1"}, where  # the SDK verifier asked for the gateway key
    assert run.events(0)[-1]["state"] == "TASK_STATE_COMPLETED" and run.events(1), where
    base = f"{stack.traffic.url}/{mount}/"
    calls = [w for w in run.of("wire") if w.get("index") is not None]
    assert len(calls) == 2 and all(w["url"].startswith(base) for w in calls), where  # nothing around it
    after = await stack.scrape()
    counted = sum(after.value("a2a_gateway_requests_total", upstream=mount, method=m)
                  - before.value("a2a_gateway_requests_total", upstream=mount, method=m)
                  for m in ("SendMessage", "GetTask"))
    assert counted == 2
    assert after.value("a2a_gateway_card_worker_signature", upstream=mount, signature="verified") == 1


@pytest.mark.parametrize("peer", ["py13", "js13"])
async def test_a_verifier_given_other_keys_refuses_the_card_and_calls_nothing(stack: Stack, peer: str) -> None:
    """The verifiers really check: a JWKS whose ``gw-1`` is another key refuses the card."""
    run = await run_peer(peer, stack.card_url("js"), [{"op": "send", "text": "never"}],
                         verify_jwks=stack.wrong_jwks_url)
    assert run.of("card_refused") and not run.of("client") and not run.of("step"), run.transcript()


def js_sig(request: dict[str, Any]) -> dict[str, Any]:
    """@a2a-js/sdk 1.3's own canonicalizer, verifier and signer on ``request`` (cardsig13.mjs)."""
    node = _require("node")
    done = subprocess.run([str(node), str(PEERS_DIR / "cardsig13.mjs")], input=json.dumps(request),
                          capture_output=True, text=True, timeout=60, cwd=str(PEERS_DIR), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


async def test_byte_for_byte_the_gateways_canonical_form_is_the_js_sdks(stack: Stack) -> None:
    cards: dict[str, Any] = {}
    for name, card in {**CARDS, "full-v10": FULL_V10, "full-v03": FULL_V03}.items():
        cards[name] = card
        rewritten = rewrite_card(card, upstream_url="http://localhost:8080/a2a/tock/", public_base="https://gw/x/")
        cards[name + "-served"] = served_card(rewritten, bridge=True)
    async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
        for mount in ("js", "py"):
            cards[f"gateway-{mount}"] = (await http.get(stack.card_url(mount))).json()
        jwks = (await http.get(stack.jwks_url("js"))).json()
    out = js_sig({"cards": cards, "jwks": jwks})
    for name, card in cards.items():
        assert out["canonical"][name].encode() == signing_inputs(card)[0], name
    for mount in ("js", "py"):
        assert out["verified"][f"gateway-{mount}"] is True  # the JS SDK's verifier, the gateway's JWKS
        sdk_verify(cards[f"gateway-{mount}"], jwks)  # and a2a-sdk 1.3's
        tampered = {**cards[f"gateway-{mount}"], "name": "changed"}
        assert js_sig({"cards": {"t": tampered}, "jwks": jwks})["verified"]["t"] != True  # noqa: E712


async def test_a_card_signed_by_the_js_sdk_verifies_with_the_gateways_reading(tmp_path: Path) -> None:
    """The other direction: what @a2a-js/sdk 1.3's signer signs is the bytes the gateway
    verifies a worker's signature over, for every card of the corpus."""
    from gateway.a2a.card_signing import verification_input
    from gateway.proxy.signing import _b64  # noqa: PLC2701
    import jwt

    key = make_key(tmp_path, "k-js", "ec")
    cards = {name: copy.deepcopy(card) for name, card in {**CARDS, "full-v10": FULL_V10}.items()}
    signed = js_sig({"cards": cards, "sign": {name: key.private_jwk() for name in cards}})["signed"]
    for name, card in signed.items():
        sig = card["signatures"][-1]
        token = f"{sig['protected']}.{_b64(verification_input(card))}.{sig['signature']}"
        jwt.api_jws.PyJWS().decode(token, key.private.public_key(), algorithms=["ES256"])  # raises if not


def test_during_a_rotation_the_js_sdk_verifies_with_the_old_jwks_and_the_new(tmp_path: Path) -> None:
    """The rotation rule with @a2a-js/sdk 1.3's verifier: the card carries a signature of each
    key, so a client holding the JWKS from before the rotation (the old key only) and one holding
    the new (both) accept it; without the old key's signature the old JWKS no longer does."""
    from gateway.config import CardSigningConfig
    from gateway.proxy.signing import CardSigner

    new, old = make_key(tmp_path, "gw-new", "ec"), make_key(tmp_path, "gw-old", "ed25519")
    card = served_card(rewrite_card(FULL_V10, upstream_url="http://w/", public_base="https://gw/"), bridge=True)

    def signer(sign_old: bool) -> CardSigner:
        return CardSigner(CardSigningConfig(key_file=str(new.private_pem), kid=new.kid, previous={
            "key_file": str(old.private_pem), "kid": old.kid, "sign": sign_old}))

    during, after = signer(True), signer(False)
    old_jwks, new_jwks = {"keys": [old.jwk()]}, json.loads(during.jwks_body)
    cards = {"during": during.sign(card, "https://gw/jwks"), "after": after.sign(card, "https://gw/jwks")}
    assert [k["kid"] for k in new_jwks["keys"]] == ["gw-new", "gw-old"]
    with_old = js_sig({"cards": cards, "jwks": old_jwks})["verified"]
    assert with_old["during"] is True and with_old["after"] is not True
    assert js_sig({"cards": cards, "jwks": new_jwks})["verified"] == {"during": True, "after": True}
