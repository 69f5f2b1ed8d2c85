"""Connection bounds on the traffic port (gateway/connections.py) through a real gateway and
raw sockets: a request head that never completes (slow loris) is answered 408 and closed after
``listen.header_timeout_seconds``; an idle keep-alive connection is closed after
``listen.idle_timeout_seconds``; past ``listen.max_connections`` a new connection is answered
503 at once; each bound is counted, and warned about once, not once per connection."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import Any

import httpx
import orjson
import pytest

from tests.proxy.conftest import Harness
from tests.support.scripted_worker import Event
from tests.support.servers import wait_until

WAIT = 5.0  # the longest a socket read waits here: far above every bound set below
REFUSED = "a2a_gateway_connections_refused_total"
CARD = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: gateway\r\n\r\n"


def connect(h: Harness) -> socket.socket:
    sock = socket.create_connection((h.gateway.host, h.gateway.port), timeout=WAIT)
    sock.settimeout(WAIT)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the gateway writes until it closes the connection (a bounded wait: a
    connection silent and still open after the socket's timeout fails the test)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"the connection is still open after {sock.gettimeout()}s; "
                                 f"read {data[:200]!r}") from None
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def read_response(sock: socket.socket) -> bytes:
    """One whole response with a Content-Length body, leaving the connection open."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed mid-body"
        body += chunk
    return head + b"\r\n\r\n" + body


def test_slow_loris_heads_are_answered_408_and_closed_after_the_header_timeout(make_harness: Any) -> None:
    h = make_harness(listen={"header_timeout_seconds": 0.3})
    lorises = [connect(h) for _ in range(3)]
    for sock in lorises:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: gateway\r\nX-Slow: ")  # ... and nothing more
    silent = connect(h)  # connected, sends nothing at all
    try:
        for sock in [*lorises, silent]:
            answer = read_until_closed(sock)
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
            assert b"connection: close\r\n" in answer.lower()
    finally:
        for sock in [*lorises, silent]:
            sock.close()
    assert h.metric(REFUSED, reason="header_timeout") == 4
    assert [r.path for r in h.worker.requests] == ["/.well-known/agent-card.json"]  # start-up's only
    wait_until(lambda: h.metric("a2a_gateway_open_connections") == 0)


def test_a_slow_head_after_a_first_request_on_the_same_connection_is_bounded_too(make_harness: Any) -> None:
    h = make_harness(listen={"header_timeout_seconds": 0.3, "idle_timeout_seconds": 60})
    with connect(h) as sock:
        sock.sendall(CARD)
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHo")  # the idle clock stops here
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408 ")
    assert h.metric(REFUSED, reason="header_timeout") == 1


def test_a_request_head_past_max_header_bytes_is_answered_431_and_closed(make_harness: Any) -> None:
    """httptools sets no bound on a head: one that never ends would grow in memory until the
    header timeout. Past ``listen.max_header_bytes`` it is answered 431 at once; a head just
    under it, and a large body after a small head (in the same reads), are served."""
    h = make_harness(listen={"max_header_bytes": 4096, "header_timeout_seconds": 30})
    with connect(h) as sock:
        # 5 KiB of header lines in one write (all of it read: the close is no reset), the
        # head never finished
        sock.sendall(b"GET / HTTP/1.1\r\nHost: gateway\r\n" + (b"X-Pad: " + b"a" * 1000 + b"\r\n") * 5)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer
    assert h.metric(REFUSED, reason="header_too_large") == 1
    with connect(h) as sock:  # a whole head past the bound in one read (and on a later request)
        sock.sendall(CARD)
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: gateway\r\nX-Pad: " + b"a" * 5000 +
                     b"\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 431 ")
    assert h.metric(REFUSED, reason="header_too_large") == 2
    with connect(h) as sock:
        sock.sendall(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: gateway\r\nX-Pad: " + b"a" * 3000 +
                     b"\r\n\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")
    h.worker.on("GetTask", json_result={"id": "t-1", "contextId": "c-1", "status": {"state": "working"}})
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1", "pad": "x" * 200_000}})
    with connect(h) as sock:  # head and a 200 KB body in one write: only the head counts
        sock.sendall(b"POST / HTTP/1.1\r\nHost: gateway\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")
    assert h.metric(REFUSED, reason="header_too_large") == 2


def test_a_head_that_arrives_in_pieces_within_the_timeout_is_served(make_harness: Any) -> None:
    h = make_harness(listen={"header_timeout_seconds": 5})
    with connect(h) as sock:
        for piece in (b"GET /.well-known/agent-card.json HTTP/1.1\r\n", b"Host: gateway\r\n", b"\r\n"):
            sock.sendall(piece)
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")
    assert h.metric(REFUSED, reason="header_timeout") == 0


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(make_harness: Any) -> None:
    h = make_harness(listen={"idle_timeout_seconds": 0.3, "header_timeout_seconds": 10})
    with connect(h) as sock:
        sock.sendall(CARD)
        response = read_response(sock)
        sock.settimeout(3)  # well past the idle timeout, short of uvicorn's own default (5 s)
        assert response.startswith(b"HTTP/1.1 200 ") and b"connection: close" not in response.lower()
        assert read_until_closed(sock) == b""  # closed quietly: no 408 for an idle connection
    assert h.metric(REFUSED, reason="header_timeout") == 0


def test_a_connection_past_max_connections_is_answered_503_and_the_gateway_recovers(make_harness: Any) -> None:
    h = make_harness(listen={"max_connections": 5})
    held = [connect(h) for _ in range(5)]
    try:
        wait_until(lambda: h.metric("a2a_gateway_open_connections") == 5)
        with connect(h) as sixth:
            answer = read_until_closed(sixth)  # answered without a byte sent
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert b"retry-after: 1" in head.lower() and b"connection: close" in head.lower()
        assert "error" in orjson.loads(body)
        assert h.metric(REFUSED, reason="max_connections") == 1
        assert h.metric("a2a_gateway_open_connections") == 5  # the refused one was never counted
        for sock in held[:2]:
            sock.close()
        wait_until(lambda: h.metric("a2a_gateway_open_connections") == 3)
        h.worker.on("GetTask", json_result={"id": "t-1", "contextId": "c-1", "status": {"state": "working"}})
        with httpx.Client(trust_env=False, timeout=WAIT) as fresh:
            r = fresh.post(h.gateway.url + "/", headers={"A2A-Version": "1.0"},
                           json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}})
        assert r.json()["result"]["status"]["state"] == "TASK_STATE_WORKING"
    finally:
        for sock in held:
            sock.close()
    assert h.metric(REFUSED, reason="max_connections") == 1
    wait_until(lambda: h.metric("a2a_gateway_open_connections") == 0)


def test_an_open_stream_holds_a_connection(make_harness: Any) -> None:
    """Streams count against max_connections: one per stream, for as long as it is open."""
    from tests.support.scripted_worker import Event, Gate

    h = make_harness(listen={"max_connections": 1})
    gate = Gate(timeout=20)
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}}),
        gate,
        Event(result={"statusUpdate": {"taskId": "t-1", "contextId": "c-1",
                                       "status": {"state": "TASK_STATE_COMPLETED"}}}),
    ])
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}})
    with httpx.Client(trust_env=False, timeout=WAIT) as client, client.stream(
            "POST", h.gateway.url + "/", content=body,
            headers={"A2A-Version": "1.0", "content-type": "application/json"}) as stream:
        chunks = stream.iter_raw()
        assert b"t-1" in next(chunks)
        with connect(h) as second:
            assert read_until_closed(second).startswith(b"HTTP/1.1 503 ")
        gate.release()
        assert b"TASK_STATE_COMPLETED" in b"".join(chunks)


def test_a_bound_that_keeps_biting_is_one_warning_not_one_per_connection(
        make_harness: Any, caplog: pytest.LogCaptureFixture) -> None:
    h = make_harness(listen={"max_connections": 1, "header_timeout_seconds": 1.5})
    caplog.set_level(logging.WARNING, logger="a2a_gateway")
    with connect(h) as first:
        wait_until(lambda: h.metric("a2a_gateway_open_connections") == 1)
        for _ in range(4):
            with connect(h) as extra:
                assert read_until_closed(extra).startswith(b"HTTP/1.1 503 ")
        assert read_until_closed(first).startswith(b"HTTP/1.1 408 ")
    assert h.metric(REFUSED, reason="max_connections") == 4
    warnings = [(r.reason, r.connections) for r in caplog.records  # type: ignore[attr-defined]
                if r.getMessage() == "connections_refused"]
    assert warnings == [("max_connections", 1), ("header_timeout", 1)]


def test_the_head_bound_holds_behind_a_response_and_ignores_a_refused_body(make_harness: Any) -> None:
    """A head pipelined behind a response still being written is bounded too; the rest of a
    body refused early (413) is a body, never counted as a head."""
    h = make_harness(listen={"max_header_bytes": 4096, "header_timeout_seconds": 30},
                     limits={"max_body_bytes": 1000})
    with connect(h) as sock:  # a 413 for a big body, then the rest of that body arrives
        sock.sendall(b"POST /message:send HTTP/1.1\r\nHost: gateway\r\nA2A-Version: 1.0\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 20000\r\n\r\n" + b"x" * 20000)
        assert read_response(sock).startswith(b"HTTP/1.1 413 ")
    assert h.metric(REFUSED, reason="header_too_large") == 0
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}})],
        hold_open=True)
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}})
    with connect(h) as sock:  # a stream stays open; a second head grows behind it
        sock.sendall(b"POST / HTTP/1.1\r\nHost: gateway\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        seen = b""
        while b"t-1" not in seen:
            seen += sock.recv(65536)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: gateway\r\n" + (b"X-Pad: " + b"a" * 1000 + b"\r\n") * 6)
        wait_until(lambda: h.metric(REFUSED, reason="header_too_large") == 1)


def test_chunked_trailers_are_bounded_with_the_whole_request(make_harness: Any) -> None:
    """Trailers after a chunked body pass both the head and the body bound, and httptools
    reads them into memory: one request's bytes on the wire are bounded too (twice the body
    and head bounds), so endless trailers end with 431 and the close."""
    h = make_harness(listen={"max_header_bytes": 4096}, limits={"max_body_bytes": 1000})
    with connect(h) as sock:
        sock.sendall(b"POST /other HTTP/1.1\r\nHost: gateway\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"2\r\n{}\r\n0\r\n" + (b"X-Trailer: " + b"t" * 1000 + b"\r\n") * 12)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:300]
    assert h.metric(REFUSED, reason="header_too_large") == 1
    with connect(h) as sock:  # the gateway serves on
        sock.sendall(CARD)
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")


CHUNKED_HEAD = (b"POST / HTTP/1.1\r\nHost: gateway\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n")


def test_a_chunk_size_past_the_body_bound_is_answered_413_at_once(
        make_harness: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Issue #35: a chunk size of ``ffffffffffffffff`` held the connection with no answer for
    90 s and more (past the header and idle timeouts: a request was in flight), although it
    announces more than the request may carry. Chunk sizes are read as they arrive: one past
    what is left of ``limits.max_body_bytes`` is answered 413 and the connection closed at
    once — in the read of the head, in a later read, after earlier chunks — counted, and the
    request's line says so; nothing reaches the worker."""
    h = make_harness(limits={"max_body_bytes": 1000})
    caplog.set_level(logging.INFO, logger="a2a_gateway")
    cases = [
        [CHUNKED_HEAD + b"\r\nffffffffffffffff\r\n{"],  # the head and the size in one read
        [CHUNKED_HEAD + b"Expect: 100-continue\r\n\r\n", b"3e9\r\n"],  # 1001 bytes, after the head was read
        [CHUNKED_HEAD + b"Expect: 100-continue\r\n\r\n", b"258\r\n" + b" " * 600 + b"\r\n", b"191\r\n"],  # 600 + 401
    ]
    for writes in cases:
        with connect(h) as sock:
            sock.sendall(writes[0])
            if len(writes) > 1:  # the head is parsed and the body asked for: the rest comes in later reads
                assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
                for data in writes[1:]:
                    sock.sendall(data)
            answer = read_until_closed(sock)  # never a wait: the socket times out after WAIT
        assert answer.startswith(b"HTTP/1.1 413 Content Too Large\r\n"), answer
        assert b"connection: close" in answer.lower() and b"limits.max_body_bytes" in answer
    assert h.metric(REFUSED, reason="body_too_large") == 3
    assert h.rpc_calls() == []
    wait_until(lambda: len([r for r in caplog.records if r.getMessage() == "request"]) >= 3)
    lines = [r for r in caplog.records if r.getMessage() == "request"]
    assert {(r.status, r.outcome) for r in lines} == {(413, "too_large")}  # type: ignore[attr-defined]
    assert h.metric("a2a_gateway_requests_total", outcome="too_large") == 3


def test_chunks_within_the_bound_are_served_and_a_malformed_size_is_400(make_harness: Any) -> None:
    """Chunks that add up to the bound (sizes with extensions, in pieces across reads) reach
    the worker; a chunk size that is no hex number is answered 400 by the parser and counted."""
    h = make_harness(limits={"max_body_bytes": 1000})
    h.worker.on("GetTask", json_result={"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}})
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}).ljust(1000)
    with connect(h) as sock:
        sock.sendall(CHUNKED_HEAD + b"Expect: 100-continue\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(b"1f4;x=y\r\n" + body[:500] + b"\r\n1f")
        sock.sendall(b"4\r\n" + body[500:] + b"\r\n0\r\n\r\n")
        assert b"t-1" in read_response(sock)
    assert len(h.rpc_calls()) == 1
    with connect(h) as sock:
        sock.sendall(CHUNKED_HEAD + b"\r\nzz\r\n{}\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 400 ")
    assert h.metric(REFUSED, reason="malformed") == 1
    assert h.metric(REFUSED, reason="body_too_large") == 0


def _post_head(path: bytes, length: int, *extra: bytes) -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nHost: gateway\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n" % length + b"".join(h + b"\r\n" for h in extra) + b"\r\n")


def test_a_body_not_whole_within_the_body_timeout_is_answered_408_and_closed(
        make_harness: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Issue #35: bodies sent at 1 byte/s were all still open after 30 s (docs/known-limits.md:
    only a body's size was bounded, not its pace). Now a body must be whole within
    ``listen.body_timeout_seconds`` of the end of its head — one that stops, and one dripped
    a byte at a time (a deadline for the whole body, which a drip never moves) — else 408 and
    the close, counted, the line says so, nothing reaches the worker. A body sent in pieces
    within the time is served."""
    h = make_harness(listen={"body_timeout_seconds": 0.5})
    caplog.set_level(logging.INFO, logger="a2a_gateway")
    h.worker.on("GetTask", json_result={"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}},
                times=None)
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}})
    stopped = [connect(h) for _ in range(3)]
    for sock in stopped:
        sock.sendall(_post_head(b"/", len(body)) + body[:10])
    dripped = connect(h)
    dripped.sendall(_post_head(b"/message:send", 1000))
    done = threading.Event()

    def drip() -> None:  # the client's own pace, a byte every 50 ms: no synchronization
        with contextlib.suppress(OSError):
            while not done.wait(0.05):
                dripped.sendall(b" ")

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        for sock in [*stopped, dripped]:
            answer = read_until_closed(sock)
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
            assert b"connection: close" in answer.lower() and b"listen.body_timeout_seconds" in answer
    finally:
        done.set()
        dripper.join()
        for sock in [*stopped, dripped]:
            sock.close()
    assert h.metric(REFUSED, reason="body_timeout") == 4
    assert h.rpc_calls() == []
    wait_until(lambda: len([r for r in caplog.records if r.getMessage() == "request"]) == 4)
    assert {(r.status, r.outcome) for r in caplog.records  # type: ignore[attr-defined]
            if r.getMessage() == "request"} == {(408, "body_timeout")}
    assert h.metric("a2a_gateway_requests_total", outcome="body_timeout") == 4
    with connect(h) as sock:  # in pieces, within the time: served
        sock.sendall(_post_head(b"/", len(body), b"Expect: 100-continue"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body[:10])
        sock.sendall(body[10:])
        assert b"t-1" in read_response(sock)
    assert h.metric(REFUSED, reason="body_timeout") == 4


def test_bodies_in_flight_past_the_process_budget_are_answered_503(make_harness: Any) -> None:
    """Issue #35: the body bound was per request only (8 concurrent 10 MiB bodies took RSS
    from 64 to 261 MB). ``limits.max_inflight_body_bytes`` bounds what one process holds:
    with two 1 000-byte bodies in flight (held from their Content-Length on), a third body
    is answered 503 with ``Retry-After: 1`` before it is read — JSON-RPC -32603, REST in its
    version's form — as is a chunked body once its chunks pass the budget; counted; and
    once the two are answered, the budget is free again."""
    h = make_harness(limits={"max_body_bytes": 1000, "max_inflight_body_bytes": 2000})
    h.worker.on("GetTask", json_result={"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}},
                times=None)
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}).ljust(1000)
    held = [connect(h) for _ in range(2)]
    for sock in held:  # the app asks for the body (100 Continue): its 1 000 bytes are held now
        sock.sendall(_post_head(b"/", len(body), b"Expect: 100-continue"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
    small = b'{"jsonrpc":"2.0","id":"s-1","method":"GetTask","params":{"id":"t-1"}}'
    refused = []
    for path, data in ((b"/", small), (b"/message:send", b"{}"), (b"/v1/message:send", b"{}")):
        with connect(h) as sock:
            sock.sendall(_post_head(path, len(data)) + data)
            refused.append(read_response(sock))
    with connect(h) as sock:  # chunked: refused when its chunks pass the budget
        sock.sendall(CHUNKED_HEAD + b"\r\n3\r\n{} \r\n")
        sock.sendall(b"3\r\n   \r\n0\r\n\r\n")
        refused.append(read_response(sock))
    for answer in refused:
        head, _, doc = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in head.lower(), answer
        assert b"max_inflight_body_bytes" in doc
    assert orjson.loads(refused[0].partition(b"\r\n\r\n")[2])["error"]["code"] == -32603
    assert orjson.loads(refused[1].partition(b"\r\n\r\n")[2])["error"]["status"] == "UNAVAILABLE"
    assert h.metric("a2a_gateway_limits_reached_total", limit="max_inflight_body_bytes", side="client") == 4
    assert h.rpc_calls() == []
    for sock in held:
        sock.sendall(body)
        assert b"t-1" in read_response(sock)
        sock.close()
    assert h.runtime.bodies.used == 0
    r = h.rpc(small, headers={"A2A-Version": "1.0"})  # the budget is free again
    assert r.status_code == 200 and r.json()["result"]["id"] == "t-1"
