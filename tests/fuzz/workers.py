"""A healthy worker for the client-side properties: it answers every request validly, so
that whatever goes wrong in an exchange is the gateway's doing.

* JSON-RPC (docs/protocol.md §3.4, §3.5, §7): the client's id is echoed as the *raw text*
  the request carried (``1e5`` stays ``1e5``), sends are answered with a direct Message,
  task reads with a WORKING Task of the task the request names, streams with one Message
  event (a send of a new message) or a Task snapshot plus an INPUT_REQUIRED status (a
  subscribe, or a streamed message to an existing task; a lone Message there is pinned by
  test_a_message_stream_on_a_known_task_is_the_whole_reply) — never a
  terminal state, so no example leaves a task the next one cannot use.
* REST (docs/protocol.md §1.3, §3.4): the same answers without the envelope, routed as a
  worker's own router reads the (decoded) path, so a task answer names the task the path
  names for the worker; a path no route takes is a 404 ``google.rpc.Status``.
* The Agent Card (streaming and push notifications on) is served as usual.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from tests.fuzz.support import raw_member
from tests.support.scripted_worker import JsonBody, Raw, ReceivedRequest, ScriptedWorker, Sse, default_card

_JSON = {"content-type": "application/json"}
_EVERYTHING = re.compile(r".*", re.DOTALL)


def _ctx(task_id: str) -> str:
    return "c-" + task_id


def _named_task(params: Any, key: str = "id") -> str | None:
    value = params.get(key) if isinstance(params, dict) else None
    return value if isinstance(value, str) and value else None


TERMINAL_TASK = "t-done"
"""The one task this worker holds as COMPLETED: actions on it are the gateway's to refuse
(docs/field-cases.md F05) once its ledger knows (the tests read it first)."""


def task_v10(task_id: str, state: str = "TASK_STATE_WORKING") -> dict[str, Any]:
    if task_id == TERMINAL_TASK:
        state = "TASK_STATE_COMPLETED"
    return {"id": task_id, "contextId": _ctx(task_id), "status": {"state": state}}


def task_v03(task_id: str, state: str = "working") -> dict[str, Any]:
    if task_id == TERMINAL_TASK:
        state = "completed"
    return {"kind": "task", "id": task_id, "contextId": _ctx(task_id), "status": {"state": state}}


MESSAGE_V10 = {"messageId": "m-agent", "role": "ROLE_AGENT", "parts": [{"text": "ok"}]}
MESSAGE_V03 = {"kind": "message", "messageId": "m-agent", "role": "agent", "parts": [{"kind": "text", "text": "ok"}]}
NO_TASK = "t-none"  # the task a read answers for when the request names none the gateway reads


def jsonrpc_results(method: str | None, params: Any) -> list[Any]:
    """The results a healthy worker sends for ``method``: one for a unary call, the events
    of a stream for a streaming one."""
    tid = _named_task(params) or NO_TASK
    message = params.get("message") if isinstance(params, dict) else None
    follow_up = _named_task(message, "taskId")  # a message to an existing task
    if follow_up and method == "SendStreamingMessage":
        method, tid = "SubscribeToTask", follow_up  # its stream goes on with the task
    elif follow_up and method == "message/stream":
        method, tid = "tasks/resubscribe", follow_up
    if method in ("SendMessage",):
        return [{"message": MESSAGE_V10}]
    if method == "message/send":
        return [MESSAGE_V03]
    if method == "SendStreamingMessage":
        return [{"message": MESSAGE_V10}]
    if method == "message/stream":
        return [MESSAGE_V03]
    if method in ("GetTask", "CancelTask"):
        return [task_v10(tid)]
    if method in ("tasks/get", "tasks/cancel"):
        return [task_v03(tid)]
    if method == "SubscribeToTask" and tid == TERMINAL_TASK:
        return [{"task": task_v10(tid)}]
    if method == "tasks/resubscribe" and tid == TERMINAL_TASK:
        return [task_v03(tid)]
    if method == "SubscribeToTask":
        return [{"task": task_v10(tid)},
                {"statusUpdate": {"taskId": tid, "contextId": _ctx(tid), "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}}]
    if method == "tasks/resubscribe":
        return [task_v03(tid), {"kind": "status-update", "taskId": tid, "contextId": _ctx(tid),
                                "status": {"state": "input-required"}, "final": True}]
    if method == "ListTasks":
        return [{"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}]
    if method in ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"):
        return [default_card()]
    if method is not None and "PushNotificationConfig" in method:
        return [{"taskId": "t-1", "id": "p-1", "url": "https://example.invalid/hook"}]
    if method is not None and method.startswith("tasks/pushNotificationConfig/"):
        return [{"taskId": "t-1", "pushNotificationConfig": {"id": "p-1", "url": "https://example.invalid/hook"}}]
    return [{"ok": True}]  # a custom method: relayed by the gateway as it is


STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"})


def _envelope(raw_id: bytes, result: Any) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + raw_id + b',"result":' + orjson.dumps(result) + b"}"


class HealthyWorker:
    """Installs itself on a :class:`ScriptedWorker` as the answer to every request."""

    def __init__(self, worker: ScriptedWorker) -> None:
        self._answers: list[tuple[ReceivedRequest, Any]] = []
        worker.on_path("*", _EVERYTHING, handler=self.answer, times=None)

    def answered(self, req: ReceivedRequest) -> Any:
        """The answer this worker gave to ``req`` (one of ``worker.requests``)."""
        return next(resp for seen, resp in reversed(self._answers) if seen is req)

    def answer(self, req: ReceivedRequest) -> Any:
        response = self._answer(req)
        self._answers.append((req, response))
        del self._answers[:-50]
        return response

    def _answer(self, req: ReceivedRequest) -> Any:
        if req.http_method in ("GET", "HEAD") and req.path.endswith("/.well-known/agent-card.json"):
            return JsonBody(default_card())
        if req.http_method == "POST" and req.path == "/":
            return self.jsonrpc(req)
        return self.rest(req)

    def jsonrpc(self, req: ReceivedRequest) -> Any:
        doc = req.json
        raw_id = b"null"
        if isinstance(doc, dict) and "id" in doc:
            raw_id = raw_member(req.body, "id") or b"null"
        params = doc.get("params") if isinstance(doc, dict) else None
        results = jsonrpc_results(req.method, params)
        if req.method in STREAMING:
            return Sse([b"data: " + _envelope(raw_id, r) + b"\n\n" for r in results])
        return Raw(200, _JSON, _envelope(raw_id, results[0]))

    def rest(self, req: ReceivedRequest) -> Any:
        """REST as a worker's router reads it: on the decoded path, in any letter case, with
        ``{id}`` one path segment (Starlette's ``[^/]+``); anything else is a 404 Status."""
        path = req.path.rstrip("/") if len(req.path) > 1 else req.path
        verb = req.http_method
        ops = _route(verb, path)
        if ops is None:
            return Raw(404, _JSON, orjson.dumps({"error": {"code": 404, "status": "NOT_FOUND",
                                                           "message": f"no route {verb} {req.path}"}}))
        op, tid, cid = ops
        follow_up = _follow_up(req.json)
        if op == "stream" and follow_up:
            op, tid = "subscribe", follow_up  # its stream goes on with the task (see the module docstring)
        if op == "stream":
            return Sse([b"data: " + orjson.dumps({"message": MESSAGE_V10}) + b"\n\n"])
        if op == "subscribe" and tid == TERMINAL_TASK:
            return Sse([b"data: " + orjson.dumps({"task": task_v10(tid)}) + b"\n\n"])
        if op == "subscribe":
            update = {"statusUpdate": {"taskId": tid, "contextId": _ctx(tid),
                                       "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}}
            return Sse([b"data: " + orjson.dumps({"task": task_v10(tid)}) + b"\n\n",
                        b"data: " + orjson.dumps(update) + b"\n\n"])
        if op == "send":
            return Raw(200, _JSON, orjson.dumps({"message": MESSAGE_V10}))
        if op == "card":
            return Raw(200, _JSON, orjson.dumps(default_card()))
        if op == "push":
            if verb == "DELETE":
                return Raw(200, _JSON, b"{}")
            if verb == "GET" and cid is None:
                return Raw(200, _JSON, orjson.dumps({"configs": [], "nextPageToken": ""}))
            return Raw(200, _JSON, orjson.dumps({"taskId": tid, "id": cid or "p-1", "url": "https://example.invalid/hook"}))
        if op == "list":
            return Raw(200, _JSON, orjson.dumps({"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}))
        return Raw(200, _JSON, orjson.dumps(task_v10(tid)))  # get, cancel


_SEG = r"(?P<id>[^/]+)"
_ROUTES = (  # (verbs, path tail, op): docs/protocol.md §1.3
    ("POST", r"/message:send", "send"),
    ("POST", r"/message:stream", "stream"),
    ("GET", r"/tasks", "list"),
    ("POST", rf"/tasks/{_SEG}:cancel", "cancel"),
    ("GET POST", rf"/tasks/{_SEG}:subscribe", "subscribe"),
    ("GET POST", rf"/tasks/{_SEG}/pushNotificationConfigs", "push"),
    ("GET DELETE", rf"/tasks/{_SEG}/pushNotificationConfigs/(?P<cid>[^/]+)", "push"),
    ("GET", rf"/tasks/{_SEG}", "get"),
    ("GET", r"/extendedAgentCard", "card"),
    ("GET", r"/v1/card", "card"),
)
_COMPILED = [(verbs.split(), re.compile(r"(?:/[^/]*)*?" + tail, re.IGNORECASE), op) for verbs, tail, op in _ROUTES]


def _route(verb: str, path: str) -> tuple[str, str, str | None] | None:
    for verbs, pattern, op in _COMPILED:
        m = pattern.fullmatch(path)
        if m is not None and verb in verbs:
            groups = m.groupdict()
            return op, groups.get("id") or NO_TASK, groups.get("cid")
    return None


def _follow_up(body: Any) -> str | None:
    """The task a REST send names: ``message`` (or v0.3's ``request``) ``.taskId``."""
    if not isinstance(body, dict):
        return None
    message = body.get("message", body.get("request"))
    if not isinstance(message, dict):
        return None
    value = message.get("taskId")
    if value is None:
        value = message.get("task_id")
    return value if isinstance(value, str) and value else None
