"""The demo waits for the gateway's readiness (demo/run.py ``wait_ready`` on ``/readyz``), and
that readiness includes the worker's Agent Card: against a real gateway whose worker is not up
yet the wait does not end (and says why), and it ends once the worker is up and its card is in."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import CollectorRegistry

from demo.run import DemoError, wait_ready
from gateway.app import build_app
from gateway.config import parse_config
from tests.support.gateway import serve_gateway
from tests.support.scripted_worker import ScriptedWorker
from tests.support.servers import serve_in_thread


def test_the_demo_waits_for_the_gateways_first_card(tmp_path: Path) -> None:
    with socket.socket() as holder:  # bound, never listening: refused until the worker is served there
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        config = parse_config({"ledger": {"url": "memory"}, "upstreams": [{
            "name": "worker", "url": f"http://127.0.0.1:{port}/",
            "card": {"retry_backoff_seconds": 0.2, "retry_max_seconds": 0.4}}]})
        gateway = SimpleNamespace(name="gateway", proc=SimpleNamespace(poll=lambda: None),
                                  log_path=tmp_path / "gateway.log", log_tail=lambda: "(in-process)")
        with serve_gateway(build_app(config, registry=CollectorRegistry())) as (_, admin), \
                httpx.Client(trust_env=False, timeout=5) as http:
            readyz = admin.url + "/readyz"
            with pytest.raises(DemoError) as err:
                wait_ready(gateway, readyz, 0.5, http)  # type: ignore[arg-type]
            assert "HTTP 503" in str(err.value) and '"card":"unreachable"' in str(err.value)
            with serve_in_thread(ScriptedWorker(), name="late-worker", config={"port": port}):
                assert wait_ready(gateway, readyz, 5, http) < 5  # type: ignore[arg-type]
                assert http.get(readyz).json()["upstreams"]["worker"]["card"] == "ok"
