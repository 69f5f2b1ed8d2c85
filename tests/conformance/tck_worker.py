"""The worker the A2A TCK runs against in ``tests/conformance/test_tck.py``: an a2a-sdk 1.3 agent.

Its executor follows the TCK's own System Under Test: ``TckAgentExecutor`` of the a2a-tck 1.0
line (``sut/a2a-python/sut_agent.py`` of a2aproject/a2a-tck, Apache-2.0), which picks what to
do by the prefix of the user message's ``messageId`` (``tck-complete-task…``,
``tck-input-required…``, ``tck-stream-artifact-chunked…``, …). Two changes make it run on
a2a-sdk 1.3, which that script predates: the ``Task`` is enqueued before its first update
(1.3 refuses an update of a task it has not seen), and a follow-up that names only its
``taskId`` is answered in the task's own context.

The TCK 1.0 line sends every message with a ``tck-`` prefix. The TCK 0.3 line sends other
``messageId``\\ s (``test-…``, ``msg-…``) and then continues, cancels and gets the task its
blocking ``message/send`` made; a2a-sdk answers a blocking send only once the task is terminal
or interrupted, so for those messages this executor leaves the task open in
``INPUT_REQUIRED`` (with an agent message), and so one worker serves both lines.
``test-resubscribe-message-id…`` (used by the TCK 0.3 line) stays ``WORKING`` for 4 s, as in the
1.0 SUT.

It is built the way ``demo/worker.py`` builds an a2a-sdk 1.3 app, on one origin:

* ``GET /.well-known/agent-card.json`` — the card, sent with ``Cache-Control: public,
  max-age=60``: ``JSONRPC`` at ``BASE/`` and ``HTTP+JSON`` at ``BASE/rest``, in version ``1.0``
  and then ``0.3`` (the v1.0 ones first: the TCK 1.0 uses the first interface of each binding;
  the SDK adds the v0.3 members ``url``, ``preferredTransport``, ``additionalInterfaces``
  and ``protocolVersion`` for the v0.3 ones); streaming on, push notifications off; no gRPC;
* ``POST /`` — JSON-RPC v1.0 and, through the SDK's compat layer, v0.3;
* ``/rest/...`` — HTTP+JSON v1.0 and v0.3 (``/rest/v1/...``).

With ``--v1-only`` it speaks v1.0 alone: its card lists the two v1.0 interfaces only (so the
SDK adds no v0.3 members) and the SDK's v0.3 compat layer is off on both bindings.

Run: ``python tests/conformance/tck_worker.py --port PORT [--v1-only]`` (host 127.0.0.1 unless
``--host``); it serves until SIGTERM. The card names ``http://HOST:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Value
from starlette.applications import Starlette

from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentProvider, AgentSkill, Part
from a2a.utils.errors import A2AError

__all__ = ["TckAgentExecutor", "build_app", "build_card", "main"]

REST_PATH = "/rest"
CARD_CACHE_CONTROL = "public, max-age=60"
#: The SUT's ``test-resubscribe-message-id…`` task stays WORKING this long.
RESUBSCRIBE_WORK_SECONDS = 4.0


class TckAgentExecutor(AgentExecutor):
    """The TCK SUT's executor: what it does is chosen by the ``messageId`` prefix."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        if context.current_task is not None:
            # a follow-up naming only its taskId: a2a-sdk 1.3 gives the request a new contextId
            # and then refuses events in it ("Context in event doesn't match TaskManager")
            context_id = context.current_task.context_id
        if task_id is None or context_id is None:
            return
        updater = TaskUpdater(event_queue, task_id, context_id)
        message = context.message
        if message is None:
            await updater.complete(updater.new_agent_message([Part(text="No message provided")]))
            return
        mid = message.message_id
        if context.current_task is None and not mid.startswith("tck-message-response"):
            # a2a-sdk 1.3 wants the Task before any update of it
            await event_queue.enqueue_event(new_task_from_user_message(message))

        if mid.startswith("tck-stream-artifact-chunked"):
            await updater.start_work()
            await updater.add_artifact(parts=[Part(text="chunk-1 ")], append=True)
            await updater.add_artifact(parts=[Part(text="chunk-2")], append=True, last_chunk=True)
            await updater.complete()
        elif mid.startswith("test-resubscribe-message-id"):
            await updater.start_work()
            await asyncio.sleep(RESUBSCRIBE_WORK_SECONDS)  # the SUT's behaviour: a task to resubscribe to
            await updater.complete()
        elif mid.startswith("tck-stream-artifact-text"):
            await updater.start_work()
            await updater.add_artifact(parts=[Part(text="Streamed text content")])
            await updater.complete()
        elif mid.startswith("tck-stream-artifact-file"):
            await updater.start_work()
            await updater.add_artifact(parts=[Part(raw=b"tck", media_type="text/plain", filename="output.txt")])
            await updater.complete()
        elif mid.startswith("tck-stream-ordering-001"):
            await updater.start_work()
            await updater.add_artifact(parts=[Part(text="Ordered output")])
            await updater.complete()
        elif mid.startswith("tck-artifact-file-url"):
            await updater.add_artifact(parts=[Part(url="https://example.com/output.txt", media_type="text/plain",
                                                   filename="output.txt")])
            await updater.complete()
        elif mid.startswith("tck-message-response"):
            await event_queue.enqueue_event(updater.new_agent_message([Part(text="Direct message response")]))
        elif mid.startswith("tck-input-required"):
            await updater.requires_input()
        elif mid.startswith("tck-complete-task"):
            await updater.complete(updater.new_agent_message([Part(text="Hello from TCK")]))
        elif mid.startswith("tck-artifact-text"):
            await updater.add_artifact(parts=[Part(text="Generated text content")])
            await updater.complete()
        elif mid.startswith("tck-artifact-file"):
            await updater.add_artifact(parts=[Part(raw=b"tck", media_type="text/plain", filename="output.txt")])
            await updater.complete()
        elif mid.startswith("tck-artifact-data"):
            data = json_format.Parse('{"key": "value", "count": 42}', Value())
            await updater.add_artifact(parts=[Part(data=data)])
            await updater.complete()
        elif mid.startswith("tck-reject-task"):
            raise A2AError("rejected")
        elif mid.startswith("tck-stream-001"):
            await updater.start_work()
            await updater.add_artifact(parts=[Part(text="Stream hello from TCK")])
            await updater.complete()
        elif mid.startswith("tck-stream-002"):
            await updater.complete()
        elif mid.startswith("tck-stream-003"):
            await updater.start_work()
            await updater.add_artifact(parts=[Part(text="Stream task lifecycle")])
            await updater.complete()
        elif mid.startswith("tck-"):
            await updater.complete(updater.new_agent_message([Part(text="Unhandled messageId prefix: " + mid)]))
        else:  # the TCK 0.3 line: a task left open for its follow-ups, cancels and gets
            await updater.requires_input(updater.new_agent_message([Part(text="Send more, or cancel the task.")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        if context.current_task is not None:
            context_id = context.current_task.context_id
        if task_id is None or context_id is None:
            return
        await TaskUpdater(event_queue, task_id, context_id).cancel()


def build_card(base: str, *, v1_only: bool = False) -> AgentCard:
    """The card of a worker served at ``base`` (``http://HOST:PORT``, no trailing slash)."""
    interfaces = [
        AgentInterface(protocol_binding=binding, url=url, protocol_version=version)
        for version in (("1.0",) if v1_only else ("1.0", "0.3"))
        for binding, url in (("JSONRPC", base + "/"), ("HTTP+JSON", base + REST_PATH))
    ]
    return AgentCard(
        name="a2a-gateway TCK worker",
        description="The TCK's System Under Test executor on a2a-sdk 1.3 (tests/conformance/tck_worker.py)",
        version="1.0.0",
        provider=AgentProvider(organization="A2A Project", url="https://github.com/a2aproject"),
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="tck", name="TCK Conformance", description="Handles TCK conformance test messages",
                           tags=["tck"])],
    )


def build_app(base: str, *, v1_only: bool = False) -> Starlette:
    """The worker's ASGI app, its card naming ``base``; v1.0 alone with ``v1_only``."""
    card = build_card(base, v1_only=v1_only)
    handler = DefaultRequestHandler(agent_executor=TckAgentExecutor(), task_store=InMemoryTaskStore(),
                                    agent_card=card)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await handler.aclose()

    routes = [
        *create_agent_card_routes(card, cache_control=CARD_CACHE_CONTROL),
        *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=not v1_only),
        *create_rest_routes(handler, enable_v0_3_compat=not v1_only, path_prefix=REST_PATH),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The a2a-sdk 1.3 worker the A2A TCK runs against.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--v1-only", action="store_true", help="speak A2A v1.0 alone (no v0.3 interfaces)")
    args = parser.parse_args(argv)
    app = build_app(f"http://{args.host}:{args.port}", v1_only=args.v1_only)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=2)


if __name__ == "__main__":
    main()
