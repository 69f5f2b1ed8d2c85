"""Agent Card authority through the real gateway: the card governs admission of new tasks, task
events govern disposition, and freshness is checked (forced GetTask) only when needed.
docs/field-cases.md F08 (ii), F10, F11."""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill

from gateway.a2a.card import HEARTBEAT_EXTENSION
from tests.proxy.conftest import Harness, frames
from tests.support.cards import GRPC_IFACE, TOCK_CARD, TOCK_V03, WS_IFACE
from tests.support.scripted_worker import Event, Gate, default_card
from tests.support.servers import wait_until

V1 = {"A2A-Version": "1.0"}



def send(h: Harness, req_id: Any, *, task_id: str | None = None, method: str = "SendMessage",
         metadata: dict[str, Any] | None = None) -> Any:
    message: dict[str, Any] = {"messageId": f"m-{req_id}", "role": "ROLE_USER", "parts": [{"text": "go"}]}
    if task_id:
        message["taskId"] = task_id
    if metadata:
        message["metadata"] = metadata
    return h.rpc({"jsonrpc": "2.0", "id": req_id, "method": method, "params": {"message": message}},
                 headers=V1)


def working(h: Harness, tid: str) -> None:
    """Make the ledger hold ``tid`` as WORKING, observed now."""
    h.worker.on("GetTask", json_result={"id": tid, "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}})
    h.rpc({"jsonrpc": "2.0", "id": "setup", "method": "GetTask", "params": {"id": tid}}, headers=V1)


def card_gets(h: Harness, path: str = "/.well-known/agent-card.json") -> int:
    return len([r for r in h.worker.requests if r.path.endswith(path)])


# ------------------------------------------------------------------------------ F10, F11

@pytest.mark.parametrize("card", [TOCK_CARD, TOCK_V03], ids=["v1.0", "v0.3"])
@pytest.mark.parametrize("path", ["/.well-known/agent-card.json", "/.well-known/agent.json"])
@pytest.mark.parametrize("client", [{}, V1], ids=["no-header", "v1.0-header"])
def test_f10_card_urls_point_at_the_gateway_without_doubled_segments(make_harness: Any, card: Any, path: str,
                                                                     client: dict[str, str]) -> None:
    h = make_harness(upstream_path="/a2a/tock/", card=card, upstream={"prefix": "/a2a/tick"},
                     public={"url": "https://gw.example.net"})
    r = h.http.get(h.gateway.url + "/a2a/tick" + path, headers=client)
    served = r.json()
    assert r.status_code == 200
    # one card for every client, both versions' members (docs/bridge.md §2.2)
    rest = {"https://gw.example.net/a2a/tick/rest"} if "supportedInterfaces" in card else set()
    assert {i["url"] for i in served["supportedInterfaces"]} == {"https://gw.example.net/a2a/tick/", *rest}
    assert {i["protocolVersion"] for i in served["supportedInterfaces"]} == {"1.0", "0.3"}
    assert served["url"] == "https://gw.example.net/a2a/tick/"
    assert served["additionalInterfaces"][0]["url"] == "https://gw.example.net/a2a/tick/"
    untouched = {k: v for k, v in card.items() if k not in ("supportedInterfaces", "url", "additionalInterfaces")}
    assert {k: served[k] for k in untouched} == untouched


def own(served: dict[str, Any], version: str = "1.0") -> list[str]:
    """The URLs of the served card's interfaces of ``version``, in order."""
    return [i["url"] for i in served["supportedInterfaces"] if i["protocolVersion"] == version]


def test_f10_public_origin_comes_from_trusted_proxies_only(make_harness: Any) -> None:
    forwarded = {"X-Forwarded-Host": "gw.example.net", "X-Forwarded-Proto": "https"}
    untrusted = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/")
    url = untrusted.gateway.url
    served = untrusted.http.get(url + "/.well-known/agent-card.json", headers={**forwarded, **V1}).json()
    assert served["supportedInterfaces"][0]["url"] == url + "/"  # the Host the client used
    trusted = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/", public={"trusted_proxies": ["127.0.0.1"]})
    served = trusted.http.get(trusted.gateway.url + "/.well-known/agent-card.json", headers={**forwarded, **V1}).json()
    assert served["supportedInterfaces"][0]["url"] == "https://gw.example.net/"


def test_served_card_has_its_own_etag_and_answers_304(make_harness: Any) -> None:
    h = make_harness(card=TOCK_CARD)
    first = h.http.get(h.gateway.url + "/.well-known/agent-card.json")
    etag = first.headers["etag"]
    again = h.http.get(h.gateway.url + "/.well-known/agent-card.json", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert "max-age=" in first.headers["cache-control"]


def test_signed_card_is_served_verbatim_by_default_and_stripped_on_request(make_harness: Any) -> None:
    signed = {**TOCK_CARD, "signatures": [SIG]}
    h = make_harness(card=signed, upstream_path="/a2a/tock/")
    verbatim = h.http.get(h.gateway.url + "/.well-known/agent-card.json").json()
    assert verbatim == signed  # a rewritten body is never served with its old signature
    h2 = make_harness(card=signed, upstream_path="/a2a/tock/", upstream={"card": {"signed": "strip"}})
    stripped = h2.http.get(h2.gateway.url + "/.well-known/agent-card.json", headers=V1).json()
    assert "signatures" not in stripped
    assert stripped["supportedInterfaces"][0]["url"] == h2.gateway.url + "/"
    assert h2.metric("a2a_gateway_card_signatures_stripped_total") == 1
    assert h2.metric("a2a_gateway_card_served_verbatim", upstream="worker") == 0


# ------------------------------------------------------------------------------ docs/protocol.md §4.5

SIG = {"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln"}
CARD_PATH = "/.well-known/agent-card.json"


def sdk_urls(served: dict[str, Any]) -> list[tuple[str, str]]:
    """(url, binding) of every interface as a2a-sdk 1.3's client reads the card."""
    card = parse_agent_card(copy.deepcopy(served))
    return [(i.url, i.protocol_binding) for i in card.supported_interfaces]


def test_empty_signatures_list_is_an_unsigned_card_and_is_rewritten(make_harness: Any) -> None:
    js_card = {**TOCK_CARD, "signatures": []}  # what every @a2a-js/sdk 1.3 worker sends
    h = make_harness(card=js_card, upstream_path="/a2a/tock/", upstream={"prefix": "/a2a/tick"},
                     public={"url": "https://gw.example.net"})
    served = h.http.get(h.gateway.url + "/a2a/tick" + CARD_PATH, headers=V1).json()
    assert served["signatures"] == []
    assert own(served) == own(served, "0.3") == [
        "https://gw.example.net/a2a/tick/", "https://gw.example.net/a2a/tick/rest"]
    assert sdk_urls(served)[:2] == [("https://gw.example.net/a2a/tick/", "JSONRPC"),
                                    ("https://gw.example.net/a2a/tick/rest", "HTTP+JSON")]
    assert h.metric("a2a_gateway_card_signatures_stripped_total") == 0
    assert h.metric("a2a_gateway_card_served_verbatim", upstream="worker") == 0


def test_unguarded_v10_interfaces_are_dropped_by_default(make_harness: Any,
                                                         gateway_warnings: Any) -> None:
    card = {**TOCK_CARD, "supportedInterfaces": [GRPC_IFACE, *TOCK_CARD["supportedInterfaces"], WS_IFACE]}
    h = make_harness(card=card, upstream_path="/a2a/tock/", public={"url": "https://gw.example.net"})
    served = h.http.get(h.gateway.url + CARD_PATH, headers=V1).json()
    assert sdk_urls(served) == 2 * [("https://gw.example.net/", "JSONRPC"),
                                    ("https://gw.example.net/rest", "HTTP+JSON")]
    assert h.metric("a2a_gateway_card_unguarded_interfaces", upstream="worker") == 0
    assert gateway_warnings("card_unguarded_interfaces") == []


def test_unguarded_v10_interfaces_kept_on_request_are_untouched_warned_and_gauged(
        make_harness: Any, gateway_warnings: Any) -> None:
    card = {**TOCK_CARD, "supportedInterfaces": [*TOCK_CARD["supportedInterfaces"], GRPC_IFACE, WS_IFACE]}
    h = make_harness(card=None, public={"url": "https://gw.example.net"},
                     upstream={"card": {"unguarded_interfaces": "keep"}})
    h.worker.default_card = card
    cache = h.runtime.cards["worker"]
    for _ in range(3):  # revalidated each time; the card is the same
        cache.mark_stale()
        served = h.http.get(h.gateway.url + CARD_PATH, headers=V1).json()
    assert served["supportedInterfaces"][:4] == [  # the mount points at the worker's root
        {"url": "https://gw.example.net/a2a/tock/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "https://gw.example.net/a2a/tock/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        GRPC_IFACE, WS_IFACE]  # then the bridged v0.3 interfaces of the guarded bindings
    assert h.metric("a2a_gateway_card_unguarded_interfaces", upstream="worker", binding="GRPC") == 1
    assert h.metric("a2a_gateway_card_unguarded_interfaces", upstream="worker", binding="other") == 1
    assert h.metric("a2a_gateway_card_fetches_total", outcome="not_modified") >= 2
    [warning] = gateway_warnings("card_unguarded_interfaces")
    assert (warning.upstream, warning.bindings, warning.reason) == (  # type: ignore[attr-defined]
        "worker", ["GRPC", "other"], "keep")
    # the worker stops advertising gRPC: the gauge follows the new card
    h.worker.default_card = {**card, "supportedInterfaces": [*TOCK_CARD["supportedInterfaces"], WS_IFACE]}
    cache.mark_stale()
    h.http.get(h.gateway.url + CARD_PATH)
    assert h.metric("a2a_gateway_card_unguarded_interfaces", upstream="worker", binding="GRPC") == 0
    assert h.metric("a2a_gateway_card_unguarded_interfaces", upstream="worker", binding="other") == 1
    assert len(gateway_warnings("card_unguarded_interfaces")) == 2  # once per card


def test_keep_is_warned_at_start(make_harness: Any, gateway_warnings: Any) -> None:
    card = {**TOCK_CARD, "supportedInterfaces": [*TOCK_CARD["supportedInterfaces"], GRPC_IFACE]}
    h = make_harness(card=card, upstream={"card": {"unguarded_interfaces": "keep"}})
    [warning] = gateway_warnings("card_unguarded_interfaces")  # before any client asked
    assert (warning.upstream, warning.bindings) == ("worker", ["GRPC"])  # type: ignore[attr-defined]
    assert h.metric("a2a_gateway_card_unguarded_interfaces", binding="GRPC") == 1


def test_v03_grpc_main_interface_is_replaced_by_a_guarded_one(make_harness: Any) -> None:
    card = {**TOCK_V03, "url": "worker-a.internal:50051", "preferredTransport": "GRPC",
            "additionalInterfaces": [{"url": "worker-a.internal:50051", "transport": "GRPC"},
                                     {"url": "http://localhost:8080/a2a/tock/", "transport": "JSONRPC"}]}
    h = make_harness(card=card, upstream_path="/a2a/tock/", upstream={"prefix": "/a2a/tick"},
                     public={"url": "https://gw.example.net"})
    served = h.http.get(h.gateway.url + "/a2a/tick" + CARD_PATH).json()
    assert (served["url"], served["preferredTransport"]) == ("https://gw.example.net/a2a/tick/", "JSONRPC")
    assert served["additionalInterfaces"] == [{"url": "https://gw.example.net/a2a/tick/", "transport": "JSONRPC"}]
    assert sdk_urls(served) == [("https://gw.example.net/a2a/tick/", "JSONRPC")] * 2
    kept = make_harness(card=card, upstream_path="/a2a/tock/", upstream={
        "prefix": "/a2a/tick", "card": {"unguarded_interfaces": "keep"}})
    served = kept.http.get(kept.gateway.url + "/a2a/tick" + CARD_PATH).json()
    assert (served["url"], served["preferredTransport"]) == ("worker-a.internal:50051", "GRPC")
    assert kept.metric("a2a_gateway_card_unguarded_interfaces", binding="GRPC") == 1


def test_sdk_hybrid_card_with_grpc_first_advertises_only_the_gateway(make_harness: Any) -> None:
    """The card an a2a-sdk 1.3 worker serves when its first 0.x interface is gRPC
    (docs/protocol.md §4.3): the v0.3 members name the gRPC address."""
    worker_card = agent_card_to_dict(AgentCard(
        name="Tock", description="scheduler", version="1.2.0",
        supported_interfaces=[
            AgentInterface(url="worker-a.internal:50051", protocol_binding="GRPC", protocol_version="0.3"),
            AgentInterface(url="http://localhost:8080/a2a/tock/", protocol_binding="JSONRPC", protocol_version="0.3"),
            AgentInterface(url="http://localhost:8080/a2a/tock/", protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True), default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="echo", tags=["test"])]))
    assert (worker_card["url"], worker_card["preferredTransport"]) == ("worker-a.internal:50051", "GRPC")
    h = make_harness(card=worker_card, upstream_path="/a2a/tock/", public={"url": "https://gw.example.net"})
    served = h.http.get(h.gateway.url + CARD_PATH).json()
    assert (served["url"], served["preferredTransport"]) == ("https://gw.example.net/", "JSONRPC")
    assert sdk_urls(served) == [("https://gw.example.net/", "JSONRPC")] * 2
    assert served["additionalInterfaces"] == [{"transport": "JSONRPC", "url": "https://gw.example.net/"}]
    assert h.metric("a2a_gateway_card_unguarded_interfaces") == 0


def test_signed_card_served_verbatim_is_warned_once_per_card_and_gauged(
        make_harness: Any, gateway_warnings: Any) -> None:
    signed = {**TOCK_CARD, "signatures": [SIG]}
    h = make_harness(card=None)
    assert h.metric("a2a_gateway_card_served_verbatim", upstream="worker") == 0
    h.worker.default_card = signed
    cache = h.runtime.cards["worker"]
    for _ in range(3):  # revalidated each time; the card is the same
        cache.mark_stale()
        assert h.http.get(h.gateway.url + CARD_PATH).json() == signed
    assert h.metric("a2a_gateway_card_fetches_total", outcome="not_modified") >= 2
    assert h.metric("a2a_gateway_card_served_verbatim", upstream="worker") == 1
    [warning] = gateway_warnings("card_served_verbatim")
    assert warning.upstream == "worker"  # type: ignore[attr-defined]
    assert warning.urls == [i["url"] for i in TOCK_CARD["supportedInterfaces"]]  # type: ignore[attr-defined]
    h.worker.default_card = {**signed, "version": "1.3.0"}  # a new signed card: said again
    cache.mark_stale()
    h.http.get(h.gateway.url + CARD_PATH)
    assert len(gateway_warnings("card_served_verbatim")) == 2
    h.worker.default_card = TOCK_CARD  # no longer signed: rewritten, and the gauge drops
    cache.mark_stale()
    served = h.http.get(h.gateway.url + CARD_PATH, headers=V1).json()
    assert served["supportedInterfaces"][0]["url"] == h.gateway.url + "/a2a/tock/"
    assert h.metric("a2a_gateway_card_served_verbatim", upstream="worker") == 0
    assert len(gateway_warnings("card_served_verbatim")) == 2


def test_f11_card_addresses_are_never_routed_to_and_are_counted(make_harness: Any) -> None:
    card = {**TOCK_V03, "url": "http://[::]:8080/invoke", "additionalInterfaces": []}
    h = make_harness(card=card, upstream={"protocol_versions": ["0.3", "1.0"]})  # nothing bridged
    h.worker.on("SendMessage", json_result={"task": {"id": "t-11", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
    r = send(h, 1)
    assert r.json()["result"]["task"]["id"] == "t-11"  # the registered worker answered
    assert h.metric("a2a_gateway_card_local_urls_total") == 1


@pytest.mark.parametrize("body", [{"name": "broken"}, "not a card"], ids=["no-card", "string"])
def test_invalid_card_is_never_cached_and_the_last_good_one_stays(make_harness: Any, body: Any) -> None:
    h = make_harness(card=None)
    h.worker.default_card = None
    h.worker.on_path("GET", "/.well-known/agent-card.json", json_body=default_card(), times=1,
                     headers={"cache-control": "max-age=0"})
    h.runtime.cards["worker"].mark_stale()
    good = h.http.get(h.gateway.url + "/.well-known/agent-card.json").json()
    assert good["name"] == "scripted"
    h.worker.on_path("GET", "/.well-known/agent-card.json", json_body=body, times=1)
    h.runtime.cards["worker"].mark_stale()
    assert h.http.get(h.gateway.url + "/.well-known/agent-card.json").json() == good
    assert h.metric("a2a_gateway_card_fetches_total", outcome="invalid") == 1


# ------------------------------------------------------------------------------ admission

def test_new_task_refused_when_card_unreachable_existing_task_still_relayed(make_harness: Any) -> None:
    h = make_harness()
    working(h, "t-11")
    h.worker.default_card = None
    h.worker.on_path("GET", "/.well-known/agent-card.json", raw=(503, {}, b"down"), times=None)
    h.runtime.cards["worker"].mark_stale()
    refused = send(h, 1)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == -32603 and "agent card" in refused.json()["error"]["message"]
    assert h.worker.calls("SendMessage") == []
    assert h.metric("a2a_gateway_upstream_degraded", reason="card_unreachable") == 1
    served = h.http.get(h.gateway.url + "/.well-known/agent-card.json")
    assert served.status_code == 200 and served.json()["name"] == "scripted"  # last good card
    h.worker.on("GetTask", json_result={"id": "t-11", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}})
    h.worker.on("SendMessage", json_result={"task": {"id": "t-11", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}})
    r = send(h, 2, task_id="t-11")
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert h.metric("a2a_gateway_forced_get_total", reason="card_unreachable") == 1


def test_allow_stale_admits_new_tasks_against_the_last_good_card(make_harness: Any) -> None:
    h = make_harness(upstream={"card": {"on_unreachable": "allow_stale"}})
    h.worker.default_card = None
    h.worker.on_path("GET", "/.well-known/agent-card.json", raw=(503, {}, b"down"), times=None)
    h.runtime.cards["worker"].mark_stale()
    h.worker.on("SendMessage", json_result={"task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
    assert send(h, 1).json()["result"]["task"]["id"] == "t-1"


def test_capabilities_and_skills_govern_admission(make_harness: Any) -> None:
    card = default_card(streaming=False, pushNotifications=False)
    h = make_harness(card=card, upstream={"card": {"required_skill": "echo"}},
                     admission={"skill_metadata_key": "skill"})
    stream = send(h, 1, method="SendStreamingMessage")
    assert stream.json()["error"]["code"] == -32004
    push = h.rpc({"jsonrpc": "2.0", "id": 2, "method": "CreateTaskPushNotificationConfig",
                  "params": {"taskId": "t-1", "url": "https://hook.example/x"}}, headers=V1)
    assert push.json()["error"]["code"] == -32003
    skill = send(h, 3, metadata={"skill": "translate"})
    assert skill.json()["error"]["code"] == -32004 and "translate" in skill.json()["error"]["message"]
    assert h.rpc_calls() == []
    h.worker.on("SendMessage", json_result={"task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}, times=2)
    assert "result" in send(h, 4, metadata={"skill": "echo"}).json()
    # an existing task is never refused for card reasons
    assert "result" in send(h, 5, task_id="t-1", metadata={"skill": "translate"}).json()


def test_required_skill_missing_from_card(make_harness: Any) -> None:
    h = make_harness(upstream={"card": {"required_skill": "book-flight"}})
    r = send(h, 1)
    assert r.json()["error"]["code"] == -32004 and "book-flight" in r.json()["error"]["message"]


# ------------------------------------------------------------------------------ freshness

def test_no_forced_get_when_fresh_and_card_unchanged(h: Harness) -> None:
    working(h, "t-1")
    h.worker.on("SendMessage", json_result={"task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
    send(h, 1, task_id="t-1")
    assert len(h.worker.calls("GetTask")) == 1  # only the setup call: no wasted poll
    assert h.metric("a2a_gateway_forced_get_total") == 0


def test_changed_card_etag_forces_get_task_before_a_task_action(make_harness: Any) -> None:
    h = make_harness(card=None)
    working(h, "t-1")
    new_card = {**default_card(), "version": "2.0.0"}
    h.worker.default_card = new_card
    h.runtime.cards["worker"].mark_stale()
    h.worker.on("GetTask", json_result={"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_FAILED"}})
    r = send(h, 1, task_id="t-1")
    assert r.json()["error"]["code"] == -32004  # the worker rehydrated the task as failed
    assert h.worker.calls("SendMessage") == []
    assert h.metric("a2a_gateway_forced_get_total", reason="etag_changed") == 1
    assert h.divergences("stale_record") == 0  # working → failed: the task moved on (F22)


def test_heartbeat_gap_forces_get_task_then_forwards(make_harness: Any) -> None:
    h = make_harness(sweep={"enabled": False})  # the aged task is the client's to find, not the sweep's
    working(h, "t-1")
    ledger = h.runtime.ledger
    stored = h.on_gateway_loop(ledger.get("worker", "t-1"))
    aged = dataclasses.replace(stored.record, observed_at=time.time() - 3600)
    h.on_gateway_loop(ledger.put(aged, stored.version))
    h.worker.on("CancelTask", json_result={"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_CANCELED"}})
    r = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": "t-1"}}, headers=V1)
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert len(h.worker.calls("GetTask")) == 2
    assert h.metric("a2a_gateway_forced_get_total", reason="heartbeat_gap") == 1


def test_card_declared_heartbeat_interval_is_used(make_harness: Any) -> None:
    ext = {"uri": HEARTBEAT_EXTENSION, "params": {"intervalSeconds": 7200}}
    h = make_harness(card=default_card(extensions=[ext]))
    working(h, "t-1")
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", "t-1"))
    aged = dataclasses.replace(stored.record, observed_at=time.time() - 3600)
    h.on_gateway_loop(h.runtime.ledger.put(aged, stored.version))
    h.worker.on("SendMessage", json_result={"task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
    send(h, 1, task_id="t-1")
    assert h.metric("a2a_gateway_forced_get_total") == 0  # 1 h gap < the card's 2 h interval


def test_401_from_task_endpoint_revalidates_card_but_leaves_task_state(h: Harness) -> None:
    working(h, "t-1")
    before = card_gets(h)
    h.worker.on("GetTask", raw=(401, {"www-authenticate": "Bearer"}, b"no"))
    r = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}, headers=V1)
    assert r.status_code == 401
    send(h, 2)  # the next admission revalidates
    assert card_gets(h) == before + 1
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", "t-1"))
    assert stored.record.state.value == "TASK_STATE_WORKING"


# ------------------------------------------------------------------------------ F08 (ii)

def _cut_stream(h: Harness) -> None:
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_WORKING"}}}),
        Event(result={"statusUpdate": {"taskId": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_WORKING"}}}),
    ])


def test_f08ii_cut_stream_is_resumed_not_finished(h: Harness) -> None:
    _cut_stream(h)
    h.worker.on("GetTask", json_result={"id": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_WORKING"}})
    h.worker.on("SubscribeToTask", sse=[
        Event(result={"task": {"id": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_WORKING"}}}),
        Event(result={"statusUpdate": {"taskId": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_COMPLETED"}}}),
    ])
    _, raw = h.stream({"jsonrpc": "2.0", "id": 9, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}, headers=V1)
    got = [f["data"]["result"] for f in frames(raw) if isinstance(f["data"], dict)]
    assert [next(iter(g)) for g in got] == ["task", "statusUpdate", "statusUpdate"]
    assert got[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert h.worker.calls("SubscribeToTask")[0].params == {"id": "t-9"}
    assert h.metric("a2a_gateway_forced_get_total", reason="upstream_eof") == 1
    assert h.metric("a2a_gateway_stream_resubscribes_total", outcome="resubscribed") == 1
    assert h.metric("a2a_gateway_upstream_degraded", reason="stream_lost") == 0


def test_f08ii_cut_stream_of_a_finished_task_ends_with_its_snapshot(h: Harness) -> None:
    _cut_stream(h)
    h.worker.on("GetTask", json_result={"id": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_COMPLETED"}})
    _, raw = h.stream({"jsonrpc": "2.0", "id": 9, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}, headers=V1)
    got = [f["data"]["result"] for f in frames(raw) if isinstance(f["data"], dict)]
    assert got[-1] == {"task": {"id": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_COMPLETED"}}}
    assert h.worker.calls("SubscribeToTask") == []


def test_f08ii_resubscribe_attempts_are_bounded(make_harness: Any) -> None:
    h = make_harness(streams={"resubscribe_attempts": 2, "resubscribe_backoff_seconds": 0})
    _cut_stream(h)
    h.worker.on("GetTask", json_result={"id": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_WORKING"}}, times=None)
    h.worker.on("SubscribeToTask", json_error={"code": -32603, "message": "busy"}, times=None)
    _, raw = h.stream({"jsonrpc": "2.0", "id": 9, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}, headers=V1)
    last = frames(raw)[-1]
    assert last["event"] == "error" and last["data"]["error"]["code"] == -32603
    assert len(h.worker.calls("SubscribeToTask")) == 2
    assert h.metric("a2a_gateway_stream_resubscribes_total", outcome="gave_up") == 1


def test_gateway_sends_keepalive_comments_while_the_worker_is_silent(make_harness: Any) -> None:
    h = make_harness(streams={"keepalive_seconds": 0.05})
    gate = Gate()
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-k", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}),
        gate,
        Event(result={"statusUpdate": {"taskId": "t-k", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}}),
    ])
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}
    import orjson

    with h.http.stream("POST", h.gateway.url + "/", content=orjson.dumps(body),
                       headers={"content-type": "application/json", **V1}) as r:
        raw = b""
        for chunk in r.iter_raw():
            raw += chunk
            if b": keepalive\n\n" in raw and not gate.is_set():
                gate.release()
    assert raw.index(b": keepalive") < raw.index(b"TASK_STATE_COMPLETED")
    wait_until(lambda: gate.is_set())


def test_worker_that_starts_after_the_gateway_is_admitted_once_its_card_answers(make_harness: Any) -> None:
    """A gateway that could not fetch any card at start (worker still booting: HTTP 503)
    fetches it on the first request — within the back-off (60 s here), which holds only once a
    card is known — and admits new tasks from then on."""
    h = make_harness(upstream={"card": {"retry_backoff_seconds": 60}})
    h.worker.default_card = None
    h.worker.on_path("GET", "/.well-known/agent-card.json", raw=(503, {}, b"booting"), times=1)
    cache = h.runtime.cards["worker"]
    cache._cards.clear()  # as if the start-up fetch had failed
    h.on_gateway_loop(cache.refresh())
    assert cache.view().doc is None and not cache.reachable
    assert h.runtime.card_status()["worker"]["retry_in_s"] > 50  # in the back-off
    h.worker.default_card = default_card()
    assert h.http.get(h.gateway.url + "/.well-known/agent-card.json").status_code == 200
    h.worker.on("SendMessage", json_result={"task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
    assert "result" in send(h, 1).json()


# ------------------------------------------------------------------------------ extended card

@pytest.mark.parametrize("road", ["GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard",
                                  "/extendedAgentCard", "/v1/card"])
def test_extended_card_is_rewritten_per_request_and_never_cached(make_harness: Any, road: str) -> None:
    """The extended card, on each of its four roads, is rewritten like the public card (URLs to
    the gateway, gRPC left out) for the request's own Host, and every request asks the worker:
    one client's authenticated card is never served to another (docs/protocol.md §4.4, §4.5)."""
    extended = {**TOCK_CARD, "name": "Tock (extended)",
                "supportedInterfaces": [GRPC_IFACE, *TOCK_CARD["supportedInterfaces"]],
                "capabilities": {"streaming": True, "extendedAgentCard": True}, "signatures": []}
    # the worker serves all four roads itself: nothing is bridged (docs/bridge.md §3.1)
    h = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/",
                     upstream={"protocol_versions": ["0.3", "1.0"]})
    served = []
    for host, secret in (("gw-a.example.net", "alice"), ("gw-b.example.net", "bob")):
        headers = {**V1, "Host": host, "Authorization": f"Bearer {secret}"}
        if road.startswith("/"):  # REST lives where the card says: /rest (issue #34)
            h.worker.on_path("GET", "/a2a/tock/rest" + road, json_body={**extended, "description": secret})
            r = h.http.get(h.gateway.url + "/rest" + road, headers=headers if road != "/v1/card" else
                           {"Host": host, "Authorization": f"Bearer {secret}"})
            assert r.status_code == 200, r.text
            served.append(r.json())
        else:
            h.worker.on(road, json_result={**extended, "description": secret})
            r = h.http.post(h.gateway.url + "/", headers=headers,
                            json={"jsonrpc": "2.0", "id": 7, "method": road})
            assert r.status_code == 200 and r.json()["id"] == 7, r.text
            served.append(r.json()["result"])
    assert [card["description"] for card in served] == ["alice", "bob"]  # never cached
    for card, host in zip(served, ("gw-a.example.net", "gw-b.example.net"), strict=True):
        assert [(i["url"], i["protocolBinding"]) for i in card["supportedInterfaces"]] == [
            (f"http://{host}/", "JSONRPC"), (f"http://{host}/rest", "HTTP+JSON")]
        assert card["name"] == "Tock (extended)" and card["signatures"] == []
    asked = [r for r in h.worker.requests if r.path.endswith(("/extendedAgentCard", "/card"))
             or r.method == road]
    assert [r.headers.get("authorization") for r in asked] == ["Bearer alice", "Bearer bob"]


def test_a_bridged_extended_card_comes_in_the_clients_version(make_harness: Any) -> None:
    """A v0.3 client asking a v1.0-only worker for its extended card: the worker is asked in
    v1.0 (``GetExtendedAgentCard``, ``A2A-Version: 1.0``) and the client gets a v0.3 card whose
    URLs point at the gateway (docs/bridge.md §2, §3.2)."""
    extended = {**TOCK_CARD, "name": "Tock (extended)",
                "capabilities": {"streaming": True, "extendedAgentCard": True}, "signatures": []}
    h = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/")
    h.worker.on("GetExtendedAgentCard", json_result=extended)
    r = h.http.post(h.gateway.url + "/", headers={"Host": "gw.example.net"},
                    json={"jsonrpc": "2.0", "id": 8, "method": "agent/getAuthenticatedExtendedCard"})
    assert r.status_code == 200 and r.json()["id"] == 8, r.text
    card = r.json()["result"]
    assert "supportedInterfaces" not in card and card["protocolVersion"].startswith("0.3")
    assert card["name"] == "Tock (extended)" and card["url"] == "http://gw.example.net/"
    assert card["supportsAuthenticatedExtendedCard"] is True
    [asked] = h.worker.calls("GetExtendedAgentCard")
    assert asked.headers.get("a2a-version") == "1.0"
    assert h.metric("a2a_gateway_bridged_requests_total", binding="jsonrpc", client_version="0.3",
                    worker_version="1.0") == 1


def test_a_jsonrpc_path_the_card_advertises_is_guarded_whatever_jsonrpc_path_says(make_harness: Any) -> None:
    """No road around the gateway: a worker whose card puts JSON-RPC at /a2a/jsonrpc (the
    @a2a-js/sdk examples do) is guarded there although the mount's jsonrpc_path is "/"."""
    card = {**TOCK_CARD, "supportedInterfaces": [
        {"url": "http://localhost:8080/a2a/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}
    h = make_harness(card=card)
    assert h.http.get(h.gateway.url + CARD_PATH, headers=V1).json()["supportedInterfaces"][0]["url"] == \
        h.gateway.url + "/a2a/jsonrpc"
    h.worker.on("GetTask", json_result={"id": "t-1", "contextId": "c", "status": {"state": "completed"}})
    r = h.http.post(h.gateway.url + "/a2a/jsonrpc", headers=V1,
                    json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}})
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"  # normalized: judged
    r = h.http.post(h.gateway.url + "/a2a/jsonrpc/", headers=V1, json={
        "jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": {
            "messageId": "m", "role": "ROLE_USER", "parts": [{"text": "again"}], "taskId": "t-1"}}})
    assert r.json()["error"]["code"] == -32004 and h.worker.calls("SendMessage") == []
    assert h.metric("a2a_gateway_requests_total", binding="jsonrpc", method="GetTask") == 1


def test_a_card_that_varies_by_a2a_version_is_cached_per_version_family_only(make_harness: Any) -> None:
    """A worker that sends ``Vary: A2A-Version`` gets one fetch per version family (none,
    0.x, 1.x and later), however many distinct values clients send: the cache stays bounded."""
    h = make_harness(card=None)
    h.worker.on_path("GET", CARD_PATH, json_body=TOCK_CARD, headers={"vary": "A2A-Version"}, times=None)
    h.runtime.cards["worker"].mark_stale()  # the start-up card came without Vary
    for value in ["1.0", "1.0.2", "1.1", "2.0", "0.3", "0.3.0", "junk", "", *(f"1.{n}" for n in range(40))]:
        r = h.http.get(h.gateway.url + CARD_PATH, headers={"A2A-Version": value} if value else {})
        assert r.status_code == 200
    sent = [r.headers.get("a2a-version") for r in h.worker.requests if r.path == CARD_PATH]
    assert sorted(set(sent), key=str) == sorted({None, "0.3", "1.0"}, key=str)
    assert len(sent) <= 5  # the start-up fetch, the revalidation, then one per family
    assert len(h.runtime.cards["worker"]._cards) <= 3


@pytest.mark.parametrize("headers", [
    {"Host": "alice@evil.example"}, {"Host": "evil.example/x?y"}, {"Host": "gw.example:99999"},
    {"X-Forwarded-Host": "evil.example/phish", "X-Forwarded-Proto": "javascript"}])
def test_a_host_that_is_no_host_never_shapes_the_served_urls(make_harness: Any, headers: dict[str, str]) -> None:
    """Userinfo, a path or an impossible port in ``Host`` (or from a trusted proxy's
    ``X-Forwarded-*``) is replaced by the gateway's own listening address; an odd scheme by
    http."""
    h = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/", public={"trusted_proxies": ["127.0.0.1"]})
    served = h.http.get(h.gateway.url + CARD_PATH, headers={**headers, **V1}).json()
    assert own(served) == own(served, "0.3") == [h.gateway.url + "/", h.gateway.url + "/rest"]
    assert served["url"] == h.gateway.url + "/"


# ------------------------------------------------------------------------------ docs/bridge.md §2

def _card(h: Harness, headers: dict[str, str] | None = None, path: str = CARD_PATH) -> Any:
    return h.http.get(h.gateway.url + path, headers=headers or {})


@pytest.mark.parametrize("path", [CARD_PATH, "/.well-known/agent.json"])
def test_every_client_gets_one_card_of_a_v10_only_worker(make_harness: Any, path: str) -> None:
    """Whatever the card GET carries (no header: the TCK and a2a-sdk 1.3's resolver; a 0.x or
    1.x ``A2A-Version``; the legacy path), one card: the worker's v1.0 interfaces first, then
    the bridged v0.3 ones, and the v0.3 members (docs/bridge.md §2.2, issue: "one Agent Card
    every client reads")."""
    h = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/", public={"url": "https://gw.example.net"})
    answers = [_card(h, headers, path) for headers in ({}, V1, {"A2A-Version": "0.3"}, {"A2A-Version": ""})]
    assert len({a.content for a in answers}) == len({a.headers["etag"] for a in answers}) == 1
    assert all("vary" not in a.headers for a in answers)
    card = answers[0].json()
    assert card["supportedInterfaces"] == [
        {"url": "https://gw.example.net/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "https://gw.example.net/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": "https://gw.example.net/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        {"url": "https://gw.example.net/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"}]
    assert (card["protocolVersion"], card["url"], card["preferredTransport"]) == (
        "0.3.0", "https://gw.example.net/", "JSONRPC")
    assert card["additionalInterfaces"] == [{"url": "https://gw.example.net/", "transport": "JSONRPC"},
                                            {"url": "https://gw.example.net/rest", "transport": "HTTP+JSON"}]
    # a2a-sdk 1.3's resolver keeps every interface; its factory then picks a "1.0" one
    assert sdk_urls(card) == 2 * [("https://gw.example.net/", "JSONRPC"), ("https://gw.example.net/rest", "HTTP+JSON")]
    assert _card(h, {"If-None-Match": answers[0].headers["etag"]}, path).status_code == 304


def test_every_client_gets_one_card_of_a_v03_only_worker(make_harness: Any) -> None:
    h = make_harness(card=TOCK_V03, upstream_path="/a2a/tock/", public={"url": "https://gw.example.net"})
    v10, v03 = _card(h, V1), _card(h)
    assert v10.content == v03.content and "vary" not in v10.headers
    card = v10.json()
    assert card["supportedInterfaces"] == [
        {"url": "https://gw.example.net/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        {"url": "https://gw.example.net/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]
    assert (card["url"], card["protocolVersion"], card["preferredTransport"]) == (
        "https://gw.example.net/", "0.3.0", "JSONRPC")
    assert sdk_urls(card) == 2 * [("https://gw.example.net/", "JSONRPC")]


def test_a_card_of_both_versions_is_not_bridged_and_does_not_vary(make_harness: Any) -> None:
    mixed = {**TOCK_CARD, "supportedInterfaces": [
        *TOCK_CARD["supportedInterfaces"],
        {"url": "http://localhost:8080/a2a/tock/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}],
        "url": "http://localhost:8080/a2a/tock/", "preferredTransport": "JSONRPC", "protocolVersion": "0.3"}
    h = make_harness(card=mixed, upstream_path="/a2a/tock/")
    v03, v10 = _card(h), _card(h, V1)
    assert v03.content == v10.content and v03.headers["etag"] == v10.headers["etag"]
    assert "vary" not in v03.headers


def test_bridge_disabled_serves_the_workers_shape_to_every_client(make_harness: Any) -> None:
    h = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/", bridge={"enabled": False})
    v03, v10 = _card(h), _card(h, V1)
    assert v03.content == v10.content and "supportedInterfaces" in v03.json()
    assert {i["protocolVersion"] for i in v03.json()["supportedInterfaces"]} == {"1.0"}
    assert "url" not in v03.json() and "vary" not in v03.headers
    h2 = make_harness(card=TOCK_V03, upstream_path="/a2a/tock/", bridge={"enabled": False})
    assert "supportedInterfaces" not in _card(h2, V1).json()


@pytest.mark.parametrize("worker_vary", ["Accept-Encoding", "a2a-version"])
def test_a_workers_vary_is_kept_as_it_is(make_harness: Any, worker_vary: str) -> None:
    h = make_harness(card=None)
    h.worker.on_path("GET", CARD_PATH, json_body=TOCK_CARD, headers={"vary": worker_vary}, times=None)
    h.runtime.cards["worker"].mark_stale()
    assert _card(h).headers["vary"] == worker_vary
