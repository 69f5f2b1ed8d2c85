"""v1.0 wire objects for the live field-case tests, by one convention: task ``t-N`` lives in
context ``c-N`` (docs/protocol.md §3.1)."""

from __future__ import annotations

from typing import Any


def task(tid: str, state: str | None, **extra: Any) -> dict[str, Any]:
    """A Task in ``state`` (``None``: a status without a state)."""
    status = {} if state is None else {"state": state}
    return {"id": tid, "contextId": tid.replace("t-", "c-"), "status": status, **extra}


def status_update(tid: str, state: str) -> dict[str, Any]:
    """A StreamResponse carrying a status update of ``tid``."""
    return {"statusUpdate": {"taskId": tid, "contextId": tid.replace("t-", "c-"), "status": {"state": state}}}


def artifact_update(tid: str, aid: str, text: str, **flags: bool) -> dict[str, Any]:
    """A StreamResponse carrying a one-part text artifact update (``append``/``lastChunk``)."""
    art = {"artifactId": aid, "parts": [{"text": text}]}
    return {"artifactUpdate": {"taskId": tid, "contextId": tid.replace("t-", "c-"), "artifact": art, **flags}}
