"""The proactive sweep, sans I/O: which silent tasks are due a ``GetTask``, and the exchange
that asks the worker and records its answer (docs/sweep.md §1-§3).

A live task the gateway has not observed for longer than its upstream's heartbeat interval
may have moved on without anyone asking (a worker restarted and rehydrated it as ``failed``;
a push-only client waits forever). The shell's loop (:mod:`gateway.proxy.sweep`) pages through
the ledger's live tasks observed before ``now - heartbeat`` (:class:`~gateway.records.LiveTask`), keeps the due
ones (:func:`due`), and runs one :class:`SweepExchange` per due task through a driver:

``Load → (still due?) → Post(GetTask) → judge → Store`` — the same probe, in the worker's
binding and version, and the same engine verdict and compare-and-set store as the forced
``GetTask`` before a client action (:meth:`gateway.exchange.request.RequestExchange.forced_get`),
counted as ``a2a_gateway_forced_get_total{reason="sweep"}``.

Pure: no I/O, no clock (the time arrives in :class:`~gateway.exchange.commands.Loaded` and as
arguments).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.rest import RestCall
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import LedgerError, UpstreamError, VersionConflictError
from gateway.exchange.bridge import BridgedJsonRpcExchange, BridgedRestExchange
from gateway.exchange.commands import CommandGenerator, Count, Load, Loaded, Log, Post
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.judge import judge
from gateway.exchange.model import Policy
from gateway.exchange.request import RequestExchange, caught_up
from gateway.exchange.rest import RestExchange
from gateway.invariants.admission import CardView
from gateway.invariants.model import Action, TaskRecord
from gateway.records import Key, LiveTask


REASON = "sweep"
"""The ``reason`` label of ``a2a_gateway_forced_get_total`` for a sweep's ``GetTask``."""

OUTCOMES = ("unchanged", "changed", "not_found", "error", "not_due")
"""What a :class:`SweepExchange` comes to: the ``outcome`` label values of
``a2a_gateway_sweep_total``, besides ``open_stream`` for a listed task skipped for its open
client stream (docs/sweep.md §3)."""

SKIPS = ("open_stream", "recently_swept", "not_due")
"""Why :func:`due` passes over a listed task (``a2a_gateway_sweep_skipped_total{reason}``)."""



def due(task: LiveTask, *, now: float, heartbeat_seconds: float, swept_at: float | None,
        streaming: bool) -> str | None:
    """Whether the sweep sends ``task`` a ``GetTask`` now: ``None`` when due, else why not
    (one of :data:`SKIPS`), in this order (docs/sweep.md §2):

    * ``open_stream``: a client stream of the task is open through this process (its events
      keep the record fresh, and a cut is probed by the stream itself);
    * ``recently_swept``: this process swept it less than ``heartbeat_seconds`` ago (one
      ``GetTask`` per heartbeat gap, even when the last one got no answer);
    * ``not_due``: observed within the last ``heartbeat_seconds``.

    Args:
        now: wall-clock seconds since the epoch.
        swept_at: when this process last swept the task (``None``: never).
        streaming: a client stream of the task is open through this process.
    """
    if streaming:
        return "open_stream"
    if swept_at is not None and now - swept_at < heartbeat_seconds:
        return "recently_swept"
    if now - task.observed_at <= heartbeat_seconds:
        return "not_due"
    return None


def select(tasks: Iterable[LiveTask], *, now: float, heartbeat_seconds: float,
           swept: Mapping[Key, float], streaming: Container[tuple[str, str, str]]
           ) -> tuple[list[LiveTask], dict[str, int]]:
    """The due tasks of a page of ``tasks`` (in their order) and how many were skipped, by
    reason (:func:`due`; reasons with none are absent). ``swept`` maps a task's
    :attr:`LiveTask.key` to when this process last swept it; ``streaming`` holds the keys of
    tasks with an open client stream."""
    out: list[LiveTask] = []
    skipped: dict[str, int] = {}
    for task in tasks:
        key = task.key
        why = due(task, now=now, heartbeat_seconds=heartbeat_seconds, swept_at=swept.get(key),
                  streaming=key in streaming)
        if why is None:
            out.append(task)
        else:
            skipped[why] = skipped.get(why, 0) + 1
    return out, skipped


def forget_before(swept: Mapping[Key, float], cutoff: float) -> list[Key]:
    """The keys of ``swept`` (task → when swept) swept before ``cutoff``: they decide nothing
    any more (:func:`due` only looks one heartbeat back) and may be dropped."""
    return [key for key, at in swept.items() if at < cutoff]


# --- the probe: the worker's binding and version -------------------------------------------------

_PREFERENCE = ((ProtocolVersion.V1_0, Binding.JSONRPC), (ProtocolVersion.V0_3, Binding.JSONRPC),
               (ProtocolVersion.V1_0, Binding.REST), (ProtocolVersion.V0_3, Binding.REST))


@dataclass(frozen=True, slots=True)
class ProbeRoute:
    """Where and how the sweep asks a worker ``GetTask``: its ``binding`` and ``version``, and
    ``path``, below the upstream's base URL: the JSON-RPC endpoint, or the worker's REST prefix
    (without v0.3's ``/v1``; a task's tenant goes before it, :func:`probe_exchange`)."""

    binding: Binding
    version: ProtocolVersion
    path: str


def probe_route(speaks: Iterable[tuple[ProtocolVersion, Binding]], *, jsonrpc_path: str,
                paths: Mapping[tuple[ProtocolVersion, Binding], str] | None = None) -> ProbeRoute | None:
    """The road of the sweep's ``GetTask`` to a worker that serves ``speaks`` (its card's
    versions and bindings, :meth:`gateway.proxy.card.CardCache.speaks`), in this order of
    preference: JSON-RPC v1.0, JSON-RPC v0.3 (``tasks/get``), REST v1.0, REST v0.3. The path
    is the one its card gives that interface (``paths``: below the upstream's URL), else —
    for JSON-RPC — the mount's ``jsonrpc_path`` (``upstreams[].jsonrpc_path``) or — for REST
    — none. ``None`` when nothing is known of the worker (no card yet): the sweep then sends
    nothing rather than guess (docs/sweep.md §2)."""
    known = set(speaks)
    for version, binding in _PREFERENCE:
        if (version, binding) not in known:
            continue
        advertised = (paths or {}).get((version, binding))
        if binding is Binding.JSONRPC:
            return ProbeRoute(binding, version, advertised or jsonrpc_path)
        path = (advertised or "").rstrip("/")
        if version is ProtocolVersion.V0_3 and path.endswith("/v1"):
            path = path[:-3]
        return ProbeRoute(binding, version, path)
    return None


def _a2a_version(version: ProtocolVersion) -> str:
    return "" if version is ProtocolVersion.V0_3 else version.value


def probe_exchange(route: ProbeRoute, task: LiveTask, card: CardView, policy: Policy) -> RequestExchange:
    """A ``GetTask`` of ``task`` as a v1.0 client's request of ``route.binding`` — bridged to
    the worker's version when it is v0.3 (docs/bridge.md §3) — so the answer is read, judged
    and recorded in v1.0 form exactly as a forced ``GetTask``'s answer
    (:meth:`~gateway.exchange.request.RequestExchange.probe_request`, ``decode_own``). The
    task's tenant goes in JSON-RPC ``params.tenant``, or as the REST path's first segment,
    before the worker's REST prefix: ``/acme/rest/tasks/t-1`` (docs/callers.md §1)."""
    v10 = ProtocolVersion.V1_0
    params: dict[str, Any] = {"id": task.task_id, "historyLength": 0}
    if task.tenant:
        params["tenant"] = task.tenant
    if route.binding is Binding.JSONRPC:
        body = jsonrpc.dumps({"jsonrpc": "2.0", "id": jsonrpc.PROBE_ID, "method": "GetTask", "params": params})
        req = jsonrpc.parse_request(body)
        info = jsonrpc.lookup_method("GetTask")
        assert isinstance(req, jsonrpc.Request) and info is not None
        if route.version is v10:
            return JsonRpcExchange(req, body, info, card, policy)
        return BridgedJsonRpcExchange(req, body, info, card, policy, route.version)
    # the tenant comes first, before the worker's REST prefix, as a client's REST path through
    # the gateway has it and as a2a-sdk mounts it (docs/callers.md §1)
    base = (f"/{quote(task.tenant, safe='')}" if task.tenant else "") + route.path
    call = RestCall(Operation.GET, v10, base, task.task_id)
    if route.version is v10:
        return RestExchange(call, "GET", b"", params, card, policy, tenant=task.tenant)
    return BridgedRestExchange(call, "GET", b"", params, card, policy, route.version,
                               tenant=task.tenant)


# --- the exchange -----------------------------------------------------------------------------


@dataclass(slots=True)
class SweepResult:
    """What one :class:`SweepExchange` came to: ``outcome`` (one of :data:`OUTCOMES`),
    ``task`` the judged Task in v1.0 form when the sweep recorded a new state for it
    (``changed``; for the push relay, docs/sweep.md §4), ``state`` the recorded state after."""

    outcome: str = "error"
    task: Any = None
    state: str | None = None


class SweepExchange:
    """One sweep of one task: ``Load`` → still due? → ``Post`` (the worker's ``GetTask``) →
    the engine → ``Store`` with compare-and-set (docs/sweep.md §3).

    Args:
        task: the task as the ledger listed it.
        probe: the ``GetTask`` exchange of :func:`probe_exchange` (its wire form and its
            ``ex``: the judged answer is recorded as a forced ``GetTask``'s is).
        policy: the upstream's :class:`~gateway.exchange.model.Policy`
            (``heartbeat_seconds`` decides whether the task is still due once loaded).
        jsonrpc_path: the target of a JSON-RPC probe (below the upstream's base URL).

    After :meth:`run`, :attr:`result` holds the :class:`SweepResult`.
    """

    def __init__(self, task: LiveTask, probe: RequestExchange, policy: Policy, *,
                 jsonrpc_path: str = "/") -> None:
        self.task = task
        self.probe = probe
        self.policy = policy
        self.jsonrpc_path = jsonrpc_path
        self.result = SweepResult()

    def request(self) -> Post:
        """The probe's ``GetTask`` as sent: the binding exchange's own probe, aimed below the
        upstream's base URL and carrying the worker's ``A2A-Version`` (none for v0.3)."""
        post = self.probe.probe_request(self.task.task_id)
        target = post.target if post.target is not None else self.jsonrpc_path
        worker = getattr(self.probe, "worker_version", self.probe.ex.version)
        version = post.a2a_version if post.a2a_version is not None else _a2a_version(worker)
        return dataclasses.replace(post, target=target, a2a_version=version)

    def run(self) -> CommandGenerator[SweepResult]:
        """The whole sweep of the task; returns (and keeps in :attr:`result`) its outcome.
        Never raises for the worker's or the ledger's failures: they are the ``error``
        outcome, counted and logged, the record untouched."""
        result = self.result
        task_id = self.task.task_id
        log = (("upstream", self.task.upstream), ("task_id", task_id))
        try:
            loaded: Loaded = yield Load(task_id, self.task.tenant)
            record = loaded.record
            if not self._still_due(record, loaded.clock.wall):
                result.outcome = "not_due"  # terminal, gone, or observed since it was listed
                return result
            assert record is not None
            yield Count("forced_gets", (REASON,))
            try:
                answer = yield self.request()
                doc = self.probe.decode_own(answer)
            except UpstreamError as exc:
                yield Count("upstream_errors", (exc.reason,))
                yield Log("warning", "sweep_get_failed", (*log, ("reason", exc.reason), ("error", str(exc))))
                return result
            if "result" not in doc:
                code = self.probe.error_code(answer, doc.get("error"))
                if code == jsonrpc.TASK_NOT_FOUND:
                    result.outcome = "not_found"
                    yield Log("warning", "sweep_task_not_found", (*log, ("recorded", record.state.value)))
                else:
                    yield Log("warning", "sweep_get_failed", (*log, ("reason", "worker_error"),
                                                             ("code", jsonrpc.code_label(code))))
                return result
            get_ex = dataclasses.replace(self.probe.ex, operation=Operation.GET, task_id=task_id)
            stored: list[tuple[TaskRecord | None, TaskRecord]] = []  # the store that won (judge)
            outcome = yield from judge(self.policy, get_ex, None, doc["result"], direction="probe",
                                       forced_get=REASON, stored=stored)
            if outcome.action is not Action.FORWARD:
                yield Log("warning", "sweep_get_failed", (*log, ("reason", "invalid_response")))
                return result
        except (LedgerError, VersionConflictError) as exc:
            yield Log("error", "sweep_ledger_error", (*log, ("error", str(exc))))
            result.outcome = "error"
            return result
        result.outcome = "unchanged"
        if not stored:
            return result
        before, after = stored[-1]
        result.state = after.state.value
        if before is not None and after.state is not before.state:  # this sweep recorded a new state
            yield from caught_up(self.task.upstream, before, after.state, REASON)
            result.outcome, result.task = "changed", outcome.result
        return result

    def _still_due(self, record: TaskRecord | None, now: float) -> bool:
        """The loaded record is live and still unobserved for longer than the heartbeat (a
        concurrent writer may have observed it since the ledger listed it)."""
        if record is None or record.terminal:
            return False
        return now - record.observed_at > self.policy.heartbeat_seconds
