"""Every road a client reaches a worker by through the gateway, for the field-case tests that
must hold on all of them (docs/field-cases.md F18-F22): JSON-RPC and REST, v1.0 and v0.3, and
the version bridge (docs/bridge.md §3) both ways on both bindings.

A test writes the worker's payloads once, in v1.0, and the road turns them into the worker's
form (gateway/a2a/bridge.py, as tests/proxy/test_bridge_field_cases.py does); what the client
gets back is read without the gateway's code: an event's kind, a state folded to lower-case
kebab, an artifact's parts by their ``text`` — the same member in every dialect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import orjson

from gateway.a2a import bridge
from gateway.a2a.bridge import Dialect
from gateway.a2a.jsonrpc import Operation
from tests.proxy.conftest import Harness, frames
from tests.support.scripted_worker import Data, Event, default_card

V1D, J03, R03 = Dialect.V1_0, Dialect.V0_3_JSONRPC, Dialect.V0_3_REST

V10_CARD = {**default_card(), "supportedInterfaces": [
    {"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
    {"url": "http://127.0.0.1:1/", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}]}
V03_CARD = {
    "protocolVersion": "0.3.0", "name": "scripted", "description": "scripted v0.3 worker", "version": "1.0.0",
    "url": "http://127.0.0.1:1/", "preferredTransport": "JSONRPC",
    "additionalInterfaces": [{"url": "http://127.0.0.1:1/", "transport": "JSONRPC"},
                             {"url": "http://127.0.0.1:1/", "transport": "HTTP+JSON"}],
    "capabilities": {"streaming": True, "pushNotifications": True},
    "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "echo", "name": "Echo", "description": "echo", "tags": ["test"]}],
}
_METHODS = {V1D: {"stream": "SendStreamingMessage", "send": "SendMessage", "get": "GetTask",
                  "subscribe": "SubscribeToTask"},
            J03: {"stream": "message/stream", "send": "message/send", "get": "tasks/get",
                  "subscribe": "tasks/resubscribe"}}


@dataclass(frozen=True)
class Road:
    """One way through the gateway: the client's binding and dialect, the worker's dialect,
    and the worker's card (``None``: the scripted worker's default, which serves JSON-RPC in
    both versions, so nothing is bridged)."""

    id: str
    binding: str  # "jsonrpc" | "rest"
    client: Dialect
    worker: Dialect
    card: dict[str, Any] | None = None

    @property
    def bridged(self) -> bool:
        return self.client is not self.worker


ROADS = [
    Road("jsonrpc-1.0", "jsonrpc", V1D, V1D),
    Road("jsonrpc-0.3", "jsonrpc", J03, J03),
    Road("rest-1.0", "rest", V1D, V1D),
    Road("rest-0.3", "rest", R03, R03),
]
BRIDGES = [
    Road("bridge-jsonrpc-1.0-to-0.3", "jsonrpc", V1D, J03, V03_CARD),
    Road("bridge-jsonrpc-0.3-to-1.0", "jsonrpc", J03, V1D, V10_CARD),
    Road("bridge-rest-1.0-to-0.3", "rest", V1D, R03, V03_CARD),
    Road("bridge-rest-0.3-to-1.0", "rest", R03, V1D, V10_CARD),
]


def _prefix(dialect: Dialect) -> str:
    return "/v1" if dialect is R03 else ""


class Driver:
    """A road of a running harness: the worker scripted in its form, the client's calls."""

    def __init__(self, h: Harness, road: Road) -> None:
        self.h = h
        self.road = road
        self._ids = 0
        # messageIds of this driver's own: two drivers (replicas on one Redis) never send the
        # same one, which the gateway would take for a retry (docs/retries.md §1)
        self._prefix = uuid4().hex[:8]

    # --- the worker's side --------------------------------------------------------------------
    def w_event(self, v1_event: dict[str, Any]) -> Any:
        """A v1.0 StreamResponse as the worker writes it."""
        return bridge.convert_event(v1_event, V1D, self.road.worker)

    def w_task(self, v1_task: dict[str, Any]) -> Any:
        """A v1.0 Task (a GetTask result) as the worker writes it."""
        return bridge.convert_result(Operation.GET, v1_task, V1D, self.road.worker)

    def on_stream(self, v1_events: list[dict[str, Any]]) -> None:
        """The worker's answer to the next streaming send (new task or follow-up)."""
        if self.road.binding == "jsonrpc":
            steps: list[Any] = [Event(result=self.w_event(e)) for e in v1_events]
            self.h.worker.on(_METHODS[self.road.worker]["stream"], sse=steps)
        else:
            steps = [Data(self.w_event(e)) for e in v1_events]
            self.h.worker.on_path("POST", _prefix(self.road.worker) + "/message:stream", sse=steps)

    def on_subscribe(self, tid: str, v1_events: list[dict[str, Any]]) -> None:
        """The worker's answer to the next subscribe to ``tid``."""
        if self.road.binding == "jsonrpc":
            steps: list[Any] = [Event(result=self.w_event(e)) for e in v1_events]
            self.h.worker.on(_METHODS[self.road.worker]["subscribe"], sse=steps)
        else:
            steps = [Data(self.w_event(e)) for e in v1_events]
            self.h.worker.on_path("POST", f"{_prefix(self.road.worker)}/tasks/{tid}:subscribe", sse=steps)

    def on_send(self, v1_result: dict[str, Any]) -> None:
        """The worker's answer to the next unary send (a v1.0 SendMessageResponse)."""
        answer = bridge.convert_result(Operation.SEND, v1_result, V1D, self.road.worker)
        if self.road.binding == "jsonrpc":
            self.h.worker.on(_METHODS[self.road.worker]["send"], json_result=answer)
        else:
            self.h.worker.on_path("POST", _prefix(self.road.worker) + "/message:send", json_body=answer)

    def on_get(self, tid: str, v1_task: dict[str, Any], *, times: int | None = 1) -> None:
        """The worker's answer to GetTask ``tid`` (the gateway's own probes included)."""
        if self.road.binding == "jsonrpc":
            self.h.worker.on(_METHODS[self.road.worker]["get"], json_result=self.w_task(v1_task), times=times)
        else:
            self.h.worker.on_path("GET", f"{_prefix(self.road.worker)}/tasks/{tid}",
                                  json_body=self.w_task(v1_task), times=times)

    def worker_sends(self) -> int:
        """Sends (unary or streaming) the worker got."""
        if self.road.binding == "jsonrpc":
            names = (_METHODS[self.road.worker]["send"], _METHODS[self.road.worker]["stream"])
            return sum(len(self.h.worker.calls(n)) for n in names)
        pre = _prefix(self.road.worker)
        return len(self.h.worker.path_calls("POST", pre + "/message:send")) + \
            len(self.h.worker.path_calls("POST", pre + "/message:stream"))

    # --- the client's side ----------------------------------------------------------------------
    @property
    def headers(self) -> dict[str, str]:
        return {"A2A-Version": "1.0"} if self.road.client is V1D else {}

    def message(self, text: str, task_id: str | None = None) -> dict[str, Any]:
        self._ids += 1
        if self.road.client is J03:
            msg: dict[str, Any] = {"kind": "message", "messageId": f"m-{self._prefix}-{self._ids}", "role": "user",
                                   "parts": [{"kind": "text", "text": text}]}
        elif self.road.client is R03:
            msg = {"messageId": f"m-{self._prefix}-{self._ids}", "role": "ROLE_USER", "content": [{"text": text}]}
        else:
            msg = {"messageId": f"m-{self._prefix}-{self._ids}", "role": "ROLE_USER", "parts": [{"text": text}]}
        if task_id:
            msg.update(taskId=task_id, contextId=task_id.replace("t-", "c-"))
        return msg

    def stream(self, text: str = "go", task_id: str | None = None) -> list[tuple[str, Any]]:
        """A streaming send; the events the client got, as ``(kind, object)`` (kind: ``task``,
        ``status``, ``artifact``, ``message`` or ``error``)."""
        message = self.message(text, task_id)
        if self.road.binding == "jsonrpc":
            _, raw = self.h.stream({"jsonrpc": "2.0", "id": "s", "params": {"message": message},
                                    "method": _METHODS[self.road.client]["stream"]}, headers=self.headers)
            docs = [f["data"] for f in frames(raw) if f["data"] is not None]
            return [("error", d["error"]) if "error" in d else event_of(d["result"]) for d in docs]
        _, raw = self.h.rest("POST", _prefix(self.road.client) + "/message:stream", json={"message": message},
                             headers={**self.headers, "accept": "text/event-stream"})
        return [("error", f["data"]) if f["event"] == "error" else event_of(f["data"])
                for f in frames(raw) if f["data"] is not None]

    def subscribe(self, tid: str) -> list[tuple[str, Any]]:
        """A subscribe to ``tid``; the events the client got, as :meth:`stream` gives them."""
        if self.road.binding == "jsonrpc":
            _, raw = self.h.stream({"jsonrpc": "2.0", "id": "r", "params": {"id": tid},
                                    "method": _METHODS[self.road.client]["subscribe"]}, headers=self.headers)
            docs = [f["data"] for f in frames(raw) if f["data"] is not None]
            return [("error", d["error"]) if "error" in d else event_of(d["result"]) for d in docs]
        _, raw = self.h.rest("POST", f"{_prefix(self.road.client)}/tasks/{tid}:subscribe",
                             headers={**self.headers, "accept": "text/event-stream"})
        return [("error", f["data"]) if f["event"] == "error" else event_of(f["data"])
                for f in frames(raw) if f["data"] is not None]

    def send(self, text: str = "go", task_id: str | None = None) -> tuple[str, Any]:
        """A unary send: ``("result", the result)`` or ``("error", the error)``."""
        message = self.message(text, task_id)
        if self.road.binding == "jsonrpc":
            r = self.h.rpc({"jsonrpc": "2.0", "id": "u", "method": _METHODS[self.road.client]["send"],
                            "params": {"message": message}}, headers=self.headers)
            doc = r.json()
            return ("error", doc["error"]) if "error" in doc else ("result", doc["result"])
        r, raw = self.h.rest("POST", _prefix(self.road.client) + "/message:send", json={"message": message},
                             headers=self.headers)
        doc = orjson.loads(raw)
        return ("error", doc.get("error", doc)) if r.status_code >= 400 else ("result", doc)

    def get(self, tid: str) -> tuple[str, Any]:
        """GetTask: ``("task", the Task)`` or ``("error", the error object)`` (its JSON-RPC
        ``error``, the REST ``google.rpc.Status`` ``error``, or a v0.3 REST error body)."""
        if self.road.binding == "jsonrpc":
            r = self.h.rpc({"jsonrpc": "2.0", "id": "g", "method": _METHODS[self.road.client]["get"],
                            "params": {"id": tid}}, headers=self.headers)
            doc = r.json()
            return ("error", doc["error"]) if "error" in doc else ("task", doc["result"])
        r, raw = self.h.rest("GET", f"{_prefix(self.road.client)}/tasks/{tid}", headers=self.headers)
        doc = orjson.loads(raw)
        return ("error", doc.get("error", doc)) if r.status_code >= 400 else ("task", doc)


def event_of(result: Any) -> tuple[str, Any]:
    """A stream result as ``(kind, object)``, read from either form (``kind`` tag or wrapper)."""
    kinds = {"task": "task", "status-update": "status", "artifact-update": "artifact", "message": "message"}
    if isinstance(result, dict) and result.get("kind") in kinds:
        return kinds[result["kind"]], result
    for member, kind in (("task", "task"), ("statusUpdate", "status"), ("artifactUpdate", "artifact"),
                         ("message", "message"), ("msg", "message")):
        if isinstance(result, dict) and member in result:
            return kind, result[member]
    return "other", result


def state(obj: dict[str, Any]) -> str:
    """A Task's or status update's state, folded: ``completed``, ``input-required``, …"""
    raw = obj["status"]["state"]
    folded = raw.removeprefix("TASK_STATE_").lower().replace("_", "-")
    return "canceled" if folded == "cancelled" else folded


def texts(artifact: dict[str, Any]) -> list[str]:
    """An artifact's text parts, in order."""
    return [p.get("text") for p in artifact.get("parts", [])]


def delivered_view(events: list[tuple[str, Any]], view: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """The artifacts as a client holds them after the delivered ``events`` (docs/protocol.md
    §3.1: ``append`` adds parts, anything else replaces), continuing ``view``."""
    view = dict(view or {})
    for kind, obj in events:
        if kind == "artifact":
            art = obj["artifact"]
            aid = art["artifactId"]
            if obj.get("append") is True and aid in view:
                view[aid] = view[aid] + texts(art)
            else:
                view[aid] = texts(art)
        elif kind == "task" and isinstance(obj.get("artifacts"), list):
            for art in obj["artifacts"]:
                view[art["artifactId"]] = texts(art)
    return view


def answered_view(task: dict[str, Any]) -> dict[str, list[str]]:
    """A Task's artifacts as ``{artifactId: texts}``."""
    return {a["artifactId"]: texts(a) for a in task.get("artifacts") or []}


def art(aid: str, *parts: str) -> dict[str, Any]:
    """A v1.0 artifact of text parts."""
    return {"artifactId": aid, "parts": [{"text": t} for t in parts]}


def artifact_event(tid: str, aid: str, *parts: str, **flags: bool) -> dict[str, Any]:
    """A v1.0 StreamResponse carrying an artifact update of text parts."""
    return {"artifactUpdate": {"taskId": tid, "contextId": tid.replace("t-", "c-"), "artifact": art(aid, *parts),
                               **flags}}
