"""Property: what GetTask answers after a stream agrees, artifact by artifact, with what the
stream delivered (docs/field-cases.md F18, F19; issue #28).

A generated task runs through the real gateway (tests/fuzz/conftest.py's harness) in one to
three turns, each a streaming send (the first new, the others follow-ups naming the task): a
random run of artifact updates — three artifact ids, one or two parts from a three-letter
alphabet (so rewrites often keep the part count, and sometimes the content), ``append`` and
``lastChunk`` each absent, true or false — and WORKING updates, ending INPUT_REQUIRED, and the
last turn in a terminal state followed by more events (the worker's bugs). The worker holds its
own idea of the artifacts (every update applied, seals ignored) and answers GetTask with it.

What must hold, on every road of a plain gateway (JSON-RPC and REST, v1.0 and v0.3; the
bridge has a property of its own, with fewer examples):

* GetTask answers the terminal state the stream delivered;
* each artifact in the answer is exactly (its parts, in order) what the streams delivered of it;
* an artifact the streams delivered and the answer does not show is named in the answer's
  ``a2a-gateway/corrected`` note (withheld: the gateway keeps no content to show instead);
* no update a stream delivered touches an artifact after the stream delivered its
  ``lastChunk``, unless it shows exactly the same parts again.

The client's view is read from the wire independently of the gateway (tests/proxy/roads.py).
Task ids are fresh per example. Examples: 40 plain, 12 bridged (``A2A_FUZZ_EXAMPLES`` for more).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import fuzz, running_harness
from tests.proxy.conftest import Harness
from tests.proxy.roads import BRIDGES, ROADS, Driver, Road, answered_view, art, delivered_view, state
from tests.support.objects import status_update, task
from tests.support.servers import wait_until

CORRECTED = "a2a-gateway/corrected"
TERMINAL = ["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"]
_ids = itertools.count()

flag = st.sampled_from([None, True, False])
artifact_step = st.tuples(st.just("artifact"), st.sampled_from(["a-1", "a-2", "a-3"]),
                          st.lists(st.sampled_from(["x", "y", "z"]), min_size=1, max_size=2), flag, flag)
status_step = st.tuples(st.just("status"), st.sampled_from(["TASK_STATE_WORKING"]))
step = st.one_of(artifact_step, artifact_step, status_step)
late_step = st.one_of(artifact_step, st.tuples(st.just("status"), st.sampled_from(TERMINAL + ["TASK_STATE_WORKING"])))
scenario = st.fixed_dictionaries({
    "turns": st.lists(st.lists(step, max_size=5), min_size=1, max_size=3),
    "final": st.sampled_from(TERMINAL),
    "late": st.lists(late_step, max_size=3),
})


def _event(tid: str, s: tuple[Any, ...]) -> dict[str, Any]:
    if s[0] == "status":
        return status_update(tid, s[1])
    _, aid, parts, append, last = s
    flags = {k: v for k, v in (("append", append), ("lastChunk", last)) if v is not None}
    return {"artifactUpdate": {"taskId": tid, "contextId": tid.replace("t-", "c-"), "artifact": art(aid, *parts),
                               **flags}}


def _worker_view(steps: list[tuple[Any, ...]]) -> dict[str, list[str]]:
    """The artifacts as a buggy worker holds them: every update applied, seals ignored."""
    view: dict[str, list[str]] = {}
    for s in steps:
        if s[0] != "artifact":
            continue
        _, aid, parts, append, _last = s
        view[aid] = view[aid] + list(parts) if append is True and aid in view else list(parts)
    return view


def _sealed_untouched(events: list[tuple[str, Any]], sealed: dict[str, list[str]]) -> None:
    """No delivered update changes an artifact after its delivered ``lastChunk`` (``sealed``:
    each sealed artifact's parts, carried across turns)."""
    view: dict[str, list[str]] = {}
    for kind, obj in events:
        if kind != "artifact":
            continue
        aid = obj["artifact"]["artifactId"]
        before = sealed.get(aid)
        view = delivered_view([(kind, obj)], {aid: before} if before is not None else view)
        if before is not None:
            assert view[aid] == before, f"sealed {aid} changed on the stream: {before} -> {view[aid]}"
        if obj.get("lastChunk") is True:
            sealed[aid] = view[aid]


def _run(h: Harness, road: Road, data: dict[str, Any]) -> None:
    d = Driver(h, road)
    tid = f"t-p{next(_ids)}"
    turns, final, late = data["turns"], data["final"], data["late"]
    shown: dict[str, list[str]] = {}
    sealed: dict[str, list[str]] = {}
    requests = h.metric("a2a_gateway_requests_total")
    for i, steps in enumerate(turns):
        last = i == len(turns) - 1
        events = [{"task": task(tid, "TASK_STATE_SUBMITTED")}] if i == 0 else []
        events += [_event(tid, s) for s in steps]
        events.append(status_update(tid, final if last else "TASK_STATE_INPUT_REQUIRED"))
        if last:
            events += [_event(tid, s) for s in late]
        d.on_stream(events)
        got = d.stream("go", task_id=None if i == 0 else tid)
        assert [k for k, _ in got if k == "error"] == [], got
        assert state(got[-1][1]) == ("input-required" if not last else state({"status": {"state": final}}))
        _sealed_untouched(got, sealed)
        shown = delivered_view(got, shown)
    # the late events are judged after the client's stream ended (the drain): wait for the
    # streams' requests to be counted, which happens once each exchange is over
    wait_until(lambda: h.metric("a2a_gateway_requests_total") >= requests + len(turns), message="the drains")
    everything = [s for steps in turns for s in steps] + list(late)
    worker = _worker_view(everything)
    d.on_get(tid, task(tid, final, artifacts=[art(aid, *parts) for aid, parts in worker.items()]))
    kind, answer = d.get(tid)
    assert kind == "task", answer
    assert state(answer) == state({"status": {"state": final}})
    answered = answered_view(answer)
    for aid, parts in answered.items():
        assert aid in shown, f"{aid} never delivered, answered {parts}"
        assert parts == shown[aid], f"{aid}: delivered {shown[aid]}, answered {parts}"
    noted = set(((answer.get("metadata") or {}).get(CORRECTED) or {}).get("artifacts") or [])
    assert set(shown) - set(answered) <= noted, (shown, answered, noted)


@pytest.fixture(scope="module")
def plain() -> Iterator[Harness]:
    with running_harness() as harness:
        yield harness


@pytest.fixture(scope="module", params=BRIDGES, ids=lambda r: r.id)
def bridged(request: Any) -> Iterator[tuple[Harness, Road]]:
    road: Road = request.param
    with running_harness() as harness:
        harness.worker.default_card = road.card
        assert harness.on_gateway_loop(harness.runtime.cards["worker"].refresh()) == "changed"
        yield harness, road


@fuzz(40)
@given(road=st.sampled_from(ROADS), data=scenario)
def test_get_task_agrees_with_what_the_streams_delivered(plain: Harness, road: Road, data: dict[str, Any]) -> None:
    _run(plain, road, data)


@fuzz(3)
@given(data=scenario)
def test_across_the_bridge_too(bridged: tuple[Harness, Road], data: dict[str, Any]) -> None:
    harness, road = bridged
    _run(harness, road, data)
