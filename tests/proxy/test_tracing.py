"""OpenTelemetry traces from the running gateway (docs/observability.md §1), received as real
OTLP/HTTP export by a receiver on 127.0.0.1 (tests/support/otlp.py): span names, kinds,
parent/child links to the client's ``traceparent``, the A2A attributes, the worker's
``traceparent``, forced ``GetTask`` reasons, findings as events."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.config import TracingConfig
from gateway.observability import tracing
from tests.proxy.conftest import Harness, frames
from tests.support.objects import task
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.scripted_worker import Event
from tests.support.servers import free_port, serve_in_thread, subprocess_server, wait_until

V1 = {"A2A-Version": "1.0"}


def traceparent(n: int) -> tuple[str, str, str]:
    """A client's (traceparent, trace id, span id), distinct per ``n``."""
    trace_id, span_id = f"{n:032x}".replace("0", "a", 8), f"{n:016x}".replace("0", "b", 4)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def send(req_id: int, task_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": f"m-{req_id}", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    if task_id:
        message.update(taskId=task_id, contextId=task_id.replace("t-", "c-"))
    return {"jsonrpc": "2.0", "id": req_id, "method": "SendMessage", "params": {"message": message}}


@pytest.fixture
def otlp() -> Iterator[tuple[OtlpReceiver, str]]:
    receiver = OtlpReceiver()
    with serve_in_thread(receiver, name="otlp") as srv:
        yield receiver, srv.url + "/v1/traces"


@pytest.fixture
def traced(make_harness: Any, otlp: tuple[OtlpReceiver, str], monkeypatch: pytest.MonkeyPatch) -> tuple[Harness, OtlpReceiver]:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # export every 50 ms, not 5 s
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")  # an export given up on in 2 s, not 10 s
    receiver, endpoint = otlp
    h = make_harness(tracing={"enabled": True, "endpoint": endpoint, "service_name": "gw-under-test"})
    assert h.runtime.tracing is not None
    return h, receiver


def of_trace(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


def test_server_and_client_spans_continue_the_clients_trace_and_reach_the_worker(
        traced: tuple[Harness, OtlpReceiver]) -> None:
    h, receiver = traced
    header, trace_id, client_span_id = traceparent(1)
    h.worker.on("SendMessage", json_result=task("t-1", "TASK_STATE_WORKING"))
    r = h.rpc(send(1), headers={**V1, "traceparent": header})
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_WORKING"
    spans = of_trace(receiver.wait_for(lambda s: len(of_trace(s, trace_id)) >= 2), trace_id)
    [server] = [s for s in spans if s.kind == "SERVER"]
    [client] = [s for s in spans if s.kind == "CLIENT"]
    assert server.name == client.name == "SendMessage"
    assert server.parent_span_id == client_span_id  # the client's traceparent is the parent
    assert client.parent_span_id == server.span_id
    a = server.attributes
    assert a["a2a.method.name"] == "SendMessage" and a["a2a.protocol.version"] == "1.0"
    assert a["a2a.task.id"] == "t-1" and a["a2a.task.state"] == "TASK_STATE_WORKING"
    assert a["a2a.message.id"] == "m-1" and a["gen_ai.conversation.id"] == "c-1"
    assert a["gen_ai.agent.name"] == "scripted" and a["gen_ai.agent.version"] == "1.0.0"
    assert a["http.request.method"] == "POST" and a["http.response.status_code"] == 200
    assert a["server.address"] == "127.0.0.1" and isinstance(a["server.port"], int)
    assert "error.type" not in a
    c = client.attributes
    assert c["a2a.method.name"] == "SendMessage" and c["server.address"] == "127.0.0.1"
    assert c["http.response.status_code"] == 200 and "a2a_gateway.forced_get.reason" not in c
    assert server.resource["service.name"] == "gw-under-test"
    # the worker got the gateway's client span as its parent, not the client's header
    [seen] = h.worker.calls("SendMessage")
    assert seen.headers["traceparent"] == f"00-{trace_id}-{client.span_id}-01"


def test_forced_get_is_a_client_span_saying_why_and_findings_are_events(traced: tuple[Harness, OtlpReceiver]) -> None:
    h, receiver = traced
    h.worker.on("SendMessage", json_error={"code": -32001, "message": "no such task"})
    h.worker.on("GetTask", json_result=task("t-2", "TASK_STATE_COMPLETED"))
    header, trace_id, _ = traceparent(2)
    assert h.rpc(send(1, "t-2"), headers={**V1, "traceparent": header}).json()["error"]["code"] == -32004
    spans = of_trace(receiver.wait_for(lambda s: len(of_trace(s, trace_id)) >= 3), trace_id)
    [server] = [s for s in spans if s.kind == "SERVER"]
    clients = {s.name: s for s in spans if s.kind == "CLIENT"}
    assert set(clients) == {"SendMessage", "GetTask"}
    assert all(c.parent_span_id == server.span_id for c in clients.values())
    assert clients["GetTask"].attributes["a2a_gateway.forced_get.reason"] == "worker_error"
    assert all(c.attributes["a2a.task.id"] == "t-2" for c in clients.values())
    assert server.attributes["a2a.task.state"] == "TASK_STATE_COMPLETED"

    # the worker reopens the task: a divergence event; the follow-up: a local refusal, no worker call
    h.worker.on("GetTask", json_result=task("t-2", "TASK_STATE_WORKING"))
    header, trace_id, _ = traceparent(3)
    h.rpc({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "t-2"}},
          headers={**V1, "traceparent": header})
    header4, trace4, _ = traceparent(4)
    assert h.rpc(send(3, "t-2"), headers={**V1, "traceparent": header4}).json()["error"]["code"] == -32004
    spans = receiver.wait_for(lambda s: of_trace(s, trace_id) and of_trace(s, trace4))
    [reopened] = [s for s in of_trace(spans, trace_id) if s.kind == "SERVER"]
    assert ("a2a_gateway.divergence", "terminal_regression") in [
        (name, attrs.get("a2a_gateway.finding.kind")) for name, attrs in reopened.events]
    refused = of_trace(spans, trace4)
    assert [s.kind for s in refused] == ["SERVER"]  # answered locally: the worker was not called
    [(name, attrs)] = refused[0].events
    assert name == "a2a_gateway.rejection" and attrs["a2a_gateway.finding.kind"] == "terminal_task"
    assert refused[0].attributes["error.type"] == "rejected" and refused[0].status_code == 2  # ERROR
    assert refused[0].attributes["a2a.task.state"] == "TASK_STATE_COMPLETED"  # as the ledger holds it


def test_the_request_log_line_carries_the_trace_id(traced: tuple[Harness, OtlpReceiver],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    h, _ = traced
    header, trace_id, _ = traceparent(5)
    h.worker.on("GetTask", json_result=task("t-5", "TASK_STATE_WORKING"))
    with caplog.at_level(logging.INFO, logger="a2a_gateway"):
        h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-5"}},
              headers={**V1, "traceparent": header})
    lines = [r for r in caplog.records if r.getMessage() == "request"]
    assert [getattr(r, "trace_id", None) for r in lines] == [trace_id]


@pytest.mark.parametrize(("env", "enabled", "expected"), [
    ({}, None, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None, True),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, None, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None, False),
    ({}, True, True),
    ({"OTEL_SDK_DISABLED": "true"}, True, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False, False),  # a place, not a switch
    # the environment's switches win over the file, as every variable does
    ({"OTEL_TRACES_EXPORTER": "otlp"}, False, True),
    ({"OTEL_TRACES_EXPORTER": "none"}, True, False),
    ({"OTEL_TRACES_EXPORTER": "console"}, True, True),
])
def test_tracing_is_off_unless_configured(env: dict[str, str], enabled: bool | None, expected: bool) -> None:
    assert tracing.wanted(TracingConfig(enabled=enabled), env) is expected


def test_tracing_off_builds_no_span(h: Harness) -> None:
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in os.environ
    assert h.runtime.tracing is None


@pytest.mark.parametrize(("configured", "env", "expected"), [
    ("http://c:4318/v1/traces", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}, "http://x:1/v1/traces"),
    ("http://c:4318/v1/traces", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/spans"}, "http://t:1/spans"),
    ("http://c:4318/v1/traces", {}, "http://c:4318/v1/traces"),
    (None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/spans", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"},
     "http://t:1/spans"),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}, "http://x:1/v1/traces"),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1/"}, "http://x:1/v1/traces"),
    (None, {}, "http://localhost:4318/v1/traces"),
])
def test_the_logged_endpoint_is_the_one_the_exporter_posts_to(configured: str | None, env: dict[str, str],
                                                             expected: str) -> None:
    assert tracing.traces_endpoint(configured, env) == expected


@pytest.mark.slow
def test_an_unreachable_collector_leaves_the_gateway_serving_and_its_warnings_json(tmp_path: Path) -> None:
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` at a closed port: requests are answered, and the SDK's
    export warnings are the gateway's JSON lines on stderr, not plain text."""
    from demo.worker import build_worker_app

    closed, port, admin_port = free_port(), free_port(), free_port()
    with serve_in_thread(build_worker_app("http://127.0.0.1:9/"), name="worker") as worker:
        cmd = [sys.executable, "-m", "gateway", "serve", "--upstream", worker.url + "/", "--ledger", "memory",
               "--port", str(port), "--admin-port", str(admin_port)]
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed}", "OTEL_BSP_SCHEDULE_DELAY": "50",
               # 3 s: the SDK's first back-off (1 s +-20 %) fits in it, so its first failure is the
               # "Transient error ... exporting spans batch" warning; with 1 s it was sometimes the
               # "Failed to export spans batch due to timeout" error instead (a CI flake)
               "OTEL_EXPORTER_OTLP_TIMEOUT": "3",
               "A2A_GATEWAY_STATE_DIR": str(tmp_path)}
        with subprocess_server(cmd, f"http://127.0.0.1:{admin_port}/readyz", env=env) as proc:
            r = httpx.post(f"http://127.0.0.1:{port}/", json=send(1), headers={"A2A-Version": "1.0"},
                           trust_env=False, timeout=10)
            assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            wait_until(lambda: "spans batch" in proc.stderr_text(), timeout=15)
            lines = proc.stderr_text().splitlines()
    docs = [orjson.loads(line) for line in lines if line.strip()]  # every line is JSON
    enabled = [d for d in docs if d["event"] == "tracing_enabled"]
    assert [d["endpoint"] for d in enabled] == [f"http://127.0.0.1:{closed}/v1/traces"]
    assert any(d["level"] in ("warning", "error") and "spans batch" in d["event"] for d in docs)


def test_a_cut_stream_s_probe_and_resubscribe_are_client_spans_saying_why(traced: tuple[Harness, OtlpReceiver]) -> None:
    """A stream the worker cuts before its task ended: the gateway's own ``GetTask`` (reason
    ``upstream_eof``) and ``SubscribeToTask`` (reason ``resubscribe``) are client spans of the
    client's stream, beside the client's own call (no reason)."""
    h, receiver = traced
    working = {"id": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_WORKING"}}
    done = {"taskId": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_COMPLETED"}}
    h.worker.on("SendStreamingMessage", sse=[Event(result={"task": working})])  # then the worker's EOF
    h.worker.on("GetTask", json_result=working)
    h.worker.on("SubscribeToTask", sse=[Event(result={"task": working}), Event(result={"statusUpdate": done})])
    header, trace_id, _ = traceparent(6)
    _, raw = h.stream({"jsonrpc": "2.0", "id": 9, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m-9", "role": "ROLE_USER", "parts": [{"text": "go"}]}}},
        headers={**V1, "traceparent": header})
    assert frames(raw)[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    spans = of_trace(receiver.wait_for(lambda s: len(of_trace(s, trace_id)) >= 4), trace_id)
    [server] = [s for s in spans if s.kind == "SERVER"]
    assert server.name == "SendStreamingMessage" and server.attributes["a2a.task.state"] == "TASK_STATE_COMPLETED"
    clients = sorted((s.name, s.attributes.get("a2a_gateway.forced_get.reason")) for s in spans if s.kind == "CLIENT")
    assert clients == [("GetTask", "upstream_eof"), ("SendStreamingMessage", None), ("SubscribeToTask", "resubscribe")]
    assert all(s.parent_span_id == server.span_id for s in spans if s.kind == "CLIENT")
    [subscribe] = h.worker.calls("SubscribeToTask")
    [span] = [s for s in spans if s.name == "SubscribeToTask"]
    assert subscribe.headers["traceparent"] == f"00-{trace_id}-{span.span_id}-01"


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
def test_the_tenant_is_the_server_span_s_a2a_tenant(traced: tuple[Harness, OtlpReceiver], binding: str) -> None:
    """``a2a.tenant`` is the tenant the gateway judged the call under (docs/callers.md §1):
    JSON-RPC's ``params.tenant``, REST's path before the operation."""
    h, receiver = traced
    header, trace_id, _ = traceparent(7 if binding == "jsonrpc" else 8)
    if binding == "jsonrpc":
        h.worker.on("GetTask", json_result=task("t-7", "TASK_STATE_WORKING"))
        h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-7", "tenant": "acme"}},
              headers={**V1, "traceparent": header})
    else:
        h.worker.on_path("GET", "/acme/tasks/t-7", json_body=task("t-7", "TASK_STATE_WORKING"))
        r, _ = h.rest("GET", "/acme/tasks/t-7", headers={**V1, "traceparent": header})
        assert r.status_code == 200
    [server] = [s for s in of_trace(receiver.wait_for(lambda s: of_trace(s, trace_id)), trace_id) if s.kind == "SERVER"]
    assert server.attributes["a2a.protocol.binding"] == binding
    assert server.attributes["a2a.tenant"] == "acme"


def test_a_v03_rest_send_s_message_id_is_on_its_server_span(traced: tuple[Harness, OtlpReceiver]) -> None:
    """a2a-sdk's v0.3 REST transport names the message ``request`` (docs/protocol.md §11
    pitfall 11): its ``messageId`` is ``a2a.message.id`` as for ``message``."""
    h, receiver = traced
    header, trace_id, _ = traceparent(9)
    h.worker.on_path("POST", "/v1/message:send", json_body={"task": {
        "id": "t-9", "contextId": "c-9", "status": {"state": "TASK_STATE_WORKING"}}})
    r, _ = h.rest("POST", "/v1/message:send", headers={"traceparent": header}, json={
        "request": {"messageId": "m-v03", "role": "ROLE_USER", "content": [{"text": "hi"}]}})
    assert r.status_code == 200, r.text
    [server] = [s for s in of_trace(receiver.wait_for(lambda s: of_trace(s, trace_id)), trace_id) if s.kind == "SERVER"]
    assert (server.attributes["a2a.protocol.version"], server.attributes["a2a.message.id"]) == ("0.3", "m-v03")


@pytest.mark.parametrize(("env", "configured", "expected"), [
    ({"OTEL_SERVICE_NAME": "from-env"}, "from-file", "from-env"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "team=a,service.name=from%20attrs"}, "from-file", "from attrs"),
    ({"OTEL_SERVICE_NAME": "from-env", "OTEL_RESOURCE_ATTRIBUTES": "service.name=attrs"}, None, "from-env"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "team=a"}, "from-file", "from-file"),
    ({}, None, "a2a-gateway"),
])
def test_the_service_name_comes_from_the_environment_before_the_file(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], configured: str | None, expected: str) -> None:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the SDK's Resource.create reads them too
    built = tracing.from_config(TracingConfig(enabled=True, endpoint="http://127.0.0.1:1/v1/traces",
                                              service_name=configured), "9.9", logging.getLogger("t"))
    assert built is not None
    try:
        assert built.provider.resource.attributes["service.name"] == expected
    finally:
        built.provider.shutdown()


@pytest.mark.parametrize(("sampler", "expected"), [(None, "ParentBased{root:TraceIdRatioBased{0.25},"),
                                                   ("always_off", "AlwaysOffSampler")])
def test_otel_traces_sampler_wins_over_the_sampling_ratio(monkeypatch: pytest.MonkeyPatch, sampler: str | None,
                                                          expected: str) -> None:
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    if sampler is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    built = tracing.from_config(TracingConfig(enabled=True, endpoint="http://127.0.0.1:1/v1/traces",
                                              sampling_ratio=0.25), "9.9", logging.getLogger("t"))
    assert built is not None
    try:
        assert built.provider.sampler.get_description().startswith(expected)
    finally:
        built.provider.shutdown()
