"""A Redis failover under load through the real gateway (docs/resume.md §4.5).

Topology, all on 127.0.0.1 with ephemeral ports: a primary, its replica and three Sentinels
(quorum 2, down after 1 s; tests/support/redis_ha.py); the gateway (``build_app`` under real
uvicorn) with a ``redis+sentinel://`` ledger; a scripted worker that completes every task in
its first answer (so every request stores one terminal state before the client sees it).

The run: clients send new tasks at a bounded concurrency; once enough are acknowledged the
primary is killed with SIGKILL — over a *direct* replication link, or a *partitioned* one: the
replica replicates through a relay of the test's (``LinkProxy``) that stops relaying first,
and the kill comes as soon as a few more terminal states reached the primary (a replica that
lags, as on a slow or partitioned network; over a direct local link the replica lagged too
little to lose anything in every run). The Sentinels promote the replica; the old primary is started again
(empty) as its replica; the load goes on until enough tasks are acknowledged after that. Then
every task whose terminal state a client received gets a follow-up message.

*Lost*: a task a client saw complete whose record the new primary does not hold. *Reached*:
a follow-up to such a task that the gateway forwarded to the worker instead of refusing.
With ``min_replica_acks: 1`` both must be 0; with acknowledgement off the numbers are printed
(they depend on timing) and only the run's sanity is asserted.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from gateway.app import build_app
from gateway.config import parse_config
from tests.support.gateway import serve_gateway
from tests.support.redis_ha import HaGroup, ha_group, poll, replica_link_up
from tests.support.scripted_worker import JsonResult, ReceivedRequest, ScriptedWorker
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.slow

V1 = {"A2A-Version": "1.0", "content-type": "application/json"}
CONCURRENCY = 16
MAX_REQUESTS = 4000  # the whole run's bound, follow-ups apart
WARM_UP = 150  # acknowledged tasks before the link is cut
AFTER_CUT = 8  # terminal states on the primary past the partition before it is killed
AFTER_RECOVERY = 150  # acknowledged tasks after the old primary rejoined
PHASE_TIMEOUT = 30.0
PREFIX = "a2agw"


def _answer(request: ReceivedRequest) -> JsonResult:
    message = request.params["message"]
    task_id = message.get("taskId") or f"t-{message['messageId']}"
    return JsonResult({"task": {"id": task_id, "contextId": "c",
                                "status": {"state": "TASK_STATE_COMPLETED"}}})


@dataclass
class Run:
    acked: list[str] = field(default_factory=list)  # task ids clients saw COMPLETED, in order
    outcomes: Counter[str] = field(default_factory=Counter)
    sent: int = 0
    stop: bool = False


async def _client(http: httpx.AsyncClient, url: str, run: Run, n: int) -> None:
    while not run.stop and run.sent < MAX_REQUESTS:
        run.sent += 1
        req_id = f"{n}-{run.sent}"
        body = {"jsonrpc": "2.0", "id": req_id, "method": "SendMessage", "params": {"message": {
            "messageId": req_id, "role": "ROLE_USER", "parts": [{"text": "go"}]}}}
        try:
            r = await http.post(url + "/", content=orjson.dumps(body), headers=V1)
        except httpx.HTTPError as exc:
            run.outcomes[type(exc).__name__] += 1
            continue
        doc = r.json()
        task = (doc.get("result") or {}).get("task") or {}
        if r.status_code == 200 and task.get("status", {}).get("state") == "TASK_STATE_COMPLETED":
            run.acked.append(task["id"])
            run.outcomes["acked"] += 1
        else:
            run.outcomes[f"http {r.status_code} {doc.get('error', {}).get('code')}"] += 1


async def _until(predicate: Any, message: str, timeout: float = PHASE_TIMEOUT) -> None:
    """Poll a condition of the run (on this loop) with a deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, message
        await asyncio.sleep(0.01)  # polling a condition, bounded by the deadline


def _terminal_count(group: HaGroup) -> int:
    client = group.primary.client()
    try:
        return int(client.zcard(f"{PREFIX}:terminal"))
    finally:
        client.close()


async def _drive(group: HaGroup, gateway_url: str, run: Run) -> dict[str, Any]:
    """The load and the failover; returns the timings and counts of the phases."""
    facts: dict[str, Any] = {}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        clients = [asyncio.ensure_future(_client(http, gateway_url, run, n)) for n in range(CONCURRENCY)]
        try:
            await _until(lambda: len(run.acked) >= WARM_UP, "no warm-up")
            if group.link is not None:  # partition the replication link, under load
                before = _terminal_count(group)
                group.link.hold()
                facts["acked_at_partition"] = len(run.acked)
                await asyncio.to_thread(poll, lambda: _terminal_count(group) >= before + AFTER_CUT,
                                        PHASE_TIMEOUT, "no terminal writes after the partition")
                facts["written_after_partition"] = _terminal_count(group) - before
            group.primary.kill9()
            killed = time.monotonic()
            facts["acked_at_kill"] = len(run.acked)
            promoted = group.replica.port
            await asyncio.to_thread(poll, lambda: group.master_port() == promoted, PHASE_TIMEOUT,
                                    "the Sentinels did not promote the replica")
            facts["promoted_after_s"] = round(time.monotonic() - killed, 2)
            facts["acked_at_promotion"] = len(run.acked)
            # started again, empty, as a replica of the promoted one (what an init script that
            # asks the Sentinels does; they would convert it themselves, but only after ~10 s)
            group.primary.args = ["--replicaof", "127.0.0.1", str(promoted)]
            await asyncio.to_thread(group.primary.start)
            await asyncio.to_thread(poll, lambda: replica_link_up(group.primary, promoted), PHASE_TIMEOUT,
                                    "the old primary did not rejoin as a replica")
            facts["rejoined_after_s"] = round(time.monotonic() - killed, 2)
            rejoined = len(run.acked)
            await _until(lambda: len(run.acked) >= rejoined + AFTER_RECOVERY or run.sent >= MAX_REQUESTS,
                         "no recovery after the old primary rejoined")
            facts["acked_after_rejoin"] = len(run.acked) - rejoined
        finally:
            run.stop = True
            await asyncio.gather(*clients)
    return facts


async def _follow_ups(gateway_url: str, task_ids: list[str]) -> Counter[str]:
    """One follow-up message per task; the gateway's answers by kind."""
    answers: Counter[str] = Counter()
    queue = list(task_ids)

    async def one(http: httpx.AsyncClient) -> None:
        while queue:
            tid = queue.pop()
            body = {"jsonrpc": "2.0", "id": tid, "method": "SendMessage", "params": {"message": {
                "messageId": f"f-{tid}", "taskId": tid, "role": "ROLE_USER", "parts": [{"text": "more"}]}}}
            r = await http.post(gateway_url + "/", content=orjson.dumps(body), headers=V1)
            answers[str(r.json().get("error", {}).get("code", "forwarded"))] += 1

    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        await asyncio.gather(*(one(http) for _ in range(CONCURRENCY)))
    return answers


# redis-py (8.1) can drop a connection to the killed primary without closing it when a command
# on it is cancelled mid-failover (a client of the test's load gone, a replica-ack wait ended);
# its __del__ closes the socket and warns ("unclosed"; or, for an asyncio StreamWriter of the
# gateway's loop collected after that loop has closed, "loop is closed": seen under a CPU hog,
# 13 such warnings in one run). Ignored here, and collected before the test ends so the warning
# cannot land in a later test.
@pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")
@pytest.mark.filterwarnings("ignore:loop is closed:ResourceWarning")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("link", ["direct", "partitioned"])
@pytest.mark.parametrize("acks", [1, 0], ids=["acks-on", "acks-off"])
def test_a_primary_killed_under_load(acks: int, link: str) -> None:
    worker = ScriptedWorker()
    worker.on("SendMessage", handler=_answer, times=None)
    with ha_group(lagging_link=link == "partitioned") as group, serve_in_thread(worker, name="worker") as wsrv:
        config = parse_config({
            "upstreams": [{"name": "worker", "url": wsrv.url + "/", "prefix": "/"}],
            "listen": {"port": 0}, "admin": {"port": 0},
            "ledger": {"url": group.url(), "min_replica_acks": acks, "replica_ack_timeout_seconds": 0.5},
        })
        app = build_app(config)
        ledger = app.state.runtime.ledger
        with serve_gateway(app) as (gsrv, _):
            run = Run()
            facts = asyncio.run(_drive(group, gsrv.url, run))
            # before the follow-ups: a forwarded one makes the worker's answer a new record
            new_primary = group.replica.client()
            try:
                held = [new_primary.hget(f"{PREFIX}:task:worker:{tid}", "term") for tid in run.acked]
            finally:
                new_primary.close()
            worker_calls_before = len(worker.calls("SendMessage"))
            answers = asyncio.run(_follow_ups(gsrv.url, run.acked))
            reached = len(worker.calls("SendMessage")) - worker_calls_before
    gc.collect()
    lost = sum(1 for term in held if term != b"1")
    summary = {"min_replica_acks": acks, "link": link, "sent": run.sent, "acked": len(run.acked), **facts,
               "outcomes": dict(run.outcomes), "replica_ack_failures": getattr(ledger, "replica_ack_failures", None),
               "lost": lost, "follow_ups": dict(answers), "follow_ups_reaching_worker": reached}
    print("\nfailover:", orjson.dumps(summary).decode())

    assert facts["acked_after_rejoin"] >= AFTER_RECOVERY, "the gateway recovered after the failover"
    assert sum(answers.values()) == len(run.acked)
    if acks:
        assert lost == 0, summary
        assert reached == 0, summary
        assert answers == {"-32004": len(run.acked)}, summary
