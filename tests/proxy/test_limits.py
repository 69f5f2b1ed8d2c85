"""Fair shares through the real gateway (docs/limits.md): every limit answered HTTP 429 with
``Retry-After`` in the client's binding and version (JSON-RPC and REST, v1.0 and v0.3, and
through the version bridge) before the worker is called; a live task's slot freed when the task completes by a stream event, a
GetTask answer, the sweep, or any other road the ledger learns of; another caller unaffected."""

from __future__ import annotations

import threading
import time
from typing import Any
from uuid import uuid4

import httpx
import orjson
import pytest

from gateway.a2a.states import TaskState
from gateway.invariants.model import TaskRecord
from tests.proxy.conftest import Harness
from tests.proxy.roads import _METHODS, BRIDGES, J03, R03, ROADS, V1D, Driver, Road
from tests.support.objects import status_update, task
from tests.support.scripted_worker import Data, Event, Gate
from tests.support.servers import wait_until

WORKING, COMPLETED = "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"
_PUSH_KEY = {V1D: "taskPushNotificationConfig", J03: "pushNotificationConfig", R03: "pushNotification"}
_PATHS = {"send": "/message:send", "stream": "/message:stream"}


def call(d: Driver, kind: str, *, tid: str | None = None, push_url: str | None = None,
         caller: str | None = None) -> httpx.Response:
    """One client request of ``kind`` (``send``, ``stream``, ``get``) on ``d``'s road, raw."""
    road, h = d.road, d.h
    headers = {**d.headers, "content-type": "application/json"}
    if caller is not None:
        headers["authorization"] = caller
    if kind == "stream":
        headers["accept"] = "text/event-stream"
    params: dict[str, Any] = {"id": tid} if kind == "get" else {"message": d.message("go", tid)}
    if push_url is not None:
        params["configuration"] = {_PUSH_KEY[road.client]: {"url": push_url}}
    if road.binding == "jsonrpc":
        body = {"jsonrpc": "2.0", "id": f"req-{kind}", "method": _METHODS[road.client][kind], "params": params}
        return h.http.post(h.gateway.url + "/", content=orjson.dumps(body), headers=headers)
    prefix = "/v1" if road.client is R03 else ""
    if kind == "get":
        return h.http.get(f"{h.gateway.url}{prefix}/tasks/{tid}", headers=headers)
    return h.http.post(h.gateway.url + prefix + _PATHS[kind], content=orjson.dumps(params), headers=headers)


def assert_limited(road: Road, r: httpx.Response, limit: str, kind: str = "send") -> None:
    """HTTP 429 with ``Retry-After`` and the limit named, in the road's own error form."""
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1
    doc = r.json()
    if road.binding == "jsonrpc":
        assert doc["id"] == f"req-{kind}" and doc["error"]["code"] == -32603
        assert limit in doc["error"]["message"].replace(" limit ", ".")
        if road.client is V1D:
            (info,) = doc["error"]["data"]
            assert info["reason"] == "LIMIT_EXCEEDED" and info["metadata"]["limit"] == limit
        else:
            assert "data" not in doc["error"]
    elif road.client is V1D:
        error = doc["error"]
        assert error["code"] == 429 and error["status"] == "RESOURCE_EXHAUSTED"
        assert error["details"][0]["reason"] == "LIMIT_EXCEEDED"
        assert error["details"][0]["metadata"]["limit"] == limit
    else:
        assert doc["code"] == -32603 and doc["type"] and limit in doc["message"].replace(" limit ", ".")


def harness(make_harness: Any, road: Road, **limits: Any) -> tuple[Harness, Driver]:
    h = make_harness(limits=limits, **({"card": road.card} if road.card else {}))
    return h, Driver(h, road)


@pytest.mark.parametrize("road", ROADS + BRIDGES, ids=lambda r: r.id)
def test_requests_per_second_per_caller(make_harness: Any, road: Road) -> None:
    """A caller past its bucket is answered 429 before the worker is called; another caller
    still gets through."""
    h, d = harness(make_harness, road, per_caller={"requests_per_second": 0.01, "burst": 1})
    d.on_send({"task": task("t-1", COMPLETED)})
    assert call(d, "send", caller="Bearer alice").status_code == 200
    assert_limited(road, call(d, "send", caller="Bearer alice"), "caller.requests_per_second")
    assert d.worker_sends() == 1
    d.on_send({"task": task("t-2", COMPLETED)})
    assert call(d, "send", caller="Bearer bob").status_code == 200
    assert d.worker_sends() == 2
    assert h.metric("a2a_gateway_limited_total", upstream="worker", limit="caller.requests_per_second") == 1
    assert h.metric("a2a_gateway_requests_total", outcome="limited") == 1


@pytest.mark.parametrize("road", ROADS + BRIDGES, ids=lambda r: r.id)
def test_live_tasks_per_tenant_freed_by_a_get_task_answer(make_harness: Any, road: Road) -> None:
    """One live task per tenant: a second new task waits until the first is terminal, which
    a GetTask answer tells the gateway; a follow-up on the live task is not a new task."""
    h, d = harness(make_harness, road, per_tenant={"live_tasks": 1})
    d.on_send({"task": task("t-1", WORKING)})
    assert call(d, "send").status_code == 200
    assert_limited(road, call(d, "send"), "tenant.live_tasks")
    assert d.worker_sends() == 1
    d.on_get("t-1", task("t-1", COMPLETED))
    assert call(d, "get", tid="t-1").status_code == 200
    d.on_send({"task": task("t-2", WORKING)})
    assert call(d, "send").status_code == 200
    assert d.worker_sends() == 2
    assert h.metric("a2a_gateway_limited_total", limit="tenant.live_tasks") == 1


def test_a_live_task_slot_is_freed_by_a_stream_event(make_harness: Any) -> None:
    road = ROADS[0]
    h, d = harness(make_harness, road, per_caller={"live_tasks": 1})
    d.on_send({"task": task("t-1", WORKING)})
    assert call(d, "send").status_code == 200
    assert_limited(road, call(d, "send"), "caller.live_tasks")
    d.on_subscribe("t-1", [status_update("t-1", COMPLETED)])
    assert [kind for kind, _ in d.subscribe("t-1")] == ["status"]
    d.on_send({"task": task("t-2", WORKING)})
    assert call(d, "send").status_code == 200


def test_a_live_task_slot_is_freed_by_the_sweep(make_harness: Any) -> None:
    road = ROADS[0]
    h = make_harness(limits={"per_caller": {"live_tasks": 1}}, upstream={"heartbeat_seconds": 0.5},
                     sweep={"interval_seconds": 0.05})
    d = Driver(h, road)
    d.on_send({"task": task("t-1", WORKING)})
    assert call(d, "send").status_code == 200
    assert_limited(road, call(d, "send"), "caller.live_tasks")
    d.on_get("t-1", task("t-1", COMPLETED), times=None)
    wait_until(lambda: h.metric("a2a_gateway_sweep_total", outcome="changed") >= 1, timeout=15,
               message="the sweep records the completed state")
    d.on_send({"task": task("t-2", WORKING)})
    assert call(d, "send").status_code == 200


def test_a_task_the_ledger_holds_terminal_by_another_road_is_reclaimed(make_harness: Any) -> None:
    """A task that turned terminal where no driver of this process stored it (a push
    notification, another replica) or left the ledger frees its slot at the next check."""
    road = ROADS[0]
    h, d = harness(make_harness, road, per_upstream={"live_tasks": 1})
    d.on_send({"task": task("t-1", WORKING)})
    assert call(d, "send").status_code == 200
    assert_limited(road, call(d, "send"), "upstream.live_tasks")
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", "t-1"))
    done = TaskRecord("worker", "t-1", "c-1", TaskState.COMPLETED, time.time(),
                      terminal_status={"state": COMPLETED})
    h.on_gateway_loop(h.runtime.ledger.put(done, stored.version))
    d.on_send({"task": task("t-2", WORKING)})
    # a scope's set is reclaimed at most once a second: the refusal just now did it
    wait_until(lambda: call(d, "send").status_code == 200, timeout=10, message="the slot reclaimed")
    assert d.worker_sends() == 2
    assert h.metric("a2a_gateway_limited_total", limit="upstream.live_tasks") >= 1


def _stream_steps(d: Driver, gate: Gate) -> None:
    """The worker's stream: the task working, then held open at ``gate``, then completed."""
    first, last = d.w_event({"task": task("t-1", WORKING)}), d.w_event(status_update("t-1", COMPLETED))
    if d.road.binding == "jsonrpc":
        d.h.worker.on(_METHODS[d.road.worker]["stream"], sse=[Event(result=first), gate, Event(result=last)])
    else:
        prefix = "/v1" if d.road.worker is R03 else ""
        d.h.worker.on_path("POST", prefix + "/message:stream", sse=[Data(first), gate, Data(last)])


@pytest.mark.parametrize("road", ROADS, ids=lambda r: r.id)
def test_open_streams_per_caller(make_harness: Any, road: Road) -> None:
    """A second stream of a caller while its first is open is refused before it starts; once
    the first ends, a stream is let through again."""
    h, d = harness(make_harness, road, per_caller={"open_streams": 1})
    gate = Gate()
    _stream_steps(d, gate)
    opened = threading.Event()
    got: list[bytes] = []

    def first_stream() -> None:
        headers = {**d.headers, "content-type": "application/json", "accept": "text/event-stream"}
        params = {"message": d.message("go")}
        if road.binding == "jsonrpc":
            url, body = h.gateway.url + "/", {"jsonrpc": "2.0", "id": 1, "method": _METHODS[road.client]["stream"],
                                              "params": params}
        else:
            url, body = h.gateway.url + ("/v1" if road.client is R03 else "") + "/message:stream", params
        with httpx.Client(trust_env=False, timeout=10) as client, client.stream(
                "POST", url, content=orjson.dumps(body), headers=headers) as r:
            for chunk in r.iter_raw():
                got.append(chunk)
                opened.set()

    worker = threading.Thread(target=first_stream)
    worker.start()
    try:
        assert opened.wait(10)
        assert_limited(road, call(d, "stream"), "caller.open_streams", "stream")
        assert h.worker.open_streams == 1  # the refused one never reached the worker
    finally:
        gate.release()
        worker.join(10)
    assert b"COMPLETED" in b"".join(got).upper()
    # the client has its whole body a moment before the gateway gives the slot back
    wait_until(lambda: h.on_gateway_loop(h.runtime.limiter.store.count("streams:caller:anonymous")) == 0,
               message="the first stream's slot given back")
    d.on_stream([{"task": task("t-2", WORKING)}, status_update("t-2", COMPLETED)])
    assert call(d, "stream").status_code == 200
    assert h.metric("a2a_gateway_limited_total", limit="caller.open_streams") == 1


@pytest.mark.parametrize("road", ROADS, ids=lambda r: r.id)
def test_push_configs_per_caller(make_harness: Any, road: Road) -> None:
    """One push config per caller: a send carrying a second one is refused, nothing stored."""
    h = make_harness(limits={"per_caller": {"push_configs": 1}}, push={"allowed_cidrs": ["127.0.0.1/32"]},
                     **({"card": road.card} if road.card else {}))
    d = Driver(h, road)
    d.on_send({"task": task("t-1", WORKING)})
    assert call(d, "send", push_url="http://127.0.0.1:9/hook").status_code == 200
    assert_limited(road, call(d, "send", push_url="http://127.0.0.1:9/hook"), "caller.push_configs")
    assert d.worker_sends() == 1
    d.on_send({"task": task("t-2", WORKING)})
    assert call(d, "send").status_code == 200  # a send without a push config is let through


def test_a_refusal_naming_a_task_is_on_its_timeline(make_harness: Any) -> None:
    road = ROADS[0]
    h, d = harness(make_harness, road, per_caller={"requests_per_second": 0.01, "burst": 1})
    d.on_send({"task": task("t-1", WORKING)})
    assert call(d, "send").status_code == 200
    assert_limited(road, call(d, "get", tid="t-1"), "caller.requests_per_second", "get")
    entries = h.on_gateway_loop(h.runtime.ledger.timeline("worker", "t-1"))
    assert any(e.verdict == "rejected" and (e.error or "").startswith("429 caller.requests_per_second")
               for e in entries)


def test_the_status_page_shows_use_against_each_limit(make_harness: Any) -> None:
    road = ROADS[0]
    h, d = harness(make_harness, road, per_upstream={"live_tasks": 5, "requests_per_second": 100})
    d.on_send({"task": task("t-1", WORKING)})
    assert call(d, "send").status_code == 200
    page = h.http.get(h.admin.url + "/status").text
    assert 'id="limits"' in page
    assert '<td class="limit-use" data-limit="live_tasks">1 / 5</td>' in page
    assert "100/s" in page


def test_defaults_are_off(h: Harness) -> None:
    """No limit configured: the limiter holds nothing and nothing is refused."""
    d = Driver(h, ROADS[0])
    for n in range(5):
        d.on_send({"task": task(f"t-{n}", WORKING)})
        assert call(d, "send").status_code == 200
    assert h.runtime.limiter.active is False
    assert h.metric("a2a_gateway_limited_total") == 0


def test_two_replicas_on_one_redis_share_one_limit(make_harness: Any) -> None:
    """Two gateways on one Redis ledger: a caller's bucket and its live tasks are one for
    both — what replica A let through counts on replica B, and a task B sees complete frees
    the slot A gave."""
    from tests.support.redis_server import redis_server

    road = ROADS[0]
    with redis_server() as url:
        limits = {"per_caller": {"live_tasks": 1}, "callers": {"Bearer slow": {"requests_per_second": 0.01,
                                                                                "burst": 1}}}
        a = make_harness(limits=limits, ledger={"url": url})
        b = make_harness(limits=limits, ledger={"url": url})
        da, db = Driver(a, road), Driver(b, road)
        da.on_send({"task": task("t-1", COMPLETED)})
        assert call(da, "send", caller="Bearer slow").status_code == 200
        assert_limited(road, call(db, "send", caller="Bearer slow"), "caller.requests_per_second")

        da.on_send({"task": task("t-2", WORKING)})
        assert call(da, "send").status_code == 200
        assert_limited(road, call(db, "send"), "caller.live_tasks")
        db.on_get("t-2", task("t-2", COMPLETED))
        assert call(db, "get", tid="t-2").status_code == 200
        da.on_send({"task": task("t-3", WORKING)})
        assert call(da, "send").status_code == 200
        assert db.worker_sends() == 0


def test_a_tenant_override_replaces_only_the_fields_it_sets(make_harness: Any) -> None:
    """``limits.tenants.acme`` sets live_tasks for tenant ``acme``; every other tenant keeps
    ``per_tenant`` (here 0: nothing of theirs goes through), and so does acme's rate."""
    h = make_harness(limits={"per_tenant": {"live_tasks": 0, "requests_per_second": 1000},
                             "tenants": {"acme": {"live_tasks": 1}}}, admin={"metric_tenants": ["acme"]})
    road = ROADS[0]

    def send(tenant: str | None) -> httpx.Response:
        params: dict[str, Any] = {"message": {"messageId": uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
        if tenant is not None:
            params["tenant"] = tenant
        body = {"jsonrpc": "2.0", "id": "req-send", "method": "SendMessage", "params": params}
        return h.rpc(body, headers={"A2A-Version": "1.0"})

    h.worker.on("SendMessage", json_result={"task": task("t-1", WORKING)})
    assert send("acme").status_code == 200
    assert_limited(road, send("acme"), "tenant.live_tasks")
    assert_limited(road, send(None), "tenant.live_tasks")
    assert_limited(road, send("other"), "tenant.live_tasks")
    assert len(h.worker.calls("SendMessage")) == 1
    # a tenant is a label only through admin.metric_tenants; any other is "other"
    assert h.metric("a2a_gateway_tenant_requests_total", tenant="acme", outcome="limited") == 1
    assert h.metric("a2a_gateway_tenant_requests_total", tenant="other", outcome="limited") == 1
    page = h.http.get(h.admin.url + "/status").text
    assert "<td>acme</td>" in page and "1000/s" in page


def test_refusals_are_logged_once_per_repeat_window(make_harness: Any, gateway_warnings: Any) -> None:
    """Every refusal counts; the ``limited`` lines are alike but for ``retry_in_s``, so the
    log's repeat window writes the first and holds the others back."""
    road = ROADS[0]
    from gateway.observability.logging import RepeatFilter

    h = make_harness(limits={"per_caller": {"requests_per_second": 0.01, "burst": 1}})
    d = Driver(h, road)
    d.on_send({"task": task("t-1", COMPLETED)})
    assert call(d, "send").status_code == 200
    for _ in range(3):
        assert_limited(road, call(d, "send"), "caller.requests_per_second")
    assert h.metric("a2a_gateway_limited_total", limit="caller.requests_per_second") == 3
    lines = gateway_warnings("limited")
    assert len(lines) == 3 and {line.limit for line in lines} == {"caller.requests_per_second"}
    repeats = RepeatFilter(600.0, clock=lambda: 0.0)  # the filter serve installs (log.repeat_window_seconds)
    assert [repeats.filter(line) for line in lines] == [True, False, False]


def test_a_live_task_slot_is_freed_by_a_cancel(make_harness: Any) -> None:
    road = ROADS[0]
    h, d = harness(make_harness, road, per_caller={"live_tasks": 1})
    d.on_send({"task": task("t-1", WORKING)})
    assert call(d, "send").status_code == 200
    assert_limited(road, call(d, "send"), "caller.live_tasks")
    h.worker.on("CancelTask", json_result=task("t-1", "TASK_STATE_CANCELED"))
    canceled = h.rpc({"jsonrpc": "2.0", "id": "c", "method": "CancelTask", "params": {"id": "t-1"}}, headers=d.headers)
    assert canceled.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    d.on_send({"task": task("t-2", WORKING)})
    assert call(d, "send").status_code == 200


def test_the_status_page_never_shows_a_caller_overrides_identity(make_harness: Any) -> None:
    """A ``limits.callers`` name is an identity, here a credential: the status page shows the
    override by its place (``limits.callers #1``), never by its name (docs/limits.md §5)."""
    road = ROADS[0]
    h, d = harness(make_harness, road, callers={"Bearer batch-SECRET-1": {"live_tasks": 3}})
    d.on_send({"task": task("t-1", WORKING)})
    assert call(d, "send", caller="Bearer batch-SECRET-1").status_code == 200
    page = h.http.get(h.admin.url + "/status").text
    assert "limits.callers #1" in page
    assert "SECRET" not in page
