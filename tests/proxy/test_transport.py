"""The upstream client (gateway/proxy/transport.py) against a raw asyncio server on 127.0.0.1,
so the bytes and their timing on the wire are exactly what each test writes.

The contract under test: every transport failure surfaces as ``UpstreamError`` — from
``fetch``/``send`` and while a streamed body is iterated — with the reasons and messages of
``upstream_error``; the request goes out exactly as the proxy built it; a body the gateway
reads is decoded, a relayed one is not.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import pytest

from gateway.config import PoolConfig, TimeoutConfig, UpstreamConfig
from gateway.errors import UpstreamError
from gateway.errors import BodyTooLargeError
from gateway.proxy.transport import AiohttpTransport, UpstreamClient, upstream_error

HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n")
EVENT = b'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'
FAST = TimeoutConfig(connect=2.0, read=2.0)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _answer(body: bytes, *headers: bytes, status: bytes = b"200 OK") -> bytes:
    head = b"HTTP/1.1 " + status + b"\r\ncontent-length: %d\r\n" % len(body)
    return head + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


@dataclass
class Seen:
    """One request as it arrived: the request line, the header lines and the body."""

    line: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""

    def names(self) -> list[bytes]:
        return [name.lower() for name, _ in self.headers]


async def _read_request(reader: asyncio.StreamReader) -> Seen:
    head = await reader.readuntil(b"\r\n\r\n")
    line, *rest = head[:-4].split(b"\r\n")
    headers = [tuple(h.split(b": ", 1)) for h in rest]
    seen = Seen(line, headers)  # type: ignore[arg-type]
    fields = {n.lower(): v for n, v in seen.headers}
    if b"content-length" in fields:
        seen.body = await reader.readexactly(int(fields[b"content-length"]))
    elif fields.get(b"transfer-encoding") == b"chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                break
            seen.body += data[:-2]
    return seen


@dataclass
class Worker:
    """A raw worker: ``answer`` writes the reply to each request; ``requests`` records them."""

    answer: Callable[[Seen, asyncio.StreamWriter], Awaitable[None]]
    requests: list[Seen] = field(default_factory=list)
    port: int = 0

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
async def worker_factory() -> AsyncIterator[Callable[..., Awaitable[Worker]]]:
    servers: list[asyncio.Server] = []
    handlers: set[asyncio.Task[None]] = set()

    async def start(answer: Callable[[Seen, asyncio.StreamWriter], Awaitable[None]]) -> Worker:
        worker = Worker(answer)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            try:
                while not writer.is_closing():  # keep-alive: several requests per connection
                    seen = await _read_request(reader)
                    worker.requests.append(seen)
                    await worker.answer(seen, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()
                handlers.discard(task)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        worker.port = server.sockets[0].getsockname()[1]
        return worker

    yield start
    for task in list(handlers):
        task.cancel()
    await asyncio.gather(*handlers, return_exceptions=True)
    for server in servers:
        server.close()
        await server.wait_closed()


def _ok(body: bytes = b"{}", *headers: bytes) -> Callable[[Seen, asyncio.StreamWriter], Awaitable[None]]:
    async def answer(_: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(_answer(body, *headers))
        await writer.drain()
    return answer


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    c = UpstreamClient()
    yield c
    await c.aclose()


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- failures: one class, one mapping ---------------------------------------------------------


@pytest.mark.parametrize("call", ["fetch", "send"])
async def test_refused_is_connect_502(client: UpstreamClient, call: str) -> None:
    with pytest.raises(UpstreamError) as info:
        await getattr(client, call)("GET", f"http://127.0.0.1:{_free_port()}/", headers=[], timeout=FAST)
    assert (info.value.reason, info.value.http_status) == ("connect", 502)
    assert str(info.value) == "worker unreachable: connection failed"
    assert client.in_flight == 0


async def test_no_answer_is_read_timeout_504(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    async def silent(_: Seen, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    w = await worker_factory(silent)
    with pytest.raises(UpstreamError) as info:
        await client.fetch("POST", w.url(), headers=[], timeout=TimeoutConfig(read=0.2), content=b"{}")
    assert (info.value.reason, info.value.http_status) == ("timeout", 504)
    assert str(info.value) == "worker timed out (ReadTimeout)"
    assert client.in_flight == 0


async def test_stalled_stream_is_read_timeout_from_aiter_bytes(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    async def stall(_: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + _chunk(EVENT))
        await writer.drain()
        await asyncio.sleep(5)

    w = await worker_factory(stall)
    response = await client.send("POST", w.url(), headers=[], timeout=TimeoutConfig(read=0.3), content=b"{}")
    received = b""
    with pytest.raises(UpstreamError) as info:
        async for chunk in response.aiter_bytes():
            received += chunk
    await response.aclose()
    assert received == EVENT
    assert (info.value.reason, info.value.http_status, str(info.value)) == (
        "timeout", 504, "worker timed out (ReadTimeout)")
    assert client.in_flight == 0


@pytest.fixture
async def dropping_worker() -> AsyncIterator[int]:
    """Answers any request with a response head and one SSE event, then closes the
    connection without the chunked terminator — head, event and FIN in one write."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD + _chunk(EVENT))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("read", ["aiter_bytes", "aiter_raw"])
async def test_data_received_before_a_dropped_connection_is_delivered_before_the_error(
        dropping_worker: int, read: str) -> None:
    """A worker that dies right after its last events: those events reach the relay first,
    then the failure as UpstreamError protocol/502, and nothing stays in flight."""
    client = UpstreamClient()
    try:
        for _ in range(20):  # each try gets the event and the FIN in one segment
            response = await client.send("POST", f"http://127.0.0.1:{dropping_worker}/",
                                         headers=[], timeout=TimeoutConfig(), content=b"{}")
            received = b""
            with pytest.raises(UpstreamError) as info:
                async for chunk in getattr(response, read)():
                    received += chunk
            await response.aclose()
            assert received == EVENT
            assert (info.value.reason, info.value.http_status) == ("protocol", 502)
            assert str(info.value) == "worker connection failed (ReadError)"
        assert client.in_flight == 0
    finally:
        await client.aclose()


async def test_dropped_before_the_answer_is_protocol_502(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    async def hang_up(_: Seen, writer: asyncio.StreamWriter) -> None:
        writer.close()

    w = await worker_factory(hang_up)
    with pytest.raises(UpstreamError) as info:
        await client.fetch("POST", w.url(), headers=[], timeout=FAST, content=b"{}")
    assert (info.value.reason, info.value.http_status, str(info.value)) == (
        "protocol", 502, "worker connection failed (RemoteProtocolError)")


async def test_undecodable_body_is_protocol_502(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    w = await worker_factory(_ok(b"not gzip at all", b"content-encoding: gzip"))
    with pytest.raises(UpstreamError) as info:
        await client.fetch("GET", w.url(), headers=[], timeout=FAST)
    assert (info.value.reason, str(info.value)) == ("protocol", "worker connection failed (DecodingError)")
    response = await client.send("GET", w.url(), headers=[], timeout=FAST)
    with pytest.raises(UpstreamError):
        await response.aread()
    await response.aclose()
    assert client.in_flight == 0


async def test_the_gateways_own_body_errors_pass_through(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    w = await worker_factory(_ok())

    async def too_large() -> AsyncIterator[bytes]:
        yield b"x" * 10
        raise BodyTooLargeError

    with pytest.raises(BodyTooLargeError):
        response = await client.send("POST", w.url(), headers=[], timeout=FAST, content=too_large())
        await response.aread()  # pragma: no cover - the send itself fails
    assert client.in_flight == 0


def test_one_mapping_for_httpx_errors() -> None:
    """upstream_error is the one mapping: the reasons, statuses and messages the gateway
    answers with; an UpstreamError comes back unchanged; anything else is a bug."""
    cases = {
        httpx.ConnectError("x"): ("connect", 502, "worker unreachable: connection failed"),
        httpx.ConnectTimeout("x"): ("timeout", 504, "worker timed out (ConnectTimeout)"),
        httpx.ReadTimeout("x"): ("timeout", 504, "worker timed out (ReadTimeout)"),
        httpx.PoolTimeout("x"): ("timeout", 504, "worker timed out (PoolTimeout)"),
        httpx.RemoteProtocolError("x"): ("protocol", 502, "worker connection failed (RemoteProtocolError)"),
        httpx.ReadError("x"): ("protocol", 502, "worker connection failed (ReadError)"),
        httpx.DecodingError("x"): ("protocol", 502, "worker connection failed (DecodingError)"),
    }
    for exc, want in cases.items():
        err = upstream_error(exc)
        assert (err.reason, err.http_status, str(err)) == want
        assert type(err) is UpstreamError
    raised = upstream_error(httpx.ReadError("x"))
    assert upstream_error(raised) is raised
    with pytest.raises(TypeError):
        upstream_error(ValueError("a bug, not a transport failure"))


# --- the request goes out as built ------------------------------------------------------------


async def test_url_is_sent_exactly_as_built(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    w = await worker_factory(_ok())
    path = "/a2a/tasks/t%2F1%7E2/x{y}|z?q=%2F%20a+b&r=%41"
    await client.fetch("GET", w.url(path), headers=[], timeout=FAST)
    assert w.requests[-1].line == b"GET " + path.encode() + b" HTTP/1.1"
    await client.fetch("GET", f"http://127.0.0.1:{w.port}?only=query", headers=[], timeout=FAST)
    assert w.requests[-1].line == b"GET /?only=query HTTP/1.1"


async def test_no_headers_are_added_and_repeats_stay_separate(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    w = await worker_factory(_ok())
    sent = [(b"x-dup", b"1"), (b"x-dup", b"2"), (b"a2a-version", b"1.0")]
    await client.fetch("POST", w.url(), headers=sent, timeout=FAST, content=b'{"a":1}')
    seen = w.requests[-1]
    assert seen.names() == [b"host", b"x-dup", b"x-dup", b"a2a-version", b"content-length"]
    assert [(n.lower(), v) for n, v in seen.headers][1:4] == sent
    assert seen.body == b'{"a":1}'
    await client.fetch("GET", w.url(), headers={"accept": "text/plain"}, timeout=FAST)
    assert w.requests[-1].names() == [b"host", b"accept"]  # no Accept-Encoding, User-Agent …


async def test_utf8_header_values_go_out_unchanged(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    w = await worker_factory(_ok())
    await client.fetch("GET", w.url(), headers=[(b"x-name", b"caf\xc3\xa9")], timeout=FAST)
    await client.fetch("GET", w.url(), headers={"x-name": "café"}, timeout=FAST)  # the card fetch's form
    assert [dict(r.headers)[b"x-name"] for r in w.requests] == [b"caf\xc3\xa9"] * 2


async def test_request_body_streams_chunked(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    w = await worker_factory(_ok())

    async def body() -> AsyncIterator[bytes]:
        yield b"part one,"
        await asyncio.sleep(0.01)
        yield b" part two"

    response = await client.send("PUT", w.url(), headers=[], timeout=FAST, content=body())
    await response.aread()
    await response.aclose()
    assert w.requests[-1].body == b"part one, part two"
    assert (b"transfer-encoding", b"chunked") in [(n.lower(), v) for n, v in w.requests[-1].headers]


async def test_no_cookie_is_kept(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    w = await worker_factory(_ok(b"{}", b"set-cookie: session=worker-secret; Path=/"))
    first = await client.fetch("GET", w.url(), headers=[], timeout=FAST)
    assert first.headers["set-cookie"].startswith("session=")  # relayed, not stored
    await client.fetch("GET", w.url(), headers=[], timeout=FAST)
    assert b"cookie" not in w.requests[-1].names()


async def test_redirects_are_not_followed(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    async def redirect(_: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(_answer(b"", b"location: /elsewhere", status=b"302 Found"))
        await writer.drain()

    w = await worker_factory(redirect)
    answer = await client.fetch("GET", w.url(), headers=[], timeout=FAST)
    assert (answer.status_code, answer.headers["location"], len(w.requests)) == (302, "/elsewhere", 1)


async def test_no_environment_proxy(client: UpstreamClient, worker_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    w = await worker_factory(_ok())
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{_free_port()}")
    answer = await client.fetch("GET", w.url(), headers=[], timeout=FAST)
    assert answer.status_code == 200 and len(w.requests) == 1


# --- bodies: decoded when read, raw when relayed, streamed as they come -------------------------


async def test_gzip_unary_body_is_decoded(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    doc = b'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}'
    w = await worker_factory(_ok(gzip.compress(doc), b"content-encoding: gzip"))
    answer = await client.fetch("POST", w.url(), headers=[], timeout=FAST, content=b"{}")
    assert answer.content == doc
    assert answer.headers["content-encoding"] == "gzip"  # the worker's headers, as sent
    assert client.in_flight == 0


async def test_relayed_body_stays_as_sent(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    packed = gzip.compress(b'{"task":{"id":"t1"}}')
    w = await worker_factory(_ok(packed, b"content-encoding: gzip"))
    response = await client.send("GET", w.url("/tasks/t1"), headers=[], timeout=FAST)
    raw = b"".join([chunk async for chunk in response.aiter_raw()])
    await response.aclose()
    assert raw == packed
    assert response.headers.raw[-1] == (b"content-encoding", b"gzip")
    assert client.in_flight == 0


async def test_sse_chunks_are_handed_on_as_they_arrive(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    """The worker writes the next event only after the relay got the previous one: a
    transport that buffered would hang here."""
    got_one = asyncio.Event()

    async def lockstep(_: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + _chunk(EVENT))
        await writer.drain()
        await asyncio.wait_for(got_one.wait(), 5)
        writer.write(_chunk(EVENT) + b"0\r\n\r\n")
        await writer.drain()

    w = await worker_factory(lockstep)
    response = await client.send("POST", w.url(), headers=[], timeout=FAST, content=b"{}")
    chunks = []
    async with asyncio.timeout(5):
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            got_one.set()
    await response.aclose()
    assert b"".join(chunks) == EVENT * 2 and len(chunks) == 2
    assert client.in_flight == 0


async def test_is_an_httpx_transport(worker_factory) -> None:  # type: ignore[no-untyped-def]
    """The pool and the mapping live in an httpx.AsyncBaseTransport: a plain httpx.Request
    works too (then httpx's URL is the target)."""
    w = await worker_factory(_ok(b"hello"))
    transport = AiohttpTransport()
    try:
        assert isinstance(transport, httpx.AsyncBaseTransport)
        response = await transport.handle_async_request(httpx.Request("GET", w.url("/a%2Fb")))
        assert await response.aread() == b"hello"
        await response.aclose()
        assert w.requests[-1].line == b"GET /a%2Fb HTTP/1.1"
        assert transport.in_flight == 0
    finally:
        await transport.aclose()


async def test_compressed_bodies_decode_in_bounded_pieces_whatever_the_ratio(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    """A gzip bomb (40 MB of one byte in ~40 KB) is handed on in pieces of at most
    INFLATE_PIECE, so a reader that stops after a few pieces inflated only those (httpx's
    decoder inflates each network read whole); deflate with and without its zlib header and a
    stacked ``deflate, gzip`` decode to the same bytes."""
    import zlib

    from gateway.proxy.transport import INFLATE_PIECE

    bomb = gzip.compress(b"0" * 40_000_000)
    assert len(bomb) < 64 * 1024
    w = await worker_factory(_ok(bomb, b"content-encoding: gzip"))
    response = await client.send("GET", w.url(), headers=[], timeout=FAST)
    sizes = []
    async for piece in response.aiter_bytes():
        sizes.append(len(piece))
        if len(sizes) == 8:
            break
    await response.aclose()
    assert sizes and max(sizes) <= INFLATE_PIECE and sum(sizes) <= 8 * INFLATE_PIECE
    doc = b'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}' * 3000
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    for encoding, packed in ((b"deflate", zlib.compress(doc)),
                             (b"deflate", raw_deflate.compress(doc) + raw_deflate.flush()),
                             (b"deflate, gzip", gzip.compress(zlib.compress(doc))),
                             (b"x-gzip", gzip.compress(doc))):
        w = await worker_factory(_ok(packed, b"content-encoding: " + encoding))
        assert (await client.fetch("GET", w.url(), headers=[], timeout=FAST)).content == doc, encoding


async def test_header_bytes_that_are_not_utf8_reach_the_worker_unchanged(client: UpstreamClient, worker_factory) -> None:  # type: ignore[no-untyped-def]
    """aiohttp writes header values as UTF-8: Latin-1 ``caf\\xe9`` would go out as
    ``caf\\xc3\\xa9``. Such a request goes through httpx's own transport, byte for byte, with
    its target, Host and body as aiohttp would send them; failures map the same way."""
    w = await worker_factory(_ok(b'{"ok":true}', b"content-type: application/json"))
    headers = [(b"x-name", b"caf\xe9"), (b"x-utf8", "é".encode()), (b"x-name", b"\xff")]
    url = w.url("/a%2Fb?q=%7E")
    answer = await client.fetch("POST", url, headers=headers, timeout=FAST, content=b'{"a":1}')
    assert answer.status_code == 200 and answer.content == b'{"ok":true}'
    [seen] = w.requests
    assert seen.line == b"POST /a%2Fb?q=%7E HTTP/1.1"
    assert [(n, v) for n, v in seen.headers if n.startswith(b"x-")] == headers
    assert dict((n.lower(), v) for n, v in seen.headers)[b"host"] == b"127.0.0.1:%d" % w.port
    assert seen.body == b'{"a":1}'
    response = await client.send("POST", url, headers=headers, timeout=FAST, content=b"{}")
    assert await client.read(response) == b'{"ok":true}'
    assert client.in_flight == 0
    with pytest.raises(UpstreamError) as info:
        await client.fetch("GET", "http://127.0.0.1:1/", headers=headers, timeout=FAST)
    assert info.value.reason == "connect"


# --- the pool: one per upstream, and running out of it is "gateway at capacity" -------------------

def _streaming(release: asyncio.Event) -> Callable[[Seen, asyncio.StreamWriter], Awaitable[None]]:
    """An SSE answer whose body ends only once ``release`` is set (the connection stays held)."""
    async def answer(_: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + _chunk(EVENT))
        await writer.drain()
        await release.wait()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    return answer


def _upstream(name: str, url: str, max_connections: int, wait: float = 0.1) -> UpstreamConfig:
    return UpstreamConfig(name=name, url=url, pool=PoolConfig(max_connections=max_connections, wait_seconds=wait))


async def test_a_full_pool_is_pool_exhausted_503_not_a_timeout(worker_factory) -> None:  # type: ignore[no-untyped-def]
    release = asyncio.Event()
    w = await worker_factory(_streaming(release))
    upstream = _upstream("w", w.url(), 1)
    client = UpstreamClient()
    try:
        held = await client.send("POST", w.url(), headers=[], timeout=FAST, content=b"{}", upstream=upstream)
        with pytest.raises(UpstreamError) as info:
            await client.send("POST", w.url(), headers=[], timeout=FAST, content=b"{}", upstream=upstream)
        err = info.value
        assert (err.reason, err.http_status, err.retry_after) == ("pool_exhausted", 503, 1)
        assert str(err).startswith("gateway at capacity: all 1 connections to the worker in use for 0.1 s")
        assert client.in_flight == 1  # the refused request is not counted as in flight
        release.set()
        assert await client.read(held) == EVENT
        again = await client.fetch("POST", w.url(), headers=[], timeout=FAST, content=b"{}", upstream=upstream)
        assert again.content == EVENT  # the freed connection serves the next request
        assert client.in_flight == 0
    finally:
        await client.aclose()


async def test_each_upstream_has_its_own_pool(worker_factory) -> None:  # type: ignore[no-untyped-def]
    release = asyncio.Event()
    w = await worker_factory(_streaming(release))
    busy, other = _upstream("busy", w.url(), 1), _upstream("other", w.url(), 1)
    client = UpstreamClient()
    try:
        held = await client.send("POST", w.url(), headers=[], timeout=FAST, content=b"{}", upstream=busy)
        second = await client.send("POST", w.url(), headers=[], timeout=FAST, content=b"{}", upstream=other)
        assert client.pool(busy) is not client.pool(other)
        assert client.pool(busy).in_flight == client.pool(other).in_flight == 1
        release.set()
        assert [await client.read(held), await client.read(second)] == [EVENT, EVENT]
        resized = _upstream("busy", w.url(), 3)  # a reload changing the pool: a new one
        assert client.pool(resized) is not client.pool(busy) and client.pool(resized).max_connections == 3
    finally:
        await client.aclose()


def test_an_unbounded_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="max_connections must be > 0"):
        AiohttpTransport(0)


async def test_an_upstreams_tls_settings_make_its_pool_and_a_change_makes_a_new_one(tmp_path) -> None:
    """``upstreams[].tls`` is the pool's TLS context (``True``: the system's CAs when all
    defaults); a reload that changes it gets a new pool, and files that no longer load fail
    the request as a worker ``connect`` error, not a crash."""
    import ssl

    from gateway.config import UpstreamTlsConfig

    client = UpstreamClient()
    plain = UpstreamConfig(name="w", url="https://w.internal/")
    first = client.pool(plain)
    assert first.tls is True and client.pool(plain) is first
    insecure = plain.model_copy(update={"tls": UpstreamTlsConfig(verify=False)})
    second = client.pool(insecure)
    assert second is not first and isinstance(second.tls, ssl.SSLContext)
    assert second.tls.verify_mode == ssl.CERT_NONE
    broken = plain.model_copy(update={"tls": UpstreamTlsConfig(ca_file=str(tmp_path / "gone.pem"))})
    with pytest.raises(UpstreamError) as info:
        await client.fetch("GET", "https://w.internal/", headers={}, timeout=TimeoutConfig(), upstream=broken)
    assert info.value.reason == "connect" and "ca_file" in str(info.value)
    await client.aclose()
