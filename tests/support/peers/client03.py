"""A genuine a2a-sdk 0.3.x client (run by ``.venv-a2a03/bin/python``, never by the main venv).

    .venv-a2a03/bin/python tests/support/peers/client03.py CARD_URL < scenario.json

It fetches the Agent Card at CARD_URL, builds its client with the SDK's own ``ClientFactory``
(so it talks to whatever URL the card names — it does not pin the RPC URL) and runs the
scenario's steps. The factory speaks JSON-RPC only by default, or, when the scenario names a
``transport`` (``JSONRPC`` / ``HTTP+JSON``), that binding first and the other one as a fallback
(``supported_transports`` + ``use_client_preference``). The scenario format and the JSON lines printed on stdout are shared by every
peer client; they are described in ``tests/support/peers.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import traceback
from importlib.metadata import version
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
from wire import WireRecorder  # tests/support/peers/wire.py (this script's folder)
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (AgentCard, Message, MessageSendConfiguration, Part, Role, TaskIdParams, TaskQueryParams, TextPart,
                       TransportProtocol)

SDK = "a2a-sdk"
#: The binding each of the SDK's transport classes speaks.
_BINDINGS = {"JsonRpcTransport": TransportProtocol.jsonrpc.value, "RestTransport": TransportProtocol.http_json.value,
             "GrpcTransport": TransportProtocol.grpc.value}
#: Ops that address the last task seen unless the step names a ``taskId``.
_LAST_TASK_OPS = ("get", "cancel")


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


def client_config(scenario: dict[str, Any], http: httpx.AsyncClient, *, streaming: bool) -> ClientConfig:
    """The factory's config: JSON-RPC only, or the scenario's ``transport`` preferred."""
    wanted = scenario.get("transport")
    if wanted is None:
        return ClientConfig(streaming=streaming, httpx_client=http)
    others = [b.value for b in (TransportProtocol.jsonrpc, TransportProtocol.http_json) if b.value != wanted]
    return ClientConfig(streaming=streaming, supported_transports=[wanted, *others], use_client_preference=True,
                        httpx_client=http)


def chosen(client: Client) -> dict[str, Any]:
    """The transport the factory picked: its binding, class and endpoint URL."""
    transport = client._transport  # noqa: SLF001 - report only
    name = type(transport).__name__
    return {"transport": _BINDINGS.get(name), "transportClass": name, "endpoint": getattr(transport, "url", None)}


def results(streaming: Client, blocking: Client, step: dict[str, Any]) -> AsyncIterator[Any]:
    """What the SDK surfaces for one step: its events, or the unary Task of ``get`` / ``cancel``."""
    op = step["op"]
    if op == "resubscribe":
        return streaming.resubscribe(TaskIdParams(id=step["taskId"]))
    if op in ("send", "stream"):
        message = Message(role=Role.user, message_id=step.get("messageId") or f"m-{time.time_ns()}",
                          parts=[Part(TextPart(text=step.get("text", "hi")))],
                          task_id=step.get("taskId"), context_id=step.get("contextId"))
        client = streaming if op == "stream" else blocking
        if step.get("blocking") is False:  # non-blocking: the worker answers as soon as the task exists
            return client.send_message(message, configuration=MessageSendConfiguration(blocking=False))
        return client.send_message(message)
    return _unary(blocking, op, step)


async def _unary(client: Client, op: str, step: dict[str, Any]) -> AsyncIterator[Any]:
    if op == "get":
        yield await client.get_task(TaskQueryParams(id=step.get("taskId")))
    elif op == "cancel":
        yield await client.cancel_task(TaskIdParams(id=step.get("taskId")))
    else:
        raise ValueError(f"step op {op!r} is not supported by the v0.3 client")


async def run(card_url: str, scenario: dict[str, Any]) -> None:
    recorder = WireRecorder()
    timeout = httpx.Timeout(float(scenario.get("httpTimeout", 30)), connect=5.0)
    headers = scenario.get("headers") or {}
    async with httpx.AsyncClient(transport=recorder, timeout=timeout, trust_env=False, headers=headers) as http:
        parts = urlsplit(card_url)
        resolver = A2ACardResolver(http, f"{parts.scheme}://{parts.netloc}", parts.path)
        card: AgentCard = await resolver.get_agent_card()
        streaming = ClientFactory(client_config(scenario, http, streaming=True)).create(card)
        blocking = ClientFactory(client_config(scenario, http, streaming=False)).create(card)
        emit(type="client", sdk=SDK, version=version(SDK), cardUrl=card_url,
             requestedTransport=scenario.get("transport"), preferredTransport=card.preferred_transport,
             protocolVersion=card.protocol_version, **chosen(streaming))
        task_id = context_id = None
        emit_wire(recorder)
        for index, step in enumerate(scenario["steps"]):
            op = step["op"]
            emit(type="step", index=index, op=op)
            if step.get("sameTask"):
                step = {"taskId": task_id, "contextId": context_id, **step}
            elif op in _LAST_TASK_OPS:
                step = {"taskId": task_id, **step}
            started = time.monotonic()
            outcome = "ended"
            try:
                async with contextlib.aclosing(results(streaming, blocking, step)) as items:
                    async for item in items:
                        event = describe(item)
                        task_id = event.get("taskId") or task_id
                        context_id = event.get("contextId") or context_id
                        emit(type="event", index=index, at=round(time.monotonic() - started, 3), **event)
                        if "until" in step and event.get("state") == step["until"]:
                            outcome = "stopped"
                            break
            except Exception as exc:  # noqa: BLE001 - every failure is an observation
                emit(type="error", index=index, at=round(time.monotonic() - started, 3),
                     traceback=traceback.format_exc(limit=4), **describe_error(exc))
                emit_wire(recorder, index)
                emit(type="step_end", index=index, outcome="error")
                continue
            emit_wire(recorder, index)
            emit(type="step_end", index=index, outcome=outcome, at=round(time.monotonic() - started, 3))
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
