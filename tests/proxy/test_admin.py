"""The admin listener (gateway/admin.py) beside a real gateway: ``/metrics``, ``/healthz`` and
``/readyz`` are answered there and no longer on the traffic port (there every path goes to the
mount, unless ``listen.probes``); an optional bearer token guards it; a scrape never waits on
the ledger."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import build_app
from gateway.config import parse_config
from gateway.errors import ConfigError
from tests.proxy.conftest import Harness
from tests.support.servers import wait_until

V1 = {"A2A-Version": "1.0"}
GET_TASK = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}


def forwarded(h: Harness) -> list[tuple[str, str]]:
    return [(q.http_method, q.path) for q in h.worker.requests if "/.well-known/" not in q.path]


def test_metrics_are_on_the_admin_listener_and_the_traffic_port_relays_the_path(h: Harness) -> None:
    h.worker.on_path("GET", "/metrics", raw=(200, {"content-type": "text/plain"}, b"the worker's own"))
    h.worker.on("GetTask", json_result={"id": "t-1", "contextId": "c-1", "status": {"state": "working"}})
    h.rpc(GET_TASK, headers=V1)
    traffic = h.http.get(h.gateway.url + "/metrics")
    assert (traffic.status_code, traffic.text) == (200, "the worker's own")
    admin = h.http.get(h.admin.url + "/metrics")
    assert admin.status_code == 200 and admin.headers["content-type"].startswith("text/plain")
    assert 'a2a_gateway_requests_total{binding="jsonrpc",method="GetTask",outcome="ok",upstream="worker"} 1.0' in admin.text
    assert forwarded(h) == [("POST", "/"), ("GET", "/metrics")]


def test_probes_on_the_traffic_port_go_to_the_mount_by_default(h: Harness) -> None:
    h.worker.on_path("GET", "/healthz", raw=(200, {"content-type": "text/plain"}, b"worker healthy"))
    assert h.http.get(h.gateway.url + "/healthz").text == "worker healthy"
    assert h.http.get(h.gateway.url + "/readyz").status_code == 404  # the scripted worker has none
    assert forwarded(h) == [("GET", "/healthz"), ("GET", "/readyz")]
    assert h.http.get(h.admin.url + "/healthz").json() == {"status": "ok"}
    ready = h.http.get(h.admin.url + "/readyz").json()
    assert ready["status"] == "ready" and ready["upstreams"]["worker"]["card"] == "ok"
    assert ready["upstreams"]["worker"]["admitting_new_tasks"] is True
    assert h.http.head(h.admin.url + "/readyz").status_code == 200


def test_listen_probes_answers_them_on_the_traffic_port_too(make_harness: Any) -> None:
    h = make_harness(listen={"probes": True})
    assert h.http.get(h.gateway.url + "/healthz").json() == {"status": "ok"}
    assert h.http.get(h.gateway.url + "/readyz").json() == {"status": "ready"}
    assert forwarded(h) == []


def test_readyz_names_each_upstreams_card_status_on_the_admin_listener_only(make_harness: Any) -> None:
    """``Runtime.card_status()`` (where the runtime has it) is added on the admin listener; the
    traffic port's ``/readyz`` never names upstreams."""
    h = make_harness(listen={"probes": True})
    status = {"worker": {"card": "fresh"}}
    h.runtime.card_status = lambda: status
    assert h.http.get(h.admin.url + "/readyz").json() == {"status": "ready", "upstreams": status}
    assert h.http.get(h.gateway.url + "/readyz").json() == {"status": "ready"}


def test_readyz_turns_503_when_the_drain_begins_and_healthz_stays(h: Harness) -> None:
    async def drain() -> None:
        h.runtime.draining.set()  # what begin_drain does at once (without the stream deadline)

    h.on_gateway_loop(drain())
    ready = h.http.get(h.admin.url + "/readyz")
    assert (ready.status_code, ready.json()["status"]) == (503, "not ready")
    assert h.http.get(h.admin.url + "/healthz").status_code == 200


def test_a_scrape_never_calls_the_ledger(h: Harness) -> None:
    """``a2a_gateway_tracked_tasks`` is read as it stands (refreshed in the background, every
    ``admin.tracked_refresh_seconds``, 15): before, every scrape ran a ``count`` on the ledger."""
    counts = h.metric("a2a_gateway_ledger_operation_duration_seconds_count", operation="count")
    for _ in range(3):
        assert h.http.get(h.admin.url + "/metrics").status_code == 200
    assert h.metric("a2a_gateway_ledger_operation_duration_seconds_count", operation="count") == counts


def test_other_paths_on_the_admin_listener_are_404(h: Harness) -> None:
    assert h.http.get(h.admin.url + "/").status_code == 404
    assert h.http.get(h.admin.url + "/.well-known/agent-card.json").status_code == 404
    assert h.http.post(h.admin.url + "/metrics").status_code == 405
    assert forwarded(h) == []  # nothing reached the worker


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "admin-token"
    path.write_text("s3cret-admin-token\n")  # stripped
    return path


def test_a_token_file_guards_the_admin_listener_but_not_the_probes(make_harness: Any, token_file: Path) -> None:
    h = make_harness(admin={"token_file": str(token_file)})
    url = h.admin.url + "/metrics"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0"},
                    {"Authorization": "Bearer s3cret-admin-token-and-more"}, {"Authorization": "s3cret-admin-token"}):
        refused = h.http.get(url, headers=headers)
        assert refused.status_code == 401, headers
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert "a2a_gateway" not in refused.text
    assert h.http.get(h.admin.url + "/nowhere").status_code == 401  # nothing is probed without it
    for scheme in ("Bearer", "bearer", "BEARER"):
        ok = h.http.get(url, headers={"Authorization": f"{scheme} s3cret-admin-token"})
        assert ok.status_code == 200 and "a2a_gateway_build_info" in ok.text
    assert h.http.get(h.admin.url + "/healthz").status_code == 200
    assert h.http.get(h.admin.url + "/readyz").status_code == 200


def test_protect_probes_asks_the_token_of_probes_too(make_harness: Any, token_file: Path) -> None:
    h = make_harness(admin={"token_file": str(token_file), "protect_probes": True})
    for path in ("/healthz", "/readyz", "/metrics"):
        assert h.http.get(h.admin.url + path).status_code == 401, path
        authorized = h.http.get(h.admin.url + path, headers={"Authorization": "Bearer s3cret-admin-token"})
        assert authorized.status_code == 200, path


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_a_missing_or_empty_token_file_is_a_config_error(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    config = parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/"}],
                           "ledger": {"url": "memory"}, "admin": {"token_file": str(path)}})
    with pytest.raises(ConfigError) as err:
        build_app(config)
    [line] = err.value.problems
    assert line.startswith(f"admin.token_file: {path}: ")


def test_the_admin_listener_answers_while_the_traffic_port_is_full(make_harness: Any) -> None:
    """The admin listener has a cap of its own: traffic at ``max_connections`` never starves
    ``/healthz``."""
    h = make_harness(listen={"max_connections": 2})
    held = [socket.create_connection((h.gateway.host, h.gateway.port)) for _ in range(2)]
    try:
        wait_until(lambda: h.metric("a2a_gateway_open_connections") == 2)
        with httpx.Client(trust_env=False, timeout=5) as fresh:
            assert fresh.get(h.admin.url + "/healthz").status_code == 200
    finally:
        for sock in held:
            sock.close()


SEND = {"jsonrpc": "2.0", "id": "s-1", "method": "SendMessage", "params": {
    "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}


def test_readyz_is_503_while_the_ledger_cannot_be_written_and_200_once_it_can(make_harness: Any) -> None:
    """Issue #35: ``/readyz`` said 200 while the ledger was down, although every state change
    was answered 503, so a load balancer kept sending traffic to a replica that could not
    serve it. A Redis ledger that refuses writes but still answers reads
    (``min-replicas-to-write``, as after a failover to a read-only node): ``/readyz`` turns
    503 with the reason — on the admin listener with the ledger's error, on the traffic
    port's probe without it — ``/healthz`` stays 200, a send is refused 503; once Redis
    takes writes again, the probe write alone (no traffic) makes it 200, and sends pass."""
    import redis

    from tests.support.redis_server import redis_server

    with redis_server() as url:
        h = make_harness(ledger={"url": url, "probe_interval_seconds": 0.2}, listen={"probes": True})
        h.worker.on("SendMessage", json_result={"task": {"id": "t-1", "contextId": "c-1",
                                                         "status": {"state": "TASK_STATE_WORKING"}}}, times=None)
        admin, traffic = h.admin.url + "/readyz", h.gateway.url + "/readyz"
        assert h.http.get(admin).status_code == 200 and h.http.get(traffic).status_code == 200
        server = redis.Redis.from_url(url)
        try:
            server.config_set("min-replicas-to-write", 1)  # every write refused: NOREPLICAS
            down = wait_until(lambda: (r := h.http.get(admin)).status_code == 503 and r.json(),
                              message="/readyz 503 while the ledger refuses writes")
            assert down["status"] == "not ready" and down["reason"] == "the task ledger cannot be written"
            assert down["ledger"]["backend"] == "redis" and "NOREPLICAS" in down["ledger"]["error"].upper()
            on_traffic = h.http.get(traffic)
            assert on_traffic.status_code == 503 and on_traffic.json() == {
                "status": "not ready", "reason": "the task ledger cannot be written"}
            assert h.http.get(admin.replace("/readyz", "/healthz")).status_code == 200
            assert h.rpc(SEND, headers=V1).status_code == 503
            server.config_set("min-replicas-to-write", 0)
            wait_until(lambda: h.http.get(admin).status_code == 200, message="/readyz 200 again")
            assert h.http.get(traffic).json() == {"status": "ready"}
            r = h.rpc(SEND, headers=V1)
            assert r.status_code == 200 and r.json()["result"]["task"]["id"] == "t-1"
        finally:
            server.close()


def test_readyz_ignores_the_ledger_when_it_is_not_needed_to_serve(make_harness: Any) -> None:
    """With ``ledger.on_unavailable: forward`` a ledger that cannot be written does not stop
    the traffic (it is relayed unchecked, counted), so ``/readyz`` stays 200."""
    h = make_harness(ledger={"url": "memory", "on_unavailable": "forward"})
    h.runtime.ledger_down = "put: ConnectionError: gone"
    assert h.http.get(h.admin.url + "/readyz").json()["status"] == "ready"
