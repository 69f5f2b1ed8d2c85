"""Plain-dict A2A payload builders for engine transcripts (v1.0 and v0.3 wire shapes)."""

from __future__ import annotations

from typing import Any


def status(state: str | None = None, **extra: Any) -> dict[str, Any]:
    """A TaskStatus; ``None`` leaves ``state`` out (ProtoJSON omits the zero enum, F03)."""
    out: dict[str, Any] = {} if state is None else {"state": state}
    out.update(extra)
    return out


def task(tid: str, ctx: str, state: str | None = None, **extra: Any) -> dict[str, Any]:
    """A bare v1.0 Task (GetTask / CancelTask answer)."""
    return {"id": tid, "contextId": ctx, "status": status(state), **extra}


def status_update(tid: str, ctx: str, state: str | None, **status_extra: Any) -> dict[str, Any]:
    """A v1.0 StreamResponse carrying a TaskStatusUpdateEvent."""
    return {"statusUpdate": {"taskId": tid, "contextId": ctx,
                             "status": status(state, **status_extra)}}


def artifact_update(tid: str, ctx: str, aid: str, texts: list[str], *,
                    append: bool | None = None, last: bool | None = None) -> dict[str, Any]:
    """A v1.0 StreamResponse carrying a TaskArtifactUpdateEvent (flags left out when None)."""
    event: dict[str, Any] = {"taskId": tid, "contextId": ctx,
                             "artifact": {"artifactId": aid, "parts": [{"text": t} for t in texts]}}
    if append is not None:
        event["append"] = append
    if last is not None:
        event["lastChunk"] = last
    return {"artifactUpdate": event}


def v03_task(tid: str, ctx: str, state: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"kind": "task", "id": tid, "contextId": ctx, "status": status(state), **extra}


def v03_status_update(tid: str, ctx: str, state: str | None, *, final: bool) -> dict[str, Any]:
    return {"kind": "status-update", "taskId": tid, "contextId": ctx, "status": status(state),
            "final": final}


def v03_artifact_update(tid: str, ctx: str, aid: str, texts: list[str], *,
                        append: bool = False, last: bool = False) -> dict[str, Any]:
    return {"kind": "artifact-update", "taskId": tid, "contextId": ctx,
            "artifact": {"artifactId": aid, "parts": [{"kind": "text", "text": t} for t in texts]},
            "append": append, "lastChunk": last}


def text_parts(texts: list[str]) -> list[dict[str, str]]:
    return [{"text": t} for t in texts]
