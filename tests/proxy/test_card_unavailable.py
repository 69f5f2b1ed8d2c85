"""With no card held, both what a client meets say why, through the real gateway (issue #34): the
card GET's 502 and a new task's refusal name the last fetch's outcome and cause
(``connection_refused`` for nothing on the upstream port, ``dns`` for a host that does not
resolve), not only the ``card_unreachable`` log line."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.app import build_app
from gateway.config import parse_config
from tests.support.gateway import serve_gateway
from tests.support.servers import wait_until

SEND = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {
    "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}


@contextmanager
def refused_url() -> Iterator[str]:
    with socket.socket() as holder:  # bound, never listening: every connect is refused
        holder.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{holder.getsockname()[1]}/"


@contextmanager
def unresolvable_url() -> Iterator[str]:
    yield "http://no-such-host.invalid:9/"  # RFC 2606: never resolves


@pytest.mark.parametrize(("where", "cause"), [(refused_url, "connection_refused"), (unresolvable_url, "dns")])
def test_the_card_get_and_a_new_task_say_why_there_is_no_card(where, cause) -> None:
    registry = CollectorRegistry()
    with where() as url:
        config = parse_config({"ledger": {"url": "memory"}, "upstreams": [{"name": "worker", "url": url}]})
        app = build_app(config, registry=registry)
        with serve_gateway(app) as (gw, _), httpx.Client(trust_env=False, timeout=10) as http:
            wait_until(lambda: (registry.get_sample_value(
                "a2a_gateway_card_fetches_total", {"upstream": "worker", "outcome": "unreachable"}) or 0) >= 1,
                message="the start-up card fetch failed")
            r = http.get(gw.url + "/.well-known/agent-card.json")
            assert r.status_code == 502
            error = r.json()["error"]
            assert error["status"] == "UNAVAILABLE"
            assert error["message"].startswith(f"agent card of upstream worker is unavailable: unreachable ({cause}): ")
            assert error["details"][0]["reason"] == "CARD_UNAVAILABLE"
            assert error["details"][0]["metadata"] == {"upstream": "worker", "card": "unreachable", "cause": cause}
            refused = http.post(gw.url + "/", json=SEND, headers={"A2A-Version": "1.0"}).json()
            assert refused["id"] == 7
            assert f"agent card of upstream worker is unreachable ({cause})" in refused["error"]["message"]
