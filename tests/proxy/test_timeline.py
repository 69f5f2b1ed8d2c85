"""The task timeline through the real gateway (docs/observability.md §2): a worker that reopens
a terminal task (docs/field-cases.md F04/F05), then a follow-up message the gateway refuses —
read back from the admin listener (JSON) and with ``a2a-gateway ledger show`` on the same
SQLite file, as a person asking "why was my message refused?" would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.proxy.conftest import Harness
from tests.support.objects import task
from tests.support.servers import wait_until

V1 = {"A2A-Version": "1.0"}


def get_task(req_id: int, tid: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "method": "GetTask", "params": {"id": tid}}


def follow_up(req_id: int, tid: str) -> dict[str, Any]:
    message = {"messageId": f"m-{req_id}", "role": "ROLE_USER", "parts": [{"text": "one more thing"}],
               "taskId": tid, "contextId": tid.replace("t-", "c-")}
    return {"jsonrpc": "2.0", "id": req_id, "method": "SendMessage", "params": {"message": message}}


def reopen_then_follow_up(h: Harness, tid: str) -> None:
    """The worker says ``completed`` (v0.3 spelling), then ``working`` again; the client then
    sends a follow-up message on the task."""
    h.worker.on("GetTask", json_result=task(tid, "completed"))
    h.worker.on("GetTask", json_result=task(tid, "working"))
    assert h.rpc(get_task(1, tid), headers=V1).json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert h.rpc(get_task(2, tid), headers=V1).json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    refused = h.rpc(follow_up(3, tid), headers=V1).json()
    assert refused["error"]["code"] == -32004
    assert h.worker.calls("SendMessage") == []


@pytest.fixture
def sqlite_harness(make_harness: Any, tmp_path: Path) -> tuple[Harness, str]:
    url = f"sqlite:///{tmp_path}/ledger.db"
    return make_harness(ledger={"url": url}), url


def test_admin_timeline_shows_the_observations_the_finding_and_the_local_refusal(
        sqlite_harness: tuple[Harness, str]) -> None:
    h, _ = sqlite_harness
    reopen_then_follow_up(h, "t-7")
    r = httpx.get(h.admin.url + "/tasks/worker/t-7/timeline", trust_env=False)
    assert r.status_code == 200
    doc = r.json()
    assert doc["record"]["state"] == "TASK_STATE_COMPLETED" and doc["record"]["terminal"] is True
    assert doc["record"]["card_generation"] == 1  # the first card the ledger observed (F20)
    entries = doc["timeline"]
    assert [(e["direction"], e["method"], e["verdict"]) for e in entries] == [
        ("answer", "GetTask", "rewritten"),  # "completed" re-spelled for the v1.0 client
        ("answer", "GetTask", "rewritten"),  # "working" after completed: the recorded status restored
        ("request", "SendMessage", "answered_locally"),
    ]
    first, reopened, refusal = entries
    assert (first["state_received"], first["state"]) == ("completed", "TASK_STATE_COMPLETED")
    assert (reopened["state_received"], reopened["state"]) == ("working", "TASK_STATE_COMPLETED")
    assert [f["kind"] for f in reopened["findings"] if f["category"] == "divergence"] == ["terminal_regression"]
    assert [(f["category"], f["kind"]) for f in refusal["findings"]] == [("rejection", "terminal_task")]
    assert refusal["error"].startswith("-32004 ")
    assert all(e["binding"] == "jsonrpc" and e["version"] == "1.0" for e in entries)
    assert entries[0]["at"].endswith("Z") and entries[0]["at"] <= entries[-1]["at"]
    # nothing about the caller or the message
    text = r.text
    assert "one more thing" not in text and "m-3" not in text and "127.0.0.1" not in text

    missing = httpx.get(h.admin.url + "/tasks/worker/t-none/timeline", trust_env=False)
    assert missing.status_code == 404
    # another tenant's namespace holds neither the record nor the timeline of tenant "" (docs/callers.md §1)
    other_tenant = httpx.get(h.admin.url + "/tasks/worker/t-7/timeline?tenant=acme", trust_env=False)
    assert other_tenant.status_code == 404 and "tenant 'acme'" in other_tenant.json()["error"]
    h.worker.on("GetTask", json_result=task("t-7", "working"))
    in_acme = {**get_task(4, "t-7"), "params": {"id": "t-7", "tenant": "acme"}}
    assert h.rpc(in_acme, headers=V1).json()["result"]["status"]["state"] == "TASK_STATE_WORKING"
    acme = httpx.get(h.admin.url + "/tasks/worker/t-7/timeline?tenant=acme", trust_env=False).json()
    assert acme["tenant"] == "acme" and acme["record"]["state"] == "TASK_STATE_WORKING"
    assert acme["record"]["terminal"] is False and [e["method"] for e in acme["timeline"]] == ["GetTask"]


def test_ledger_show_prints_the_timeline_readably(sqlite_harness: tuple[Harness, str]) -> None:
    h, url = sqlite_harness
    reopen_then_follow_up(h, "t-8")
    show = subprocess.run([sys.executable, "-m", "gateway", "ledger", "show", "t-8", "--ledger", url],
                          capture_output=True, text=True, timeout=30)
    assert show.returncode == 0, show.stderr
    out = show.stdout
    print(out)  # the transcript the docs quote
    lines = out.splitlines()
    assert lines[0] == "task t-8 (upstream worker)"
    assert "TASK_STATE_COMPLETED (terminal, poisoned: the worker contradicted its terminal state)" in out
    timeline = [line for line in lines if line.startswith("  20")]  # the entries, by their ISO-8601 time
    assert len(timeline) == 3
    assert "answer" in timeline[1] and "working -> TASK_STATE_COMPLETED" in timeline[1] and "REWRITTEN" in timeline[1]
    assert "request" in timeline[2] and "SendMessage" in timeline[2] and "ANSWERED_LOCALLY" in timeline[2]
    assert "    divergence terminal_regression:" in out
    assert "    rejection terminal_task: SendMessage on terminal t-8" in out
    assert "    answered with error -32004" in out
    assert "observed at  20" in out and "Z" in out  # ISO-8601 UTC, not an epoch float
    assert "card generation 1" in out  # docs/field-cases.md F20
    as_json = subprocess.run([sys.executable, "-m", "gateway", "ledger", "show", "t-8", "--json", "--ledger", url],
                             capture_output=True, text=True, timeout=30)
    [doc] = orjson.loads(as_json.stdout)
    assert [e["verdict"] for e in doc["timeline"]] == ["rewritten", "rewritten", "answered_locally"]


def test_a_failed_timeline_write_is_counted_and_the_request_goes_on(h: Harness) -> None:
    async def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    h.runtime.ledger.inner.append_timeline = broken
    h.worker.on("GetTask", json_result=task("t-9", "completed"))
    r = h.rpc(get_task(1, "t-9"), headers=V1)
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    wait_until(lambda: h.metric("a2a_gateway_ledger_errors_total", operation="append_timeline") == 1,
               message="the failed timeline write counted")


def test_timeline_off_keeps_nothing(make_harness: Any) -> None:
    h = make_harness(timeline={"enabled": False})
    h.worker.on("GetTask", json_result=task("t-10", "completed"))
    h.rpc(get_task(1, "t-10"), headers=V1)
    assert h.on_gateway_loop(h.runtime.ledger.timeline("worker", "t-10")) == []
    assert h.on_gateway_loop(h.runtime.ledger.get("worker", "t-10")) is not None


def test_ledger_show_text_holds_no_control_character_a_worker_sent() -> None:
    """A worker's state spelling, context id or error text is printed to an operator's
    terminal: an escape sequence or a newline in it must not reach the terminal as such."""
    from gateway.a2a.states import TaskState
    from gateway.cli import _task_text
    from gateway.invariants.model import TaskRecord
    from gateway.invariants.timeline import TimelineEntry
    from gateway.ledger.base import Stored

    hostile = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\nforged line\u202e"
    record = TaskRecord("worker", "t-9", hostile, TaskState.WORKING, 1000.0, card_etag=hostile)
    entry = TimelineEntry("answer", "rewritten", method="GetTask", state_received=hostile,
                          state="TASK_STATE_WORKING", findings=(("normalization", "unknown", hostile),),
                          error=f"-32603 {hostile}", at=1000.0)
    text = _task_text("t-9", "worker", Stored(record, 1, False), [entry])
    assert not any(c in text for c in "\x1b\x07\u202e")
    assert "forged line" in text and not any(line.startswith("forged") for line in text.splitlines())
    assert "\\x1b]52;c;" in text  # shown escaped, so the operator still sees what was sent


def test_a_forced_get_task_is_a_probe_entry_with_its_reason_and_the_timeline_is_bounded(make_harness: Any) -> None:
    """A worker error that hides a terminal task: the gateway's own ``GetTask`` is a ``probe``
    entry saying why (``worker_error``), then the rewritten answer; with
    ``timeline.max_entries_per_task`` 2 a later refusal pushes the oldest entry out."""
    h = make_harness(timeline={"max_entries_per_task": 2})
    h.worker.on("SendMessage", json_error={"code": -32001, "message": "no such task"})
    h.worker.on("GetTask", json_result=task("t-11", "TASK_STATE_COMPLETED"))
    assert h.rpc(follow_up(1, "t-11"), headers=V1).json()["error"]["code"] == -32004
    doc = httpx.get(h.admin.url + "/tasks/worker/t-11/timeline", trust_env=False).json()
    entries = [(e["direction"], e["method"], e["forced_get"], e["verdict"]) for e in doc["timeline"]]
    assert entries == [("probe", "GetTask", "worker_error", "forwarded"),
                       ("answer", "SendMessage", None, "rewritten")], doc["timeline"]
    assert doc["timeline"][1]["error"].startswith("-32004 ")
    assert h.rpc(follow_up(2, "t-11"), headers=V1).json()["error"]["code"] == -32004  # now refused locally
    doc = httpx.get(h.admin.url + "/tasks/worker/t-11/timeline", trust_env=False).json()
    assert [(e["direction"], e["verdict"]) for e in doc["timeline"]] == [("answer", "rewritten"),
                                                                          ("request", "answered_locally")]
