"""The request line: one ``request`` log line for every request the traffic listener answers
or relays — A2A JSON-RPC and REST exchanges, Agent Card GETs, transparent relays, and the
gateway's own 400 / 404 answers.

:class:`gateway.app.ProxyApp` opens a :class:`RequestLine` per request (:func:`begin`), notes
the HTTP status the client was sent, and logs the line when the request is over; whoever
handles the request fills in what it knows (:func:`line_of` finds the line in the ASGI scope).
:meth:`RequestLine.fields` is the one place where the line's fields are assembled: a field
added to every request line (a trace id) is added there.

Fields (absent ones are ``null``): ``client`` (the peer's ``host:port``), ``http_method``,
``path``, ``status`` (the HTTP status sent, ``null`` when none was), ``jsonrpc_id``,
``binding`` (``jsonrpc``, ``rest`` or ``http``), ``version`` (the client's A2A version),
``upstream``, ``method`` (the A2A method, ``card``, ``other``), ``outcome`` (the
``a2a_gateway_requests_total`` label), ``task_id``, ``context_id``, ``bridge``,
``duration_s``; every log line carries ``pid`` besides (:mod:`gateway.observability.logging`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]

SCOPE_KEY = "a2a_gateway.request_line"
"""Where the request's :class:`RequestLine` is kept in the ASGI scope."""
REFUSED_KEY = "a2a_gateway.refused"
"""Where the connection layer (gateway/connections.py) notes, in the ASGI scope of a request
it answered itself at a bound, ``(status, outcome)`` for the request's line: the app only saw
the client go away."""


@dataclass(slots=True)
class RequestLine:
    """What the ``request`` line of one request says (see the module docstring)."""

    http_method: str
    path: str
    client: str | None = None
    status: int | None = None
    jsonrpc_id: Any = None
    binding: str | None = None
    version: str | None = None
    upstream: str | None = None
    method: str | None = None
    outcome: str = "ok"
    task_id: str | None = None
    context_id: str | None = None
    bridge: str | None = None
    trace_id: str | None = None  # 32 hex digits, when tracing is on (docs/observability.md §1)
    started: float = field(default_factory=time.perf_counter)

    def fields(self) -> dict[str, Any]:
        """The line's fields, as logged (``extra=``); ``duration_s`` is measured now."""
        return {
            "client": self.client, "http_method": self.http_method, "path": self.path,
            "status": self.status, "jsonrpc_id": self.jsonrpc_id, "binding": self.binding,
            "version": self.version, "upstream": self.upstream, "method": self.method,
            "outcome": self.outcome, "task_id": self.task_id, "context_id": self.context_id,
            "bridge": self.bridge, "trace_id": self.trace_id, "duration_s": round(time.perf_counter() - self.started, 6),
        }


def begin(scope: Scope) -> RequestLine:
    """Open the request line of the request ``scope`` describes and keep it in the scope."""
    peer = scope.get("client")
    client = None
    if peer:
        host, port = peer[0], peer[1]
        client = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    line = RequestLine(scope.get("method", ""), scope.get("path", ""), client)
    scope[SCOPE_KEY] = line
    return line


def line_of(scope: Scope) -> RequestLine:
    """The request line of ``scope`` (one opened on the spot when there is none: a handler
    called directly, whose line nobody logs)."""
    line = scope.get(SCOPE_KEY)
    return line if line is not None else begin(scope)
