"""OpenTelemetry traces of the gateway's A2A traffic (docs/observability.md §1).

One ``SERVER`` span per client request that reaches an exchange (a request refused while it
is read or parsed is left to HTTP instrumentation, as the A2A conventions say), one ``CLIENT``
span per call to the worker — the client's request sent on, and the gateway's own forced
``GetTask`` and resubscribe, each saying why (``a2a_gateway.forced_get.reason``). Both are
named after ``a2a.method.name`` and carry the attributes of OpenTelemetry's draft A2A semantic
conventions (the GenAI registry's ``a2a.*`` namespace; development status, so names may
change) beside the standard HTTP ones. The client's ``traceparent`` is the server span's
parent; the worker gets the client span as its parent (``traceparent`` / ``tracestate``
replaced). Findings are span events (:meth:`Tracing.findings`).

Off unless configured (:func:`from_config`): then nothing here runs per request — the shell
checks ``Runtime.tracing is None`` and builds no span object. The SDK and the OTLP/HTTP
exporter are the optional ``otel`` extra; the gateway's own ``TracerProvider`` is used, never
the process-global one, so an application embedding the gateway keeps its own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.config import TracingConfig

SUCCESS_OUTCOMES = frozenset({"ok", "rewritten", "worker_error", "upstream_status", "client_disconnected"})
"""Request outcomes (``a2a_gateway_requests_total{outcome}``) that are no failure of the
exchange: every other one is the server span's ``error.type`` and an error status."""

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = (b"traceparent", b"tracestate")


def wanted(cfg: TracingConfig, env: Mapping[str, str]) -> bool:
    """Whether tracing is on, the environment over the file as for every setting
    (docs/observability.md §1): ``OTEL_SDK_DISABLED=true`` is off; ``OTEL_TRACES_EXPORTER``
    naming ``none`` is off, naming ``otlp`` on; else ``tracing.enabled`` when set; else on
    when an OTLP endpoint variable is set (a place to send spans, which switches nothing the
    file has switched)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()}
    if "none" in exporters:
        return False
    if "otlp" in exporters:
        return True
    if cfg.enabled is not None:
        return cfg.enabled
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def from_config(cfg: TracingConfig, version: str, log: logging.Logger,
                env: Mapping[str, str] | None = None) -> Tracing | None:
    """The gateway's :class:`Tracing`, or ``None`` when it is off (:func:`wanted`) or the
    ``otel`` extra is missing (then a ``tracing_unavailable`` warning says what to install)."""
    env = os.environ if env is None else env
    if not wanted(cfg, env):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as exc:
        log.warning("tracing_unavailable", extra={
            "error": f"{exc}; install the otel extra: pip install 'a2a-gateway[otel]' "
                     "(in a checkout: .venv/bin/pip install -e '.[otel]')"})
        return None
    service = (env.get("OTEL_SERVICE_NAME") or resource_attribute(env, "service.name")
               or cfg.service_name or "a2a-gateway")
    # OTEL_TRACES_SAMPLER wins over tracing.sampling_ratio: the SDK then builds its sampler
    sampler = None if env.get("OTEL_TRACES_SAMPLER") else ParentBased(TraceIdRatioBased(cfg.sampling_ratio))
    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "service.version": version}), sampler=sampler)
    endpoint = traces_endpoint(cfg.endpoint, env)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    log.info("tracing_enabled", extra={"service": service, "endpoint": endpoint})
    return Tracing(provider.get_tracer("a2a_gateway", version), provider)


def resource_attribute(env: Mapping[str, str], key: str) -> str | None:
    """``key``'s value in ``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,k2=v2``, values percent-encoded;
    the OpenTelemetry resource SDK specification), or ``None``."""
    for pair in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        name, eq, value = pair.partition("=")
        if eq and name.strip() == key and value.strip():
            return unquote(value.strip())
    return None


def traces_endpoint(configured: str | None, env: Mapping[str, str]) -> str:
    """The URL the OTLP/HTTP exporter posts spans to (it is given this one): the environment
    over the file — ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as it is, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` with the signal path ``v1/traces`` appended (the OTLP
    exporter specification) — else ``tracing.endpoint``, else the SDK's default
    ``http://localhost:4318/v1/traces``."""
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_ENDPOINT"].removesuffix("/") + "/v1/traces"
    return configured or "http://localhost:4318/v1/traces"


def _host_port(url: str) -> tuple[str | None, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None and parts.scheme in ("http", "https"):
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname, port


class Tracing:
    """Makes the gateway's spans. Built by :func:`from_config`; ``provider`` is flushed and
    shut down by :meth:`shutdown` (the app's lifespan)."""

    def __init__(self, tracer: trace.Tracer, provider: Any = None) -> None:
        self.tracer = tracer
        self.provider = provider

    def server_span(self, scope: Mapping[str, Any], *, method: str, version: str, binding: str,
                    task_id: str | None, message_id: str | None, tenant: str | None,
                    card: Mapping[str, Any] | None, start_time: int | None = None) -> Span:
        """Start the ``SERVER`` span of a client request (``method``: the A2A v1.0 method name;
        ``start_time``: epoch nanoseconds, default now), a child of the client's
        ``traceparent`` when it sent a valid one."""
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())
                   if k in _TRACE_HEADERS}
        parent = _PROPAGATOR.extract(carrier) if carrier else None
        attrs: dict[str, Any] = {"a2a.method.name": method, "a2a.protocol.version": version,
                                 "a2a.protocol.binding": binding,
                                 "http.request.method": scope.get("method", "POST"),
                                 "url.path": scope.get("path", ""), "url.scheme": scope.get("scheme", "http"),
                                 "network.protocol.version": scope.get("http_version", "1.1")}
        server = scope.get("server")
        if server:
            attrs["server.address"], attrs["server.port"] = server[0], server[1]
        if task_id:
            attrs["a2a.task.id"] = task_id
        if message_id:
            attrs["a2a.message.id"] = message_id
        if tenant:
            attrs["a2a.tenant"] = tenant
        _agent(attrs, card)
        return self.tracer.start_span(method, context=parent, kind=SpanKind.SERVER, attributes=attrs,
                                      start_time=start_time)

    @staticmethod
    def end_server(span: Span, *, outcome: str, status: int | None, task_id: str | None,
                   context_id: str | None, state: str | None) -> None:
        """End a server span with what the exchange found out (``outcome``: the request's
        bounded outcome label; ``status``: the HTTP status sent, ``None`` when none was)."""
        if task_id:
            span.set_attribute("a2a.task.id", task_id)
        if context_id:
            span.set_attribute("gen_ai.conversation.id", context_id)
        if state:
            span.set_attribute("a2a.task.state", state)
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        span.set_attribute("a2a_gateway.outcome", outcome)
        if outcome not in SUCCESS_OUTCOMES:
            span.set_attribute("error.type", outcome)
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()

    def client_span(self, parent: Span, *, method: str, http_method: str, url: str, version: str | None,
                    task_id: str | None, reason: str | None, card: Mapping[str, Any] | None) -> Span:
        """Start the ``CLIENT`` span of one call to the worker, a child of ``parent``
        (``reason``: why the gateway sends a request of its own; ``None``: the client's)."""
        attrs: dict[str, Any] = {"a2a.method.name": method, "http.request.method": http_method, "url.full": url}
        host, port = _host_port(url)
        if host:
            attrs["server.address"] = host
        if port is not None:
            attrs["server.port"] = port
        if version:
            attrs["a2a.protocol.version"] = version
        if task_id:
            attrs["a2a.task.id"] = task_id
        if reason is not None:
            attrs["a2a_gateway.forced_get.reason"] = reason
        _agent(attrs, card)
        return self.tracer.start_span(method, context=trace.set_span_in_context(parent), kind=SpanKind.CLIENT,
                                      attributes=attrs)

    @staticmethod
    def propagate(span: Span, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """``headers`` of a request to the worker with ``traceparent`` (and ``tracestate``)
        naming ``span`` instead of the client's."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        out = [h for h in headers if h[0] not in _TRACE_HEADERS]
        out += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in carrier.items()]
        return out

    @staticmethod
    def end_client(span: Span, *, status: int | None = None, error: str | None = None) -> None:
        """End a client span: the worker's HTTP status, or the transport failure's reason."""
        if status is not None:
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_attribute("error.type", str(status))
                span.set_status(Status(StatusCode.ERROR))
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    @staticmethod
    def findings(span: Span, findings: Any, task_id: str | None, action: str) -> None:
        """One span event per finding: ``a2a_gateway.divergence``, ``a2a_gateway.rejection``
        (a local refusal), ``a2a_gateway.normalization`` or ``a2a_gateway.limit`` (a worker past
        a bound of the record's), with its kind and detail."""
        for f in findings:
            attrs = {"a2a_gateway.finding.kind": f.kind, "a2a_gateway.finding.detail": f.detail,
                     "a2a_gateway.action": action}
            if task_id:
                attrs["a2a.task.id"] = task_id
            span.add_event(f"a2a_gateway.{f.category}", attrs, timestamp=time.time_ns())

    @staticmethod
    def trace_id(span: Span | None) -> str | None:
        """The span's trace id as 32 hex digits (the request log line's ``trace_id``)."""
        if span is None:
            return None
        ctx = span.get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid else None

    def shutdown(self) -> None:
        """Export what is queued and stop (the app's shutdown)."""
        if self.provider is not None:
            self.provider.shutdown()


def _agent(attrs: dict[str, Any], card: Mapping[str, Any] | None) -> None:
    if not card:
        return
    name, version = card.get("name"), card.get("version")
    if isinstance(name, str) and name:
        attrs["gen_ai.agent.name"] = name
    if isinstance(version, str) and version:
        attrs["gen_ai.agent.version"] = version
