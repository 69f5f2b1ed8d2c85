"""Logging setup: one JSON object per line on stderr, or one text line with the same fields
as ``key=value`` pairs (``log.format: text``); stdlib only. Every line carries ``pid``.

Log events are snake_case (``request``, ``stream_closed``, ``divergence``); keys reuse metric
label names (``upstream``, ``method``) so logs and metrics join; durations are ``duration_s``.
Task, context and request ids go here, never into metric labels.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import select
import sys
import time
from typing import Any

import orjson

LOGGER_NAME = "a2a_gateway"
_SKIP = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "color_message"}


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
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return doc


class JsonFormatter(_Formatter):
    """Formats a record as ``{"ts":…, "level":…, "event":…, "pid":…, **extra}`` (``ts``: UTC, ms)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"ts": self.stamp(record), "level": record.levelname.lower(),
                               "event": record.getMessage(), **self.fields(record)}
        return orjson.dumps(doc, default=str).decode()


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
    text = orjson.dumps(value, default=str).decode()
    if isinstance(value, bool | int | float) or value is None:
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
        pairs = " ".join(f"{key}={text_value(value)}" for key, value in self.fields(record).items())
        event = record.getMessage()
        if not _BARE.fullmatch(event):  # uvicorn's own sentences: one token all the same
            event = orjson.dumps(event).decode()
        return f"{self.stamp(record)} {record.levelname} {event} {pairs}"


class BufferedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A ``StreamHandler`` that writes lines in batches, like nginx's ``access_log …
    buffer= flush=``: one write per batch of whole lines (at most :data:`WRITE_BYTES`) instead
    of one per request line.

    A record at WARNING or above, or a batch of :data:`MAX_BUFFER_BYTES`, is written at once
    (with everything before it, in order); otherwise the batch is written ``flush_seconds``
    after its first line (a timer on the running event loop; from a thread without one, at
    once). ``logging.shutdown`` (at exit) writes what is left, so a ``kill -9`` loses at most
    ``flush_seconds`` of INFO and DEBUG lines. A broken or closed stream loses lines rather
    than raising into the request that logged them.

    Args:
        stream: a text stream (stderr).
        flush_seconds: seconds a line may wait; 0 writes every line at once.
    """

    MAX_BUFFER_BYTES = 64 * 1024
    WRITE_BYTES = select.PIPE_BUF  # 4 096 on Linux (counted in characters: JSON lines are ASCII
    #                                but for non-ASCII text in their values)

    def __init__(self, stream: Any, flush_seconds: float) -> None:
        super().__init__(stream)
        self.flush_seconds = flush_seconds
        self._lines: list[str] = []
        self._size = 0
        self._timer_loop: asyncio.AbstractEventLoop | None = None  # a flush is pending on it

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)
            return
        self._lines.append(line)
        self._size += len(line) + 1
        if record.levelno >= logging.WARNING or self._size >= self.MAX_BUFFER_BYTES or not self.flush_seconds:
            self.flush()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop in this thread: nothing would flush later
            self.flush()
            return
        if self._timer_loop is not loop:  # none pending, or pending on a loop that is gone
            self._timer_loop = loop
            loop.call_later(self.flush_seconds, self.flush)

    def flush(self) -> None:
        """Write the buffered lines and flush the stream: whole lines, at most
        :data:`WRITE_BYTES` per write, so lines of processes sharing one pipe
        (``serve --workers``) never interleave mid-line (POSIX: a pipe write up to
        ``PIPE_BUF`` is atomic). A broken or closed stream loses the lines and never raises
        into the caller (a request)."""
        with self.lock:  # type: ignore[union-attr]
            self._timer_loop = None  # a timer still pending finds nothing, or newer lines
            lines, self._lines, self._size = self._lines, [], 0
            try:
                piece: list[str] = []
                size = 0
                for line in lines:
                    if piece and size + len(line) + 1 > self.WRITE_BYTES:
                        self.stream.write("\n".join(piece) + "\n")
                        piece, size = [], 0
                    piece.append(line)
                    size += len(line) + 1
                if piece:
                    self.stream.write("\n".join(piece) + "\n")
                self.stream.flush()
            except Exception:  # noqa: BLE001, S110 - nowhere left to report it
                pass


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
        fields = tuple(sorted((k, str(v)) for k, v in record.__dict__.items()
                              if k not in _SKIP and k[0] != "_" and k not in self._VOLATILE))
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
                      repeat_window_seconds: float = 0.0) -> None:
    """Send gateway logs to stderr as JSON lines (``fmt="json"``) or text lines
    (``"text"``: :class:`TextFormatter`, the same fields as ``key=value`` pairs).

    ``flush_seconds`` > 0 batches INFO and DEBUG lines (see :class:`BufferedStreamHandler`);
    ``repeat_window_seconds`` > 0 holds back repeated identical warnings and errors
    (:class:`RepeatFilter`, ``log.repeat_window_seconds``).
    Records skip the caller, thread and process lookups (the logging HOWTO's "Optimization"
    knobs): no format here prints them, and they cost microseconds on every request line.
    """
    logging._srcfile = None  # no findCaller() stack walk per record
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = BufferedStreamHandler(sys.stderr, flush_seconds)
    if repeat_window_seconds:
        handler.addFilter(RepeatFilter(repeat_window_seconds))
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    # uvicorn's own lines as JSON too, and the OpenTelemetry SDK's (an unreachable collector's
    # "Transient error ... exporting spans" warnings), which would otherwise be plain text
    for name in (LOGGER_NAME, "uvicorn", "uvicorn.error", "opentelemetry"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False


def get_logger() -> logging.Logger:
    """The gateway's logger; pass fields with ``extra={...}``."""
    return logging.getLogger(LOGGER_NAME)
