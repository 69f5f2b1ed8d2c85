"""The push relay on the running gateway (docs/push.md): push configs on their way to the
worker get a callback URL of the gateway's own (docs/push.md §1), the worker's notifications to
it are checked, judged and put in the durable outbox (docs/push.md §2), and :meth:`PushRelay.deliver_observed`
lets other parts of the gateway (the sweep) enqueue a task update they judged themselves
(docs/push.md §2.1).

Secrets: the client's webhook token and credentials live only in the ledger's push config
entry; they are never logged, never in a metric and never sent to the worker. The worker's
token is kept as its SHA-256 only.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.states import normalize_state
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.config import UpstreamConfig
from gateway.errors import (
    BodyTooLargeError,
    ClientGoneError,
    LedgerError,
    PushLimitError,
    UnknownStateError,
    VersionConflictError,
)
from gateway.exchange.commands import REPORTS, AppendTimeline, CommandGenerator, Enqueue, Load, Loaded, Store
from gateway.exchange.model import Summary
from gateway.exchange.push import (
    ANSWER_OPERATIONS,
    CALLBACK_PATH,
    CONFIG_OPERATIONS,
    Subscription,
    Webhook,
    client_body,
    client_webhooks,
    judge_notification,
    restore_answer,
    rewrite_request,
)
from gateway.invariants.model import Clock
from gateway.ledger.base import PushConfigEntry
from gateway.proxy.card import public_base
from gateway.proxy.forward import Route, read_body
from gateway.proxy.runtime import Runtime
from gateway.proxy.types import Receive, Scope, Send
from gateway.push.ssrf import Refused, check_webhook

_OPERATIONS = CONFIG_OPERATIONS | ANSWER_OPERATIONS | {Operation.PUSH_DELETE}


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class PushConfigData:
    """What the ledger keeps of one relayed push config (:attr:`PushConfigEntry.data`)."""

    webhook: Webhook
    worker_token_sha256: str
    callback_url: str
    version: ProtocolVersion
    binding: Binding
    config_id: str | None
    terminal_sent: bool = False  # the webhook was sent the task's terminal state (docs/push.md §2)

    def encode(self) -> bytes:
        w = self.webhook
        return orjson.dumps({"url": w.url, "token": w.token, "auth": w.authentication,
                             "wt": self.worker_token_sha256, "cb": self.callback_url,
                             "v": self.version.value, "b": self.binding.value, "cid": self.config_id,
                             "ts": self.terminal_sent})

    @classmethod
    def decode(cls, data: bytes) -> PushConfigData:
        d = orjson.loads(data)
        return cls(Webhook(d["url"], d["token"], d["auth"]), d["wt"], d["cb"], ProtocolVersion(d["v"]),
                   Binding(d["b"]), d["cid"], bool(d.get("ts", False)))


@dataclass
class PushStep:
    """What the relay did to one client request: ``doc`` the rewritten params / body
    (``None``: unchanged), ``refusal`` ``(reason, message)`` when a webhook is refused (answer
    -32602, forward nothing), ``restore`` for the worker's answer (``None``: leave it), and
    the pending inline configs to bind once the task is known (:meth:`bind`)."""

    doc: Any = None
    refusal: tuple[str, str] | None = None
    restore: Callable[[Any], Any] | None = None
    pending: list[PushConfigEntry] = field(default_factory=list)
    created: list[PushConfigEntry] = field(default_factory=list)
    replaced: list[PushConfigEntry] = field(default_factory=list)
    relay: PushRelay | None = None

    async def settle(self, summary: Summary) -> None:
        """After the exchange: bind the pending inline configs to the task the worker's answer
        named; forget the configs of a create the worker refused, or the ones a create with the
        same config id replaced (best effort)."""
        relay = self.relay
        if relay is None:
            return
        refused = summary.outcome in _REFUSED and not self.pending
        try:
            for entry in self.created if refused else self.replaced:
                await relay.rt.ledger_call("delete_push_config",
                                           lambda e=entry: relay.rt.ledger.delete_push_config(e.callback_id))
            if not refused and summary.task_id:
                for entry in self.pending:
                    await relay.bind(entry, summary.task_id)
        except LedgerError:
            pass  # the configs stay until push.config_retention_seconds


NOTHING = PushStep()
_REFUSED = frozenset({"worker_error", "upstream_status", "invalid_agent_response", "rejected", "not_admitted"})
"""Outcomes of a create that mean the worker holds no config (:attr:`Summary.outcome`)."""


class PushRelay:
    """The push relay of one gateway process (``rt.push``)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.wake = asyncio.Event()
        """Set when an entry was added to the outbox (the delivery loop looks at once)."""

    @property
    def enabled(self) -> bool:
        """``push.enabled``."""
        return self.rt.config.push.enabled

    def handles(self, operation: Operation) -> bool:
        """True when requests of ``operation`` go through :meth:`intercept`."""
        return self.enabled and operation in _OPERATIONS

    # --- docs/push.md §1: client requests -------------------------------------------------------------------

    def callback_base(self, route: Route, scope: Scope) -> str:
        """The base of this gateway's callback URLs: ``push.callback_url``, else ``public.url``
        without the mount, else the listener address the request came to (``scope["server"]``)
        — never the request's ``Host`` or forwarded headers, which the client writes: they
        would make the worker post anywhere, the cloud metadata address included
        (docs/push.md §1)."""
        configured = self.rt.config.push.callback_url
        if configured:
            return configured.rstrip("/")
        if self.rt.config.public.url:
            base = public_base(self.rt.config.public, route, scope).rstrip("/")
            prefix = route.upstream.prefix.rstrip("/")
            return base[: len(base) - len(prefix)] if prefix and base.endswith(prefix) else base
        host, port = scope.get("server") or ("127.0.0.1", None)
        host = f"[{host}]" if ":" in host else host
        scheme = "https" if scope.get("scheme") == "https" else "http"
        return f"{scheme}://{host}" if port is None else f"{scheme}://{host}:{port}"

    async def intercept(self, route: Route, scope: Scope, operation: Operation, version: ProtocolVersion,
                        binding: Binding, doc: Any, task_id: str | None, config_id: str | None = None,
                        *, tenant: str = "") -> PushStep:
        """docs/push.md §1 for one client request (params or body ``doc``) of ``operation`` on
        ``task_id``: store and rewrite the configs it carries, refuse a webhook docs/push.md §4
        refuses, map the answer back, forget a deleted config.

        Raises:
            LedgerError: the ledger failed (answer 503).
        """
        upstream = route.upstream.name
        if operation in CONFIG_OPERATIONS:
            hooks = client_webhooks(operation, doc)
            if not hooks and operation is Operation.PUSH_CREATE:
                # nothing to relay, but the worker may answer with a config it holds: a gateway
                # callback it names is not this request's, so its token is not shown
                return PushStep(restore=lambda result: restore_answer(result, {}))
            if not hooks:
                return NOTHING
            return await self._configure(route, scope, operation, version, binding, doc, hooks,
                                         task_id or "", tenant)
        if operation is Operation.PUSH_DELETE and task_id:
            await self._forget(upstream, task_id, config_id, tenant)
            return NOTHING
        if operation in ANSWER_OPERATIONS:
            entries = await self.rt.ledger_call("push_configs", lambda: self.rt.ledger.push_configs(
                upstream, task_id, tenant=tenant)) if task_id else []
            hooks_by_url = {d.callback_url: d.webhook for d in map(PushConfigData.decode, (e.data for e in entries))}
            # with none, the answer is still looked at: a callback it names is not this task's
            return PushStep(restore=lambda result: restore_answer(result, hooks_by_url))
        return NOTHING

    async def _configure(self, route: Route, scope: Scope, operation: Operation, version: ProtocolVersion,
                         binding: Binding, doc: Any, hooks: list[Webhook], task_id: str,
                         tenant: str) -> PushStep:
        cfg, upstream = self.rt.config.push, route.upstream.name
        if operation is Operation.PUSH_CREATE and len(hooks) > 1:
            # e.g. a v1.0 flat url beside a v0.3 pushNotificationConfig.url: the worker would read
            # one of them, maybe the one not checked and rewritten (docs/push.md §4)
            self.rt.metrics.push_webhooks_refused.labels(upstream, "ambiguous").inc()
            return PushStep(refusal=("ambiguous", "push notification config refused: it names more "
                                                  "than one webhook (a url of each protocol version)"))
        for hook in hooks:
            try:
                await check_webhook(hook.url, cfg)
            except Refused as refused:
                self.rt.metrics.push_webhooks_refused.labels(upstream, refused.reason).inc()
                self.rt.log.warning("push_webhook_refused", extra={"upstream": upstream, "task_id": task_id or None,
                                                                   "reason": refused.reason})
                return PushStep(refusal=(refused.reason, f"push notification config refused: {refused}"))
        base = self.callback_base(route, scope)
        callbacks, entries, by_url = [], [], {}
        config_ids = _config_ids(operation, doc, len(hooks))
        for hook, config_id in zip(hooks, config_ids):
            callback_id, worker_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
            url = f"{base}{CALLBACK_PATH}{callback_id}"
            data = PushConfigData(hook, _digest(worker_token), url, version, binding, config_id or task_id or None)
            entries.append(PushConfigEntry(callback_id, upstream, task_id, data.encode(), tenant))
            callbacks.append((url, worker_token))
            by_url[url] = hook
        replaced: list[PushConfigEntry] = []
        if operation is Operation.PUSH_CREATE and task_id:  # the same config id: an update
            same = config_ids[0] or task_id
            old = await self.rt.ledger_call("push_configs", lambda: self.rt.ledger.push_configs(
                upstream, task_id, tenant=tenant))
            replaced = [e for e in old if PushConfigData.decode(e.data).config_id == same]
        now = time.time()
        # pending inline configs (task "") of every new task share one key: only the total bounds them
        per_task = cfg.max_configs_per_task + len(replaced) if task_id else cfg.max_configs_total
        try:
            for entry in entries:
                await self.rt.ledger_call("put_push_config", lambda e=entry: self.rt.ledger.put_push_config(
                    e, now, max_per_task=per_task, max_total=cfg.max_configs_total))
        except PushLimitError as exc:
            self.rt.metrics.push_webhooks_refused.labels(upstream, "limit").inc()
            return PushStep(refusal=("limit", f"push notification config refused: {exc}"))
        return PushStep(doc=rewrite_request(operation, doc, callbacks),
                        restore=lambda result: restore_answer(result, by_url),
                        pending=entries if not task_id else [], created=entries, replaced=replaced, relay=self)

    async def _forget(self, upstream: str, task_id: str, config_id: str | None, tenant: str) -> None:
        entries = await self.rt.ledger_call("push_configs", lambda: self.rt.ledger.push_configs(
            upstream, task_id, tenant=tenant))
        for entry in entries:
            data = PushConfigData.decode(entry.data)
            if config_id is None or data.config_id == config_id:
                await self.rt.ledger_call("delete_push_config",
                                          lambda e=entry: self.rt.ledger.delete_push_config(e.callback_id))

    async def bind(self, entry: PushConfigEntry, task_id: str) -> None:
        """Store the pending inline config ``entry`` under ``task_id`` (best effort: a failure
        leaves it pending; its first notification binds it)."""
        cfg = self.rt.config.push
        current = await self.rt.ledger_call("get_push_config", lambda: self.rt.ledger.get_push_config(
            entry.callback_id))
        if current is None or current.task_id:
            return
        data = PushConfigData.decode(current.data)
        data.config_id = data.config_id or task_id  # a2a-sdk names an inline config after its task
        bound = PushConfigEntry(entry.callback_id, entry.upstream, task_id, data.encode(), entry.tenant)
        try:
            await self.rt.ledger_call("put_push_config", lambda: self.rt.ledger.put_push_config(
                bound, time.time(), max_per_task=cfg.max_configs_per_task, max_total=cfg.max_configs_total))
        except (LedgerError, PushLimitError) as exc:
            self.rt.log.warning("push_config_not_bound", extra={"upstream": entry.upstream, "task_id": task_id,
                                                                "error": str(exc)})

    # --- docs/push.md §2: the callback endpoint --------------------------------------------------------------

    async def callback(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one POST to a callback URL (docs/push.md §2): 404 for an unknown callback,
        401 for a wrong or missing ``X-A2A-Notification-Token``, 413 past
        ``push.max_notification_bytes``, then :func:`~gateway.exchange.push.judge_notification`'s
        status; 503 while the ledger is unavailable or the outbox full."""
        if scope["method"] != "POST":
            await _answer(send, 405, "POST only")
            return
        callback_id = scope["path"][len(CALLBACK_PATH):]
        cfg = self.rt.config.push
        try:
            entry = await self.rt.ledger_call("get_push_config", lambda: self.rt.ledger.get_push_config(callback_id))
        except LedgerError:
            await _answer(send, 503, "gateway task ledger unavailable", retry_after=True)
            return
        upstream = _upstream(self.rt, entry.upstream) if entry is not None else None
        if entry is None or upstream is None:
            await _answer(send, 404, "no such push notification callback")
            return
        try:
            body = await read_body(receive, scope, cfg.max_notification_bytes)
        except ClientGoneError:
            return
        except BodyTooLargeError:
            self.rt.metrics.push_refused.labels(entry.upstream, "too_large").inc()
            await _answer(send, 413, f"notification exceeds {cfg.max_notification_bytes} bytes")
            return
        data = PushConfigData.decode(entry.data)
        token = _header(scope, b"x-a2a-notification-token") or ""
        if not hmac.compare_digest(_digest(token), data.worker_token_sha256):
            self.rt.metrics.push_refused.labels(entry.upstream, "token").inc()
            self.rt.log.warning("push_notification_refused", extra={"upstream": entry.upstream,
                                                                    "task_id": entry.task_id or None,
                                                                    "reason": "token"})
            await _answer(send, 401, "wrong or missing X-A2A-Notification-Token")
            return
        policy = self.rt.policy(upstream, self.rt.card_cache(upstream).heartbeat_seconds())
        sub = Subscription(callback_id, entry.upstream, entry.task_id, data.version, data.binding, entry.tenant,
                           data.terminal_sent)
        try:
            verdict = await self._perform(judge_notification(policy, sub, body), entry)
        except PushLimitError:
            self.rt.metrics.push_refused.labels(entry.upstream, "outbox_full").inc()
            await _answer(send, 503, "push outbox full; retry later", retry_after=True)
            return
        except LedgerError:
            self.rt.metrics.push_refused.labels(entry.upstream, "ledger").inc()
            await _answer(send, 503, "gateway task ledger unavailable", retry_after=True)
            return
        if verdict.ended:
            await self._terminal_sent(callback_id)
        await _answer(send, verdict.status, verdict.reason or "accepted")

    async def _terminal_sent(self, callback_id: str) -> None:
        """Note on the push config that its webhook was sent the task's terminal state: what
        the worker posts later is not delivered (docs/push.md §2). Best effort: a failure
        leaves the flag off, and at most one more copy of the terminal state is delivered."""
        cfg = self.rt.config.push
        try:
            current = await self.rt.ledger_call("get_push_config", lambda: self.rt.ledger.get_push_config(
                callback_id))
            if current is None:
                return
            data = PushConfigData.decode(current.data)
            if data.terminal_sent:
                return
            data.terminal_sent = True
            marked = PushConfigEntry(current.callback_id, current.upstream, current.task_id, data.encode(),
                                     current.tenant)
            await self.rt.ledger_call("put_push_config", lambda: self.rt.ledger.put_push_config(
                marked, time.time(), max_per_task=cfg.max_configs_per_task, max_total=cfg.max_configs_total))
        except (LedgerError, PushLimitError):
            pass

    async def _perform(self, gen: CommandGenerator[Any], entry: PushConfigEntry) -> Any:
        """Run a notification's commands (Load, Store, Enqueue and the reports) for the push
        config ``entry``. A pending inline config is bound to its task at the first ``Load``
        of it, before anything of the notification is stored: the send it came with then
        judges its answer as being about that task (:attr:`RequestExchange.pending_push`)."""
        upstream, tenant = entry.upstream, entry.tenant
        rt, reporter = self.rt, self.rt.reporter(upstream)
        pending = not entry.task_id
        reply: Any = None
        exc: BaseException | None = None
        while True:
            try:
                cmd = gen.throw(exc) if exc is not None else gen.send(reply)
            except StopIteration as stop:
                return stop.value
            reply, exc = None, None
            kind = type(cmd)
            try:
                if kind is Load:
                    if pending and cmd.task_id:
                        pending = False
                        await self.bind(entry, cmd.task_id)
                    reply = await self._load(upstream, cmd.task_id, cmd.tenant)
                elif kind is Store:
                    reply = await rt.ledger_call("put", lambda c=cmd: rt.ledger.put(c.record, c.expected_version))
                elif kind is Enqueue:
                    reply = await self._enqueue(upstream, cmd.task_id, cmd.callback_id, cmd.body, tenant)
                elif kind is AppendTimeline:
                    await rt.keep_timeline(upstream, cmd.task_id, cmd.entry, tenant=cmd.tenant)
                elif kind in REPORTS:
                    reporter.report(cmd, "push")
                else:
                    raise TypeError(f"not a push command: {cmd!r}")
            except (LedgerError, VersionConflictError, PushLimitError) as error:
                exc = error

    async def _load(self, upstream: str, task_id: str | None, tenant: str) -> Loaded:
        if task_id is None:
            return Loaded(None, Clock(time.time()))
        stored = await self.rt.ledger_call("get", lambda: self.rt.ledger.get(upstream, task_id, tenant=tenant))
        if stored is None:
            return Loaded(None, Clock(time.time()))
        return Loaded(stored.record, Clock(time.time()), stored.version, stored.needs_resync)

    async def _enqueue(self, upstream: str, task_id: str, callback_id: str, body: bytes, tenant: str) -> str:
        cfg = self.rt.config.push
        entry_id = await self.rt.ledger_call("outbox_add", lambda: self.rt.ledger.outbox_add(
            upstream, task_id, callback_id, body, time.time(), tenant=tenant,
            max_per_task=cfg.max_outbox_per_task, max_total=cfg.max_outbox_total))
        self.wake.set()
        return entry_id

    # --- for other parts of the gateway ----------------------------------------------------------

    async def deliver_observed(self, upstream: str, task_id: str, stream_response: dict, *, tenant: str = "") -> int:
        """Enqueue one already-judged, already-recorded v1.0 StreamResponse (e.g. ``{"task":
        {...}}`` from the sweep's GetTask answer, docs/push.md §2.1) for every push config of
        the task under ``(upstream, tenant, task_id)``, written per config's client version
        and binding (:func:`~gateway.exchange.push.client_body`, docs/push.md §2); not judged
        again. Returns how many outbox entries were added (0: the task has no push config, or
        push is off).

        Raises:
            LedgerError: the ledger failed. PushLimitError: the outbox is full (entries added
                before it stay).
        """
        if not self.enabled:
            return 0
        entries = await self.rt.ledger_call("push_configs", lambda: self.rt.ledger.push_configs(
            upstream, task_id, tenant=tenant))
        terminal = _is_terminal(stream_response)
        added = 0
        for entry in entries:
            data = PushConfigData.decode(entry.data)
            if data.terminal_sent:  # this webhook has had the task's end already
                continue
            await self._enqueue(upstream, task_id, entry.callback_id,
                                client_body(stream_response, data.version, data.binding), tenant)
            added += 1
            if terminal:
                await self._terminal_sent(entry.callback_id)
        return added


def _is_terminal(stream_response: dict) -> bool:
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


def request_config_id(operation: Operation, version: ProtocolVersion, params: Any) -> str | None:
    """The config id a JSON-RPC get / delete names: v1.0 ``params.id``, v0.3
    ``params.pushNotificationConfigId``."""
    if not isinstance(params, dict) or operation is not Operation.PUSH_DELETE:
        return None
    key = "pushNotificationConfigId" if version is ProtocolVersion.V0_3 else "id"
    value = params.get(key)
    return value if isinstance(value, str) and value else None


def _upstream(rt: Runtime, name: str) -> UpstreamConfig | None:
    return next((u for u in rt.config.upstreams if u.name == name), None)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _answer(send: Send, status: int, message: str, *, retry_after: bool = False) -> None:
    body = jsonrpc.dumps({"status": status, "message": message})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
