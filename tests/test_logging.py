"""JSON log lines and their batched writing by the log thread (gateway/observability/logging.py).

A stream that counts its ``write`` calls stands in for stderr; the log thread is real.
"""

from __future__ import annotations

import io
import json
import logging
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.observability.logging import MAX_QUEUED_LINES, JsonFormatter, LineWriter, QueueingHandler
from tests.support.scripted_worker import ScriptedWorker
from tests.support.servers import free_port, serve_in_thread, subprocess_server, wait_until


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.writes += 1
            return super().write(text)

    def text(self) -> str:
        with self._lock:
            return self.getvalue()


@pytest.fixture
def logger() -> logging.Logger:
    log = logging.getLogger("a2a_gateway.test_logging")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log


@pytest.fixture
def attach(logger: logging.Logger) -> Iterator[Any]:
    """``attach(flush_seconds, stream=None, max_queued=…)`` puts a QueueingHandler (and its
    log thread) writing into ``stream`` (a CountingStream by default) on ``logger``; every
    thread is stopped at the end."""
    made: list[QueueingHandler] = []

    def factory(flush_seconds: float, stream: Any = None,
                max_queued: int = MAX_QUEUED_LINES) -> tuple[QueueingHandler, Any]:
        stream = CountingStream() if stream is None else stream
        handler = QueueingHandler(LineWriter(stream, JsonFormatter(), flush_seconds), max_queued)
        made.append(handler)
        logger.handlers[:] = [handler]
        return handler, stream

    yield factory
    for handler in made:
        handler.close()


def _events(stream: CountingStream) -> list[str]:
    return [orjson.loads(line)["event"] for line in stream.text().splitlines()]


def test_info_lines_are_written_in_one_batch_after_flush_seconds(logger: logging.Logger, attach: Any) -> None:
    handler, stream = attach(0.3)
    for i in range(40):  # 40 lines of ~85 characters: less than one PIPE_BUF write
        logger.info("request", extra={"n": i})
    wait_until(lambda: stream.writes, message="the batch")
    assert stream.writes == 1
    lines = [orjson.loads(line) for line in stream.text().splitlines()]
    assert [line["n"] for line in lines] == list(range(40))
    assert all(line["event"] == "request" and line["level"] == "info" for line in lines)


def test_a_warning_is_written_at_once_after_the_lines_before_it(logger: logging.Logger, attach: Any) -> None:
    handler, stream = attach(60)
    logger.info("first")
    logger.info("second")
    logger.warning("divergence", extra={"kind": "terminal_regression"})
    wait_until(lambda: _events(stream) == ["first", "second", "divergence"])
    assert stream.writes == 1
    logger.info("later")
    handler.close()  # what logging.shutdown() does at exit: what is queued is written
    assert _events(stream)[-1] == "later"


def test_a_full_buffer_is_written_without_waiting_in_whole_line_pieces(logger: logging.Logger,
                                                                       attach: Any) -> None:
    """64 KiB of lines go out at once, in writes of whole lines of at most PIPE_BUF each (so
    the lines of several workers sharing one pipe never interleave mid-line)."""
    texts: list[str] = []

    class Pieces(io.StringIO):
        def write(self, text: str) -> int:
            texts.append(text)
            return len(text)

    handler, stream = attach(60, Pieces())
    big = "x" * 1000
    count = LineWriter.MAX_BUFFER_BYTES // 1000 + 1
    for _ in range(count):
        logger.info("request", extra={"pad": big})
    wait_until(lambda: texts, message="written without waiting for flush_seconds")
    handler.close()
    assert 1 < len(texts) < count  # batched, but never more than PIPE_BUF per write
    assert all(len(t) <= LineWriter.WRITE_BYTES and t.endswith("\n") for t in texts)
    assert sum(t.count("\n") for t in texts) == count


def test_zero_flush_seconds_writes_each_line(logger: logging.Logger, attach: Any) -> None:
    handler, stream = attach(0)
    logger.info("one")
    wait_until(lambda: _events(stream) == ["one"])
    logger.info("two")
    wait_until(lambda: _events(stream) == ["one", "two"])
    assert stream.writes == 2


def test_a_broken_stream_never_raises_into_the_caller(logger: logging.Logger, attach: Any) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

        def flush(self) -> None:
            raise ValueError("I/O operation on closed file")

    handler, _ = attach(60, Broken())
    logger.warning("divergence")  # written at once: fails inside, not here
    logger.info("request")
    handler.close()
    assert not handler.listener.writer.due_in()


def test_a_stalled_stream_never_blocks_the_caller_and_drops_are_counted(logger: logging.Logger,
                                                                         attach: Any) -> None:
    """Issue #35: a stderr nobody reads stalled the gateway, the log write being on the event
    loop. A log call now only queues its record: with the stream blocked, at most
    ``max_queued`` records wait, the rest are dropped and counted, and the caller goes on; once
    the stream takes lines again, those queued are written, in order."""
    from prometheus_client import CollectorRegistry, Counter

    release = threading.Event()

    class Stalled(CountingStream):
        def write(self, text: str) -> int:
            release.wait(30)  # a pipe nobody reads
            return super().write(text)

    handler, stream = attach(0, Stalled(), max_queued=50)
    counter = Counter("log_dropped", "test", registry=CollectorRegistry())
    handler.counter = counter
    for n in range(500):  # returns although nothing can be written
        logger.warning("divergence", extra={"n": n})
    assert 400 <= handler.dropped <= 450 and counter._value.get() == handler.dropped
    release.set()
    handler.close()
    written = [orjson.loads(line)["n"] for line in stream.text().splitlines()]
    assert len(written) == 500 - handler.dropped and written == sorted(written) and written[0] == 0


def test_configure_logging_counts_drops_in_the_gateway_metric(tmp_path: Path) -> None:
    """The handler serve installs counts in ``a2a_gateway_log_dropped_total`` of the app built
    after it (those dropped before included)."""
    from prometheus_client import CollectorRegistry

    from gateway.observability.logging import configure_logging, count_drops, get_logger
    from gateway.observability.metrics import Metrics

    release = threading.Event()

    class Stalled(io.StringIO):
        def write(self, text: str) -> int:
            release.wait(30)
            return len(text)

    names = ("a2a_gateway", "uvicorn", "uvicorn.error", "opentelemetry")
    saved = [(logging.getLogger(n), logging.getLogger(n).handlers[:], logging.getLogger(n).propagate,
              logging.getLogger(n).level) for n in names]
    handler = configure_logging("info", "json", 0, 0, stream=Stalled(), max_queued=5)
    try:
        for _ in range(20):
            get_logger().info("request")
        metrics = Metrics(CollectorRegistry())
        count_drops(metrics.log_dropped)
        get_logger().info("request")
        assert metrics.log_dropped._value.get() == handler.dropped >= 14
    finally:
        release.set()
        handler.close()
        for log, handlers, propagate, level in saved:
            log.handlers[:], log.propagate = handlers, propagate
            log.setLevel(level)


def test_repeat_filter_holds_back_identical_warnings_within_the_window_and_counts_them() -> None:
    import logging as _logging

    from gateway.observability.logging import RepeatFilter

    now = [100.0]
    f = RepeatFilter(10.0, clock=lambda: now[0])

    def record(level: int, event: str, **extra: object) -> _logging.LogRecord:
        rec = _logging.LogRecord("a2a_gateway", level, "", 0, event, (), None)
        rec.__dict__.update(extra)
        return rec

    def err(**extra: object) -> _logging.LogRecord:
        return record(_logging.ERROR, "ledger_error", backend="redis", **extra)

    assert f.filter(err(duration_s=0.1))
    assert not f.filter(err(duration_s=0.2))  # the same line but for its duration
    assert not f.filter(err())
    assert f.filter(err(operation="put"))  # another field: another line
    assert f.filter(record(_logging.INFO, "ledger_error", backend="redis"))  # INFO: never held
    assert f.filter(record(_logging.WARNING, "divergence", task_id="t-1"))
    assert f.filter(record(_logging.WARNING, "divergence", task_id="t-2"))
    now[0] += 10.0
    late = err()
    assert f.filter(late) and late.repeated == 2
    assert not f.filter(err())
    assert RepeatFilter(0).filter(err()) and RepeatFilter(0).filter(err())
    many = RepeatFilter(10.0, clock=lambda: now[0])
    for n in range(RepeatFilter.MAX_KEYS + 5):
        assert many.filter(err(n=n))
    assert len(many._seen) <= RepeatFilter.MAX_KEYS


# --- the request line through the real gateway, in both formats -----------------------------

_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def parse_text_line(line: str) -> dict[str, object]:
    """A text line read back as the JSON line's object: ``ts``, ``level``, ``event``, then
    each ``key=value`` (a quoted value is a JSON string; a bare one JSON if it reads as JSON,
    else the string itself)."""
    ts, level, rest = line.split(" ", 2)
    if rest.startswith('"'):  # a quoted event (uvicorn's sentences)
        event, end = json.JSONDecoder().raw_decode(rest)
        rest = rest[end:]
    else:
        event, _, rest = rest.partition(" ")
    doc: dict[str, object] = {"ts": ts, "level": level.lower(), "event": event}
    for key, token in _PAIR.findall(rest):
        if token.startswith('"'):
            doc[key] = json.loads(token)
            continue
        try:
            doc[key] = json.loads(token)
        except ValueError:
            doc[key] = token
    return doc


def _traffic(url: str) -> None:
    """The same requests for either format: an Agent Card GET, a JSON-RPC GetTask, a REST
    GetTask, a method no A2A version defines (the worker answers -32601), a relayed path."""
    with httpx.Client(base_url=url, trust_env=False, timeout=10) as http:
        assert http.get("/.well-known/agent-card.json", headers={"A2A-Version": "1.0"}).status_code == 200
        r = http.post("/", headers={"A2A-Version": "1.0"},
                      json={"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "t-1"}})
        assert r.json()["result"]["id"] == "t-1"
        assert http.get("/tasks/t-2", headers={"A2A-Version": "1.0"}).json()["id"] == "t-2"
        r = http.post("/", json={"jsonrpc": "2.0", "id": "x-1", "method": "custom/thing", "params": {}})
        assert r.json()["error"]["code"] == -32601
        assert http.get("/own/status").status_code == 204


def _run_gateway(wurl: str, tmp_path: Path, fmt: str) -> tuple[list[str], int, str]:
    port, admin_port = free_port(), free_port()
    config = tmp_path / f"gateway-{fmt}.yaml"
    config.write_text(f"listen: {{port: {port}}}\nadmin: {{port: {admin_port}}}\nledger: {{url: memory}}\n"
                      f"log: {{format: {fmt}, flush_seconds: 0}}\n"
                      f"upstreams:\n  - {{name: worker, url: '{wurl}/', prefix: /}}\n")
    cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
    with subprocess_server(cmd, f"http://127.0.0.1:{admin_port}/readyz") as proc:
        _traffic(f"http://127.0.0.1:{port}")
        metrics = httpx.get(f"http://127.0.0.1:{admin_port}/metrics", trust_env=False).text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        return proc.stderr_text().splitlines(), proc.pid, metrics


@pytest.mark.slow
def test_text_and_json_lines_of_the_same_requests_carry_the_same_fields(tmp_path: Path) -> None:
    """One request line per request (the card GET, JSON-RPC, REST, an unknown method, a
    relay), with client, status, JSON-RPC id, version, upstream, method, outcome, task and
    context ids; the text line holds every field of the JSON line with the same value; every
    line of either format carries the process's pid."""
    worker = ScriptedWorker()
    worker.on("GetTask", json_result={"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}},
              times=None)
    worker.on("custom/thing", json_error={"code": -32601, "message": "Method not found"}, times=None)
    worker.on_path("GET", "/tasks/t-2", json_body={"id": "t-2", "contextId": "c-2",
                                                    "status": {"state": "TASK_STATE_COMPLETED"}}, times=None)
    worker.on_path("GET", "/own/status", raw=(204, {}, b""), times=None)
    with serve_in_thread(worker) as srv:
        json_out, json_pid, metrics = _run_gateway(srv.url, tmp_path, "json")
        text_out, text_pid, _ = _run_gateway(srv.url, tmp_path, "text")
    as_json = [orjson.loads(line) for line in json_out if line.strip()]
    as_text = [parse_text_line(line) for line in text_out if line.strip()]
    assert all(doc["pid"] == json_pid for doc in as_json)
    assert all(doc["pid"] == text_pid for doc in as_text)
    assert any(doc["event"] == "worker_started" for doc in as_text)
    def events(docs: list[dict[str, object]]) -> list[str]:  # uvicorn's sentences (with pids) too
        return sorted(re.sub(r"\d+", "N", str(d["event"])) for d in docs)

    assert events(as_json) == events(as_text)
    requests = [[d for d in docs if d["event"] == "request"] for docs in (as_json, as_text)]
    assert len(requests[0]) == len(requests[1]) == 5
    for j, t in zip(*requests, strict=True):
        assert list(j) == list(t)  # the same fields, in the same order
        for key in j:
            if key not in ("ts", "pid", "client", "duration_s"):
                assert t[key] == j[key], key
        assert str(j["client"]).startswith("127.0.0.1:") and str(t["client"]).startswith("127.0.0.1:")
        assert isinstance(t["duration_s"], float)
    card, rpc, rest, custom, relay = requests[1]
    assert (card["method"], card["status"], card["binding"], card["version"]) == ("card", 200, "http", "1.0")
    assert (rpc["jsonrpc_id"], rpc["method"], rpc["task_id"], rpc["context_id"], rpc["status"]) == \
        (7, "GetTask", "t-1", "c-1", 200)
    assert (rest["binding"], rest["task_id"], rest["context_id"], rest["version"]) == ("rest", "t-2", "c-2", "1.0")
    assert (custom["jsonrpc_id"], custom["method"], custom["outcome"]) == ("x-1", "other", "worker_error")
    assert (relay["path"], relay["status"], relay["binding"], relay["outcome"]) == ("/own/status", 204, "http", "ok")
    assert 'a2a_gateway_requests_total{binding="jsonrpc",method="other",outcome="worker_error",upstream="worker"} 1.0' \
        in metrics


def test_text_values_read_back_as_the_json_values() -> None:
    """Strings that look like numbers or JSON words stay strings; spaces are quoted."""
    from gateway.observability.logging import TextFormatter

    record = logging.LogRecord("a2a_gateway", logging.WARNING, "", 0, "card_unreachable", (), None)
    fields = {"id": "123", "word": "null", "reason": "worker unreachable: connection failed",
              "n": 3, "none": None, "flag": True, "items": ["a b", 1], "empty": ""}
    record.__dict__.update(fields)
    doc = parse_text_line(TextFormatter().format(record))
    assert {k: doc[k] for k in fields if k != "items"} == {k: v for k, v in fields.items() if k != "items"}
    assert json.loads(str(doc["items"])) == ["a b", 1]
    assert doc["level"] == "warning" and doc["event"] == "card_unreachable"


def test_a_line_is_written_whatever_its_values_are() -> None:
    """What orjson cannot write — an integer past 64 bits, a lone surrogate, bytes that are
    not UTF-8, nesting past its depth, an object whose str() fails — is written by
    safe_value, and no line passes MAX_LINE_CHARS (issue #35: a client's id of 2**64 broke
    its request line)."""
    from gateway.a2a.jsonrpc import ExactNumber
    from gateway.observability.logging import MAX_LINE_CHARS, TextFormatter

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    deep: list[object] = []
    node = deep
    for _ in range(2000):
        node.append([])
        node = node[0]  # type: ignore[assignment]
    fields = {"jsonrpc_id": 2**64, "huge": -(10**150), "lone": "a\udcffb", "raw": b"\xff\xfe", "deep": deep,
              "odd": Unprintable(), "exact": ExactNumber(b"1E+2"), "nan": float("nan"), "long": "x" * 100_000,
              "many": list(range(10_000))}
    for formatter in (JsonFormatter(), TextFormatter()):
        record = logging.LogRecord("a2a_gateway", logging.INFO, "", 0, "request", (), None)
        record.__dict__.update(fields)
        line = formatter.format(record)
        assert len(line.encode()) <= MAX_LINE_CHARS + 64 and "\n" not in line
        doc = orjson.loads(line) if isinstance(formatter, JsonFormatter) else parse_text_line(line)
        assert doc["jsonrpc_id"] == 2**64 and doc["lone"] == "a\\udcffb" and doc["raw"] == "\\xff\\xfe"
        assert doc["odd"] == "<Unprintable>" and doc["exact"] == 100.0 and doc["nan"] is None
        assert str(doc["long"]).startswith("xxx") and len(str(doc["long"])) < 100_000  # cut, and says so
        assert str(doc["long"]).endswith(" chars)") or doc["truncated"] is True
        assert str(doc["huge"]).startswith("-1000")
