"""Fixtures: a scripted worker and a real gateway, both under real uvicorn on 127.0.0.1: the
gateway's traffic app and its admin app (``/metrics``, ``/healthz``, ``/readyz``) as
tests/support/gateway.py serves them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.app import build_app
from gateway.config import parse_config
from gateway.observability.logging import LOGGER_NAME
from tests.support.gateway import serve_gateway
from tests.support.scripted_worker import ScriptedWorker
from tests.support.servers import RunningServer, serve_in_thread, wait_until


@dataclass
class Harness:
    """A scripted worker behind a running gateway, plus helpers to talk to both. ``admin``:
    the gateway's admin listener (``h.admin.url + "/metrics"``)."""

    worker: ScriptedWorker
    gateway: RunningServer
    admin: RunningServer
    registry: CollectorRegistry
    http: httpx.Client

    def on_gateway_loop(self, coro: Any) -> Any:
        """Run a coroutine on the gateway's event loop (to read or age its ledger)."""
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.gateway.loop).result(timeout=10)

    @property
    def runtime(self) -> Any:
        """The gateway's shared Runtime (config, ledger, card caches)."""
        return self.gateway.app.state.runtime

    def rpc(self, body: Any, *, headers: dict[str, str] | None = None) -> httpx.Response:
        """POST a JSON-RPC body (a dict, or raw bytes sent as-is) to the gateway's root."""
        hdrs = {"content-type": "application/json", **(headers or {})}
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        return self.http.post(self.gateway.url + "/", content=content, headers=hdrs)

    def rpc_calls(self) -> list[Any]:
        """Requests the worker received other than Agent Card fetches."""
        return [r for r in self.worker.requests if "/.well-known/" not in r.path]

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0 when none)."""
        total = 0.0
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def stream(self, body: Any, *, headers: dict[str, str] | None = None) -> tuple[httpx.Response, bytes]:
        """POST a streaming JSON-RPC request; return the response and its whole raw body."""
        hdrs = {"content-type": "application/json", "accept": "text/event-stream", **(headers or {})}
        with self.http.stream("POST", self.gateway.url + "/", content=orjson.dumps(body), headers=hdrs) as r:
            raw = b"".join(r.iter_raw())
        return r, raw

    def rest(self, method: str, path: str, *, json: Any = None, content: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[httpx.Response, bytes]:
        """Send a REST request (``json``: a body to encode, ``content``: raw bytes) to the
        gateway's ``path``; return the response and its whole raw body (an SSE stream included)."""
        hdrs = dict(headers or {})
        if json is not None:
            content = orjson.dumps(json)
        if content is not None:
            hdrs.setdefault("content-type", "application/json")
        with self.http.stream(method, self.gateway.url + path, content=content, headers=hdrs) as r:
            raw = b"".join(r.iter_raw())
        return r, raw

    def divergences(self, kind: str) -> float:
        """``a2a_gateway_divergences_total`` for one kind, all upstreams and actions."""
        return self.metric("a2a_gateway_divergences_total", kind=kind)


def frames(raw: bytes) -> list[dict[str, Any]]:
    """Split an SSE body into frames: ``{"event": name|None, "data": parsed JSON|str,
    "comment": text|None}``. Independent of the gateway's decoder; expects LF framing."""
    out: list[dict[str, Any]] = []
    for block in raw.split(b"\n\n"):
        if not block.strip():
            continue
        frame: dict[str, Any] = {"event": None, "data": None, "comment": None}
        data_lines = []
        for line in block.split(b"\n"):
            if line.startswith(b":"):
                frame["comment"] = line[1:].strip().decode()
            elif line.startswith(b"data:"):
                data_lines.append(line[5:].removeprefix(b" "))
            elif line.startswith(b"event:"):
                frame["event"] = line[6:].strip().decode()
        if data_lines:
            text = b"\n".join(data_lines)
            try:
                frame["data"] = orjson.loads(text)
            except orjson.JSONDecodeError:
                frame["data"] = text.decode()
        out.append(frame)
    return out


def _config(worker_url: str, **overrides: Any) -> Any:
    upstream = {"name": "worker", "url": worker_url, "prefix": "/", **overrides.pop("upstream", {})}
    doc: dict[str, Any] = {
        "mode": overrides.pop("mode", "enforce"),
        "upstreams": [upstream],
        "limits": overrides.pop("limits", {}),
        "ledger": overrides.pop("ledger", {"url": "memory"}),
        **overrides,
    }
    return parse_config(doc)


@pytest.fixture
def make_harness() -> Iterator[Any]:
    """``make_harness(mode=..., limits=..., upstream=...)`` → a running :class:`Harness`."""
    stack: list[Any] = []

    def factory(*, upstream_path: str = "/", card: dict[str, Any] | None = None,
                gateway_card: dict[str, Any] | None = None, **overrides: Any) -> Harness:
        """``upstream_path``: the path of the worker URL the mount points at; ``card``: the
        worker's Agent Card (served at that path's well-known URL before the gateway starts);
        ``gateway_card``: the config's top-level ``card`` section (``card.signing``)."""
        if gateway_card is not None:
            overrides["card"] = gateway_card
        worker = ScriptedWorker()
        if card is not None:
            worker.default_card = None
            worker.on_path("GET", upstream_path.rstrip("/") + "/.well-known/agent-card.json",
                           json_body=card, times=None)
        wctx = serve_in_thread(worker, name="worker")
        wsrv = wctx.__enter__()
        stack.append(wctx)
        registry = CollectorRegistry()
        app = build_app(_config(wsrv.url + upstream_path, **overrides), registry=registry)
        gctx = serve_gateway(app)
        gsrv, asrv = gctx.__enter__()
        stack.append(gctx)
        http = httpx.Client(trust_env=False, timeout=10)
        stack.append(http)
        harness = Harness(worker, gsrv, asrv, registry, http)
        # the start-up card fetch runs in the background: tests begin once it has ended
        wait_until(lambda: harness.metric("a2a_gateway_card_fetches_total") >= 1,
                   message="the start-up card fetch")
        return harness

    yield factory
    for item in reversed(stack):
        if isinstance(item, httpx.Client):
            item.close()
        else:
            item.__exit__(None, None, None)


@pytest.fixture
def h(make_harness: Any) -> Harness:
    """A default harness: enforce mode, default limits."""
    return make_harness()


def on_client_writes(monkeypatch: pytest.MonkeyPatch, record: Any) -> None:
    """Call ``record(body)`` for every non-empty body write the gateway's driver makes to a
    client, in order (wraps :class:`gateway.proxy.driver.Driver`'s ``client_send``)."""
    from gateway.proxy.driver import Driver

    real_init = Driver.__init__

    def init(self: Driver, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        send = self.client_send

        async def logged(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                record(message["body"])
            await send(message)

        self.client_send = logged

    monkeypatch.setattr(Driver, "__init__", init)


@pytest.fixture
def gateway_warnings() -> Iterator[Callable[[str], list[logging.LogRecord]]]:
    """``gateway_warnings(event)``: the WARNING records of that event the gateway logged since
    the test began (the handler is on before any harness starts, so start-up lines count)."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect(logging.WARNING)
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(handler)
    try:
        yield lambda event: [r for r in records if r.getMessage() == event]
    finally:
        logger.removeHandler(handler)
