"""A small misbehaving "legacy" A2A worker for the demo: the kind of peer a mixed-runtime
deployment really has (docs/field-cases.md F01, F04).

It serves a valid v1.0 Agent Card and answers JSON-RPC (no a2a-sdk):

* ``GetTask`` for ``t-legacy-1``: ``"state": "input_required"`` — a Python enum member name,
  not a wire spelling (F01);
* ``tasks/get`` for ``t-legacy-2``: ``"state": "TASK_STATE_CANCELLED"`` — the v0.3 gRPC
  double-l spelling, in a v0.3 JSON-RPC answer;
* ``SendStreamingMessage``: a task that is canceled, then keeps producing output and finally
  claims COMPLETED (F04) — the gateway must deliver CANCELED and nothing after it;
* ``GetTask`` for that task afterwards: COMPLETED with the late artifact — the gateway must
  keep reporting CANCELED.

``python -m demo.legacy_worker --port N`` runs it with uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

STREAM_TASK = "t-legacy-3"
CARD = {
    "name": "legacy", "description": "a legacy worker with odd spellings", "version": "0.9.0",
    "supportedInterfaces": [{"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC",
                             "protocolVersion": "1.0"},
                            {"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC",
                             "protocolVersion": "0.3"}],
    "capabilities": {"streaming": True}, "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "legacy", "name": "Legacy", "description": "odd spellings", "tags": ["demo"]}],
}


def _task(task_id: str, state: str, **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "contextId": "c-legacy", "status": {"state": state}, **extra}


def _frames(req_id: Any) -> list[bytes]:
    def event(result: dict[str, Any]) -> bytes:
        return f"data: {json.dumps({'jsonrpc': '2.0', 'id': req_id, 'result': result})}\n\n".encode()

    def status(state: str) -> dict[str, Any]:
        return {"statusUpdate": {"taskId": STREAM_TASK, "contextId": "c-legacy", "status": {"state": state}}}

    late = {"artifactId": "a-late", "parts": [{"text": "output after cancel"}]}
    return [
        event({"task": _task(STREAM_TASK, "TASK_STATE_SUBMITTED")}),
        event(status("Working")),
        event(status("TASK_STATE_CANCELED")),
        event({"artifactUpdate": {"taskId": STREAM_TASK, "contextId": "c-legacy", "artifact": late}}),
        event(status("TASK_STATE_COMPLETED")),
    ]


async def rpc(request: Request) -> Response:
    body = await request.json()
    method, req_id = body.get("method"), body.get("id")
    params = body.get("params") or {}

    def result(value: Any) -> Response:
        return JSONResponse({"jsonrpc": "2.0", "id": req_id, "result": value})

    if method == "GetTask" and params.get("id") == "t-legacy-1":
        return result(_task("t-legacy-1", "input_required"))
    if method == "tasks/get":
        return result({"kind": "task", **_task("t-legacy-2", "TASK_STATE_CANCELLED")})
    if method == "GetTask" and params.get("id") == STREAM_TASK:
        late = {"artifactId": "a-late", "parts": [{"text": "output after cancel"}]}
        return result(_task(STREAM_TASK, "TASK_STATE_COMPLETED", artifacts=[late]))
    if method == "SendStreamingMessage":
        async def frames() -> AsyncIterator[bytes]:
            for frame in _frames(req_id):
                yield frame

        return StreamingResponse(frames(), media_type="text/event-stream")
    return JSONResponse({"jsonrpc": "2.0", "id": req_id,
                         "error": {"code": -32601, "message": f"legacy worker has no {method}"}})


async def card(request: Request) -> Response:
    return JSONResponse(CARD)


def build_app() -> Starlette:
    """The legacy worker as an ASGI app."""
    return Starlette(routes=[Route("/.well-known/agent-card.json", card), Route("/", rpc, methods=["POST"])])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9998)
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(build_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
