"""JSON log lines and their batched writing (gateway/observability/logging.py).

A stream that counts its ``write`` calls stands in for stderr; the event loop's timer is real.
"""

from __future__ import annotations

import asyncio
import io
import logging

import orjson
import pytest

from gateway.observability.logging import BufferedStreamHandler, JsonFormatter


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def logger() -> logging.Logger:
    log = logging.getLogger("a2a_gateway.test_logging")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log


def _attach(log: logging.Logger, flush_seconds: float) -> tuple[BufferedStreamHandler, CountingStream]:
    stream = CountingStream()
    handler = BufferedStreamHandler(stream, flush_seconds)
    handler.setFormatter(JsonFormatter())
    log.handlers[:] = [handler]
    return handler, stream


def _events(stream: CountingStream) -> list[str]:
    return [orjson.loads(line)["event"] for line in stream.getvalue().splitlines()]


async def test_info_lines_are_written_in_one_batch_after_flush_seconds(logger: logging.Logger) -> None:
    handler, stream = _attach(logger, 0.05)
    for i in range(40):  # 40 lines of ~85 characters: less than one PIPE_BUF write
        logger.info("request", extra={"n": i})
    assert stream.writes == 0  # still buffered
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while stream.writes == 0 and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert stream.writes == 1
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["n"] for line in lines] == list(range(40))
    assert all(line["event"] == "request" and line["level"] == "info" for line in lines)


async def test_a_warning_is_written_at_once_after_the_lines_before_it(logger: logging.Logger) -> None:
    handler, stream = _attach(logger, 60)
    logger.info("first")
    logger.info("second")
    logger.warning("divergence", extra={"kind": "terminal_regression"})
    assert _events(stream) == ["first", "second", "divergence"]
    assert stream.writes == 1
    logger.info("later")
    assert _events(stream) == ["first", "second", "divergence"]
    handler.flush()  # what logging.shutdown() does at exit
    assert _events(stream)[-1] == "later"


async def test_a_full_buffer_is_written_without_waiting_in_whole_line_pieces(logger: logging.Logger) -> None:
    """64 KiB of lines go out at once, in writes of whole lines of at most PIPE_BUF each (so
    the lines of several workers sharing one pipe never interleave mid-line)."""
    handler, stream = _attach(logger, 60)
    texts: list[str] = []
    stream.write = lambda text: texts.append(text) or len(text)  # type: ignore[method-assign]
    big = "x" * 1000
    count = BufferedStreamHandler.MAX_BUFFER_BYTES // 1000 + 1
    for _ in range(count):
        logger.info("request", extra={"pad": big})
    assert texts  # the 64 KiB mark was passed: written without waiting for the timer
    handler.flush()
    assert 1 < len(texts) < count  # batched, but never more than PIPE_BUF per write
    assert all(len(t) <= BufferedStreamHandler.WRITE_BYTES and t.endswith("\n") for t in texts)
    assert sum(t.count("\n") for t in texts) == count


def test_zero_flush_seconds_or_no_event_loop_writes_each_line(logger: logging.Logger) -> None:
    handler, stream = _attach(logger, 0)
    logger.info("one")
    logger.info("two")
    assert (_events(stream), stream.writes) == (["one", "two"], 2)
    handler, stream = _attach(logger, 60)  # no running loop in this thread: nothing can wait
    logger.info("three")
    assert _events(stream) == ["three"]


def test_a_broken_stream_never_raises_into_the_caller(logger: logging.Logger) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

        def flush(self) -> None:
            raise ValueError("I/O operation on closed file")

    handler = BufferedStreamHandler(Broken(), 60)
    handler.setFormatter(JsonFormatter())
    logger.handlers[:] = [handler]
    logger.warning("divergence")  # written at once: fails inside, not here
    logger.info("request")
    handler.flush()


def test_lines_after_a_closed_event_loop_are_still_flushed_in_time(logger: logging.Logger) -> None:
    """A timer left pending on a loop that closed does not keep later lines waiting."""
    handler, stream = _attach(logger, 0.02)

    async def log_one(event: str) -> None:
        logger.info(event)

    asyncio.run(log_one("first loop"))  # its flush timer dies with the loop, unfired
    assert _events(stream) == []

    async def log_and_wait() -> None:
        logger.info("second loop")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while "second loop" not in _events(stream) and loop.time() < deadline:
            await asyncio.sleep(0.01)

    asyncio.run(log_and_wait())
    assert _events(stream) == ["first loop", "second loop"]


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
