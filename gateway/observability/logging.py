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
        if record.exc_info:
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
                      repeat_window_seconds: float = 0.0, stream: Any = None) -> logging.Handler:
    """Send gateway logs to stderr as JSON lines (``fmt="json"``) or text lines
    (``"text"``: :class:`TextFormatter`, the same fields as ``key=value`` pairs).

    ``flush_seconds`` > 0 batches INFO and DEBUG lines (see :class:`BufferedStreamHandler`);
    ``repeat_window_seconds`` > 0 holds back repeated identical warnings and errors
    (:class:`RepeatFilter`, ``log.repeat_window_seconds``). ``stream``: where lines go
    (default ``sys.stderr``). Returns the handler put on the gateway's loggers.
    Records skip the caller, thread and process lookups (the logging HOWTO's "Optimization"
    knobs): no format here prints them, and they cost microseconds on every request line.
    """
    logging._srcfile = None  # no findCaller() stack walk per record
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = BufferedStreamHandler(sys.stderr if stream is None else stream, flush_seconds)
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
    return handler


def get_logger() -> logging.Logger:
    """The gateway's logger; pass fields with ``extra={...}``."""
    return logging.getLogger(LOGGER_NAME)
