"""The bridged Agent Cards (gateway/a2a/card_bridge.py, docs/bridge.md §2) as the genuine SDKs
read them: a bridged v1.0 card parses strictly into a2a-sdk 1.3's protobuf ``AgentCard``
(``ParseDict`` refusing any unknown member), a bridged v0.3 card validates as a2a-sdk 0.3's
pydantic ``AgentCard`` (run in ``.venv-a2a03`` as its own process, installed on first use by
tests/support/peers.py) and survives its dump unchanged, and both agree with the SDK's own
v0.3 <-> v1.0 card conversions on every member the conversions share."""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any

import pytest
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.conversions import to_compat_agent_card, to_core_agent_card
from a2a.client import ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from google.protobuf.json_format import MessageToDict, ParseDict

from gateway.a2a.card_bridge import bridge_card, served_card
from gateway.a2a.version import ProtocolVersion
from tests.a2a.test_card_bridge import FULL_V03, FULL_V10, ROWS
from tests.support.cards import GRPC_IFACE, TOCK_CARD, TOCK_V03
from tests.support.peers import require_peer

V03, V10 = ProtocolVersion.V0_3, ProtocolVersion.V1_0

#: Runs in the a2a-sdk 0.3 venv: validates each card of a JSON list on stdin, prints the dumps.
VALIDATE03 = """
import json, sys
from a2a.types import AgentCard
cards = json.load(sys.stdin)
print(json.dumps([AgentCard.model_validate(c).model_dump(mode="json", by_alias=True, exclude_none=True)
                  for c in cards]))
"""

V10_SOURCES = [
    pytest.param(FULL_V10, id="full"), pytest.param(TOCK_CARD, id="tock"),
    pytest.param({**FULL_V10, "signatures": [{"protected": "p", "signature": "s"}],
                  "supportedInterfaces": [GRPC_IFACE, *FULL_V10["supportedInterfaces"]]}, id="lossy"),
    *(pytest.param({**TOCK_CARD, **v10}, id=f"row-{row}") for row, v10, _ in ROWS),
]
V03_SOURCES = [
    pytest.param(FULL_V03, id="full"), pytest.param(TOCK_V03, id="tock"),
    *(pytest.param({**TOCK_V03, **v03}, id=f"row-{row}") for row, _, v03 in ROWS),
]


@pytest.mark.parametrize("card", V03_SOURCES)
def test_bridged_v10_cards_parse_strictly_with_a2a_sdk_13(card: dict[str, Any]) -> None:
    bridged = bridge_card(card, V10)
    parsed = ParseDict(copy.deepcopy(bridged), AgentCard())  # no ignore_unknown_fields
    assert [i.protocol_version for i in parsed.supported_interfaces] == ["1.0"] * len(bridged["supportedInterfaces"])


@pytest.mark.slow
@pytest.mark.timeout(240)  # the first run may install .venv-a2a03
def test_bridged_v03_cards_validate_with_a2a_sdk_03() -> None:
    python = require_peer("py03")[0]
    cards = [bridge_card(p.values[0], V03) for p in V10_SOURCES]
    done = subprocess.run([python, "-c", VALIDATE03], input=json.dumps(cards), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    dumped = json.loads(done.stdout)
    for card, dump, param in zip(cards, dumped, V10_SOURCES, strict=True):
        assert dump == card, param.id  # nothing ignored, nothing added but what the card says


def _as_legacy(card: dict[str, Any]) -> dict[str, Any]:
    """``card`` with every interface of version 0.3 (the SDK converts only those to v0.3)."""
    return {**card, "supportedInterfaces": [{**i, "protocolVersion": "0.3"} for i in card["supportedInterfaces"]]}


def test_v03_form_agrees_with_the_sdks_conversion() -> None:
    """a2a-sdk 1.3's ``to_compat_agent_card`` of the same card gives the same v0.3 members, but
    for ``additionalInterfaces``: the SDK leaves the main interface out, the bridge lists it too
    (TYPES03: it SHOULD be listed), and for ``protocolVersion`` (the SDK copies ``"0.3"``)."""
    ours = bridge_card(FULL_V10, V03)
    sdk = to_compat_agent_card(ParseDict(_as_legacy(FULL_V10), AgentCard())).model_dump(
        mode="json", by_alias=True, exclude_none=True)
    assert sdk.pop("additionalInterfaces") == ours.pop("additionalInterfaces")[1:]
    assert (sdk.pop("protocolVersion"), ours.pop("protocolVersion")) == ("0.3", "0.3.0")
    assert sdk == ours


def test_v10_form_agrees_with_the_sdks_conversion() -> None:
    """a2a-sdk 1.3's ``to_core_agent_card`` of the same v0.3 card gives the same v1.0 members,
    but for the interfaces: the SDK keeps the card's 0.3 version on each (it describes the
    worker), the bridge says 1.0 (what the gateway speaks to the client) and lists each
    binding once. Both are compared as proto JSON (``MessageToDict`` leaves defaults out)."""
    ours = MessageToDict(ParseDict(bridge_card(FULL_V03, V10), AgentCard()))  # proto-JSON defaults
    core = to_core_agent_card(types_v03.AgentCard.model_validate(FULL_V03))
    sdk = MessageToDict(core)
    sdk_ifaces = sdk.pop("supportedInterfaces")
    assert {i["protocolVersion"] for i in sdk_ifaces} <= {"0.3", "0.3.0"}
    unique = list({(i["protocolBinding"], i["url"]): None for i in sdk_ifaces})
    assert unique == [(i["protocolBinding"], i["url"]) for i in ours.pop("supportedInterfaces")]
    assert sdk == ours


# --------------------------------------------------------------------------- the one served card

SERVED = [pytest.param(served_card(p.values[0], bridge=True), id=f"v1.0-{p.id}") for p in V10_SOURCES] + [
    pytest.param(served_card(p.values[0], bridge=True), id=f"v0.3-{p.id}") for p in V03_SOURCES]


@pytest.mark.parametrize("card", SERVED)
def test_the_served_card_reads_as_both_versions_with_a2a_sdk_13(card: dict[str, Any]) -> None:
    """a2a-sdk 1.3's resolver (``parse_agent_card``, as ``A2ACardResolver`` reads a card) keeps
    every interface of the served card, and its factory picks the ``"1.0"`` one of each
    binding (docs/bridge.md §2.2)."""
    parsed = parse_agent_card(copy.deepcopy(card))
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in parsed.supported_interfaces] == [
        (i["url"], i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]]
    for binding in {i["protocolBinding"] for i in card["supportedInterfaces"]} & {"JSONRPC", "HTTP+JSON"}:
        best = ClientFactory._find_best_interface(list(parsed.supported_interfaces), [binding])  # noqa: SLF001
        assert best is not None and best.protocol_version == "1.0", binding
    if "securitySchemes" in card:  # both forms in one scheme read as the v1.0 one
        assert set(MessageToDict(parsed).get("securitySchemes", {})) == set(card["securitySchemes"])


@pytest.mark.slow
@pytest.mark.timeout(240)  # the first run may install .venv-a2a03
def test_the_served_card_validates_with_a2a_sdk_03() -> None:
    """a2a-sdk 0.3's pydantic ``AgentCard`` takes the served card (the v1.0 members are ignored)
    and reads the v0.3 members as the card says them: the main interface at the gateway and
    every binding in ``additionalInterfaces``."""
    python = require_peer("py03")[0]
    cards = [p.values[0] for p in SERVED]
    done = subprocess.run([python, "-c", VALIDATE03], input=json.dumps(cards), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for card, dump, param in zip(cards, json.loads(done.stdout), SERVED, strict=True):
        v03 = ("url", "preferredTransport", "additionalInterfaces", "protocolVersion", "security")
        assert {k: dump.get(k) for k in v03} == {k: card.get(k) for k in v03}, param.id
