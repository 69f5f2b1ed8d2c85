"""Resuming with ``Last-Event-ID`` through real gateway processes and durable ledgers
(docs/resume.md §1, §2): the replay window survives a ``kill -9`` of the gateway (SQLite,
Redis), serves a resume on another replica (Redis), and genuine SDK clients (a2a-sdk 1.3,
@a2a-js/sdk 1.3) resume by sending the header.

The first stream is read by a plain HTTP client that handles three of six chunks before it
goes away; the resume must deliver chunks 4-8 once each, in order.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway import gateway_process
from tests.support.peers import run_peer
from tests.support.redis_server import redis_server
from tests.support.resume import (
    WORKING,
    chunks_of,
    first_stream,
    read_stream,
    resumed_stream,
    task,
)
from tests.support.scripted_worker import Gate, ScriptedWorker
from tests.support.servers import serve_in_thread

V1 = {"A2A-Version": "1.0"}
SEND = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}
MISSED = [f"chunk {n}" for n in range(4, 9)]


@pytest.fixture
def tid() -> str:
    """A task id of this test's own: the module's Redis outlives each test's ledger."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def worker() -> Iterator[tuple[ScriptedWorker, str, Gate]]:
    w, gate = ScriptedWorker(), Gate()
    with serve_in_thread(w) as srv:
        yield w, srv.url, gate
        gate.release()


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/ledger.db"
    return request.getfixturevalue("redis_url")


def cut_first_stream(url: str, w: ScriptedWorker, gate: Gate, client: httpx.Client, tid: str) -> list[str | None]:
    """The first stream through ``url``: returns the SSE ids of its seven events."""
    first_stream(w, tid, gate)
    send = {**SEND, "params": {"message": {**SEND["params"]["message"], "messageId": uuid.uuid4().hex}}}
    frames = read_stream(client, url + "/", send, V1, stop_after=7)
    assert chunks_of(frames) == [f"chunk {n}" for n in range(1, 7)]
    assert len(w.calls("SendStreamingMessage")) == 1  # it went through the gateway
    return [f.id for f in frames]


def resume(url: str, w: ScriptedWorker, client: httpx.Client, ids: list[str | None], tid: str) -> None:
    """Resume after chunk 3 through ``url`` and check chunks 4-8 arrive once, in order."""
    resumed_stream(w, tid, 7, 8)
    subscribe = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": tid}}
    again = read_stream(client, url + "/", subscribe, {**V1, "Last-Event-ID": str(ids[3])})
    assert chunks_of(again) == MISSED
    assert [f.id for f in again[:3]] == ids[4:]
    assert "last-event-id" not in w.calls("SubscribeToTask")[-1].headers


def test_a_cut_client_resumes_from_the_durable_window(worker: Any, ledger: str, tid: str) -> None:
    w, wurl, gate = worker
    with gateway_process(wurl, ledger) as (url, _, admin), httpx.Client(trust_env=False, timeout=10) as client:
        ids = cut_first_stream(url, w, gate, client, tid)
        resume(url, w, client, ids, tid)
        metrics = client.get(admin + "/metrics").text
        assert 'a2a_gateway_replayed_events_total{upstream="worker"} 3.0' in metrics


def test_the_window_survives_a_kill_9_of_the_gateway(worker: Any, ledger: str, tid: str) -> None:
    w, wurl, gate = worker
    with httpx.Client(trust_env=False, timeout=10) as client:
        with gateway_process(wurl, ledger) as (url, proc, _):
            ids = cut_first_stream(url, w, gate, client, tid)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        with gateway_process(wurl, ledger) as (url, _, admin):
            w.on("GetTask", json_result=task(tid, WORKING))  # the restart forces one first
            resume(url, w, client, ids, tid)
            assert len(w.calls("GetTask")) == 1
            metrics = client.get(admin + "/metrics").text
            assert 'a2a_gateway_forced_get_total{reason="restart",upstream="worker"} 1.0' in metrics


def test_a_stream_begun_on_one_replica_resumes_on_another(worker: Any, redis_url: str, tid: str) -> None:
    w, wurl, gate = worker
    with gateway_process(wurl, redis_url) as (a, _, _), gateway_process(wurl, redis_url) as (b, _, _), \
            httpx.Client(trust_env=False, timeout=10) as client:
        ids = cut_first_stream(a, w, gate, client, tid)
        resume(b, w, client, ids, tid)


@pytest.mark.parametrize("peer", ["py13", "js13"])
def test_an_sdk_client_resumes_by_sending_the_header(worker: Any, tmp_path: Path, peer: str, tid: str) -> None:
    """The SDK's own subscribe with ``Last-Event-ID`` among its HTTP headers (the scenario's
    ``headers``: a2a-sdk ``ClientCallContext.service_parameters`` / an ``httpx_client`` with
    headers; @a2a-js/sdk a ``fetchImpl`` adding it), following the card the gateway serves."""
    w, wurl, gate = worker
    with gateway_process(wurl, f"sqlite:///{tmp_path}/ledger.db") as (url, _, _), \
            httpx.Client(trust_env=False, timeout=10) as client:
        ids = cut_first_stream(url, w, gate, client, tid)
        resumed_stream(w, tid, 7, 8)
        run = asyncio.run(run_peer(peer, url + "/.well-known/agent-card.json",
                                   [{"op": "resubscribe", "taskId": tid}], headers={"Last-Event-ID": str(ids[3])}))
        assert run.done, run.transcript()
        texts = [part.get("text") for e in run.events(0) if e["kind"] == "artifactUpdate"
                 for part in e["raw"]["artifactUpdate"]["artifact"]["parts"]]
        assert texts == MISSED, run.transcript()
        assert any(wire.get("url", "").startswith(url) for wire in run.of("wire")), run.transcript()
