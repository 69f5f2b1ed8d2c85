"""A minimal, fast fake A2A v1.0 worker for benchmarks (not a test double: no scripting).

    python -m bench.canned_worker [--host 127.0.0.1] [--port 9999]

Raw asyncio (uvloop when installed), HTTP/1.1 keep-alive, ``Content-Length`` request bodies,
so that what a proxy in front of it costs is what shows. Every answer is fixed, valid v1.0
JSON (docs/protocol.md §3.4); the JSON-RPC ``id`` and ``method`` are taken from the body with a
regex and the id is echoed exactly as its JSON text:

* ``SendMessage`` → ``{"task": …}`` COMPLETED with one artifact; a new task id per request
  (``t-<boot>-<n>``) so a gateway's ledger tracks a new task each time;
* ``GetTask`` → a bare COMPLETED Task whose id is ``params.id``;
* ``SendStreamingMessage`` → ``text/event-stream`` (chunked, one chunk per event, written
  back to back without waiting), 100 events, then the chunked body ends (the connection stays
  open). The message text chooses the shape: ``tokens please`` → the append-chunk shape, a
  Task (WORKING), one artifact sent as 98 ``artifactUpdate`` chunks (the first
  ``append:false``, the rest ``append:true``; ``lastChunk:false`` but on the last chunk),
  then a statusUpdate COMPLETED (how a model streams its tokens); any other text (the
  harness sends ``stream please``) → the mixed shape, a Task (WORKING), 98 alternating
  statusUpdate (WORKING) / artifactUpdate events, then a statusUpdate COMPLETED;
* any other method → JSON-RPC -32601;
* ``GET /.well-known/agent-card.json`` → a valid v1.0 Agent Card (streaming true, one skill,
  ``Cache-Control: max-age=3600``, an ETag; 304 on a matching ``If-None-Match``); any other
  ``GET`` → ``{"status":"ok"}`` (readiness).

Prints ``ready`` on stdout once listening. Stops on SIGTERM / SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
from typing import Any

ID_RE = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|null)')
METHOD_RE = re.compile(rb'"method"\s*:\s*"([^"]*)"')
PARAMS_ID_RE = re.compile(rb'"params"\s*:\s*\{[^{}]*?"id"\s*:\s*"((?:[^"\\]|\\.)*)"')
TS = b"2026-11-29T20:45:38.476127Z"
STREAM_EVENTS = 100
BOOT = os.urandom(3).hex().encode()  # a restarted worker never repeats a task id

JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"cache-control: no-store\r\nx-accel-buffering: no\r\ntransfer-encoding: chunked\r\n\r\n")
ARTIFACT_TEXT = b"the canned worker's answer; " * 4
TOKENS_TEXT = b'"text":"tokens please"'  # chooses the append-chunk stream shape


def _json_response(body: bytes) -> bytes:
    return b"".join((JSON_HEAD, str(len(body)).encode(), b"\r\n\r\n", body))


def _send_message(rid: bytes, n: int) -> bytes:
    tid = b"t-%s-%d" % (BOOT, n)
    cid = b"c-%s-%d" % (BOOT, n)
    return _json_response(
        b'{"jsonrpc":"2.0","id":' + rid + b',"result":{"task":{"id":"' + tid + b'","contextId":"'
        + cid + b'","status":{"state":"TASK_STATE_COMPLETED","timestamp":"' + TS + b'"},'
        b'"artifacts":[{"artifactId":"a-1","name":"result","parts":[{"text":"' + ARTIFACT_TEXT
        + b'"}]}]}}}')


def _get_task(rid: bytes, task_id: bytes) -> bytes:
    return _json_response(
        b'{"jsonrpc":"2.0","id":' + rid + b',"result":{"id":"' + task_id + b'","contextId":"c-get",'
        b'"status":{"state":"TASK_STATE_COMPLETED","timestamp":"' + TS + b'"},'
        b'"artifacts":[{"artifactId":"a-1","name":"result","parts":[{"text":"' + ARTIFACT_TEXT
        + b'"}]}]}}')


def _stream_frames(rid: bytes, n: int, tokens: bool = False) -> list[bytes]:
    """The 100 events of one stream, each already framed as one HTTP chunk; ``tokens``: the
    append-chunk shape, else the mixed one (module docstring)."""
    tid = b"t-%s-%d" % (BOOT, n)
    cid = b"c-%s-%d" % (BOOT, n)
    head = b'data: {"jsonrpc":"2.0","id":' + rid + b',"result":'
    ids = b'"taskId":"' + tid + b'","contextId":"' + cid + b'"'
    results = [b'{"task":{"id":"' + tid + b'","contextId":"' + cid
               + b'","status":{"state":"TASK_STATE_WORKING","timestamp":"' + TS + b'"}}}']
    for k in range(1, STREAM_EVENTS - 1):
        if tokens:
            append = b"true" if k > 1 else b"false"
            last = b"true" if k == STREAM_EVENTS - 2 else b"false"
            results.append(b'{"artifactUpdate":{' + ids + b',"artifact":{"artifactId":"a-1",'
                           b'"parts":[{"text":"token %d "}]},"append":%s,"lastChunk":%s}}' % (k, append, last))
        elif k % 2:
            results.append(b'{"statusUpdate":{' + ids + b',"status":{"state":"TASK_STATE_WORKING",'
                           b'"timestamp":"' + TS + b'"}}}')
        else:
            append = b"true" if k > 2 else b"false"
            results.append(b'{"artifactUpdate":{' + ids + b',"artifact":{"artifactId":"a-1",'
                           b'"parts":[{"text":"chunk %d "}]},"append":%s,"lastChunk":false}}' % (k, append))
    results.append(b'{"statusUpdate":{' + ids + b',"status":{"state":"TASK_STATE_COMPLETED",'
                   b'"timestamp":"' + TS + b'"}}}')
    frames = []
    for result in results:
        event = head + result + b"}\n\n"
        frames.append(b"%x\r\n%s\r\n" % (len(event), event))
    return frames


def _card(host: str, port: int) -> tuple[bytes, bytes]:
    """(response for GET of the card, 304 response) — a valid v1.0 Agent Card."""
    url = f"http://{host}:{port}/"
    card = (
        '{"name":"canned-worker","description":"fixed answers for benchmarks",'
        f'"supportedInterfaces":[{{"url":"{url}","protocolBinding":"JSONRPC","protocolVersion":"1.0"}}],'
        '"version":"1.0.0","capabilities":{"streaming":true,"pushNotifications":false},'
        '"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],'
        '"skills":[{"id":"echo","name":"echo","description":"answers at once","tags":["bench"]}]}'
    ).encode()
    etag = b'"canned-1"'
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncache-control: max-age=3600\r\n"
            b"etag: " + etag + b"\r\ncontent-length: " + str(len(card)).encode() + b"\r\n\r\n")
    not_modified = (b"HTTP/1.1 304 Not Modified\r\ncache-control: max-age=3600\r\netag: " + etag
                    + b"\r\ncontent-length: 0\r\n\r\n")
    return head + card, not_modified


class Worker:
    def __init__(self, host: str = "127.0.0.1", port: int = 9999) -> None:
        self.n = 0
        self.card, self.card_304 = _card(host, port)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lower = head.lower()
                length = 0
                pos = lower.find(b"\r\ncontent-length:")
                if pos >= 0:
                    end = lower.find(b"\r\n", pos + 2)
                    length = int(lower[pos + 17:end])
                elif b"\r\ntransfer-encoding:" in lower:
                    writer.write(b"HTTP/1.1 411 Length Required\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    return
                body = await reader.readexactly(length) if length else b""
                close = b"\r\nconnection: close" in lower
                if head.startswith(b"POST "):
                    self.respond(body, writer)
                elif head.startswith((b"GET /.well-known/agent-card.json", b"GET /.well-known/agent.json")):
                    writer.write(self.card_304 if b'if-none-match: "canned-1"' in lower else self.card)
                else:
                    writer.write(_json_response(b'{"status":"ok"}'))
                if close:
                    await writer.drain()
                    return
                if writer.transport.get_write_buffer_size() > 1 << 20:
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def respond(self, body: bytes, writer: asyncio.StreamWriter) -> None:
        m = ID_RE.search(body)
        rid = m.group(1) if m else b"null"
        m = METHOD_RE.search(body)
        method = m.group(1) if m else b""
        self.n += 1
        if method == b"SendMessage":
            writer.write(_send_message(rid, self.n))
        elif method == b"GetTask":
            m = PARAMS_ID_RE.search(body)
            writer.write(_get_task(rid, m.group(1) if m else b"t-0"))
        elif method == b"SendStreamingMessage":
            writer.write(SSE_HEAD)
            for frame in _stream_frames(rid, self.n, TOKENS_TEXT in body):
                writer.write(frame)  # one write per event, as a server flushing each event
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(_json_response(b'{"jsonrpc":"2.0","id":' + rid
                                        + b',"error":{"code":-32601,"message":"Method not found"}}'))


async def serve(host: str, port: int) -> None:
    await serve_until_signal(Worker(host, port).handle, host, port, backlog=1024)


async def serve_until_signal(handle: Any, host: str, port: int, *, backlog: int) -> None:
    """Serve ``handle`` (an ``asyncio.start_server`` callback) on ``host:port``, print ``ready``
    once listening, and return on SIGTERM / SIGINT."""
    server = await asyncio.start_server(handle, host, port, backlog=backlog)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="Fast canned A2A v1.0 worker for benchmarks.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9999)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.host, args.port))
    else:
        uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
