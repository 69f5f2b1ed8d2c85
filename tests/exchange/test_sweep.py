"""The sweep's pure core (gateway/exchange/sweep.py, docs/sweep.md §2-§3): which listed tasks
are due, the worker's road, and the exchange driven offline against a dict ledger and a
scripted worker (gateway/offline.py)."""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

import orjson
import pytest

from gateway.a2a.states import TaskState
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.exchange.commands import Count, Log, Post
from gateway.exchange.model import Policy
from gateway.offline import Ledger, Offline
from gateway.exchange.sweep import (ProbeRoute, SweepExchange, due, forget_before, probe_exchange, probe_route,
                                    select)
from gateway.invariants.admission import CardView
from gateway.invariants.model import TaskRecord
from gateway.records import LiveTask

NOW = 1_780_000_000.0
HEARTBEAT = 30.0
V10, V03 = ProtocolVersion.V1_0, ProtocolVersion.V0_3
JSONRPC, REST = Binding.JSONRPC, Binding.REST


def task(**fields: Any) -> LiveTask:
    doc = {"upstream": "w", "tenant": "", "task_id": "t-1", "observed_at": NOW - 100, **fields}
    return LiveTask(**doc)


# --- due ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fields,swept_at,streaming,expected", [
    ({"observed_at": NOW - 31}, None, False, None),  # silent past the heartbeat: due
    ({"observed_at": NOW - 30}, None, False, "not_due"),  # exactly one heartbeat: not yet
    ({"observed_at": NOW - 5}, None, False, "not_due"),
    ({"observed_at": NOW - 100}, None, True, "open_stream"),  # its stream keeps it fresh
    ({"observed_at": NOW - 100}, NOW - 10, False, "recently_swept"),  # one GetTask per heartbeat gap
    ({"observed_at": NOW - 100}, NOW - 30, False, None),  # a heartbeat after the last sweep: again
    ({"observed_at": NOW - 5}, NOW - 10, True, "open_stream"),  # the first reason wins
])
def test_due(fields: dict[str, Any], swept_at: float | None, streaming: bool, expected: str | None) -> None:
    assert due(task(**fields), now=NOW, heartbeat_seconds=HEARTBEAT, swept_at=swept_at,
               streaming=streaming) == expected


def test_select_keeps_the_due_ones_in_order_and_counts_the_rest() -> None:
    page = [task(task_id="a"), task(task_id="b"), task(task_id="c", observed_at=NOW - 1),
            task(task_id="d"), task(task_id="e", tenant="acme")]
    swept = {("w", "", "b"): NOW - 1}
    streaming = {("w", "", "d"), ("w", "", "e")}  # e's key has no tenant: another task
    chosen, skipped = select(page, now=NOW, heartbeat_seconds=HEARTBEAT, swept=swept, streaming=streaming)
    assert [t.task_id for t in chosen] == ["a", "e"]
    assert skipped == {"recently_swept": 1, "not_due": 1, "open_stream": 1}


def test_forget_before_names_only_entries_older_than_the_cutoff() -> None:
    swept = {("w", "", "old"): NOW - 31, ("w", "", "new"): NOW - 29}
    assert forget_before(swept, NOW - HEARTBEAT) == [("w", "", "old")]


# --- the road ---------------------------------------------------------------------------------


@pytest.mark.parametrize("speaks,expected", [
    ({(V10, JSONRPC), (V03, JSONRPC), (V10, REST)}, ProbeRoute(JSONRPC, V10, "/a2a")),  # the card's path
    ({(V03, JSONRPC), (V10, REST)}, ProbeRoute(JSONRPC, V03, "/rpc")),  # none in the card: the mount's
    ({(V10, REST), (V03, REST)}, ProbeRoute(REST, V10, "/api")),
    ({(V03, REST)}, ProbeRoute(REST, V03, "/legacy")),  # the card's /v1 is the version's, not the base
    (set(), None),  # nothing known of the worker: no guess
])
def test_probe_route_prefers_json_rpc_then_the_newer_version(speaks: set[Any], expected: ProbeRoute | None) -> None:
    paths = {(V10, JSONRPC): "/a2a", (V10, REST): "/api/", (V03, REST): "/legacy/v1"}
    assert probe_route(speaks, jsonrpc_path="/rpc", paths=paths) == expected


# --- the exchange, offline --------------------------------------------------------------------

CARD = CardView({"name": "w"}, True, True, '"e-1"')
POLICY = Policy(upstream="w", heartbeat_seconds=HEARTBEAT)


def record(state: TaskState = TaskState.WORKING, observed_at: float = NOW - 100) -> TaskRecord:
    return TaskRecord("w", "t-1", "c-1", state, observed_at, card_etag='"e-1"')


def sweep(road: ProbeRoute, acts: list[dict[str, Any]], stored: TaskRecord | None = None,
          listed: LiveTask | None = None) -> tuple[Offline, SweepExchange]:
    ledger = Ledger()
    if stored is not None:
        ledger.add(stored)
    off = Offline(upstream="w", ledger=ledger, now=NOW, worker=deque(acts))
    listed = listed or task()
    exchange = SweepExchange(listed, probe_exchange(road, listed, CARD, POLICY), POLICY,
                             jsonrpc_path=road.path if road.binding is JSONRPC else "/")
    assert off.run(exchange.run())
    assert off.value is exchange.result
    return off, exchange


def answer(state: str, **extra: Any) -> dict[str, Any]:
    return {"answer": {"jsonrpc": "2.0", "id": "a2a-gateway-probe",
                       "result": {"id": "t-1", "contextId": "c-1", "status": {"state": state}, **extra}}}


def posts(off: Offline) -> list[Post]:
    return [c for c in off.commands if type(c) is Post]


def counted(off: Offline, metric: str) -> list[tuple[str, ...]]:
    return [c.labels for c in off.counts if c.metric == metric]


def test_f22_a_task_back_in_submitted_is_a_stale_record() -> None:
    """The sweep's answer contradicts the record (a working task cannot go back to submitted):
    a ``stale_record`` divergence (docs/field-cases.md F22); the state is recorded all the same."""
    off, ex = sweep(ProbeRoute(JSONRPC, V10, "/"), [answer("TASK_STATE_SUBMITTED")], record())
    assert [(f.kind, f.category) for f in off.findings] == [("stale_record", "divergence")]
    assert not [c for c in off.commands if type(c) is Log and c.event == "task_moved_on"]
    assert ex.result.outcome == "changed" and off.ledger.records[("w", "", "t-1")].state is TaskState.SUBMITTED


def test_a_task_the_worker_now_calls_failed_is_recorded_failed_as_progress() -> None:
    off, ex = sweep(ProbeRoute(JSONRPC, V10, "/"), [answer("TASK_STATE_FAILED")], record())
    [post] = posts(off)
    body = orjson.loads(post.body)
    assert (post.method, post.target, post.a2a_version) == ("POST", "/", "1.0")
    assert body["method"] == "GetTask" and body["params"] == {"id": "t-1", "historyLength": 0}
    assert off.ledger.records[("w", "", "t-1")].state is TaskState.FAILED
    assert off.ledger.records[("w", "", "t-1")].observed_at == NOW
    assert counted(off, "forced_gets") == [("sweep",)]
    # working → failed is the task moving on, not a contradiction (docs/field-cases.md F22)
    assert off.findings == []
    [moved] = [c for c in off.commands if type(c) is Log and c.event == "task_moved_on"]
    assert moved.level == "debug" and dict(moved.fields)["recorded"] == "TASK_STATE_WORKING"
    assert ex.result.outcome == "changed" and ex.result.state == "TASK_STATE_FAILED"
    assert ex.result.task["status"]["state"] == "TASK_STATE_FAILED"  # the Task as recorded, v1.0
    # the timeline says it was the gateway's own GetTask, and why (docs/observability.md §2)
    [(task_id, entry)] = off.timeline
    assert (task_id, entry.direction, entry.forced_get, entry.method) == ("t-1", "probe", "sweep", "GetTask")
    assert (entry.state_received, entry.state) == ("TASK_STATE_FAILED", "TASK_STATE_FAILED")


def test_a_task_still_working_is_observed_again_with_no_finding() -> None:
    off, ex = sweep(ProbeRoute(JSONRPC, V10, "/"), [answer("TASK_STATE_WORKING")], record())
    stored = off.ledger.records[("w", "", "t-1")]
    assert stored.state is TaskState.WORKING and stored.observed_at == NOW  # not due again for a heartbeat
    assert off.findings == [] and ex.result.outcome == "unchanged" and ex.result.task is None
    assert off.timeline == []  # a sweep that changed nothing is no entry: heartbeats would crowd the bound


def test_a_v03_only_worker_is_asked_tasks_get_and_its_answer_recorded_in_v10_form() -> None:
    off, ex = sweep(ProbeRoute(JSONRPC, V03, "/"),
                    [answer("failed", kind="task")], record())
    [post] = posts(off)
    body = orjson.loads(post.body)
    assert body["method"] == "tasks/get" and post.a2a_version == ""
    assert off.ledger.records[("w", "", "t-1")].state is TaskState.FAILED
    assert ex.result.outcome == "changed" and ex.result.task["status"]["state"] == "TASK_STATE_FAILED"
    assert "kind" not in ex.result.task


def test_a_rest_worker_is_asked_below_its_rest_base() -> None:
    act = {"answer": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_CANCELED"}}}
    off, ex = sweep(ProbeRoute(REST, V10, "/api"), [act], record())
    [post] = posts(off)
    assert (post.method, post.target, post.body) == ("GET", "/api/tasks/t-1?historyLength=0", b"")
    assert off.ledger.records[("w", "", "t-1")].state is TaskState.CANCELED and ex.result.outcome == "changed"


def test_a_rest_probe_names_the_tenant_percent_encoded_as_one_path_segment() -> None:
    """A tenant is any string (JSON-RPC ``params.tenant``, or a REST path segment decoded):
    the probe's path holds it as one segment, not ``..`` or a query of the worker's."""
    tenant = "a/../admin?x=1#y"
    stored = dataclasses.replace(record(), tenant=tenant)
    ledger = Ledger()
    ledger.add(stored)
    off = Offline(upstream="w", ledger=ledger, now=NOW, worker=deque(
        [{"answer": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}]))
    listed = task(tenant=tenant)
    road = ProbeRoute(REST, V10, "/api")
    assert off.run(SweepExchange(listed, probe_exchange(road, listed, CARD, POLICY), POLICY).run())
    [post] = posts(off)
    assert post.target == "/a%2F..%2Fadmin%3Fx%3D1%23y/api/tasks/t-1?historyLength=0"


def test_a_tenants_task_is_asked_with_its_tenant_before_the_rest_prefix() -> None:
    act = {"answer": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_FAILED"}}}
    stored = dataclasses.replace(record(), tenant="acme/eu")
    off, ex = sweep(ProbeRoute(REST, V10, "/rest"), [act], stored, task(tenant="acme/eu"))
    [post] = posts(off)
    # as a client's REST path through the gateway names it, and a2a-sdk mounts it (docs/callers.md §1)
    assert post.target == "/acme%2Feu/rest/tasks/t-1?historyLength=0"
    assert off.ledger.records[("w", "acme/eu", "t-1")].state is TaskState.FAILED and ex.result.outcome == "changed"
    [(_, entry)] = off.timeline
    assert (entry.direction, entry.forced_get) == ("probe", "sweep")


def test_a_tenants_task_is_asked_with_params_tenant_over_json_rpc() -> None:
    stored = dataclasses.replace(record(), tenant="acme")
    off, ex = sweep(ProbeRoute(JSONRPC, V10, "/"), [answer("TASK_STATE_FAILED")], stored, task(tenant="acme"))
    [post] = posts(off)
    assert orjson.loads(post.body)["params"] == {"id": "t-1", "historyLength": 0, "tenant": "acme"}
    assert off.ledger.records[("w", "acme", "t-1")].state is TaskState.FAILED and ex.result.outcome == "changed"


def test_an_unreachable_worker_leaves_the_record_untouched() -> None:
    off, ex = sweep(ProbeRoute(JSONRPC, V10, "/"), [{"fail": "connect"}], record())
    assert off.ledger.records[("w", "", "t-1")] == record() and off.ledger.versions == {("w", "", "t-1"): 1}
    assert ex.result.outcome == "error" and off.findings == []
    assert counted(off, "forced_gets") == [("sweep",)] and counted(off, "upstream_errors") == [("connect",)]


def test_task_not_found_is_counted_never_turned_into_a_state() -> None:
    act = {"answer": {"jsonrpc": "2.0", "id": "a2a-gateway-probe",
                      "error": {"code": -32001, "message": "Task not found"}}}
    off, ex = sweep(ProbeRoute(JSONRPC, V10, "/"), [act], record())
    assert off.ledger.records[("w", "", "t-1")] == record()
    assert ex.result.outcome == "not_found" and off.findings == []


def test_an_unknown_state_is_refused_and_recorded_as_nothing() -> None:
    off, ex = sweep(ProbeRoute(JSONRPC, V10, "/"), [answer("TASK_STATE_EXPLODED")], record())
    assert off.ledger.records[("w", "", "t-1")].state is TaskState.WORKING
    assert ex.result.outcome == "error"


@pytest.mark.parametrize("stored", [
    record(observed_at=NOW - 1),  # observed since it was listed (a concurrent writer)
    record(TaskState.COMPLETED),  # terminal since: never swept
    None,  # gone (pruned)
])
def test_a_task_no_longer_due_once_loaded_gets_no_get_task(stored: TaskRecord | None) -> None:
    off, ex = sweep(ProbeRoute(JSONRPC, V10, "/"), [answer("TASK_STATE_FAILED")], stored)
    assert posts(off) == [] and not any(isinstance(c, Count) and c.metric == "forced_gets" for c in off.counts)
    assert ex.result.outcome == "not_due"


def test_a_restart_flag_is_cleared_by_the_sweeps_observation() -> None:
    ledger_record = record()
    off = Offline(upstream="w", now=NOW, worker=deque([answer("TASK_STATE_WORKING")]))
    off.ledger.add(ledger_record)
    off.ledger.flag("w", "t-1")
    listed = task()
    exchange = SweepExchange(listed, probe_exchange(ProbeRoute(JSONRPC, V10, "/"), listed, CARD, POLICY), POLICY)
    assert off.run(exchange.run())
    assert off.ledger.resync == set() and exchange.result.outcome == "unchanged"


def test_a_state_a_concurrent_writer_recorded_meanwhile_wins_and_is_not_the_sweeps() -> None:
    """While the GetTask is out, a client's exchange records the task completed: the judge
    reads the record again, the terminal state stays, and the sweep reports no change of its
    own (no stale_record, nothing for the push relay)."""
    off = Offline(upstream="w", now=NOW)
    off.ledger.add(record())
    listed = task()
    exchange = SweepExchange(listed, probe_exchange(ProbeRoute(JSONRPC, V10, "/"), listed, CARD, POLICY), POLICY)
    gen = exchange.run()
    assert not off.run(gen)  # waiting for the worker's answer
    off.ledger.put(record(TaskState.COMPLETED, observed_at=NOW - 1), 1)  # the other writer
    off.worker.append(answer("TASK_STATE_FAILED"))
    assert off.resume(gen)
    assert off.ledger.records[("w", "", "t-1")].state is TaskState.COMPLETED
    assert exchange.result.outcome == "unchanged" and exchange.result.task is None
    assert "stale_record" not in [f.kind for f in off.findings]
