"""Property 3: whatever a client sends, the gateway writes exactly one well-formed ``request``
line for it — never a ``--- Logging error ---`` traceback instead, never a line past
``MAX_LINE_CHARS`` (gateway/observability/logging.py; docs/guide/metrics.md).

The inputs are the fuzz suite's own (tests/fuzz/strategies.py ``client_body`` for JSON-RPC,
tests/fuzz/test_rest_requests.py ``rest_request`` for REST, both versions), sent to a real
gateway whose loggers carry the handler ``a2a-gateway serve`` installs
(:func:`~gateway.observability.logging.configure_logging`), writing into a stream the test
reads. The inputs the reliability trial of issue #35 found are pinned as examples: an integer
id past 64 bits (orjson cannot write one), nesting past orjson's 1 024 levels, odd floats,
a megabyte-long string id, invalid UTF-8 and lone surrogates.

Examples: 150 per binding (``A2A_FUZZ_EXAMPLES`` for more; see tests/fuzz/conftest.py).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.observability.logging import LOGGER_NAME, MAX_LINE_CHARS, configure_logging
from tests.fuzz.conftest import fuzz, running_harness
from tests.fuzz.strategies import client_body
from tests.fuzz.support import send, send_raw
from tests.fuzz.test_rest_requests import rest_request
from tests.fuzz.workers import HealthyWorker
from tests.proxy.conftest import Harness
from tests.support.servers import wait_until
from tests.test_logging import parse_text_line

_LOGGERS = (LOGGER_NAME, "uvicorn", "uvicorn.error", "opentelemetry")


class Lines:
    """A text stream that keeps what is written to it (from any thread)."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def lines(self) -> list[str]:
        with self._lock:
            text = "".join(self._parts)
        return text.split("\n")[:-1]  # lines end in "\n" (str.splitlines would also split at U+2028)


@contextlib.contextmanager
def gateway_log(fmt: str) -> Iterator[Lines]:
    """The gateway's loggers as ``serve`` sets them up (``log.format: fmt``, every line at once),
    writing into a :class:`Lines`; put back as they were on exit."""
    saved = [(logging.getLogger(name), logging.getLogger(name).handlers[:], logging.getLogger(name).level,
              logging.getLogger(name).propagate) for name in _LOGGERS]
    lines = Lines()
    handler = configure_logging("info", fmt, 0.0, 0.0, stream=lines)
    errors: list[logging.LogRecord] = []
    handler.handleError = errors.append  # type: ignore[method-assign]  # what would print a traceback
    try:
        yield lines
    finally:
        handler.close()
        for logger, handlers, level, propagate in saved:
            logger.handlers[:], logger.propagate = handlers, propagate
            logger.setLevel(level)
    assert errors == [], [r.getMessage() for r in errors]


def parse(line: str, fmt: str) -> dict[str, Any]:
    """One line read back (a JSON object, or a text line as tests/test_logging.py reads it)."""
    return orjson.loads(line) if fmt == "json" else parse_text_line(line)


def request_lines(lines: Lines, fmt: str) -> list[dict[str, Any]]:
    """Every line written so far, each checked well-formed and bounded; the ``request`` ones."""
    out = []
    for line in lines.lines():
        assert len(line.encode()) <= MAX_LINE_CHARS + 256, len(line)
        assert not line.startswith(("--- Logging error", "Traceback")), line[:300]
        doc = parse(line, fmt)
        assert isinstance(doc, dict) and doc["event"], line[:300]
        if doc["event"] == "request":
            out.append(doc)
    return out


def one_line_per_request(h: Harness, lines: Lines, fmt: str, send_one: Any) -> dict[str, Any]:
    """Send one request (``send_one()``) and return its request line, once it is written;
    fails when a line is missing or malformed, or when more than one was written."""
    before = len(request_lines(lines, fmt))
    send_one()
    written = wait_until(lambda: request_lines(lines, fmt)[before:], message="the request's line")
    assert len(written) == 1, written
    return written[0]


@pytest.fixture(scope="module")
def fh() -> Iterator[Harness]:
    with running_harness() as h:
        HealthyWorker(h.worker)
        yield h


@pytest.fixture(scope="module")
def json_log(fh: Harness) -> Iterator[Lines]:
    with gateway_log("json") as lines:
        yield lines


BIG_ID = b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"GetTask","params":{"id":"x"}}'
DEEP = b'{"jsonrpc":"2.0","id":5,"method":"GetTask","params":{"id":"x","metadata":' + b"[" * 1100 + \
    b"]" * 1100 + b"}}"


@fuzz(150)
@given(body=client_body(), version=st.sampled_from([None, "1.0", "0.3"]))
@example(body=BIG_ID, version="1.0")
@example(body=BIG_ID.replace(b"GetTask", b"tasks/get"), version="0.3")
@example(body=BIG_ID.replace(b"GetTask", b"NoSuchMethod"), version="1.0")
@example(body=DEEP, version="1.0")
@example(body=b'{"jsonrpc":"2.0","id":1e-400,"method":"NoSuchMethod","params":{}}', version=None)
@example(body=b'{"jsonrpc":"2.0","id":"' + b"i" * 1_000_000 + b'","method":"GetTask","params":{"id":"x"}}',
         version="1.0")
@example(body=b'{"jsonrpc":"2.0","id":"\\ud800","method":"GetTask","params":{"id":"x"}}', version="1.0")
@example(body=b'{"jsonrpc":"2.0","id":"\xff\xfe","method":"GetTask"}', version="1.0")
def test_every_jsonrpc_request_gets_one_well_formed_line(fh: Harness, json_log: Lines, body: bytes,
                                                         version: str | None) -> None:
    headers = {"content-type": "application/json", **({"A2A-Version": version} if version else {})}
    line = one_line_per_request(fh, json_log, "json", lambda: send(fh, "POST", b"/", body, headers))
    assert line["binding"] == "jsonrpc" and line["path"] == "/"


@fuzz(150)
@given(req=rest_request())
@example(req={"verb": "POST", "path": "/message:send", "query": "", "version": "1.0", "ctype": "application/json",
              "body": b'{"message":{"messageId":18446744073709551616,"metadata":' + b"[" * 1100 + b"]" * 1100 + b"}}"})
@example(req={"verb": "GET", "path": "/v1/tasks/%ED%A0%80%ff", "query": "?historyLength=18446744073709551616",
              "version": None, "ctype": None, "body": None})
def test_every_rest_request_gets_one_well_formed_line(fh: Harness, json_log: Lines, req: dict[str, Any]) -> None:
    headers = {**({"A2A-Version": req["version"]} if req["version"] is not None else {}),
               **({"content-type": req["ctype"]} if req["ctype"] and req["body"] is not None else {})}
    target = (req["path"] + req["query"]).encode()
    one_line_per_request(fh, json_log, "json", lambda: send_raw(fh, req["verb"], target, req["body"], headers))


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_what_the_trial_found_is_written_in_either_format(fh: Harness, fmt: str) -> None:
    """The trial's cases, in both formats: the huge id is its digits, the lone surrogate is
    escaped, the megabyte id is cut (and says so)."""
    with gateway_log(fmt) as lines:
        headers = {"content-type": "application/json", "A2A-Version": "1.0"}
        big = one_line_per_request(fh, lines, fmt, lambda: send(fh, "POST", b"/", BIG_ID, headers))
        assert big["jsonrpc_id"] == 18446744073709551616
        deep = one_line_per_request(fh, lines, fmt, lambda: send(fh, "POST", b"/", DEEP, headers))
        assert deep["outcome"] == "malformed"
        long_id = b'{"jsonrpc":"2.0","id":"' + b"i" * 1_000_000 + b'","method":"GetTask","params":{"id":"x"}}'
        cut = one_line_per_request(fh, lines, fmt, lambda: send(fh, "POST", b"/", long_id, headers))
        assert cut["truncated"] is True and str(cut["jsonrpc_id"]).startswith("iiii")
        assert cut["status"] == 200 and cut["method"] == "GetTask"
