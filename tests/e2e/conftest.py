"""End-to-end fixtures: the real a2a-sdk demo worker and the gateway under real uvicorn.

Topology (all on 127.0.0.1, ephemeral ports, one pair per test module)::

    a2a-sdk client / httpx  ──►  gateway (build_app, sidecar, enforce)  ──►  RecordingApp(demo worker)

* The worker is built with a placeholder public URL (its port is not known before it is
  served); clients never trust card URLs anyway — :func:`demo.client.rewrite_card_urls`
  re-roots them onto the gateway URL.
* :class:`RecordingApp` wraps the worker ASGI app and records every HTTP request the worker
  receives (headers, body, whether the app saw ``http.disconnect``), so tests can assert what
  the gateway forwarded without touching gateway internals.
* Every test gets its own httpx client carrying a unique ``x-e2e-trace`` header; the
  recorder filters on it, so records of other tests never leak into assertions.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from a2a.client import Client, ClientConfig, create_client
from a2a.types import AgentCard

from demo.client import fetch_card, restrict_card_to_version, rewrite_card_urls
from demo.worker import build_worker_app
from gateway.app import build_app
from gateway.config import sidecar_config
from tests.support.gateway import serve_gateway
from tests.support.servers import RunningServer, serve_in_thread

#: Advertised by the worker card; never reachable, so a client that failed to rewrite the
#: card URLs onto the gateway fails loudly instead of silently bypassing the gateway.
PLACEHOLDER_PUBLIC_URL = "http://worker.invalid:1/"
TRACE_HEADER = "x-e2e-trace"
UPSTREAM_NAME = "worker"


# --------------------------------------------------------------------------- worker recorder


@dataclass
class SeenRequest:
    """One HTTP request as the worker app received it."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytearray = field(default_factory=bytearray)
    disconnected: bool = False

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or ``None``."""
        values = self.header_values(name)
        return values[0] if values else None

    def header_values(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k == name]

    @property
    def header_names(self) -> set[str]:
        return {k for k, _ in self.headers}

    @property
    def json(self) -> Any:
        try:
            return json.loads(bytes(self.body))
        except ValueError:
            return None

    @property
    def rpc_method(self) -> str | None:
        doc = self.json
        return doc.get("method") if isinstance(doc, dict) else None


class RecordingApp:
    """ASGI wrapper recording every HTTP request reaching the wrapped app.

    Lifespan and other scope types pass straight through. The body is captured as the app
    reads it; ``disconnected`` turns true when the app's ``receive()`` returns
    ``http.disconnect`` (sse-starlette listens for it while a stream is open).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._seen: list[SeenRequest] = []

    def __getattr__(self, name: str) -> Any:  # expose .state etc. of the wrapped app
        return getattr(self.app, name)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen = SeenRequest(
            method=scope["method"],
            path=scope["path"],
            headers=[(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]],
        )
        with self._lock:
            self._seen.append(seen)

        async def recording_receive() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                seen.body.extend(message.get("body", b""))
            elif message["type"] == "http.disconnect":
                seen.disconnected = True
            return message

        await self.app(scope, recording_receive, send)

    def requests(self, trace: str | None = None) -> list[SeenRequest]:
        """Requests seen so far, optionally only those carrying ``x-e2e-trace: trace``."""
        with self._lock:
            seen = list(self._seen)
        if trace is None:
            return seen
        return [r for r in seen if r.header(TRACE_HEADER) == trace]


# --------------------------------------------------------------------------- metrics


class MetricsScrape:
    """One parsed ``/metrics`` scrape: ``value(sample_name, **labels)``."""

    def __init__(self, text: str) -> None:
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples.append((sample.name, dict(sample.labels), float(sample.value)))

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples named ``name`` whose labels include ``labels`` (0 if none)."""
        return sum(
            v
            for n, lbls, v in self.samples
            if n == name and all(lbls.get(k) == want for k, want in labels.items())
        )


@dataclass
class Stack:
    """The running worker + gateway pair; ``gateway_admin``: the gateway's admin listener
    (``/metrics``, ``/healthz``, ``/readyz``)."""

    worker: RunningServer
    gateway: RunningServer
    gateway_admin: RunningServer
    recorder: RecordingApp
    registry: CollectorRegistry

    @property
    def gateway_base(self) -> str:
        """Gateway URL with a trailing slash (the agent root clients use)."""
        return self.gateway.url + "/"

    async def ledger_record(self, task_id: str) -> Any:
        """The gateway ledger's record of ``task_id`` (read on the gateway's own loop)."""
        ledger = self.gateway.app.state.runtime.ledger
        assert self.gateway.loop is not None
        future = asyncio.run_coroutine_threadsafe(ledger.get(UPSTREAM_NAME, task_id), self.gateway.loop)
        stored = await asyncio.wrap_future(future)
        return None if stored is None else stored.record

    async def scrape(self) -> MetricsScrape:
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
            resp = await http.get(self.gateway_admin.url_for("/metrics"))
        resp.raise_for_status()
        return MetricsScrape(resp.text)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Real uvicorn servers: the demo worker (recorded) and the gateway in front of it, with the
    gateway's default embedded SQLite ledger in a temporary directory."""
    recorder = RecordingApp(build_worker_app(PLACEHOLDER_PUBLIC_URL))
    ledger_url = f"sqlite:///{tmp_path_factory.mktemp('ledger')}/ledger.db"
    with serve_in_thread(recorder, name="e2e-worker") as worker:
        config = sidecar_config(worker.url, host="127.0.0.1", port=0, mode="enforce",
                                name=UPSTREAM_NAME, ledger=ledger_url)
        # the tracked-task gauge is refreshed in the background: often, so tests can poll it
        config = config.model_copy(update={"admin": config.admin.model_copy(
            update={"tracked_refresh_seconds": 0.05})})
        assert config.mode == "enforce"
        registry = CollectorRegistry()
        gateway_app = build_app(config, registry=registry)
        with serve_gateway(gateway_app, name="e2e-gateway") as (gateway, admin):
            yield Stack(worker=worker, gateway=gateway, gateway_admin=admin, recorder=recorder,
                        registry=registry)


@pytest.fixture
def trace() -> str:
    """A per-test marker sent as ``x-e2e-trace`` on every request of the test."""
    return uuid.uuid4().hex


@pytest.fixture
async def http(trace: str) -> AsyncIterator[httpx.AsyncClient]:
    """The test's httpx client (shared by its SDK clients; tagged with the trace header)."""
    async with httpx.AsyncClient(
        trust_env=False, timeout=httpx.Timeout(20.0, connect=5.0), headers={TRACE_HEADER: trace}
    ) as client:
        yield client


@pytest.fixture
async def card(stack: Stack, http: httpx.AsyncClient) -> AgentCard:
    """The worker's card fetched THROUGH the gateway, URLs re-rooted onto the gateway."""
    fetched = await fetch_card(http, stack.gateway_base)
    rewritten = rewrite_card_urls(fetched, stack.gateway_base)
    for iface in rewritten.supported_interfaces:
        assert iface.url.startswith(stack.gateway_base), iface.url
    return rewritten


async def _client(card: AgentCard, http: httpx.AsyncClient, *, streaming: bool) -> Client:
    return await create_client(
        card,
        ClientConfig(streaming=streaming, supported_protocol_bindings=["JSONRPC"], httpx_client=http),
    )


@pytest.fixture
async def blocking(card: AgentCard, http: httpx.AsyncClient) -> AsyncIterator[Client]:
    """v1.0 JSON-RPC SDK client, non-streaming (SendMessage)."""
    client = await _client(card, http, streaming=False)
    yield client
    await client.close()


@pytest.fixture
async def streaming(card: AgentCard, http: httpx.AsyncClient) -> AsyncIterator[Client]:
    """v1.0 JSON-RPC SDK client, streaming (SendStreamingMessage / SubscribeToTask)."""
    client = await _client(card, http, streaming=True)
    yield client
    await client.close()


@pytest.fixture
def v03_card(card: AgentCard) -> AgentCard:
    """The card restricted to its JSON-RPC 0.3 interface (so the factory builds a compat client)."""
    return restrict_card_to_version(card, "JSONRPC", "0.3")
