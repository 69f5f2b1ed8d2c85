"""Safe retries of ``SendMessage``: which key a send has, what a retry gets (docs/retries.md).

Pure: no I/O, no clock (times are passed in). The shell (:mod:`gateway.proxy.retries`) reads
and writes the keys in the retry store (:mod:`gateway.ledger.retries`); this module decides.

* :func:`client_key` — the retry key a send carries: the ``Idempotency-Key`` header, else
  (when the upstream allows it, ``upstreams[].retries.message_id_keys``) the message's
  ``messageId``; ``None`` for any other operation or a send without one.
* :func:`request_digest` — what "the same request" means: SHA-256 over the canonical JSON
  (RFC 8785) of the message and the send's ``configuration``; the JSON-RPC id, headers and
  the binding's envelope are not part of it.
* :func:`decide` — a key's stored :class:`RetryEntry` and this request's digest in, a
  :class:`Decision` out: ``replayed`` (the first call ended: the task as recorded, or its
  stored Message answer), ``attach`` (the first call's task is known but it is still going:
  a retried stream attaches to it), ``wait`` (still going, no task yet: poll again),
  ``conflict`` (a different request under the key: refused, nothing forwarded),
  ``in_progress`` (waited as long as allowed and there is no task to show), ``unknown``
  (the first call's gateway stopped while it was in flight and no task was learnt).
* :func:`replay` — the exchange of a retry that gets its first call's task: a ``GetTask``
  through the gateway's usual rules, answered in the shape of a ``SendMessage`` answer; for a
  stream, the task's snapshot then (unless it is terminal) the live stream
  (:meth:`gateway.exchange.stream.StreamExchange.attach`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.version import Binding
from gateway.exchange.commands import AppendTimeline
from gateway.invariants.timeline import TimelineEntry

SEND_OPERATIONS = frozenset({Operation.SEND, Operation.STREAM})
"""The operations a retry key protects (``SendMessage``, ``SendStreamingMessage``)."""

IN_FLIGHT, DONE, UNKNOWN = "in_flight", "done", "unknown"
"""A key's states: the first call is going on / ended / its gateway stopped meanwhile."""

OUTCOMES = ("replayed", "waited", "attached", "conflict", "in_progress", "unknown")
"""The ``outcome`` label values of ``a2a_gateway_retries_total`` (docs/retries.md §4)."""

MAX_KEY_CHARS = 255
"""The longest ``Idempotency-Key`` / ``messageId`` taken as a key (longer: refused, -32600)."""


@dataclass(frozen=True, slots=True)
class RetryEntry:
    """What the retry store keeps under one key (the key itself only as a keyed digest).

    ``digest``: :func:`request_digest` of the first request; ``state``: :data:`IN_FLIGHT`,
    :data:`DONE` or :data:`UNKNOWN`; ``task_id``: the first call's task once known;
    ``result``: a ``DONE`` call's Message answer (JSON, the client's form) when it made no
    task; ``form``: ``"<version>/<binding>"`` the result is written in; ``created``/``updated``:
    Unix seconds."""

    digest: str
    state: str
    created: float
    updated: float
    task_id: str | None = None
    result: bytes | None = None
    form: str = ""

    def encode(self) -> bytes:
        """The stored form (JSON)."""
        doc: dict[str, Any] = {"d": self.digest, "s": self.state, "c": self.created, "u": self.updated}
        if self.task_id is not None:
            doc["t"] = self.task_id
        if self.result is not None:
            doc["r"] = self.result.decode()
            doc["f"] = self.form
        return orjson.dumps(doc)

    @staticmethod
    def decode(raw: bytes | str) -> RetryEntry:
        """The entry of :meth:`encode`'s bytes. Raises ValueError on anything else."""
        doc = orjson.loads(raw)
        if not isinstance(doc, dict) or doc.get("s") not in (IN_FLIGHT, DONE, UNKNOWN):
            raise ValueError("not a retry entry")
        result = doc.get("r")
        return RetryEntry(str(doc["d"]), doc["s"], float(doc["c"]), float(doc["u"]), doc.get("t"),
                          result.encode() if isinstance(result, str) else None, str(doc.get("f", "")))

    @property
    def size(self) -> int:
        """Bytes this entry holds (the bound ``retries.max_bytes`` counts them)."""
        return 96 + len(self.digest) + len(self.task_id or "") + len(self.result or b"")


@dataclass(frozen=True, slots=True)
class Decision:
    """What a request under a key that is already taken gets (:func:`decide`).

    ``outcome`` is one of ``replayed``, ``attach``, ``wait``, ``conflict``, ``in_progress``,
    ``unknown``; ``task_id`` the first call's task (``replayed``, ``attach``, and
    ``in_progress`` / ``unknown`` when one is known: they then get it as recorded); ``result`` a
    stored Message answer to give back; ``error``: ``(code, message)`` of a refusal."""

    outcome: str
    task_id: str | None = None
    result: bytes | None = None
    error: tuple[int, str] | None = None


def client_key(operation: Operation, header: str | None, params: Any, *, message_id_keys: bool) -> str | None:
    """The retry key of a request: ``header`` (the ``Idempotency-Key`` value, trimmed) when
    given, else the message's ``messageId`` when ``message_id_keys``; ``None`` for an
    operation other than a send (:data:`SEND_OPERATIONS`) or a send with neither. A
    ``messageId`` longer than :data:`MAX_KEY_CHARS` is no key (A2A bounds no ``messageId``: such
    a send is forwarded as it is, unkeyed); a header that long is refused (:func:`key_problem`)."""
    if operation not in SEND_OPERATIONS:
        return None
    if header is not None and header.strip():
        return "h:" + header.strip()
    if not message_id_keys:
        return None
    message = jsonrpc.request_message(params)
    if message is None:
        return None
    message_id = jsonrpc.member(message, "messageId", "message_id")
    if not message_id or len(message_id) > MAX_KEY_CHARS:
        return None
    return "m:" + message_id


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be used (an ``Idempotency-Key`` too long), or ``None``."""
    if len(key) - 2 > MAX_KEY_CHARS:
        return f"Idempotency-Key longer than {MAX_KEY_CHARS} characters"
    return None


def scoped_key(upstream: str, tenant: str, caller: str | None, key: str) -> bytes:
    """The bytes the shell digests (keyed) into the stored name of ``key``: one key space per
    upstream, A2A tenant and caller (docs/retries.md §1)."""
    return b"\x00".join((upstream.encode(), tenant.encode(), (caller or "").encode(), key.encode()))


def request_digest(params: Any) -> str:
    """SHA-256 (hex) of the send's message and ``configuration`` as JSON with every object's
    members sorted (``orjson``, ``OPT_SORT_KEYS``) — what makes two sends "the same request":
    member order and whitespace do not matter, every value does (``1`` and ``1.0`` differ).
    Not RFC 8785: its pure-Python canonicalizer cost about a fifth of a keyed send's gateway
    CPU, and a retry sends the same values again (docs/retries.md §1)."""
    params = params if isinstance(params, dict) else {}
    subject = {"message": jsonrpc.request_message(params),
               "configuration": params.get("configuration")}
    return hashlib.sha256(orjson.dumps(subject, option=orjson.OPT_SORT_KEYS)).hexdigest()


def form_of(version: str, binding: Binding) -> str:
    """The ``form`` a stored result is written in (:attr:`RetryEntry.form`)."""
    return f"{version}/{binding.value}"


def decide(entry: RetryEntry, digest: str, *, streaming: bool, form: str, now: float,
           waited_since: float, wait_seconds: float, in_flight_seconds: float) -> Decision:
    """What a request with ``digest`` gets under a key whose first call left ``entry``.

    ``waited_since``: when this request began waiting (``now`` on its first look);
    ``wait_seconds``: how long a retry waits for a first call still going
    (``retries.wait_seconds``); ``in_flight_seconds``: after how long an in-flight key whose
    gateway may have died counts as ``unknown`` (``retries.in_flight_seconds``, for stores
    that survive a restart without a start-up sweep, Redis). ``form``: the request's
    :func:`form_of` (a stored Message answer replays only in the form it was written in).
    """
    if entry.digest != digest:
        return Decision("conflict", error=(jsonrpc.INVALID_REQUEST,
                        "Idempotency-Key / messageId already used for a different request "
                        "(a different message or configuration); nothing was sent to the agent"))
    state = entry.state
    if state == IN_FLIGHT and now - entry.updated > in_flight_seconds:
        state = UNKNOWN
    if state == DONE:
        if entry.task_id is not None:
            return Decision("replayed", entry.task_id)
        if entry.result is not None and entry.form == form and not streaming:
            return Decision("replayed", result=entry.result)
        return Decision("unknown", error=(jsonrpc.INVALID_REQUEST,
                        "this request was already answered without a task; its answer cannot "
                        "be given again here (docs/retries.md §2): send a new message"))
    if state == UNKNOWN:
        if entry.task_id is not None:
            return Decision("unknown", entry.task_id)
        return Decision("unknown", error=(jsonrpc.INTERNAL_ERROR,
                        "the first request with this Idempotency-Key / messageId was sent to the "
                        "agent but its answer was lost (the connection to the agent broke, or the "
                        "gateway stopped); whether the agent started a task is unknown, and it is "
                        "not sent again (docs/retries.md §3)"))
    if streaming and entry.task_id is not None:
        return Decision("attach", entry.task_id)
    if now - waited_since < wait_seconds:
        return Decision("wait")
    if entry.task_id is not None:
        return Decision("in_progress", entry.task_id)
    return Decision("in_progress", error=(jsonrpc.INVALID_REQUEST,
                    "the first request with this Idempotency-Key / messageId is still in progress; "
                    "retry later"))


def poll_interval(attempt: int) -> float:
    """Seconds between two looks at a key still in flight: 0.05 s doubling to 1 s."""
    return min(1.0, 0.05 * 2.0 ** min(attempt, 5))


def replay(owner: Any, decision: Decision) -> Generator[Any, Any, None]:
    """The exchange of a retry that gets its first call's outcome (``owner``: the retry's
    :class:`~gateway.exchange.request.RequestExchange`; ``decision`` from :func:`decide`).

    A stored Message answer is given back as it was; a task is read with a ``GetTask``
    through the gateway's usual rules (judged and stored as any probe) and answered as a
    ``SendMessage`` answer carrying it; a stream gets the task's snapshot, then — while the
    task is not terminal — the live events of a ``SubscribeToTask`` of the gateway's own
    (:meth:`~gateway.exchange.stream.StreamExchange.attach`). A task the worker no longer
    gives is an error (-32603), never a second task."""
    from gateway.exchange.stream import StreamExchange  # stream imports request, request this

    if decision.error is not None:
        owner.summary.outcome = ("ledger_error" if decision.outcome == "unavailable"
                                 else f"retry_{decision.outcome}")
        status = 200
        if decision.outcome == "unavailable":
            status = 503
        elif owner.ex.binding is Binding.REST:  # the HTTP way (draft-ietf-httpapi-idempotency-key-header)
            status = {"conflict": 422, "invalid": 400}.get(decision.outcome, 409)
        yield owner.error(status, *decision.error)
        return
    owner.summary.outcome = "retried"
    if decision.result is not None:
        yield owner.own_result(orjson.loads(decision.result))
        return
    task_id = decision.task_id
    assert task_id is not None
    owner.summary.task_id = task_id
    ex = owner.ex
    yield AppendTimeline(task_id, TimelineEntry(
        "request", "answered_locally", str(ex.operation.value), ex.binding.value, ex.version.value,
        findings=(("retry", decision.outcome, "a send under the retry key of this task's first "
                   "request: given this task, nothing sent again"),)), ex.tenant)
    if owner.streaming:
        yield from StreamExchange(owner).attach(task_id)
        return
    task, _ = yield from owner.probe_task(task_id, "retry")
    if not isinstance(task, dict):
        yield owner.error(200, jsonrpc.INTERNAL_ERROR,
                          f"task {task_id} of the first request could not be read from the agent",
                          task_id=task_id)
        return
    yield owner.own_result(owner.snapshot(task))
