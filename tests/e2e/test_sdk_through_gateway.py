"""A real a2a-sdk client talking ONLY to the gateway, which fronts the real a2a-sdk demo worker.

Both servers are real uvicorn instances on 127.0.0.1 (see ``conftest.py``). Every test checks
what the client got (states, ids, artifacts, event order), and where meaningful what the
gateway counted (``/metrics``, parsed with ``prometheus_client.parser``) and what the worker
actually received (the recording wrapper around the worker app).

Metrics are module-wide (one gateway per module), so assertions are on deltas between a
scrape taken before and one taken after the action under test.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from a2a.client import Client, ClientConfig, create_client
from a2a.helpers import get_artifact_text, get_message_text, new_text_message
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
from a2a.utils.errors import TaskNotCancelableError, UnsupportedOperationError

from tests.fuzz.support import raw_member
from tests.e2e.conftest import TRACE_HEADER, UPSTREAM_NAME, MetricsScrape, SeenRequest, Stack
from tests.support.servers import await_until
from tests.support.sse_frames import parse_sse

REQUESTS = "a2a_gateway_requests_total"
SSE_EVENTS = "a2a_gateway_sse_events_total"
REJECTIONS = "a2a_gateway_local_rejections_total"
TRACKED = "a2a_gateway_tracked_tasks"
STREAM_BOUND = 15.0  # seconds: upper bound for consuming any one stream

COMPLETED = TaskState.TASK_STATE_COMPLETED
WORKING = TaskState.TASK_STATE_WORKING
SUBMITTED = TaskState.TASK_STATE_SUBMITTED
CANCELED = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


# --------------------------------------------------------------------------- helpers


def user_message(
    text: str, *, task_id: str | None = None, context_id: str | None = None
) -> SendMessageRequest:
    # new_text_message defaults to ROLE_AGENT, which the SDK server refuses.
    return SendMessageRequest(
        message=new_text_message(text, task_id=task_id, context_id=context_id, role=Role.ROLE_USER)
    )


async def single_response(client: Client, request: SendMessageRequest) -> StreamResponse:
    responses = [r async for r in client.send_message(request)]
    assert len(responses) == 1, [r.WhichOneof("payload") for r in responses]
    return responses[0]


async def send_for_task(client: Client, request: SendMessageRequest) -> Task:
    response = await single_response(client, request)
    assert response.WhichOneof("payload") == "task", response
    return response.task


def artifact_texts(task: Task) -> list[str]:
    return [get_artifact_text(a) for a in task.artifacts]


def describe(event: StreamResponse) -> tuple[str, str, int | None]:
    """``(kind, task_id, state)`` of one stream event."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        return kind, event.task.id, event.task.status.state
    if kind == "status_update":
        return kind, event.status_update.task_id, event.status_update.status.state
    if kind == "artifact_update":
        return kind, event.artifact_update.task_id, None
    return str(kind), "", None


async def collect(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    """Consume a whole stream (it must end by itself within STREAM_BOUND seconds)."""
    async with asyncio.timeout(STREAM_BOUND):
        return [event async for event in stream]


def delta(before: MetricsScrape, after: MetricsScrape, name: str, **labels: str) -> float:
    return after.value(name, upstream=UPSTREAM_NAME, **labels) - before.value(
        name, upstream=UPSTREAM_NAME, **labels
    )


def worker_calls(stack: Stack, trace: str, rpc_method: str) -> list[SeenRequest]:
    return [r for r in stack.recorder.requests(trace) if r.rpc_method == rpc_method]


async def wait_for_state(client: Client, task_id: str, state: int) -> Task:
    """Poll GetTask (bounded) until the task is in ``state``."""
    seen: list[Task] = []

    async def reached() -> bool:
        task = await client.get_task(GetTaskRequest(id=task_id))
        seen.append(task)
        assert task.id == task_id
        return task.status.state == state

    await await_until(reached, timeout=5.0, interval=0.02, message=f"task {task_id} -> {TaskState.Name(state)}")
    return seen[-1]


async def metric_reaches(stack: Stack, before: MetricsScrape, want: float, name: str, **labels: str) -> None:
    """Poll /metrics until ``name{labels}`` grew by exactly ``want`` (counters that are bumped
    only after the gateway finished the response, e.g. stream outcomes)."""

    async def check() -> bool:
        got = delta(before, await stack.scrape(), name, **labels)
        assert got <= want, f"{name}{labels} grew by {got}, expected {want}"
        return got == want

    await await_until(check, timeout=5.0, interval=0.02, message=f"{name}{labels} +{want}")


# --------------------------------------------------------------------------- v1.0 JSON-RPC


async def test_v10_blocking_send_completes(stack: Stack, blocking: Client, trace: str) -> None:
    before = await stack.scrape()

    task = await send_for_task(blocking, user_message("hi"))

    assert isinstance(task.id, str) and task.id
    assert task.context_id
    assert task.status.state == COMPLETED
    assert artifact_texts(task) == ["hello hi"]
    assert [a.name for a in task.artifacts] == ["result"]

    after = await stack.scrape()
    assert delta(before, after, REQUESTS, method="SendMessage", outcome="ok") == 1
    assert delta(before, after, REQUESTS, method="SendMessage") == 1  # no other outcome
    async def tracked_one_more() -> bool:  # the gauge (no upstream label) is refreshed in the background
        now = await stack.scrape()
        return now.value(TRACKED, state="TASK_STATE_COMPLETED") - before.value(TRACKED, state="TASK_STATE_COMPLETED") == 1

    await await_until(tracked_one_more, timeout=5.0, message="one more completed task tracked")
    record = await stack.ledger_record(task.id)
    assert record is not None and record.state.value == "TASK_STATE_COMPLETED" and record.terminal

    # The worker got exactly one v1.0 SendMessage from this test.
    calls = worker_calls(stack, trace, "SendMessage")
    assert len(calls) == 1
    assert calls[0].header_values("a2a-version") == ["1.0"]


async def test_v10_streaming_event_order(stack: Stack, streaming: Client, trace: str) -> None:
    before = await stack.scrape()

    events = await collect(streaming.send_message(user_message("stream me")))

    described = [describe(e) for e in events]
    assert [(k, s) for k, _, s in described] == [
        ("task", SUBMITTED),
        ("status_update", WORKING),
        ("artifact_update", None),
        ("status_update", COMPLETED),
    ]
    task_ids = {tid for _, tid, _ in described}
    assert len(task_ids) == 1 and "" not in task_ids
    (task_id,) = task_ids
    artifact = events[2].artifact_update.artifact
    assert get_artifact_text(artifact) == "hello stream me"
    assert artifact.name == "result" and artifact.artifact_id
    context_ids = {
        events[0].task.context_id,
        events[1].status_update.context_id,
        events[2].artifact_update.context_id,
        events[3].status_update.context_id,
    }
    assert len(context_ids) == 1 and "" not in context_ids

    after = await stack.scrape()
    assert delta(before, after, SSE_EVENTS, kind="task") == 1
    assert delta(before, after, SSE_EVENTS, kind="status") == 2
    assert delta(before, after, SSE_EVENTS, kind="artifact") == 1
    assert delta(before, after, SSE_EVENTS) == 4
    # The request counter is bumped once the gateway has finished the stream (after its drain).
    await metric_reaches(stack, before, 1, REQUESTS, method="SendStreamingMessage", outcome="ok")
    record = await stack.ledger_record(task_id)
    assert record is not None and record.state.value == "TASK_STATE_COMPLETED"
    assert len(worker_calls(stack, trace, "SendStreamingMessage")) == 1


async def test_v10_get_task_after_completion(stack: Stack, blocking: Client) -> None:
    task = await send_for_task(blocking, user_message("hi"))
    assert task.status.state == COMPLETED
    before = await stack.scrape()

    got = await blocking.get_task(GetTaskRequest(id=task.id, history_length=1))

    assert got.id == task.id
    assert got.context_id == task.context_id
    assert got.status.state == COMPLETED
    assert artifact_texts(got) == ["hello hi"]
    assert [a.artifact_id for a in got.artifacts] == [a.artifact_id for a in task.artifacts]
    after = await stack.scrape()
    assert delta(before, after, REQUESTS, method="GetTask", outcome="ok") == 1


async def test_v10_cancel_then_terminal_rejections(stack: Stack, blocking: Client, trace: str) -> None:
    request = user_message("slow cancel me")
    request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    started = await send_for_task(blocking, request)
    assert started.id
    assert started.status.state in (SUBMITTED, WORKING)

    working = await wait_for_state(blocking, started.id, WORKING)
    assert working.context_id == started.context_id

    cancelled = await blocking.cancel_task(CancelTaskRequest(id=started.id))
    assert cancelled.id == started.id
    assert cancelled.status.state == CANCELED
    assert len(worker_calls(stack, trace, "CancelTask")) == 1
    record = await stack.ledger_record(started.id)
    assert record is not None and record.state.value == "TASK_STATE_CANCELED"

    # Second cancel: answered by the gateway itself, the worker never sees it.
    before = await stack.scrape()
    with pytest.raises(TaskNotCancelableError):
        await blocking.cancel_task(CancelTaskRequest(id=started.id))
    after = await stack.scrape()
    assert delta(before, after, REJECTIONS, method="CancelTask", reason="terminal_task", action="enforced") == 1
    assert delta(before, after, REQUESTS, method="CancelTask", outcome="rejected") == 1
    assert len(worker_calls(stack, trace, "CancelTask")) == 1

    # A message to the canceled task: -32004 from the gateway, not forwarded.
    sends_before = len(worker_calls(stack, trace, "SendMessage"))
    with pytest.raises(UnsupportedOperationError):
        await single_response(
            blocking, user_message("more", task_id=started.id, context_id=started.context_id)
        )
    final = await stack.scrape()
    assert delta(after, final, REJECTIONS, method="SendMessage", reason="terminal_task", action="enforced") == 1
    assert delta(after, final, REQUESTS, method="SendMessage", outcome="rejected") == 1
    assert len(worker_calls(stack, trace, "SendMessage")) == sends_before

    # The state the client reads back is still CANCELED.
    again = await blocking.get_task(GetTaskRequest(id=started.id))
    assert again.status.state == CANCELED


async def test_v10_cancel_terminal_raw_error_codes(
    stack: Stack, blocking: Client, http: httpx.AsyncClient, trace: str
) -> None:
    """Same as above on the wire: exact JSON-RPC codes and the client's id echoed back."""
    task = await send_for_task(blocking, user_message("hi"))
    assert task.status.state == COMPLETED
    url = stack.gateway_base
    headers = {"A2A-Version": "1.0"}

    resp = await http.post(
        url, headers=headers,
        json={"jsonrpc": "2.0", "id": "cancel-1", "method": "CancelTask", "params": {"id": task.id}},
    )
    assert resp.status_code == 200
    doc = resp.json()
    assert doc["id"] == "cancel-1" and "result" not in doc
    assert doc["error"]["code"] == -32002

    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "again"}],
               "taskId": task.id}
    resp = await http.post(
        url, headers=headers,
        json={"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": message}},
    )
    assert resp.status_code == 200
    doc = resp.json()
    assert doc["id"] == 7 and doc["error"]["code"] == -32004
    assert worker_calls(stack, trace, "CancelTask") == []
    assert len(worker_calls(stack, trace, "SendMessage")) == 1  # only the original send


async def test_v10_stream_cancelled_while_open(stack: Stack, streaming: Client, blocking: Client) -> None:
    before = await stack.scrape()
    events: list[StreamResponse] = []
    cancel_result: Task | None = None
    async with asyncio.timeout(STREAM_BOUND):
        async for event in streaming.send_message(user_message("slow stream")):
            events.append(event)
            kind, task_id, state = describe(event)
            if kind == "status_update" and state == WORKING and cancel_result is None:
                cancel_result = await blocking.cancel_task(CancelTaskRequest(id=task_id))
    # Leaving the loop means the stream closed by itself.

    assert cancel_result is not None, [describe(e) for e in events]
    assert cancel_result.status.state == CANCELED
    described = [describe(e) for e in events]
    assert [(k, s) for k, _, s in described] == [
        ("task", SUBMITTED),
        ("status_update", WORKING),
        ("status_update", CANCELED),
    ]
    assert {tid for _, tid, _ in described} == {cancel_result.id}
    await metric_reaches(stack, before, 1, REQUESTS, method="SendStreamingMessage", outcome="ok")
    after = await stack.scrape()
    assert delta(before, after, SSE_EVENTS, kind="status") == 2
    record = await stack.ledger_record(cancel_result.id)
    assert record is not None and record.state.value == "TASK_STATE_CANCELED"


async def test_v10_subscribe_input_required_then_follow_up(
    stack: Stack, blocking: Client, streaming: Client, trace: str
) -> None:
    # A blocking send returns once the task is interrupted.
    task = await send_for_task(blocking, user_message("ask for a date"))
    assert task.status.state == INPUT_REQUIRED
    assert get_message_text(task.status.message) == "Which date?"
    before = await stack.scrape()

    stream = streaming.subscribe(SubscribeToTaskRequest(id=task.id))
    try:
        async with asyncio.timeout(STREAM_BOUND):
            first = await anext(stream)
    finally:
        await stream.aclose()

    assert first.WhichOneof("payload") == "task"
    assert first.task.id == task.id
    assert first.task.context_id == task.context_id
    assert first.task.status.state == INPUT_REQUIRED
    # Closing the client stream ends the gateway's relay and its upstream request.
    await metric_reaches(stack, before, 1, REQUESTS, method="SubscribeToTask", outcome="client_disconnected")
    subscribe_calls = worker_calls(stack, trace, "SubscribeToTask")
    assert len(subscribe_calls) == 1
    await await_until(lambda: subscribe_calls[0].disconnected, message="worker saw the subscriber leave")

    done = await send_for_task(
        blocking, user_message("tomorrow", task_id=task.id, context_id=task.context_id)
    )
    assert done.id == task.id
    assert done.status.state == COMPLETED
    assert artifact_texts(done) == ["booked for tomorrow"]
    record = await stack.ledger_record(task.id)
    assert record is not None and record.state.value == "TASK_STATE_COMPLETED"


async def test_v10_subscribe_to_live_task_alongside_original_stream(
    stack: Stack, streaming: Client, blocking: Client, trace: str
) -> None:
    """Two gateway streams of one task (the original stream and a SubscribeToTask): a cancel
    ends both with CANCELED as their last event."""
    before = await stack.scrape()
    original = streaming.send_message(user_message("slow shared"))
    original_events: list[StreamResponse] = []
    subscribed_events: list[StreamResponse] = []
    async with asyncio.timeout(STREAM_BOUND):
        original_events.append(await anext(original))
        original_events.append(await anext(original))
        assert [describe(e)[2] for e in original_events] == [SUBMITTED, WORKING]
        task_id = original_events[0].task.id

        subscription = streaming.subscribe(SubscribeToTaskRequest(id=task_id))
        subscribed_events.append(await anext(subscription))
        snapshot = subscribed_events[0]
        assert snapshot.WhichOneof("payload") == "task"
        assert snapshot.task.id == task_id and snapshot.task.status.state == WORKING

        cancelled = await blocking.cancel_task(CancelTaskRequest(id=task_id))
        assert cancelled.status.state == CANCELED
        original_events.extend([e async for e in original])
        subscribed_events.extend([e async for e in subscription])

    for events in (original_events, subscribed_events):
        kind, tid, state = describe(events[-1])
        assert (kind, tid, state) == ("status_update", task_id, CANCELED), [describe(e) for e in events]
        assert all(describe(e)[1] == task_id for e in events)
        assert [describe(e)[2] for e in events].count(CANCELED) == 1
    await metric_reaches(stack, before, 1, REQUESTS, method="SubscribeToTask", outcome="ok")
    await metric_reaches(stack, before, 1, REQUESTS, method="SendStreamingMessage", outcome="ok")
    after = await stack.scrape()
    assert delta(before, after, "a2a_gateway_divergences_total") == 0
    assert len(worker_calls(stack, trace, "SubscribeToTask")) == 1


async def test_v10_direct_message_reply(stack: Stack, blocking: Client, streaming: Client) -> None:
    before = await stack.scrape()

    response = await single_response(blocking, user_message("direct"))
    assert response.WhichOneof("payload") == "message"
    assert not response.HasField("task")
    assert response.message.role == Role.ROLE_AGENT
    assert get_message_text(response.message) == "direct reply"
    assert response.message.message_id

    events = await collect(streaming.send_message(user_message("direct")))
    assert [e.WhichOneof("payload") for e in events] == ["message"]
    assert get_message_text(events[0].message) == "direct reply"

    after = await stack.scrape()
    assert delta(before, after, REQUESTS, method="SendMessage", outcome="ok") == 1
    assert delta(before, after, SSE_EVENTS, kind="message") == 1
    assert delta(before, after, SSE_EVENTS, kind="task") == 0
    total_tracked = lambda s: s.value(TRACKED)  # noqa: E731
    assert total_tracked(after) == total_tracked(before)  # a Message creates no ledger entry


async def test_v10_client_disconnect_closes_upstream_stream(
    stack: Stack, streaming: Client, blocking: Client, trace: str
) -> None:
    before = await stack.scrape()
    stream = streaming.send_message(user_message("slow then hang up"))
    try:
        async with asyncio.timeout(STREAM_BOUND):
            first = await anext(stream)
    finally:
        await stream.aclose()
    assert first.WhichOneof("payload") == "task"
    assert first.task.status.state == SUBMITTED
    task_id = first.task.id
    assert task_id

    await metric_reaches(
        stack, before, 1, REQUESTS, method="SendStreamingMessage", outcome="client_disconnected"
    )
    calls = worker_calls(stack, trace, "SendStreamingMessage")
    assert len(calls) == 1
    await await_until(lambda: calls[0].disconnected, message="worker saw its stream closed")

    # The task lives on in the worker (SDK semantics); end it so nothing stays parked.
    await wait_for_state(blocking, task_id, WORKING)
    cancelled = await blocking.cancel_task(CancelTaskRequest(id=task_id))
    assert cancelled.status.state == CANCELED


# --------------------------------------------------------------------------- v0.3 (compat)


async def test_v03_sdk_client_send_get_stream(
    stack: Stack, v03_card: AgentCard, http: httpx.AsyncClient, trace: str
) -> None:
    before = await stack.scrape()
    clients = [
        await create_client(v03_card, ClientConfig(streaming=s, supported_protocol_bindings=["JSONRPC"], httpx_client=http))
        for s in (False, True)
    ]
    blocking03, streaming03 = clients
    try:
        assert type(blocking03._transport).__name__ == "CompatJsonRpcTransport"  # noqa: SLF001
        task = await send_for_task(blocking03, user_message("hi"))
        assert task.id
        assert task.status.state == COMPLETED
        assert artifact_texts(task) == ["hello hi"]

        got = await blocking03.get_task(GetTaskRequest(id=task.id))
        assert got.id == task.id and got.status.state == COMPLETED
        assert artifact_texts(got) == ["hello hi"]

        events = await collect(streaming03.send_message(user_message("stream me")))
    finally:
        for c in clients:
            await c.close()

    described = [describe(e) for e in events]
    assert [(k, s) for k, _, s in described] == [
        ("task", SUBMITTED),
        ("status_update", WORKING),
        ("artifact_update", None),
        ("status_update", COMPLETED),
    ]
    assert len({tid for _, tid, _ in described}) == 1
    assert get_artifact_text(events[2].artifact_update.artifact) == "hello stream me"

    # What the worker received: v0.3 method names, A2A-Version 0.3 (as the client sent it).
    seen = [r for r in stack.recorder.requests(trace) if r.rpc_method]
    assert [r.rpc_method for r in seen] == ["message/send", "tasks/get", "message/stream"]
    assert all(r.header_values("a2a-version") == ["0.3"] for r in seen)

    after = await stack.scrape()
    assert delta(before, after, REQUESTS, method="message/send", outcome="ok") == 1
    assert delta(before, after, REQUESTS, method="tasks/get", outcome="ok") == 1
    assert delta(before, after, SSE_EVENTS) == 4
    await metric_reaches(stack, before, 1, REQUESTS, method="message/stream", outcome="ok")


async def test_v03_raw_wire_without_version_header(stack: Stack, trace: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": "raw-03",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": uuid.uuid4().hex,
                "role": "user",
                "parts": [{"kind": "text", "text": "hi"}],
            }
        },
    }
    # A fresh client: the SDK factory adds A2A-Version to any httpx client it is handed.
    async with httpx.AsyncClient(trust_env=False, timeout=10.0, headers={TRACE_HEADER: trace}) as raw:
        assert "a2a-version" not in raw.headers
        resp = await raw.post(stack.gateway_base, json=body)

    assert resp.status_code == 200
    assert "a2a-version" not in resp.headers
    doc = resp.json()
    assert doc["id"] == "raw-03", doc
    result = doc["result"]
    assert result["kind"] == "task"
    assert result["status"]["state"] == "completed"
    assert result["id"]
    assert [p["text"] for p in result["artifacts"][0]["parts"]] == ["hello hi"]
    # Raw bytes too: the v0.3 spelling is on the wire, the v1.0 one is not.
    assert '"completed"' in resp.text and "TASK_STATE_COMPLETED" not in resp.text

    (seen,) = worker_calls(stack, trace, "message/send")
    assert "a2a-version" not in seen.header_names, seen.headers  # the gateway added none
    record = await stack.ledger_record(result["id"])
    assert record is not None and record.state.value == "TASK_STATE_COMPLETED"


async def test_what_the_quickstart_says_a_first_run_meets(stack: Stack, trace: str) -> None:
    """docs/quickstart.md "When something is off", against the real a2a-sdk worker: a v1.0
    call without ``A2A-Version`` is the worker's refusal, relayed — over JSON-RPC HTTP 200 with
    -32009, over REST HTTP 400 —, and a REST call outside the card's REST base (``/rest``) is
    the gateway's HTTP 404 naming it; that one never reaches the worker."""
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    async with httpx.AsyncClient(trust_env=False, timeout=10.0, headers={TRACE_HEADER: trace}) as raw:
        rpc = await raw.post(stack.gateway_base, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                       "params": {"message": message}})
        rest = await raw.post(stack.gateway_base + "rest/message:send", json={"message": message})
        wrong = await raw.post(stack.gateway_base + "message:send", json={"message": message},
                               headers={"A2A-Version": "1.0"})
    assert rpc.status_code == 200 and rpc.json()["error"]["code"] == -32009, rpc.text
    assert rest.status_code == 400, rest.text
    assert rest.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert wrong.status_code == 404, wrong.text
    rest_base = stack.gateway.url + "/rest"
    assert f"advertises REST (HTTP+JSON) at {rest_base}; try {rest_base}/message:send" in wrong.json()["error"]["message"]
    assert [r.path for r in stack.recorder.requests(trace)] == ["/", "/rest/message:send"]


# --------------------------------------------------------------------------- headers


async def test_end_to_end_and_hop_by_hop_headers(stack: Stack, card: AgentCard, trace: str) -> None:
    sent = {
        TRACE_HEADER: trace,
        "Authorization": "Bearer e2e-secret-token",
        "A2A-Extensions": "https://example.com/ext/a/v1, https://example.com/ext/b/v2",
        "X-A2A-Extensions": "https://example.com/ext/legacy/v1",
        "X-End-To-End": "kept",
        "Connection": "keep-alive, x-custom",
        "X-Custom": "hop-by-hop-because-named-in-connection",
        "TE": "trailers",
        "Keep-Alive": "timeout=5",
        "Proxy-Authorization": "Basic cHJveHk6c2VjcmV0",
    }
    async with httpx.AsyncClient(trust_env=False, timeout=10.0, headers=sent) as http:
        client = await create_client(
            card, ClientConfig(streaming=False, supported_protocol_bindings=["JSONRPC"], httpx_client=http)
        )
        try:
            task = await send_for_task(client, user_message("hi"))
        finally:
            await client.close()
    assert task.status.state == COMPLETED

    (seen,) = worker_calls(stack, trace, "SendMessage")
    assert seen.header_values("a2a-version") == ["1.0"]
    assert seen.header_values("authorization") == ["Bearer e2e-secret-token"]
    assert seen.header_values("a2a-extensions") == ["https://example.com/ext/a/v1, https://example.com/ext/b/v2"]
    assert seen.header_values("x-a2a-extensions") == ["https://example.com/ext/legacy/v1"]
    assert seen.header_values("x-end-to-end") == ["kept"]
    for hop in ("x-custom", "te", "keep-alive", "proxy-authorization"):
        assert hop not in seen.header_names, (hop, seen.headers)
    assert all("x-custom" not in v.lower() for v in seen.header_values("connection")), seen.headers


# --------------------------------------------------------------------------- REST binding


async def test_v10_rest_send_is_judged_and_relayed_byte_for_byte(stack: Stack, trace: str) -> None:
    before = await stack.scrape()
    payload = {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "rest call"}]}}
    raw_body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/a2a+json", "A2A-Version": "1.0", TRACE_HEADER: trace}
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as http:
        resp = await http.post(stack.gateway.url_for("/rest/message:send"), content=raw_body, headers=headers)

    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/a2a+json")
    task = resp.json()["task"]
    assert task["id"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [p["text"] for p in task["artifacts"][0]["parts"]] == ["hello rest call"]

    (seen,) = [r for r in stack.recorder.requests(trace) if r.path == "/rest/message:send"]
    assert seen.method == "POST"
    assert bytes(seen.body) == raw_body  # relayed byte for byte
    assert seen.header_values("content-type") == ["application/a2a+json"]
    assert seen.header_values("a2a-version") == ["1.0"]

    after = await stack.scrape()
    assert delta(before, after, REQUESTS, binding="rest", method="SendMessage", outcome="ok") == 1
    record = await stack.ledger_record(task["id"])
    assert record is not None and record.state.value == "TASK_STATE_COMPLETED"  # tracked


# --------------------------------------------------------------------------- terminal tasks, more methods


async def test_v10_stream_and_subscribe_on_terminal_task_rejected_locally(
    stack: Stack, blocking: Client, streaming: Client, trace: str
) -> None:
    task = await send_for_task(blocking, user_message("hi"))
    assert task.status.state == COMPLETED
    before = await stack.scrape()

    with pytest.raises(UnsupportedOperationError):
        await collect(streaming.send_message(user_message("more", task_id=task.id, context_id=task.context_id)))
    with pytest.raises(UnsupportedOperationError):
        await collect(streaming.subscribe(SubscribeToTaskRequest(id=task.id)))

    after = await stack.scrape()
    for method in ("SendStreamingMessage", "SubscribeToTask"):
        assert delta(before, after, REJECTIONS, method=method, reason="terminal_task", action="enforced") == 1
        assert delta(before, after, REQUESTS, method=method, outcome="rejected") == 1
        assert worker_calls(stack, trace, method) == []


async def test_v03_cancel_of_terminal_task_rejected_locally(
    stack: Stack, v03_card: AgentCard, http: httpx.AsyncClient, trace: str
) -> None:
    client = await create_client(
        v03_card, ClientConfig(streaming=False, supported_protocol_bindings=["JSONRPC"], httpx_client=http)
    )
    try:
        request = user_message("slow v03")
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        started = await send_for_task(client, request)
        await wait_for_state(client, started.id, WORKING)
        cancelled = await client.cancel_task(CancelTaskRequest(id=started.id))
        assert cancelled.id == started.id and cancelled.status.state == CANCELED
        before = await stack.scrape()
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=started.id))
    finally:
        await client.close()
    after = await stack.scrape()
    assert delta(before, after, REJECTIONS, method="tasks/cancel", reason="terminal_task", action="enforced") == 1
    assert len(worker_calls(stack, trace, "tasks/cancel")) == 1
    # v0.3 wire: the worker was asked with blocking=false (the inverse of returnImmediately).
    (send,) = worker_calls(stack, trace, "message/send")
    assert send.json["params"]["configuration"]["blocking"] is False


# --------------------------------------------------------------------------- raw SSE framing


async def test_v10_raw_sse_framing_and_headers(stack: Stack, http: httpx.AsyncClient) -> None:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "raw stream"}]}
    body = {"jsonrpc": "2.0", "id": 41, "method": "SendStreamingMessage", "params": {"message": message}}
    async with http.stream("POST", stack.gateway_base, json=body, headers={"A2A-Version": "1.0"}) as resp:
        assert resp.status_code == 200
        assert resp.headers.get_list("content-type") == ["text/event-stream; charset=utf-8"]
        assert resp.headers.get("cache-control") == "no-store"
        assert resp.headers.get("x-accel-buffering") == "no"
        assert "content-length" not in resp.headers
        text = (await resp.aread()).decode()

    events = parse_sse(text)
    assert [name for name, _ in events] == ["message"] * 4
    assert all(doc["id"] == 41 and doc["jsonrpc"] == "2.0" for _, doc in events)
    results = [doc["result"] for _, doc in events]
    assert [next(iter(r)) for r in results] == ["task", "statusUpdate", "artifactUpdate", "statusUpdate"]
    assert results[0]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all("final" not in r.get("statusUpdate", {}) for r in results)  # v1.0: never injected
    assert all("kind" not in r for r in results)


# --------------------------------------------------------------------------- REST streaming passthrough


REST_HEADERS = {"Content-Type": "application/a2a+json", "A2A-Version": "1.0"}


async def rest_cancel(http: httpx.AsyncClient, stack: Stack, task_id: str) -> httpx.Response:
    return await http.post(stack.gateway.url_for(f"/rest/tasks/{task_id}:cancel"), headers=REST_HEADERS, content=b"{}")


async def read_sse_event(lines: AsyncIterator[str]) -> dict:
    """Read one ``data:`` event (JSON) from an SSE line iterator."""
    data: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            return json.loads("\n".join(data))
    raise AssertionError("stream ended before an event")


async def test_v10_rest_stream_relayed_incrementally(stack: Stack, http: httpx.AsyncClient, trace: str) -> None:
    payload = {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "slow rest"}]}}
    url = stack.gateway.url_for("/rest/message:stream")
    async with asyncio.timeout(STREAM_BOUND):
        async with http.stream("POST", url, headers=REST_HEADERS, content=json.dumps(payload)) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            lines = resp.aiter_lines()
            first = await read_sse_event(lines)  # arrives while the task is still running
            task_id = first["task"]["id"]
            assert first["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
            working = await read_sse_event(lines)
            assert working["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
            cancel = await rest_cancel(http, stack, task_id)
            assert cancel.status_code == 200, cancel.text
            assert cancel.json()["status"]["state"] == "TASK_STATE_CANCELED"
            rest = [line async for line in lines]
    tail = parse_sse("\n".join(rest))
    assert [doc["statusUpdate"]["status"]["state"] for _, doc in tail] == ["TASK_STATE_CANCELED"]
    assert tail[0][1]["statusUpdate"]["taskId"] == task_id


async def test_v10_rest_stream_client_disconnect_closes_upstream(
    stack: Stack, http: httpx.AsyncClient, trace: str
) -> None:
    payload = {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "slow rest hangup"}]}}
    url = stack.gateway.url_for("/rest/message:stream")
    task_id = None
    try:
        async with asyncio.timeout(STREAM_BOUND):
            async with http.stream("POST", url, headers=REST_HEADERS, content=json.dumps(payload)) as resp:
                assert resp.status_code == 200
                first = await read_sse_event(resp.aiter_lines())
                task_id = first["task"]["id"]
        # The client has hung up; the gateway must let go of the worker's stream too.
        (seen,) = [r for r in stack.recorder.requests(trace) if r.path == "/rest/message:stream"]
        await await_until(lambda: seen.disconnected, timeout=3.0, message="worker saw the REST stream closed")
    finally:
        if task_id is not None:  # end the parked task (this also ends a leaked relay)
            cancel = await rest_cancel(http, stack, task_id)
            assert cancel.status_code == 200, cancel.text


# --------------------------------------------------------------------------- agent card


async def test_agent_card_is_served_with_gateway_urls(stack: Stack, http: httpx.AsyncClient) -> None:
    """F10 with a real a2a-sdk worker: the card served by the gateway advertises the gateway
    (v1.0 ``supportedInterfaces`` and the SDK's hybrid v0.3 ``url``), keeps every other member,
    has its own ETag and answers a matching ``If-None-Match`` with 304 — also at the legacy
    ``agent.json`` path. A stock SDK client that follows this card stays on the gateway."""
    path = "/.well-known/agent-card.json"
    direct = (await http.get(stack.worker.url_for(path))).json()
    via = await http.get(stack.gateway.url_for(path))
    assert via.status_code == 200
    card = via.json()
    gateway = stack.gateway.url + "/"
    assert {i["url"] for i in card["supportedInterfaces"]} == {gateway, gateway + "rest"}
    assert card["url"] == gateway
    assert {k: v for k, v in card.items() if k not in ("supportedInterfaces", "url")} == {
        k: v for k, v in direct.items() if k not in ("supportedInterfaces", "url")}
    etag = via.headers["etag"]
    not_modified = await http.get(stack.gateway.url_for(path), headers={"If-None-Match": etag})
    assert not_modified.status_code == 304 and not_modified.headers["etag"] == etag
    legacy = await http.get(stack.gateway.url_for("/.well-known/agent.json"))
    assert legacy.json() == card
    client = await create_client(stack.gateway.url, client_config=ClientConfig(
        streaming=False, supported_protocol_bindings=["JSONRPC"]))
    try:
        events = [e async for e in client.send_message(SendMessageRequest(
            message=new_text_message("via card", role=Role.ROLE_USER)))]
    finally:
        await client.close()
    assert events and events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED


@pytest.mark.parametrize("raw_id", [b"1e5", b"1E+2", b"1.0", b"1e308", b"1e-400"])
async def test_float_id_on_a_relayed_method_comes_back_as_written(
    stack: Stack, http: httpx.AsyncClient, trace: str, raw_id: bytes
) -> None:
    """Issue #35: a method no A2A version defines is relayed to the a2a-sdk worker, which
    cannot answer a float id as the client wrote it; its answer reached the client with
    another id (for GetTask the gateway already put the client's back). Now it carries the
    client's id as written there too, and the worker did get the request."""
    body = b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"NoSuchMethod","params":{}}'
    response = await http.post(stack.gateway_base, content=body,
                               headers={"content-type": "application/json", "A2A-Version": "1.0"})
    assert raw_member(response.content, "id") == raw_id, response.text
    assert response.json()["error"]["code"] == -32600  # "id should be string or integer"
    seen = [r for r in stack.recorder.requests(trace) if r.rpc_method == "NoSuchMethod"]
    assert len(seen) == 1 and bytes(seen[0].body) == body
