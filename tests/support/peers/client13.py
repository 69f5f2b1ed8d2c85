"""A genuine a2a-sdk 1.3 client (run by the main venv's python, in its own process).

    .venv/bin/python tests/support/peers/client13.py CARD_URL < scenario.json

It fetches the Agent Card at CARD_URL, builds its client with the SDK's own ``create_client``
and runs the scenario's steps. The factory picks an interface from the card's
supportedInterfaces and talks to whatever URL it names: JSON-RPC only by default, or, when the
scenario names a ``transport`` (``JSONRPC`` / ``HTTP+JSON``), that binding first and the other
one as a fallback (``supported_protocol_bindings`` + ``use_client_preference``). The scenario
format and the JSON lines printed on stdout are shared by every peer client; they are described
in ``tests/support/peers.py``. With the scenario's ``verify`` (``{"jwksUrl"}``) both clients are
built with the SDK's own signature verifier (``create_signature_verifier``, keys of that JWKS by
``kid``): a card whose signatures do not verify prints ``{"type": "card_refused", ...}`` and the
client exits; the ``client`` line's ``verified`` lists the kids asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import traceback
import uuid
from collections.abc import AsyncIterator
from importlib.metadata import version
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt
from wire import WireRecorder  # tests/support/peers/wire.py (this script's folder)
from google.protobuf.json_format import MessageToDict

from a2a.client import A2ACardResolver, Client, ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier

SDK = "a2a-sdk"
_KINDS = {"task": "task", "message": "message", "status_update": "statusUpdate", "artifact_update": "artifactUpdate"}
#: The binding each of the SDK's transport classes speaks (the v0.3 compat ones included).
_BINDINGS = {"JsonRpcTransport": TransportProtocol.JSONRPC, "CompatJsonRpcTransport": TransportProtocol.JSONRPC,
             "RestTransport": TransportProtocol.HTTP_JSON, "CompatRestTransport": TransportProtocol.HTTP_JSON}
#: Ops that address the last task seen unless the step names a ``taskId``.
_LAST_TASK_OPS = ("get", "cancel")


def emit(**fields: Any) -> None:
    print(json.dumps(fields, default=str), flush=True)


def emit_wire(recorder: WireRecorder, index: int | None = None) -> None:
    """Print (and forget) the exchanges recorded so far."""
    records, recorder.records = recorder.records, []
    for record in records:
        emit(type="wire", index=index, **{**record, "body": bytes(record["body"]).decode("utf-8", "replace")})


def describe(event: Any) -> dict[str, Any]:
    """One StreamResponse as printed: kind (the v1.0 member name), ids, state and the dump."""
    case = event.WhichOneof("payload")
    kind = _KINDS.get(case, case)
    value = getattr(event, case)
    out: dict[str, Any] = {"kind": kind, "raw": MessageToDict(event)}
    if kind == "task":
        out.update(taskId=value.id, contextId=value.context_id, state=TaskState.Name(value.status.state))
    elif kind in ("statusUpdate", "artifactUpdate", "message"):
        out.update(taskId=value.task_id or None, contextId=value.context_id or None)
        if kind == "statusUpdate":
            out.update(state=TaskState.Name(value.status.state))
    return out


def describe_error(exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"name": type(exc).__name__, "module": type(exc).__module__, "text": str(exc)}
    # The SDK raises one A2AError subclass per JSON-RPC code (its own public map), carrying the
    # server's message.
    code = JSON_RPC_ERROR_CODE_MAP.get(type(exc))
    if code is not None:
        out["code"] = code
    message = getattr(exc, "message", None)
    if isinstance(message, str):
        out["message"] = message
    return out


def client_config(scenario: dict[str, Any], http: httpx.AsyncClient, *, streaming: bool) -> ClientConfig:
    """The factory's config: JSON-RPC only, or the scenario's ``transport`` preferred."""
    wanted = scenario.get("transport")
    if wanted is None:
        return ClientConfig(streaming=streaming, supported_protocol_bindings=[TransportProtocol.JSONRPC],
                            httpx_client=http)
    others = [b for b in (TransportProtocol.JSONRPC, TransportProtocol.HTTP_JSON) if b != wanted]
    return ClientConfig(streaming=streaming, supported_protocol_bindings=[wanted, *others],
                        use_client_preference=True, httpx_client=http)


def chosen(client: Client) -> dict[str, Any]:
    """The transport the factory picked: its binding, class and endpoint URL."""
    transport = client._transport  # noqa: SLF001 - report only
    name = type(transport).__name__
    return {"transport": _BINDINGS.get(name), "transportClass": name, "endpoint": getattr(transport, "url", None)}


def results(streaming: Client, blocking: Client, step: dict[str, Any]) -> AsyncIterator[StreamResponse]:
    """What the SDK surfaces for one step, as StreamResponses (unary Task results wrapped)."""
    op = step["op"]
    if op == "resubscribe":
        return streaming.subscribe(SubscribeToTaskRequest(id=step["taskId"]))
    if op in ("send", "stream"):
        message = new_text_message(step.get("text", "hi"), task_id=step.get("taskId"),
                                   context_id=step.get("contextId"), role=Role.ROLE_USER)
        message.message_id = step.get("messageId") or uuid.uuid4().hex
        client = streaming if op == "stream" else blocking
        request = SendMessageRequest(message=message)
        if step.get("blocking") is False:  # non-blocking: the worker answers as soon as the task exists
            request.configuration.return_immediately = True
        return client.send_message(request)
    return _unary(blocking, op, step)


async def _unary(client: Client, op: str, step: dict[str, Any]) -> AsyncIterator[StreamResponse]:
    """``get`` / ``cancel``: the Task the SDK returned; ``list``: each task of the page."""
    if op == "get":
        yield StreamResponse(task=await client.get_task(GetTaskRequest(id=step.get("taskId"))))
    elif op == "cancel":
        yield StreamResponse(task=await client.cancel_task(CancelTaskRequest(id=step.get("taskId"))))
    elif op == "list":
        listed = await client.list_tasks(ListTasksRequest(context_id=step.get("contextId"),
                                                          page_size=step.get("pageSize")))
        for task in listed.tasks:
            yield StreamResponse(task=task)
    else:
        raise ValueError(f"unknown op {op!r}")


async def card_verifier(http: httpx.AsyncClient, jwks_url: str) -> tuple[Any, dict[str, Any]]:
    """The SDK's own signature verifier (``create_signature_verifier``) with the keys of the
    JWKS at ``jwks_url`` by ``kid``, and the record of the kids it was asked for."""
    keys = {k["kid"]: jwt.PyJWK(k) for k in (await http.get(jwks_url)).json()["keys"]}
    verified: dict[str, Any] = {"kids": []}

    def key_provider(kid: str | None, jku: str | None) -> Any:
        if kid not in keys:
            raise jwt.PyJWKError(f"unknown kid {kid}")
        verified["kids"].append(kid)
        return keys[kid]

    algorithms = ["ES256", "ES384", "ES512", "EdDSA", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
    return create_signature_verifier(key_provider, algorithms), verified


async def run(card_url: str, scenario: dict[str, Any]) -> None:
    recorder = WireRecorder()
    timeout = httpx.Timeout(float(scenario.get("httpTimeout", 30)), connect=5.0)
    headers = scenario.get("headers") or {}
    async with httpx.AsyncClient(transport=recorder, timeout=timeout, trust_env=False, headers=headers) as http:
        parts = urlsplit(card_url)
        origin = f"{parts.scheme}://{parts.netloc}"
        agent: str | AgentCard = origin
        if scenario.get("resolveFirst"):
            # as the SDK's samples do: resolve the card with the resolver (its GET carries no
            # A2A-Version), then build the clients from it on the same httpx client
            agent = await A2ACardResolver(http, origin).get_agent_card(relative_card_path=parts.path)
        verifier, verified = None, None
        if scenario.get("verify"):
            verifier, verified = await card_verifier(http, scenario["verify"]["jwksUrl"])
        try:
            streaming = await create_client(agent, client_config=client_config(scenario, http, streaming=True),
                                            relative_card_path=parts.path, signature_verifier=verifier)
        except SignatureVerificationError as exc:
            emit(type="card_refused", **describe_error(exc))
            raise
        blocking = await create_client(agent, client_config=client_config(scenario, http, streaming=False),
                                       relative_card_path=parts.path, signature_verifier=verifier)
        emit(type="client", sdk=SDK, version=version(SDK), cardUrl=card_url,
             requestedTransport=scenario.get("transport"), verified=verified, **chosen(streaming))
        emit_wire(recorder)
        task_id = context_id = None
        try:
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
                            if op != "list":  # listed tasks do not change the last task seen
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
        finally:
            await streaming.close()  # a shared httpx client stays open: the async with closes it
            await blocking.close()
        emit(type="done")


def main() -> None:
    card_url = sys.argv[1]
    scenario = json.loads(sys.stdin.read())
    asyncio.run(asyncio.wait_for(run(card_url, scenario), float(scenario.get("timeout", 20))))


if __name__ == "__main__":
    main()
