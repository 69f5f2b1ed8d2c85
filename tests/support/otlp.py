"""A tiny OTLP/HTTP traces receiver for tests: a pure-ASGI app that takes ``POST /v1/traces``
(``application/x-protobuf``), decodes it with ``opentelemetry-proto`` and keeps every span.

    receiver = OtlpReceiver()
    with serve_in_thread(receiver, name="otlp") as srv:
        ...  # tracing.endpoint: srv.url + "/v1/traces"
        spans = receiver.wait_for(lambda spans: len(spans) >= 2)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanPb

from tests.support.asgi import request_body
from tests.support.servers import wait_until

__all__ = ["OtlpReceiver", "ReceivedSpan"]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


@dataclass
class ReceivedSpan:
    """One exported span, decoded: ids as hex, attributes as a dict."""

    name: str
    kind: str  # "SERVER", "CLIENT", ...
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    resource: dict[str, Any]


class OtlpReceiver:
    """ASGI app: the OTLP/HTTP traces endpoint; :attr:`spans` in arrival order."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await request_body(receive)
        if scope["method"] != "POST" or scope["path"] != "/v1/traces":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(ReceivedSpan(
                        name=s.name, kind=SpanPb.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                        trace_id=s.trace_id.hex(), span_id=s.span_id.hex(), parent_span_id=s.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        events=[(e.name, {a.key: _value(a.value) for a in e.attributes}) for e in s.events],
                        status_code=s.status.code, resource=resource))
        with self._lock:
            self.spans.extend(spans)
            self.requests += 1
        out = ExportTraceServiceResponse().SerializeToString()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/x-protobuf")]})
        await send({"type": "http.response.body", "body": out})

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 10.0) -> list[ReceivedSpan]:
        """The spans once ``predicate(spans)`` holds (polled with a deadline)."""
        wait_until(lambda: predicate(list(self.spans)), timeout=timeout, message="the OTLP export")
        return list(self.spans)
