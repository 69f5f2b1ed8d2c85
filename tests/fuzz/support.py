"""What the fuzz properties share: one raw HTTP exchange with the gateway, reading JSON text
as it was written (the raw text of a member, for ids compared byte for byte), reading an SSE
body strictly, and the checks every JSON-RPC answer must pass.

Everything here reads bytes independently of the gateway's own parsers and encoders
(gateway/a2a/jsonrpc.py, gateway/a2a/sse.py), so an oracle never agrees with the gateway
merely because it shares its code.
"""

from __future__ import annotations

import json
import math
import socket
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from tests.proxy.conftest import Harness

PROBE_ID = "a2a-gateway-probe"
"""The id of the gateway's own GetTask probes (docs/field-cases.md F08, F11): requests with it
are the gateway's, not a forwarded client request."""

_INVALID = object()


# ------------------------------------------------------------------------------ JSON text

def loads_or_invalid(body: bytes) -> Any:
    """``body`` parsed as strict RFC 8259 JSON (UTF-8, no BOM, no NaN, numbers within double
    range, no lone surrogates), or :data:`INVALID`. orjson is such a parser and decides what
    is JSON; the values are then read exactly (integers beyond 64 bits stay integers, which
    orjson turns into floats) by the standard library, unless it runs out of stack."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return INVALID
    try:
        return json.loads(body)
    except RecursionError:
        return doc


INVALID: Any = _INVALID

MAX_JSON_DEPTH = 128
"""``limits.max_json_depth`` by default (docs/guide/bounds.md): objects and arrays nested deeper,
the top level counting one, are refused — a client's as -32600 / HTTP 400, a worker's as a
transport-class error or an -32006 event."""


def depth(doc: Any) -> int:
    """How deep ``doc`` nests objects and arrays (a scalar: 0; ``{"a": [1]}``: 2)."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def too_deep(body: bytes) -> bool:
    """``body`` is JSON nested past :data:`MAX_JSON_DEPTH` (also past orjson's own 1024)."""
    try:
        return depth(orjson.loads(body)) > MAX_JSON_DEPTH
    except orjson.JSONDecodeError as exc:
        return str(exc).startswith("depth limit exceeded")

_WS = frozenset(b" \t\r\n")


def _skip_ws(b: bytes, i: int) -> int:
    while i < len(b) and b[i] in _WS:
        i += 1
    return i


def _string_end(b: bytes, i: int) -> int:
    """Index after the JSON string starting at ``b[i] == '"'``."""
    i += 1
    while True:
        c = b[i]
        if c == 0x5C:  # backslash: skip the escaped character
            i += 2
        elif c == 0x22:
            return i + 1
        else:
            i += 1


def _value_end(b: bytes, i: int) -> int:
    """Index after the JSON value starting at ``b[i]`` (iterative: any depth)."""
    c = b[i]
    if c == 0x22:
        return _string_end(b, i)
    if c in b"[{":
        depth = 0
        while True:
            c = b[i]
            if c == 0x22:
                i = _string_end(b, i)
                continue
            if c in b"[{":
                depth += 1
            elif c in b"]}":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    while i < len(b) and b[i] not in b",]} \t\r\n":
        i += 1
    return i


def top_members(body: bytes) -> list[tuple[str, bytes]] | None:
    """The members of the top-level JSON object in ``body`` as ``(key, raw value text)``,
    in order, duplicates included; ``None`` when ``body`` is no object. ``body`` must be
    valid JSON."""
    b = body
    i = _skip_ws(b, 0)
    if i >= len(b) or b[i] != 0x7B:
        return None
    i = _skip_ws(b, i + 1)
    out: list[tuple[str, bytes]] = []
    while b[i] != 0x7D:
        key_end = _string_end(b, i)
        key = json.loads(b[i:key_end])
        i = _skip_ws(b, _skip_ws(b, key_end) + 1)  # past the ':'
        end = _value_end(b, i)
        out.append((key, b[i:end]))
        i = _skip_ws(b, end)
        if b[i] == 0x2C:
            i = _skip_ws(b, i + 1)
    return out


def raw_member(body: bytes, name: str) -> bytes | None:
    """The raw text of top-level member ``name`` (the last one when duplicated, as every
    common JSON parser reads it), or ``None``."""
    found = None
    for key, raw in top_members(body) or ():
        if key == name:
            found = raw
    return found


def envelope_id(body: bytes) -> ClientId:
    """The id a body nested too deep to parse must be answered with: the top-level object's
    ``id`` member as :func:`raw_member` reads it without a parse; null when the body is no
    object closed at its end, or the id no string (without lone surrogates), number or null."""
    try:
        start = _skip_ws(body, 0)
        if body[start] != 0x7B or _skip_ws(body, _value_end(body, start)) != len(body):
            return ClientId(None, b"null")
        raw = raw_member(body, "id")
        value = json.loads(raw) if raw is not None else None
    except (IndexError, ValueError):
        return ClientId(None, b"null")
    if raw is None or not is_valid_id(value):
        return ClientId(None, b"null")
    if isinstance(value, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        return ClientId(None, b"null")  # a lone surrogate: no string a JSON encoder writes back
    return ClientId(value, raw)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_valid_id(value: Any) -> bool:
    """A JSON-RPC id: string, number or null (the JSON-RPC 2.0 Request object; docs/field-cases.md F15)."""
    return value is None or isinstance(value, str) or is_number(value)


@dataclass(frozen=True)
class ClientId:
    """The id a JSON-RPC answer must carry: ``value`` as parsed, ``raw`` as the client wrote
    it (numbers are compared by their text)."""

    value: Any
    raw: bytes | None

    @classmethod
    def of(cls, body: bytes, doc: Any) -> ClientId:
        """The client's id of a valid single request ``doc``, or null when it has none that
        can be read (not JSON, a batch, an invalid id), as the JSON-RPC 2.0 Response object says."""
        if not isinstance(doc, dict) or "id" not in doc or not is_valid_id(doc["id"]):
            return cls(None, b"null")
        return cls(doc["id"], raw_member(body, "id"))


def same_value(got: Any, want: Any) -> bool:
    """Equal as JSON values, with the JSON type kept (``1`` is not ``1.0``, ``"1"`` not ``1``)."""
    if is_number(want) and is_number(got):
        if isinstance(want, float) != isinstance(got, float):
            return False
        return got == want and not (isinstance(want, float) and math.copysign(1, got) != math.copysign(1, want))
    return type(got) is type(want) and got == want


# ------------------------------------------------------------------------------ the wire

@dataclass
class Reply:
    """A gateway response, read whole."""

    status: int
    headers: httpx.Headers
    body: bytes

    @property
    def media(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()


def send(h: Harness, method: str, target: bytes, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> Reply:
    """One request to the gateway with ``target`` (raw path and query bytes) exactly as
    given; the whole response body is read, an SSE stream included."""
    url = httpx.URL(h.gateway.url).copy_with(raw_path=target)
    with h.http.stream(method, url, content=body, headers=headers or {}) as r:
        raw = b"".join(r.iter_raw())
    return Reply(r.status_code, r.headers, raw)


def send_raw(h: Harness, method: str, target: bytes, body: bytes | None = None,
             headers: dict[str, str] | None = None, timeout: float = 20.0) -> Reply:
    """:func:`send` on a raw socket: the request line carries ``target`` byte for byte
    (httpx would normalize dot segments and escapes away). One connection per request."""
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"host: " + f"127.0.0.1:{h.gateway.port}".encode(),
             b"connection: close"]
    lines += [k.encode() + b": " + v.encode("latin-1") for k, v in (headers or {}).items()]
    if body is not None:
        lines.append(b"content-length: " + str(len(body)).encode())
    data = b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")
    with socket.create_connection(("127.0.0.1", h.gateway.port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, sep, rest = raw.partition(b"\r\n\r\n")
    assert sep, f"no complete response head: {raw[:300]!r}"
    status_line, *header_lines = head.split(b"\r\n")
    parsed = httpx.Headers([tuple(x.decode("latin-1").strip() for x in line.split(b":", 1)) for line in header_lines])
    if parsed.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        rest = out
    elif "content-length" in parsed:
        assert len(rest) == int(parsed["content-length"]), (parsed, rest[:200])
    return Reply(int(status_line.split()[1]), parsed, rest)


def client_calls(h: Harness, since: int) -> list[Any]:
    """The worker's requests after the first ``since`` that are not the gateway's own (card
    fetches, GetTask probes): what was forwarded for the client."""
    out = []
    for req in h.worker.requests[since:]:
        if "/.well-known/" in req.path:
            continue
        if isinstance(req.json, dict) and req.json.get("id") == PROBE_ID:
            continue
        if req.http_method == "GET" and "historyLength=0" in req.query and req.json is None \
                and req.headers.get("accept") == "application/json" and "/tasks/" in req.path:
            continue  # the REST probe: GET {base}/tasks/{id}?historyLength=0 (docs/protocol.md §1.5)
        out.append(req)
    return out


# ------------------------------------------------------------------------------ SSE

@dataclass
class Frame:
    event: str | None
    data: bytes | None  # the joined data lines; None for a comment-only frame
    comments: list[bytes]


def sse_frames(body: bytes) -> list[Frame]:
    """Split a gateway SSE body into frames, strictly: LF line ends and a blank line after
    every frame (docs/field-cases.md F08: "Every frame the gateway writes ends with a blank
    line"). Raises AssertionError on anything else."""
    assert b"\r" not in body, body[:200]
    assert body == b"" or body.endswith(b"\n\n"), body[-200:]
    frames = []
    for block in body[:-2].split(b"\n\n") if body else []:
        event, data, comments = None, [], []
        for line in block.split(b"\n"):
            assert line, block  # no empty frame: a blank line ends a frame
            if line.startswith(b":"):
                comments.append(line[1:])
                continue
            name, _, value = line.partition(b":")
            value = value.removeprefix(b" ")
            if name == b"data":
                data.append(value)
            elif name == b"event":
                event = value.decode()
        frames.append(Frame(event, b"\n".join(data) if data else None, comments))
    return frames


# ------------------------------------------------------------------------------ JSON-RPC answers

def check_response_doc(text: bytes, want: ClientId) -> dict[str, Any]:
    """``text`` is one JSON-RPC 2.0 response object carrying the client's id: ``jsonrpc``
    "2.0", the id (numbers by their raw text when ``want.raw`` says so), exactly one of
    ``result`` / ``error``, an error object with an integer ``code`` and a string
    ``message`` (the JSON-RPC 2.0 Response and Error objects). Returns the parsed object (without an ``"error":
    null`` beside a result)."""
    doc = loads_or_invalid(text)
    assert doc is not INVALID, f"not JSON: {text[:300]!r}"
    assert isinstance(doc, dict), f"not a JSON-RPC response object: {text[:300]!r}"
    assert doc.get("jsonrpc") == "2.0", f"jsonrpc member: {text[:300]!r}"
    assert "id" in doc, text[:300]
    assert same_value(doc["id"], want.value), f"id {doc['id']!r}, client sent {want.value!r}: {text[:300]!r}"
    if is_number(want.value) and want.raw is not None:  # exactly as the client wrote it (1e5, 1.50, -0)
        assert raw_member(text, "id") == want.raw, f"id text {raw_member(text, 'id')!r}, client wrote {want.raw!r}"
    members = {k for k in ("result", "error") if k in doc and not (k == "error" and doc[k] is None and "result" in doc)}
    # ("error": null beside a result is tolerated, as the gateway itself reads it on the way in)
    assert len(members) == 1, f"result xor error: {text[:300]!r}"
    if members == {"error"}:
        err = doc["error"]
        assert isinstance(err, dict), f"error is no object: {text[:300]!r}"
        assert isinstance(err.get("code"), int) and not isinstance(err.get("code"), bool), text[:300]
        assert isinstance(err.get("message"), str), text[:300]
    return {k: v for k, v in doc.items() if k in members or k not in ("result", "error")}


def check_jsonrpc_reply(reply: Reply, want: ClientId) -> list[dict[str, Any]]:
    """A JSON-RPC answer, plain or streamed: every document it carries passes
    :func:`check_response_doc`. Returns them in order (one for plain JSON)."""
    if reply.media == "text/event-stream":
        docs = []
        for frame in sse_frames(reply.body):
            if frame.data is None:
                continue  # a comment (keep-alive) frame
            docs.append(check_response_doc(frame.data, want))
        assert docs, f"an SSE answer with no event: {reply.body[:300]!r}"
        return docs
    assert reply.media == "application/json", (reply.status, reply.headers, reply.body[:300])
    return [check_response_doc(reply.body, want)]
