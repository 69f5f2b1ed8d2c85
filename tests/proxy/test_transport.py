"""The upstream client (gateway/proxy/transport.py) against a raw asyncio server on 127.0.0.1,
so the bytes and their timing on the wire are exactly what each test writes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.config import TimeoutConfig
from gateway.proxy.transport import UpstreamClient

HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n")
EVENT = b'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


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


async def test_data_received_before_a_dropped_connection_is_delivered_before_the_error(
        dropping_worker: int) -> None:
    """A worker that dies right after its last events: those events reach the relay first,
    then the transport error (an httpx exception class), and nothing stays in flight."""
    client = UpstreamClient()
    try:
        for _ in range(20):  # each try gets the event and the FIN in one segment
            response = await client.send("POST", f"http://127.0.0.1:{dropping_worker}/",
                                         headers=[], timeout=TimeoutConfig(), content=b"{}")
            received = b""
            with pytest.raises(httpx.HTTPError):
                async for chunk in response.aiter_bytes():
                    received += chunk
            await response.aclose()
            assert received == EVENT
        assert client.in_flight == 0
    finally:
        await client.aclose()
