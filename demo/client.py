"""Demo A2A client: drives real a2a-sdk 1.3.0 clients against a base URL.

The base URL is normally the gateway sitting in front of :mod:`demo.worker`,
but pointing it straight at the worker works too. :func:`run_demo` runs these
steps and checks each result:

a. blocking ``SendMessage "hi"`` (v1.0, non-streaming client) -> COMPLETED,
   artifact ``"hello hi"``;
b. ``SendStreamingMessage "stream me"`` -> task SUBMITTED, status WORKING,
   artifact, status COMPLETED, in that order;
c. ``GetTask`` of the task from (a) -> COMPLETED;
d. ``SendMessage "slow ..."`` with ``returnImmediately``, poll ``GetTask``
   until WORKING, then ``CancelTask`` -> CANCELED;
e. ``SendMessage "ask ..."`` -> INPUT_REQUIRED, ``SubscribeToTask`` and print
   the first event (the Task snapshot), close the stream, then answer the
   question on the same task -> COMPLETED;
f. the same send + get with a **v0.3** client, checking on the wire that it
   sends ``message/send`` / ``tasks/get`` with ``A2A-Version: 0.3`` and gets
   the v0.3 state ``completed`` back;
g. the **REST** (HTTP+JSON) binding: send + get over ``.../rest``, then a
   follow-up message to that completed task, which must fail with
   ``UnsupportedOperationError`` (through the gateway it is the gateway's own
   refusal: its message says a retry must start a new task).

Why the card URLs are rewritten
-------------------------------
``create_client(url)`` fetches ``<url>/.well-known/agent-card.json`` and then
talks to whatever URLs the card's ``supportedInterfaces`` name. The worker's
card names the *worker's own* address, so a client started against a proxy
would fetch the card through the proxy and then bypass it for every call
(or fail, when the worker is not reachable directly). Unless the proxy
rewrites the card, that is. This client therefore never trusts card URLs: it
fetches the card from ``base_url`` itself, and :func:`rewrite_card_urls`
re-roots every HTTP interface URL onto ``base_url``, keeping the path suffix
below the agent root (``http://worker:9999/rest`` becomes
``<base_url>rest``). The clients are then built from the rewritten card, so
every request goes to ``base_url``. A card that the gateway already rewrote
to its own URLs passes through unchanged.

How the v0.3 client is built
----------------------------
``ClientFactory`` picks the interface per binding with
``_find_best_interface``, which always prefers ``protocolVersion`` 1.0 and
then re-resolves the interface *by URL*. The worker's JSON-RPC 1.0 and 0.3
interfaces share one URL, so any card that still lists the 1.0 interface
yields a v1.0 transport. :func:`restrict_card_to_version` returns a copy of
the card that lists only the 0.3 JSON-RPC interface; ``create_client`` on that
copy builds ``CompatJsonRpcTransport``, which sends v0.3 method names and
shapes and overrides the ``A2A-Version`` header to ``0.3``.

Run it with ``python demo/client.py --url http://127.0.0.1:9999/`` or
``python -m demo.client --url ...``; the exit code is 1 if any step failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from a2a.client import (
    A2ACardResolver,
    Client,
    ClientConfig,
    create_client,
)
from a2a.compat.v0_3.versions import is_legacy_version
from a2a.helpers import get_artifact_text, new_text_message
from a2a.utils.errors import UnsupportedOperationError
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)


__all__ = [
    'DemoFailed',
    'WireRecord',
    'WireRecorder',
    'fetch_card',
    'main',
    'restrict_card_to_version',
    'rewrite_card_urls',
    'run_demo',
]

#: Bindings whose interface URLs are HTTP URLs that can be re-rooted.
HTTP_BINDINGS = frozenset({'JSONRPC', 'HTTP+JSON'})

#: How long step (d) waits for the slow task to reach WORKING.
WORKING_WAIT_SECONDS = 5.0

#: Upper bound for any single step, so a misbehaving proxy cannot hang the demo.
STEP_TIMEOUT_SECONDS = 30.0

_T = TypeVar('_T')


class DemoFailed(Exception):
    """Raised by :func:`run_demo` when at least one step failed.

    Attributes:
        lines: Every line the demo produced, failures included.
        failures: Labels of the steps that failed, e.g. ``['d', 'f']``.
    """

    def __init__(self, lines: list[str], failures: list[str]) -> None:
        """Record the demo output and the failed step labels."""
        super().__init__(f'demo steps failed: {", ".join(failures)}')
        self.lines = lines
        self.failures = failures


class _StepError(Exception):
    """A step's result was not what the demo expects."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise _StepError(message)


# --------------------------------------------------------------------------
# Wire recording
# --------------------------------------------------------------------------


@dataclass
class WireRecord:
    """One HTTP exchange as seen by the shared httpx client.

    Attributes:
        http_method: ``GET`` / ``POST``.
        url: Request URL.
        headers: Request headers (lower-case names).
        rpc_method: JSON-RPC ``method`` of the request body, if any.
        status: HTTP status of the response.
        content_type: Response ``Content-Type``.
        body: Parsed response body for ``application/json`` responses (SSE
            bodies are left to the SDK and not recorded).
    """

    http_method: str
    url: str
    headers: dict[str, str]
    rpc_method: str | None = None
    status: int | None = None
    content_type: str | None = None
    body: Any = None


@dataclass
class WireRecorder:
    """httpx event hooks that record every request made by the demo."""

    records: list[WireRecord] = field(default_factory=list)

    def hooks(self) -> dict[str, list[Callable[..., Awaitable[None]]]]:
        """Event hooks to pass to :class:`httpx.AsyncClient`."""
        return {'request': [self._on_request], 'response': [self._on_response]}

    async def _on_request(self, request: httpx.Request) -> None:
        rpc_method = None
        if request.method == 'POST' and request.content:
            with contextlib.suppress(ValueError):
                payload = json.loads(request.content)
                if isinstance(payload, dict):
                    rpc_method = payload.get('method')
        record = WireRecord(
            http_method=request.method,
            url=str(request.url),
            headers={k.lower(): v for k, v in request.headers.items()},
            rpc_method=rpc_method,
        )
        request.extensions['demo_wire_record'] = record
        self.records.append(record)

    async def _on_response(self, response: httpx.Response) -> None:
        record = response.request.extensions.get('demo_wire_record')
        if record is None:
            return
        record.status = response.status_code
        record.content_type = response.headers.get('content-type', '')
        # Only plain JSON bodies are read here: reading an SSE body in a hook
        # would buffer the whole (possibly endless) stream.
        if record.content_type.startswith(('application/json', 'application/a2a+json')):
            await response.aread()
            with contextlib.suppress(ValueError):
                record.body = response.json()


# --------------------------------------------------------------------------
# Agent card handling
# --------------------------------------------------------------------------


async def fetch_card(http: httpx.AsyncClient, base_url: str) -> AgentCard:
    """Fetch and parse ``<base_url>/.well-known/agent-card.json``.

    The SDK parser accepts v1.0 cards, the SDK's hybrid cards and legacy v0.3
    cards (which it maps onto ``supportedInterfaces``).
    """
    return await A2ACardResolver(http, base_url).get_agent_card()


def _with_trailing_slash(url: str) -> str:
    return url if url.endswith('/') else url + '/'


def rewrite_card_urls(card: AgentCard, base_url: str) -> AgentCard:
    """Return a copy of ``card`` whose HTTP interfaces all live under ``base_url``.

    The agent root is taken to be the longest common directory (ending in
    ``/``) of the JSON-RPC and HTTP+JSON interface paths; each interface keeps
    its path below that root and gets ``base_url`` in front of it. For the
    demo worker (``http://w:9999/`` and ``http://w:9999/rest``) and base URL
    ``http://gw:8080/agents/echo/`` that yields
    ``http://gw:8080/agents/echo/`` and ``http://gw:8080/agents/echo/rest``.
    Query strings are dropped; other bindings (gRPC's ``host:port``) are left
    alone. See the module docstring for why this is needed.
    """
    base = _with_trailing_slash(base_url)
    rewritten = AgentCard()
    rewritten.CopyFrom(card)
    http_ifaces = [
        iface
        for iface in rewritten.supported_interfaces
        if iface.protocol_binding in HTTP_BINDINGS
    ]
    if not http_ifaces:
        return rewritten
    paths = [urlsplit(iface.url).path or '/' for iface in http_ifaces]
    common = os.path.commonprefix(paths)
    root = common[: common.rfind('/') + 1] or '/'
    for iface, path in zip(http_ifaces, paths, strict=True):
        suffix = path[len(root) :] if path.startswith(root) else path.lstrip('/')
        iface.url = base + suffix
    return rewritten


def restrict_card_to_version(
    card: AgentCard, binding: str, version: str
) -> AgentCard:
    """Return a copy of ``card`` listing only ``binding`` interfaces of one major.minor.

    ``version`` ``'0.3'`` keeps the interfaces the SDK treats as legacy
    (``0.3 <= v < 1.0``); any other value keeps exact ``protocolVersion``
    matches. ``ClientFactory`` then has no choice but that interface, which is
    how a v0.3 client is obtained from a card that also offers v1.0.

    Raises:
        ValueError: The card has no such interface.
    """
    if is_legacy_version(version):
        keep = lambda v: is_legacy_version(v)  # noqa: E731
    else:
        keep = lambda v: v == version  # noqa: E731
    chosen = [
        iface
        for iface in card.supported_interfaces
        if iface.protocol_binding == binding and keep(iface.protocol_version)
    ]
    if not chosen:
        raise ValueError(f'agent card has no {binding} {version} interface')
    restricted = AgentCard()
    restricted.CopyFrom(card)
    del restricted.supported_interfaces[:]
    restricted.supported_interfaces.extend(chosen)
    return restricted


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------


def _user_message(
    text: str, *, task_id: str | None = None, context_id: str | None = None
) -> SendMessageRequest:
    # new_text_message defaults to ROLE_AGENT; the SDK server would then
    # refuse to create a task from it.
    return SendMessageRequest(
        message=new_text_message(
            text, task_id=task_id, context_id=context_id, role=Role.ROLE_USER
        )
    )


def _state(task: Task) -> str:
    return TaskState.Name(task.status.state)


def _short_state(state: int) -> str:
    return TaskState.Name(state).removeprefix('TASK_STATE_')


def _artifact_texts(task: Task) -> list[str]:
    return [get_artifact_text(a) for a in task.artifacts]


def _describe(event: StreamResponse) -> str:
    kind = event.WhichOneof('payload')
    if kind == 'task':
        return f'task {_short_state(event.task.status.state)}'
    if kind == 'status_update':
        return f'status_update {_short_state(event.status_update.status.state)}'
    if kind == 'artifact_update':
        text = get_artifact_text(event.artifact_update.artifact)
        return f'artifact_update {text!r}'
    if kind == 'message':
        return 'message'
    return str(kind)


async def _single_task(client: Client, request: SendMessageRequest) -> Task:
    """Send with a non-streaming client and return the Task it answers with."""
    responses = [r async for r in client.send_message(request)]
    _expect(len(responses) == 1, f'expected 1 response, got {len(responses)}')
    _expect(
        responses[0].HasField('task'),
        f'expected a task, got {responses[0].WhichOneof("payload")}',
    )
    return responses[0].task


# --------------------------------------------------------------------------
# The demo
# --------------------------------------------------------------------------


class _Demo:
    """State shared by the demo steps: output lines, failures, wire log."""

    def __init__(self, base_url: str, echo: bool) -> None:
        self.base_url = base_url
        self.echo = echo
        self.lines: list[str] = []
        self.failures: list[str] = []
        self.wire = WireRecorder()

    def say(self, line: str) -> None:
        self.lines.append(line)
        if self.echo:
            print(line, flush=True)

    async def step(
        self, label: str, title: str, body: Callable[[], Awaitable[_T]]
    ) -> _T | None:
        self.say(f'({label}) {title}')
        try:
            result = await asyncio.wait_for(body(), STEP_TIMEOUT_SECONDS)
        except Exception as e:  # noqa: BLE001 - report and go on
            self.failures.append(label)
            reason = str(e) or 'no details'
            self.say(f'    FAIL: {type(e).__name__}: {reason}')
            return None
        self.say('    ok')
        return result

    def wire_lines_since(self, start: int) -> list[str]:
        lines = []
        for rec in self.wire.records[start:]:
            state = None
            body = rec.body if isinstance(rec.body, dict) else {}
            result = body.get('result', body)  # JSON-RPC envelope, or a bare REST answer
            if isinstance(result, dict):
                task = result.get('task', result)  # {"task": …} (SendMessage) or a Task
                if isinstance(task, dict) and isinstance(task.get('status'), dict):
                    state = task['status'].get('state')
            lines.append(
                f'    wire: {rec.http_method} {urlsplit(rec.url).path} '
                f'method={rec.rpc_method} '
                f'A2A-Version={rec.headers.get("a2a-version")} '
                f'-> {rec.status} state={state}'
            )
        return lines


async def run_demo(
    base_url: str,
    *,
    echo: bool = True,
    task_ids: dict[str, str] | None = None,
) -> list[str]:
    """Run demo steps (a)-(f) against ``base_url`` and return the output lines.

    Args:
        base_url: Agent root URL, normally the gateway's URL for the demo
            worker, e.g. ``http://127.0.0.1:8080/``. Every request goes here,
            whatever URLs the agent card advertises.
        echo: Also print each line as it is produced.
        task_ids: When given, ``task_ids['a']`` is set to the id of the
            COMPLETED task of step (a) as soon as that step passes (so it is
            there even when a later step fails); :mod:`demo.run` reuses it.

    Returns:
        The lines produced (also printed when ``echo`` is true).

    Raises:
        DemoFailed: One or more steps failed; the exception carries the
            lines and the failed step labels.
    """
    demo = _Demo(base_url, echo)
    timeout = httpx.Timeout(30.0, connect=5.0)
    async with httpx.AsyncClient(
        timeout=timeout, event_hooks=demo.wire.hooks()
    ) as http:
        card = await demo.step(
            'card',
            f'fetch agent card from {base_url}',
            lambda: _step_card(demo, http),
        )
        if card is None:
            demo.say('FAILED steps: card (nothing else was tried)')
            raise DemoFailed(demo.lines, demo.failures)

        # One shared httpx client for all SDK clients, so the recorder sees
        # everything; the SDK does not close a client it was given.
        blocking = await create_client(
            card,
            ClientConfig(
                streaming=False,
                supported_protocol_bindings=['JSONRPC'],
                httpx_client=http,
            ),
        )
        streaming = await create_client(
            card,
            ClientConfig(
                streaming=True,
                supported_protocol_bindings=['JSONRPC'],
                httpx_client=http,
            ),
        )
        try:
            task_a = await demo.step(
                'a',
                'SendMessage "hi" (v1.0, blocking)',
                lambda: _step_a(demo, blocking),
            )
            await demo.step(
                'b',
                'SendStreamingMessage "stream me" (v1.0)',
                lambda: _step_b(demo, streaming),
            )
            if task_a is not None:
                task_a_id = task_a.id
                if task_ids is not None:
                    task_ids['a'] = task_a_id
                await demo.step(
                    'c',
                    'GetTask of the task from (a)',
                    lambda: _step_c(demo, blocking, task_a_id),
                )
            else:
                demo.failures.append('c')
                demo.say('(c) GetTask skipped: step (a) failed')
            await demo.step(
                'd',
                'SendMessage "slow" (returnImmediately) then CancelTask',
                lambda: _step_d(demo, blocking),
            )
            await demo.step(
                'e',
                'SubscribeToTask on an input-required "ask" task',
                lambda: _step_e(demo, blocking, streaming),
            )
            await demo.step(
                'f',
                'SendMessage + GetTask with a v0.3 client',
                lambda: _step_f(demo, http, card),
            )
            await demo.step(
                'g',
                'SendMessage + GetTask over REST, then a refused follow-up',
                lambda: _step_g(demo, http, card),
            )
        finally:
            await blocking.close()
            await streaming.close()

    if demo.failures:
        demo.say(f'FAILED steps: {", ".join(demo.failures)}')
        raise DemoFailed(demo.lines, demo.failures)
    demo.say('all steps passed')
    return demo.lines


async def _step_card(demo: _Demo, http: httpx.AsyncClient) -> AgentCard:
    fetched = await fetch_card(http, demo.base_url)
    for iface in fetched.supported_interfaces:
        demo.say(
            f'    card advertises {iface.protocol_binding} '
            f'{iface.protocol_version} at {iface.url}'
        )
    card = rewrite_card_urls(fetched, demo.base_url)
    for iface in card.supported_interfaces:
        demo.say(
            f'    using {iface.protocol_binding} '
            f'{iface.protocol_version} at {iface.url}'
        )
    return card


async def _step_a(demo: _Demo, client: Client) -> Task:
    start = len(demo.wire.records)
    task = await _single_task(client, _user_message('hi'))
    texts = _artifact_texts(task)
    demo.say(f'    task id: {task.id}')
    demo.say(f'    state: {_state(task)}')
    demo.say(f'    artifact: {texts}')
    rec = demo.wire.records[start]
    demo.say(
        f'    request headers: A2A-Version={rec.headers.get("a2a-version")} '
        f'content-type={rec.headers.get("content-type")} '
        f'method={rec.rpc_method}'
    )
    _expect(task.status.state == TaskState.TASK_STATE_COMPLETED, 'not COMPLETED')
    _expect(texts == ['hello hi'], f'unexpected artifact {texts}')
    _expect(rec.rpc_method == 'SendMessage', 'not a v1.0 SendMessage call')
    return task


async def _step_b(demo: _Demo, client: Client) -> None:
    seen: list[str] = []
    artifacts: list[str] = []
    async for event in client.send_message(_user_message('stream me')):
        demo.say(f'    {len(seen) + 1}. {_describe(event)}')
        kind = event.WhichOneof('payload')
        if kind == 'task':
            seen.append(f'task {_short_state(event.task.status.state)}')
        elif kind == 'status_update':
            state = _short_state(event.status_update.status.state)
            seen.append(f'status_update {state}')
        elif kind == 'artifact_update':
            seen.append('artifact_update')
            artifacts.append(get_artifact_text(event.artifact_update.artifact))
        else:
            seen.append(str(kind))
    expected = [
        'task SUBMITTED',
        'status_update WORKING',
        'artifact_update',
        'status_update COMPLETED',
    ]
    _expect(seen == expected, f'unexpected event order {seen}')
    _expect(artifacts == ['hello stream me'], f'unexpected artifact {artifacts}')


async def _step_c(demo: _Demo, client: Client, task_id: str) -> None:
    task = await client.get_task(GetTaskRequest(id=task_id, history_length=1))
    texts = _artifact_texts(task)
    demo.say(f'    task {task.id}: {_state(task)}, artifact {texts}')
    _expect(task.id == task_id, 'GetTask returned another task')
    _expect(task.status.state == TaskState.TASK_STATE_COMPLETED, 'not COMPLETED')
    _expect(texts == ['hello hi'], f'unexpected artifact {texts}')


async def _step_d(demo: _Demo, client: Client) -> None:
    request = _user_message('slow demo')
    request.configuration.CopyFrom(
        SendMessageConfiguration(return_immediately=True)
    )
    task = await _single_task(client, request)
    demo.say(f'    returned immediately: {task.id} {_state(task)}')

    loop = asyncio.get_running_loop()
    deadline = loop.time() + WORKING_WAIT_SECONDS
    while task.status.state != TaskState.TASK_STATE_WORKING:
        _expect(loop.time() < deadline, f'never reached WORKING ({_state(task)})')
        await asyncio.sleep(0.05)
        task = await client.get_task(GetTaskRequest(id=task.id))
    demo.say(f'    GetTask: {_state(task)}')

    cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
    demo.say(f'    CancelTask -> {_state(cancelled)}')
    after = await client.get_task(GetTaskRequest(id=task.id))
    demo.say(f'    GetTask after cancel: {_state(after)}')
    for state in (cancelled.status.state, after.status.state):
        _expect(state == TaskState.TASK_STATE_CANCELED, 'not CANCELED')


async def _first_event(stream: AsyncIterator[StreamResponse]) -> StreamResponse:
    """Return the first event of ``stream``, then close the stream.

    Closing the SDK's async generator closes the HTTP response, so the
    server sees the subscriber go away.
    """
    try:
        async for event in stream:
            return event
    finally:
        aclose = getattr(stream, 'aclose', None)
        if aclose is not None:
            await aclose()
    raise _StepError('stream ended without an event')


async def _step_e(demo: _Demo, blocking: Client, streaming: Client) -> None:
    # A blocking send returns once the task is interrupted (INPUT_REQUIRED).
    task = await _single_task(blocking, _user_message('ask for a date'))
    question = (
        [p.text for p in task.status.message.parts]
        if task.status.HasField('message')
        else []
    )
    demo.say(f'    task {task.id}: {_state(task)}, agent asks {question}')
    _expect(
        task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED,
        'not INPUT_REQUIRED',
    )

    # SubscribeToTask stays open on an interrupted task; take the first
    # event (the current Task, per spec) and close the stream.
    first = await _first_event(
        streaming.subscribe(SubscribeToTaskRequest(id=task.id))
    )
    demo.say(f'    SubscribeToTask first event: {_describe(first)} (closed)')
    _expect(first.HasField('task'), 'first event is not a Task')
    _expect(first.task.id == task.id, 'snapshot of another task')
    _expect(
        first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED,
        'snapshot not INPUT_REQUIRED',
    )

    # Answer the question so the task does not stay parked in the worker.
    done = await _single_task(
        blocking,
        _user_message('tomorrow', task_id=task.id, context_id=task.context_id),
    )
    texts = _artifact_texts(done)
    demo.say(f'    follow-up "tomorrow" -> {_state(done)}, artifact {texts}')
    _expect(done.status.state == TaskState.TASK_STATE_COMPLETED, 'not COMPLETED')
    _expect(texts == ['booked for tomorrow'], f'unexpected artifact {texts}')


async def _step_f(
    demo: _Demo, http: httpx.AsyncClient, card: AgentCard
) -> None:
    v03_card = restrict_card_to_version(card, 'JSONRPC', '0.3')
    iface = v03_card.supported_interfaces[0]
    demo.say(
        f'    v0.3 card interface: JSONRPC {iface.protocol_version} at {iface.url}'
    )
    client = await create_client(
        v03_card,
        ClientConfig(
            streaming=False,
            supported_protocol_bindings=['JSONRPC'],
            httpx_client=http,
        ),
    )
    start = len(demo.wire.records)
    try:
        demo.say(f'    transport: {type(client._transport).__name__}')  # noqa: SLF001
        task = await _single_task(client, _user_message('hi'))
        demo.say(f'    send: task {task.id} {_state(task)}')
        got = await client.get_task(GetTaskRequest(id=task.id))
        demo.say(f'    get:  task {got.id} {_state(got)}')
    finally:
        await client.close()

    records = demo.wire.records[start:]
    for line in demo.wire_lines_since(start):
        demo.say(line)
    methods = [r.rpc_method for r in records]
    versions = [r.headers.get('a2a-version') for r in records]
    wire_states = [
        (r.body or {}).get('result', {}).get('status', {}).get('state')
        for r in records
    ]
    _expect(methods == ['message/send', 'tasks/get'], f'methods on wire {methods}')
    _expect(all(v == '0.3' for v in versions), f'A2A-Version on wire {versions}')
    _expect(
        wire_states == ['completed', 'completed'],
        f'v0.3 states on wire {wire_states}',
    )
    _expect(task.status.state == TaskState.TASK_STATE_COMPLETED, 'not COMPLETED')
    _expect(got.status.state == TaskState.TASK_STATE_COMPLETED, 'not COMPLETED')


async def _step_g(
    demo: _Demo, http: httpx.AsyncClient, card: AgentCard
) -> None:
    client = await create_client(
        card,
        ClientConfig(
            streaming=False,
            supported_protocol_bindings=['HTTP+JSON'],
            httpx_client=http,
        ),
    )
    start = len(demo.wire.records)
    try:
        task = await _single_task(client, _user_message('over rest'))
        demo.say(f'    send: task {task.id} {_state(task)}')
        got = await client.get_task(GetTaskRequest(id=task.id))
        demo.say(f'    get:  task {got.id} {_state(got)}')
        follow_up = _user_message(
            'one more', task_id=task.id, context_id=task.context_id
        )
        refusal = ''
        try:
            await _single_task(client, follow_up)
        except UnsupportedOperationError as exc:
            refusal = str(exc)
        demo.say(f'    follow-up refused: {refusal or "NOT refused"}')
    finally:
        await client.close()
    for line in demo.wire_lines_since(start):
        demo.say(line)
    paths = [urlsplit(r.url).path for r in demo.wire.records[start:]]
    _expect(
        all(p.endswith(('/rest/message:send', f'/rest/tasks/{task.id}')) for p in paths),
        f'REST paths on wire {paths}',
    )
    _expect(task.status.state == TaskState.TASK_STATE_COMPLETED, 'not COMPLETED')
    _expect(got.status.state == TaskState.TASK_STATE_COMPLETED, 'not COMPLETED')
    _expect(bool(refusal), 'the follow-up to a completed task was not refused')


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
        0 when every step passed, 1 otherwise.
    """
    parser = argparse.ArgumentParser(
        description=(
            'Drive real a2a-sdk clients (v1.0 and v0.3 JSON-RPC, v1.0 REST) through '
            'send, stream, get, cancel and subscribe against an A2A base URL '
            '(normally the gateway in front of demo.worker).'
        ),
    )
    parser.add_argument(
        '--url',
        required=True,
        help='agent base URL; every request goes here, e.g. http://127.0.0.1:8080/',
    )
    args = parser.parse_args(argv)
    try:
        asyncio.run(run_demo(args.url))
    except DemoFailed:
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
