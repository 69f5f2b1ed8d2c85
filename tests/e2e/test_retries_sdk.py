"""Safe retries (docs/retries.md) with genuine SDK clients whose answer is lost.

Topology (all on 127.0.0.1, ephemeral ports)::

    SDK client ──► DropFirstAnswer hop ──► gateway ──► a2a-sdk 1.3 demo worker (recorded)

The hop (tests/support/fault_hop.py) lets the first send of each ``messageId`` reach the
gateway and the worker, reads the gateway's answer, and cuts the client's connection in the
middle of it; the client then sends the same message again (same ``messageId``), as a
client's retry does. Every client follows the card the gateway serves (through the hop), so
its calls go through the hop and the gateway. For a2a-sdk 1.3 and @a2a-js/sdk 1.3 (v1.0) and
a2a-sdk 0.3 / @a2a-js/sdk 0.3.14 (v0.3), over JSON-RPC and HTTP+JSON, unary and streaming:
the first attempt fails at the client, the retry gets the task the first attempt started —
completed — and the worker received exactly one send. Marked ``slow`` (a peer process each).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gateway.app import build_app
from gateway.config import sidecar_config
from tests.e2e.conftest import TRACE_HEADER, Stack
from tests.support.fault_hop import DropFirstAnswer
from tests.support.gateway import serve_gateway
from tests.support.peers import PEERS, py_worker03, run_peer
from tests.support.servers import RunningServer, serve_in_thread

PEER_TIMEOUT = 25.0
COMPLETED = {"1.0": "TASK_STATE_COMPLETED", "0.3": "completed"}
SEND_PATHS = ("/message:send", "/message:stream")
SEND_METHODS = ("SendMessage", "SendStreamingMessage", "message/send", "message/stream")


@pytest.fixture(scope="module")
def hop(stack: Stack) -> Iterator[tuple[DropFirstAnswer, RunningServer]]:
    app = DropFirstAnswer(stack.gateway.url)
    with serve_in_thread(app, name="fault-hop") as server:
        yield app, server


@pytest.fixture(scope="module")
def stack03() -> Iterator[tuple[DropFirstAnswer, RunningServer, DropFirstAnswer]]:
    """For v0.3 REST (the demo worker's card has no v0.3 HTTP+JSON interface): the genuine
    a2a-sdk 0.3 worker, a recording hop in front of it (what the worker received), the
    gateway, and the dropping hop; yields ``(drop hop, its server, recording hop)``."""
    with py_worker03() as worker:
        recorder = DropFirstAnswer(worker, drop=False)
        with serve_in_thread(recorder, name="worker03-recorder") as recorded:
            config = sidecar_config(recorded.url + "/", host="127.0.0.1", port=0, mode="enforce", name="worker",
                                    ledger="memory")
            with serve_gateway(build_app(config), name="retries03-gateway") as (gateway, _):
                app = DropFirstAnswer(gateway.url)
                with serve_in_thread(app, name="fault-hop03") as server:
                    yield app, server, recorder


def _sends_at_worker(stack: Stack, trace: str) -> int:
    return sum(1 for r in stack.recorder.requests(trace)
               if r.rpc_method in SEND_METHODS or r.path.endswith(SEND_PATHS))


@pytest.mark.slow
@pytest.mark.parametrize("op", ["send", "stream"])
@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON"])
@pytest.mark.parametrize("peer", ["py13", "js13", "py03", "js03"])
async def test_a_retry_after_a_lost_answer_gets_the_first_task(
        stack: Stack, request: pytest.FixtureRequest, peer: str, transport: str, op: str) -> None:
    rest03 = PEERS[peer].protocol == "0.3" and transport == "HTTP+JSON"
    if rest03:
        app, server, recorder = request.getfixturevalue("stack03")
    else:
        app, server = request.getfixturevalue("hop")
    trace, message_id = uuid.uuid4().hex, f"retry-{uuid.uuid4().hex}"
    step = {"op": op, "text": "hi", "messageId": message_id}
    run = await run_peer(peer, server.url_for("/.well-known/agent-card.json"), [step, dict(step)],
                         timeout=PEER_TIMEOUT, headers={TRACE_HEADER: trace}, transport=transport)
    where = f"{peer} {transport} {op}\n{run.stderr[-2000:]}\n{run.lines}"
    assert run.done, where
    assert run.client["transport"] == transport, where
    assert message_id in app.cut, where  # the first answer was lost on the way
    assert run.outcome(0) == "error", where
    retried = run.events(1)
    assert retried and run.outcome(1) == "ended", where
    task_ids = {e["taskId"] for e in retried if e.get("taskId")}
    assert len(task_ids) == 1, where
    first_seen = {e["taskId"] for e in run.events(0) if e.get("taskId")}
    assert first_seen <= task_ids, where  # what the first attempt saw is the same task
    assert retried[-1].get("state") == COMPLETED[PEERS[peer].protocol], where
    if rest03:
        assert recorder.sends.count(message_id) == 1, where
    else:
        assert _sends_at_worker(stack, trace) == 1, where
