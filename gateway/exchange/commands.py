"""What an exchange asks its driver to do (commands) and what the driver answers (replies).

An exchange is a generator, a :data:`CommandGenerator`: it ``yield``\\ s a :class:`Command`
and is resumed with the reply (or with an exception thrown in at the ``yield``), and returns
its result. Pure data, no I/O. Every command is a :func:`command` class: a dataclass the type
checker holds frozen (assigning a field is an error; :func:`dataclasses.replace` makes a
changed copy) and that runs as a plain slotted one, because several are made per SSE event
and a runtime-frozen one costs about twice as much to build. The replies are plain slotted
dataclasses, read-only by convention. The table of commands, their replies and the
exceptions a driver may throw in is in docs/architecture.md ("The exchange layer"), generated
from this module by :mod:`gateway.command_reference`: each command's docstring describes it,
then ends with a ``Reply:`` line and, when something may be thrown in, a ``Throws:`` line.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar, dataclass_transform

from gateway.invariants.model import Clock, Finding, TaskRecord
from gateway.invariants.timeline import TimelineEntry
from gateway.records import PushConfigEntry

T = TypeVar("T")


class Command:
    """What an exchange asks its driver to do: the base of every command below. A driver
    dispatches on the exact class (``type(cmd)``); anything else yielded is a ``TypeError``."""

    __slots__ = ()


CommandGenerator: TypeAlias = Generator[Command, Any, T]
"""What every exchange method returns: a generator that yields :class:`Command`\\ s, is sent
each command's reply (typed ``Any``: the reply's type is the command's, see its docstring)
and returns a ``T``."""


_C = TypeVar("_C", bound=Command)


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def command(cls: type[_C]) -> type[_C]:
    """Make ``cls`` (a :class:`Command` subclass) a command dataclass: frozen to the type
    checker, a plain slotted dataclass at run time (see the module docstring)."""
    return dataclass(slots=True)(cls)


# --- ledger -------------------------------------------------------------------------------


@command
class Load(Command):
    """Read the record of ``task_id`` in ``tenant`` (``None``: no task, only the time;
    docs/callers.md §1). With ``cached``, the record this exchange itself last read or stored
    (and its version) may answer without a ledger call; the reply says so (``Loaded.cached``),
    and only a :class:`Store` over that version proves it current (docs/architecture.md,
    "A stream holds its record").

    Reply: :class:`Loaded`.
    Throws: :class:`~gateway.errors.LedgerError`.
    """

    task_id: str | None
    tenant: str = ""
    cached: bool = False


@dataclass(slots=True)
class Loaded:
    """The record (``None`` when the ledger has none), the time of the read, and the ledger's
    bookkeeping beside the record: ``version``, its compare-and-set counter (0 without a
    record; the ``expected_version`` of the next :class:`Store`), and ``needs_resync``, the
    restart flag (set at start-up for a task that was live while the gateway was down; the
    next action on it does a forced ``GetTask``)."""

    record: TaskRecord | None
    clock: Clock
    version: int = 0
    needs_resync: bool = False
    cached: bool = False
    """True when the exchange's own last read or store answered (a ``Load(cached=True)``),
    not the ledger: the record may have moved since."""


@command
class Store(Command):
    """Compare-and-set ``record`` over ``expected_version`` (0: a new record) under the
    record's upstream, tenant and task id, and clear the task's ``needs_resync`` flag with it:
    a stored record is an observation of this gateway run. To clear the flag alone, store the
    loaded record unchanged over its loaded version
    (:func:`gateway.exchange.judge.clear_resync`).

    Reply: the new version (``expected_version + 1``).
    Throws: :class:`~gateway.errors.VersionConflictError`, :class:`~gateway.errors.LedgerError`.
    """

    record: TaskRecord
    expected_version: int


@command
class AppendEvent(Command):
    """Add one event the client is about to receive for ``task_id`` to the task's replay
    window (docs/resume.md §2), in ``lineage`` (``None``: a new one, named after the event's
    id). ``payload`` is the exchange's encoding of the event
    (:func:`gateway.exchange.window.encode`), ``tenant`` the task's tenant.

    Reply: ``(event_id, lineage)``.
    Throws: :class:`~gateway.errors.LedgerError`.
    """

    task_id: str
    lineage: str | None
    payload: bytes
    tenant: str = ""


@command
class StoreAndAppend(Command):
    """A :class:`Store` and an :class:`AppendEvent` of the event it was judged from, as one
    ledger operation (``put_with_event``): the event is added to the window only when the
    compare-and-set holds, and both are kept or neither (docs/resume.md §2).

    Reply: ``(version, event_id, lineage)``.
    Throws: :class:`~gateway.errors.VersionConflictError` (nothing was kept),
    :class:`~gateway.errors.LedgerError`.
    """

    record: TaskRecord
    expected_version: int
    event: AppendEvent


@command
class ReadWindow(Command):
    """The replay window of ``task_id`` in ``tenant`` after the event ``after`` (a client's
    ``Last-Event-ID``; docs/resume.md §1).

    Reply: :class:`~gateway.records.Replay`.
    Throws: :class:`~gateway.errors.LedgerError`.
    """

    task_id: str
    after: str
    tenant: str = ""


@command
class AppendTimeline(Command):
    """Keep ``entry`` in the timeline of ``task_id`` (docs/observability.md §2); the driver
    sets its time. Performed after the observation's record was stored and before the payload
    is forwarded; a failed write is counted and logged, never thrown in (the timeline explains,
    it decides nothing). ``tenant``: the task's A2A tenant (docs/callers.md §1).

    Reply: ``None``.
    """

    task_id: str
    entry: TimelineEntry
    tenant: str = ""


@command
class Enqueue(Command):
    """Put ``body`` (a judged notification in the client's form) in the durable push outbox
    for the push config ``callback_id`` of ``task_id`` in ``tenant`` (docs/push.md §3), within
    ``push.max_outbox_per_task`` and ``push.max_outbox_total``.

    Reply: the entry id.
    Throws: :class:`~gateway.errors.PushLimitError` (the outbox is full),
    :class:`~gateway.errors.LedgerError`.
    """

    callback_id: str
    task_id: str
    body: bytes
    tenant: str = ""


@command
class PushBound(Command):
    """The tasks the push configs ``callback_ids`` (inline configs of this send) are bound to
    by now: a notification to one of them named its task (docs/push.md §1.3).

    Reply: a ``frozenset`` of task ids.
    Throws: :class:`~gateway.errors.LedgerError`.
    """

    callback_ids: tuple[str, ...]


@command
class PushConfigs(Command):
    """The push configs the gateway relays for ``task_id`` in ``tenant`` on the exchange's
    upstream (docs/push.md §1).

    Reply: a list of :class:`~gateway.records.PushConfigEntry`.
    Throws: :class:`~gateway.errors.LedgerError`.
    """

    task_id: str
    tenant: str = ""


@command
class GetPushConfig(Command):
    """The push config of the callback ``callback_id`` (docs/push.md §2).

    Reply: a :class:`~gateway.records.PushConfigEntry`, or ``None``.
    Throws: :class:`~gateway.errors.LedgerError`.
    """

    callback_id: str


@command
class PutPushConfig(Command):
    """Keep ``entry`` (a new config, or a changed one under its callback id), with at most
    ``max_per_task`` configs of its task and ``max_total`` in all; the driver sets its time
    (docs/push.md §1).

    Reply: ``None``.
    Throws: :class:`~gateway.errors.PushLimitError` (a bound is reached: nothing kept),
    :class:`~gateway.errors.LedgerError`.
    """

    entry: PushConfigEntry
    max_per_task: int
    max_total: int


@command
class DeletePushConfig(Command):
    """Forget the push config of the callback ``callback_id``.

    Reply: ``True`` when there was one.
    Throws: :class:`~gateway.errors.LedgerError`.
    """

    callback_id: str


@command
class NewCallback(Command):
    """Make a fresh callback for one push config: an unguessable callback id (the last
    segment of its URL) and the token the worker must send with each notification
    (docs/push.md §1).

    Reply: ``(callback_id, worker_token)``.
    """


@command
class CheckWebhook(Command):
    """Check that the client's webhook ``url`` may be reached (docs/push.md §4: its scheme,
    and every address its host resolves to).

    Reply: ``None`` when it may, else ``(reason, message)``: why not.
    """

    url: str


# --- the worker -----------------------------------------------------------------------------


@command
class Post(Command):
    """Send ``body`` to the route's upstream and read the whole answer.
    ``method`` is the HTTP method; ``target`` the path and query below the upstream's base
    URL (starting with ``/``), ``None`` for the client's own request path and query. A
    ``GET`` / ``DELETE`` sends no body. ``a2a_version`` replaces the client's ``A2A-Version``
    header (``""``: none is sent) and copies its extensions header to the version's name
    (``A2A-Extensions`` / ``X-A2A-Extensions``): a bridged request speaks the worker's version
    (docs/bridge.md); ``None`` leaves the client's headers as they are. ``reason`` says why
    the gateway sends a request of its own (a forced ``GetTask``: ``restart``,
    ``heartbeat_gap``, ``upstream_eof``…; set by the exchange after the binding built it, for
    the request's client span); ``None`` for the client's request.

    Reply: :class:`Answer`.
    Throws: :class:`~gateway.errors.UpstreamError`.
    """

    body: bytes
    method: str = "POST"
    target: str | None = None
    a2a_version: str | None = None
    reason: str | None = field(default=None, compare=False)


@command
class Open(Command):
    """Send ``body`` expecting an SSE stream (``method``, ``target`` and ``a2a_version`` as
    for :class:`Post`); an earlier (cut) stream's response is closed first. ``reason``:
    ``resubscribe`` for the gateway's own ``SubscribeToTask`` after a cut, else ``None``.

    Reply: :data:`OPENED` once an event stream's head is in (it becomes the stream
    :class:`Read` reads), or the whole :class:`Answer` when the worker answered anything else.
    Throws: :class:`~gateway.errors.UpstreamError`.
    """

    body: bytes
    method: str = "POST"
    target: str | None = None
    a2a_version: str | None = None
    reason: str | None = field(default=None, compare=False)


@command
class Read(Command):
    """The next bytes of the open upstream stream.

    Reply: the ``bytes`` as read, or :data:`ENDED` at its end.
    Throws: :class:`~gateway.errors.UpstreamError` (a cut), :class:`TimeoutError` (past a
    :class:`Deadline`).
    """


@command
class Deadline(Command):
    """From now on, a :class:`Read` that would wait past ``seconds`` from now throws
    :class:`TimeoutError` (the post-terminal drain).

    Reply: ``None``.
    """

    seconds: float


@dataclass(slots=True)
class Answer:
    """A worker's whole answer: HTTP status, body (decoded per ``Content-Encoding``), whether
    its media type is JSON (only a 4xx answer's is read: a non-JSON 4xx is relayed as it is),
    and its headers, opaque to the exchange (the driver's; :attr:`Respond.relay`)."""

    status: int
    content: bytes
    json: bool = True
    headers: Any = None


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


OPENED = _Marker("OPENED")
"""Reply to :class:`Open`: an event stream is open."""
ENDED = _Marker("ENDED")
"""Reply to :class:`Read`: the worker closed the stream."""

# --- the client -----------------------------------------------------------------------------


@command
class ReadBody(Command):
    """Read the client's whole request body, at most ``limit`` bytes (a worker's push
    notification, docs/push.md §2).

    Reply: the ``bytes``.
    Throws: :class:`~gateway.errors.BodyTooLargeError` (past ``limit``),
    :class:`~gateway.errors.ClientGoneError` (the client left).
    """

    limit: int


@command
class Respond(Command):
    """Send one whole response. ``media`` is ``json``, ``sse`` or ``raw`` (the worker's own
    content type); ``relay`` is the worker's :class:`Answer` whose headers go along (hop-by-hop
    and body headers removed), ``None`` for an answer of the gateway's own; ``headers`` are
    the gateway's own besides (lower-case name, value; e.g. ``Retry-After`` on "gateway at
    capacity").

    Reply: ``None``.
    """

    status: int
    body: bytes
    media: str = "json"
    relay: Answer | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()


@command
class StartStream(Command):
    """Send the head of an SSE response (HTTP 200, the worker's stream headers relayed).

    Reply: ``None``.
    """


@command
class Emit(Command):
    """Queue ``frame`` (encoded SSE) for the client: its event is judged and stored.

    Reply: ``None``.
    """

    frame: bytes


@command
class Flush(Command):
    """Send the queued frames in one write.

    Reply: ``None``.
    """


@command
class EndStream(Command):
    """Send the queued frames and end the client's stream.

    Reply: ``None``.
    """


# --- time, the card, reports ------------------------------------------------------------------


@command
class Sleep(Command):
    """Wait ``seconds`` (resubscribe backoff).

    Reply: ``None``.
    """

    seconds: float


@command
class MarkCardStale(Command):
    """The worker's answer (401/403/404) may mean a changed card: revalidate it before the
    next admission.

    Reply: ``None``.
    """


@command
class Count(Command):
    """A report: add ``amount`` (default one) to the metric ``metric`` (an attribute of
    :class:`~gateway.observability.metrics.Metrics`) with the exchange's upstream first and
    then ``labels``.

    Reply: ``None``.
    """

    metric: str
    labels: tuple[str, ...] = ()
    amount: int = 1


@command
class Found(Command):
    """A report: findings of the engine, to count and (divergences) log with ``task_id`` (of
    ``tenant``); ``method`` labels rejections (default: the exchange's operation).

    Reply: ``None``.
    """

    findings: tuple[Finding, ...]
    task_id: str | None
    method: str = ""
    tenant: str = ""


@command
class Degraded(Command):
    """A report: set ``a2a_gateway_upstream_degraded{reason}`` to ``value`` (1 or 0).

    Reply: ``None``.
    """

    reason: str
    value: int


@command
class Log(Command):
    """A report: one log line, ``event`` at ``level`` (``debug``/``warning``/``error``) with
    ``fields``.

    Reply: ``None``.
    """

    level: str
    event: str
    fields: tuple[tuple[str, Any], ...] = ()


REPORTS = (Count, Found, Degraded, Log)
"""Commands that only report: the driver feeds them to the observability sink."""
