"""The demo's legacy-worker step (demo/run.py step 4) through a real gateway: it raises when
the gateway does not normalize or absorb, so this test keeps the front door honest."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry

from demo.legacy_worker import build_app as build_legacy
from demo.run import legacy_step
from gateway.app import build_app
from gateway.config import parse_config
from tests.support.gateway import serve_gateway
from tests.support.servers import serve_in_thread


def test_demo_legacy_step_passes_through_the_gateway() -> None:
    with serve_in_thread(build_legacy(), name="legacy") as legacy:
        config = parse_config({"ledger": {"url": "memory"}, "upstreams": [
            {"name": "legacy", "url": legacy.url + "/", "prefix": "/legacy"}]})
        with serve_gateway(build_app(config, registry=CollectorRegistry())) as (gateway, admin), \
                httpx.Client(trust_env=False, timeout=10) as http:
            lines = legacy_step(http, gateway.url + "/legacy/", admin.url + "/metrics")
    text = "\n".join(lines)
    assert '-> client got "TASK_STATE_INPUT_REQUIRED"' in text
    assert "terminal_regression" in text and "v03_grpc" in text
