"""One view of a task (docs/field-cases.md F18-F22), through the real gateway on every road a
client takes (tests/proxy/roads.py: JSON-RPC and REST, v1.0 and v0.3, and the version bridge
both ways for the artifact cases): what a stream refused never comes back by another answer,
a card that changed and changed back is still a change, a reused task id never hides the
recorded task, and ordinary progress is not a divergence."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import orjson
import pytest

from gateway.invariants.engine import CORRECTED_KEY
from tests.proxy.conftest import Harness
from tests.proxy.roads import (
    BRIDGES,
    ROADS,
    Driver,
    Road,
    answered_view,
    art,
    artifact_event,
    delivered_view,
    state,
)
from tests.support.objects import status_update, task
from tests.support.scripted_worker import default_card
from tests.support.servers import wait_until


@pytest.fixture(params=ROADS + BRIDGES, ids=lambda r: r.id)
def road(request: Any, make_harness: Any) -> Driver:
    spec: Road = request.param
    return Driver(make_harness(card=spec.card), spec)


@pytest.fixture(params=ROADS, ids=lambda r: r.id)
def plain_road(request: Any, make_harness: Any) -> Driver:
    spec: Road = request.param
    return Driver(make_harness(card=spec.card), spec)


def kinds(events: list[tuple[str, Any]]) -> list[str]:
    return [k for k, _ in events]


def note(task_doc: dict[str, Any]) -> dict[str, Any]:
    return (task_doc.get("metadata") or {}).get(CORRECTED_KEY) or {}


# ---------------------------------------------------------------------------------- F18

def _f18_turns(d: Driver) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """Turn 1 seals a-3 and asks for input; turn 2 appends to it and then rewrites it whole
    with as many parts, then completes."""
    d.on_stream([{"task": task("t-18", "TASK_STATE_SUBMITTED")},
                 artifact_event("t-18", "a-3", "draft one", "draft two", lastChunk=True),
                 status_update("t-18", "TASK_STATE_INPUT_REQUIRED")])
    first = d.stream("plan it")
    d.on_stream([artifact_event("t-18", "a-3", "more", append=True),
                 artifact_event("t-18", "a-3", "rewritten one", "rewritten two", append=False),
                 status_update("t-18", "TASK_STATE_COMPLETED")])
    second = d.stream("yes", task_id="t-18")
    return first, second


def test_f18_a_sealed_artifact_rewritten_in_a_later_turn_is_never_shown(road: Driver) -> None:
    first, second = _f18_turns(road)
    assert kinds(first) == ["task", "artifact", "status"]
    assert kinds(second) == ["status"] and state(second[0][1]) == "completed"
    assert road.h.divergences("artifact_after_last_chunk") == 2
    shown = delivered_view(second, delivered_view(first))
    assert shown == {"a-3": ["draft one", "draft two"]}
    # the worker holds the rewrite: GetTask never shows it, nor the text the client had
    road.on_get("t-18", task("t-18", "TASK_STATE_COMPLETED", artifacts=[art("a-3", "rewritten one", "rewritten two")]))
    kind, answer = road.get("t-18")
    assert kind == "task" and state(answer) == "completed"
    assert answered_view(answer) == {}
    assert note(answer)["reason"] == "artifact_after_last_chunk" and note(answer)["artifacts"] == ["a-3"]


def test_f18_a_sealed_artifact_appended_to_is_cut_back_to_what_was_shown(road: Driver) -> None:
    first, second = _f18_turns(road)
    road.on_get("t-18", task("t-18", "TASK_STATE_COMPLETED",
                             artifacts=[art("a-3", "draft one", "draft two", "more")]))
    kind, answer = road.get("t-18")
    assert kind == "task"
    assert answered_view(answer) == delivered_view(second, delivered_view(first)) == {"a-3": ["draft one", "draft two"]}
    assert note(answer)["artifacts"] == ["a-3"]
    # an answer that agrees goes as the worker wrote it, without a note
    road.on_get("t-18", task("t-18", "TASK_STATE_COMPLETED", artifacts=[art("a-3", "draft one", "draft two")]))
    kind, answer = road.get("t-18")
    assert answered_view(answer) == {"a-3": ["draft one", "draft two"]} and note(answer) == {}


def test_f18_the_live_task_answer_is_corrected_too(road: Driver) -> None:
    """Before the task ends: GetTask of the INPUT_REQUIRED task after turn 1, with the worker
    already holding a rewrite of the sealed artifact."""
    road.on_stream([{"task": task("t-18", "TASK_STATE_SUBMITTED")},
                    artifact_event("t-18", "a-3", "draft one", lastChunk=True),
                    status_update("t-18", "TASK_STATE_INPUT_REQUIRED")])
    road.stream("plan it")
    road.on_get("t-18", task("t-18", "TASK_STATE_INPUT_REQUIRED", artifacts=[art("a-3", "other")]))
    kind, answer = road.get("t-18")
    assert kind == "task" and state(answer) == "input-required"
    assert answered_view(answer) == {} and note(answer)["artifacts"] == ["a-3"]


def test_f18_a_subscribe_snapshot_is_corrected_too(plain_road: Driver) -> None:
    d = plain_road
    d.on_stream([{"task": task("t-18", "TASK_STATE_SUBMITTED")},
                 artifact_event("t-18", "a-3", "draft one", lastChunk=True),
                 artifact_event("t-18", "a-4", "notes"),
                 status_update("t-18", "TASK_STATE_INPUT_REQUIRED")])
    d.stream("plan it")
    d.on_subscribe("t-18", [{"task": task("t-18", "TASK_STATE_INPUT_REQUIRED",
                                          artifacts=[art("a-3", "redraft"), art("a-4", "notes")])}])
    got = d.subscribe("t-18")
    assert kinds(got) == ["task"]
    assert answered_view(got[0][1]) == {"a-4": ["notes"]} and note(got[0][1])["artifacts"] == ["a-3"]


def test_f18_the_artifacts_of_a_task_are_bounded(make_harness: Any) -> None:
    """At most MAX_ARTIFACTS artifacts per task reach the record and the client; one more is
    not delivered, counted as the worker reaching the bound."""
    from gateway.invariants.model import MAX_ARTIFACTS
    from tests.proxy.roads import ROADS as roads
    d = Driver(make_harness(), roads[0])
    d.on_stream([{"task": task("t-18", "TASK_STATE_WORKING")},
                 *(artifact_event("t-18", f"a-{i}", "x") for i in range(MAX_ARTIFACTS + 1)),
                 status_update("t-18", "TASK_STATE_COMPLETED")])
    got = d.stream()
    assert len(delivered_view(got)) == MAX_ARTIFACTS and f"a-{MAX_ARTIFACTS}" not in delivered_view(got)
    assert d.h.metric("a2a_gateway_limits_reached_total", limit="max_artifacts_per_task", side="worker") == 1
    stored = d.h.on_gateway_loop(d.h.runtime.ledger.get("worker", "t-18"))
    assert len(stored.record.artifacts) == MAX_ARTIFACTS


# ---------------------------------------------------------------------------------- F19

def test_f19_content_after_completed_is_absent_from_get_task(road: Driver) -> None:
    road.on_stream([{"task": task("t-19", "TASK_STATE_WORKING")},
                    artifact_event("t-19", "a-25", "part one"),
                    status_update("t-19", "TASK_STATE_COMPLETED"),
                    artifact_event("t-19", "a-25", "part two", append=True),
                    artifact_event("t-19", "a-26", "late")])
    got = road.stream()
    assert kinds(got) == ["task", "artifact", "status"]
    assert delivered_view(got) == {"a-25": ["part one"]}
    # the late events are judged in the drain after the client's stream ended
    wait_until(lambda: road.h.divergences("event_after_terminal") == 2, message="the drain")
    road.on_get("t-19", task("t-19", "TASK_STATE_COMPLETED",
                             artifacts=[art("a-25", "part one", "part two"), art("a-26", "late")]))
    kind, answer = road.get("t-19")
    assert kind == "task" and state(answer) == "completed"
    assert answered_view(answer) == delivered_view(got)
    assert set(note(answer)["artifacts"]) == {"a-25", "a-26"}


@pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "rest"])
def test_f19_list_tasks_is_corrected_alike(make_harness: Any, rest: bool) -> None:
    """ListTasks (v1.0 only: v0.3 has none to bridge, docs/bridge.md §1.9)."""
    from tests.proxy.roads import ROADS as roads
    d = Driver(make_harness(), roads[2] if rest else roads[0])
    d.on_stream([{"task": task("t-19", "TASK_STATE_WORKING")}, artifact_event("t-19", "a-25", "part one"),
                 status_update("t-19", "TASK_STATE_COMPLETED"), artifact_event("t-19", "a-25", "part two", append=True)])
    d.stream()
    wait_until(lambda: d.h.divergences("event_after_terminal") == 1, message="the drain")
    listed = {"tasks": [task("t-19", "TASK_STATE_COMPLETED", artifacts=[art("a-25", "part one", "part two")])]}
    if rest:
        d.h.worker.on_path("GET", "/tasks", json_body=listed)
        r, raw = d.h.rest("GET", "/tasks?includeArtifacts=true", headers=d.headers)
        doc = orjson.loads(raw)
    else:
        d.h.worker.on("ListTasks", json_result=listed)
        doc = d.h.rpc({"jsonrpc": "2.0", "id": "l", "method": "ListTasks", "params": {"includeArtifacts": True}},
                      headers=d.headers).json()["result"]
    [listed_task] = doc["tasks"]
    assert answered_view(listed_task) == {"a-25": ["part one"]}


def test_f19_an_artifact_replaced_after_completed_is_withheld(road: Driver) -> None:
    road.on_stream([{"task": task("t-19", "TASK_STATE_WORKING")},
                    artifact_event("t-19", "a-25", "part one"),
                    artifact_event("t-19", "a-25", "part two", append=True),
                    status_update("t-19", "TASK_STATE_COMPLETED"),
                    artifact_event("t-19", "a-25", "other one", "other two", append=False)])
    got = road.stream()
    assert delivered_view(got) == {"a-25": ["part one", "part two"]}
    wait_until(lambda: road.h.divergences("event_after_terminal") == 1, message="the drain")
    road.on_get("t-19", task("t-19", "TASK_STATE_COMPLETED", artifacts=[art("a-25", "other one", "other two")]))
    kind, answer = road.get("t-19")
    assert kind == "task" and answered_view(answer) == {}
    assert note(answer)["artifacts"] == ["a-25"]
    road.on_get("t-19", task("t-19", "TASK_STATE_COMPLETED", artifacts=[art("a-25", "part one", "part two")]))
    kind, answer = road.get("t-19")
    assert answered_view(answer) == {"a-25": ["part one", "part two"]}
    assert "artifacts" not in note(answer)  # the poisoned id's answers carry the note (F04), no artifact in it


# ---------------------------------------------------------------------------------- F21

def invalid_agent_response(error: dict[str, Any]) -> bool:
    """A JSON-RPC -32006, or its REST forms (docs/protocol.md §6.3): v1.0's ErrorInfo reason,
    v0.3's A2A code."""
    if error.get("code") == -32006:
        return True
    details = error.get("details") or []
    return any(d.get("reason") == "INVALID_AGENT_RESPONSE" for d in details)


def _f21_completed(d: Driver) -> None:
    d.on_stream([{"task": task("t-21", "TASK_STATE_WORKING")},
                 artifact_event("t-21", "a-1", "the answer"),
                 status_update("t-21", "TASK_STATE_COMPLETED")])
    assert delivered_view(d.stream()) == {"a-1": ["the answer"]}


def _reused(state_: str = "TASK_STATE_WORKING", **extra: Any) -> dict[str, Any]:
    """t-21 as the worker holds it after reusing the id for a task of another context."""
    return {**task("t-21", state_, **extra), "contextId": "c-99"}


def test_f21_a_reused_id_is_refused_and_get_task_keeps_answering_the_recorded_task(plain_road: Driver) -> None:
    d = plain_road
    _f21_completed(d)
    d.on_send({"task": _reused()})
    kind, error = d.send("something new")
    assert kind == "error" and invalid_agent_response(error)
    assert d.h.divergences("reused_task_id") == 1 and d.h.divergences("context_id_mismatch") == 0
    d.on_get("t-21", _reused(artifacts=[art("a-9", "new task's output")],
                             history=[{"messageId": "m-x", "role": "ROLE_USER", "parts": [{"text": "theirs"}]}]),
             times=2)
    for _ in range(2):
        kind, answer = d.get("t-21")
        assert kind == "task", answer
        assert answer["id"] == "t-21" and answer["contextId"] == "c-21" and state(answer) == "completed"
        assert answered_view(answer) == {} and "history" not in answer
        assert note(answer)["reason"] == "reused_task_id" and note(answer)["workerContextId"] == "c-99"
    assert d.h.divergences("reused_task_id") == 1 and d.h.divergences("context_id_mismatch") == 0


def test_f21_get_task_of_a_reused_id_never_seen_reused_before(plain_road: Driver) -> None:
    """The worker reused the id for a task the gateway never saw being made: the first
    GetTask showing it is the reuse (counted once), answered with the recorded task and the
    artifacts it still holds as they were shown."""
    d = plain_road
    _f21_completed(d)
    d.on_get("t-21", _reused(artifacts=[art("a-1", "the answer"), art("a-9", "new")]), times=2)
    for _ in range(2):
        kind, answer = d.get("t-21")
        assert kind == "task" and answer["contextId"] == "c-21" and state(answer) == "completed"
        assert answered_view(answer) == {"a-1": ["the answer"]}
    assert d.h.divergences("reused_task_id") == 1 and d.h.divergences("context_id_mismatch") == 0


def test_f21_another_caller_gets_no_recorded_task(make_harness: Any) -> None:
    """The recorded task is answered only to a caller seen on it (docs/callers.md §3)."""
    from tests.proxy.roads import ROADS as roads
    d = Driver(make_harness(), roads[0])
    _f21_completed(d)
    d.on_get("t-21", _reused())
    r = d.h.rpc({"jsonrpc": "2.0", "id": "g", "method": "GetTask", "params": {"id": "t-21"}},
                headers={**d.headers, "authorization": "Bearer someone-else"})
    assert r.json()["error"]["code"] == -32006
    assert d.h.divergences("reused_task_id") == 1


# ---------------------------------------------------------------------------------- F22

@pytest.fixture(params=ROADS, ids=lambda r: r.id)
def quiet_road(request: Any, make_harness: Any) -> Driver:
    """A road without the proactive sweep: an aged task is the client's to find."""
    spec: Road = request.param
    return Driver(make_harness(card=spec.card, sweep={"enabled": False}), spec)


def _age(d: Driver, tid: str) -> None:
    """The gateway last observed ``tid`` an hour ago: its next action forces a GetTask."""
    ledger = d.h.runtime.ledger
    stored = d.h.on_gateway_loop(ledger.get("worker", tid))
    aged = dataclasses.replace(stored.record, observed_at=time.time() - 3600)
    d.h.on_gateway_loop(ledger.put(aged, stored.version))


def unsupported_operation(error: dict[str, Any]) -> bool:
    """A -32004, in any binding's form."""
    if error.get("code") == -32004:
        return True
    return any(x.get("reason") == "UNSUPPORTED_OPERATION" for x in error.get("details") or [])


def test_f22_a_submitted_answer_later_completed_is_progress_not_a_divergence(quiet_road: Driver,
                                                                            gateway_warnings: Any) -> None:
    d = quiet_road
    d.on_send({"task": task("t-22", "TASK_STATE_SUBMITTED")})
    assert d.send("start")[0] == "result"
    _age(d, "t-22")
    d.on_get("t-22", task("t-22", "TASK_STATE_COMPLETED"))
    kind, error = d.send("one more", task_id="t-22")
    assert kind == "error" and unsupported_operation(error)  # the forced GetTask found it completed
    assert d.worker_sends() == 1
    assert d.h.metric("a2a_gateway_forced_get_total", reason="heartbeat_gap") == 1
    assert d.h.divergences("stale_record") == 0
    assert gateway_warnings("divergence") == []


def test_f22_a_task_back_in_submitted_is_a_stale_record(quiet_road: Driver) -> None:
    d = quiet_road
    d.on_send({"task": task("t-22", "TASK_STATE_WORKING")})
    assert d.send("start")[0] == "result"
    _age(d, "t-22")
    d.on_get("t-22", task("t-22", "TASK_STATE_SUBMITTED"))
    d.on_send({"task": task("t-22", "TASK_STATE_WORKING")})
    assert d.send("one more", task_id="t-22")[0] == "result"
    assert d.h.metric("a2a_gateway_forced_get_total", reason="heartbeat_gap") == 1
    assert d.h.divergences("stale_record") == 1


# ---------------------------------------------------------------------------------- F20

CARD_A = default_card()
CARD_B = {**default_card(), "version": "2.0.0"}


def _refresh(h: Harness, card: dict[str, Any]) -> str:
    """The worker serves ``card`` from now on; the gateway revalidates its card now (as its
    TTL would make it) and says what it found."""
    h.worker.default_card = card
    outcome: str = h.on_gateway_loop(h.runtime.cards["worker"].refresh())
    return outcome


def _f20_observed(d: Driver) -> None:
    d.on_stream([{"task": task("t-20", "TASK_STATE_SUBMITTED")},
                 status_update("t-20", "TASK_STATE_INPUT_REQUIRED")])
    assert [state(obj) for _, obj in d.stream("book it")] == ["submitted", "input-required"]


def test_f20_a_card_that_changed_and_changed_back_forces_a_get_task(plain_road: Driver) -> None:
    d = plain_road
    _f20_observed(d)
    assert _refresh(d.h, CARD_B) == "changed"
    assert _refresh(d.h, CARD_A) == "changed"  # a rollback: the ETag the task was observed under
    d.on_get("t-20", task("t-20", "TASK_STATE_FAILED"))  # the worker holds it failed now
    kind, error = d.send("Tuesday", task_id="t-20")
    assert kind == "error" and unsupported_operation(error)  # known failed: refused by the gateway
    assert d.worker_sends() == 1
    assert d.h.metric("a2a_gateway_forced_get_total", reason="etag_changed") == 1


def test_f20_an_unchanged_card_forces_nothing(plain_road: Driver) -> None:
    d = plain_road
    _f20_observed(d)
    assert _refresh(d.h, CARD_A) == "not_modified"
    d.on_send({"task": task("t-20", "TASK_STATE_WORKING")})
    assert d.send("Tuesday", task_id="t-20")[0] == "result"
    assert d.h.metric("a2a_gateway_forced_get_total") == 0


def test_f20_replicas_share_the_card_generation(make_harness: Any, tmp_path: Any) -> None:
    """Two gateways on one SQLite ledger: the one that saw the card go A → B → A tells the
    other, which saw A all along, at its next revalidation."""
    from tests.proxy.roads import ROADS as roads
    ledger = {"url": f"sqlite:///{tmp_path}/ledger.db"}
    seeing = make_harness(ledger=ledger, sweep={"enabled": False})
    other = Driver(make_harness(ledger=ledger, sweep={"enabled": False}), roads[0])
    _f20_observed(other)
    assert _refresh(seeing, CARD_B) == "changed" and _refresh(seeing, CARD_A) == "changed"
    assert _refresh(other.h, CARD_A) == "not_modified"  # nothing changed as far as it saw
    assert other.h.runtime.cards["worker"].generation == 3
    other.on_get("t-20", task("t-20", "TASK_STATE_FAILED"))
    kind, error = other.send("Tuesday", task_id="t-20")
    assert kind == "error" and unsupported_operation(error)
    assert other.h.metric("a2a_gateway_forced_get_total", reason="etag_changed") == 1


def test_f20_a_change_the_ledger_could_not_count_falls_back_to_the_etag(make_harness: Any) -> None:
    from tests.proxy.roads import ROADS as roads
    d = Driver(make_harness(sweep={"enabled": False}), roads[0])
    _f20_observed(d)
    cache = d.h.runtime.cards["worker"]
    assert cache.generation == 1

    async def down(*_: Any) -> int:
        raise OSError("ledger down")

    d.h.runtime.ledger.inner.observe_card = down  # type: ignore[method-assign]
    assert _refresh(d.h, CARD_A) == "not_modified" and cache.generation == 1  # nothing changed: kept
    assert _refresh(d.h, CARD_B) == "changed" and cache.generation is None
    assert d.h.metric("a2a_gateway_ledger_errors_total", operation="observe_card") == 2
    d.on_get("t-20", task("t-20", "TASK_STATE_FAILED"))
    kind, error = d.send("Tuesday", task_id="t-20")
    assert kind == "error" and unsupported_operation(error)  # ETag B is not the task's A
    assert d.h.metric("a2a_gateway_forced_get_total", reason="etag_changed") == 1
