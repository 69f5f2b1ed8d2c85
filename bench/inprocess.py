"""The gateway's own cost without sockets: CPU per unary request and per SSE event of the
in-process path (ASGI app → exchange → driver → a fake upstream client), memory ledger.

    python -m bench.inprocess                        # both workloads, best of 3, CPU µs
    python -m bench.inprocess --tree /path/to/other/checkout --workload unary --count 2000
    valgrind --tool=callgrind python -m bench.inprocess --workload stream --count 40 --runs 1

Under callgrind, run it twice with different ``--count`` and divide the difference of the
instruction totals by the difference of requests (events): an exact, repeatable cost per
request (event) that a noisy machine cannot blur. ``--tree`` imports the gateway from another
checkout (an older commit in a ``git worktree``), so both are measured by the same script.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
import gc
import logging
import sys
import time
from typing import Any


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", help="import the gateway package from this checkout")
    parser.add_argument("--workload", choices=("unary", "stream", "both"), default="both")
    parser.add_argument("--count", type=int, help="requests (unary) or streams of 100 events (default 5000 / 300)")
    parser.add_argument("--runs", type=int, default=3, help="runs per workload; the best is printed")
    return parser.parse_args(argv)


CARD = (b'{"name":"canned-worker","description":"fixed answers","supportedInterfaces":[{"url":"http://w/",'
        b'"protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"version":"1.0.0","capabilities":'
        b'{"streaming":true,"pushNotifications":false},"defaultInputModes":["text/plain"],'
        b'"defaultOutputModes":["text/plain"],"skills":[{"id":"echo","name":"echo","description":"x","tags":["b"]}]}')
EVENTS = 100


def _fake_client(httpx: Any, orjson: Any) -> Any:
    def sse(task_id: str, rid: Any) -> list[bytes]:
        def ev(result: dict[str, Any]) -> bytes:
            return b"data: " + orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + b"\n\n"
        ids = {"taskId": task_id, "contextId": "c"}
        return [ev({"task": {"id": task_id, "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
                *(ev({"statusUpdate": {**ids, "status": {"state": "TASK_STATE_WORKING"}}}) for _ in range(EVENTS - 2)),
                ev({"statusUpdate": {**ids, "status": {"state": "TASK_STATE_COMPLETED"}}})]

    class Chunks(httpx.AsyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = chunks

        async def __aiter__(self) -> Any:
            for chunk in self.chunks:
                yield chunk

    class Answer:
        def __init__(self, status: int, headers: dict[str, str], content: bytes) -> None:
            self.status_code, self.headers, self.content = status, httpx.Headers(headers), content

    class FakeClient:
        """Answers like bench/canned_worker.py, without a socket."""

        in_flight = 0
        n = 0

        async def fetch(self, method: str, url: str, *, headers: Any, timeout: Any, content: Any = None,
                     upstream: Any = None) -> Any:
            if method == "GET":
                return Answer(200, {"content-type": "application/json", "etag": '"1"',
                                    "cache-control": "max-age=3600"}, CARD)
            FakeClient.n += 1
            result = {"task": {"id": f"u-{FakeClient.n}", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}}
            doc = {"jsonrpc": "2.0", "id": orjson.loads(content)["id"], "result": result}
            return Answer(200, {"content-type": "application/json"}, orjson.dumps(doc))

        async def send(self, method: str, url: str, *, headers: Any, timeout: Any, content: Any = None,
                    upstream: Any = None) -> Any:
            FakeClient.n += 1
            rid = orjson.loads(content)["id"]
            return httpx.Response(200, headers=[("content-type", "text/event-stream")],
                                  stream=Chunks(sse(f"s-{FakeClient.n}", rid)))

        async def aclose(self) -> None:
            return None

    return FakeClient()


def _problem(messages: list[dict[str, Any]], events: int) -> str | None:
    """What is wrong with one answer (the ASGI messages the app sent), or None: it must be
    HTTP 200 without a JSON-RPC error, and a stream must carry ``events`` events."""
    status = next((m["status"] for m in messages if m["type"] == "http.response.start"), None)
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    if status != 200 or b'"error"' in body:
        return f"HTTP {status} {body[:300]!r}"
    if events and body.count(b"data:") != events:
        return f"{body.count(b'data:')} events instead of {events}"
    return None


async def _main(args: argparse.Namespace) -> None:
    import httpx
    import orjson

    from gateway.app import build_app
    from gateway.config import parse_config

    logging.disable(logging.CRITICAL)
    app = build_app(parse_config({"upstreams": [{"name": "w", "url": "http://w/", "prefix": "/"}],
                                  "ledger": {"url": "memory"}}))
    rt = app.state.runtime
    rt.client = _fake_client(httpx, orjson)
    for cache in rt.cards.values():
        cache.client = rt.client
        await cache.refresh()
    never = asyncio.Event()
    scope = {"type": "http", "method": "POST", "path": "/", "raw_path": b"/", "query_string": b"",
             "headers": [(b"host", b"gw"), (b"content-type", b"application/json")],
             "client": ("127.0.0.1", 5), "scheme": "http"}

    async def one(method: str, rid: int, seen: list[dict[str, Any]] | None = None) -> None:
        # a messageId of its own: the same one again would be a retry (docs/retries.md)
        params = {"message": {"messageId": f"m-{rid}-{uuid.uuid4().hex[:8]}", "role": "ROLE_USER",
                              "parts": [{"text": "x"}]}}
        body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        first = [True]

        async def receive() -> dict[str, Any]:
            if first[0]:
                first[0] = False
                return {"type": "http.request", "body": body, "more_body": False}
            await never.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if seen is not None:
                seen.append(message)

        await app(scope, receive, send)

    for i in range(20):  # warm-up, each answer checked: a path that answers errors measures nothing
        for method, events in (("SendMessage", 0), ("SendStreamingMessage", EVENTS)):
            seen: list[dict[str, Any]] = []
            await one(method, i, seen)
            problem = _problem(seen, events)
            if problem:
                raise SystemExit(f"bench.inprocess: {method} through the gateway: {problem}")
    workloads = {"unary": ("SendMessage", args.count or 5000, 1),
                 "stream": ("SendStreamingMessage", args.count or 300, EVENTS)}
    for name in (("unary", "stream") if args.workload == "both" else (args.workload,)):
        method, count, per = workloads[name]
        best = None
        for _ in range(args.runs):
            gc.collect()
            started = time.process_time()
            for i in range(count):
                await one(method, i)
            spent = time.process_time() - started
            best = spent if best is None else min(best, spent)
        unit = "request" if per == 1 else "event"
        print(f"{name}: {best / (count * per) * 1e6:.2f} µs CPU per {unit} ({count} x {method})")


def main(argv: list[str] | None = None) -> None:
    """Run the workloads and print the CPU per request / event."""
    args = _parse(argv)
    if args.tree:
        sys.path.insert(0, args.tree)
    import gateway

    print(f"gateway from {gateway.__file__}", file=sys.stderr)
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
