"""A genuine a2a-sdk 0.3.x client (run by ``.venv-a2a03/bin/python``, never by the main venv).

    .venv-a2a03/bin/python tests/support/peers/client03.py CARD_URL < scenario.json

It fetches the Agent Card at CARD_URL, builds its client with the SDK's own ``ClientFactory``
(so it talks to whatever URL the card names — it does not pin the RPC URL) and runs the
scenario's steps. The scenario format and the JSON lines printed on stdout are shared by every
peer client; they are described in ``tests/support/peers.py``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from importlib.metadata import version
from typing import Any
from urllib.parse import urlsplit

import httpx
from wire import WireRecorder  # tests/support/peers/wire.py (this script's folder)
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, TaskIdParams, TextPart

SDK = "a2a-sdk"


def emit(**fields: Any) -> None:
    print(json.dumps(fields, default=str), flush=True)


def describe(item: Any) -> dict[str, Any]:
    """One event (or unary result) as printed: kind, ids, state, final and the SDK's own dump."""
    if isinstance(item, tuple):  # ClientEvent: (task, update or None)
        task, update = item
        item = update if update is not None else task
    raw = item.model_dump(mode="json", by_alias=True, exclude_none=True)
    kind = raw.get("kind")
    out: dict[str, Any] = {"kind": kind, "raw": raw}
    if kind == "task":
        out.update(taskId=raw.get("id"), contextId=raw.get("contextId"), state=raw["status"]["state"])
    elif kind in ("status-update", "artifact-update"):
        out.update(taskId=raw.get("taskId"), contextId=raw.get("contextId"))
        if kind == "status-update":
            out.update(state=raw["status"]["state"], final=raw.get("final"))
    elif kind == "message":
        out.update(taskId=raw.get("taskId"), contextId=raw.get("contextId"))
    return out


def describe_error(exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"name": type(exc).__name__, "module": type(exc).__module__, "text": str(exc)}
    error = getattr(exc, "error", None)  # A2AClientJSONRPCError: the JSON-RPC error object
    if error is not None and hasattr(error, "code"):
        out.update(code=error.code, message=error.message, data=getattr(error, "data", None))
    if hasattr(exc, "status_code"):  # A2AClientHTTPError
        out.update(status=exc.status_code, message=getattr(exc, "message", None))
    return out


async def run(card_url: str, scenario: dict[str, Any]) -> None:
    recorder = WireRecorder()
    timeout = httpx.Timeout(float(scenario.get("httpTimeout", 30)), connect=5.0)
    headers = scenario.get("headers") or {}
    async with httpx.AsyncClient(transport=recorder, timeout=timeout, trust_env=False, headers=headers) as http:
        parts = urlsplit(card_url)
        resolver = A2ACardResolver(http, f"{parts.scheme}://{parts.netloc}", parts.path)
        card = await resolver.get_agent_card()
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        emit(type="client", sdk=SDK, version=version(SDK), cardUrl=card_url, endpoint=card.url,
             transport=card.preferred_transport, protocolVersion=card.protocol_version)
        task_id = context_id = None
        emit_wire(recorder)
        for index, step in enumerate(scenario["steps"]):
            op = step["op"]
            emit(type="step", index=index, op=op)
            if step.get("sameTask"):
                step = {"taskId": task_id, "contextId": context_id, **step}
            started = time.monotonic()
            try:
                if op not in ("send", "stream", "resubscribe"):
                    raise ValueError(f"step op {op!r} is not supported by the v0.3 client")
                if op == "resubscribe":
                    stream = streaming.resubscribe(TaskIdParams(id=step["taskId"]))
                else:
                    message = Message(role=Role.user, message_id=step.get("messageId") or f"m-{time.time_ns()}",
                                      parts=[Part(TextPart(text=step.get("text", "hi")))],
                                      task_id=step.get("taskId"), context_id=step.get("contextId"))
                    client = streaming if op == "stream" else blocking
                    stream = client.send_message(message)
                async for item in stream:
                    event = describe(item)
                    task_id = event.get("taskId") or task_id
                    context_id = event.get("contextId") or context_id
                    emit(type="event", index=index, at=round(time.monotonic() - started, 3), **event)
            except Exception as exc:  # noqa: BLE001 - every failure is an observation
                emit(type="error", index=index, at=round(time.monotonic() - started, 3),
                     traceback=traceback.format_exc(limit=4), **describe_error(exc))
                emit_wire(recorder, index)
                emit(type="step_end", index=index, outcome="error")
                continue
            emit_wire(recorder, index)
            emit(type="step_end", index=index, outcome="ended", at=round(time.monotonic() - started, 3))
        emit(type="done")


def emit_wire(recorder: WireRecorder, index: int | None = None) -> None:
    """Print (and forget) the exchanges recorded so far."""
    records, recorder.records = recorder.records, []
    for record in records:
        emit(type="wire", index=index, **{**record, "body": bytes(record["body"]).decode("utf-8", "replace")})


def main() -> None:
    card_url = sys.argv[1]
    scenario = json.loads(sys.stdin.read())
    asyncio.run(asyncio.wait_for(run(card_url, scenario), float(scenario.get("timeout", 20))))


if __name__ == "__main__":
    main()
