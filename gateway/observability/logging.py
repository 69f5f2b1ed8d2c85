"""Logging setup: one JSON object per line on stderr, or one text line with the same fields
as ``key=value`` pairs (``log.format: text``); stdlib only. Every line carries ``pid``.

Log events are snake_case (``request``, ``stream_closed``, ``divergence``); keys reuse metric
label names (``upstream``, ``method``) so logs and metrics join; durations are ``duration_s``.
Task, context and request ids go here, never into metric labels.

A line never fails to be written for what a client sent: a value orjson cannot write (an
integer past 64 bits, a string with a lone surrogate, nesting past orjson's depth, an object of
no JSON type) is written by :func:`safe_value` instead — the integer's digits, the string with
the odd code points escaped as ``\\udcff``, the nesting cut at :data:`MAX_VALUE_DEPTH` — and a
line is at most :data:`MAX_LINE_CHARS` characters (longer values are cut, marked
``"truncated": true``). The usual line costs one ``orjson.dumps`` and a length check.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import re
import select
import sys
import time
from queue import Empty, SimpleQueue
from typing import Any

import orjson

LOGGER_NAME = "a2a_gateway"
_SKIP = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "color_message"}


MAX_LINE_CHARS = 16 * 1024
"""The longest line written (a longer one has its largest values cut, ``"truncated": true``)."""
MAX_VALUE_CHARS = 4096
"""The longest string kept whole when a line is written by :func:`safe_value`."""
MAX_VALUE_DEPTH = 8
"""Nesting :func:`safe_value` keeps; deeper containers are written as a short summary."""
MAX_VALUE_ITEMS = 64
"""Members or items of one container :func:`safe_value` keeps (then ``"…": "N more"``)."""
_MAX_NUMBER_DIGITS = 100  # a longer integer is written as a (cut) string


def safe_value(value: Any, depth: int = 0) -> Any:
    """``value`` in a form orjson always writes, whatever a client put into it: integers past
    64 bits as their digits (a JSON number up to 100 digits, else a cut string), strings with
    lone surrogates or other code points UTF-8 cannot carry escaped (``\\udcff``), bytes as
    such text, strings cut at :data:`MAX_VALUE_CHARS`, containers cut at
    :data:`MAX_VALUE_ITEMS` items and :data:`MAX_VALUE_DEPTH` levels, anything else as its
    ``str()`` (or its type's name when that fails). Never raises (for :class:`RecursionError`
    it never recurses past :data:`MAX_VALUE_DEPTH`)."""
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 64):
            return int(value)
        try:
            digits = str(int(value))
        except ValueError:  # past sys.get_int_max_str_digits()
            return f"<{value.bit_length()}-bit integer>"
        return orjson.Fragment(digits) if len(digits) <= _MAX_NUMBER_DIGITS else _cut(digits)
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return _cut(bytes(value).decode("utf-8", "backslashreplace"))
    text = getattr(value, "text", None)  # gateway.a2a.jsonrpc.ExactNumber: a client's id as written
    if type(value).__name__ == "ExactNumber" and isinstance(text, bytes):
        return orjson.Fragment(text) if len(text) <= _MAX_NUMBER_DIGITS else _cut(text.decode("ascii", "replace"))
    if isinstance(value, dict | list | tuple | set | frozenset):
        if depth >= MAX_VALUE_DEPTH:
            return f"<{type(value).__name__} of {len(value)}>"
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for index, (key, item) in enumerate(value.items()):
                if index == MAX_VALUE_ITEMS:
                    out["…"] = f"{len(value) - index} more"
                    break
                out[_cut(key if isinstance(key, str) else _str(key))] = safe_value(item, depth + 1)
            return out
        items = [safe_value(item, depth + 1) for _, item in zip(range(MAX_VALUE_ITEMS), value, strict=False)]
        if len(value) > MAX_VALUE_ITEMS:
            items.append(f"… {len(value) - MAX_VALUE_ITEMS} more")
        return items
    return _cut(_str(value))


def _str(value: object) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - a value's own __str__ may fail; the line must not
        return f"<{type(value).__name__}>"


def _cut(text: str) -> str:
    """``text`` at most :data:`MAX_VALUE_CHARS` characters, writable as UTF-8."""
    if len(text) > MAX_VALUE_CHARS:
        text = f"{text[:MAX_VALUE_CHARS]}…(+{len(text) - MAX_VALUE_CHARS} chars)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _default(value: object) -> Any:
    """orjson's ``default``: a type it does not know (a client's :class:`ExactNumber` id, an
    exception, a path) as :func:`safe_value` writes it."""
    return safe_value(value)


def encode_fields(doc: dict[str, Any]) -> str:
    """``doc`` as one JSON object of at most :data:`MAX_LINE_CHARS` characters; never raises.
    orjson first (the usual line); what it cannot write goes through :func:`safe_value`; a
    line still too long has its longest values cut and says ``"truncated": true``."""
    try:
        text = orjson.dumps(doc, default=_default)
    except TypeError:  # orjson.JSONEncodeError: an integer past 64 bits, a lone surrogate, depth
        text = orjson.dumps(safe_value(doc, -1))
    if len(text) > MAX_LINE_CHARS:
        text = orjson.dumps(_shortened(doc))
    return text.decode()


def _shortened(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a line's top level) cut to fit :data:`MAX_LINE_CHARS`: values of up to 256
    characters stay whole, the longer ones share what is left (a string cut, anything else as
    its JSON text cut), and ``truncated`` is set."""
    values = {_cut(str(key))[:256]: safe_value(value) for key, value in doc.items()}
    written = {key: orjson.dumps(value) for key, value in values.items()}
    long = [key for key, text in written.items() if len(text) > 256]
    spare = MAX_LINE_CHARS - 64 - sum(len(key) + len(text) + 4 for key, text in written.items() if key not in long)
    share = max(64, spare // max(1, len(long)) - 64)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in long:
            value = (value[:share] if isinstance(value, str)
                     else written[key][:share].decode("utf-8", "ignore")) + "…"
        out[key] = value
    out["truncated"] = True
    return out


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """A record's fields (its ``extra=``), as both formats write them after the event."""
    return {key: value for key, value in record.__dict__.items() if key not in _SKIP and key[0] != "_"}


class _Formatter(logging.Formatter):
    """What both formats share: the UTC timestamp (ms; ``strftime`` once a second) and the
    process id (``pid``) every line carries, so lines of ``serve --workers N`` tell apart."""

    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._stamp = ""
        self.pid = os.getpid()  # a formatter is built in the process that logs (never forked)

    def stamp(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int(record.msecs):03d}Z"

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        """``pid``, the record's fields, and ``exc`` (the traceback) when there is one."""
        doc = {"pid": self.pid, **record_fields(record)}
        if record.exc_text:  # rendered when the record was queued (QueueingHandler.prepare)
            doc["exc"] = record.exc_text
        elif record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return doc


class JsonFormatter(_Formatter):
    """Formats a record as ``{"ts":…, "level":…, "event":…, "pid":…, **extra}`` (``ts``: UTC, ms)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"ts": self.stamp(record), "level": record.levelname.lower(),
                               "event": record.getMessage(), **self.fields(record)}
        return encode_fields(doc)


_BARE = re.compile(r"[A-Za-z0-9_./:@+\-]+")
_SPACE = re.compile(r"\s")
_JSON_WORDS = frozenset({"null", "true", "false"})


def text_value(value: Any) -> str:
    """One field's value in a text line: a plain string as it is when it needs no quotes;
    ``null``, ``true`` / ``false`` and numbers as in JSON; any other string JSON-quoted (so
    ``"123"`` stays a string); lists and mappings as compact JSON, quoted when it holds a
    space (then read back as a string). Every other value is what the JSON line holds."""
    if isinstance(value, str):
        if _BARE.fullmatch(value) and value not in _JSON_WORDS and not _numeric(value):
            return value
        return orjson.dumps(value).decode()
    text = orjson.dumps(value, default=_default).decode()
    if isinstance(value, bool | int | float | orjson.Fragment) or value is None:
        return text
    if isinstance(value, dict | list | tuple):
        return orjson.dumps(text).decode() if _SPACE.search(text) else text
    return text_value(str(value))


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class TextFormatter(_Formatter):
    """Formats a record as ``<ts> <LEVEL> <event> key=value …`` — the fields of the JSON
    line, in the same order, each value as :func:`text_value` writes it; an event that is not
    one bare word (uvicorn's ``Started server process [12]``) is JSON-quoted."""

    def format(self, record: logging.LogRecord) -> str:
        fields = self.fields(record)
        try:
            pairs = " ".join(f"{key}={text_value(value)}" for key, value in fields.items())
        except TypeError:  # a value orjson cannot write (a client's): as encode_fields does
            pairs = " ".join(f"{key}={text_value(safe_value(value))}" for key, value in fields.items())
        if len(pairs) > MAX_LINE_CHARS:
            pairs = " ".join(f"{key}={text_value(value)}" for key, value in _shortened(fields).items())
        event = record.getMessage()
        if not _BARE.fullmatch(event):  # uvicorn's own sentences: one token all the same
            event = orjson.dumps(_cut(event)).decode()
        return f"{self.stamp(record)} {record.levelname} {event} {pairs}"


MAX_QUEUED_LINES = 10_000
"""The default of ``log.max_queued_lines``: records waiting for the log thread; past it a
record is dropped and counted (``a2a_gateway_log_dropped_total``)."""
STOP_SECONDS = 2.0
"""At exit, how long the log thread may take to write what is queued (a stalled stderr loses it)."""


class LineWriter:
    """The log thread's end: each record (past the :class:`RepeatFilter`, if any) formatted
    and kept in a batch, written like nginx's ``access_log … buffer= flush=``: one write per
    batch of whole lines (at most :data:`WRITE_BYTES`) instead of one per request line.

    A record at WARNING or above, or a batch of :data:`MAX_BUFFER_BYTES`, is written at once
    (with everything before it, in order); otherwise the batch is written ``flush_seconds``
    after its first line (:meth:`due_in` tells :class:`LogThread` when). A broken or closed
    stream loses lines rather than raising. Writing to the process's stderr goes straight to
    its file descriptor (``os.write``), so a thread blocked on a stalled pipe holds no Python
    lock that the interpreter's exit would wait for.

    Args:
        stream: a text stream (stderr).
        formatter: :class:`JsonFormatter` or :class:`TextFormatter`.
        flush_seconds: seconds a line may wait; 0 writes every line at once.
        repeat: holds back repeated warnings (``log.repeat_window_seconds``), or ``None``.
    """

    MAX_BUFFER_BYTES = 64 * 1024
    WRITE_BYTES = select.PIPE_BUF  # 4 096 on Linux (counted in characters: JSON lines are ASCII
    #                                but for non-ASCII text in their values)

    def __init__(self, stream: Any, formatter: logging.Formatter, flush_seconds: float,
                 repeat: RepeatFilter | None = None, clock: Any = time.monotonic) -> None:
        self.stream = stream
        self.formatter = formatter
        self.flush_seconds = flush_seconds
        self.repeat = repeat
        self._clock = clock
        self._fd: int | None = None
        if stream is sys.__stderr__ and stream is not None:
            with contextlib.suppress(Exception):  # no usable descriptor: write through the stream
                stream.flush()  # what was printed before goes first
                self._fd = stream.fileno()
        self._lines: list[str] = []
        self._size = 0
        self._first = 0.0  # when the batch's first line came

    def handle(self, record: logging.LogRecord) -> None:
        """Format ``record`` into the batch (a line that cannot be formatted becomes one that
        says so, with its event); write the batch when it is due at once."""
        if self.repeat is not None and not self.repeat.filter(record):
            return
        try:
            line = self.formatter.format(record)
        except Exception as exc:  # noqa: BLE001 - a line is written whatever happened
            line = encode_fields({"level": record.levelname.lower(), "event": _cut(str(record.msg)),
                                  "log_error": _cut(repr(exc))})
        if not self._lines:
            self._first = self._clock()
        self._lines.append(line)
        self._size += len(line) + 1
        if record.levelno >= logging.WARNING or self._size >= self.MAX_BUFFER_BYTES or not self.flush_seconds:
            self.flush()

    def due_in(self) -> float | None:
        """Seconds until the batch must be written (``None``: nothing waits)."""
        if not self._lines:
            return None
        return self._first + self.flush_seconds - self._clock()

    def flush(self) -> None:
        """Write the batch: whole lines, at most :data:`WRITE_BYTES` per write, so lines of
        processes sharing one pipe (``serve --workers``) never interleave mid-line (POSIX: a
        pipe write up to ``PIPE_BUF`` is atomic). A broken or closed stream loses the lines."""
        lines, self._lines, self._size = self._lines, [], 0
        try:
            piece: list[str] = []
            size = 0
            for line in lines:
                if piece and size + len(line) + 1 > self.WRITE_BYTES:
                    self._write("\n".join(piece) + "\n")
                    piece, size = [], 0
                piece.append(line)
                size += len(line) + 1
            if piece:
                self._write("\n".join(piece) + "\n")
            if self._fd is None:
                self.stream.flush()
        except Exception:  # noqa: BLE001, S110 - nowhere left to report it
            pass

    def _write(self, text: str) -> None:
        if self._fd is None:
            self.stream.write(text)
            return
        data = memoryview(text.encode("utf-8", "backslashreplace"))
        while data:
            data = data[os.write(self._fd, data):]


class LogThread(logging.handlers.QueueListener):
    """The stdlib ``QueueListener`` feeding one :class:`LineWriter` on its own thread, which
    waits for the next record no longer than the batch's :meth:`LineWriter.due_in`."""

    def __init__(self, queue: Any, writer: LineWriter) -> None:
        super().__init__(queue, writer)  # type: ignore[arg-type]  # any object with handle()
        self.writer = writer

    def dequeue(self, block: bool) -> logging.LogRecord:
        while True:
            wait = self.writer.due_in()
            if wait is None:
                return self.queue.get()  # type: ignore[no-any-return]
            if wait > 0:
                try:
                    return self.queue.get(timeout=wait)  # type: ignore[no-any-return]
                except Empty:
                    pass
            self.writer.flush()

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Write what is queued and end the thread, waiting at most ``timeout`` seconds (a
        thread blocked on a stalled stream is left behind: it is a daemon)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self.queue.put_nowait(self._sentinel)
        thread.join(timeout)
        if not thread.is_alive():
            self.writer.flush()


class QueueingHandler(logging.handlers.QueueHandler):
    """The handler on the gateway's loggers: hands each record to :class:`LogThread`'s queue
    — the only work a log call does on the event loop — and never waits. With
    ``max_queued`` records already waiting (stderr stalled, a log shipper stuck), a record is
    dropped and counted (:attr:`dropped`, and ``a2a_gateway_log_dropped_total`` once
    :func:`count_drops` gave the counter). A traceback is rendered to text here, so no frame
    crosses to the log thread; every other value is formatted there, later.

    ``close()`` (``logging.shutdown`` at exit) stops the thread after it wrote what is queued,
    waiting at most :data:`STOP_SECONDS`.
    """

    def __init__(self, writer: LineWriter, max_queued: int = MAX_QUEUED_LINES) -> None:
        queue: SimpleQueue[Any] = SimpleQueue()  # put() never blocks; the bound is max_queued
        super().__init__(queue)  # type: ignore[arg-type]
        self.max_queued = max_queued
        self.dropped = 0
        self.counter: Any = None
        self.listener = LogThread(queue, writer)
        self.listener.start()

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        if record.exc_info:
            record.exc_text = self.listener.writer.formatter.formatException(record.exc_info)
            record.exc_info = None
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        if self.queue.qsize() >= self.max_queued:
            self.dropped += 1
            if self.counter is not None:
                self.counter.inc()
            return
        self.queue.put_nowait(record)

    def close(self) -> None:
        self.listener.stop()
        super().close()


_installed: QueueingHandler | None = None


def count_drops(counter: Any) -> None:
    """Count the records the installed :class:`QueueingHandler` drops in ``counter`` (a
    Prometheus counter, ``a2a_gateway_log_dropped_total``), those dropped so far included."""
    if _installed is not None:
        _installed.counter = counter
        if _installed.dropped:
            counter.inc(_installed.dropped)


class RepeatFilter(logging.Filter):
    """Holds back a WARNING-or-worse line identical to one written less than ``window``
    seconds ago — same event, level and fields (``duration_s`` and ``retry_in_s`` aside): during an outage every
    refused request would otherwise log the same lines. The first such line after the window
    is written with ``repeated``: how many were held back since the last one written (a run
    of repeats that just stops is not reported). Lines that differ in any field (a
    divergence's ``task_id``) are never held back. At most :data:`MAX_KEYS` kinds of line are
    remembered, the one written longest ago forgotten first (O(1) a line).

    Args:
        window: seconds; 0 holds nothing back.
        clock: monotonic seconds (tests pass their own).
    """

    MAX_KEYS = 512
    _VOLATILE = frozenset({"duration_s", "repeated", "retry_in_s"})

    def __init__(self, window: float, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.window = window
        self._clock = clock
        self._seen: dict[tuple[Any, ...], list[float]] = {}  # key -> [written_at, held back]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not self.window:
            return True
        try:
            fields = tuple(sorted((k, str(v)) for k, v in record.__dict__.items()
                                  if k not in _SKIP and k[0] != "_" and k not in self._VOLATILE))
        except Exception:  # noqa: BLE001 - a value with no str() (RecursionError, ValueError): never held
            return True
        key = (record.levelno, record.getMessage(), fields)
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.window:
            seen[1] += 1
            return False
        if seen is not None:
            if seen[1]:
                record.repeated = int(seen[1])
            del self._seen[key]  # written again: to the end, so the dict stays in write order
        elif len(self._seen) >= self.MAX_KEYS:
            del self._seen[next(iter(self._seen))]  # forget the line written longest ago
        self._seen[key] = [now, 0]
        return True


def configure_logging(level: str = "info", fmt: str = "json", flush_seconds: float = 0.0,
                      repeat_window_seconds: float = 0.0, stream: Any = None,
                      max_queued: int = MAX_QUEUED_LINES) -> QueueingHandler:
    """Send gateway logs to stderr as JSON lines (``fmt="json"``) or text lines
    (``"text"``: :class:`TextFormatter`, the same fields as ``key=value`` pairs), written by a
    thread of their own: a log call only queues its record (:class:`QueueingHandler`, at most
    ``max_queued`` waiting, ``log.max_queued_lines``), so a stderr nobody reads never stalls
    the event loop — lines are dropped and counted instead.

    ``flush_seconds`` > 0 batches INFO and DEBUG lines (see :class:`LineWriter`);
    ``repeat_window_seconds`` > 0 holds back repeated identical warnings and errors
    (:class:`RepeatFilter`, ``log.repeat_window_seconds``). ``stream``: where lines go
    (default ``sys.stderr``). Returns the handler put on the gateway's loggers (a second call
    replaces the first, whose thread is stopped).
    Records skip the caller, thread and process lookups (the logging HOWTO's "Optimization"
    knobs): no format here prints them, and they cost microseconds on every request line.
    """
    global _installed
    logging._srcfile = None  # no findCaller() stack walk per record
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    writer = LineWriter(sys.stderr if stream is None else stream,
                        JsonFormatter() if fmt == "json" else TextFormatter(), flush_seconds,
                        RepeatFilter(repeat_window_seconds) if repeat_window_seconds else None)
    handler = QueueingHandler(writer, max_queued)
    previous, _installed = _installed, handler
    # uvicorn's own lines as JSON too, and the OpenTelemetry SDK's (an unreachable collector's
    # "Transient error ... exporting spans" warnings), which would otherwise be plain text
    for name in (LOGGER_NAME, "uvicorn", "uvicorn.error", "opentelemetry"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
    if previous is not None:
        previous.close()
    return handler


def get_logger() -> logging.Logger:
    """The gateway's logger; pass fields with ``extra={...}``."""
    return logging.getLogger(LOGGER_NAME)
