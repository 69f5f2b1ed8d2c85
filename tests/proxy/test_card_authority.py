"""Agent Card authority through the real gateway: the card governs admission of new tasks, task
events govern disposition, and freshness is checked (forced GetTask) only when needed.
docs/field-cases.md F08 (ii), F10, F11."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from gateway.a2a.card import HEARTBEAT_EXTENSION
from tests.proxy.conftest import Harness, frames
from tests.support.scripted_worker import Event, Gate, default_card
from tests.support.servers import wait_until

V1 = {"A2A-Version": "1.0"}

TOCK_CARD = {
    "name": "Tock", "description": "scheduler", "version": "1.2.0",
    "supportedInterfaces": [
        {"url": "http://localhost:8080/a2a/tock/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "http://localhost:8080/a2a/tock/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}],
    "capabilities": {"streaming": True}, "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"], "skills": [],
}
TOCK_V03 = {
    "protocolVersion": "0.3.0", "name": "Tock", "description": "scheduler", "version": "1.2.0",
    "url": "http://localhost:8080/a2a/tock/", "preferredTransport": "JSONRPC",
    "additionalInterfaces": [{"url": "http://localhost:8080/a2a/tock/", "transport": "JSONRPC"}],
    "capabilities": {"streaming": True}, "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"], "skills": [],
}


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
def test_f10_card_urls_point_at_the_gateway_without_doubled_segments(make_harness: Any, card: Any, path: str) -> None:
    h = make_harness(upstream_path="/a2a/tock/", card=card, upstream={"prefix": "/a2a/tick"},
                     public={"url": "https://gw.example.net"})
    r = h.http.get(h.gateway.url + "/a2a/tick" + path)
    served = r.json()
    assert r.status_code == 200
    if "supportedInterfaces" in card:
        assert [i["url"] for i in served["supportedInterfaces"]] == [
            "https://gw.example.net/a2a/tick/", "https://gw.example.net/a2a/tick/rest"]
    else:
        assert served["url"] == "https://gw.example.net/a2a/tick/"
        assert served["additionalInterfaces"][0]["url"] == "https://gw.example.net/a2a/tick/"
    untouched = {k: v for k, v in card.items() if k not in ("supportedInterfaces", "url", "additionalInterfaces")}
    assert {k: served[k] for k in untouched} == untouched


def test_f10_public_origin_comes_from_trusted_proxies_only(make_harness: Any) -> None:
    forwarded = {"X-Forwarded-Host": "gw.example.net", "X-Forwarded-Proto": "https"}
    untrusted = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/")
    url = untrusted.gateway.url
    served = untrusted.http.get(url + "/.well-known/agent-card.json", headers=forwarded).json()
    assert served["supportedInterfaces"][0]["url"] == url + "/"  # the Host the client used
    trusted = make_harness(card=TOCK_CARD, upstream_path="/a2a/tock/", public={"trusted_proxies": ["127.0.0.1"]})
    served = trusted.http.get(trusted.gateway.url + "/.well-known/agent-card.json", headers=forwarded).json()
    assert served["supportedInterfaces"][0]["url"] == "https://gw.example.net/"


def test_served_card_has_its_own_etag_and_answers_304(make_harness: Any) -> None:
    h = make_harness(card=TOCK_CARD)
    first = h.http.get(h.gateway.url + "/.well-known/agent-card.json")
    etag = first.headers["etag"]
    again = h.http.get(h.gateway.url + "/.well-known/agent-card.json", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert "max-age=" in first.headers["cache-control"]


def test_signed_card_is_served_verbatim_by_default_and_stripped_on_request(make_harness: Any) -> None:
    signed = {**TOCK_CARD, "signatures": [{"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln"}]}
    h = make_harness(card=signed, upstream_path="/a2a/tock/")
    verbatim = h.http.get(h.gateway.url + "/.well-known/agent-card.json").json()
    assert verbatim == signed  # a rewritten body is never served with its old signature
    h2 = make_harness(card=signed, upstream_path="/a2a/tock/", upstream={"card": {"signed": "strip"}})
    stripped = h2.http.get(h2.gateway.url + "/.well-known/agent-card.json").json()
    assert "signatures" not in stripped
    assert stripped["supportedInterfaces"][0]["url"] == h2.gateway.url + "/"
    assert h2.metric("a2a_gateway_card_signatures_stripped_total") == 1


def test_f11_card_addresses_are_never_routed_to_and_are_counted(make_harness: Any) -> None:
    card = {**TOCK_V03, "url": "http://[::]:8080/invoke", "additionalInterfaces": []}
    h = make_harness(card=card)
    h.worker.on("SendMessage", json_result={"task": {"id": "t-11", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
    r = send(h, 1)
    assert r.json()["result"]["task"]["id"] == "t-11"  # the registered worker answered
    assert h.metric("a2a_gateway_card_local_urls_total") == 1


def test_invalid_card_is_never_cached_and_the_last_good_one_stays(make_harness: Any) -> None:
    h = make_harness(card=None)
    h.worker.default_card = None
    h.worker.on_path("GET", "/.well-known/agent-card.json", json_body=default_card(), times=1,
                     headers={"cache-control": "max-age=0"})
    h.runtime.cards["worker"].mark_stale()
    good = h.http.get(h.gateway.url + "/.well-known/agent-card.json").json()
    assert good["name"] == "scripted"
    for body in ({"name": "broken"}, "not a card"):
        h.worker.on_path("GET", "/.well-known/agent-card.json", json_body=body, times=1)
        h.runtime.cards["worker"].mark_stale()
        assert h.http.get(h.gateway.url + "/.well-known/agent-card.json").json() == good
    assert h.metric("a2a_gateway_card_fetches_total", outcome="invalid") == 2


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
    assert h.divergences("stale_record") == 1


def test_heartbeat_gap_forces_get_task_then_forwards(h: Harness) -> None:
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
    """A gateway that could not fetch any card at start (worker still booting) fetches it on
    the next request instead of waiting out a retry pause."""
    h = make_harness()
    h.worker.default_card = None
    h.worker.on_path("GET", "/.well-known/agent-card.json", raw=(503, {}, b"booting"), times=1)
    cache = h.runtime.cards["worker"]
    cache._cards.clear()  # as if the start-up fetch had failed
    h.on_gateway_loop(cache.refresh())
    assert cache.view().doc is None and not cache.reachable
    h.worker.default_card = default_card()
    served = h.http.get(h.gateway.url + "/.well-known/agent-card.json")
    assert served.status_code == 200
    h.worker.on("SendMessage", json_result={"task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
    assert "result" in send(h, 1).json()
