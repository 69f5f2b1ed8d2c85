"""The push relay's decisions, sans I/O (docs/push.md): where a push config sits in a request
and how it is rewritten to the gateway's callback (docs/push.md §1), how a worker's answer is
given back the client's webhook (docs/push.md §1.2), and how one notification a worker posts
to a callback is read, judged like an SSE event and written for the client's version
(docs/push.md §2).

Pure: values in, values (or commands) out. The shell (:mod:`gateway.push.relay`) makes the
callback ids and tokens, reads and writes the ledger and resolves webhook hosts.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.bridge import J03, V1, convert_event
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import NestingTooDeepError
from gateway.exchange.commands import CommandGenerator, Count, Enqueue, Log
from gateway.exchange.judge import judge, load
from gateway.exchange.model import Policy
from gateway.invariants import engine
from gateway.invariants.model import Action, Exchange, StreamState

# --- docs/push.md §1: push configs in client requests ----------------------------------------------------------

_CREATE_PATHS: tuple[tuple[str, ...], ...] = (
    (),  # v1.0: the flat TaskPushNotificationConfig (JSON-RPC params, REST body)
    ("pushNotificationConfig",),  # v0.3 JSON-RPC: {taskId, pushNotificationConfig}
    ("config", "pushNotificationConfig"),  # v0.3 REST: {parent, configId, config: {name, pushNotificationConfig}}
)
_SEND_PATHS: tuple[tuple[str, ...], ...] = (
    ("configuration", "taskPushNotificationConfig"),  # v1.0
    ("configuration", "pushNotificationConfig"),  # v0.3 JSON-RPC
    ("configuration", "pushNotification"),  # v0.3 REST (PROTO03)
)
CONFIG_OPERATIONS = frozenset({Operation.PUSH_CREATE, Operation.SEND, Operation.STREAM})
"""The operations whose request may carry a push config to rewrite."""
ANSWER_OPERATIONS = frozenset({Operation.PUSH_CREATE, Operation.PUSH_GET, Operation.PUSH_LIST})
"""The operations whose answer holds push configs naming a callback URL."""
CALLBACK_PATH = "/_a2a_gateway/push/"
"""The gateway's callback URLs are ``<base>/_a2a_gateway/push/<callback id>`` (docs/push.md §2)."""


@dataclass(frozen=True, slots=True)
class Webhook:
    """The client's side of one push config, as the client sent it: ``url``, ``token``
    (``None``: none) and ``authentication`` (the client's own object, ``None``: none)."""

    url: str
    token: str | None
    authentication: dict[str, Any] | None

    def headers(self) -> list[tuple[str, str]]:
        """The headers a delivery carries (docs/push.md §3): ``X-A2A-Notification-Token`` from
        ``token``, ``Authorization: <scheme> <credentials>`` from ``authentication`` (v1.0
        ``scheme``, or the first of v0.3 ``schemes``) when it has credentials."""
        out: list[tuple[str, str]] = []
        if self.token:
            out.append(("X-A2A-Notification-Token", self.token))
        auth = self.authentication or {}
        scheme = auth.get("scheme")
        schemes = auth.get("schemes")
        if not isinstance(scheme, str) and isinstance(schemes, list) and schemes and isinstance(schemes[0], str):
            scheme = schemes[0]
        credentials = auth.get("credentials")
        if isinstance(scheme, str) and scheme and isinstance(credentials, str) and credentials:
            out.append(("Authorization", f"{scheme} {credentials}"))
        return out


def _at(doc: Any, path: tuple[str, ...]) -> dict[str, Any] | None:
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, dict) and isinstance(doc.get("url"), str) else None


def find_configs(operation: Operation, doc: Any) -> list[dict[str, Any]]:
    """The push config objects (each with a string ``url``) in a request's JSON-RPC ``params``
    or REST body ``doc``: the ones of a create (one, unless the request is ambiguous: every
    shape a worker may read is returned, so none is left unrewritten), the inline ones of a
    send (docs/push.md §1)."""
    if operation is Operation.PUSH_CREATE:
        return [found for path in _CREATE_PATHS if (found := _at(doc, path)) is not None]
    if operation in (Operation.SEND, Operation.STREAM):
        return [found for path in _SEND_PATHS if (found := _at(doc, path)) is not None]
    return []


def client_webhooks(operation: Operation, doc: Any) -> list[Webhook]:
    """The client's webhooks in the request ``doc``, in :func:`find_configs` order."""
    out = []
    for config in find_configs(operation, doc):
        token = config.get("token")
        auth = config.get("authentication")
        out.append(Webhook(config["url"], token if isinstance(token, str) and token else None,
                           auth if isinstance(auth, dict) else None))
    return out


def rewrite_request(operation: Operation, doc: Any, callbacks: list[tuple[str, str]]) -> Any:
    """A copy of ``doc`` whose push configs name the gateway instead of the client: the
    ``url`` and ``token`` of the n-th config (:func:`find_configs`) become the n-th
    ``(callback_url, worker_token)`` of ``callbacks``, and its ``authentication`` (the
    client's credentials) is left out."""
    doc = copy.deepcopy(doc)
    for config, (url, token) in zip(find_configs(operation, doc), callbacks, strict=True):
        config["url"] = url
        config["token"] = token
        config.pop("authentication", None)
    return doc


def restore_answer(result: Any, webhooks: Mapping[str, Webhook], depth: int = 5) -> Any:
    """``result`` (a create / get / list answer, any version's shape) with every push config
    whose ``url`` is one of the gateway's callback URLs (the keys of ``webhooks``) given back
    the client's ``url``, ``token`` and ``authentication``. A config naming any other callback
    URL of the gateway (:data:`CALLBACK_PATH`: another tenant's or task's, or one the ledger no
    longer holds) keeps its ``url`` but loses its ``token`` and ``authentication``: the token
    is the worker's credential for that callback, with which anyone could post notifications
    of the task into the ledger (docs/push.md §1.2). Unchanged (the same object) when none is
    found."""
    if depth < 0:
        return result
    if isinstance(result, list):
        items = [restore_answer(item, webhooks, depth - 1) for item in result]
        return result if all(a is b for a, b in zip(items, result)) else items
    if not isinstance(result, dict):
        return result
    url = result.get("url")
    if isinstance(url, str) and url in webhooks:
        hook = webhooks[url]
        out = {k: v for k, v in result.items() if k not in ("token", "authentication")}
        out["url"] = hook.url
        if hook.token is not None:
            out["token"] = hook.token
        if hook.authentication is not None:
            out["authentication"] = hook.authentication
        return out
    if isinstance(url, str) and CALLBACK_PATH in url and ("token" in result or "authentication" in result):
        return {k: v for k, v in result.items() if k not in ("token", "authentication")}
    changed = {k: restore_answer(v, webhooks, depth - 1) for k, v in result.items()}
    return result if all(changed[k] is v for k, v in result.items()) else changed


# --- docs/push.md §2: a notification posted to a callback ------------------------------------------------------

_V1_MEMBERS = ("task", "message", "statusUpdate", "artifactUpdate")
_V03_KINDS = ("task", "message", "status-update", "artifact-update")


@dataclass(frozen=True, slots=True)
class Subscription:
    """What judging a notification needs of its push config: the upstream, the task (``""``:
    an inline config of a send not bound yet), the tenant, the client's version and binding
    (the form the webhook receives), and whether this webhook was already sent the task's
    terminal state (``terminal_sent``: each webhook is one push "stream" of the task, which
    ends with its terminal event; docs/push.md §2)."""

    callback_id: str
    upstream: str
    task_id: str
    version: ProtocolVersion
    binding: Binding = Binding.JSONRPC
    tenant: str = ""
    terminal_sent: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to a worker's notification: the HTTP ``status`` for the worker, the
    ``reason`` it is not delivered (a bounded label; ``None``: enqueued), the task it named
    (to bind a pending config to), ``judged``: the v1.0 StreamResponse as delivered, and
    ``ended``: it carries the task's terminal state, the last this webhook gets."""

    status: int
    reason: str | None = None
    task_id: str | None = None
    judged: Any = None
    ended: bool = False


def read_notification(body: bytes, max_depth: int) -> dict[str, Any] | None:
    """A notification body as a v1.0 StreamResponse: the v1.0 form as it is (one of
    ``task``, ``message``, ``statusUpdate``, ``artifactUpdate``), a v0.3 object (a Task, what
    a2a-sdk 0.3 posts, or a ``kind``-tagged event) translated (docs/bridge.md §1.6). ``None``:
    not JSON, or neither form."""
    try:
        doc = jsonrpc.loads(body, max_depth)
    except (orjson.JSONDecodeError, NestingTooDeepError):
        return None
    if not isinstance(doc, dict):
        return None
    if sum(member in doc for member in _V1_MEMBERS) == 1 and isinstance(
            next(doc[m] for m in _V1_MEMBERS if m in doc), dict):
        return doc
    kind = doc.get("kind")
    if kind is None and "id" in doc and "status" in doc:
        doc = {**doc, "kind": "task"}
    elif kind not in _V03_KINDS:
        return None
    converted = convert_event(doc, J03, V1)
    return converted if isinstance(converted, dict) and converted is not doc else None


def client_body(judged: Any, version: ProtocolVersion, binding: Binding) -> bytes:
    """The webhook's body for a judged v1.0 StreamResponse: as it is for a v1.0 client; for a
    v0.3 client the v0.3 JSON-RPC object (a Task, or a ``kind``-tagged event), what an
    a2a-sdk 0.3 webhook reads, whatever the client's binding (docs/push.md §2)."""
    if version is ProtocolVersion.V0_3:
        judged = convert_event(judged, V1, J03)
    return jsonrpc.dumps(judged)


def judge_notification(policy: Policy, sub: Subscription, body: bytes) -> CommandGenerator[Verdict]:
    """Read, judge and enqueue one notification posted to ``sub``'s callback (the token is
    already checked): the engine's stream-event judging (normalization, terminal absorption,
    artifact rules) with the ledger written first (:func:`gateway.exchange.judge.judge`), then
    one :class:`~gateway.exchange.commands.Enqueue` of the client's body.

    Status for the worker: 200 when enqueued, and also when the engine refused or absorbed the
    notification (counted, not delivered: the worker must not retry it); 400 for a body that
    is no notification or names another task than the config's; 503 when the outbox is full
    or the ledger unavailable (nothing kept: the worker may retry).

    Raises:
        LedgerError: the ledger failed and ``policy.fail_open`` is off.
        PushLimitError: thrown in at the ``Enqueue``: the outbox is full.
    """
    yield Count("push_received")
    result = read_notification(body, policy.max_json_depth)
    if result is None:
        return (yield from _refused(sub, 400, "malformed", None))
    task_id = engine.payload_task_id(result)
    if not task_id or (sub.task_id and task_id != sub.task_id):
        return (yield from _refused(sub, 400, "task_mismatch", task_id))
    ex = Exchange(sub.upstream, Operation.SUBSCRIBE, ProtocolVersion.V1_0, task_id, policy.mode,
                  tenant=sub.tenant)
    # Each notification is one more event of this webhook's push "stream" of the task: once
    # the webhook was sent the terminal state, what follows is dropped, as after a terminal SSE
    # event. Until then a task the ledger holds terminal (a cancel's answer recorded first, a
    # sweep) still gets its terminal state delivered once: the recorded one (docs/push.md §2).
    before = yield from load(policy, task_id, sub.tenant)
    stream = StreamState(task_id=task_id, context_id=before.record.context_id if before.record else None,
                         terminal=sub.terminal_sent)
    outcome = yield from judge(policy, ex, stream, result, direction="push")
    if outcome.action is not Action.FORWARD:
        return (yield from _refused(sub, 200, "invariant", task_id))
    judged = outcome.result
    yield Enqueue(sub.callback_id, task_id, client_body(judged, sub.version, sub.binding))
    return Verdict(200, None, task_id, judged, ended=outcome.stream is not None and outcome.stream.terminal)


def _refused(sub: Subscription, status: int, reason: str, task_id: str | None) -> CommandGenerator[Verdict]:
    yield Count("push_refused", (reason,))
    yield Log("warning", "push_notification_refused", (("upstream", sub.upstream), ("task_id", task_id),
                                                       ("reason", reason)))
    return Verdict(status, reason, task_id)

