"""docs/field-cases.md F17 through the real gateway, with raw HTTP and with genuine SDK clients.

(a) The v0.3 end-of-stream signal (docs/protocol.md §7, §11 pitfall 5): whatever a worker puts
    in ``final`` — ``false``, nothing, ``true`` — and however it spells the terminal state, a
    v0.3 client gets the terminal status-update in the canonical v0.3 spelling with
    ``"final": true`` and its stream ends right there, although the worker holds its socket
    open; a v1.0 client never gets a ``final`` member; ``final: true`` on a state that is not
    terminal does not end a v0.3 client's stream early (the gateway sends ``final: false``).
(b) Refusals of streaming calls (docs/protocol.md §7, §11 pitfall 6): when the gateway answers
    ``message/stream`` / ``tasks/resubscribe`` for a task its ledger holds as terminal, a v0.3
    client gets ``text/event-stream`` with one JSON-RPC error event (-32004, the client's id);
    a v1.0 client (``SendStreamingMessage`` / ``SubscribeToTask``) gets the plain
    ``application/json`` error an a2a-sdk 1.x worker answers itself.

Two stacks, each on 127.0.0.1 with ephemeral ports and one per module:

* ``scripted`` — the scripted worker (misbehaving on purpose) behind a gateway whose
  post-terminal drain is long (60 s), so a gateway that waited for the upstream to end before
  ending the client's stream would show; each test's gates are released at its end.
* ``stack`` (tests/e2e/conftest.py) — the real a2a-sdk 1.3 demo worker (v1.0 and v0.3 compat)
  behind the gateway, for the refusals: a task is completed through the gateway first.

The genuine clients (tests/support/peers.py): a2a-sdk 0.3.x in ``.venv-a2a03``, @a2a-js/sdk
0.3.14 and 1.3.0 from npm, a2a-sdk 1.3 from the main venv — each in its own process, each
following the card the gateway serves. Those tests are marked ``slow``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.app import build_app
from gateway.config import parse_config
from tests.e2e.conftest import TRACE_HEADER, UPSTREAM_NAME, MetricsScrape, Stack
from tests.support.gateway import serve_gateway
from tests.support.peers import PEERS, PeerRun, run_peer
from tests.support.scripted_worker import Data, Event, Gate, ScriptedWorker, default_card
from tests.support.servers import RunningServer, await_until, serve_in_thread
from tests.support.sse_frames import parse_sse

V03, V10 = "0.3", "1.0"
STREAM_BOUND = 10.0  # seconds a raw client waits for the gateway to end a stream
PEER_BOUND = 20.0  # seconds a peer process may take for its whole scenario
HOLD = 30.0  # seconds a scripted worker holds its socket open unless released
LONG_DRAIN = 60.0  # the scripted gateway's post-terminal drain: longer than any bound above
SHORT_DRAIN = 0.5  # a second gateway, to see it let go of a held upstream after its drain
ABSENT = "absent"  # a `final` value: the member is left out

SSE_EVENTS = "a2a_gateway_sse_events_total"
REJECTIONS = "a2a_gateway_local_rejections_total"

STREAM_METHOD = {V03: "message/stream", V10: "SendStreamingMessage"}
SEND_METHOD = {V03: "message/send", V10: "SendMessage"}
SUBSCRIBE_METHOD = {V03: "tasks/resubscribe", V10: "SubscribeToTask"}
VERSION_HEADERS = {V03: {}, V10: {"A2A-Version": "1.0"}}  # a v0.3 client sends none

#: canonical spelling of each state per client version (docs/protocol.md §2)
CANONICAL = {
    V03: {"submitted": "submitted", "working": "working", "completed": "completed", "failed": "failed",
          "canceled": "canceled", "rejected": "rejected"},
    V10: {"submitted": "TASK_STATE_SUBMITTED", "working": "TASK_STATE_WORKING",
          "completed": "TASK_STATE_COMPLETED", "failed": "TASK_STATE_FAILED",
          "canceled": "TASK_STATE_CANCELED", "rejected": "TASK_STATE_REJECTED"},
}
#: spellings real workers send for each terminal state (docs/protocol.md §2, §11 pitfall 4)
TERMINAL_SPELLINGS = {
    "completed": ("completed", "COMPLETED", "Completed", "TASK_STATE_COMPLETED"),
    "failed": ("failed", "FAILED", "TASK_STATE_FAILED"),
    "canceled": ("canceled", "cancelled", "CANCELED", "TASK_STATE_CANCELED", "TASK_STATE_CANCELLED"),
    "rejected": ("rejected", "REJECTED", "TASK_STATE_REJECTED"),
}
FINALS = (True, False, ABSENT)


# --------------------------------------------------------------------------- payloads


def new_ids() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"t-{tag}", f"c-{tag}"


def task_result(version: str, tid: str, cid: str, state: str) -> dict[str, Any]:
    task = {"id": tid, "contextId": cid, "status": {"state": state}}
    return {"kind": "task", **task} if version == V03 else {"task": task}


def status_result(version: str, tid: str, cid: str, state: str, final: Any = ABSENT) -> dict[str, Any]:
    update: dict[str, Any] = {"taskId": tid, "contextId": cid, "status": {"state": state}}
    if final is not ABSENT:
        update["final"] = final
    return {"kind": "status-update", **update} if version == V03 else {"statusUpdate": update}


def artifact_result(version: str, tid: str, cid: str) -> dict[str, Any]:
    if version == V03:
        return {"kind": "artifact-update", "taskId": tid, "contextId": cid, "lastChunk": True,
                "artifact": {"artifactId": "a-1", "parts": [{"kind": "text", "text": "done"}]}}
    return {"artifactUpdate": {"taskId": tid, "contextId": cid, "lastChunk": True,
                               "artifact": {"artifactId": "a-1", "parts": [{"text": "done"}]}}}


def user_message(version: str, text: str, tid: str | None = None, cid: str | None = None) -> dict[str, Any]:
    if version == V03:
        msg: dict[str, Any] = {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user",
                               "parts": [{"kind": "text", "text": text}]}
    else:
        msg = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    if tid:
        msg["taskId"] = tid
    if cid:
        msg["contextId"] = cid
    return {"message": msg}


def kind_of(version: str, result: dict[str, Any]) -> str:
    """``task`` / ``status`` / ``artifact`` / ``message`` for a result of either version."""
    if version == V03:
        return {"status-update": "status", "artifact-update": "artifact"}.get(result.get("kind"), result.get("kind"))
    (member,) = result.keys()
    return {"statusUpdate": "status", "artifactUpdate": "artifact"}.get(member, member)


def body_of(version: str, result: dict[str, Any]) -> dict[str, Any]:
    """The object itself: v0.3 results are bare, v1.0 results are wrapped in one member."""
    return result if version == V03 else next(iter(result.values()))


def worker_stream(version: str, tid: str, cid: str, terminal: str, final: Any, gate: Gate) -> list[Any]:
    """Task, working, an artifact, the terminal status — then the worker holds its socket."""
    working_final = False if version == V03 else ABSENT  # a well-behaved working status
    return [
        Event(result=task_result(version, tid, cid, CANONICAL[version]["submitted"])),
        Event(result=status_result(version, tid, cid, CANONICAL[version]["working"], working_final)),
        Event(result=artifact_result(version, tid, cid)),
        Event(result=status_result(version, tid, cid, terminal, final)),
        gate,
    ]


# --------------------------------------------------------------------------- SSE on the wire


@dataclass
class RawStream:
    status: int
    content_type: str
    text: str
    ended: bool  # the gateway ended the body within the bound

    @property
    def events(self) -> list[tuple[str, Any]]:
        return parse_sse(self.text)

    def describe(self) -> str:
        return f"HTTP {self.status} {self.content_type!r}, ended={self.ended}, body:\n{self.text}"


async def post_stream(http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str],
                      bound: float = STREAM_BOUND) -> RawStream:
    """POST ``body`` and read the response to its end, or until ``bound`` seconds passed."""
    chunks: list[bytes] = []
    async with http.stream("POST", url, json=body, headers=headers) as resp:
        ended = True
        try:
            async with asyncio.timeout(bound):
                async for chunk in resp.aiter_bytes():
                    chunks.append(chunk)
        except TimeoutError:
            ended = False
        return RawStream(resp.status_code, resp.headers.get("content-type", ""),
                         b"".join(chunks).decode("utf-8", "replace"), ended)


def rpc(method: str, params: dict[str, Any], rpc_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


def delta(before: MetricsScrape, after: MetricsScrape, name: str, **labels: str) -> float:
    return (after.value(name, upstream=UPSTREAM_NAME, **labels)
            - before.value(name, upstream=UPSTREAM_NAME, **labels))


async def scrape(admin: RunningServer) -> MetricsScrape:
    """A scrape of a gateway's admin listener."""
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
        resp = await client.get(admin.url_for("/metrics"))
    resp.raise_for_status()
    return MetricsScrape(resp.text)


# --------------------------------------------------------------------------- the scripted stack


def hybrid_card() -> dict[str, Any]:
    """The scripted worker's card in the shape a2a-sdk 1.3 serves: v1.0 ``supportedInterfaces``
    plus the v0.3 ``url`` / ``protocolVersion`` / ``preferredTransport`` (docs/protocol.md §4.3),
    so clients of both versions can follow it. The URLs are unreachable on purpose: only the
    gateway's rewritten card leads anywhere."""
    card = default_card()
    card["supportedInterfaces"] = [
        {"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
    ]
    card.update(url="http://127.0.0.1:1/", protocolVersion="0.3", preferredTransport="JSONRPC")
    return card


@dataclass
class ScriptedStack:
    worker: ScriptedWorker
    gateway: RunningServer  # drain LONG_DRAIN
    short_drain: RunningServer  # the same worker behind a gateway with drain SHORT_DRAIN
    admin: RunningServer  # the admin listener of ``gateway``
    gates: list[Gate] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.gateway.url + "/"

    @property
    def card_url(self) -> str:
        return self.gateway.url_for("/.well-known/agent-card.json")

    def gate(self) -> Gate:
        """A gate the worker holds its stream at; released when the test ends."""
        gate = Gate(timeout=HOLD)
        self.gates.append(gate)
        return gate


def _gateway_config(worker_url: str, drain: float) -> Any:
    return parse_config({
        "listen": {"host": "127.0.0.1", "port": 0},
        "mode": "enforce",
        "upstreams": [{"name": UPSTREAM_NAME, "url": worker_url + "/", "prefix": "/"}],
        "ledger": {"url": "memory"},
        "limits": {"post_terminal_drain_seconds": drain},
    })


@pytest.fixture(scope="module")
def scripted_stack() -> Iterator[ScriptedStack]:
    worker = ScriptedWorker()
    worker.default_card = hybrid_card()
    with serve_in_thread(worker, name="f17-worker") as w:
        long_app = build_app(_gateway_config(w.url, LONG_DRAIN), registry=CollectorRegistry())
        short_app = build_app(_gateway_config(w.url, SHORT_DRAIN), registry=CollectorRegistry())
        with serve_gateway(long_app, name="f17-gateway") as (gateway, admin), \
                serve_gateway(short_app, name="f17-gateway-short-drain") as (short, _):
            yield ScriptedStack(worker, gateway, short, admin)


@pytest.fixture
async def scripted(scripted_stack: ScriptedStack) -> AsyncIterator[ScriptedStack]:
    """The scripted stack with a fresh worker script; the test's gates are released at its end
    and the worker's streams are over before the next test starts."""
    stack = scripted_stack
    stack.worker.reset()
    stack.gates = []
    try:
        yield stack
    finally:
        for gate in stack.gates:
            gate.release()
        await await_until(lambda: stack.worker.open_streams == 0, timeout=5.0,
                          message="the worker's held streams ended")
    assert stack.worker.errors == []


@pytest.fixture
async def raw_http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(STREAM_BOUND + 5, connect=5.0)) as client:
        yield client


# =========================================================================== (a) raw HTTP


def _terminal_cases() -> list[Any]:
    cases = []
    for version in (V03, V10):
        for state, spellings in TERMINAL_SPELLINGS.items():
            for spelling in spellings:
                for final in FINALS:
                    label = f"final_{str(final).lower()}"
                    cases.append(pytest.param(version, state, spelling, final,
                                              id=f"v{version}-{state}-{spelling}-{label}"))
    return cases


def _check_terminal_stream(version: str, got: RawStream, rpc_id: Any, state: str, gate: Gate,
                           worker: ScriptedWorker) -> None:
    """The assertions F17 (a) makes about one stream that carried a terminal status."""
    assert got.ended, (f"the gateway did not end the client's stream within {STREAM_BOUND}s of the "
                       f"terminal status while the worker held its socket open: {got.describe()}")
    assert not gate.is_set() and worker.streams_completed == 0, "the stream ended only when the worker did"
    assert got.status == 200 and got.content_type.startswith("text/event-stream"), got.describe()
    events = got.events
    docs = [doc for _, doc in events]
    assert all(isinstance(d, dict) and d.get("id") == rpc_id and type(d["id"]) is type(rpc_id)
               and "result" in d for d in docs), got.describe()
    results = [d["result"] for d in docs]
    assert [kind_of(version, r) for r in results] == ["task", "status", "artifact", "status"], got.describe()
    working, terminal = body_of(version, results[1]), body_of(version, results[-1])
    assert terminal["status"]["state"] == CANONICAL[version][state], got.describe()
    assert working["status"]["state"] == CANONICAL[version]["working"], got.describe()
    if version == V03:
        assert terminal.get("final", ABSENT) is True, (
            f"v0.3 terminal status-update must carry final:true, got {terminal.get('final', ABSENT)!r}: "
            f"{got.describe()}")
        assert working.get("final", ABSENT) is False, got.describe()
    else:
        finals = [body_of(version, r) for r in results if "final" in body_of(version, r)]
        assert finals == [], f"a v1.0 client got a `final` member: {finals}"


@pytest.mark.parametrize(("version", "state", "spelling", "final"), _terminal_cases())
async def test_f17_terminal_status_ends_the_stream(
    scripted: ScriptedStack, raw_http: httpx.AsyncClient, version: str, state: str, spelling: str, final: Any
) -> None:
    """F17 (a): the worker sends a terminal state in any spelling with final true / false /
    absent and holds its socket; the client gets the canonical terminal status (v0.3:
    ``final: true``; v1.0: no ``final``) and the gateway ends the client's stream at once."""
    tid, cid = new_ids()
    gate = scripted.gate()
    method = STREAM_METHOD[version]
    scripted.worker.on(method, sse=worker_stream(version, tid, cid, spelling, final, gate))
    before = await scrape(scripted.admin)
    rpc_id = f"f17-{uuid.uuid4().hex[:6]}"

    got = await post_stream(raw_http, scripted.url, rpc(method, user_message(version, "go"), rpc_id),
                            VERSION_HEADERS[version])

    _check_terminal_stream(version, got, rpc_id, state, gate, scripted.worker)
    assert len(scripted.worker.calls(method)) == 1  # it went through the gateway to the worker
    assert delta(before, await scrape(scripted.admin), SSE_EVENTS) == 4


@pytest.mark.parametrize("final", [True, ABSENT], ids=["final_true", "final_absent"])
@pytest.mark.parametrize("spelling", ["working", "Working", "TASK_STATE_WORKING", "submitted"])
@pytest.mark.parametrize("version", [V03, V10], ids=["v0.3", "v1.0"])
async def test_f17_final_on_an_active_status_does_not_end_the_stream(
    scripted: ScriptedStack, raw_http: httpx.AsyncClient, version: str, spelling: str, final: Any
) -> None:
    """F17 (a) variant: ``final: true`` (or no ``final``) on a status that is neither terminal
    nor interrupted; every later event still reaches the client, and that status carries
    ``final: false`` for v0.3 (a2a-sdk 0.3 refuses a status-update without it) and no
    ``final`` for v1.0."""
    tid, cid = new_ids()
    gate = scripted.gate()
    method = STREAM_METHOD[version]
    completed_final = True if version == V03 else ABSENT
    scripted.worker.on(method, sse=[
        Event(result=task_result(version, tid, cid, CANONICAL[version]["submitted"])),
        Event(result=status_result(version, tid, cid, spelling, final)),
        Event(result=artifact_result(version, tid, cid)),
        Event(result=status_result(version, tid, cid, CANONICAL[version]["completed"], completed_final)),
        gate,
    ])
    rpc_id = 1700

    got = await post_stream(raw_http, scripted.url, rpc(method, user_message(version, "go"), rpc_id),
                            VERSION_HEADERS[version])

    assert got.ended, got.describe()
    results = [doc["result"] for _, doc in got.events]
    assert [kind_of(version, r) for r in results] == ["task", "status", "artifact", "status"], got.describe()
    active, terminal = body_of(version, results[1]), body_of(version, results[-1])
    state = "submitted" if spelling == "submitted" else "working"
    assert active["status"]["state"] == CANONICAL[version][state], got.describe()
    assert terminal["status"]["state"] == CANONICAL[version]["completed"], got.describe()
    if version == V03:
        assert active.get("final", ABSENT) is False, (
            f"a {spelling!r} status-update must carry final:false, got {active.get('final', ABSENT)!r}: "
            f"{got.describe()}")
        assert terminal.get("final", ABSENT) is True, got.describe()
    else:
        assert "final" not in active and "final" not in terminal, (
            f"a v1.0 client got a `final` member: {[active, terminal]}")
    assert len(scripted.worker.calls(method)) == 1


@pytest.mark.parametrize("version", [V03, V10], ids=["v0.3", "v1.0"])
async def test_f17_gateway_lets_go_of_a_held_upstream_after_its_drain(
    scripted: ScriptedStack, raw_http: httpx.AsyncClient, version: str
) -> None:
    """F17 (a): after the terminal event the gateway reads the worker's stream on only for its
    bounded drain (here 0.5 s), then closes it although the worker still holds it open."""
    tid, cid = new_ids()
    gate = scripted.gate()
    method = STREAM_METHOD[version]
    scripted.worker.on(method, sse=worker_stream(version, tid, cid, "completed", False, gate))

    got = await post_stream(raw_http, scripted.short_drain.url + "/", rpc(method, user_message(version, "go"), 5),
                            VERSION_HEADERS[version])

    assert got.ended, got.describe()
    (seen,) = scripted.worker.calls(method)
    await await_until(seen.disconnected.is_set, timeout=SHORT_DRAIN + 5.0,
                      message="the gateway closed the worker's held stream after its drain")
    assert not gate.is_set() and scripted.worker.streams_completed == 0


# =========================================================================== (b) raw HTTP


async def complete_task(http: httpx.AsyncClient, stack: Stack, version: str) -> tuple[str, str]:
    """Run a task to completion through the gateway (the demo worker answers "hi" with a
    completed task); returns its (task id, context id)."""
    resp = await http.post(stack.gateway_base, json=rpc(SEND_METHOD[version], user_message(version, "hi"), "send"),
                           headers=VERSION_HEADERS[version])
    assert resp.status_code == 200, resp.text
    task = body_of(version, resp.json()["result"])
    assert task["status"]["state"] == CANONICAL[version]["completed"], resp.text
    record = await stack.ledger_record(task["id"])
    assert record is not None and record.terminal
    return task["id"], task["contextId"]


def refusal_params(version: str, method: str, tid: str, cid: str) -> dict[str, Any]:
    if method in ("tasks/resubscribe", "SubscribeToTask"):
        return {"id": tid}
    return user_message(version, "more", tid, cid)


def check_refusal_error(doc: Any, rpc_id: Any, tid: str, where: str) -> None:
    assert isinstance(doc, dict) and "result" not in doc, where
    assert doc.get("id") == rpc_id and type(doc.get("id")) is type(rpc_id), where
    error = doc.get("error") or {}
    assert error.get("code") == -32004, where
    message = str(error.get("message", ""))
    assert tid in message and "new task" in message, f"the message must say a retry starts a new task: {where}"


@pytest.mark.parametrize("rpc_id", ["f17-refusal", 17], ids=["string_id", "int_id"])
@pytest.mark.parametrize(("version", "method"), [
    pytest.param(version, method, id=f"v{version}-{method}")
    for version, method in ((V03, "message/stream"), (V03, "tasks/resubscribe"),
                            (V10, "SendStreamingMessage"), (V10, "SubscribeToTask"))
])
async def test_f17_streaming_call_to_terminal_task_is_refused_in_the_clients_form(
    stack: Stack, http: httpx.AsyncClient, trace: str, version: str, method: str, rpc_id: Any
) -> None:
    """F17 (b): a streaming call naming a task the ledger holds as terminal is answered by the
    gateway itself with -32004 and the client's id — v0.3 as an event stream with one JSON-RPC
    error event, v1.0 as plain ``application/json`` (what a2a-sdk 1.x workers answer)."""
    tid, cid = await complete_task(http, stack, version)
    before = await stack.scrape()

    got = await post_stream(http, stack.gateway_base, rpc(method, refusal_params(version, method, tid, cid), rpc_id),
                            VERSION_HEADERS[version])

    where = got.describe()
    assert got.ended and got.status == 200, where
    if version == V03:
        assert got.content_type.startswith("text/event-stream"), (
            f"a v0.3 client needs text/event-stream for {method}: {where}")
        events = got.events
        assert len(events) == 1, where
        check_refusal_error(events[0][1], rpc_id, tid, where)
    else:
        assert got.content_type.startswith("application/json"), where
        check_refusal_error(json.loads(got.text), rpc_id, tid, where)
    seen = [r.rpc_method for r in stack.recorder.requests(trace)]
    assert seen == [SEND_METHOD[version]], f"the refusal must come from the gateway; the worker saw {seen}"

    async def counted() -> bool:
        return delta(before, await stack.scrape(), REJECTIONS, method=method, reason="terminal_task") == 1

    await await_until(counted, timeout=5.0, message=f"a terminal_task rejection of {method} was counted")


# =========================================================================== genuine SDK clients

SDK_TIMEOUT = 240  # pytest-timeout for SDK tests: the first one may install the peers
V03_PEERS = ["py03", "js03"]
V10_PEERS = ["py13", "js13"]


def peer_kinds(run: PeerRun, index: int) -> list[str]:
    """The kinds of the events the SDK surfaced, in the short form of :func:`kind_of`."""
    short = {"status-update": "status", "artifact-update": "artifact", "statusUpdate": "status",
             "artifactUpdate": "artifact"}
    return [short.get(e["kind"], e["kind"]) for e in run.events(index)]


def wire_results(run: PeerRun, index: int, rpc_method: str) -> list[dict[str, Any]]:
    """The ``result`` of every SSE event of ``rpc_method`` that reached the SDK in step ``index``."""
    out = []
    for exchange in run.wire(index):
        if exchange["rpcMethod"] == rpc_method:
            out += [doc["result"] for _, doc in parse_sse(exchange["body"]) if isinstance(doc, dict) and "result" in doc]
    return out


def followed_the_card(run: PeerRun, gateway: RunningServer) -> None:
    """The SDK's factory took the gateway's URL from the card the gateway served."""
    assert run.client["endpoint"].rstrip("/") == gateway.url, run.transcript()


def raised(run: PeerRun, index: int) -> str:
    """What the SDK raised in step ``index``, for assertion messages."""
    errors = run.errors(index)
    return f"{errors[0]['name']}: {errors[0]['text'][:600]!r}" if errors else "nothing"


V03_SDK_CASES = [
    pytest.param("completed", "COMPLETED", False, id="completed-COMPLETED-final_false"),
    pytest.param("canceled", "TASK_STATE_CANCELLED", ABSENT, id="canceled-TASK_STATE_CANCELLED-final_absent"),
    pytest.param("failed", "failed", True, id="failed-failed-final_true"),
    pytest.param("rejected", "Rejected", False, id="rejected-Rejected-final_false"),
]


@pytest.mark.slow
@pytest.mark.timeout(SDK_TIMEOUT)
@pytest.mark.parametrize(("state", "spelling", "final"), V03_SDK_CASES)
@pytest.mark.parametrize("peer", V03_PEERS)
async def test_f17_v03_sdk_stream_ends_on_the_terminal_status(
    scripted: ScriptedStack, peer: str, state: str, spelling: str, final: Any
) -> None:
    """F17 (a) with genuine v0.3 SDK clients: the SDK surfaces the terminal status-update in
    the canonical spelling with ``final: true`` and its iteration finishes while the worker
    still holds its socket open."""
    tid, cid = new_ids()
    gate = scripted.gate()
    scripted.worker.on("message/stream", sse=worker_stream(V03, tid, cid, spelling, final, gate))

    run = await run_peer(peer, scripted.card_url, [{"op": "stream", "text": "go"}], timeout=PEER_BOUND)

    where = run.transcript()
    followed_the_card(run, scripted.gateway)
    assert run.outcome(0) == "ended", f"{peer}'s stream did not end cleanly; it raised {raised(run, 0)}\n{where}"
    assert not gate.is_set() and scripted.worker.streams_completed == 0, where
    events = run.events(0)
    assert peer_kinds(run, 0) == ["task", "status", "artifact", "status"], where
    assert events[-1]["state"] == CANONICAL[V03][state], where
    got_final = events[-1].get("final", ABSENT)
    assert got_final is True, f"{peer} got final={got_final!r} on the terminal event:\n{where}"
    assert events[1].get("final", ABSENT) is False, where
    assert len(scripted.worker.calls("message/stream")) == 1, where


V10_SDK_CASES = [
    pytest.param("completed", "completed", False, id="completed-completed-final_false"),
    pytest.param("canceled", "TASK_STATE_CANCELLED", True, id="canceled-TASK_STATE_CANCELLED-final_true"),
    pytest.param("failed", "FAILED", ABSENT, id="failed-FAILED-final_absent"),
]


@pytest.mark.slow
@pytest.mark.timeout(SDK_TIMEOUT)
@pytest.mark.parametrize(("state", "spelling", "final"), V10_SDK_CASES)
@pytest.mark.parametrize("peer", V10_PEERS)
async def test_f17_v10_sdk_stream_ends_and_never_sees_final(
    scripted: ScriptedStack, peer: str, state: str, spelling: str, final: Any
) -> None:
    """F17 (a) with genuine v1.0 SDK clients: a v1.0 worker that sends a ``final`` member
    anyway; the SDK surfaces the canonical terminal state, its iteration finishes while the
    worker holds its socket, and no event that reached it on the wire has ``final``."""
    tid, cid = new_ids()
    gate = scripted.gate()
    scripted.worker.on("SendStreamingMessage", sse=[
        Event(result=task_result(V10, tid, cid, "TASK_STATE_SUBMITTED")),
        Event(result=status_result(V10, tid, cid, "TASK_STATE_WORKING", final)),
        Event(result=artifact_result(V10, tid, cid)),
        Event(result=status_result(V10, tid, cid, spelling, final)),
        gate,
    ])

    run = await run_peer(peer, scripted.card_url, [{"op": "stream", "text": "go"}], timeout=PEER_BOUND)

    where = run.transcript()
    followed_the_card(run, scripted.gateway)
    assert run.outcome(0) == "ended", f"{peer}'s stream did not end cleanly; it raised {raised(run, 0)}\n{where}"
    assert not gate.is_set() and scripted.worker.streams_completed == 0, where
    assert peer_kinds(run, 0) == ["task", "status", "artifact", "status"], where
    assert run.events(0)[-1]["state"] == CANONICAL[V10][state], where
    on_wire = wire_results(run, 0, "SendStreamingMessage")
    assert len(on_wire) == 4, where
    with_final = [r for r in on_wire if "final" in body_of(V10, r)]
    assert with_final == [], f"{peer} was sent a `final` member: {with_final}"
    assert len(scripted.worker.calls("SendStreamingMessage")) == 1, where


@pytest.mark.slow
@pytest.mark.timeout(SDK_TIMEOUT)
@pytest.mark.parametrize("working_final", [True, ABSENT], ids=["final_true", "final_absent"])
@pytest.mark.parametrize("peer", V03_PEERS + V10_PEERS)
async def test_f17_sdk_stream_goes_on_after_final_on_working(
    scripted: ScriptedStack, peer: str, working_final: Any
) -> None:
    """F17 (a) variant with genuine SDK clients: ``final: true`` (or no ``final``) on
    ``working`` is followed by an artifact and the completion; the SDK gets every event and
    the working status carries ``final: false`` (v0.3; a2a-sdk 0.3 refuses a status-update
    without ``final``) or no ``final`` (v1.0)."""
    version = PEERS[peer].protocol
    tid, cid = new_ids()
    gate = scripted.gate()
    method = STREAM_METHOD[version]
    scripted.worker.on(method, sse=[
        Event(result=task_result(version, tid, cid, CANONICAL[version]["submitted"])),
        Event(result=status_result(version, tid, cid, CANONICAL[version]["working"], working_final)),
        Event(result=artifact_result(version, tid, cid)),
        Event(result=status_result(version, tid, cid, CANONICAL[version]["completed"],
                                   True if version == V03 else ABSENT)),
        gate,
    ])

    run = await run_peer(peer, scripted.card_url, [{"op": "stream", "text": "go"}], timeout=PEER_BOUND)

    where = run.transcript()
    followed_the_card(run, scripted.gateway)
    assert run.outcome(0) == "ended", f"{peer}'s stream did not end cleanly; it raised {raised(run, 0)}\n{where}"
    assert peer_kinds(run, 0) == ["task", "status", "artifact", "status"], where
    assert run.events(0)[-1]["state"] == CANONICAL[version]["completed"], where
    if version == V03:
        got_final = run.events(0)[1].get("final", ABSENT)
        assert got_final is False, f"{peer} got final={got_final!r} on working:\n{where}"
    else:
        working = body_of(version, wire_results(run, 0, method)[1])
        assert "final" not in working, f"{peer} was sent `final` on working: {working}"
    assert len(scripted.worker.calls(method)) == 1, where


@pytest.mark.slow
@pytest.mark.timeout(SDK_TIMEOUT)
@pytest.mark.parametrize("peer", V03_PEERS + V10_PEERS)
async def test_f17_sdk_streaming_calls_to_terminal_task_surface_the_refusal(
    stack: Stack, trace: str, peer: str
) -> None:
    """F17 (b) with genuine SDK clients against the real a2a-sdk demo worker: the SDK completes
    a task through the gateway, then streams a message to it and resubscribes to it; both are
    refused by the gateway, and the SDK surfaces -32004 with the gateway's message."""
    version = PEERS[peer].protocol
    before = await stack.scrape()
    card_url = stack.gateway.url_for("/.well-known/agent-card.json")

    run = await run_peer(peer, card_url, [
        {"op": "send", "text": "hi"},
        {"op": "stream", "text": "more", "sameTask": True},
        {"op": "resubscribe", "sameTask": True},
    ], timeout=PEER_BOUND, headers={TRACE_HEADER: trace})

    where = run.transcript()
    followed_the_card(run, stack.gateway)
    assert run.done and run.outcome(0) == "ended", where
    (task,) = run.events(0)
    assert task["state"] == CANONICAL[version]["completed"], where
    tid = task["taskId"]
    for index, method in ((1, STREAM_METHOD[version]), (2, SUBSCRIBE_METHOD[version])):
        assert run.outcome(index) == "error", where
        code, message = run.surfaced(index)
        forms = [(w["rpcMethod"], w["contentType"]) for w in run.wire(index)]
        assert code == -32004 and tid in str(message) and "new task" in str(message), (
            f"{peer} must surface -32004 and the gateway's message for {method}; it raised "
            f"{raised(run, index)} (answer forms {forms})\n{where}")
    seen = [r.rpc_method for r in stack.recorder.requests(trace) if r.rpc_method]
    assert seen == [SEND_METHOD[version]], f"the refusals must come from the gateway; the worker saw {seen}"
    after = await stack.scrape()
    for method in (STREAM_METHOD[version], SUBSCRIBE_METHOD[version]):
        assert delta(before, after, REJECTIONS, method=method, reason="terminal_task") == 1, method


@pytest.mark.slow
@pytest.mark.timeout(SDK_TIMEOUT)
@pytest.mark.parametrize(("peer", "form"), [
    ("py13", "json"), ("py13", "sse"), ("js13", "json"), ("js13", "sse"), ("py03", "sse"), ("js03", "sse"),
])
async def test_f17_sdk_surfaces_a_relayed_refusal_in_the_form_it_reads(
    scripted: ScriptedStack, peer: str, form: str
) -> None:
    """Why the gateway answers each version in the form it does (F17 (b)): a worker refuses a
    subscribe with -32004 as plain JSON or as an event stream with one ``event: error`` event,
    the gateway relays it, and the genuine SDK surfaces the code and message. Both v1.0 SDKs
    read both forms (a2a-sdk 1.x workers answer JSON); the v0.3 SDKs read only the stream."""
    version = PEERS[peer].protocol
    tid, cid = new_ids()
    method = SUBSCRIBE_METHOD[version]
    error = {"code": -32004, "message": f"task {tid} is terminal; a retry must start a new task"}
    if form == "json":
        scripted.worker.on(method, json_error=error)
    else:
        scripted.worker.on(method, sse=[Event(error=error, event="error")])
    get_method = "GetTask" if version == V10 else "tasks/get"
    snapshot = body_of(version, task_result(version, tid, cid, CANONICAL[version]["completed"]))
    scripted.worker.on(get_method, json_result=snapshot, times=None)  # should the gateway check it with GetTask

    run = await run_peer(peer, scripted.card_url, [{"op": "resubscribe", "taskId": tid}], timeout=PEER_BOUND)

    where = run.transcript()
    followed_the_card(run, scripted.gateway)
    assert run.outcome(0) == "error", where
    assert run.surfaced(0) == (-32004, error["message"]), f"{peer} raised {raised(run, 0)}\n{where}"
    assert [w["contentType"].split(";")[0] for w in run.wire(0) if w["rpcMethod"] == method] == [
        "application/json" if form == "json" else "text/event-stream"], where
    assert len(scripted.worker.calls(method)) == 1, where



@pytest.mark.slow
@pytest.mark.timeout(SDK_TIMEOUT)
@pytest.mark.parametrize("peer", V03_PEERS)
async def test_f17_v03_sdk_stream_ends_on_input_required_while_the_worker_holds_its_socket(
    scripted: ScriptedStack, peer: str
) -> None:
    """F17 (a): an interrupted status reaches a v0.3 SDK with ``final: true`` (the worker sent
    ``final: false``, as a2a-sdk 1.3's compat layer does) and the gateway ends the stream —
    v0.3 SDKs wait for the close, not for ``final`` — while the worker still holds its socket."""
    tid, cid = new_ids()
    gate = scripted.gate()
    scripted.worker.on("message/stream", sse=[
        Event(result=task_result(V03, tid, cid, "submitted")),
        Event(result=status_result(V03, tid, cid, "input-required", False)),
        gate,
    ])

    run = await run_peer(peer, scripted.card_url, [{"op": "stream", "text": "go"}], timeout=PEER_BOUND)

    where = run.transcript()
    followed_the_card(run, scripted.gateway)
    assert run.outcome(0) == "ended", f"{peer}'s stream did not end; it raised {raised(run, 0)}\n{where}"
    assert not gate.is_set(), where
    last = run.events(0)[-1]
    assert (last["state"], last.get("final", ABSENT)) == ("input-required", True), where


@pytest.mark.slow
@pytest.mark.timeout(SDK_TIMEOUT)
@pytest.mark.parametrize("peer", V03_PEERS)
async def test_f17_v03_sdk_reads_a_workers_own_json_refusal_of_a_stream(
    scripted: ScriptedStack, peer: str
) -> None:
    """F17 (b): a worker that refuses ``message/stream`` with plain JSON (-32004, HTTP 200)
    reaches a v0.3 SDK as one SSE error event, so the SDK surfaces the code and message."""
    scripted.worker.on("message/stream", json_error={"code": -32004, "message": "streaming is off today"})

    run = await run_peer(peer, scripted.card_url, [{"op": "stream", "text": "go"}], timeout=PEER_BOUND)

    where = run.transcript()
    followed_the_card(run, scripted.gateway)
    assert run.outcome(0) == "error", where
    code, message = run.surfaced(0)
    assert code == -32004 and "streaming is off today" in str(message), (
        f"{peer} must surface the worker's -32004; it raised {raised(run, 0)}\n{where}")
    assert [w["contentType"].split(";")[0] for w in run.wire(0)] == ["text/event-stream"], where
    assert len(scripted.worker.calls("message/stream")) == 1, where


@pytest.mark.slow
@pytest.mark.timeout(SDK_TIMEOUT)
@pytest.mark.parametrize("peer", V03_PEERS + V10_PEERS)
async def test_sdk_surfaces_a_stream_whose_every_event_was_refused(scripted: ScriptedStack, peer: str) -> None:
    """Issue #27 with genuine SDK clients (docs/protocol.md §7): the worker answers a follow-up
    to task A, streamed, with events of a new task B only (fasta2a 2.1.1 does); the gateway
    drops every one of them and ends the stream with the -32006 a unary answer gets, as an
    error event — so the SDK raises it, instead of an empty stream it reports as no response."""
    version = PEERS[peer].protocol
    first, cid = new_ids()
    other = new_ids()[0]
    waiting = "input-required" if version == V03 else "TASK_STATE_INPUT_REQUIRED"
    scripted.worker.on(SEND_METHOD[version], json_result=task_result(version, first, cid, waiting))
    completed_final = True if version == V03 else ABSENT
    scripted.worker.on(STREAM_METHOD[version], sse=[
        Event(result=task_result(version, other, cid, CANONICAL[version]["working"])),
        Event(result=status_result(version, other, cid, CANONICAL[version]["completed"], completed_final)),
    ])
    before = await scrape(scripted.admin)

    run = await run_peer(peer, scripted.card_url, [
        {"op": "send", "text": "hi"},
        {"op": "stream", "text": "more", "sameTask": True},
    ], timeout=PEER_BOUND)

    where = run.transcript()
    followed_the_card(run, scripted.gateway)
    assert run.outcome(0) == "ended" and [e["taskId"] for e in run.events(0)] == [first], where
    assert run.outcome(1) == "error" and run.events(1) == [], (
        f"{peer} must raise the refusal; it raised {raised(run, 1)}\n{where}")
    code, message = run.surfaced(1)
    assert code == -32006, f"{peer} surfaced {code!r}: {raised(run, 1)}\n{where}"
    assert message == f"invalid agent response: task_id_mismatch: payload for {other} on exchange of {first}", where
    (wire,) = [w for w in run.wire(1) if w["rpcMethod"] == STREAM_METHOD[version]]
    assert wire["status"] == 200 and wire["contentType"].startswith("text/event-stream"), where
    assert [name for name, _ in parse_sse(wire["body"])] == ["error"], where
    (streamed,) = scripted.worker.calls(STREAM_METHOD[version])  # it went through the gateway
    assert streamed.params["message"]["taskId"] == first
    after = await scrape(scripted.admin)
    assert delta(before, after, "a2a_gateway_requests_total", method=STREAM_METHOD[version],
                 outcome="invalid_agent_response") == 1, where


def rest_card() -> dict[str, Any]:
    """:func:`hybrid_card` with HTTP+JSON beside JSON-RPC in both versions (``/rest``; v0.3 REST
    under ``/rest/v1``), for SDK clients told to prefer HTTP+JSON."""
    card = hybrid_card()
    card["supportedInterfaces"] += [
        {"url": "http://127.0.0.1:1/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": "http://127.0.0.1:1/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
    ]
    card["additionalInterfaces"] = [{"url": "http://127.0.0.1:1/", "transport": "JSONRPC"},
                                    {"url": "http://127.0.0.1:1/rest", "transport": "HTTP+JSON"}]
    return card


@pytest.fixture(scope="module")
def rest_stack() -> Iterator[tuple[ScriptedWorker, RunningServer, RunningServer]]:
    """A scripted worker whose card offers HTTP+JSON too, behind a gateway of its own:
    ``(worker, gateway, admin)``."""
    worker = ScriptedWorker()
    worker.default_card = rest_card()
    with serve_in_thread(worker, name="refused-rest-worker") as w:
        app = build_app(_gateway_config(w.url, SHORT_DRAIN), registry=CollectorRegistry())
        with serve_gateway(app, name="refused-rest-gateway") as (gateway, admin):
            yield worker, gateway, admin


REST_PATHS = {V10: ("/rest/message:send", "/rest/message:stream"),
              V03: ("/rest/v1/message:send", "/rest/v1/message:stream")}


@pytest.mark.slow
@pytest.mark.timeout(SDK_TIMEOUT)
@pytest.mark.parametrize("peer", ["js03", "py13", "js13"])
async def test_sdk_surfaces_a_rest_stream_whose_every_event_was_refused(
    rest_stack: tuple[ScriptedWorker, RunningServer, RunningServer], peer: str
) -> None:
    """The same over HTTP+JSON: the error event carries the REST error body of the client's
    version (a ``google.rpc.Status`` for v1.0, ``{code, message, type}`` for v0.3), which
    these SDKs raise. (a2a-sdk 0.3's REST client parses every SSE event as a StreamResponse,
    an error event included, so it cannot surface any error event; not run here.)"""
    worker, gateway, admin = rest_stack
    worker.reset()
    version = PEERS[peer].protocol
    first, cid = new_ids()
    other = new_ids()[0]
    send_path, stream_path = REST_PATHS[version]

    def rest_task(tid: str, state: str) -> dict[str, Any]:
        return {"task": {"id": tid, "contextId": cid, "status": {"state": state}}}

    worker.on_path("POST", send_path, json_body=rest_task(first, "TASK_STATE_INPUT_REQUIRED"))
    worker.on_path("POST", stream_path, sse=[
        Data(rest_task(other, "TASK_STATE_WORKING")),
        Data({"statusUpdate": {"taskId": other, "contextId": cid, "status": {"state": "TASK_STATE_COMPLETED"},
                               **({"final": True} if version == V03 else {})}}),
    ])
    card_url = gateway.url_for("/.well-known/agent-card.json")

    run = await run_peer(peer, card_url, [
        {"op": "send", "text": "hi"},
        {"op": "stream", "text": "more", "sameTask": True},
    ], timeout=PEER_BOUND, transport="HTTP+JSON")

    where = run.transcript()
    assert run.client["transport"] == "HTTP+JSON", where
    assert run.client["endpoint"].rstrip("/") == gateway.url + "/rest", where
    assert run.outcome(0) == "ended" and [e["taskId"] for e in run.events(0)] == [first], where
    assert run.outcome(1) == "error" and run.events(1) == [], (
        f"{peer} must raise the refusal; it raised {raised(run, 1)}\n{where}")
    message = f"invalid agent response: task_id_mismatch: payload for {other} on exchange of {first}"
    assert message in json.dumps(run.errors(1)), f"{peer} raised {raised(run, 1)}\n{where}"
    (wire,) = run.wire(1)
    assert wire["status"] == 200 and [name for name, _ in parse_sse(wire["body"])] == ["error"], where
    (streamed,) = worker.path_calls("POST", stream_path)  # it went through the gateway
    assert streamed.json["message"]["taskId"] == first
