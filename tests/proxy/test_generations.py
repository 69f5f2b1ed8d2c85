"""Task generations (A2A v1.1 draft, SPEC11 §3.2.7) through the real gateway, both bindings: a
scripted worker under uvicorn sends generations, a real HTTP client drives the gateway.

docs/resume.md §3: a jump owes the worker one ``GetTask`` before the next task action
(``a2a_gateway_forced_get_total{reason="generation_gap"}``); a step back is a
``generation_regression`` divergence that owes one too; a worker without generations gets none;
``currentGeneration``, ``ifGenerationMatch`` and -32010 pass untouched; the gateway's own
probes never ask for a long-poll.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

from tests.proxy.conftest import Harness, frames
from tests.support.objects import status_update, task
from tests.support.scripted_worker import Data, Event, Gate

V1 = {"A2A-Version": "1.0"}
SSE_ACCEPT = {"accept": "text/event-stream"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
WORKING, INPUT = "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"
NUMBERS = pytest.mark.parametrize("as_text", [False, True], ids=["numbers", "protojson-strings"])


def g(value: int, as_text: bool) -> int | str:
    """A generation as the worker writes it: a JSON number, or ProtoJSON's int64 string."""
    return str(value) if as_text else value


def with_gen(payload: dict[str, Any], value: Any) -> dict[str, Any]:
    """A Task or a one-member StreamResponse with ``generation`` on its inner object."""
    if len(payload) == 1 and next(iter(payload)) in ("task", "statusUpdate", "artifactUpdate"):
        member, inner = next(iter(payload.items()))
        return {member: {**inner, "generation": value}}
    return {**payload, "generation": value}


def stream_payloads(states_and_generations: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The first pair as the Task snapshot, the rest as status updates of ``t-1``; a generation
    of ``None`` is left out."""
    (first_state, first_gen), *rest = states_and_generations
    out = [{"task": task("t-1", first_state)}]
    out += [status_update("t-1", state) for state, _ in rest]
    return [p if value is None else with_gen(p, value)
            for p, (_, value) in zip(out, states_and_generations, strict=True)]


def message(req_id: Any, task_id: str | None = None, **params: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"messageId": f"m-{req_id}", "role": "ROLE_USER", "parts": [{"text": "go"}]}
    if task_id:
        msg.update(taskId=task_id, contextId=task_id.replace("t-", "c-"))
    return {"message": msg, **params}


def rpc(method: str, req_id: Any, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}


def methods(h: Harness) -> list[str | None]:
    """The JSON-RPC methods the worker received, in order (card fetches left out)."""
    return [r.method for r in h.rpc_calls()]


def forced(h: Harness, reason: str | None = None) -> float:
    labels = {} if reason is None else {"reason": reason}
    return h.metric("a2a_gateway_forced_get_total", **labels)


def jsonrpc_stream(h: Harness, payloads: list[dict[str, Any]]) -> list[Any]:
    """A v1.0 JSON-RPC ``SendStreamingMessage`` the worker answers with ``payloads``; returns the
    results the client received."""
    h.worker.on("SendStreamingMessage", sse=[Event(result=p) for p in payloads])
    _, raw = h.stream(rpc("SendStreamingMessage", 1, message(1)), headers=V1)
    return [f["data"]["result"] for f in frames(raw) if isinstance(f["data"], dict) and "result" in f["data"]]


def rest_stream(h: Harness, payloads: list[dict[str, Any]]) -> list[Any]:
    """The same over REST: ``POST /message:stream`` answered with bare StreamResponses."""
    h.worker.on_path("POST", "/message:stream", sse=[Data(p) for p in payloads])
    _, raw = h.rest("POST", "/message:stream", json=message(1), headers={**V1, **SSE_ACCEPT})
    return [f["data"] for f in frames(raw) if f["data"] is not None and f["event"] != "error"]


def record(h: Harness, tid: str = "t-1") -> Any:
    stored = h.on_gateway_loop(h.runtime.ledger.get("worker", tid))
    return None if stored is None else stored.record


# ------------------------------------------------------------------------------ JSON-RPC

@NUMBERS
def test_jsonrpc_a_gap_is_delivered_and_the_next_action_is_preceded_by_one_get_task(
        h: Harness, as_text: bool) -> None:
    payloads = stream_payloads([(WORKING, g(1, as_text)), (WORKING, g(2, as_text)), (INPUT, g(4, as_text))])
    got = jsonrpc_stream(h, payloads)
    assert got == payloads  # every event delivered, the generations as the worker wrote them
    assert record(h).generation == 4 and record(h).pending_get == "generation_gap"
    assert methods(h) == ["SendStreamingMessage"] and forced(h) == 0  # owed, not yet sent

    h.worker.on("GetTask", json_result=with_gen(task("t-1", INPUT), g(4, as_text)))
    h.worker.on("SendMessage", json_result={"task": with_gen(task("t-1", WORKING), g(5, as_text))}, times=2)
    r = h.rpc(rpc("SendMessage", 2, message(2, "t-1")), headers=V1)
    assert r.json()["result"]["task"]["generation"] == g(5, as_text)
    assert methods(h) == ["SendStreamingMessage", "GetTask", "SendMessage"]
    [probe] = h.worker.calls("GetTask")
    assert probe.params == {"id": "t-1", "historyLength": 0}  # never a long-poll
    assert forced(h, "generation_gap") == 1 and forced(h) == 1
    assert record(h).pending_get is None and record(h).generation == 5

    h.rpc(rpc("SendMessage", 3, message(3, "t-1")), headers=V1)  # nothing owed any more
    assert methods(h)[-2:] == ["SendMessage", "SendMessage"] and len(h.worker.calls("GetTask")) == 1
    assert forced(h) == 1


@NUMBERS
def test_jsonrpc_a_regression_is_counted_and_the_next_cancel_is_preceded_by_one_get_task(
        h: Harness, as_text: bool) -> None:
    payloads = stream_payloads([(WORKING, g(1, as_text)), (WORKING, g(2, as_text)), (WORKING, g(3, as_text)),
                                (WORKING, g(2, as_text)), (INPUT, g(4, as_text))])
    assert jsonrpc_stream(h, payloads) == payloads  # the step back is delivered too
    assert h.divergences("generation_regression") == 1
    assert h.metric("a2a_gateway_divergences_total", kind="generation_regression", action="enforced") == 1
    assert record(h).generation == 4 and record(h).pending_get == "generation_regression"

    h.worker.on("GetTask", json_result=with_gen(task("t-1", INPUT), g(4, as_text)))
    h.worker.on("CancelTask", json_result=with_gen(task("t-1", "TASK_STATE_CANCELED"), g(5, as_text)))
    r = h.rpc(rpc("CancelTask", 2, {"id": "t-1"}), headers=V1)
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert methods(h) == ["SendStreamingMessage", "GetTask", "CancelTask"]
    assert forced(h, "generation_regression") == 1 and forced(h) == 1
    assert h.divergences("generation_regression") == 1  # the GetTask answer (4) is no new one


def test_jsonrpc_a_worker_without_generations_gets_no_get_task(h: Harness) -> None:
    payloads = stream_payloads([(WORKING, None), (WORKING, None), (INPUT, None)])
    assert jsonrpc_stream(h, payloads) == payloads
    h.worker.on("SendMessage", json_result={"task": task("t-1", WORKING)})
    h.worker.on("SubscribeToTask", sse=[Event(result={"task": task("t-1", WORKING)}),
                                        Event(result=status_update("t-1", "TASK_STATE_COMPLETED"))])
    h.rpc(rpc("SendMessage", 2, message(2, "t-1")), headers=V1)
    h.stream(rpc("SubscribeToTask", 3, {"id": "t-1"}), headers=V1)
    assert methods(h) == ["SendStreamingMessage", "SendMessage", "SubscribeToTask"]
    assert forced(h) == 0 and h.divergences("generation_regression") == 0
    assert record(h).generation is None and record(h).pending_get is None


def test_jsonrpc_a_generation_that_disappears_switches_them_off(h: Harness) -> None:
    """SPEC11 §3.2.7: 0 or absent means the worker does not implement generations; the gap it
    seemed to show is forgotten."""
    payloads = stream_payloads([(WORKING, 1), (WORKING, 3), (WORKING, None), (INPUT, 9)])
    assert jsonrpc_stream(h, payloads) == payloads
    assert record(h).generation == 0 and record(h).pending_get is None
    h.worker.on("SendMessage", json_result={"task": task("t-1", WORKING)})
    h.rpc(rpc("SendMessage", 2, message(2, "t-1")), headers=V1)
    assert methods(h) == ["SendStreamingMessage", "SendMessage"] and forced(h) == 0


def test_jsonrpc_current_generation_and_if_generation_match_reach_the_worker_untouched(h: Harness) -> None:
    get = rpc("GetTask", 7, {"id": "t-1", "currentGeneration": "3", "historyLength": 2})
    h.worker.on("GetTask", json_result=with_gen(task("t-1", WORKING), "4"))
    r = h.rpc(get, headers=V1)
    assert r.json()["result"]["generation"] == "4"
    [seen] = h.worker.calls("GetTask")
    assert seen.body == orjson.dumps(get)
    assert record(h).generation == 4

    send = rpc("SendMessage", 8, message(8, "t-1", configuration={"ifGenerationMatch": "4"}))
    h.worker.on("SendMessage", json_result={"task": with_gen(task("t-1", WORKING), "5")})
    h.rpc(send, headers=V1)
    [sent] = h.worker.calls("SendMessage")
    assert sent.body == orjson.dumps(send)
    assert forced(h) == 0


def test_jsonrpc_a_generation_mismatch_error_is_relayed_untouched_and_not_probed(h: Harness) -> None:
    h.worker.on("GetTask", json_result=with_gen(task("t-1", WORKING), 5))
    h.rpc(rpc("GetTask", "setup", {"id": "t-1"}), headers=V1)
    error = {"code": -32010, "message": "Task generation mismatch: expected 3 but current generation is 5",
             "data": [{"@type": ERROR_INFO, "reason": "TASK_GENERATION_MISMATCH", "domain": "a2a-protocol.org",
                       "metadata": {"taskId": "t-1", "expectedGeneration": "3", "currentGeneration": "5"}}]}
    h.worker.on("SendMessage", json_error=error)
    r = h.rpc(rpc("SendMessage", 9, message(9, "t-1", configuration={"ifGenerationMatch": "3"})), headers=V1)
    assert r.status_code == 200
    assert r.json() == {"jsonrpc": "2.0", "id": 9, "error": error}
    assert methods(h) == ["GetTask", "SendMessage"]  # no terminal probe for -32010
    assert h.metric("a2a_gateway_error_rewrites_total") == 0


def test_jsonrpc_a_long_poll_held_by_the_worker_is_waited_for(h: Harness) -> None:
    """SPEC11 §3.2.7: the worker may hold ``GetTask`` with ``currentGeneration`` until the
    generation moves; the gateway waits (within ``timeouts.read``) and judges the answer."""
    gate = Gate(timeout=10)
    answer = {"jsonrpc": "2.0", "id": 5, "result": with_gen(task("t-1", WORKING), "4")}
    h.worker.on("GetTask", sse=[gate, orjson.dumps(answer)], headers={"content-type": "application/json"})
    got: dict[str, Any] = {}
    client = threading.Thread(target=lambda: got.update(
        r=h.rpc(rpc("GetTask", 5, {"id": "t-1", "currentGeneration": "3"}), headers=V1)))
    client.start()
    assert gate.reached.wait(10)  # the worker holds the request now
    assert "r" not in got
    gate.release()
    client.join(10)
    assert got["r"].json() == answer
    assert record(h).generation == 4


def test_jsonrpc_a_long_poll_held_past_the_read_timeout_is_a_transport_error(make_harness: Any) -> None:
    """docs/resume.md §3.4: the upstream read timeout bounds a held ``GetTask`` like any
    silence: -32603 with HTTP 504, nothing recorded."""
    h = make_harness(upstream={"timeouts": {"read": 0.3}})
    gate = Gate(timeout=10)
    h.worker.on("GetTask", sse=[gate, b"{}"], headers={"content-type": "application/json"})
    r = h.rpc(rpc("GetTask", 5, {"id": "t-1", "currentGeneration": "3"}), headers=V1)
    gate.release()
    assert r.status_code == 504 and r.json()["error"]["code"] == -32603
    assert h.metric("a2a_gateway_upstream_errors_total", reason="timeout") == 1
    assert record(h) is None


# ------------------------------------------------------------------------------ REST

def rest_paths(h: Harness) -> list[tuple[str, str]]:
    return [(r.http_method, r.path) for r in h.rpc_calls()]


@NUMBERS
def test_rest_a_gap_is_delivered_and_the_next_send_is_preceded_by_one_get_task(
        h: Harness, as_text: bool) -> None:
    payloads = stream_payloads([(WORKING, g(1, as_text)), (WORKING, g(2, as_text)), (INPUT, g(4, as_text))])
    assert rest_stream(h, payloads) == payloads
    assert record(h).pending_get == "generation_gap"

    h.worker.on_path("GET", "/tasks/t-1", json_body=with_gen(task("t-1", INPUT), g(4, as_text)))
    h.worker.on_path("POST", "/message:send", json_body={"task": with_gen(task("t-1", WORKING), g(5, as_text))},
                     times=2)
    r, raw = h.rest("POST", "/message:send", json=message(2, "t-1"), headers=V1)
    assert r.status_code == 200, raw
    assert rest_paths(h) == [("POST", "/message:stream"), ("GET", "/tasks/t-1"), ("POST", "/message:send")]
    [probe] = h.worker.path_calls("GET", "/tasks/t-1")
    assert probe.query == "historyLength=0"  # never ?currentGeneration=
    assert forced(h, "generation_gap") == 1 and forced(h) == 1

    h.rest("POST", "/message:send", json=message(3, "t-1"), headers=V1)
    assert len(h.worker.path_calls("GET", "/tasks/t-1")) == 1 and forced(h) == 1


@NUMBERS
def test_rest_a_regression_is_counted_and_the_next_subscribe_is_preceded_by_one_get_task(
        h: Harness, as_text: bool) -> None:
    payloads = stream_payloads([(WORKING, g(2, as_text)), (WORKING, g(3, as_text)), (WORKING, g(1, as_text)),
                                (INPUT, g(4, as_text))])
    assert rest_stream(h, payloads) == payloads
    assert h.divergences("generation_regression") == 1

    h.worker.on_path("GET", "/tasks/t-1", json_body=with_gen(task("t-1", INPUT), g(4, as_text)))
    h.worker.on_path("POST", "/tasks/t-1:subscribe", sse=[
        Data({"task": with_gen(task("t-1", INPUT), g(4, as_text))}),
        Data(with_gen(status_update("t-1", "TASK_STATE_COMPLETED"), g(5, as_text)))])
    r, raw = h.rest("POST", "/tasks/t-1:subscribe", headers={**V1, **SSE_ACCEPT})
    assert r.status_code == 200
    got = [f["data"] for f in frames(raw) if f["data"] is not None]
    assert got[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert rest_paths(h) == [("POST", "/message:stream"), ("GET", "/tasks/t-1"), ("POST", "/tasks/t-1:subscribe")]
    assert forced(h, "generation_regression") == 1 and forced(h) == 1
    assert h.divergences("generation_regression") == 1
    assert record(h).terminal and record(h).generation == 5


def test_rest_a_worker_without_generations_gets_no_get_task(h: Harness) -> None:
    payloads = stream_payloads([(WORKING, None), (WORKING, None), (INPUT, None)])
    assert rest_stream(h, payloads) == payloads
    h.worker.on_path("POST", "/tasks/t-1:cancel", json_body=task("t-1", "TASK_STATE_CANCELED"))
    r, _ = h.rest("POST", "/tasks/t-1:cancel", headers=V1)
    assert r.status_code == 200
    assert rest_paths(h) == [("POST", "/message:stream"), ("POST", "/tasks/t-1:cancel")]
    assert forced(h) == 0


def test_rest_current_generation_and_if_generation_match_reach_the_worker_untouched(h: Harness) -> None:
    h.worker.on_path("GET", "/tasks/t-1", json_body=with_gen(task("t-1", WORKING), "4"))
    r, raw = h.rest("GET", "/tasks/t-1?currentGeneration=3&historyLength=2", headers=V1)
    assert r.status_code == 200 and orjson.loads(raw)["generation"] == "4"
    [seen] = h.worker.path_calls("GET", "/tasks/t-1")
    assert seen.query == "currentGeneration=3&historyLength=2"
    body = orjson.dumps(message(8, "t-1", configuration={"ifGenerationMatch": "4"}))
    h.worker.on_path("POST", "/message:send", json_body={"task": with_gen(task("t-1", WORKING), "5")})
    h.rest("POST", "/message:send", content=body, headers=V1)
    [sent] = h.worker.path_calls("POST", "/message:send")
    assert sent.body == body
    assert forced(h) == 0 and record(h).generation == 5


def test_rest_a_generation_mismatch_409_is_relayed_untouched_and_not_probed(h: Harness) -> None:
    """The draft's own example (SPEC11 §11.6): HTTP 409, ``ABORTED``, reason
    ``TASK_GENERATION_MISMATCH``."""
    h.worker.on_path("GET", "/tasks/t-1", json_body=with_gen(task("t-1", WORKING), 5))
    h.rest("GET", "/tasks/t-1", headers=V1)
    body = {"error": {"code": 409, "status": "ABORTED",
                      "message": "Task generation mismatch: expected 3 but current generation is 5",
                      "details": [{"@type": ERROR_INFO, "reason": "TASK_GENERATION_MISMATCH",
                                   "domain": "a2a-protocol.org",
                                   "metadata": {"taskId": "t-1", "expectedGeneration": "3",
                                                "currentGeneration": "5"}}]}}
    h.worker.on_path("POST", "/message:send", json_body=body, status=409)
    r, raw = h.rest("POST", "/message:send", json=message(9, "t-1", configuration={"ifGenerationMatch": "3"}),
                    headers=V1)
    assert r.status_code == 409 and raw == orjson.dumps(body)
    assert rest_paths(h) == [("GET", "/tasks/t-1"), ("POST", "/message:send")]  # no terminal probe
    assert h.metric("a2a_gateway_error_rewrites_total") == 0
