"""The invariant engine: one client request or one worker payload in, one verdict out.

Pure and deterministic (docs/architecture.md, convention 2): no I/O, no awaits, no clock reads. The shell
passes the ledger's :class:`TaskRecord`, the :class:`Exchange` and, for streams, the
:class:`StreamState`; it gets back an :class:`Outcome` and stores ``outcome.record`` before it
forwards ``outcome.result``.

Checks, in order, for a worker payload (each cites docs/field-cases.md):

1. normalization — every taskState spelling becomes canonical and is re-spelled for the
   client's version; a spelling outside the table is refused in enforce mode (F01, F03);
2. identity — a payload for another task or context than the one the exchange is bound to
   is refused (F06);
3. terminal absorption — a terminal task never moves again; later events are not delivered,
   a regression poisons the task id, a snapshot is corrected, a reused id is refused — and a
   ``GetTask`` of the reused id answered with the recorded task (F04, F05, F21);
4. artifacts — append / replace / ``lastChunk`` sealing (F06), and every answer shows a frozen
   artifact only as it was shown (F18, F19), see :mod:`gateway.invariants.artifacts`;
5. generations (A2A v1.1 draft, docs/resume.md §3.2) — on a live task, a jump past the next
   generation owes the worker a ``GetTask`` (``generation_gap``), a step back is a
   ``generation_regression`` divergence that owes one too; the payload is delivered either
   way.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

from gateway.a2a import jsonrpc
from gateway.a2a.bridge import Dialect, dialect_of
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.payloads import (
    Item,
    Kind,
    artifact_of,
    classify,
    generation_of,
    rebuild,
    task_id_of,
    with_state,
)
from gateway.a2a.states import TaskState, normalize_state, spell_state
from gateway.a2a.version import ProtocolVersion
from gateway.errors import UnknownStateError
from gateway.invariants.artifacts import (
    AFTER_LAST_CHUNK,
    AFTER_TERMINAL,
    apply_update,
    clean_snapshot_artifacts,
    freeze,
    shown_after,
    within_frozen,
)
from gateway.invariants.model import (
    MAX_ARTIFACTS,
    MAX_CALLERS,
    NO_ARTIFACTS,
    NO_SHOWN,
    Action,
    Clock,
    Exchange,
    Finding,
    Mode,
    Outcome,
    Shown,
    StreamState,
    TaskRecord,
    build_record,
    stream_state,
)

CORRECTED_KEY = "a2a-gateway/corrected"
"""The Task ``metadata`` member of an answer the gateway corrected: ``{"reason", "workerState",
"artifacts"?, "workerContextId"?}`` (docs/field-cases.md F04, F18, F19, F21)."""
REUSED = "reused_task_id"
FINAL_FLAG = "final_flag"
"""The normalization family of a rewritten end-of-stream signal (v0.3 ``final``)."""
_ABSENT = object()
_TASK_ACTIONS = (Operation.SEND, Operation.STREAM, Operation.CANCEL, Operation.SUBSCRIBE)
# Worker error codes that may hide "this task is terminal" (F05 (c), F15).
_SUSPECT_CODES = frozenset(
    {
        jsonrpc.INVALID_PARAMS,
        jsonrpc.TASK_NOT_FOUND,
        jsonrpc.TASK_NOT_CANCELABLE,
        jsonrpc.UNSUPPORTED_OPERATION,
        jsonrpc.INTERNAL_ERROR,
    }
)
# Enum members as module constants: an Enum class attribute lookup costs a dict probe and more.
_TASK, _STATUS, _ARTIFACT = Kind.TASK, Kind.STATUS, Kind.ARTIFACT
_MESSAGE, _OTHER = Kind.MESSAGE, Kind.OTHER
_FORWARD, _DROP = Action.FORWARD, Action.DROP
_ENFORCE = Mode.ENFORCE
_UNSPECIFIED = TaskState.UNSPECIFIED
_GET = Operation.GET
GENERATION_GAP = "generation_gap"
"""The owed-``GetTask`` reason of a generation that jumped (docs/resume.md §3.2)."""
GENERATION_REGRESSION = "generation_regression"
"""The divergence kind, and owed-``GetTask`` reason, of a generation that went back."""


_V10, _V03 = ProtocolVersion.V1_0, ProtocolVersion.V0_3


def terminal_error(ex: Exchange, record: TaskRecord) -> tuple[int, str]:
    """The A2A error for an action on a terminal task (F05; SPEC §3.1.1, §3.1.5, §3.1.6).

    Returns ``(code, message)``: -32002 TaskNotCancelable for cancel, else -32004
    UnsupportedOperation. The message tells the client that a retry must mint a new task.
    """
    state = spell_state(record.state, ex.spelling)
    if ex.operation is Operation.CANCEL:
        return (
            jsonrpc.TASK_NOT_CANCELABLE,
            f"task {record.task_id} is terminal ({state}) and cannot be canceled",
        )
    return (
        jsonrpc.UNSUPPORTED_OPERATION,
        f"task {record.task_id} is terminal ({state}); a retry must start a new task: send "
        f"the message without taskId (referenceTaskIds may name {record.task_id})",
    )


def check_request(ex: Exchange, record: TaskRecord | None) -> Outcome:
    """Admit or refuse a client request naming an existing task (invariant 2, F05).

    Returns :attr:`Action.REJECT` with -32004 (messages, subscribe) or -32002 (cancel) when the
    ledger holds the task as terminal; in observe mode the finding is kept and the request is
    forwarded. Any other request is forwarded.
    """
    if record is None or not record.terminal or ex.operation not in _TASK_ACTIONS:
        return Outcome(Action.FORWARD, None)
    finding = Finding("rejection", "terminal_task", f"{ex.operation} on terminal {record.task_id}")
    if ex.mode is Mode.OBSERVE:
        return Outcome(Action.FORWARD, None, findings=[finding])
    return Outcome(Action.REJECT, None, findings=[finding], error=terminal_error(ex, record))


def caller_seen(ex: Exchange, record: TaskRecord) -> bool:
    """True when a local answer built from ``record`` may go to the caller of ``ex``: callers
    are not told apart (``ex.caller`` is ``None``), or one of the caller's fingerprints is
    among those seen on the task (docs/callers.md §3). Otherwise the request goes to the
    worker, which decides."""
    if ex.caller is None:
        return True
    return not ex.caller_matches.isdisjoint(record.callers)


def with_caller(ex: Exchange, record: TaskRecord) -> TaskRecord:
    """``record`` with the caller of ``ex`` recorded as seen (docs/callers.md §2): its
    fingerprint under the signing secret appended when absent, the oldest dropped past
    :data:`~gateway.invariants.model.MAX_CALLERS`. ``record`` itself when there is nothing
    to add."""
    caller = ex.caller
    if caller is None or caller in record.callers:
        return record
    kept = record.callers[max(0, len(record.callers) - MAX_CALLERS + 1):]
    return dataclasses.replace(record, callers=(*kept, caller))


def is_task_action(ex: Exchange) -> bool:
    """True for an action that needs its existing task alive: a message with ``taskId``,
    cancel, or subscribe (both versions)."""
    return ex.task_id is not None and ex.operation in _TASK_ACTIONS


def wants_terminal_probe(ex: Exchange, code: object) -> bool:
    """True when a worker error to a task action may hide a terminal task (F05 (c), F15).

    The shell then asks the worker ``GetTask`` and, if that confirms a terminal state,
    answers with :func:`terminal_error` instead.
    """
    if not isinstance(code, int) or isinstance(code, bool):
        return False
    if ex.task_id is None or ex.operation not in _TASK_ACTIONS or code not in _SUSPECT_CODES:
        return False
    wanted = (
        jsonrpc.TASK_NOT_CANCELABLE
        if ex.operation is Operation.CANCEL
        else jsonrpc.UNSUPPORTED_OPERATION
    )
    return code != wanted


def check_payload(
    ex: Exchange,
    stream: StreamState | None,
    record: TaskRecord | None,
    result: Any,
    clock: Clock,
) -> Outcome:
    """Judge one worker payload: a unary ``result`` or one stream event's ``result``.

    Args:
        ex: the exchange the payload answers.
        stream: the stream's state, or ``None`` for a unary answer.
        record: the ledger record of the payload's task (look it up with
            :func:`payload_task_id`), or ``None``.
        result: the JSON-RPC ``result`` member (or a REST StreamResponse).
        clock: the observation time.

    Returns:
        An :class:`Outcome`; ``record`` is the ledger change to store before forwarding.
    """
    kind, obj, wrapper = classify(result)
    if kind is _MESSAGE or kind is _OTHER:
        return Outcome(_FORWARD, result, stream)
    item = Item(kind, obj, wrapper)
    findings: list[Finding] = []
    normalized = _normalize(ex, item, findings)
    if normalized is None:
        return _refuse_unknown(ex, result, stream, findings, item)
    state, obj = normalized
    verdict = _check_identity(ex, stream, record, item, findings)
    if verdict is None and stream is not None and stream.terminal:
        verdict = _after_stream_terminal(ex, stream, record, item, state, findings, clock)
    if verdict is None and record is not None and record.state.is_terminal:
        verdict = _on_terminal_record(ex, stream, record, item, state, obj, findings, clock)
    if verdict is None:
        verdict = _transition(ex, stream, record, item, state, obj, findings, clock)
    if verdict.action is _FORWARD and verdict.result is not result:
        # The located object unchanged means the whole payload is: forward the original.
        unchanged = verdict.result is item.obj
        verdict.result = result if unchanged else rebuild(item, verdict.result, result)
    return _apply_mode(ex, verdict, result)


def payload_task_id(result: Any) -> str | None:
    """The task id a payload is about (for the ledger lookup before :func:`check_payload`)."""
    kind, obj, _ = classify(result)
    return task_id_of(kind, obj)


def _apply_mode(ex: Exchange, verdict: Outcome, original: Any) -> Outcome:
    """Observe mode keeps findings and the ledger change but forwards the original bytes."""
    if ex.mode is _ENFORCE:
        return verdict
    return Outcome(_FORWARD, original, verdict.stream, verdict.record, verdict.findings)


def _normalize(
    ex: Exchange, item: Item, findings: list[Finding]
) -> tuple[TaskState, dict[str, Any]] | None:
    """Canonical state and the object re-spelled for the client, or ``None`` if unknown.

    Only Tasks and status updates carry a state; anything else comes back unchanged.
    """
    kind, obj = item.kind, item.obj
    if kind is not _TASK and kind is not _STATUS:
        return _UNSPECIFIED, obj
    status = obj.get("status")
    if isinstance(status, dict):
        raw = status.get("state")
    elif status is None and "status" not in obj:
        raw = None
    else:
        return None  # a status that is not an object is no state at all: never guessed
    try:
        norm = normalize_state(raw, ex.spelling)  # a verbatim spelling: one precomputed lookup
    except UnknownStateError:
        return None
    state = norm.state
    if norm.family is not None:
        findings.append(Finding("normalization", norm.family, f"{raw!r}"))
    if norm.respelled is not None:
        obj = with_state(obj, norm.respelled)
    if kind is _STATUS:
        obj = _end_of_stream_flag(ex.version, state, obj, findings)
    return state, obj


def _end_of_stream_flag(
    version: ProtocolVersion, state: TaskState, obj: dict[str, Any], findings: list[Finding]
) -> dict[str, Any]:
    """The status update's end-of-stream signal in the client's version (docs/field-cases.md
    F17 (a); docs/protocol.md §7, §11 pitfall 5).

    v0.3 says "this stream is over" with ``final``: true exactly when the state is terminal
    or interrupted, false otherwise, whatever the worker wrote; it is always present (a2a-sdk
    0.3 clients refuse a status-update without it). v1.0 has no ``final`` (closure is the
    signal): a worker's ``final`` is removed. Each rewrite is a ``final_flag`` normalization.
    """
    final = obj.get("final", _ABSENT)
    if version is _V03:
        want = state.is_terminal or state.is_interrupted
        if final is want:
            return obj
        fixed = {**obj, "final": want}
    elif final is _ABSENT:
        return obj
    else:
        fixed = {k: v for k, v in obj.items() if k != "final"}
    findings.append(Finding("normalization", FINAL_FLAG, f"final {final!r} on {state.value}"))
    return fixed


def _refuse_unknown(
    ex: Exchange, result: Any, stream: StreamState | None, findings: list[Finding], item: Item
) -> Outcome:
    raw = item.raw_state
    tid = item.task_id
    findings.append(Finding("divergence", "unknown_state", f"task {tid} state {raw!r}"))
    message = f"worker sent an unknown task state {raw!r} for task {tid}; refused, not guessed"
    verdict = Outcome(
        Action.REJECT,
        None,
        stream,
        findings=findings,
        error=(jsonrpc.INVALID_AGENT_RESPONSE, message),
        close=True,
    )
    return _apply_mode(ex, verdict, result)


def _refuse(
    kind: str,
    detail: str,
    stream: StreamState | None,
    findings: list[Finding],
    record: TaskRecord | None = None,
) -> Outcome:
    """A divergence that drops a stream event, or refuses a unary answer with -32006.

    A dropped event carries the same ``error`` the unary answer would get: a stream that
    delivers nothing else ends with it (docs/protocol.md §7), never silently."""
    findings.append(Finding("divergence", kind, detail))
    error = (jsonrpc.INVALID_AGENT_RESPONSE, f"invalid agent response: {kind}: {detail}")
    if stream is not None and kind not in ("reused_task_id",):
        return Outcome(Action.DROP, None, stream, record=record, findings=findings, error=error)
    return Outcome(Action.REJECT, None, stream, record=record, findings=findings, error=error, close=True)


def _check_identity(
    ex: Exchange,
    stream: StreamState | None,
    record: TaskRecord | None,
    item: Item,
    findings: list[Finding],
) -> Outcome | None:
    tid, ctx = item.task_id, item.context_id
    bound = stream.task_id if stream is not None and stream.task_id else ex.task_id
    if tid is None and stream is not None:
        # a stream event with a state or an artifact but no task id (missing, null, a number,
        # ""): it cannot be recorded, so it is never delivered; the stream ends with -32006
        findings.append(Finding("divergence", "task_id_mismatch", f"{item.kind.value} without a task id"))
        return Outcome(Action.REJECT, None, stream, record=record, findings=findings, close=True,
                       error=(jsonrpc.INVALID_AGENT_RESPONSE,
                              f"invalid agent response: task_id_mismatch: {item.kind.value} without a task id"))
    if bound and tid and tid != bound:
        return _refuse("task_id_mismatch", f"payload for {tid} on exchange of {bound}", stream, findings)
    bound_ctx = stream.context_id if stream is not None and stream.context_id else None
    if bound_ctx is None and record is not None:
        bound_ctx = record.context_id
        if record.state.is_terminal and (_creating(ex, stream) or (ex.operation is _GET and item.kind is _TASK)):
            return None  # a terminal task's id in another context: reused (_on_terminal_record)
    if bound_ctx and ctx and ctx != bound_ctx:
        return _refuse(
            "context_id_mismatch", f"task {tid} context {ctx} != {bound_ctx}", stream, findings
        )
    return None


def _creating(ex: Exchange, stream: StreamState | None) -> bool:
    """True for the answer (or a stream's first task event) to a message that names no task:
    whatever task it names is a new one."""
    return ex.operation in (Operation.SEND, Operation.STREAM) and ex.task_id is None \
        and (stream is None or stream.task_id is None)


def _poison(record: TaskRecord, clock: Clock) -> TaskRecord:
    return dataclasses.replace(
        record, poisoned=True, observed_at=clock.wall
    )


def _after_stream_terminal(
    ex: Exchange,
    stream: StreamState,
    record: TaskRecord | None,
    item: Item,
    state: TaskState,
    findings: list[Finding],
    clock: Clock,
) -> Outcome:
    """The stream already delivered its task's terminal state: nothing more is delivered.

    A repeated snapshot or status in the same terminal state is benign (SPEC §11.7 allows a
    final Task snapshot) and not counted; anything else is ``event_after_terminal`` plus
    ``artifact_after_terminal`` or ``terminal_regression``, and poisons the task id.
    """
    if record is not None and item.kind in (Kind.TASK, Kind.STATUS):
        if state in (record.state, TaskState.UNSPECIFIED):
            return Outcome(Action.DROP, None, stream, findings=findings)
    findings.append(Finding("divergence", "event_after_terminal", f"task {item.task_id}"))
    if item.kind is Kind.ARTIFACT:
        findings.append(Finding("divergence", "artifact_after_terminal", f"task {item.task_id}"))
    elif record is not None:
        findings.append(
            Finding("divergence", "terminal_regression", f"task {item.task_id} {record.state} -> {state}")
        )
    new_record = _poison(record, clock) if record is not None and not record.poisoned else None
    return Outcome(Action.DROP, None, stream, record=new_record, findings=findings)


def _on_terminal_record(
    ex: Exchange,
    stream: StreamState | None,
    record: TaskRecord,
    item: Item,
    state: TaskState,
    obj: dict[str, Any],
    findings: list[Finding],
    clock: Clock,
) -> Outcome | None:
    """The ledger holds this task as terminal; the worker's payload cannot move it.

    A contradiction poisons the task id; from then on every Task snapshot is corrected to the
    recorded terminal status and the artifacts seen before it. A poisoned task's later
    snapshots are corrected without being counted again (one lie, one count).
    """
    tid = record.task_id
    if _creating(ex, stream):
        return _refuse(
            REUSED, f"worker reused terminal task id {tid}", stream, findings,
            _poison(record, clock),
        )
    if item.kind is _TASK and ex.operation is _GET and item.context_id and record.context_id \
            and item.context_id != record.context_id:
        return _reused_answer(ex, record, item, obj, findings, clock)
    if item.kind is Kind.ARTIFACT:
        art = artifact_of(item)
        prev = record.artifacts.get(art["artifactId"]) if art is not None else None
        if art is not None and prev is not None:
            # an artifact recorded before the terminal state: a stream or a push behind the
            # one that recorded it catches up, as far as what was frozen (docs/field-cases.md F19)
            aid = art["artifactId"]
            # only the stream's own view: the record's is what was frozen, not where this one is
            view = shown_after(item.obj, art, prev, stream.shown if stream is not None else NO_SHOWN,
                               _dialect(ex)) if _own_view(item.obj, art, stream) else None
            if within_frozen(prev, view):
                return Outcome(Action.FORWARD, obj, _with_view(stream, aid, view), findings=findings)
            kind = AFTER_LAST_CHUNK if prev.sealed else AFTER_TERMINAL
            findings.append(Finding("divergence", kind, f"task {tid} artifact {aid}"))
        else:
            findings.append(Finding("divergence", AFTER_TERMINAL, f"task {tid}"))
        poisoned = None if record.poisoned else _poison(record, clock)
        return Outcome(Action.DROP, None, stream, record=poisoned, findings=findings)
    if state is record.state or state is TaskState.UNSPECIFIED or _earlier(obj, record):
        if item.kind is Kind.TASK and record.poisoned:
            corrected = _corrected(ex, obj, record, findings, count=False)
            return Outcome(Action.FORWARD, corrected, stream, findings=findings)
        if item.kind is Kind.TASK and isinstance(obj.get("artifacts"), list):
            ids: list[str] = []
            start = len(findings)
            cleaned = clean_snapshot_artifacts(obj["artifacts"], record, findings, dialect=_dialect(ex),
                                               frozen=True, corrected=ids)
            if cleaned is not obj["artifacts"]:
                obj = {**obj, "artifacts": cleaned}
                if ids:
                    obj = _mark(obj, findings, start, ids)
        new_stream = _bind(stream, item, terminal=state is record.state)
        return Outcome(Action.FORWARD, obj, new_stream, findings=findings,
                       close=state is record.state and stream is not None)
    first = not record.poisoned
    if first or stream is not None:
        findings.append(
            Finding("divergence", "terminal_regression", f"task {tid} {record.state} -> {state}")
        )
    poisoned = _poison(record, clock) if first else None
    truth = record if poisoned is None else poisoned
    new_stream = _bind(stream, item, terminal=True)
    if item.kind is Kind.STATUS:
        if stream is None:
            return Outcome(Action.DROP, None, stream, record=poisoned, findings=findings)
        # This stream has not delivered the end yet: deliver the recorded truth, then close.
        fixed = {**obj, "status": _recorded_status(ex, truth)}
        if "final" in fixed or fixed.get("kind") == "status-update":
            fixed["final"] = True
        return Outcome(Action.FORWARD, fixed, new_stream, record=poisoned, findings=findings,
                       close=True)
    corrected = _corrected(ex, obj, truth, findings, count=first)
    return Outcome(Action.FORWARD, corrected, new_stream, record=poisoned, findings=findings,
                   close=stream is not None)


def _earlier(obj: dict[str, Any], record: TaskRecord) -> bool:
    """True when the payload's status timestamp precedes the recorded terminal status.

    Such a payload is an earlier event replayed on a concurrent stream of the same task
    (SPEC §3.5.2), not a regression.
    """
    mine = _timestamp(obj.get("status"))
    theirs = _timestamp(record.terminal_status)
    return mine is not None and theirs is not None and mine < theirs


def _timestamp(status: object) -> datetime | None:
    if not isinstance(status, dict) or not isinstance(status.get("timestamp"), str):
        return None
    try:
        stamp = datetime.fromisoformat(status["timestamp"])
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=timezone.utc)


def _recorded_status(ex: Exchange, record: TaskRecord) -> dict[str, Any]:
    """The recorded terminal status object, spelled for the client's version."""
    status = dict(record.terminal_status or {})
    status["state"] = spell_state(record.state, ex.spelling)
    return status


def _frozen_artifacts(ex: Exchange, obj: dict[str, Any], record: TaskRecord, findings: list[Finding],
                      *, count: bool, ids: list[str]) -> list[Any]:
    """A snapshot's artifacts as a terminal record lets them be shown: only those recorded
    before the terminal state (``count``: an ``artifact_after_terminal`` finding per other
    one), each as far as it agrees with what was frozen (docs/field-cases.md F19); ``ids``
    receives the ids removed, cut or withheld."""
    arts = obj.get("artifacts")
    kept: list[Any] = []
    if isinstance(arts, list):
        for art in arts:
            aid = art.get("artifactId") if isinstance(art, dict) else None
            if isinstance(aid, str) and aid in record.artifacts:
                kept.append(art)
                continue
            if isinstance(aid, str):
                ids.append(aid)
            if count:
                findings.append(Finding("divergence", AFTER_TERMINAL, f"task {record.task_id} {aid}"))
        kept = clean_snapshot_artifacts(kept, record, findings, dialect=_dialect(ex), frozen=True,
                                        corrected=ids)
    return kept


def _corrected(
    ex: Exchange, obj: dict[str, Any], record: TaskRecord, findings: list[Finding], *, count: bool
) -> dict[str, Any]:
    """A Task snapshot made true: recorded terminal status, only artifacts seen before it, as
    they were frozen.

    ``count``: add an ``artifact_after_terminal`` finding per artifact removed.
    """
    status = _recorded_status(ex, record)
    worker_state = obj.get("status", {}).get("state") if isinstance(obj.get("status"), dict) else None
    reason = "terminal_regression" if worker_state != status["state"] else AFTER_TERMINAL
    ids: list[str] = []
    kept = _frozen_artifacts(ex, obj, record, findings, count=count, ids=ids)
    out = {**obj, "status": status}
    if "artifacts" in obj or kept:
        out["artifacts"] = kept
    meta = obj.get("metadata")
    note: dict[str, Any] = {"reason": reason, "workerState": worker_state}
    if ids:
        note["artifacts"] = ids
    out["metadata"] = {**(meta if isinstance(meta, dict) else {}), CORRECTED_KEY: note}
    return out


def _reused_answer(ex: Exchange, record: TaskRecord, item: Item, obj: dict[str, Any],
                   findings: list[Finding], clock: Clock) -> Outcome:
    """A ``GetTask`` / ``ListTasks`` answer for a terminal task whose id the worker reused in
    another context (docs/field-cases.md F21): the first one is the ``reused_task_id``
    divergence and poisons the id. A caller seen on the task gets the recorded task — its
    context, its recorded terminal status, the artifacts it was shown as far as the worker's
    answer still holds them — marked corrected, never the new task's history or metadata;
    anyone else -32006 (the gateway cannot tell them the new task is theirs)."""
    tid = record.task_id
    first = not record.poisoned
    if first:
        findings.append(Finding("divergence", REUSED,
                                f"worker reused terminal task id {tid} in context {item.context_id}"))
    poisoned = _poison(record, clock) if first else None
    if not caller_seen(ex, record):
        return Outcome(Action.REJECT, None, None, record=poisoned, findings=findings, close=True,
                       error=(jsonrpc.INVALID_AGENT_RESPONSE,
                              f"invalid agent response: {REUSED}: task {tid} is terminal in another context"))
    worker_state = obj.get("status", {}).get("state") if isinstance(obj.get("status"), dict) else None
    ids: list[str] = []
    kept = _frozen_artifacts(ex, obj, record, [], count=False, ids=ids)
    out: dict[str, Any] = {k: obj[k] for k in ("kind", "id") if k in obj}
    out["contextId"] = record.context_id
    out["status"] = _recorded_status(ex, record)
    if kept:
        out["artifacts"] = kept
    note: dict[str, Any] = {"reason": REUSED, "workerState": worker_state, "workerContextId": item.context_id}
    if ids:
        note["artifacts"] = ids
    out["metadata"] = {CORRECTED_KEY: note}
    return Outcome(Action.FORWARD, out, None, record=poisoned, findings=findings)


def _mark(obj: dict[str, Any], findings: list[Finding], start: int, ids: list[str]) -> dict[str, Any]:
    """``obj`` (a Task) with the ``a2a-gateway/corrected`` note of artifacts corrected: the
    reason is the first divergence (or bound) found from ``findings[start:]``."""
    kinds = [f.kind for f in findings[start:] if f.category in ("divergence", "limit")]
    status = obj.get("status")
    worker_state = status.get("state") if isinstance(status, dict) else None
    note = {"reason": kinds[0] if kinds else AFTER_LAST_CHUNK, "workerState": worker_state,
            "artifacts": list(ids)}
    meta = obj.get("metadata")
    return {**obj, "metadata": {**(meta if isinstance(meta, dict) else {}), CORRECTED_KEY: note}}


def _own_view(update: dict[str, Any], art: dict[str, Any], stream: StreamState | None) -> bool:
    """True when the view after ``update`` follows from the update and the stream alone (a
    replace, or an append to an artifact the stream showed whole)."""
    return update.get("append") is not True or (stream is not None and art["artifactId"] in stream.shown)


def _dialect(ex: Exchange) -> Dialect:
    """The wire form of the payloads the engine judges for ``ex``: the client's."""
    return dialect_of(ex.version, ex.binding)


def _with_view(stream: StreamState | None, aid: str, view: Shown | None) -> StreamState | None:
    """``stream`` having shown ``view`` of artifact ``aid`` (``None``: no longer known whole)."""
    if stream is None:
        return None
    shown = stream.shown
    if view is None:
        if aid not in shown:
            return stream
        new = {k: v for k, v in shown.items() if k != aid}
    else:
        if shown.get(aid) == view or (aid not in shown and len(shown) >= MAX_ARTIFACTS):
            return stream
        new = {**shown, aid: view}
    return stream_state(stream.task_id, stream.context_id, stream.terminal, stream.generation, new)


def _with_views(stream: StreamState | None, views: dict[str, Shown]) -> StreamState | None:
    """``stream`` having shown a snapshot's artifacts as ``views``."""
    if stream is None or not views:
        return stream
    new = {**stream.shown, **views}
    if len(new) > MAX_ARTIFACTS:
        new = dict(list(new.items())[:MAX_ARTIFACTS])
    return stream_state(stream.task_id, stream.context_id, stream.terminal, stream.generation, new)


def _newer(known: int | None, current: int | None) -> int | None:
    """The later of two card generations (``None``: unknown)."""
    if current is None:
        return known
    return current if known is None or current > known else known


def _bind(stream: StreamState | None, item: Item, *, terminal: bool,
          generation: int | None = None) -> StreamState | None:
    """The stream bound to the payload's task (``stream`` itself when nothing changes);
    ``generation``, when given, is the stream's last generation from now on."""
    if stream is None:
        return None
    task_id = stream.task_id or item.task_id
    context_id = stream.context_id or item.context_id
    terminal = stream.terminal or terminal
    if generation is None:
        generation = stream.generation
    if task_id is stream.task_id and context_id is stream.context_id and terminal is stream.terminal \
            and generation == stream.generation:
        return stream
    return stream_state(task_id, context_id, terminal, generation, stream.shown)


def _generations(
    ex: Exchange,
    stream: StreamState | None,
    record: TaskRecord | None,
    item: Item,
    findings: list[Finding],
) -> tuple[int | None, str | None, int | None]:
    """The generation step of a payload for a live task (A2A v1.1 draft, SPEC11 §3.2.7;
    docs/resume.md §3.2): ``(generation, pending_get, stream_generation)`` for the new
    record and stream; a regression is appended to ``findings``.

    * No generation ≥ 1 in the payload: nothing changes — unless the record holds one, then
      the worker has shown it does not implement them for this task: ``0`` from now on (never
      used again), nothing owed.
    * The first generation seen is the baseline.
    * A step back — below the stream's own last generation, or on a payload outside a
      stream (or a stream's first) below the record's — is a ``generation_regression``
      divergence and owes a ``GetTask``, except on a ``GetTask`` answer: that is the
      ``GetTask``. A concurrent stream repeating older events is not one: each stream is
      compared with itself.
    * An update event more than one past the record's generation is a ``generation_gap``:
      a ``GetTask`` is owed (a reason already owed stays). A Task snapshot is complete: it
      has no gap, and one at least as new as the record clears what is owed.
    * The record keeps the highest generation seen.
    """
    known = record.generation if record is not None else None
    owed = record.pending_get if record is not None else None
    if known == 0:
        return 0, None, None
    value = generation_of(item.obj)
    if value is None:
        return (None, owed, None) if known is None else (0, None, None)
    if known is None:
        return value, owed, value
    last = stream.generation if stream is not None and stream.generation is not None else known
    if value < last:
        findings.append(Finding("divergence", GENERATION_REGRESSION,
                                f"task {item.task_id} generation {value} after {last}"))
        if ex.operation is _GET:  # the worker's own answer to GetTask: the new baseline
            return value, None, value
        if owed is None:
            owed = GENERATION_REGRESSION
    elif item.kind is _TASK:
        if value >= known:
            owed = None
    elif value > known + 1 and owed is None:
        owed = GENERATION_GAP
    return max(known, value), owed, value


def _transition(
    ex: Exchange,
    stream: StreamState | None,
    record: TaskRecord | None,
    item: Item,
    state: TaskState,
    obj: dict[str, Any],
    findings: list[Finding],
    clock: Clock,
) -> Outcome:
    """A live (or new) task moves on the worker's payload."""
    tid = item.task_id
    if tid is None:
        return Outcome(_FORWARD, obj, stream, findings=findings)
    if record is None:  # a new task: the record starts unspecified, without artifacts
        upstream, task_id, context_id = ex.upstream, tid, item.context_id
        base_state, base_status, poisoned = _UNSPECIFIED, None, False
        callers: tuple[str, ...] = ()
        known, card_etag, tenant = NO_ARTIFACTS, ex.card_etag, ex.tenant
        card_generation = ex.card_generation
    else:
        upstream, task_id, context_id = record.upstream, record.task_id, record.context_id or item.context_id
        base_state, base_status, poisoned = record.state, record.terminal_status, record.poisoned
        known, card_etag = record.artifacts, ex.card_etag or record.card_etag
        tenant, callers = record.tenant, record.callers
        card_generation = _newer(record.card_generation, ex.card_generation)
    if state is _UNSPECIFIED:
        state = base_state  # an unspecified payload never erases a known state (F03)
    terminal = state.is_terminal
    first_terminal = terminal and not base_state.is_terminal
    if (record is None or record.generation is None) and "generation" not in item.obj:
        generation = pending_get = stream_generation = None  # no generations: the common case
    else:
        generation, pending_get, stream_generation = _generations(ex, stream, record, item, findings)
    artifacts = known
    kind = item.kind
    if kind is _ARTIFACT:
        art = artifact_of(item)
        if art is not None:
            artifacts = dict(known)
            refused, view = apply_update(item.obj, art, artifacts, findings, dialect=_dialect(ex),
                                         shown=stream.shown if stream is not None else None)
            if refused is not None:
                # not delivered, but seen: its generation counts (docs/resume.md §3.2)
                seen = None
                if record is not None and (generation != record.generation
                                           or pending_get != record.pending_get):
                    seen = dataclasses.replace(record, generation=generation,
                                               pending_get=pending_get, observed_at=clock.wall)
                if stream is not None and stream_generation is not None:
                    stream = dataclasses.replace(stream, generation=stream_generation)
                return Outcome(_DROP, None, stream, seen, findings)
            stream = _with_view(stream, art["artifactId"], view)
    elif kind is _TASK and isinstance(obj.get("artifacts"), list):
        artifacts = dict(known)
        views: dict[str, Shown] | None = {} if stream is not None else None
        ids: list[str] = []
        start = len(findings)
        cleaned = clean_snapshot_artifacts(obj["artifacts"], record, findings, artifacts,
                                           dialect=_dialect(ex), freeze_all=first_terminal,
                                           views=views, corrected=ids)
        if cleaned is not obj["artifacts"]:
            obj = {**obj, "artifacts": cleaned}
            if ids:
                obj = _mark(obj, findings, start, ids)
        if views:
            stream = _with_views(stream, views)
    terminal_status = base_status
    if first_terminal:
        status = dict(obj.get("status") or {})
        status["state"] = state.value
        terminal_status = status
        if stream is not None and stream.shown and artifacts:
            # what the client was shown of each artifact, frozen with the terminal state (F19)
            if artifacts is known or not isinstance(artifacts, dict):
                artifacts = dict(artifacts)
            freeze(artifacts, stream.shown)
    if not artifacts:
        artifacts = NO_ARTIFACTS
    elif type(artifacts) is not dict:
        artifacts = dict(artifacts)  # records hold plain dicts (or the shared NO_ARTIFACTS)
    if terminal:
        pending_get = None  # nothing about a terminal task can be refreshed into life
    new_record = build_record(
        upstream, task_id, context_id, state, clock.wall, terminal_status,
        poisoned, artifacts, card_etag, generation, pending_get, tenant, callers, card_generation,
    )
    new_stream = _bind(stream, item, terminal=terminal, generation=stream_generation)
    return Outcome(_FORWARD, obj, new_stream, new_record, findings, None,
                   terminal and stream is not None)
