"""JSON-RPC 2.0 envelopes for A2A: method table, request parsing, error objects.

Implements docs/protocol.md §1.2 (method names of v1.0 and v0.3), §6 (error codes and bodies) and
the docs/field-cases.md F15 envelope rules. Pure: stdlib + orjson only.

Request parsing never raises: :func:`parse_request` returns either a :class:`Request` or a
:class:`ParseFailure` that already holds the JSON-RPC error to send back, with the client's id
where it could be read.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.a2a.version import ProtocolVersion
from gateway.errors import NestingTooDeepError, UnencodableError

JsonId = str | int | float | None

# Standard JSON-RPC codes (docs/protocol.md §6.2)
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# A2A codes (docs/protocol.md §6.1)
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
INVALID_AGENT_RESPONSE = -32006
EXTENDED_AGENT_CARD_NOT_CONFIGURED = -32007
EXTENSION_SUPPORT_REQUIRED = -32008
VERSION_NOT_SUPPORTED = -32009
TASK_GENERATION_MISMATCH = -32010
"""TaskGenerationMismatchError (A2A v1.1 draft, SPEC11 §3.3.2, §5.4): ``ifGenerationMatch``
did not match; a worker's, relayed untouched (docs/resume.md §3.3)."""

ERROR_REASONS: dict[int, str] = {
    TASK_NOT_FOUND: "TASK_NOT_FOUND",
    TASK_NOT_CANCELABLE: "TASK_NOT_CANCELABLE",
    PUSH_NOTIFICATION_NOT_SUPPORTED: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    CONTENT_TYPE_NOT_SUPPORTED: "CONTENT_TYPE_NOT_SUPPORTED",
    INVALID_AGENT_RESPONSE: "INVALID_AGENT_RESPONSE",
    EXTENDED_AGENT_CARD_NOT_CONFIGURED: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    EXTENSION_SUPPORT_REQUIRED: "EXTENSION_SUPPORT_REQUIRED",
    VERSION_NOT_SUPPORTED: "VERSION_NOT_SUPPORTED",
    TASK_GENERATION_MISMATCH: "TASK_GENERATION_MISMATCH",
}
KNOWN_CODES = frozenset(
    {PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR}
    | set(ERROR_REASONS)
)
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
ERROR_DOMAIN = "a2a-protocol.org"


MAX_JSON_DEPTH = 128
"""The default of ``limits.max_json_depth``: objects and arrays nested deeper are refused."""


class Operation(enum.StrEnum):
    """Version-independent A2A operation (docs/protocol.md §1.2 rows); values are v1.0 names."""

    SEND = "SendMessage"
    STREAM = "SendStreamingMessage"
    GET = "GetTask"
    LIST = "ListTasks"
    CANCEL = "CancelTask"
    SUBSCRIBE = "SubscribeToTask"
    PUSH_CREATE = "CreateTaskPushNotificationConfig"
    PUSH_GET = "GetTaskPushNotificationConfig"
    PUSH_LIST = "ListTaskPushNotificationConfigs"
    PUSH_DELETE = "DeleteTaskPushNotificationConfig"
    EXTENDED_CARD = "GetExtendedAgentCard"


@dataclass(frozen=True, slots=True)
class MethodInfo:
    """What the gateway knows about one JSON-RPC method name."""

    name: str
    operation: Operation
    version: ProtocolVersion
    streaming: bool = field(init=False)
    """True when the method answers with an SSE stream (F09)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "streaming", self.operation in (Operation.STREAM, Operation.SUBSCRIBE))


_V03_NAMES = {
    "message/send": Operation.SEND,
    "message/stream": Operation.STREAM,
    "tasks/get": Operation.GET,
    "tasks/cancel": Operation.CANCEL,
    "tasks/resubscribe": Operation.SUBSCRIBE,
    "tasks/pushNotificationConfig/set": Operation.PUSH_CREATE,
    "tasks/pushNotificationConfig/get": Operation.PUSH_GET,
    "tasks/pushNotificationConfig/list": Operation.PUSH_LIST,
    "tasks/pushNotificationConfig/delete": Operation.PUSH_DELETE,
    "agent/getAuthenticatedExtendedCard": Operation.EXTENDED_CARD,
}
METHODS: dict[str, MethodInfo] = {
    **{op.value: MethodInfo(op.value, op, ProtocolVersion.V1_0) for op in Operation},
    **{n: MethodInfo(n, op, ProtocolVersion.V0_3) for n, op in _V03_NAMES.items()},
}
# v0.3 method namespaces: an unknown name inside them is answered -32601 (F15); any other
# unknown method (a custom extension method, a newer spec's method) passes through.
_V03_NAMESPACES = ("message/", "tasks/", "agent/")
_TASK_GET = {ProtocolVersion.V1_0: "GetTask", ProtocolVersion.V0_3: "tasks/get"}
_SUBSCRIBE = {ProtocolVersion.V1_0: "SubscribeToTask", ProtocolVersion.V0_3: "tasks/resubscribe"}
PROBE_ID = "a2a-gateway-probe"
"""The JSON-RPC id of the gateway's own ``GetTask`` probes."""


def code_label(code: object) -> str:
    """A bounded metric label for a JSON-RPC error code: the code, or ``other``."""
    return str(code) if code in KNOWN_CODES else "other"


_NAMES = {(info.operation, info.version): name for name, info in METHODS.items()}


def method_name(operation: Operation, version: ProtocolVersion) -> str | None:
    """The JSON-RPC method name of ``operation`` in ``version`` (``None``: the version has
    none, v0.3's ``ListTasks``; docs/protocol.md §1.2)."""
    return _NAMES.get((operation, version))


def lookup_method(name: str) -> MethodInfo | None:
    """The :class:`MethodInfo` for a v1.0 or v0.3 A2A method name, else ``None``."""
    return METHODS.get(name)


def is_reserved_unknown(name: str) -> bool:
    """True for a name in an A2A v0.3 namespace that no version defines (``tasks/frobnicate``)."""
    return name not in METHODS and name.startswith(_V03_NAMESPACES)


@dataclass(frozen=True, slots=True)
class Request:
    """A well-formed JSON-RPC request object as the client sent it.

    ``has_id`` is False for a notification (no ``id`` member); ``id`` keeps its JSON type.
    ``reply_id`` is what an answer written by the gateway carries: ``id``, or — for a number
    whose text a JSON encoder would write differently (``1e5``, ``1.50``, ``-0``) — that text
    exactly, as an :class:`ExactNumber` (JSON-RPC 2.0: the response's id is the request's).
    """

    id: JsonId
    has_id: bool
    method: str
    params: Any
    body: dict[str, Any]
    reply_id: Any = field(default=None)

    def __post_init__(self) -> None:
        if self.reply_id is None:  # not given: the id itself
            object.__setattr__(self, "reply_id", self.id)


@dataclass(frozen=True, slots=True)
class ParseFailure:
    """A request the gateway answers itself; ``error`` is the full JSON-RPC response object;
    ``limit`` names the bound it broke (``max_json_depth``), if any."""

    error: dict[str, Any]
    code: int
    limit: str | None = None


class _NumberText(str):
    """The text of a JSON number, as the standard library's parser hands it to a hook."""


class ExactNumber:
    """A client's numeric id as it wrote it (``text``: its JSON bytes); :func:`dumps` writes
    the text itself, the standard library's encoder the value."""

    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExactNumber) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"ExactNumber({self.text.decode()})"


EXACT_ID_MAX_BYTES = 1024 * 1024
"""The largest body whose numeric id is re-read exactly (the standard library's parser is
about ten times slower than orjson; past this the id is orjson's reading)."""


def _exact_id(body: bytes) -> tuple[int | float, Any] | None:
    """The top-level numeric ``id`` of ``body`` read exactly — ``(value, reply_id)``: the value
    (an integer past 64 bits stays an integer) and what an answer carries (the value, or an
    :class:`ExactNumber` when an encoder would spell it otherwise: ``1e5``, ``1.50``, ``-0``)
    — or ``None`` (no numeric id, unreadable, or a body over :data:`EXACT_ID_MAX_BYTES`).
    One pass of the standard library's parser, its number hooks keeping the text."""
    if len(body) > EXACT_ID_MAX_BYTES:
        return None
    try:
        marked = json.loads(body, parse_float=_NumberText, parse_int=_NumberText)
    except (ValueError, RecursionError):
        return None
    text = marked.get("id") if isinstance(marked, dict) else None
    if not isinstance(text, _NumberText):
        return None
    value: int | float = float(text) if any(c in text for c in ".eE") else int(text)
    return value, (value if dumps(value) == text.encode() else ExactNumber(text.encode()))


_WS = re.compile(rb"[ \t\r\n]*")
_STRING = rb'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrtu])*"'
_KEY = re.compile(_STRING)
_SCALAR = re.compile(rb"(" + _STRING + rb")|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)|(true|false|null)")
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
ID_SCAN_TOKENS = 100_000
"""The most strings and brackets :func:`top_level_id` steps over before it gives up (a
pathological body costs it no more than a few tens of milliseconds)."""
_NO_ID = (False, None)


def top_level_id(body: bytes, max_tokens: int = ID_SCAN_TOKENS) -> tuple[bool, Any]:
    """The top-level ``id`` member of a JSON object read without parsing the rest: for a body
    refused as nested too deep (past ``limits.max_json_depth``, or past orjson's own 1 024
    levels, where no parse gets to the id), so its answer still carries the client's id.

    The object's own members are shallow; a nested member's value is stepped over by its
    brackets and strings (iteratively, at most ``max_tokens`` of them). The last ``id`` wins,
    as in every common parser; a number comes back as :func:`_exact_id` gives it (the
    client's text when an encoder would write it otherwise).

    Returns:
        ``(True, id)`` for a readable string, number or null id; ``(False, None)`` when the
        body is no object, has no id or one of another type, or could not be read to its
        closing brace.
    """
    found: tuple[bool, Any] = _NO_ID
    pos = _WS.match(body, 0).end()  # type: ignore[union-attr]
    if body[pos:pos + 1] != b"{":
        return _NO_ID
    pos = _WS.match(body, pos + 1).end()  # type: ignore[union-attr]
    budget = [max_tokens]
    if body[pos:pos + 1] == b"}":
        return _NO_ID
    while True:
        key = _KEY.match(body, pos)
        if key is None:
            return _NO_ID
        pos = _WS.match(body, key.end()).end()  # type: ignore[union-attr]
        if body[pos:pos + 1] != b":":
            return _NO_ID
        pos = _WS.match(body, pos + 1).end()  # type: ignore[union-attr]
        scalar = _SCALAR.match(body, pos)
        if scalar is not None:
            pos = scalar.end()
            if _key_is_id(key.group()):
                found = _scalar_id(scalar)
        elif body[pos:pos + 1] in (b"{", b"["):
            pos = _skip_container(body, pos, budget)
            if pos < 0:
                return _NO_ID
            if _key_is_id(key.group()):
                found = _NO_ID  # an object or array is no id
        else:
            return _NO_ID
        pos = _WS.match(body, pos).end()  # type: ignore[union-attr]
        sep = body[pos:pos + 1]
        if sep == b"}":
            return found if _WS.match(body, pos + 1).end() == len(body) else _NO_ID  # type: ignore[union-attr]
        if sep != b",":
            return _NO_ID
        pos = _WS.match(body, pos + 1).end()  # type: ignore[union-attr]


def _key_is_id(text: bytes) -> bool:
    if text == b'"id"':
        return True
    if b"\\" not in text:
        return False
    try:
        return bool(orjson.loads(text) == "id")  # "\u0069d" is "id" too
    except orjson.JSONDecodeError:
        return False


def _scalar_id(match: re.Match[bytes]) -> tuple[bool, Any]:
    string, number, word = match.groups()
    if string is not None:
        try:
            return True, orjson.loads(string)
        except orjson.JSONDecodeError:  # a lone surrogate: no id the gateway can write back
            return _NO_ID
    if number is not None:
        return True, _number_reply(number)
    return (True, None) if word == b"null" else _NO_ID


def _number_reply(text: bytes) -> Any:
    """What an answer carries for a numeric id written as ``text``: the value, or an
    :class:`ExactNumber` when an encoder would spell it otherwise (``1e5``, ``1.50``)."""
    try:
        value: int | float = float(text) if any(c in text for c in b".eE") else int(text)
    except ValueError:  # more digits than Python converts
        return ExactNumber(text)
    try:
        written = dumps(value)
    except UnencodableError:
        return ExactNumber(text)
    return value if written == text else ExactNumber(text)


def _skip_container(body: bytes, pos: int, budget: list[int]) -> int:
    """The index after the object or array starting at ``body[pos]`` (strings stepped over
    whole, brackets counted), or -1: unbalanced, or more than ``budget[0]`` tokens."""
    depth = 0
    for token in _TOKEN.finditer(body, pos):
        budget[0] -= 1
        if budget[0] < 0:
            return -1
        first = token.group()[:1]
        if first in (b"{", b"["):
            depth += 1
        elif first in (b"}", b"]"):
            depth -= 1
            if depth == 0:
                return token.end()
    return -1


def _valid_id(value: object) -> bool:
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


def parse_request(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> Request | ParseFailure:
    """Parse and validate one JSON-RPC request body (F15).

    Returns:
        :class:`Request`, or :class:`ParseFailure` holding: -32700 (id null) for invalid JSON;
        -32600 for a batch array, a non-object, a missing/wrong ``jsonrpc``, a non-string
        ``method`` or a non-scalar ``id`` (id null in that last case), or a body nested deeper
        than ``max_depth`` (``limits.max_json_depth``; with the client's id when it could be
        read); -32602 when ``params`` is present but not an object for a known A2A method (an
        absent ``params`` is allowed).
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):  # past orjson's 1 024 levels
            return _too_deep_failure(max_depth, top_level_id(body)[1])
        return _fail(PARSE_ERROR, "Parse error: request body is not valid JSON", None)
    if _too_deep(body, doc, max_depth):
        return _too_deep_failure(max_depth, top_level_id(body)[1] if isinstance(doc, dict) else None)
    answer_id: Any = None
    if isinstance(doc, dict) and (isinstance(doc.get("id"), float) or (doc.get("id") == 0 and b"-0" in body)):
        exact = _exact_id(body)  # orjson made a float of it (1e5, or an integer past 64 bits)
        if exact is not None:
            doc["id"], answer_id = exact
    if isinstance(doc, list):
        return _fail(INVALID_REQUEST, "Invalid Request: batch requests are not supported", None)
    if not isinstance(doc, dict):
        return _fail(INVALID_REQUEST, "Invalid Request: expected a JSON object", None)
    raw_id = doc.get("id")
    if not _valid_id(raw_id):
        return _fail(INVALID_REQUEST, "Invalid Request: id must be a string, number or null", None)
    answer_id = raw_id if answer_id is None else answer_id
    if doc.get("jsonrpc") != "2.0":
        return _fail(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', answer_id)
    method = doc.get("method")
    if not isinstance(method, str) or not method:
        return _fail(INVALID_REQUEST, 'Invalid Request: "method" must be a string', answer_id)
    params = doc.get("params")
    if method in METHODS and "params" in doc and not isinstance(params, dict):
        return _fail(INVALID_PARAMS, "Invalid params: params must be an object", answer_id)
    if is_reserved_unknown(method):
        return _fail(METHOD_NOT_FOUND, f"Method not found: {method}", answer_id)
    return Request(id=raw_id, has_id="id" in doc, method=method, params=params, body=doc,
                   reply_id=answer_id)


def _fail(code: int, message: str, req_id: JsonId) -> ParseFailure:
    return ParseFailure(error_response(req_id, code, message), code)


def _too_deep_failure(max_depth: int, req_id: JsonId) -> ParseFailure:
    message = f"Invalid Request: {NestingTooDeepError(max_depth)}"
    return ParseFailure(error_response(req_id, INVALID_REQUEST, message), INVALID_REQUEST, "max_json_depth")


def clean_response(doc: object) -> dict[str, Any] | None:
    """A worker's JSON-RPC 2.0 response object (docs/protocol.md §6.3): ``"jsonrpc": "2.0"``
    and exactly one of ``result`` / ``error``, an ``error`` being an object with an integer
    ``code`` and a string ``message``.

    ``"error": null`` (emitted by many JSON-RPC libraries next to a result) counts as absent.
    Returns ``None`` for anything else — not an object, another ``jsonrpc``, neither member or
    both, an error of another shape: such an answer is an invalid agent response and is never
    relayed unchecked (a client's SDK could not read it either).
    """
    if not isinstance(doc, dict) or doc.get("jsonrpc") != "2.0":
        return None
    if "error" in doc and doc["error"] is None and "result" in doc:
        doc = {k: v for k, v in doc.items() if k != "error"}
    if ("result" in doc) == ("error" in doc):
        return None
    if "error" in doc:
        error = doc["error"]
        if not (isinstance(error, dict) and type(error.get("code")) is int
                and isinstance(error.get("message"), str)):
            return None
    return doc


def error_object(
    code: int,
    message: str,
    *,
    version: ProtocolVersion = ProtocolVersion.V1_0,
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A JSON-RPC ``error`` member (docs/protocol.md §6.3).

    For v1.0 and a code with an A2A reason, ``data`` is an array holding one
    ``google.rpc.ErrorInfo``; v0.3 gets no ``data``.
    """
    err: dict[str, Any] = {"code": code, "message": message}
    reason = ERROR_REASONS.get(code)
    if reason is not None and version is ProtocolVersion.V1_0:
        info: dict[str, Any] = {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": ERROR_DOMAIN}
        if metadata:
            info["metadata"] = metadata
        err["data"] = [info]
    return err


def error_response(
    req_id: JsonId,
    code: int,
    message: str,
    *,
    version: ProtocolVersion = ProtocolVersion.V1_0,
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A whole JSON-RPC error response object with the client's ``id``."""
    err = error_object(code, message, version=version, metadata=metadata)
    return {"jsonrpc": "2.0", "id": req_id, "error": err}


def loads(data: bytes | str, max_depth: int = MAX_JSON_DEPTH, *, exact_integers: bool = True) -> Any:
    """Parse a JSON body (orjson) and bound its nesting: an object or array counts one level,
    the top level included (``{"a": [1]}`` is 2 deep). The parse itself never recurses in
    Python (orjson stops at 1024 levels on its own); the depth walk below is iterative and
    runs only when the body holds more ``{`` and ``[`` than ``max_depth``.

    With ``exact_integers`` (for a worker payload the gateway may write back) integers past 64
    bits stay integers, re-read with the standard library's parser; a body only read (a
    client's REST body, forwarded as sent) skips that.

    Raises:
        orjson.JSONDecodeError: not JSON.
        NestingTooDeepError: nested deeper than ``max_depth``.
    """
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            raise NestingTooDeepError(max_depth) from None
        raise
    if _too_deep(data, doc, max_depth):
        raise NestingTooDeepError(max_depth)
    if exact_integers and b"0" * 20 in (  # str.translate is slow: the bytes' is C (after a copy)
            data if isinstance(data, bytes) else data.encode()).translate(_DIGITS_TO_ZERO):
        doc = json.loads(data)  # an integer past 64 bits: orjson reads it as a float; keep it exact
    return doc


# 20 ASCII digits in a row: maybe an integer past 64 bits (2**64 has 20 digits), which orjson
# reads as a float. Found in C (every digit made a "0", then one substring search), and the
# body re-read exactly only then (a string of as many digits costs the re-read too, never a
# wrong value).
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _too_deep(data: bytes | str, doc: object, max_depth: int) -> bool:
    """``doc`` (parsed from ``data``) nests deeper than ``max_depth``; counting brackets in
    ``data`` first (in C) spares the walk for almost every body."""
    if not isinstance(doc, dict | list):
        return False
    if isinstance(data, bytes):
        brackets = data.count(b"{") + data.count(b"[")
    else:
        brackets = data.count("{") + data.count("[")
    return brackets > max_depth and nesting_exceeds(doc, max_depth)


def nesting_exceeds(doc: object, limit: int) -> bool:
    """True when ``doc`` nests objects and arrays deeper than ``limit`` levels (iterative;
    stops at the first container past the limit)."""
    stack: list[tuple[object, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:  # type: ignore[attr-defined]
            if isinstance(child, dict | list):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def dumps(obj: Any) -> bytes:
    """Serialize a JSON value (UTF-8 bytes): orjson, or the standard library for what orjson
    cannot write (integers beyond 64 bits, kept exact in client ids; nesting past orjson's
    depth).

    Raises:
        UnencodableError: the value is nested deeper than either encoder goes.
    """
    try:
        return orjson.dumps(obj, default=_fragment)
    except orjson.JSONEncodeError:
        try:
            return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=_exact_value).encode()
        except RecursionError:
            raise UnencodableError("JSON value nested too deeply to write") from None


def _fragment(obj: object) -> orjson.Fragment:
    """For orjson: an :class:`ExactNumber` written as its text."""
    if isinstance(obj, ExactNumber):
        return orjson.Fragment(obj.text)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _exact_value(obj: object) -> Any:
    """For the standard library's encoder (it cannot write raw text): an
    :class:`ExactNumber` as the value its text holds."""
    if isinstance(obj, ExactNumber):
        return json.loads(obj.text)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def task_get_request(task_id: str, version: ProtocolVersion, tenant: str = "") -> dict[str, Any]:
    """The gateway's own ``GetTask`` / ``tasks/get`` for ``task_id`` in ``version``, asking for
    no history (docs/protocol.md §1.2): ``{"jsonrpc", "id": PROBE_ID, "method", "params"}``;
    with the client's ``tenant`` when it named one (v1.0, docs/callers.md §1)."""
    params: dict[str, Any] = {"id": task_id, "historyLength": 0}
    if tenant:
        params["tenant"] = tenant
    return {"jsonrpc": "2.0", "id": PROBE_ID, "method": _TASK_GET[version], "params": params}


def subscribe_request(req_id: JsonId, task_id: str, version: ProtocolVersion,
                      tenant: str = "") -> dict[str, Any]:
    """``SubscribeToTask`` / ``tasks/resubscribe`` for ``task_id`` with the client's ``req_id``:
    the gateway's resubscribe after a cut stream (docs/protocol.md §7; its first event is the
    current Task); with the client's ``tenant`` when it named one (v1.0)."""
    params: dict[str, Any] = {"id": task_id}
    if tenant:
        params["tenant"] = tenant
    return {"jsonrpc": "2.0", "id": req_id, "method": _SUBSCRIBE[version], "params": params}


def request_tenant(info: MethodInfo, params: object) -> str:
    """The A2A tenant a JSON-RPC request names (docs/callers.md §1): v1.0 ``params.tenant``
    when it is a string; ``""`` for none, and always for v0.3 (which has no tenant)."""
    if info.version is not ProtocolVersion.V1_0 or not isinstance(params, dict):
        return ""
    tenant = params.get("tenant")
    return tenant if isinstance(tenant, str) else ""


def request_message(params: object) -> dict[str, Any] | None:
    """The Message a send carries: ``params.message`` — or ``params.request``, the v0.3 proto
    field name a2a-sdk's v0.3 REST transport writes (docs/protocol.md §11 pitfall 11)."""
    if not isinstance(params, dict):
        return None
    message = params.get("message", params.get("request"))
    return message if isinstance(message, dict) else None


def member(obj: dict[str, Any], camel: str, snake: str) -> str | None:
    """A non-empty string member by its JSON name (``taskId``) or its proto field name
    (``task_id``): ProtoJSON parsers accept both, so a worker reads both."""
    value = obj.get(camel)
    if value is None:
        value = obj.get(snake)
    return value if isinstance(value, str) and value else None


def request_task_id(info: MethodInfo, params: object) -> str | None:
    """The task a request names, or ``None`` when it may create a new task.

    Messages: ``params.message.taskId`` (:func:`request_message`); GetTask, CancelTask,
    SubscribeToTask (both versions) and v0.3 push-config methods: ``params.id``; v1.0
    push-config methods: ``params.taskId`` (docs/protocol.md §11 pitfall 14). Proto field
    names (``task_id``) count like JSON names (:func:`member`).
    """
    if not isinstance(params, dict):
        return None
    op = info.operation
    if op in (Operation.SEND, Operation.STREAM):
        message = request_message(params)
        return member(message, "taskId", "task_id") if message is not None else None
    v03_push = info.version is ProtocolVersion.V0_3 and op is not Operation.PUSH_CREATE
    if op in (Operation.GET, Operation.CANCEL, Operation.SUBSCRIBE) or (op.name.startswith("PUSH_") and v03_push):
        value = params.get("id")
        return value if isinstance(value, str) and value else None
    if op.name.startswith("PUSH_"):
        return member(params, "taskId", "task_id")
    return None
