"""Logging setup: one JSON object per line on stderr (or plain text), stdlib only.

Log events are snake_case (``request``, ``stream_closed``, ``divergence``); keys reuse metric
label names (``upstream``, ``method``) so logs and metrics join; durations are ``duration_s``.
Task, context and request ids go here, never into metric labels.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

LOGGER_NAME = "a2a_gateway"
_SKIP = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    """Formats a record as ``{"ts":…, "level":…, "event":…, **extra}`` (``ts``: UTC, ms)."""

    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._stamp = ""

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:  # strftime once per second, not once per line
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        doc: dict[str, Any] = {
            "ts": f"{self._stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _SKIP and key[0] != "_":
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """Send gateway logs to stderr as JSON lines (``fmt="json"``) or plain text.

    Records skip the caller, thread and process lookups (the logging HOWTO's "Optimization"
    knobs): no format here prints them, and they cost microseconds on every request line.
    """
    logging._srcfile = None  # no findCaller() stack walk per record
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    for name in (LOGGER_NAME, "uvicorn", "uvicorn.error"):  # uvicorn's own lines as JSON too
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False


def get_logger() -> logging.Logger:
    """The gateway's logger; pass fields with ``extra={...}``."""
    return logging.getLogger(LOGGER_NAME)
