"""The HTTP+JSON (REST) binding: path and verb ↔ operation, and the ``google.rpc.Status`` errors.

Implements docs/protocol.md §1.3 (REST paths of v1.0 and v0.3, the tenant prefix), §1.5 (how
the gateway reads a REST call), §5 (the ``A2A-Version`` header), §6.1 and §6.3 (HTTP status
and ``ErrorInfo`` reason of every A2A error) and §11 pitfalls 10 and 11. Pure: stdlib only.

A REST operation is recognised by the end of the path below the mount, so whatever comes
before it — a tenant (``/{tenant}/…``), the worker's own REST prefix (``/rest``) or both — is
the call's ``base`` and is kept for the gateway's own calls on the same road (its ``GetTask``
probe, its resubscribe). A ``/v1`` segment right before the operation marks the v0.3 paths,
unless the client says ``A2A-Version: 1.x`` (then ``/v1`` is part of a v1.0 base URL).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.version import ProtocolVersion, version_family

_OP_PATTERNS: tuple[tuple[str, str, Operation | None], ...] = (
    # (HTTP methods, path below the base, operation; None: decided by the method)
    ("POST", r"/message:send", Operation.SEND),
    ("POST", r"/message:stream", Operation.STREAM),
    ("GET", r"/tasks", Operation.LIST),
    ("POST", r"/tasks/(?P<id>[^/]+):cancel", Operation.CANCEL),
    ("GET POST", r"/tasks/(?P<id>[^/]+):subscribe", Operation.SUBSCRIBE),
    ("GET POST", r"/tasks/(?P<id>[^/]+)/pushNotificationConfigs", None),
    ("GET DELETE", r"/tasks/(?P<id>[^/]+)/pushNotificationConfigs/(?P<cid>[^/]+)", None),
    ("GET", r"/tasks/(?P<id>[^/]+)", Operation.GET),  # ids may hold ':' (urn:uuid:…)
    ("GET", r"/extendedAgentCard", Operation.EXTENDED_CARD),
    ("GET", r"/card", Operation.EXTENDED_CARD),  # v0.3 only: /v1/card
)
_COMPILED = tuple(  # any letter case: express (the @a2a-js/sdk server) routes case-insensitively
    (frozenset(methods.split()),
     re.compile(r"(?P<base>(?:/[^/]+)*?)(?P<v1>/v1)?" + tail, re.IGNORECASE), op, tail)
    for methods, tail, op in _OP_PATTERNS
)
_PUSH_OPS = {
    ("POST", False): Operation.PUSH_CREATE,
    ("GET", False): Operation.PUSH_LIST,
    ("GET", True): Operation.PUSH_GET,
    ("DELETE", True): Operation.PUSH_DELETE,
}

# HTTP status and google.rpc status name of every error code (docs/protocol.md §6.1 as of
# v1.0.1, §6.2 for the JSON-RPC codes as the a2a-sdk maps them).
_HTTP: dict[int, tuple[int, str]] = {
    jsonrpc.TASK_NOT_FOUND: (404, "NOT_FOUND"),
    jsonrpc.TASK_NOT_CANCELABLE: (400, "FAILED_PRECONDITION"),
    jsonrpc.PUSH_NOTIFICATION_NOT_SUPPORTED: (400, "FAILED_PRECONDITION"),
    jsonrpc.UNSUPPORTED_OPERATION: (400, "FAILED_PRECONDITION"),
    jsonrpc.CONTENT_TYPE_NOT_SUPPORTED: (400, "INVALID_ARGUMENT"),
    jsonrpc.INVALID_AGENT_RESPONSE: (500, "INTERNAL"),
    jsonrpc.EXTENDED_AGENT_CARD_NOT_CONFIGURED: (400, "FAILED_PRECONDITION"),
    jsonrpc.EXTENSION_SUPPORT_REQUIRED: (400, "FAILED_PRECONDITION"),
    jsonrpc.VERSION_NOT_SUPPORTED: (400, "FAILED_PRECONDITION"),
    jsonrpc.TASK_GENERATION_MISMATCH: (409, "ABORTED"),  # A2A v1.1 draft, SPEC11 §5.4
    jsonrpc.PARSE_ERROR: (400, "INVALID_ARGUMENT"),
    jsonrpc.INVALID_REQUEST: (400, "INVALID_ARGUMENT"),
    jsonrpc.INVALID_PARAMS: (400, "INVALID_ARGUMENT"),
    jsonrpc.METHOD_NOT_FOUND: (404, "NOT_FOUND"),
    jsonrpc.INTERNAL_ERROR: (500, "INTERNAL"),
}
_STATUS_NAMES = {401: "UNAUTHENTICATED", 413: "INVALID_ARGUMENT", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
                 504: "DEADLINE_EXCEEDED"}
REASONS: dict[int, str] = {
    **jsonrpc.ERROR_REASONS,
    jsonrpc.PARSE_ERROR: "INVALID_REQUEST",
    jsonrpc.INVALID_REQUEST: "INVALID_REQUEST",
    jsonrpc.INVALID_PARAMS: "INVALID_PARAMS",
    jsonrpc.METHOD_NOT_FOUND: "METHOD_NOT_FOUND",
    jsonrpc.INTERNAL_ERROR: "INTERNAL_ERROR",
}
"""The ``ErrorInfo.reason`` of each code (the a2a-sdk's names for the JSON-RPC codes)."""
_CODES = {reason: code for code, reason in REASONS.items() if code != jsonrpc.PARSE_ERROR}
# v0.3 REST (the a2a-js 0.3 server's mapping, as in v1.0.0): only these differ from _HTTP.
_HTTP_V03 = {jsonrpc.TASK_NOT_CANCELABLE: 409, jsonrpc.CONTENT_TYPE_NOT_SUPPORTED: 415,
             jsonrpc.INVALID_AGENT_RESPONSE: 502}
_TYPES = {
    jsonrpc.TASK_NOT_FOUND: "TaskNotFoundError",
    jsonrpc.TASK_NOT_CANCELABLE: "TaskNotCancelableError",
    jsonrpc.PUSH_NOTIFICATION_NOT_SUPPORTED: "PushNotificationNotSupportedError",
    jsonrpc.UNSUPPORTED_OPERATION: "UnsupportedOperationError",
    jsonrpc.CONTENT_TYPE_NOT_SUPPORTED: "ContentTypeNotSupportedError",
    jsonrpc.INVALID_AGENT_RESPONSE: "InvalidAgentResponseError",
    jsonrpc.EXTENDED_AGENT_CARD_NOT_CONFIGURED: "AuthenticatedExtendedCardNotConfiguredError",
    jsonrpc.PARSE_ERROR: "JSONParseError",
    jsonrpc.INVALID_REQUEST: "InvalidRequestError",
    jsonrpc.INVALID_PARAMS: "InvalidParamsError",
    jsonrpc.METHOD_NOT_FOUND: "MethodNotFoundError",
    jsonrpc.INTERNAL_ERROR: "InternalError",
}
"""The v0.3 error names (the ``type`` of a v0.3 REST error body)."""
_CODE_OF_TYPE = {name: code for code, name in _TYPES.items()}
_CODE_OF_STATUS = {404: jsonrpc.TASK_NOT_FOUND, 400: jsonrpc.INVALID_PARAMS,
                   409: jsonrpc.TASK_NOT_CANCELABLE, 500: jsonrpc.INTERNAL_ERROR}


@dataclass(frozen=True, slots=True)
class RestCall:
    """One recognised REST request.

    ``base`` is the raw path before the operation (tenant, the worker's REST prefix; ``""``
    for none), without the v0.3 ``/v1``; ``task_id`` and ``config_id`` are the decoded path
    parameters (``None`` when the operation has none).
    """

    operation: Operation
    version: ProtocolVersion
    base: str
    task_id: str | None = None
    config_id: str | None = None
    query: str = ""
    """Query parameters of the client's request the gateway's own calls carry on
    (:func:`carried_query`: ``tenant``, ``A2A-Version``), raw."""

    @property
    def streaming(self) -> bool:
        """True for the operations answered with an SSE stream."""
        return self.operation in (Operation.STREAM, Operation.SUBSCRIBE)

    def target(self, tail: str) -> str:
        """A path on this call's road: ``base`` (+ ``/v1`` for v0.3) + ``tail``."""
        v1 = "/v1" if self.version is ProtocolVersion.V0_3 else ""
        return self.base + v1 + tail

    def operation_target(self) -> str:
        """The path of this call's own operation on its road (:meth:`target`), ids quoted,
        without a query: what a bridged request is sent to in the worker's version
        (docs/bridge.md §3)."""
        tid = quote(self.task_id or "", safe="")
        tails = {
            Operation.SEND: "/message:send", Operation.STREAM: "/message:stream",
            Operation.LIST: "/tasks", Operation.GET: f"/tasks/{tid}",
            Operation.CANCEL: f"/tasks/{tid}:cancel", Operation.SUBSCRIBE: f"/tasks/{tid}:subscribe",
            Operation.PUSH_CREATE: f"/tasks/{tid}/pushNotificationConfigs",
            Operation.PUSH_LIST: f"/tasks/{tid}/pushNotificationConfigs",
            Operation.PUSH_GET: f"/tasks/{tid}/pushNotificationConfigs/{quote(self.config_id or '', safe='')}",
            Operation.PUSH_DELETE: f"/tasks/{tid}/pushNotificationConfigs/{quote(self.config_id or '', safe='')}",
            Operation.EXTENDED_CARD: "/card" if self.version is ProtocolVersion.V0_3 else "/extendedAgentCard",
        }
        return self.target(tails[self.operation])

    def task_get_target(self, task_id: str) -> str:
        """The path and query of the gateway's ``GetTask`` probe for ``task_id``, asking for
        no history (docs/protocol.md §1.3)."""
        carried = f"&{self.query}" if self.query else ""
        return self.target(f"/tasks/{quote(task_id, safe='')}?historyLength=0{carried}")

    def subscribe_target(self, task_id: str) -> str:
        """The path of ``SubscribeToTask`` for ``task_id`` (sent as POST: SPEC §11.3.2)."""
        carried = f"?{self.query}" if self.query else ""
        return self.target(f"/tasks/{quote(task_id, safe='')}:subscribe{carried}")


def match(http_method: str, path: str, a2a_version: str | None = None, *,
          decoded: bool = False) -> RestCall | None:
    """The REST operation of a request, or ``None`` for a path and verb no A2A version defines.

    Args:
        http_method: the request method (``GET``, ``POST``, ``DELETE``).
        path: the raw (percent-encoded) path below the mount, starting with ``/``; with
            ``decoded``, the path already percent-decoded (its ids are taken as they are).
            The operation is read in any letter case and with or without a trailing ``/``,
            as the workers' routers read it (docs/protocol.md §1.5).
        a2a_version: the ``A2A-Version`` header, if any (decides what a ``/v1`` segment is).
    """
    ids = _as_is if decoded else unquote
    if len(path) > 1 and path.endswith("/"):  # non-strict routers take /message:send/ too
        path = path[:-1]
    for methods, pattern, op, tail in _COMPILED:
        m = pattern.fullmatch(path)
        if m is None or http_method not in methods:
            continue
        v03 = m["v1"] is not None and version_family(a2a_version or "") != "1.0"
        if tail == "/card" and not v03:
            continue
        base = m["base"] if v03 else m["base"] + (m["v1"] or "")
        groups = m.groupdict()
        task_id = ids(groups["id"]) if groups.get("id") else None
        config_id = ids(groups["cid"]) if groups.get("cid") else None
        if op is None:
            op = _PUSH_OPS[(http_method, config_id is not None)]
        version = ProtocolVersion.V0_3 if v03 else ProtocolVersion.V1_0
        return RestCall(op, version, base, task_id, config_id)
    return None


_CARRIED = ("tenant", "a2a-version")


def rest_tenant(call: RestCall, prefixes: Iterable[str] = ()) -> str:
    """The A2A tenant of a REST call (docs/callers.md §1): the call's ``base`` with the
    worker's own REST prefix taken off its end — the longest of ``prefixes`` (paths such as
    ``/rest``, from the HTTP+JSON interfaces of the worker's card) that ends it at a segment
    boundary — then percent-decoded, without its outer slashes; when that leaves nothing, the
    ``tenant`` query parameter the call carries (@a2a-js/sdk sends it there); ``""`` for none.
    Without a known prefix the whole base is the tenant (``/rest`` reads as tenant ``rest``).
    """
    base = call.base
    known = {"/" + p.strip("/") for p in prefixes if p.strip("/")}  # "/rest": whole segments
    folded = base.lower()  # read in any letter case, as the workers' routers read paths
    for prefix in sorted(known, key=len, reverse=True):
        if folded.endswith(prefix.lower()):
            base = base[:-len(prefix)]
            break
    tenant = unquote(base.strip("/"))
    if tenant:
        return tenant
    for name, value in parse_qsl(call.query, keep_blank_values=True):
        if name == "tenant":
            return value
    return ""


def client_version(headers: list[tuple[bytes, bytes]], query: bytes) -> str | None:
    """The client's A2A version: its first ``A2A-Version`` header, else an ``A2A-Version``
    query parameter (docs/protocol.md §5), else ``None`` (which means 0.3)."""
    for name, value in headers:
        if name.lower() == b"a2a-version":
            return value.decode("latin-1")
    if b"a2a-version=" in query.lower():
        for key, text in parse_qsl(query.decode("latin-1")):
            if key.lower() == "a2a-version":
                return text
    return None


def carried_query(query: bytes) -> str:
    """The query parameters the gateway's own calls for a REST request keep (raw, in order):
    ``tenant`` (@a2a-js/sdk reads the tenant there when the path has none) and
    ``A2A-Version``; ``""`` for none."""
    if not query:
        return ""
    kept = [part for part in query.decode("latin-1").split("&")
            if part.split("=", 1)[0].lower() in _CARRIED]
    return "&".join(kept)


def _as_is(text: str) -> str:
    return text


def http_status(code: int, version: ProtocolVersion = ProtocolVersion.V1_0) -> int:
    """The HTTP status of an A2A or JSON-RPC error code in ``version``'s REST binding (500 for
    an unknown one)."""
    if version is ProtocolVersion.V0_3:
        return _HTTP_V03.get(code, _HTTP.get(code, (500, ""))[0])
    return _HTTP.get(code, (500, "INTERNAL"))[0]


def error_body(code: int, message: str, *, metadata: dict[str, str] | None = None,
               status: int | None = None,
               version: ProtocolVersion = ProtocolVersion.V1_0) -> dict[str, Any]:
    """The REST error body for an A2A error ``code`` (docs/protocol.md §6.3).

    v1.0: a ``google.rpc.Status``, ``{"error": {"code": <HTTP status>, "status", "message",
    "details": [ErrorInfo]}}``; the ``ErrorInfo`` carries the code's reason and ``metadata``.
    v0.3: ``{"code": <A2A code>, "message", "type": <error name>}``, what v0.3 REST clients
    read (@a2a-js/sdk 0.3 reads ``code``, a2a-sdk's v0.3 transport ``type``; docs/protocol.md §1.5).
    ``status`` overrides the code's HTTP status (503 for "not now", 502/504 for a worker
    transport failure).
    """
    if version is ProtocolVersion.V0_3:
        return {"code": code, "message": message, "type": _TYPES.get(code, "InternalError")}
    http, name = _HTTP.get(code, (500, "INTERNAL"))
    if status is not None and status != http:
        http, name = status, _STATUS_NAMES.get(status, name)
    info: dict[str, Any] = {"@type": jsonrpc.ERROR_INFO_TYPE, "reason": REASONS.get(code, "INTERNAL_ERROR"),
                            "domain": jsonrpc.ERROR_DOMAIN, "metadata": metadata or {}}
    return {"error": {"code": http, "status": name, "message": message, "details": [info]}}


def transport_error_body(status: int, message: str) -> dict[str, Any]:
    """A ``google.rpc.Status`` body without A2A details (a worker transport failure, a body
    over the size limit): ``{"error": {"code", "status", "message"}}``."""
    return {"error": {"code": status, "status": _STATUS_NAMES.get(status, "INTERNAL"), "message": message}}


def error_code(status: int, body: object) -> int | None:
    """The A2A (or JSON-RPC) error code a worker's REST error answer stands for: the
    ``ErrorInfo.reason`` in ``error.details`` when there is one; in a v0.3 body the numeric
    ``code`` or the error name in ``type``; else the HTTP status (404 → -32001, 400 →
    -32602, 409 → -32002, 500 → -32603); else ``None``."""
    if isinstance(body, dict):
        code = body.get("code")
        if isinstance(code, int) and not isinstance(code, bool) and code in _TYPES:
            return code
        name = body.get("type")
        if isinstance(name, str) and name in _CODE_OF_TYPE:
            return _CODE_OF_TYPE[name]
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and detail.get("@type") == jsonrpc.ERROR_INFO_TYPE:
            reason = detail.get("reason")  # the worker's: any JSON value, hashable or not
            code = _CODES.get(reason) if isinstance(reason, str) else None
            if code is not None:
                return code
    return _CODE_OF_STATUS.get(status)


def request_params(call: RestCall, body: object) -> dict[str, Any]:
    """The request as JSON-RPC ``params`` would carry it, for admission: the JSON body of a
    send (``{"message": …, "configuration": …}``), else the path's ids (``{"id": taskId}``;
    push configs ``{"taskId", "id"}``)."""
    op = call.operation
    if op in (Operation.SEND, Operation.STREAM):
        return body if isinstance(body, dict) else {}
    params: dict[str, Any] = {}
    if op.name.startswith("PUSH_"):
        params["taskId"] = call.task_id
        if call.config_id is not None:
            params["id"] = call.config_id
    elif call.task_id is not None:
        params["id"] = call.task_id
    return params
