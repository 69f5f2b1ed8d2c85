"""The push relay's decisions, sans I/O (docs/push.md): where a push config sits in a request
and how it is rewritten to the gateway's callback (docs/push.md §1), how a worker's answer is
given back the client's webhook (docs/push.md §1.2), and how one notification a worker posts
to a callback is read, judged like an SSE event and written for the client's version
(docs/push.md §2).

Push is exchanges like any other, generators of commands a driver performs: the configs of a
client request rewritten on the way in (:func:`intake`, and :func:`settle` after the request),
a worker's notification to a callback (:func:`find_callback`, then :func:`notification`), a
task update the sweep judged (:func:`observed`). Pure: values in, values (or commands) out.
The driver makes the callback ids and tokens (:class:`NewCallback`), reads and writes the
ledger and resolves webhook hosts (:class:`CheckWebhook`).
"""

from __future__ import annotations

import copy
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.bridge import J03, V1, convert_event
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.states import normalize_state
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import (
    BodyTooLargeError,
    ClientGoneError,
    LedgerError,
    NestingTooDeepError,
    PushLimitError,
    UnknownStateError,
)
from gateway.exchange.commands import (
    CheckWebhook,
    CommandGenerator,
    Count,
    DeletePushConfig,
    Enqueue,
    GetPushConfig,
    Log,
    NewCallback,
    PushConfigs,
    PutPushConfig,
    ReadBody,
    Respond,
)
from gateway.exchange.judge import judge, load
from gateway.exchange.model import Policy
from gateway.invariants import engine
from gateway.invariants.model import Action, Exchange, StreamState
from gateway.records import PushConfigEntry

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
REFUSED_OUTCOMES = frozenset({"worker_error", "upstream_status", "invalid_agent_response", "rejected",
                              "not_admitted"})
"""Outcomes of a create that mean the worker holds no config (:attr:`Summary.outcome`)."""


@dataclass(frozen=True, slots=True)
class PushLimits:
    """The bounds on relayed push configs (``push.max_configs_per_task``,
    ``push.max_configs_total``; the defaults are the config's)."""

    max_configs_per_task: int = 10
    max_configs_total: int = 100_000


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


def digest(token: str) -> str:
    """The SHA-256 of a worker's callback token, as the ledger keeps it (hex)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class PushConfigData:
    """What the ledger keeps of one relayed push config (:attr:`PushConfigEntry.data`): the
    client's webhook, the SHA-256 of the worker's token, the callback URL, the client's
    version and binding, the client's config id, and whether the webhook was sent the task's
    terminal state (docs/push.md §2)."""

    webhook: Webhook
    worker_token_sha256: str
    callback_url: str
    version: ProtocolVersion
    binding: Binding
    config_id: str | None
    terminal_sent: bool = False  # the webhook was sent the task's terminal state (docs/push.md §2)

    def encode(self) -> bytes:
        """The stored form (JSON)."""
        w = self.webhook
        return orjson.dumps({"url": w.url, "token": w.token, "auth": w.authentication,
                             "wt": self.worker_token_sha256, "cb": self.callback_url,
                             "v": self.version.value, "b": self.binding.value, "cid": self.config_id,
                             "ts": self.terminal_sent})

    @classmethod
    def decode(cls, data: bytes) -> PushConfigData:
        """The stored form read back."""
        d = orjson.loads(data)
        return cls(Webhook(d["url"], d["token"], d["auth"]), d["wt"], d["cb"], ProtocolVersion(d["v"]),
                   Binding(d["b"]), d["cid"], bool(d.get("ts", False)))


@dataclass
class PushStep:
    """What :func:`intake` made of one client request: ``doc`` the rewritten params / body
    (``None``: unchanged), ``refusal`` ``(reason, message)`` when a webhook is refused (answer
    -32602, forward nothing), ``restore`` for the worker's answer (``None``: leave it), the
    pending inline configs to bind once the task is known, and the configs created and
    replaced (for :func:`settle`)."""

    doc: Any = None
    refusal: tuple[str, str] | None = None
    restore: Callable[[Any], Any] | None = None
    pending: list[PushConfigEntry] = field(default_factory=list)
    created: list[PushConfigEntry] = field(default_factory=list)
    replaced: list[PushConfigEntry] = field(default_factory=list)


NOTHING = PushStep()
"""The step of a request the relay leaves as it is."""


def relays(operation: Operation, doc: Any, task_id: str | None) -> bool:
    """Whether :func:`intake` has anything to do for a request of ``operation`` (params or
    body ``doc``) on ``task_id``: a request that carries push configs, or whose answer may name
    one, or that deletes one. A send without a config is left alone: the shell then builds no
    driver for it."""
    if operation in ANSWER_OPERATIONS or (operation is Operation.PUSH_DELETE and task_id):
        return True
    return operation in CONFIG_OPERATIONS and bool(find_configs(operation, doc))


def intake(upstream: str, operation: Operation, version: ProtocolVersion, binding: Binding, doc: Any,
           task_id: str | None, config_id: str | None, tenant: str, *, callback_base: str,
           limits: PushLimits) -> CommandGenerator[PushStep]:
    """docs/push.md §1 for one client request (params or body ``doc``) of ``operation`` on
    ``task_id``: store and rewrite the configs it carries (callback URLs below
    ``callback_base``), refuse a webhook docs/push.md §4 refuses, map the answer back, forget a
    deleted config.

    Raises:
        LedgerError: the ledger failed (answer 503).
    """
    if operation in CONFIG_OPERATIONS:
        hooks = client_webhooks(operation, doc)
        if not hooks and operation is Operation.PUSH_CREATE:
            # nothing to relay, but the worker may answer with a config it holds: a gateway
            # callback it names is not this request's, so its token is not shown
            return PushStep(restore=lambda result: restore_answer(result, {}))
        if not hooks:
            return NOTHING
        return (yield from _configure(upstream, operation, version, binding, doc, hooks, task_id or "", tenant,
                                      callback_base, limits))
    if operation is Operation.PUSH_DELETE and task_id:
        entries = yield PushConfigs(task_id, tenant)
        for entry in entries:
            if config_id is None or PushConfigData.decode(entry.data).config_id == config_id:
                yield DeletePushConfig(entry.callback_id)
        return NOTHING
    if operation in ANSWER_OPERATIONS:
        entries = (yield PushConfigs(task_id, tenant)) if task_id else []
        hooks_by_url = {d.callback_url: d.webhook for d in map(PushConfigData.decode, (e.data for e in entries))}
        # with none, the answer is still looked at: a callback it names is not this task's
        return PushStep(restore=lambda result: restore_answer(result, hooks_by_url))
    return NOTHING


def _configure(upstream: str, operation: Operation, version: ProtocolVersion, binding: Binding, doc: Any,
               hooks: list[Webhook], task_id: str, tenant: str, base: str,
               limits: PushLimits) -> CommandGenerator[PushStep]:
    if operation is Operation.PUSH_CREATE and len(hooks) > 1:
        # e.g. a v1.0 flat url beside a v0.3 pushNotificationConfig.url: the worker would read
        # one of them, maybe the one not checked and rewritten (docs/push.md §4)
        yield Count("push_webhooks_refused", ("ambiguous",))
        return PushStep(refusal=("ambiguous", "push notification config refused: it names more "
                                              "than one webhook (a url of each protocol version)"))
    for hook in hooks:
        refused = yield CheckWebhook(hook.url)
        if refused is not None:
            reason, message = refused
            yield Count("push_webhooks_refused", (reason,))
            yield Log("warning", "push_webhook_refused", (("upstream", upstream), ("task_id", task_id or None),
                                                          ("reason", reason)))
            return PushStep(refusal=(reason, f"push notification config refused: {message}"))
    callbacks, entries, by_url = [], [], {}
    config_ids = _config_ids(operation, doc, len(hooks))
    for hook, config_id in zip(hooks, config_ids):
        callback_id, worker_token = yield NewCallback()
        url = f"{base}{CALLBACK_PATH}{callback_id}"
        data = PushConfigData(hook, digest(worker_token), url, version, binding, config_id or task_id or None)
        entries.append(PushConfigEntry(callback_id, upstream, task_id, data.encode(), tenant))
        callbacks.append((url, worker_token))
        by_url[url] = hook
    replaced: list[PushConfigEntry] = []
    if operation is Operation.PUSH_CREATE and task_id:  # the same config id: an update
        same = config_ids[0] or task_id
        old = yield PushConfigs(task_id, tenant)
        replaced = [e for e in old if PushConfigData.decode(e.data).config_id == same]
    # pending inline configs (task "") of every new task share one key: only the total bounds them
    per_task = limits.max_configs_per_task + len(replaced) if task_id else limits.max_configs_total
    try:
        for entry in entries:
            yield PutPushConfig(entry, per_task, limits.max_configs_total)
    except PushLimitError as exc:
        yield Count("push_webhooks_refused", ("limit",))
        return PushStep(refusal=("limit", f"push notification config refused: {exc}"))
    return PushStep(doc=rewrite_request(operation, doc, callbacks),
                    restore=lambda result: restore_answer(result, by_url),
                    pending=entries if not task_id else [], created=entries, replaced=replaced)


def settle(step: PushStep, outcome: str, task_id: str | None, limits: PushLimits) -> CommandGenerator[None]:
    """After the request of ``step`` ended with ``outcome`` (:attr:`Summary.outcome`) about
    ``task_id``: bind the pending inline configs to the task the worker's answer named; forget
    the configs of a create the worker refused, or the ones a create with the same config id
    replaced (best effort: a failed ledger leaves them until
    ``push.config_retention_seconds``)."""
    refused = outcome in REFUSED_OUTCOMES and not step.pending
    try:
        for entry in step.created if refused else step.replaced:
            yield DeletePushConfig(entry.callback_id)
        if not refused and task_id:
            for entry in step.pending:
                yield from bind(entry, task_id, limits)
    except LedgerError:
        pass


def bind(entry: PushConfigEntry, task_id: str, limits: PushLimits) -> CommandGenerator[None]:
    """Store the pending inline config of ``entry.callback_id`` under ``task_id`` (best effort:
    a failed store leaves it pending, logged; its first notification binds it).

    Raises:
        LedgerError: the config could not be read.
    """
    current = yield GetPushConfig(entry.callback_id)
    if current is None or current.task_id:
        return
    data = PushConfigData.decode(current.data)
    data.config_id = data.config_id or task_id  # a2a-sdk names an inline config after its task
    bound = PushConfigEntry(entry.callback_id, entry.upstream, task_id, data.encode(), entry.tenant)
    try:
        yield PutPushConfig(bound, limits.max_configs_per_task, limits.max_configs_total)
    except (LedgerError, PushLimitError) as exc:
        yield Log("warning", "push_config_not_bound", (("upstream", entry.upstream), ("task_id", task_id),
                                                       ("error", str(exc))))


def mark_terminal_sent(callback_id: str, limits: PushLimits) -> CommandGenerator[None]:
    """Note on the push config that its webhook was sent the task's terminal state: what the
    worker posts later is not delivered (docs/push.md §2). Best effort: a failure leaves the
    flag off, and at most one more copy of the terminal state is delivered."""
    try:
        current = yield GetPushConfig(callback_id)
        if current is None:
            return
        data = PushConfigData.decode(current.data)
        if data.terminal_sent:
            return
        data.terminal_sent = True
        marked = PushConfigEntry(current.callback_id, current.upstream, current.task_id, data.encode(),
                                 current.tenant)
        yield PutPushConfig(marked, limits.max_configs_per_task, limits.max_configs_total)
    except (LedgerError, PushLimitError):
        pass


def observed(task_id: str, stream_response: dict[str, Any], tenant: str,
             limits: PushLimits) -> CommandGenerator[int]:
    """Enqueue one already-judged, already-recorded v1.0 StreamResponse (e.g. ``{"task":
    {...}}`` from the sweep's GetTask answer, docs/push.md §2.1) for every push config of the
    task, written per config's client version and binding (:func:`client_body`); not judged
    again. Returns how many outbox entries were added.

    Raises:
        LedgerError: the ledger failed. PushLimitError: the outbox is full (entries added
            before it stay).
    """
    entries = yield PushConfigs(task_id, tenant)
    terminal = _is_terminal(stream_response)
    added = 0
    for entry in entries:
        data = PushConfigData.decode(entry.data)
        if data.terminal_sent:  # this webhook has had the task's end already
            continue
        yield Enqueue(entry.callback_id, task_id, client_body(stream_response, data.version, data.binding), tenant)
        added += 1
        if terminal:
            yield from mark_terminal_sent(entry.callback_id, limits)
    return added


def _is_terminal(stream_response: dict[str, Any]) -> bool:
    """True when a v1.0 StreamResponse's Task or status update is in a terminal state."""
    item = stream_response.get("task") or stream_response.get("statusUpdate")
    status = item.get("status") if isinstance(item, dict) else None
    try:
        return isinstance(status, dict) and normalize_state(status.get("state"), ProtocolVersion.V1_0).state.is_terminal
    except UnknownStateError:
        return False


def _config_ids(operation: Operation, doc: Any, n: int) -> list[str | None]:
    """The config id the client gave each config (v1.0 ``id``, v0.3 ``pushNotificationConfig.id``,
    v0.3 REST ``configId``), for matching a later delete."""
    if operation is not Operation.PUSH_CREATE or not isinstance(doc, dict):
        return [None] * n
    for value in (doc.get("id"), (doc.get("pushNotificationConfig") or {}).get("id"), doc.get("configId"),
                  ((doc.get("config") or {}).get("pushNotificationConfig") or {}).get("id")):
        if isinstance(value, str) and value:
            return [value]
    return [None] * n


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
    limits: PushLimits = field(default_factory=lambda: PushLimits())


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
    if not sub.task_id:
        # A pending inline config is bound to its task before anything of the notification is
        # stored: the send it came with then judges its answer as being about that task
        # (:attr:`RequestExchange.pending_push`).
        yield from bind(PushConfigEntry(sub.callback_id, sub.upstream, "", b"", sub.tenant), task_id, sub.limits)
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
    yield Enqueue(sub.callback_id, task_id, client_body(judged, sub.version, sub.binding), sub.tenant)
    return Verdict(200, None, task_id, judged, ended=outcome.stream is not None and outcome.stream.terminal)


def _refused(sub: Subscription, status: int, reason: str, task_id: str | None) -> CommandGenerator[Verdict]:
    yield Count("push_refused", (reason,))
    yield Log("warning", "push_notification_refused", (("upstream", sub.upstream), ("task_id", task_id),
                                                       ("reason", reason)))
    return Verdict(status, reason, task_id)


def find_callback(method: str, callback_id: str, upstreams: frozenset[str]) -> CommandGenerator[PushConfigEntry | None]:
    """The first half of a POST to a callback URL (docs/push.md §2), before the upstream it
    belongs to is known: 405 for another method, 503 while the ledger cannot be read, 404 for
    an unknown callback or one of an upstream not in ``upstreams`` (removed by a reload).
    Returns the push config, or ``None`` once answered."""
    if method != "POST":
        yield from _answer(405, "POST only")
        return None
    try:
        entry: PushConfigEntry | None = yield GetPushConfig(callback_id)
    except LedgerError:
        yield from _answer(503, "gateway task ledger unavailable", retry_after=True)
        return None
    if entry is None or entry.upstream not in upstreams:
        yield from _answer(404, "no such push notification callback")
        return None
    return entry


def notification(policy: Policy, entry: PushConfigEntry, token: str, max_bytes: int,
                 limits: PushLimits) -> CommandGenerator[Verdict | None]:
    """The second half, performed for ``entry``'s upstream: read the body (413 past
    ``max_bytes``), check the worker's ``X-A2A-Notification-Token`` ``token`` (401), then
    :func:`judge_notification`'s status — 503 while the ledger is unavailable or the outbox
    full — and mark the config once its webhook was sent the task's terminal state. Returns
    the verdict (``None``: not judged)."""
    try:
        body = yield ReadBody(max_bytes)
    except ClientGoneError:
        return None
    except BodyTooLargeError:
        yield Count("push_refused", ("too_large",))
        yield from _answer(413, f"notification exceeds {max_bytes} bytes")
        return None
    data = PushConfigData.decode(entry.data)
    if not hmac.compare_digest(digest(token), data.worker_token_sha256):
        yield Count("push_refused", ("token",))
        yield Log("warning", "push_notification_refused", (("upstream", entry.upstream),
                                                           ("task_id", entry.task_id or None), ("reason", "token")))
        yield from _answer(401, "wrong or missing X-A2A-Notification-Token")
        return None
    sub = Subscription(entry.callback_id, entry.upstream, entry.task_id, data.version, data.binding, entry.tenant,
                       data.terminal_sent, limits)
    try:
        verdict = yield from judge_notification(policy, sub, body)
    except PushLimitError:
        yield Count("push_refused", ("outbox_full",))
        yield from _answer(503, "push outbox full; retry later", retry_after=True)
        return None
    except LedgerError:
        yield Count("push_refused", ("ledger",))
        yield from _answer(503, "gateway task ledger unavailable", retry_after=True)
        return None
    if verdict.ended:
        yield from mark_terminal_sent(entry.callback_id, limits)
    yield from _answer(verdict.status, verdict.reason or "accepted")
    return verdict


def _answer(status: int, message: str, *, retry_after: bool = False) -> CommandGenerator[None]:
    yield Respond(status, jsonrpc.dumps({"status": status, "message": message}), "json", None,
                  ((b"retry-after", b"1"),) if retry_after else ())
