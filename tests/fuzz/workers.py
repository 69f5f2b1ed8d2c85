"""A healthy worker for the client-side properties: it answers every request validly, so
that whatever goes wrong in an exchange is the gateway's doing.

* JSON-RPC (docs/protocol.md §3.4, §3.5, §7): the client's id is echoed as the *raw text*
  the request carried (``1e5`` stays ``1e5``), sends are answered with a direct Message,
  task reads with a WORKING Task of the task the request names, streams with one Message
  event (a send of a new message) or a Task snapshot plus an INPUT_REQUIRED status (a
  subscribe, or a streamed message to an existing task: a lone Message there is taken for
  a cut stream, see test_defect_message_stream_on_a_known_task_is_resubscribed) — never a
  terminal state, so no example leaves a task the next one cannot use.
* REST (docs/protocol.md §1.3, §3.4): the same answers without the envelope; the task id of
  ``/tasks/{id}…`` answers is the one the test expects the gateway to read
  (:attr:`HealthyWorker.rest_task_id`).
* The Agent Card (streaming and push notifications on) is served as usual.
"""

from __future__ import annotations

import json
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


def task_v10(task_id: str, state: str = "TASK_STATE_WORKING") -> dict[str, Any]:
    return {"id": task_id, "contextId": _ctx(task_id), "status": {"state": state}}


def task_v03(task_id: str, state: str = "working") -> dict[str, Any]:
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
        self.rest_task_id: str | None = None
        """The task id the gateway should read from the current REST request's path."""
        worker.on_path("*", _EVERYTHING, handler=self.answer, times=None)

    def answer(self, req: ReceivedRequest) -> Any:
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
        path = req.path.rstrip("/").lower()
        tid = self.rest_task_id or NO_TASK
        if path.endswith(":stream"):
            return Sse([b"data: " + orjson.dumps({"message": MESSAGE_V10}) + b"\n\n"])
        if path.endswith(":subscribe"):
            update = {"statusUpdate": {"taskId": tid, "contextId": _ctx(tid),
                                       "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}}
            return Sse([b"data: " + orjson.dumps({"task": task_v10(tid)}) + b"\n\n",
                        b"data: " + orjson.dumps(update) + b"\n\n"])
        if path.endswith(":send"):
            return Raw(200, _JSON, orjson.dumps({"message": MESSAGE_V10}))
        if path.endswith("extendedagentcard") or path.endswith("/v1/card"):
            return Raw(200, _JSON, orjson.dumps(default_card()))
        if "pushnotificationconfigs" in path:
            if req.http_method == "DELETE":
                return Raw(200, _JSON, b"{}")
            return Raw(200, _JSON, orjson.dumps({"taskId": tid, "id": "p-1", "url": "https://example.invalid/hook"}))
        if path.endswith("/tasks") and req.http_method == "GET":
            return Raw(200, _JSON, orjson.dumps({"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}))
        if "/tasks/" in path:
            return Raw(200, _JSON, orjson.dumps(task_v10(tid)))
        return Raw(200, _JSON, json.dumps({"relayed": req.path}).encode())
