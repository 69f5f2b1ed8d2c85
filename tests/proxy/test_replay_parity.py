"""A whole stream — cut, probe and resubscribe — replayed offline gives what the live gateway
gives (issue: one exchange core). The transcript tests/fixtures/transcripts/
f08_cut_probe_resubscribe.jsonl is played by the scripted worker behind the real gateway and
by ``gateway.replay``; the client-visible documents and the counted outcome must agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gateway.replay import replay
from tests.proxy.conftest import Harness, frames
from tests.support.scripted_worker import Event

F08 = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts" / "f08_cut_probe_resubscribe.jsonl"


def _exchange_line() -> dict[str, Any]:
    [line] = [t for t in F08.read_text().splitlines() if t.strip() and not t.startswith("#")]
    doc: dict[str, Any] = orjson.loads(line)
    return doc


def _script_worker(h: Harness, acts: list[dict[str, Any]]) -> None:
    """The transcript's worker acts as scripted-worker answers: each opened stream carries
    the events of the reads after it and ends where the transcript says ``end``."""
    methods = iter(["SendStreamingMessage", "SubscribeToTask"])
    events: list[Any] | None = None
    for act in acts:
        if act.get("open"):
            events = []
        elif "events" in act and events is not None:
            events.extend(Event(result=e) for e in act["events"])
        elif act.get("end") and events is not None:
            h.worker.on(next(methods), sse=events)
            events = None
        elif "answer" in act:
            h.worker.on("GetTask", json_result=act["answer"]["result"])


def test_f08ii_cut_probe_resubscribe_live_and_offline_agree(h: Harness) -> None:
    line = _exchange_line()
    _script_worker(h, line["worker"])
    body = {"jsonrpc": "2.0", "id": line["id"], "method": line["method"], "params": line["params"]}
    _, raw = h.stream(body, headers={"A2A-Version": "1.0"})
    live = [f["data"] for f in frames(raw) if isinstance(f["data"], dict)]

    [verdict] = list(replay(F08.read_text().splitlines()))

    assert verdict.outputs == live
    assert [next(iter(d["result"])) for d in live] == ["task", "artifactUpdate", "statusUpdate"]
    assert live[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert verdict.action == "forward" and verdict.error is None
    assert len(h.worker.calls("GetTask")) == 1 and len(h.worker.calls("SubscribeToTask")) == 1
    assert h.metric("a2a_gateway_stream_resubscribes_total", outcome="resubscribed") == 1
    assert h.metric("a2a_gateway_forced_get_total", reason="upstream_eof") == 1
