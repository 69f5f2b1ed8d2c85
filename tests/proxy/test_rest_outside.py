"""A REST-shaped call outside every REST interface the worker's card advertises (issue #34):
``POST /message:send`` in front of a worker whose card puts HTTP+JSON at ``/rest`` is answered
by the gateway with HTTP 404 in the client's version's REST error form, naming where REST
lives as the client reaches it — not relayed to meet the worker's redirect and counted as an
upstream error. Calls inside an advertised interface (with a tenant before or after it), and
any REST call to a worker whose card advertises none or one at its root, are relayed as before."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.proxy.conftest import Harness
from tests.support.objects import task
from tests.support.scripted_worker import default_card

V1 = {"A2A-Version": "1.0"}
SEND = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}


def gw(h: Harness, path: str) -> str:
    return h.gateway.url + path


def rest_card(*paths: str) -> dict[str, Any]:
    card = copy.deepcopy(default_card())
    card["supportedInterfaces"] += [{"url": f"http://127.0.0.1:1{p}", "protocolBinding": "HTTP+JSON",
                                     "protocolVersion": "1.0"} for p in paths]
    return card


def test_a_call_outside_the_advertised_rest_base_is_a_404_naming_it(make_harness: Any) -> None:
    h: Harness = make_harness(card=rest_card("/rest"))
    r = h.http.post(gw(h, "/message:send"), json=SEND, headers=V1)
    assert r.status_code == 404
    err = r.json()["error"]
    base = gw(h, "/rest")  # as the served card names it: the client's Host
    assert err["status"] == "NOT_FOUND" and f"at {base};" in err["message"]
    assert f"try {base}/message:send" in err["message"]
    [info] = err["details"]
    assert info["reason"] == "METHOD_NOT_FOUND" and info["metadata"] == {"restBase": base}
    assert h.rpc_calls() == []  # answered by the gateway: the worker saw nothing
    assert h.metric("a2a_gateway_requests_total", outcome="no_route") == 1
    # a v0.3 client gets its own error form, and a GetTask the same answer
    r03 = h.http.post(gw(h, "/v1/message:send"), json=SEND)
    assert r03.status_code == 404 and r03.json()["type"] == "MethodNotFoundError"
    assert f"try {base}/v1/message:send" in r03.json()["message"]
    assert h.http.get(gw(h, "/tasks/t-1"), headers=V1).status_code == 404
    assert h.rpc_calls() == []


@pytest.mark.parametrize("path", ["/rest/tasks/t-1", "/acme/rest/tasks/t-1", "/rest/acme/tasks/t-1"])
def test_calls_inside_an_advertised_interface_are_relayed(make_harness: Any, path: str) -> None:
    h: Harness = make_harness(card=rest_card("/rest"))
    h.worker.on_path("GET", path, json_body=task("t-1", state="TASK_STATE_WORKING"))
    r = h.http.get(gw(h, path), headers=V1)
    assert r.status_code == 200 and r.json()["id"] == "t-1"
    assert [c.path for c in h.rpc_calls()] == [path]


@pytest.mark.parametrize("paths", [(), ("",)], ids=["no-rest-interface", "rest-at-root"])
def test_without_a_rest_base_to_name_nothing_is_refused(make_harness: Any, paths: tuple[str, ...]) -> None:
    h: Harness = make_harness(card=rest_card(*paths))
    h.worker.on_path("GET", "/tasks/t-1", json_body=task("t-1", state="TASK_STATE_WORKING"))
    r = h.http.get(gw(h, "/tasks/t-1"), headers=V1)
    assert r.status_code == 200 and [c.path for c in h.rpc_calls()] == ["/tasks/t-1"]
