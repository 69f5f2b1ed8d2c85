"""The version bridge end to end with genuine SDK peers (docs/bridge.md §3).

The issue's "done when": a v0.3-only client (``py03``: a2a-sdk 0.3, ``js03``: @a2a-js/sdk
0.3.14) reaches the v1.0-only @a2a-js/sdk 1.3 worker (:func:`js_worker`), and a v1.0 client
(``py13``: a2a-sdk 1.3, ``js13``: @a2a-js/sdk 1.3) reaches the v0.3-only workers
(:func:`js_worker03`, :func:`py_worker03`), each over JSON-RPC and over REST (HTTP+JSON), each
following the Agent Card the gateway serves — nothing pins a client to a URL.

Topology (real uvicorn on 127.0.0.1, ephemeral ports, built once per module; one gateway, one
SQLite ledger in a temporary directory)::

    peer ─► gateway /v10/  ─► RecordingApp(RecordingProxy) ─► worker13.mjs   (v1.0 only)
                    /js03/ ─► RecordingApp(RecordingProxy) ─► worker03.mjs   (v0.3 only)
                    /py03/ ─► RecordingApp(RecordingProxy) ─► worker03.py    (v0.3 only)

One cell — client × binding × worker — runs three peer processes:

* **A**, the main scenario (:func:`scenario`): a blocking send (completed); a non-blocking send
  (``blocking: false``) and a get of that task; a streaming send (submitted, working, artifact,
  completed; ``final`` on the last status-update only for v0.3 clients); a get of it; a ``slow``
  stream left once working, cancelled, got (canceled); a follow-up send to that canceled task,
  which the gateway refuses in the client's own version's form; and a non-blocking send of a
  ``slow`` task, which answers at once with a live task (a blocking one would never answer);
* **B**, in the background, resubscribes to that live ``slow`` task; a v1.0 client's stream
  starts with the Task, also from a v0.3 worker, whose ``tasks/resubscribe`` does not send it
  (a2a-sdk 0.3): the gateway gets it with a ``tasks/get`` first (docs/bridge.md §3.2, issue #27);
* **C**, once the worker counts B's resubscription (its ``/_peer/joins`` route, not A2A),
  cancels it and gets the non-blocking task of A again — then B's stream has ended canceled.
  If that task is still not completed, further ``get`` runs follow (bounded), no sleeps.

Each cell asserts:

* the card the peer followed is the gateway's and in the client's version (v0.3: ``url``,
  ``protocolVersion`` 0.3, ``additionalInterfaces``, no ``supportedInterfaces``; v1.0:
  ``supportedInterfaces`` all ``protocolVersion`` 1.0), every URL in it at the gateway mount;
  the ``client`` line names the binding asked for and the mount's endpoint for it; every HTTP
  exchange of the peer went to the mount;
* what the peer got, step by step, in its own version's spelling;
* the refusal: v0.3 JSON-RPC -32004; v0.3 REST HTTP 400 with ``{code, message, type}``; v1.0
  JSON-RPC -32004; v1.0 REST HTTP 400 with the ErrorInfo reason ``UNSUPPORTED_OPERATION``;
* what reached the worker was in the **worker's** version: the JSON-RPC method names of that
  version (``A2A-Version: 1.0`` on every request to the v1.0 worker, no ``A2A-Version`` to a
  v0.3 one), REST paths without / with ``/v1``, the non-blocking flag as that version spells it
  (``returnImmediately: true`` / ``blocking: false``) — every operation of the peers but the
  refused one, in order, with the gateway's own ``GetTask`` before a v1.0 client's resubscribe
  to a v0.3 worker, and nothing else carrying the cell's trace;
* ``a2a_gateway_bridged_requests_total{upstream, binding, client_version, worker_version}``
  grew by the number of A2A requests the peers made (and no other series of it grew);
* the gateway's ledger holds every task of the cell in its terminal state.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.app import build_app
from gateway.config import parse_config
from tests.e2e.conftest import TRACE_HEADER, MetricsScrape, RecordingApp, SeenRequest
from tests.e2e.test_bindings import RecordingProxy, deltas
from tests.support.gateway import serve_gateway
from tests.support.peers import PEERS, PeerRun, js_worker, js_worker03, py_worker03, run_peer
from tests.support.servers import RunningServer, await_until, serve_in_thread
from tests.support.sse_frames import parse_sse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # the first cell may install the peers

JSONRPC, REST = "JSONRPC", "HTTP+JSON"
BINDING_LABEL = {JSONRPC: "jsonrpc", REST: "rest"}
CARD_PATH = ".well-known/agent-card.json"
PEER_TIMEOUT = 30.0  # seconds a peer may take for its whole scenario
COUNT_TIMEOUT = 10.0  # seconds for the gateway to count a request whose client went away
POLL_RUNS = 5  # extra `get` runs at most, for the non-blocking task to show completed
BRIDGED = "a2a_gateway_bridged_requests_total"

# step indexes of the main scenario (run A)
SEND, NB_SEND, NB_GET, STREAM, GET_DONE, SLOW, CANCEL, GET_CANCELED, FOLLOW_UP, NB_SLOW = range(10)

#: the state spellings each client version's SDKs surface
STATES = {
    "0.3": {"submitted": "submitted", "working": "working", "completed": "completed", "canceled": "canceled"},
    "1.0": {"submitted": "TASK_STATE_SUBMITTED", "working": "TASK_STATE_WORKING",
            "completed": "TASK_STATE_COMPLETED", "canceled": "TASK_STATE_CANCELED"},
}
KINDS = {"0.3": ("task", "status-update", "artifact-update"), "1.0": ("task", "statusUpdate", "artifactUpdate")}

#: the JSON-RPC method each operation has in each version
RPC = {
    "1.0": {"send": "SendMessage", "stream": "SendStreamingMessage", "get": "GetTask", "cancel": "CancelTask",
            "resubscribe": "SubscribeToTask"},
    "0.3": {"send": "message/send", "stream": "message/stream", "get": "tasks/get", "cancel": "tasks/cancel",
            "resubscribe": "tasks/resubscribe"},
}


def scenario(context_id: str, version: str) -> list[dict[str, Any]]:
    """Run A's steps; every new task is started in ``context_id``."""
    working = STATES[version]["working"]
    return [
        {"op": "send", "text": "hi", "contextId": context_id},
        {"op": "send", "text": "later", "contextId": context_id, "blocking": False},
        {"op": "get"},  # the non-blocking task
        {"op": "stream", "text": "stream me", "contextId": context_id},
        {"op": "get"},  # the streamed task
        {"op": "stream", "text": "slow one", "contextId": context_id, "until": working},
        {"op": "cancel"},
        {"op": "get"},
        {"op": "send", "text": "one more thing", "sameTask": True},
        {"op": "send", "text": "slow parked", "contextId": context_id, "blocking": False},
    ]


#: run A's operations as they reach the worker (the refused follow-up never does; the last is NB_SLOW)
A_OPS = ["send", "send", "get", "stream", "get", "stream", "cancel", "get", "send"]


# --------------------------------------------------------------------------- topology


@dataclass
class Worker:
    name: str  # "v10" | "js03" | "py03": the gateway upstream and mount
    version: str  # the one version it speaks
    base: str  # the worker itself (for its /_peer/joins route only)
    server: RunningServer  # the recording proxy in front of it: the gateway's upstream URL
    recorder: RecordingApp


@dataclass
class Gateway:
    traffic: RunningServer
    admin: RunningServer

    def base(self, worker: Worker) -> str:
        """The worker's mount on the gateway, with a trailing slash."""
        return f"{self.traffic.url}/{worker.name}/"

    async def scrape(self) -> MetricsScrape:
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
            resp = await http.get(self.admin.url_for("/metrics"))
        resp.raise_for_status()
        return MetricsScrape(resp.text)

    async def ledger_record(self, upstream: str, task_id: str) -> Any:
        ledger = self.traffic.app.state.runtime.ledger
        assert self.traffic.loop is not None
        future = asyncio.run_coroutine_threadsafe(ledger.get(upstream, task_id), self.traffic.loop)
        stored = await asyncio.wrap_future(future)
        return None if stored is None else stored.record


WORKERS: dict[str, tuple[str, Callable[[], Any]]] = {
    "v10": ("1.0", js_worker), "js03": ("0.3", js_worker03), "py03": ("0.3", py_worker03)}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, dict[str, Worker]]]:
    """The three workers, each behind a recording proxy, and one gateway mounting them."""
    ledger_dir: Path = tmp_path_factory.mktemp("bridge-ledger")
    with ExitStack() as stack:
        workers: dict[str, Worker] = {}
        for name, (version, start) in WORKERS.items():
            base = stack.enter_context(start())
            recorder = RecordingApp(RecordingProxy(base))
            server = stack.enter_context(serve_in_thread(recorder, name=f"bridge-{name}-proxy"))
            workers[name] = Worker(name, version, base, server, recorder)
        config = parse_config({
            "listen": {"host": "127.0.0.1", "port": 0},
            "mode": "enforce",
            "upstreams": [{"name": w.name, "url": w.server.url + "/", "prefix": f"/{w.name}"}
                          for w in workers.values()],
            "ledger": {"url": f"sqlite:///{ledger_dir}/bridge.db"},
        })
        assert config.bridge.enabled
        traffic, admin = stack.enter_context(serve_gateway(build_app(config, registry=CollectorRegistry()),
                                                           name="bridge-gateway"))
        yield Gateway(traffic, admin), workers


# --------------------------------------------------------------------------- checks


def check_card(run: PeerRun, card_url: str, base: str, version: str) -> dict[str, Any]:
    """The card the peer fetched before its first step: the gateway's one card, the same for a
    client of either ``version`` (docs/bridge.md §2.2): both versions' interfaces at the
    gateway in ``supportedInterfaces``, and the v0.3 members."""
    where = run.transcript()
    before_steps = [w for w in run.of("wire") if w.get("index") is None]
    assert before_steps and all(w["url"] == card_url and w["status"] == 200 for w in before_steps), where
    card = json.loads(before_steps[-1]["body"])
    assert str(card["protocolVersion"]).startswith("0.3"), card
    assert card["url"].rstrip("/") == base.rstrip("/") and card.get("preferredTransport") == JSONRPC, card
    assert {(i["transport"], i["url"].rstrip("/")) for i in card["additionalInterfaces"]} == {
        (JSONRPC, base.rstrip("/")), (REST, base + "rest")}, card
    assert {(i["protocolBinding"], i["url"].rstrip("/"), i["protocolVersion"])
            for i in card["supportedInterfaces"]} == {
        (binding, url, v) for binding, url in ((JSONRPC, base.rstrip("/")), (REST, base + "rest"))
        for v in ("1.0", "0.3")}, card
    return card


def check_client(run: PeerRun, transport: str, base: str, version: str) -> None:
    where = run.transcript()
    assert run.done and not run.timed_out and run.returncode == 0, where
    line = run.client
    assert (line["requestedTransport"], line["transport"]) == (transport, transport), where
    endpoint = str(line["endpoint"]).rstrip("/")
    assert endpoint == (base.rstrip("/") if transport == JSONRPC else base + "rest"), where
    if version == "0.3":
        assert str(line["protocolVersion"]).startswith("0.3"), where
    elif run.peer == "js13":
        assert line["protocolVersion"] == "1.0", where
    for exchange in run.of("wire"):
        assert exchange["url"].startswith(base), f"an exchange bypassed the gateway: {exchange['url']}\n{where}"


def a2a_requests(runs: list[PeerRun]) -> int:
    """The A2A requests the peers made (their steps' HTTP exchanges; the card GETs are not)."""
    return sum(1 for run in runs for w in run.of("wire") if w.get("index") is not None)


def refusal(run: PeerRun, version: str, transport: str, slow_tid: str) -> None:
    """The follow-up to the canceled task: refused in the client's own version's form."""
    where = run.transcript()
    assert run.outcome(FOLLOW_UP) == "error" and run.events(FOLLOW_UP) == [], where
    (wire,) = run.wire(FOLLOW_UP)
    body = json.loads(wire["body"])
    if transport == JSONRPC:
        assert wire["status"] == 200 and body["error"]["code"] == -32004, where
        assert run.surfaced(FOLLOW_UP)[0] == -32004 or run.peer == "py13", where
        message = body["error"]["message"]
    elif version == "0.3":
        assert wire["status"] == 400, where
        assert set(body) == {"code", "message", "type"}, body
        assert (body["code"], body["type"]) == (-32004, "UnsupportedOperationError"), body
        message = body["message"]
    else:
        assert wire["status"] == 400, where
        details = body["error"]["details"]
        reasons = [d.get("reason") for d in details if str(d.get("@type", "")).endswith("google.rpc.ErrorInfo")]
        assert reasons == ["UNSUPPORTED_OPERATION"], body
        message = body["error"]["message"]
    if run.peer == "py13":
        (error,) = run.errors(FOLLOW_UP)
        assert error.get("code") == -32004, where  # the SDK's UnsupportedOperationError
    assert slow_tid in message and "new task" in message, f"not the gateway's refusal: {message!r}"


def worker_ops(records: list[SeenRequest], transport: str) -> list[tuple[str, ...]]:
    """What reached the worker: JSON-RPC (verb, path, method); REST (verb, path)."""
    if transport == JSONRPC:
        return [(r.method, r.path, r.rpc_method or "<none>") for r in records]
    return [(r.method, r.path) for r in records]


def expected_ops(ops: list[tuple[str, str | None]], transport: str, version: str,
                 subscribe: tuple[str, ...] = ("POST",)) -> list[tuple[str, ...]]:
    """``(op, task id)`` as the worker of ``version`` must have seen them; a REST resubscribe
    with the verbs ``subscribe`` (the client's, then the 405 fallback's)."""
    if transport == JSONRPC:
        return [("POST", "/", RPC[version][op]) for op, _ in ops]
    prefix = "/rest/v1" if version == "0.3" else "/rest"
    paths = {"send": ("POST", "/message:send"), "stream": ("POST", "/message:stream")}
    out = []
    for op, tid in ops:
        if op in paths:
            verb, path = paths[op]
        elif op == "get":
            verb, path = "GET", f"/tasks/{tid}"
        elif op == "cancel":
            verb, path = "POST", f"/tasks/{tid}:cancel"
        else:
            out.extend((verb, f"{prefix}/tasks/{tid}:subscribe") for verb in subscribe)
            continue
        out.append((verb, prefix + path))
    return out


def non_blocking_flag(record: SeenRequest, transport: str, version: str) -> Any:
    """The non-blocking flag of a send as the worker received it."""
    doc = record.json
    params = doc.get("params", {}) if transport == JSONRPC else doc
    configuration = params.get("configuration") or {}
    return configuration.get("returnImmediately") if version == "1.0" else configuration.get("blocking")


# --------------------------------------------------------------------------- the matrix


def _cells() -> list[Any]:
    cells = []
    for client in ("py03", "js03", "py13", "js13"):
        workers = ("v10",) if PEERS[client].protocol == "0.3" else ("js03", "py03")
        for worker in workers:
            for transport in (JSONRPC, REST):
                cells.append(pytest.param(client, transport, worker,
                                          id=f"{client}-{BINDING_LABEL[transport]}-{worker}worker"))
    return cells


@pytest.mark.parametrize(("client", "transport", "worker_name"), _cells())
async def test_bridged_cell(stack: tuple[Gateway, dict[str, Worker]], client: str, transport: str,
                            worker_name: str) -> None:
    gateway, workers = stack
    worker = workers[worker_name]
    version = PEERS[client].protocol
    assert version != worker.version  # every cell is bridged
    st, kinds = STATES[version], KINDS[version]
    trace = uuid.uuid4().hex
    context_id = f"ctx-{trace[:12]}"
    base = gateway.base(worker)
    card_url = base + CARD_PATH
    headers = {TRACE_HEADER: trace}
    seen_before = len(worker.recorder.requests())
    before = await gateway.scrape()

    async def peer(steps: list[dict[str, Any]]) -> PeerRun:
        run = await run_peer(client, card_url, steps, timeout=PEER_TIMEOUT, headers=headers, transport=transport)
        check_client(run, transport, base, version)
        check_card(run, card_url, base, version)
        return run

    # ---- A: the main scenario
    a = await peer(scenario(context_id, version))
    where = a.transcript()
    for step in (SEND, NB_SEND, NB_GET, STREAM, GET_DONE, CANCEL, GET_CANCELED, NB_SLOW):
        assert a.outcome(step) == "ended", f"step {step}: {a.errors(step)}\n{where}"
    assert a.outcome(SLOW) == "stopped", f"the slow stream did not reach working\n{where}"

    (sent,) = a.events(SEND)
    assert (sent["kind"], sent["state"], sent["contextId"]) == ("task", st["completed"], context_id), where
    (nb,) = a.events(NB_SEND)
    nb_tid = nb["taskId"]
    assert nb["kind"] == "task" and nb["state"] in (st["submitted"], st["working"], st["completed"]), where
    (nb_got,) = a.events(NB_GET)
    assert nb_got["taskId"] == nb_tid, where
    streamed = a.events(STREAM)
    assert [e["kind"] for e in streamed] == [kinds[0], kinds[1], kinds[2], kinds[1]], where
    assert [e.get("state") for e in streamed] == [st["submitted"], st["working"], None, st["completed"]], where
    if version == "0.3":
        assert [e.get("final") for e in streamed] == [None, False, None, True], where
    stream_tid = streamed[0]["taskId"]
    assert {e["taskId"] for e in streamed} == {stream_tid}, where
    assert len({sent["taskId"], nb_tid, stream_tid}) == 3, where
    (got,) = a.events(GET_DONE)
    assert (got["taskId"], got["state"]) == (stream_tid, st["completed"]), where
    slow = a.events(SLOW)
    slow_tid = slow[0]["taskId"]
    assert slow[-1]["state"] == st["working"] and {e["taskId"] for e in slow} == {slow_tid}, where
    (canceled,) = a.events(CANCEL)
    assert (canceled["taskId"], canceled["state"]) == (slow_tid, st["canceled"]), where
    (got,) = a.events(GET_CANCELED)
    assert (got["taskId"], got["state"]) == (slow_tid, st["canceled"]), where
    refusal(a, version, transport, slow_tid)
    (parked,) = a.events(NB_SLOW)  # it answered at once: a blocking send of "slow" never would
    parked_tid = parked["taskId"]
    assert parked["kind"] == "task" and parked["state"] in (st["submitted"], st["working"]), where
    assert parked_tid not in (sent["taskId"], nb_tid, stream_tid, slow_tid), where

    # ---- B resubscribes to the parked task; C cancels it once the worker counts B
    async with httpx.AsyncClient(base_url=worker.base, trust_env=False, timeout=5.0) as http:
        async def joins() -> int:
            return int((await http.get(f"/_peer/joins/{parked_tid}")).json()["joins"])

        assert await joins() == 0
        watcher = asyncio.create_task(peer([{"op": "resubscribe", "taskId": parked_tid}]))
        try:
            async def joined() -> bool:
                if watcher.done():  # pytest.fail: await_until retries on AssertionError only
                    pytest.fail(f"the resubscription ended before the cancel\n{watcher.result().transcript()}")
                return await joins() >= 1

            await await_until(joined, timeout=PEER_TIMEOUT, interval=0.05,
                              message="the resubscription never joined the task")
            c = await peer([{"op": "cancel", "taskId": parked_tid}, {"op": "get", "taskId": nb_tid}])
            b = await asyncio.wait_for(watcher, PEER_TIMEOUT + 5)
        finally:
            watcher.cancel()

    assert c.outcome(0) == "ended" and c.outcome(1) == "ended", c.transcript()
    (cancel,) = c.events(0)
    assert (cancel["kind"], cancel["taskId"], cancel["state"]) == ("task", parked_tid, st["canceled"]), c.transcript()
    assert b.outcome(0) == "ended", b.transcript()
    watched = b.events(0)
    assert watched and {e["taskId"] for e in watched} == {parked_tid}, b.transcript()
    assert (watched[-1]["kind"], watched[-1]["state"]) == (kinds[1], st["canceled"]), b.transcript()
    if version == "0.3":
        assert watched[-1]["final"] is True, b.transcript()
        assert all(e.get("final") is not True for e in watched[:-1]), b.transcript()
    assert all(e.get("state") in (st["submitted"], st["working"]) for e in watched[:-1]), b.transcript()
    # SPEC §3.1.6: a v1.0 subscribe starts with the current Task; the v0.3 workers' resubscribe
    # does not send it (a2a-sdk 0.3) or sends its own (@a2a-js/sdk 0.3), which is not repeated
    (resubscribe_wire,) = b.wire(0)
    sent_first = [doc for _, doc in parse_sse(resubscribe_wire["body"])][:1]
    if version == "1.0":
        assert watched[0]["kind"] == "task" and watched[0]["state"] in (st["submitted"], st["working"]), \
            f"the subscribe did not start with the Task (docs/bridge.md §3.2)\n{b.transcript()}"
        assert [e["kind"] for e in watched].count("task") == 1, b.transcript()
        first = sent_first[0]["result"] if transport == JSONRPC else sent_first[0]
        assert set(first) == {"task"} and first["task"]["id"] == parked_tid, resubscribe_wire["body"]

    # ---- the non-blocking task shows completed, eventually (bounded; each look is one run)
    runs = [a, b, c]
    looks = [nb_got, *c.events(1)]
    polls: list[PeerRun] = []
    while looks[-1]["state"] != st["completed"] and len(polls) < POLL_RUNS:
        polls.append(await peer([{"op": "get", "taskId": nb_tid}]))
        looks.extend(polls[-1].events(0))
    runs.extend(polls)
    assert [x["taskId"] for x in looks] == [nb_tid] * len(looks), looks
    assert looks[-1]["state"] == st["completed"], f"the non-blocking task never completed: {looks}"

    # ---- what reached the worker: the worker's version, every operation but the refused one
    window = worker.recorder.requests()[seen_before:]
    traced = [r for r in window if r.header(TRACE_HEADER) == trace]
    ops: list[tuple[str, str | None]] = list(zip(A_OPS, [None, None, nb_tid, None, stream_tid, None, slow_tid,
                                                         slow_tid, None], strict=True))
    # a v1.0 client's subscribe to a v0.3 worker: the gateway's own GetTask first (docs/bridge.md §3.2)
    own_gets = 1 if version == "1.0" else 0
    ops += [("get", parked_tid)] * own_gets
    ops += [("resubscribe", parked_tid), ("cancel", parked_tid), ("get", nb_tid)]
    ops += [("get", nb_tid)] * len(polls)
    # a REST resubscribe goes on with the client's verb (py03: GET, the others POST); a2a-sdk
    # 0.3's REST server routes only GET, so there the gateway retries a 405 with GET
    verbs = (resubscribe_wire["httpMethod"],)
    if worker.name == "py03" and verbs == ("POST",):
        verbs = ("POST", "GET")
    assert worker_ops(traced, transport) == expected_ops(ops, transport, worker.version, verbs), \
        "\n".join(map(str, worker_ops(traced, transport)))
    for record in traced:
        if worker.version == "1.0":
            assert record.header_values("a2a-version") == ["1.0"], (record.method, record.path, record.headers)
        else:
            assert "a2a-version" not in record.header_names, (record.method, record.path, record.headers)
    sends = [r for r in traced if (r.rpc_method or r.path).endswith(("message:send", RPC[worker.version]["send"]))]
    assert len(sends) == 3, [(r.method, r.path) for r in traced]  # SEND, NB_SEND, NB_SLOW
    flags = [non_blocking_flag(r, transport, worker.version) for r in sends]
    off = worker.version == "1.0"  # returnImmediately: true / blocking: false
    assert flags[0] != off and flags[1:] == [off, off], flags

    # ---- counted as bridged, every one of them, under this cell's labels only
    want = {(BINDING_LABEL[transport], version, worker.version): float(a2a_requests(runs))}
    assert a2a_requests(runs) == len(ops) + 1 - own_gets, "the peers made other requests than the scenario's"
    by = ("binding", "client_version", "worker_version")
    last: list[Any] = [None]

    async def counted() -> bool:
        last[0] = deltas(before, await gateway.scrape(), BRIDGED, by=by, upstream=worker.name)
        return last[0] == want

    await await_until(counted, timeout=COUNT_TIMEOUT, interval=0.05,
                      message=f"{BRIDGED} for upstream {worker.name}: want {want}")
    after = await gateway.scrape()
    assert deltas(before, after, BRIDGED, by=("upstream", *by)) == {(worker.name, *k): v for k, v in want.items()}

    # ---- the gateway's ledger holds every task of the cell, terminal
    for task_id, state in ((sent["taskId"], "TASK_STATE_COMPLETED"), (nb_tid, "TASK_STATE_COMPLETED"),
                           (stream_tid, "TASK_STATE_COMPLETED"), (slow_tid, "TASK_STATE_CANCELED"),
                           (parked_tid, "TASK_STATE_CANCELED")):
        record = await gateway.ledger_record(worker.name, task_id)
        assert record is not None, f"the gateway's ledger does not hold task {task_id}"
        assert (record.state.value, record.context_id) == (state, context_id), (task_id, record)


# --------------------------------------------------------------------------- the card GET's header


@pytest.mark.parametrize("transport", [JSONRPC, REST], ids=["jsonrpc", "rest"])
async def test_a_v10_client_resolving_the_card_first_stays_on_v10(
        stack: tuple[Gateway, dict[str, Worker]], transport: str) -> None:
    """a2a-sdk 1.3 built as its samples build it — ``A2ACardResolver`` first (its card GET carries
    no ``A2A-Version``), then the client from that card — in front of a v1.0-only @a2a-js/sdk 1.3
    worker: v1.0 end to end. The one served card lists the worker's v1.0 interfaces and the
    factory picks one (docs/bridge.md §2.2); nothing is bridged. (Before, a header-less card GET
    got the v0.3 shape, and the client spoke v0.3 through the bridge.)"""
    gateway, workers = stack
    worker = workers["v10"]
    base = gateway.base(worker)
    trace = uuid.uuid4().hex
    seen_before = len(worker.recorder.requests())
    before = await gateway.scrape()
    run = await run_peer("py13", base + CARD_PATH, [{"op": "send", "text": "hello"}, {"op": "get"}],
                         timeout=PEER_TIMEOUT, headers={TRACE_HEADER: trace}, transport=transport,
                         resolve_first=True)
    where = run.transcript()
    check_client(run, transport, base, "1.0")
    check_card(run, base + CARD_PATH, base, "1.0")
    (card_get,) = [w for w in run.of("wire") if w.get("index") is None]
    assert card_get["a2aVersion"] is None, where  # the resolver's GET: no A2A-Version
    assert run.outcome(0) == run.outcome(1) == "ended", where
    (sent,) = run.events(0)
    assert sent["state"] == "TASK_STATE_COMPLETED", where
    calls = [w for w in run.of("wire") if w.get("index") is not None]
    assert calls and all(w["a2aVersion"] == "1.0" and w["url"].startswith(base) for w in calls), where
    traced = [r for r in worker.recorder.requests()[seen_before:] if r.header(TRACE_HEADER) == trace]
    if transport == JSONRPC:
        assert [r.rpc_method for r in traced] == ["SendMessage", "GetTask"], where
    else:
        assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in traced] == [
            ("POST", "message:send"), ("GET", sent["taskId"])], where
    assert all(r.header_values("a2a-version") == ["1.0"] for r in traced), where
    assert deltas(before, await gateway.scrape(), BRIDGED, by=("upstream",)) == {}
