"""A genuine a2a-sdk 0.3.x worker (run by ``.venv-a2a03/bin/python``, never by the main venv).

    .venv-a2a03/bin/python tests/support/peers/worker03.py [--port 0] [--host 127.0.0.1]

The v0.3 twin of ``worker13.mjs`` / ``demo/worker.py`` on the Python SDK: its own
``DefaultRequestHandler`` over an ``InMemoryTaskStore``, served by uvicorn on one origin
(BASE = ``http://HOST:PORT``), v0.3 only, as one Starlette app:

* ``GET BASE/.well-known/agent-card.json`` (and the deprecated ``/.well-known/agent.json``) —
  the v0.3 card, from ``A2AStarletteApplication``;
* ``POST BASE/`` — JSON-RPC v0.3 (``message/send``, …), ``A2AStarletteApplication.routes()``;
* ``BASE/rest/v1/...`` — HTTP+JSON v0.3, the FastAPI app of ``A2ARESTFastAPIApplication``
  mounted at ``/rest`` (``/rest/v1/message:send``, ``/rest/v1/tasks/{id}``,
  ``…:cancel``, ``GET …:subscribe``); it also answers its own card at
  ``/rest/.well-known/agent-card.json``.

and one route that is no part of A2A, for tests to synchronise on: ``GET
BASE/_peer/joins/{taskId}`` → ``{"taskId", "joins": n}``, how many requests (a
``tasks/resubscribe``, a ``tasks/cancel``) tapped the task's live event queue — once ``n``
counts a resubscribe, that stream gets every later event of the task. (This SDK's resubscribe
sends nothing until the task's next event, so a client cannot tell by itself.)

The card is ``protocolVersion`` ``0.3.0`` with ``url`` BASE/ and ``preferredTransport``
JSONRPC, and ``additionalInterfaces`` JSONRPC at BASE/ and HTTP+JSON at BASE/rest (the base the
SDK's REST clients append ``/v1/...`` to), with the port actually bound; streaming true,
pushNotifications false.

Once listening it prints one line on stdout, ``{"type": "ready", "url": BASE}``. It exits on
SIGTERM / SIGINT (uvicorn's own handling, with a one-second grace for open streams) and as soon
as its stdin, when that is a pipe or socket, reaches end of file.

Behaviour by the user's message text, as in ``worker13.mjs`` (states spelled as v0.3 does):

* anything else — Task (submitted) → working ("working") → artifact ``hello <text>``
  (lastChunk) → completed (final);
* ``slow…`` — Task → working, then parked until ``tasks/cancel``, which ends it canceled (the
  SDK hands :meth:`DemoAgentExecutor.cancel` a tap of the task's queue, whose events reach the
  cancel's caller alone, then cancels ``execute()``, which publishes canceled once more on the
  task's own queue so that resubscribers get it too);
* ``ask…`` — Task → input-required ("Which date?", final); a follow-up message with the same
  taskId completes it with the artifact ``booked for <follow-up text>``;
* ``fail…`` — Task → working → failed ("demo failure requested", final), published by the
  executor: an exception out of ``execute()`` is not turned into a FAILED task by this SDK;
* ``direct`` — a direct Message reply ``direct reply``, no task.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import stat
import sys
import threading

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2ARESTFastAPIApplication, A2AStarletteApplication
from a2a.server.events import EventQueue, InMemoryQueueManager
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    Part,
    TaskState,
    TextPart,
    TransportProtocol,
)
from a2a.utils import get_message_text, new_agent_text_message, new_task

ARTIFACT_NAME = "result"
ASK_QUESTION = "Which date?"
DIRECT_REPLY = "direct reply"
FAIL_MESSAGE = "demo failure requested"
REST_PATH = "/rest"


class DemoAgentExecutor(AgentExecutor):
    """Behaviour by message text (see the module docstring). A ``slow`` run parks on an event;
    the SDK's ``tasks/cancel`` calls :meth:`cancel` (which publishes CANCELED) and then cancels
    the parked ``execute()`` itself."""

    def __init__(self) -> None:
        self._parked: dict[str, asyncio.Event] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None  # the SDK sets it for message/send and message/stream
        text = get_message_text(context.message).strip()
        task = context.current_task
        if task is None and text == "direct":
            await event_queue.enqueue_event(new_agent_text_message(DIRECT_REPLY, context_id=context.context_id))
            return
        if task is None:
            task = new_task(context.message)  # carries the ids the request context assigned
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)

        def say(words: str):
            return updater.new_agent_message([Part(root=TextPart(text=words))])

        if task.status.state == TaskState.input_required:
            await updater.start_work(say("got the date"))
            await updater.add_artifact([Part(root=TextPart(text=f"booked for {text}"))], name=ARTIFACT_NAME,
                                       last_chunk=True)
            await updater.complete()
        elif text.startswith("slow"):
            await updater.start_work(say("working slowly until cancelled"))
            parked = self._parked.setdefault(task.id, asyncio.Event())
            try:
                await parked.wait()
            except asyncio.CancelledError:
                # tasks/cancel: cancel() published CANCELED on the queue it was handed, a tap of
                # this one that no resubscriber shares; say it here too, so theirs end with it.
                await updater.cancel(say("cancelled"))
                raise
            finally:
                self._parked.pop(task.id, None)
        elif text.startswith("ask"):
            await updater.requires_input(say(ASK_QUESTION), final=True)
        elif text.startswith("fail"):
            await updater.start_work(say("about to fail"))
            await updater.failed(say(FAIL_MESSAGE))
        else:
            await updater.start_work(say("working"))
            await updater.add_artifact([Part(root=TextPart(text=f"hello {text}"))], name=ARTIFACT_NAME,
                                       last_chunk=True)
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([Part(root=TextPart(text="cancelled"))]))
        if (parked := self._parked.get(context.task_id)) is not None:
            parked.set()


class CountingQueueManager(InMemoryQueueManager):
    """The SDK's queue manager, counting the taps of a live task's queue (see the module
    docstring); a tap's child queue is registered before it returns."""

    def __init__(self) -> None:
        super().__init__()
        self.joins: dict[str, int] = {}

    async def tap(self, task_id: str) -> EventQueue | None:
        queue = await super().tap(task_id)
        if queue is not None:
            self.joins[task_id] = self.joins.get(task_id, 0) + 1
        return queue


def build_agent_card(base: str) -> AgentCard:
    return AgentCard(
        protocol_version="0.3.0",
        name="a2a-gateway Python 0.3 demo worker",
        description=('Echo agent on a2a-sdk 0.3 for a2a-gateway tests. The message text selects the behaviour: '
                     '"slow..." waits until cancelled, "ask..." asks for input, "fail..." fails, "direct" '
                     'answers with a message, anything else completes with "hello <text>".'),
        version="0.1.0",
        provider=AgentProvider(organization="a2a-gateway", url="https://github.com/a2aproject"),
        url=f"{base}/",
        preferred_transport=TransportProtocol.jsonrpc,
        additional_interfaces=[
            AgentInterface(url=f"{base}/", transport=TransportProtocol.jsonrpc),
            AgentInterface(url=f"{base}{REST_PATH}", transport=TransportProtocol.http_json),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description='Replies "hello <text>"; see the card description.',
                           tags=["demo", "echo"], examples=["hi", "slow task", "ask for a date", "direct"])],
    )


def build_app(base: str) -> Starlette:
    card = build_agent_card(base)
    queues = CountingQueueManager()
    handler = DefaultRequestHandler(agent_executor=DemoAgentExecutor(), task_store=InMemoryTaskStore(),
                                    queue_manager=queues)
    jsonrpc = A2AStarletteApplication(agent_card=card, http_handler=handler)
    rest = A2ARESTFastAPIApplication(agent_card=card, http_handler=handler).build()

    async def joins(request: Request) -> JSONResponse:
        task_id = request.path_params["task_id"]
        return JSONResponse({"taskId": task_id, "joins": queues.joins.get(task_id, 0)})

    return Starlette(routes=[*jsonrpc.routes(), Route("/_peer/joins/{task_id}", joins, methods=["GET"]),
                             Mount(REST_PATH, app=rest)])


def exit_when_stdin_closes() -> None:
    """When stdin is a pipe or socket, leave as soon as the other end closes it."""
    mode = os.fstat(0).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return

    def watch() -> None:
        while sys.stdin.buffer.read1(65536):
            pass
        os._exit(0)

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()


async def serve(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    base = f"http://[{host}]:{bound}" if ":" in host else f"http://{host}:{bound}"
    config = uvicorn.Config(build_app(base), log_level="warning", timeout_graceful_shutdown=1, lifespan="off")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving  # raises what stopped it
            return
        await asyncio.sleep(0.01)
    print(json.dumps({"type": "ready", "url": base}), flush=True)
    await serving


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    exit_when_stdin_closes()
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
