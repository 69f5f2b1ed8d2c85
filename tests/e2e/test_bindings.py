"""Both guarded bindings end to end with genuine peers: every request reaches the gateway.

The issue's "done when": a2a-sdk 1.3 (``py13``) and @a2a-js/sdk 1.3 (``js13``) clients, each
following the Agent Card the gateway serves (nothing pins them to a URL), over JSON-RPC and
over REST (HTTP+JSON), against the a2a-sdk 1.3 demo worker and the @a2a-js/sdk 1.3 worker (its
card as shipped, ``signatures: []``), behind a sidecar gateway and behind one shared gateway
that mounts both workers at two prefixes — send, stream, get, list, cancel, subscribe.

Topologies (all real uvicorn on 127.0.0.1, ephemeral ports, built once per module; each
gateway has its own SQLite ledger in a temporary directory)::

    sidecar-py:  peer ─► gateway  /     ─► RecordingApp(demo worker)
    sidecar-js:  peer ─► gateway  /     ─► RecordingApp(RecordingProxy) ─► worker13.mjs
    shared:      peer ─► gateway  /py/  ─► RecordingApp(demo worker)        (the same two
                                  /js/  ─► RecordingApp(RecordingProxy) ─► worker13.mjs   workers)

The JS worker is its own node process; a transparent streaming reverse proxy in front of it
(:class:`RecordingProxy`) lets the test see what reached it exactly as
:class:`~tests.e2e.conftest.RecordingApp` does for the in-process demo worker.

One cell of the matrix — client × transport × worker × topology — runs one scenario in one
peer process (:data:`STEPS`): send (completes), stream (completes), get, list, stream a
``slow`` task until WORKING, resubscribe until WORKING, cancel, get (CANCELED), and a
follow-up send to the canceled task, which the gateway refuses itself. It asserts:

* the peer followed the served card: its ``client`` line names the binding asked for and an
  endpoint under the gateway mount, and every HTTP exchange it made went to that mount;
* what the peer got: the states of every step, the refusal as the SDK surfaces it (-32004,
  REST reason ``UNSUPPORTED_OPERATION``) with the gateway's message;
* every request reached the gateway: ``a2a_gateway_requests_total`` grew, for that upstream
  and that binding, by exactly the peer's operations per method (and by its card GETs as
  ``binding="http", method="card"``), the other binding not at all; the refusal is counted as
  a ``terminal_task`` local rejection;
* nothing reached the worker but through the gateway: the worker saw exactly the peer's
  operations minus the refused one, in order, each carrying the gateway's
  ``X-Forwarded-For`` / ``X-Forwarded-Host``, and nothing else in the meantime;
* the gateway tracked the tasks (REST ones too): its ledger holds the three tasks with their
  states and context, and ``a2a_gateway_tracked_tasks`` grew by them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client import CollectorRegistry

from demo.worker import build_worker_app
from gateway.app import build_app
from gateway.config import parse_config
from tests.e2e.conftest import (
    PLACEHOLDER_PUBLIC_URL,
    TRACE_HEADER,
    MetricsScrape,
    RecordingApp,
    SeenRequest,
)
from tests.support.gateway import serve_gateway
from tests.support.peers import PeerRun, js_worker, run_peer
from tests.support.servers import RunningServer, await_until, serve_in_thread

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # the first cell may install the peers

JSONRPC, REST = "JSONRPC", "HTTP+JSON"
BINDING_LABEL = {JSONRPC: "jsonrpc", REST: "rest"}
CARD_PATH = ".well-known/agent-card.json"
PEER_TIMEOUT = 30.0  # seconds a peer may take for the whole scenario
COUNT_TIMEOUT = 10.0  # seconds for the gateway to count a request whose client went away

SUBMITTED, WORKING, COMPLETED, CANCELED = (
    "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED", "TASK_STATE_CANCELED")

REQUESTS = "a2a_gateway_requests_total"
REJECTIONS = "a2a_gateway_local_rejections_total"
TRACKED = "a2a_gateway_tracked_tasks"

# step indexes of the scenario
SEND, STREAM, GET_DONE, LIST, SLOW, SUBSCRIBE, CANCEL, GET_CANCELED, FOLLOW_UP = range(9)


def scenario(context_id: str) -> list[dict[str, Any]]:
    """The steps of one cell; every new task is started in ``context_id`` so ``list`` can
    filter on it (the workers are shared by all cells)."""
    return [
        {"op": "send", "text": "hi", "contextId": context_id},
        {"op": "stream", "text": "stream me", "contextId": context_id},
        {"op": "get"},  # the streamed task
        {"op": "list", "contextId": context_id},
        {"op": "stream", "text": "slow one", "contextId": context_id, "until": WORKING},
        {"op": "resubscribe", "sameTask": True, "until": WORKING},
        {"op": "cancel"},
        {"op": "get"},
        {"op": "send", "text": "one more thing", "sameTask": True},
    ]


#: The A2A method (the gateway's ``method`` label) of each step.
STEP_METHODS = ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "SendStreamingMessage",
                "SubscribeToTask", "CancelTask", "GetTask", "SendMessage"]


def rest_path(step: int, task_id: str) -> tuple[str, str]:
    """(HTTP method, path below the REST root) of step ``step`` over HTTP+JSON."""
    return {
        SEND: ("POST", "/message:send"),
        STREAM: ("POST", "/message:stream"),
        GET_DONE: ("GET", f"/tasks/{task_id}"),
        LIST: ("GET", "/tasks"),
        SLOW: ("POST", "/message:stream"),
        SUBSCRIBE: ("POST", f"/tasks/{task_id}:subscribe"),
        CANCEL: ("POST", f"/tasks/{task_id}:cancel"),
        GET_CANCELED: ("GET", f"/tasks/{task_id}"),
        FOLLOW_UP: ("POST", "/message:send"),
    }[step]


# --------------------------------------------------------------------------- the JS worker's recorder

_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
})


class RecordingProxy:
    """A transparent streaming reverse proxy to ``base`` (the JS worker), to be wrapped in a
    :class:`RecordingApp`: the request is relayed as received (hop-by-hop headers aside), the
    response streamed back chunk by chunk as the worker writes it; when the caller goes away
    the upstream request is closed too."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(60.0, connect=5.0))
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if self._client is not None:
                        await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert scope["type"] == "http" and self._client is not None
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            if not message.get("more_body"):
                break
        query = scope.get("query_string", b"").decode("latin-1")
        url = self.base + scope.get("raw_path", scope["path"].encode()).decode("latin-1").split("?")[0]
        headers = [(k, v) for k, v in scope["headers"] if k.decode("latin-1").lower() not in _HOP_BY_HOP]
        request = self._client.build_request(scope["method"], url + (f"?{query}" if query else ""),
                                             headers=headers, content=bytes(body))
        response = await self._client.send(request, stream=True)
        try:
            relay = asyncio.ensure_future(self._relay(response, send))
            gone = asyncio.ensure_future(self._disconnected(receive))
            await asyncio.wait({relay, gone}, return_when=asyncio.FIRST_COMPLETED)
            for task in (relay, gone):
                task.cancel()
            for task in (relay, gone):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            await response.aclose()

    @staticmethod
    async def _relay(response: httpx.Response, send: Any) -> None:
        headers = [(k, v) for k, v in response.headers.raw if k.decode("latin-1").lower() not in _HOP_BY_HOP]
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _disconnected(receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass


# --------------------------------------------------------------------------- topologies


@dataclass
class Worker:
    kind: str  # "py" | "js"
    server: RunningServer  # what the gateway's upstream URL names
    recorder: RecordingApp  # every request that reached the worker


@dataclass
class Mount:
    """One worker as a client reaches it: a gateway, the upstream name, the mount prefix."""

    topology: str
    gateway: RunningServer
    admin: RunningServer  # the gateway's admin listener (/metrics)
    upstream: str
    prefix: str  # "/" or "/py/"
    worker: Worker

    @property
    def base(self) -> str:
        """The mount's public URL, with a trailing slash."""
        return self.gateway.url + self.prefix

    @property
    def card_url(self) -> str:
        return self.base + CARD_PATH

    async def scrape(self) -> MetricsScrape:
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
            resp = await http.get(self.admin.url_for("/metrics"))
        resp.raise_for_status()
        return MetricsScrape(resp.text)

    async def ledger_record(self, task_id: str) -> Any:
        """The gateway ledger's record of ``task_id`` for this upstream (read on its own loop)."""
        ledger = self.gateway.app.state.runtime.ledger
        assert self.gateway.loop is not None
        future = asyncio.run_coroutine_threadsafe(ledger.get(self.upstream, task_id), self.gateway.loop)
        stored = await asyncio.wrap_future(future)
        return None if stored is None else stored.record


def _gateway(name: str, mounts: list[tuple[str, str, Worker]], ledger_dir: Path) -> Any:
    config = parse_config({
        "listen": {"host": "127.0.0.1", "port": 0},
        "mode": "enforce",
        "upstreams": [{"name": upstream, "url": worker.server.url + "/", "prefix": prefix}
                      for upstream, prefix, worker in mounts],
        "ledger": {"url": f"sqlite:///{ledger_dir}/{name}.db"},
        "admin": {"tracked_refresh_seconds": 0.05},  # the gauge is refreshed in the background
    })
    return serve_gateway(build_app(config, registry=CollectorRegistry()), name=name)


@pytest.fixture(scope="module")
def py_worker() -> Iterator[Worker]:
    """The a2a-sdk 1.3 demo worker, in-process, every request it receives recorded."""
    recorder = RecordingApp(build_worker_app(PLACEHOLDER_PUBLIC_URL))
    with serve_in_thread(recorder, name="bindings-py-worker") as server:
        yield Worker("py", server, recorder)


@pytest.fixture(scope="module")
def js_worker_rec() -> Iterator[Worker]:
    """The @a2a-js/sdk 1.3 worker (node), behind a recording transparent proxy."""
    with js_worker() as base:
        recorder = RecordingApp(RecordingProxy(base))
        with serve_in_thread(recorder, name="bindings-js-proxy") as server:
            yield Worker("js", server, recorder)


@pytest.fixture(scope="module")
def ledger_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bindings-ledgers")


@pytest.fixture(scope="module")
def sidecar_py(py_worker: Worker, ledger_dir: Path) -> Iterator[Mount]:
    with _gateway("sidecar-py", [("worker", "/", py_worker)], ledger_dir) as (gateway, admin):
        yield Mount("sidecar", gateway, admin, "worker", "/", py_worker)


@pytest.fixture(scope="module")
def sidecar_js(js_worker_rec: Worker, ledger_dir: Path) -> Iterator[Mount]:
    with _gateway("sidecar-js", [("worker", "/", js_worker_rec)], ledger_dir) as (gateway, admin):
        yield Mount("sidecar", gateway, admin, "worker", "/", js_worker_rec)


@pytest.fixture(scope="module")
def shared(py_worker: Worker, js_worker_rec: Worker, ledger_dir: Path) -> Iterator[dict[str, Mount]]:
    with _gateway("shared", [("py", "/py", py_worker), ("js", "/js", js_worker_rec)],
                  ledger_dir) as (gateway, admin):
        yield {"py": Mount("shared", gateway, admin, "py", "/py/", py_worker),
               "js": Mount("shared", gateway, admin, "js", "/js/", js_worker_rec)}


@pytest.fixture
def mount(request: pytest.FixtureRequest, topology: str, worker: str) -> Mount:
    """The cell's mount; the stacks are built on first use and kept for the module."""
    if topology == "sidecar":
        return request.getfixturevalue(f"sidecar_{worker}")
    return request.getfixturevalue("shared")[worker]


# --------------------------------------------------------------------------- checks


def deltas(before: MetricsScrape, after: MetricsScrape, name: str, by: tuple[str, ...] = ("binding", "method"),
           **labels: str) -> dict[tuple[str, ...], float]:
    """Increase of counter ``name`` for the samples matching ``labels``, keyed by the values of
    the labels ``by`` (only the keys that grew)."""
    keys = {tuple(lbl.get(k, "") for k in by) for n, lbl, _ in after.samples
            if n == name and all(lbl.get(k) == v for k, v in labels.items())}
    out = {}
    for key in keys:
        selected = {**labels, **dict(zip(by, key, strict=True))}
        grew = after.value(name, **selected) - before.value(name, **selected)
        if grew:
            out[key] = grew
    return out


def wanted_counts(run: PeerRun, binding: str) -> dict[tuple[str, str], float]:
    """What the gateway must have counted: each step's method once, on ``binding``, and each
    card GET the peer made (``binding="http", method="card"``)."""
    want: dict[tuple[str, str], float] = {}
    for method in STEP_METHODS:
        want[(binding, method)] = want.get((binding, method), 0) + 1
    cards = [w for w in run.of("wire") if w.get("index") is None and w["url"].endswith(CARD_PATH)]
    if cards:
        want[("http", "card")] = len(cards)
    return want


def refusal(run: PeerRun) -> tuple[Any, Any, Any]:
    """(code, reason, message) of what the SDK raised in the follow-up step."""
    (error,) = run.errors(FOLLOW_UP)
    node: dict[str, Any] | None = error
    code = reason = message = None
    while node is not None:  # JS errors may wrap the A2A error in their cause chain
        code = code if code is not None else node.get("code")
        reason = reason if reason is not None else node.get("reason")
        message = message if message is not None else node.get("message")
        node = node.get("cause")
    return code, reason, message or error.get("text")


def worker_saw(records: list[SeenRequest], transport: str) -> list[tuple[str, ...]]:
    """What reached the worker: (verb, path, JSON-RPC method), or REST (verb, path below
    ``/rest``)."""
    if transport == JSONRPC:
        return [(r.method, r.path, r.rpc_method or "<no JSON-RPC method>") for r in records]
    return [(r.method, r.path.removeprefix("/rest") if r.path.startswith("/rest/") else r.path)
            for r in records]


async def poll(probe: Callable[[], Any], want: Any, what: str) -> Any:
    """Poll the async ``probe()`` until it returns ``want``; fail with its last value."""
    last: list[Any] = [None]

    async def ok() -> bool:
        last[0] = await probe()
        return last[0] == want

    try:
        await await_until(ok, timeout=COUNT_TIMEOUT, interval=0.05)
    except AssertionError:
        raise AssertionError(f"{what}: want {want!r}, got {last[0]!r}") from None
    return last[0]


# --------------------------------------------------------------------------- the matrix

#: Cells that fail because of a gateway bug: (client, transport, worker, topology) -> reason.
GATEWAY_BUGS: dict[tuple[str, str, str, str], str] = {}


def _cells() -> list[Any]:
    cells = []
    for topology in ("sidecar", "shared"):
        for worker in ("py", "js"):
            for transport in (JSONRPC, REST):
                for client in ("py13", "js13"):
                    key = (client, transport, worker, topology)
                    marks = [pytest.mark.xfail(strict=True, reason=GATEWAY_BUGS[key])] if key in GATEWAY_BUGS else []
                    label = f"{topology}-{worker}worker-{BINDING_LABEL[transport]}-{client}"
                    cells.append(pytest.param(client, transport, worker, topology, id=label, marks=marks))
    return cells


@pytest.mark.parametrize(("client", "transport", "worker", "topology"), _cells())
async def test_every_request_reaches_the_gateway(
    mount: Mount, client: str, transport: str, worker: str, topology: str
) -> None:
    """One cell: the scenario of :func:`scenario` by a genuine ``client`` following the card of
    ``mount`` over ``transport``; see the module docstring for what is asserted."""
    trace = uuid.uuid4().hex
    context_id = f"ctx-{trace[:12]}"
    binding = BINDING_LABEL[transport]
    other = BINDING_LABEL[REST if transport == JSONRPC else JSONRPC]
    recorder = mount.worker.recorder
    seen_before = len(recorder.requests())
    before = await mount.scrape()

    run = await run_peer(client, mount.card_url, scenario(context_id), timeout=PEER_TIMEOUT,
                         headers={TRACE_HEADER: trace}, transport=transport)

    where = run.transcript()
    assert run.done and not run.timed_out and run.returncode == 0, where

    # ---- the peer followed the card the gateway served, to this mount, on this binding
    line = run.client
    assert (line["requestedTransport"], line["transport"]) == (transport, transport), where
    endpoint = str(line["endpoint"]).rstrip("/")
    assert endpoint == (mount.base.rstrip("/") if transport == JSONRPC else mount.base + "rest"), where
    for exchange in run.of("wire"):
        assert exchange["url"].startswith(mount.base), f"an exchange bypassed the mount: {exchange['url']}\n{where}"
    for step in range(len(STEP_METHODS)):
        assert len(run.wire(step)) == 1, f"step {step} made {len(run.wire(step))} HTTP exchanges\n{where}"
    before_steps = [w for w in run.of("wire") if w.get("index") is None]  # the factory's own exchanges
    cards = [w for w in before_steps if w["url"] == mount.card_url and w["status"] == 200]
    assert cards and len(cards) == len(before_steps), where
    for exchange in cards:  # the card it followed: the gateway's, unsigned as the worker shipped it
        served = json.loads(exchange["body"])
        assert [(i["protocolBinding"], i["url"].rstrip("/")) for i in served["supportedInterfaces"]
                if i.get("protocolVersion") == "1.0"] == [
            (JSONRPC, mount.base.rstrip("/")), (REST, mount.base + "rest")], served["supportedInterfaces"]
        if worker == "js":
            assert served["signatures"] == [], served.get("signatures")

    # ---- what the peer got, step by step
    for step in (SEND, STREAM, GET_DONE, LIST, CANCEL, GET_CANCELED):
        assert run.outcome(step) == "ended", f"step {step}: {run.errors(step)}\n{where}"
    for step in (SLOW, SUBSCRIBE):
        assert run.outcome(step) == "stopped", f"step {step} did not reach WORKING: {run.errors(step)}\n{where}"
    (sent,) = run.events(SEND)
    assert (sent["kind"], sent["state"], sent["contextId"]) == ("task", COMPLETED, context_id), where
    streamed = run.events(STREAM)
    assert [e["kind"] for e in streamed] == ["task", "statusUpdate", "artifactUpdate", "statusUpdate"], where
    assert [e.get("state") for e in streamed] == [SUBMITTED, WORKING, None, COMPLETED], where
    stream_tid = streamed[0]["taskId"]
    assert {e["taskId"] for e in streamed} == {stream_tid} and stream_tid != sent["taskId"], where
    (got,) = run.events(GET_DONE)
    assert (got["taskId"], got["state"]) == (stream_tid, COMPLETED), where
    listed = {e["taskId"]: e["state"] for e in run.events(LIST)}
    assert listed == {sent["taskId"]: COMPLETED, stream_tid: COMPLETED}, where
    slow = run.events(SLOW)
    slow_tid = slow[0]["taskId"]
    assert slow[-1]["state"] == WORKING and {e["taskId"] for e in slow} == {slow_tid}, where
    resubscribed = run.events(SUBSCRIBE)
    assert resubscribed[-1]["state"] == WORKING and {e["taskId"] for e in resubscribed} == {slow_tid}, where
    (canceled,) = run.events(CANCEL)
    assert (canceled["taskId"], canceled["state"]) == (slow_tid, CANCELED), where
    (got,) = run.events(GET_CANCELED)
    assert (got["taskId"], got["state"]) == (slow_tid, CANCELED), where

    # ---- the follow-up to the canceled task: refused by the gateway, surfaced by the SDK
    assert run.outcome(FOLLOW_UP) == "error" and run.events(FOLLOW_UP) == [], where
    code, reason, message = refusal(run)
    if client == "js13" and transport == REST:
        assert reason == "UNSUPPORTED_OPERATION", f"js13 over REST surfaced {reason!r}\n{where}"
    else:
        assert code == -32004, f"{client} surfaced code {code!r}\n{where}"
    assert slow_tid in str(message) and "new task" in str(message), f"not the gateway's message: {message!r}\n{where}"

    # ---- every request reached the gateway: counted per binding and method for this upstream
    want = wanted_counts(run, binding)
    assert ("http", "card") in want, f"{client} fetched no card through the gateway\n{where}"

    async def counted() -> dict[tuple[str, str], float]:
        return deltas(before, await mount.scrape(), REQUESTS, upstream=mount.upstream)

    after_counts = await poll(counted, want, f"{REQUESTS} increase for upstream {mount.upstream}")
    assert not any(b == other for b, _ in after_counts), after_counts
    after = await mount.scrape()
    assert deltas(before, after, REJECTIONS, by=("method", "reason"), upstream=mount.upstream) == {
        ("SendMessage", "terminal_task"): 1}, "the follow-up was not refused by the gateway as terminal_task"
    assert (after.value(REQUESTS, upstream=mount.upstream, binding=binding, method="SendMessage", outcome="rejected")
            - before.value(REQUESTS, upstream=mount.upstream, binding=binding, method="SendMessage",
                           outcome="rejected")) == 1

    # ---- nothing reached the worker but through the gateway; the refused follow-up never did
    window = recorder.requests()[seen_before:]
    traced = [r for r in window if r.header(TRACE_HEADER) == trace]
    strays = [(r.method, r.path, r.header(TRACE_HEADER)) for r in window if r.header(TRACE_HEADER) != trace
              and not (r.method == "GET" and r.path == "/" + CARD_PATH and r.header(TRACE_HEADER) is None)]
    # (the gateway's own card revalidation, untraced, is the one thing allowed in between)
    assert strays == [], f"requests reached the worker meanwhile that were not this peer's: {strays}"
    gateway_host = urlsplit(mount.gateway.url).netloc
    for record in traced:
        assert record.header("x-forwarded-for") == "127.0.0.1", (record.method, record.path, record.headers)
        assert record.header("x-forwarded-host") == gateway_host, (record.method, record.path, record.headers)
    if transport == JSONRPC:
        expected = [("POST", "/", m) for m in STEP_METHODS[:FOLLOW_UP]]
    else:
        expected = [rest_path(step, stream_tid if step == GET_DONE else slow_tid) for step in range(FOLLOW_UP)]
    assert worker_saw(traced, transport) == expected, where

    # ---- the gateway tracked the tasks, whichever binding carried them
    for task_id, state in ((sent["taskId"], COMPLETED), (stream_tid, COMPLETED), (slow_tid, CANCELED)):
        record = await mount.ledger_record(task_id)
        assert record is not None, f"the gateway's ledger does not hold task {task_id} ({transport})"
        assert (record.state.value, record.context_id) == (state, context_id), record

    async def tracked_grew() -> bool:  # the gauge is refreshed in the background
        now = await mount.scrape()
        return (now.value(TRACKED, state=COMPLETED) - before.value(TRACKED, state=COMPLETED),
                now.value(TRACKED, state=CANCELED) - before.value(TRACKED, state=CANCELED)) == (2, 1)

    await await_until(tracked_grew, timeout=5.0, message=f"tracked tasks +2 completed, +1 canceled ({transport})")
