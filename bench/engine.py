"""The pure engine on one core, in-process: ``check_payload`` observations/s (``bench.run``)."""

from __future__ import annotations

import time
from typing import Any


def engine_bench(seconds: float, tasks: int = 1000) -> dict[str, Any]:
    """check_payload observations/s over pre-built streams (10 events per task)."""
    from gateway.a2a.jsonrpc import Operation
    from gateway.a2a.version import ProtocolVersion
    from gateway.invariants import engine
    from gateway.invariants.model import Clock, Exchange, StreamState

    ex = Exchange("worker", Operation.STREAM, ProtocolVersion.V1_0, None)
    ts = "2026-11-29T20:45:38.476Z"
    payloads: list[tuple[str, dict[str, Any]]] = []
    for i in range(tasks):
        tid, cid = f"t-{i}", f"c-{i}"
        ids = {"taskId": tid, "contextId": cid}
        payloads.append((tid, {"task": {"id": tid, "contextId": cid,
                                        "status": {"state": "TASK_STATE_WORKING", "timestamp": ts}}}))
        for k in range(8):
            if k % 2 == 0:
                payloads.append((tid, {"statusUpdate": {**ids, "status": {"state": "TASK_STATE_WORKING",
                                                                           "timestamp": ts}}}))
            else:
                payloads.append((tid, {"artifactUpdate": {**ids, "artifact": {
                    "artifactId": "a-1", "parts": [{"text": f"chunk {k}"}]}, "append": k > 1,
                    "lastChunk": False}}))
        payloads.append((tid, {"statusUpdate": {**ids, "status": {"state": "TASK_STATE_COMPLETED",
                                                                   "timestamp": ts}}}))
    check = engine.check_payload
    observations = findings = 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while True:
        ledger: dict[str, Any] = {}
        streams: dict[str, StreamState] = {}
        clock = Clock(time.time())  # one per pass: the engine's cost, not the clock's
        for tid, result in payloads:
            record = ledger.get(tid)
            stream = streams.get(tid) or StreamState()
            outcome = check(ex, stream, record, result, clock)
            if outcome.record is not None:
                ledger[tid] = outcome.record
            streams[tid] = outcome.stream or stream
            findings += sum(1 for f in outcome.findings if f.category != "normalization")
        observations += len(payloads)
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - started
    return {"observations": observations, "seconds": elapsed, "obs_per_s": observations / elapsed,
            "divergence_or_rejection_findings": findings}
