"""A scripted, misbehaving A2A worker: a pure-ASGI app whose answers each test defines.

Typical use::

    worker = ScriptedWorker()
    worker.on("GetTask", json_result={"id": "t-1", "contextId": "c-1", "status": {"state": "input_required"}})
    gate = Gate()
    worker.on("SendStreamingMessage", sse=[Event(result={"task": {...}}), gate, Event(result={...})])
    with serve_in_thread(worker, name="worker") as srv:
        ...  # point the gateway at srv.url, drive it, then:
        gate.release()
        assert worker.calls("GetTask")[0].json["params"] == {"id": "t-1"}

Scripts for a JSON-RPC method (or an HTTP method + path) are kept in a FIFO queue; each request
uses the first script that still has uses left (``times=1`` by default, ``times=None`` = forever).
"""

from __future__ import annotations

import asyncio
import inspect
import json as _stdjson
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import orjson

__all__ = [
    "ANY",
    "NULL_ID",
    "Abort",
    "Close",
    "Data",
    "Event",
    "Gate",
    "JsonBody",
    "JsonError",
    "JsonResult",
    "Pause",
    "Raw",
    "ReceivedRequest",
    "Script",
    "ScriptedWorker",
    "Sse",
]


class _Marker:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: ``worker.on(ANY, ...)``: fallback script for any JSON-RPC method whose own queue is empty.
ANY: Any = _Marker("ANY")
#: ``id=NULL_ID``: emit ``"id": null`` instead of echoing the request id.
NULL_ID: Any = _Marker("NULL_ID")
_UNSET: Any = _Marker("UNSET")

_POLL = 0.002  # seconds between checks while a stream waits on a Gate / hold_open / Pause


# --------------------------------------------------------------------------- JSON helpers


def _loads(body: bytes) -> Any:
    """stdlib json: keeps every id exact (orjson turns integers beyond 64 bits into floats).
    Raises ValueError."""
    return _stdjson.loads(body.decode("utf-8"))


def _dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError:  # e.g. int > 64 bit: stdlib keeps it exact
        return _stdjson.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# --------------------------------------------------------------------------- records


@dataclass
class ReceivedRequest:
    """One HTTP request as the worker saw it."""

    method: str | None  # JSON-RPC method, or None (REST, GET, non-JSON body, no "method")
    path: str
    headers: dict[str, str]  # lower-cased names; repeated headers joined with ", "
    body: bytes
    json: Any | None  # parsed body, or None if empty / not JSON
    http_method: str = "POST"
    query: str = ""
    #: set when the client went away while this request's SSE stream was still open
    disconnected: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def rpc_id(self) -> Any:
        """The JSON-RPC id exactly as sent (None if absent)."""
        return self.json.get("id") if isinstance(self.json, dict) else None

    @property
    def params(self) -> Any:
        return self.json.get("params") if isinstance(self.json, dict) else None


def default_card(**capabilities: Any) -> dict[str, Any]:
    """A valid v1.0 Agent Card for the scripted worker (streaming and push on by default).

    Its JSON-RPC interface is listed for v1.0 and v0.3: the scripted worker answers whatever
    method a test scripts, of either version, so the gateway must not bridge (docs/bridge.md
    §3.1) a v0.3 client of it. Tests of the bridge give the worker a one-version card."""
    return {
        "name": "scripted", "description": "scripted test worker", "version": "1.0.0",
        "supportedInterfaces": [{"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC",
                                 "protocolVersion": "1.0"},
                                {"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC",
                                 "protocolVersion": "0.3"}],
        "capabilities": {"streaming": True, "pushNotifications": True, **capabilities},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "echo", "tags": ["test"]}],
    }


# --------------------------------------------------------------------------- SSE steps


@dataclass
class Event:
    """One SSE event carrying a JSON-RPC response: ``data: {"jsonrpc":"2.0","id":..,"result":..}``.

    ``id=None`` echoes the request id; ``NULL_ID`` gives ``null``; anything else is used as-is.
    With ``error`` set the envelope has ``"error"`` instead of ``"result"``.  ``event`` adds an
    ``event: <name>`` line (as sse-starlette does for errors).
    """

    result: Any = _UNSET
    id: Any = None
    error: Any = None
    event: str | None = None


@dataclass
class Data:
    """One SSE event whose ``data:`` is ``payload`` JSON-encoded without envelope (REST binding)."""

    payload: Any
    event: str | None = None


class Gate:
    """Pause the stream until the test releases it.

    ``Gate()`` owns a ``threading.Event``; ``Gate(ev)`` wraps a ``threading.Event`` or (for
    ``serve_async`` in the same loop) an ``asyncio.Event``.  ``gate.reached`` (threading.Event) is
    set when a stream arrives at the gate, i.e. everything before it has been written.  If not
    released within ``timeout`` s the stream ends and an entry is added to ``worker.errors``.
    """

    def __init__(self, event: threading.Event | asyncio.Event | None = None, *, timeout: float = 10.0) -> None:
        self.event = event if event is not None else threading.Event()
        self.timeout = timeout
        self.reached = threading.Event()

    def release(self) -> None:
        """Thread-safe for threading.Event; for asyncio.Event call from the worker's loop."""
        self.event.set()

    set = release

    def is_set(self) -> bool:
        return self.event.is_set()

    def __repr__(self) -> str:
        return f"Gate(released={self.is_set()}, reached={self.reached.is_set()})"


@dataclass
class Close:
    """End the body cleanly right here (remaining steps are ignored)."""


@dataclass
class Abort:
    """Drop the connection mid-body (no chunked terminator): the app raises after headers were
    sent, so uvicorn closes the transport (and logs an ASGI exception)."""


@dataclass
class Pause:
    """Write nothing for ``seconds`` (simulates an idle upstream; NOT for test synchronisation)."""

    seconds: float


Step = Union[bytes, Event, Data, Gate, Close, Abort, Pause]


# --------------------------------------------------------------------------- responses


@dataclass
class JsonResult:
    result: Any
    id: Any = None  # None -> echo request id; NULL_ID -> null
    status: int = 200
    headers: Mapping[str, str] | None = None


@dataclass
class JsonError:
    error: Mapping[str, Any]
    id: Any = None
    status: int = 200
    headers: Mapping[str, str] | None = None


@dataclass
class Raw:
    """Exactly this response. ``content-length`` is added only if not given in ``headers``."""

    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass
class JsonBody:
    """Arbitrary JSON body (no JSON-RPC envelope), e.g. REST answers or agent cards."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] | None = None


@dataclass
class Sse:
    steps: Sequence[Step]
    hold_open: bool = False
    crlf: bool = False
    status: int = 200
    headers: Mapping[str, str] | None = None  # default content-type text/event-stream, cache-control no-store


Response = Union[JsonResult, JsonError, Raw, JsonBody, Sse]
Handler = Callable[["ReceivedRequest"], Any]  # returns a Response (or an awaitable of one)


@dataclass
class Script:
    """A queued answer. ``hits`` counts the requests it served."""

    response: Response | None
    handler: Handler | None
    times: int | None
    hits: int = 0

    def _available(self) -> bool:
        return self.times is None or self.hits < self.times


def _build_response(
    *,
    json_result: Any,
    json_error: Mapping[str, Any] | None,
    raw: tuple[int, Mapping[str, str], bytes] | Raw | None,
    sse: Sequence[Step] | None,
    json_body: Any,
    handler: Handler | None,
    respond: Response | None,
    hold_open: bool,
    crlf: bool,
    id: Any,
    status: int | None,
    headers: Mapping[str, str] | None,
) -> Response | None:
    given = [
        name
        for name, value in (
            ("json_result", json_result),
            ("json_error", json_error if json_error is not None else _UNSET),
            ("raw", raw if raw is not None else _UNSET),
            ("sse", sse if sse is not None else _UNSET),
            ("json_body", json_body),
            ("handler", handler if handler is not None else _UNSET),
            ("respond", respond if respond is not None else _UNSET),
        )
        if value is not _UNSET
    ]
    if len(given) != 1:
        raise TypeError(f"give exactly one of json_result/json_error/raw/sse/json_body/handler/respond, got {given}")
    if respond is not None:
        return respond
    if handler is not None:
        return None
    if json_result is not _UNSET:
        return JsonResult(json_result, id=id, status=status or 200, headers=headers)
    if json_error is not None:
        return JsonError(json_error, id=id, status=status or 200, headers=headers)
    if raw is not None:
        if isinstance(raw, Raw):
            return raw
        st, hdrs, body = raw
        return Raw(st, dict(hdrs), bytes(body))
    if sse is not None:
        steps = list(sse)
        if id is not None:
            steps = [Event(s.result, id, s.error, s.event) if isinstance(s, Event) and s.id is None else s for s in steps]
        return Sse(steps, hold_open=hold_open, crlf=crlf, status=status or 200, headers=headers)
    return JsonBody(json_body, status=status or 200, headers=headers)


# --------------------------------------------------------------------------- the worker


class _StreamState:
    __slots__ = ("disconnected", "finished", "generation")

    def __init__(self, generation: int) -> None:
        self.disconnected = False
        self.finished = False
        self.generation = generation


class _AbortStream(Exception):
    pass


class ScriptedWorker:
    """Pure-ASGI scripted A2A worker (HTTP + lifespan). Thread-safe to script and inspect."""

    #: served at GET /.well-known/agent-card.json when no path script matches (a worker has a
    #: card; the gateway admits new tasks against it). Set to None to serve 404 instead.
    default_card: dict[str, Any] | None

    def __init__(self, name: str = "worker") -> None:
        self.default_card = default_card()
        self.name = name
        self._lock = threading.Lock()
        self._rpc_scripts: dict[Any, list[Script]] = {}
        self._path_scripts: list[tuple[str, str | re.Pattern[str], Script]] = []
        self._requests: list[ReceivedRequest] = []
        self._unmatched: list[ReceivedRequest] = []
        self._errors: list[str] = []
        self._generation = 0
        self._open_streams = 0
        self._stream_disconnects = 0
        self._streams_completed = 0
        #: set the first time a client disconnects from an open SSE stream
        self.stream_closed = threading.Event()

    # ----------------------------------------------------------------- scripting

    def on(
        self,
        method: str,
        *,
        json_result: Any = _UNSET,
        json_error: Mapping[str, Any] | None = None,
        raw: tuple[int, Mapping[str, str], bytes] | Raw | None = None,
        sse: Sequence[Step] | None = None,
        handler: Handler | None = None,
        respond: Response | None = None,
        hold_open: bool = False,
        crlf: bool = False,
        id: Any = None,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        times: int | None = 1,
    ) -> Script:
        """Queue an answer for JSON-RPC ``method`` (any path). ``method=ANY`` is the fallback.

        Exactly one of: ``json_result`` / ``json_error`` (enveloped, request id echoed unless
        ``id=`` overrides; ``NULL_ID`` for null) / ``raw=(status, headers, body)`` / ``sse=[steps]``
        (with ``hold_open``, ``crlf``) / ``handler=fn(ReceivedRequest) -> Response`` (sync or async)
        / ``respond=<Response object>``.  ``times=None`` answers forever.
        """
        script = Script(
            _build_response(
                json_result=json_result, json_error=json_error, raw=raw, sse=sse, json_body=_UNSET,
                handler=handler, respond=respond, hold_open=hold_open, crlf=crlf, id=id,
                status=status, headers=headers,
            ),
            handler,
            times,
        )
        with self._lock:
            self._rpc_scripts.setdefault(method, []).append(script)
        return script

    def on_path(
        self,
        http_method: str,
        path: str | re.Pattern[str],
        *,
        json_body: Any = _UNSET,
        raw: tuple[int, Mapping[str, str], bytes] | Raw | None = None,
        sse: Sequence[Step] | None = None,
        handler: Handler | None = None,
        respond: Response | None = None,
        hold_open: bool = False,
        crlf: bool = False,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        times: int | None = 1,
    ) -> Script:
        """Queue an answer for a non-JSON-RPC request (REST binding, agent card, ...).

        Matched on HTTP method (``"*"`` = any) and path (exact string, or a compiled regex that
        must ``fullmatch``).  Path scripts are checked before JSON-RPC dispatch.
        """
        script = Script(
            _build_response(
                json_result=_UNSET, json_error=None, raw=raw, sse=sse, json_body=json_body,
                handler=handler, respond=respond, hold_open=hold_open, crlf=crlf, id=None,
                status=status, headers=headers,
            ),
            handler,
            times,
        )
        with self._lock:
            self._path_scripts.append((http_method.upper(), path, script))
        return script

    def reset(self) -> None:
        """Forget all scripts and records (does not touch streams in flight)."""
        with self._lock:
            self._rpc_scripts.clear()
            self._path_scripts.clear()
            self._requests.clear()
            self._unmatched.clear()
            self._errors.clear()
            self._stream_disconnects = self._streams_completed = 0
            self.stream_closed.clear()

    def close_streams(self) -> None:
        """End every SSE stream open right now (gates/hold_open/pauses stop waiting).

        serve_in_thread/serve_async call this before shutting the server down."""
        with self._lock:
            self._generation += 1

    # ----------------------------------------------------------------- inspection (thread-safe)

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Snapshot of every request received, in arrival order."""
        with self._lock:
            return list(self._requests)

    def calls(self, method: str | None) -> list[ReceivedRequest]:
        """Snapshot of requests whose JSON-RPC method is ``method``."""
        with self._lock:
            return [r for r in self._requests if r.method == method]

    def path_calls(self, http_method: str, path: str) -> list[ReceivedRequest]:
        with self._lock:
            return [r for r in self._requests if r.http_method == http_method.upper() and r.path == path]

    @property
    def unmatched(self) -> list[ReceivedRequest]:
        """Requests that found no script (answered -32601 / -32700 / -32600 / 404)."""
        with self._lock:
            return list(self._unmatched)

    @property
    def errors(self) -> list[str]:
        """Problems inside the worker (gate timeouts, handler exceptions)."""
        with self._lock:
            return list(self._errors)

    @property
    def open_streams(self) -> int:
        with self._lock:
            return self._open_streams

    @property
    def stream_disconnects(self) -> int:
        """How many SSE streams the client abandoned before the worker ended them."""
        with self._lock:
            return self._stream_disconnects

    @property
    def streams_completed(self) -> int:
        """How many SSE streams the worker ended itself (last step, Close, close_streams)."""
        with self._lock:
            return self._streams_completed

    # ----------------------------------------------------------------- ASGI

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            return

        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", []):
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        try:
            parsed = _loads(body) if body.strip() else None
            parse_ok = parsed is not None or body.strip() == b"null"
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
            parsed, parse_ok = None, False
        rpc_method = parsed.get("method") if isinstance(parsed, dict) else None
        request = ReceivedRequest(
            method=rpc_method if isinstance(rpc_method, str) else None,
            path=scope.get("path", "/"),
            headers=headers,
            body=body,
            json=parsed,
            http_method=scope.get("method", "GET").upper(),
            query=scope.get("query_string", b"").decode("latin-1"),
        )

        with self._lock:
            self._requests.append(request)
            script = self._pick(request)
            if script is None:
                self._unmatched.append(request)

        if script is None:
            await self._send_unmatched(request, body, parse_ok, send)
            return
        response = script.response
        if script.handler is not None:
            try:
                response = script.handler(request)
                if inspect.isawaitable(response):
                    response = await response
            except Exception as exc:
                self._error(f"handler for {request.method or request.path} raised {exc!r}")
                raise
        await self._send_response(response, request, receive, send)

    def _pick(self, request: ReceivedRequest) -> Script | None:  # caller holds the lock
        for http_method, path, script in self._path_scripts:
            if not script._available() or http_method not in ("*", request.http_method):
                continue
            if (path.fullmatch(request.path) if isinstance(path, re.Pattern) else path == request.path):
                script.hits += 1
                return script
        if request.method is None:
            return None
        for key in (request.method, ANY):
            for script in self._rpc_scripts.get(key, ()):
                if script._available():
                    script.hits += 1
                    return script
        return None

    def _error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    # ----------------------------------------------------------------- responses

    @staticmethod
    def _envelope(request: ReceivedRequest, id_override: Any, key: str, value: Any) -> bytes:
        if id_override is None:
            rid = request.rpc_id
        elif id_override is NULL_ID:
            rid = None
        else:
            rid = id_override
        return _dumps({"jsonrpc": "2.0", "id": rid, key: value})

    @staticmethod
    async def _send_simple(send: Callable[..., Any], status: int, headers: Iterable[tuple[str, str]], body: bytes) -> None:
        hdrs = [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in headers]
        if not any(k == b"content-length" for k, _ in hdrs):
            hdrs.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": hdrs})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _send_json(self, send: Callable[..., Any], status: int, headers: Mapping[str, str] | None, body: bytes) -> None:
        merged = {"content-type": "application/json"}
        merged.update({k.lower(): v for k, v in (headers or {}).items()})
        await self._send_simple(send, status, merged.items(), body)

    async def _send_unmatched(self, request: ReceivedRequest, body: bytes, parse_ok: bool, send: Callable[..., Any]) -> None:
        if request.method is not None:
            err = {"code": -32601, "message": f"no script for {request.method}"}
            await self._send_json(send, 200, None, self._envelope(request, None, "error", err))
        elif request.http_method == "POST" and not parse_ok:
            err = {"code": -32700, "message": "no script: body is not JSON"}
            await self._send_json(send, 200, None, self._envelope(request, NULL_ID, "error", err))
        elif request.http_method == "POST" and isinstance(request.json, dict):
            err = {"code": -32600, "message": f"no script for POST {request.path} (no JSON-RPC method)"}
            await self._send_json(send, 200, None, self._envelope(request, None, "error", err))
        elif request.http_method == "GET" and request.path == "/.well-known/agent-card.json" and self.default_card:
            await self._send_json(send, 200, None, _dumps(self.default_card))
        else:
            text = f"no script for {request.http_method} {request.path}".encode()
            await self._send_simple(send, 404, [("content-type", "text/plain")], text)

    async def _send_response(self, response: Any, request: ReceivedRequest, receive: Any, send: Any) -> None:
        if isinstance(response, JsonResult):
            await self._send_json(send, response.status, response.headers,
                                  self._envelope(request, response.id, "result", response.result))
        elif isinstance(response, JsonError):
            await self._send_json(send, response.status, response.headers,
                                  self._envelope(request, response.id, "error", dict(response.error)))
        elif isinstance(response, Raw):
            await self._send_simple(send, response.status, response.headers.items(), response.body)
        elif isinstance(response, JsonBody):
            await self._send_json(send, response.status, response.headers, _dumps(response.body))
        elif isinstance(response, Sse):
            await self._stream(response, request, receive, send)
        else:
            raise TypeError(f"handler returned {response!r}, expected JsonResult/JsonError/Raw/JsonBody/Sse")

    # ----------------------------------------------------------------- SSE

    def _encode(self, step: Event | Data, request: ReceivedRequest, crlf: bool) -> bytes:
        if isinstance(step, Event):
            if step.error is not None:
                payload = self._envelope(request, step.id, "error", step.error)
            else:
                payload = self._envelope(request, step.id, "result", None if step.result is _UNSET else step.result)
        else:
            payload = _dumps(step.payload)
        prefix = f"event: {step.event}\n".encode() if step.event else b""
        frame = prefix + b"data: " + payload + b"\n\n"
        return frame.replace(b"\n", b"\r\n") if crlf else frame

    async def _wait(self, state: _StreamState, cond: Callable[[], bool], timeout: float | None) -> str:
        """Wait (polling, without blocking the loop) -> "ok" | "disconnected" | "closing" | "timeout"."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if cond():
                return "ok"
            if state.disconnected:
                return "disconnected"
            if state.generation != self._generation:
                return "closing"
            if deadline is not None and loop.time() >= deadline:
                return "timeout"
            await asyncio.sleep(_POLL)

    async def _stream(self, script: Sse, request: ReceivedRequest, receive: Any, send: Any) -> None:
        with self._lock:
            state = _StreamState(self._generation)
            self._open_streams += 1

        def client_gone() -> None:
            if state.finished or state.disconnected:
                return
            state.disconnected = True
            request.disconnected.set()
            with self._lock:
                self._stream_disconnects += 1
            self.stream_closed.set()

        async def watch_disconnect() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    client_gone()
                    return

        async def write(data: bytes, more: bool) -> bool:
            if state.disconnected:
                return False
            try:
                await send({"type": "http.response.body", "body": data, "more_body": more})
            except (OSError, RuntimeError):
                client_gone()
                return False
            await asyncio.sleep(0)  # let the transport flush / the watcher run between writes
            return not state.disconnected

        headers = {"content-type": "text/event-stream", "cache-control": "no-store", "x-accel-buffering": "no"}
        headers.update({k.lower(): v for k, v in (script.headers or {}).items()})
        watcher = asyncio.create_task(watch_disconnect())
        ended_by_worker = False
        try:
            await send({
                "type": "http.response.start",
                "status": script.status,
                "headers": [(k.encode("latin-1"), str(v).encode("latin-1")) for k, v in headers.items()],
            })
            alive = True
            for step in script.steps:
                if isinstance(step, (bytes, bytearray, memoryview)):
                    alive = await write(bytes(step), True)
                elif isinstance(step, (Event, Data)):
                    alive = await write(self._encode(step, request, script.crlf), True)
                elif isinstance(step, Gate):
                    step.reached.set()
                    outcome = await self._wait(state, step.is_set, step.timeout)
                    if outcome == "timeout":
                        self._error(f"Gate not released within {step.timeout}s ({request.method or request.path})")
                    alive = outcome == "ok"
                elif isinstance(step, Pause):
                    outcome = await self._wait(state, lambda: False, step.seconds)
                    alive = outcome == "timeout"
                elif isinstance(step, Close):
                    break
                elif isinstance(step, Abort):
                    raise _AbortStream(f"scripted Abort on {request.method or request.path}")
                else:
                    raise TypeError(f"unknown SSE step {step!r}")
                if not alive:
                    break
            else:
                if script.hold_open:
                    await self._wait(state, lambda: False, None)
            if not state.disconnected:
                state.finished = True
                ended_by_worker = True
                await write(b"", False)
        finally:
            state.finished = True
            watcher.cancel()
            with self._lock:
                self._open_streams -= 1
                if ended_by_worker:
                    self._streams_completed += 1
