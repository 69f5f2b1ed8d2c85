"""Demo A2A worker: a real a2a-sdk 1.3.0 agent used as the demo and test upstream.

The app serves, on one origin:

* ``GET /.well-known/agent-card.json`` -- the agent card (the SDK serves a
  hybrid v1.0 + v0.3 card, with a weak ``ETag``);
* ``POST /`` -- JSON-RPC, v1.0 methods (``SendMessage``...) and, through the
  SDK's compat adapter, v0.3 methods (``message/send``...);
* ``/rest/...`` -- HTTP+JSON: v1.0 routes (``/rest/message:send``...) and the
  v0.3 compat routes (``/rest/v1/message:send``...).

What the agent does is chosen by the text of the user's message, so tests can
steer it:

===================  =========================================================
message text         behaviour
===================  =========================================================
anything else        ``Task`` (SUBMITTED) -> status WORKING (with an agent
                     message) -> artifact ``"hello <text>"`` -> COMPLETED
``slow...``          ``Task`` -> WORKING, then waits until the task is
                     cancelled; ``CancelTask`` ends it as CANCELED. Use it to
                     test CancelTask and SubscribeToTask on a live task.
``ask...``           ``Task`` -> INPUT_REQUIRED with the agent message
                     ``"Which date?"``. A follow-up message carrying the same
                     ``taskId`` completes the task with an artifact
                     ``"booked for <follow-up text>"``.
``fail...``          ``Task`` -> WORKING, then ``execute()`` raises; the SDK
                     marks the task FAILED and reports an error (on v1.0
                     JSON-RPC streams as an ``event: error`` SSE frame)
``direct``           a direct ``Message`` reply (``"direct reply"``), no task
===================  =========================================================

Run it with ``python demo/worker.py`` or ``python -m demo.worker``
(``--help`` for options; ``--push`` declares ``capabilities.pushNotifications``
and posts each task's updates to the webhooks registered for it, to try the
gateway's push relay), or build the ASGI app in-process with
:func:`build_worker_app`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

from collections.abc import AsyncIterator

import httpx
import uvicorn

from starlette.applications import Starlette

from a2a.helpers import (
    get_message_text,
    new_task_from_user_message,
    new_text_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    Part,
    Role,
    TaskState,
)


__all__ = [
    'ARTIFACT_NAME',
    'ASK_QUESTION',
    'DIRECT_REPLY',
    'FAIL_MESSAGE',
    'DemoAgentExecutor',
    'build_agent_card',
    'build_worker_app',
    'main',
]

logger = logging.getLogger('demo.worker')

#: Name of the artifact every completed task carries.
ARTIFACT_NAME = 'result'
#: The agent message sent with INPUT_REQUIRED by ``ask`` tasks.
ASK_QUESTION = 'Which date?'
#: Text of the direct Message sent for ``direct``.
DIRECT_REPLY = 'direct reply'
#: Message of the exception ``fail`` tasks raise.
FAIL_MESSAGE = 'demo failure requested'

#: Seconds uvicorn waits for open connections (e.g. SSE streams) on shutdown.
GRACEFUL_SHUTDOWN_SECONDS = 2


def _plain_text(text: str) -> Part:
    return new_text_part(text, media_type='text/plain')


class DemoAgentExecutor(AgentExecutor):
    """Agent whose behaviour is chosen by the user's message text.

    See the module docstring for the table of behaviours. ``slow`` tasks park
    on a per-task :class:`asyncio.Event`; they end either when the SDK cancels
    the ``execute()`` coroutine (what ``DefaultRequestHandler`` does right
    after calling :meth:`cancel`) or when :meth:`cancel` sets the event. The
    event is always removed again, so nothing outlives the task.
    """

    def __init__(self) -> None:
        """Create the executor with no parked tasks."""
        self._cancel_events: dict[str, asyncio.Event] = {}

    @property
    def parked_task_ids(self) -> frozenset[str]:
        """Ids of ``slow`` tasks currently waiting to be cancelled."""
        return frozenset(self._cancel_events)

    async def execute(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        """Run one request (a new message or a follow-up) for a task.

        Args:
            context: The SDK request context; ``context.message`` is the
                user's message and ``context.current_task`` the stored task
                when the message continues an existing one.
            event_queue: Queue the Task/Message and update events go to.
        """
        if context.message is None:  # the SDK always sets it for SendMessage
            raise ValueError('execute() called without a message')
        text = get_message_text(context.message).strip()
        task = context.current_task

        if task is None and text == 'direct':
            # Message-only interaction: exactly one Message and no Task.
            await event_queue.enqueue_event(
                new_text_message(
                    DIRECT_REPLY,
                    context_id=context.context_id,
                    role=Role.ROLE_AGENT,
                )
            )
            return

        if task is None:
            # The request context has already assigned task and context ids
            # to the message, so the Task carries exactly those ids.
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(
            event_queue=event_queue,
            task_id=task.id,
            context_id=task.context_id,
        )

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            # Follow-up to an ``ask`` task: the message is the answer.
            await updater.start_work(
                updater.new_agent_message([new_text_part('got the date')])
            )
            await updater.add_artifact(
                parts=[_plain_text(f'booked for {text}')], name=ARTIFACT_NAME
            )
            await updater.complete()
        elif text.startswith('slow'):
            await updater.start_work(
                updater.new_agent_message(
                    [new_text_part('working slowly until cancelled')]
                )
            )
            # Returns once cancelled; cancel() has already published the
            # terminal CANCELED status, so nothing more is sent from here.
            await self._wait_until_cancelled(task.id)
        elif text.startswith('ask'):
            await updater.requires_input(
                updater.new_agent_message([new_text_part(ASK_QUESTION)])
            )
        elif text.startswith('fail'):
            await updater.start_work(
                updater.new_agent_message([new_text_part('about to fail')])
            )
            # The SDK marks the task FAILED and reports the error to the
            # caller (JSON-RPC v1.0 streams: an ``event: error`` SSE frame).
            raise RuntimeError(FAIL_MESSAGE)
        else:
            await updater.start_work(
                updater.new_agent_message([new_text_part('working')])
            )
            await updater.add_artifact(
                parts=[_plain_text(f'hello {text}')], name=ARTIFACT_NAME
            )
            await updater.complete()

    async def cancel(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        """Publish CANCELED for the task and release a parked ``slow`` run.

        ``DefaultRequestHandler`` calls this while the task's event queue is
        still open and cancels the running ``execute()`` afterwards, so the
        CANCELED status written here is the state clients observe (in the
        CancelTask result, in GetTask and on open streams).

        Args:
            context: Request context naming the task to cancel.
            event_queue: The task's event queue (the same one ``execute()``
                writes to).
        """
        task_id = context.task_id or ''
        context_id = context.context_id or (
            context.current_task.context_id if context.current_task else ''
        )
        updater = TaskUpdater(
            event_queue=event_queue, task_id=task_id, context_id=context_id
        )
        await updater.cancel(
            updater.new_agent_message([new_text_part('cancelled')])
        )
        event = self._cancel_events.get(task_id)
        if event is not None:
            event.set()

    async def _wait_until_cancelled(self, task_id: str) -> None:
        """Block until :meth:`cancel` runs for ``task_id`` or we are cancelled."""
        event = asyncio.Event()
        self._cancel_events[task_id] = event
        try:
            await event.wait()
        finally:
            self._cancel_events.pop(task_id, None)


def _with_trailing_slash(url: str) -> str:
    return url if url.endswith('/') else url + '/'


def build_agent_card(public_url: str) -> AgentCard:
    """Build the worker's agent card.

    Args:
        public_url: Base URL clients should use, e.g. ``http://127.0.0.1:9999/``
            (a trailing slash is added when missing).

    Returns:
        A card advertising, in this order: JSON-RPC 1.0 at ``public_url``,
        JSON-RPC 0.3 at ``public_url`` (same endpoint, v0.3 methods) and
        HTTP+JSON 1.0 at ``public_url + "rest"``; streaming enabled; one
        skill ``echo``.
    """
    base = _with_trailing_slash(public_url)
    return AgentCard(
        name='a2a-gateway demo worker',
        description=(
            'Echo agent for a2a-gateway demos and tests. The message text '
            'selects the behaviour: "slow..." waits until cancelled, '
            '"ask..." asks for input, "direct" answers with a message, '
            'anything else completes with "hello <text>".'
        ),
        version='0.1.0',
        provider=AgentProvider(
            organization='a2a-gateway', url='https://github.com/a2aproject'
        ),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False
        ),
        supported_interfaces=[
            AgentInterface(
                protocol_binding='JSONRPC', url=base, protocol_version='1.0'
            ),
            AgentInterface(
                protocol_binding='JSONRPC', url=base, protocol_version='0.3'
            ),
            AgentInterface(
                protocol_binding='HTTP+JSON',
                url=base + 'rest',
                protocol_version='1.0',
            ),
        ],
        skills=[
            AgentSkill(
                id='echo',
                name='Echo',
                description='Replies "hello <text>"; see the card description.',
                tags=['demo', 'echo'],
                examples=['hi', 'slow task', 'ask for a date', 'direct'],
            )
        ],
    )


def build_worker_app(public_url: str, push: bool = False) -> Starlette:
    """Build the worker ASGI app.

    Args:
        public_url: Base URL advertised in the agent card (see
            :func:`build_agent_card`). It only affects the card; the routes
            are the same whatever URL is advertised.
        push: also serve push notifications: the card declares
            ``capabilities.pushNotifications`` and the SDK's in-memory config
            store and sender post every task update to each registered
            webhook (an httpx client that ignores proxy settings, 5 s
            timeout). Off by default, as before.

    Returns:
        A Starlette app with the agent card, JSON-RPC at ``/`` (v1.0 and
        v0.3) and REST under ``/rest`` (v1.0 and v0.3 ``/rest/v1/...``).
        ``app.state.executor`` and ``app.state.request_handler`` expose the
        executor and handler for tests (with ``push``, ``app.state.push_store``
        the push config store). On shutdown the handler is closed,
        which cancels any task still running or parked.
    """
    card = build_agent_card(public_url)
    executor = DemoAgentExecutor()
    http = httpx.AsyncClient(trust_env=False, timeout=5.0) if push else None
    if push:
        card.capabilities.push_notifications = True
        store = InMemoryPushNotificationConfigStore()
        handler = DefaultRequestHandler(
            agent_executor=executor,
            task_store=InMemoryTaskStore(),
            agent_card=card,
            push_config_store=store,
            push_sender=BasePushNotificationSender(http, store),
        )
    else:
        handler = DefaultRequestHandler(
            agent_executor=executor,
            task_store=InMemoryTaskStore(),
            agent_card=card,
        )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await handler.aclose()
            if http is not None:
                await http.aclose()

    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, '/', enable_v0_3_compat=True),
        *create_rest_routes(
            handler, enable_v0_3_compat=True, path_prefix='/rest'
        ),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.agent_card = card
    app.state.executor = executor
    app.state.request_handler = handler
    if push:
        app.state.push_store = store
    return app


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            'Run the demo A2A worker (a2a-sdk 1.3.0): JSON-RPC v1.0+v0.3 at '
            '/, REST at /rest, card at /.well-known/agent-card.json.'
        ),
    )
    parser.add_argument(
        '--host', default='127.0.0.1', help='bind address (default: %(default)s)'
    )
    parser.add_argument(
        '--port', type=int, default=9999, help='bind port (default: %(default)s)'
    )
    parser.add_argument(
        '--public-url',
        default=None,
        help=(
            'base URL advertised in the agent card '
            '(default: http://HOST:PORT/)'
        ),
    )
    parser.add_argument(
        '--log-level',
        default='info',
        choices=['critical', 'error', 'warning', 'info', 'debug'],
        help='uvicorn log level (default: %(default)s)',
    )
    parser.add_argument(
        '--push',
        action='store_true',
        help=(
            'declare capabilities.pushNotifications and post task updates '
            'to registered webhooks (to try the gateway\'s push relay)'
        ),
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: serve the worker with uvicorn.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when None.
    """
    args = _parse_args(argv)
    public_url = args.public_url or f'http://{args.host}:{args.port}/'
    app = build_worker_app(public_url, push=args.push)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        # Open SSE streams (e.g. SubscribeToTask on an input-required task)
        # must not keep the process alive for long after Ctrl-C / SIGTERM.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    uvicorn.Server(config).run()


if __name__ == '__main__':
    main()
