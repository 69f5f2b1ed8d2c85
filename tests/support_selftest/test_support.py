"""Self-tests for tests/support: the scripted worker under real uvicorn, hit with httpx."""

from __future__ import annotations

import asyncio
import sys
import threading

import httpx
import orjson
import pytest

from tests.support.scripted_worker import (
    ANY,
    NULL_ID,
    Close,
    Data,
    Event,
    Gate,
    JsonResult,
    ScriptedWorker,
)
from tests.support.servers import (
    await_until,
    free_port,
    serve_async,
    serve_in_thread,
    subprocess_server,
    wait_until,
)


def rpc(id_, method, params=None):
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}


@pytest.fixture
def worker():
    return ScriptedWorker()


@pytest.fixture
def served(worker):
    with serve_in_thread(worker, name="worker") as srv:
        yield srv


@pytest.fixture
async def client(served):
    async with httpx.AsyncClient(base_url=served.url, trust_env=False, timeout=5.0) as c:
        yield c


async def read_until(it, buf: bytearray, needle: bytes, timeout: float = 3.0) -> None:
    """Read raw chunks from ``it`` into ``buf`` until ``needle`` is in it (bounded)."""
    async def go():
        while needle not in buf:
            buf.extend(await it.__anext__())
    await asyncio.wait_for(go(), timeout)


# ---------------------------------------------------------------- servers


def test_serve_in_thread_binds_ephemeral_port(worker):
    worker.on("GetTask", json_result={"ok": True})
    with serve_in_thread(worker) as srv:
        assert srv.url == f"http://127.0.0.1:{srv.port}" and srv.port > 0
        assert srv.thread is not None and srv.thread.is_alive()
        r = httpx.post(srv.url + "/", json=rpc(1, "GetTask"), trust_env=False)
        assert r.json() == {"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}
    assert not srv.thread.is_alive()


async def test_serve_async_runs_in_current_loop(worker):
    gate = Gate(asyncio.Event())  # asyncio.Event works because the app shares our loop
    worker.on("SendStreamingMessage", sse=[Event(result=1), gate, Event(result=2)])
    async with serve_async(worker) as srv, httpx.AsyncClient(trust_env=False) as c:
        assert srv.loop is asyncio.get_running_loop()
        async with c.stream("POST", srv.url, json=rpc(5, "SendStreamingMessage")) as resp:
            it, buf = resp.aiter_raw(), bytearray()
            await read_until(it, buf, b"\n\n")
            gate.release()
            async for chunk in it:
                buf.extend(chunk)
    assert buf == b'data: {"jsonrpc":"2.0","id":5,"result":1}\n\ndata: {"jsonrpc":"2.0","id":5,"result":2}\n\n'


def test_wait_until_returns_value_and_times_out():
    flag = threading.Event()
    threading.Timer(0.02, flag.set).start()
    assert wait_until(flag.is_set, timeout=2) is True
    with pytest.raises(AssertionError, match="never ready"):
        wait_until(lambda: False, timeout=0.05, message="never ready")

    def check():
        assert 1 == 2, "one is not two"
    with pytest.raises(AssertionError, match="one is not two"):
        wait_until(check, timeout=0.05)


async def test_await_until_accepts_async_predicate():
    calls = []

    async def pred():
        calls.append(1)
        return len(calls) >= 3 and "done"
    assert await await_until(pred, timeout=2) == "done"
    with pytest.raises(AssertionError):
        await await_until(lambda: None, timeout=0.05)


def test_subprocess_server_ready_and_stopped(tmp_path):
    port = free_port()
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    with subprocess_server(cmd, f"http://127.0.0.1:{port}/", timeout=20) as proc:
        assert proc.poll() is None
        assert httpx.get(f"http://127.0.0.1:{port}/", trust_env=False).status_code == 200
    assert proc.poll() is not None


def test_subprocess_server_reports_stderr_on_early_exit():
    cmd = [sys.executable, "-c", "import sys; sys.stderr.write('boom: bad config'); sys.exit(3)"]
    with pytest.raises(RuntimeError, match="boom: bad config"):
        with subprocess_server(cmd, f"http://127.0.0.1:{free_port()}/", timeout=10):
            pass


# ---------------------------------------------------------------- JSON-RPC scripts


@pytest.mark.parametrize("rid", ["7", 7, "req-77", 0, -3, 2.5, 2**70])
async def test_json_result_echoes_id_exactly(worker, client, rid):
    worker.on("GetTask", json_result={"id": "t-1", "status": {"state": "input_required"}})
    r = await client.post("/", content=orjson.dumps(rpc(rid, "GetTask")) if rid != 2**70
                          else b'{"jsonrpc":"2.0","id":%d,"method":"GetTask"}' % rid)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body == {"jsonrpc": "2.0", "id": rid, "result": {"id": "t-1", "status": {"state": "input_required"}}}
    assert type(body["id"]) is type(rid)
    assert r.content.startswith(b'{"jsonrpc":"2.0","id":' + (f'"{rid}"' if isinstance(rid, str) else repr(rid)).encode())


async def test_json_error_and_id_override(worker, client):
    worker.on("CancelTask", json_error={"code": -32002, "message": "not cancelable"})
    worker.on("CancelTask", json_result={}, id="wrong-id")
    worker.on("CancelTask", json_result={}, id=NULL_ID)
    r1 = (await client.post("/", json=rpc("k-1", "CancelTask"))).json()
    r2 = (await client.post("/", json=rpc("k-2", "CancelTask"))).json()
    r3 = (await client.post("/", json=rpc("k-3", "CancelTask"))).json()
    assert r1 == {"jsonrpc": "2.0", "id": "k-1", "error": {"code": -32002, "message": "not cancelable"}}
    assert r2["id"] == "wrong-id" and r3["id"] is None


async def test_raw_response_exact(worker, client):
    worker.on("SendMessage", raw=(500, {"content-type": "text/html"}, b"<h1>Traceback (most recent call last)</h1>"))
    r = await client.post("/", json=rpc(1, "SendMessage"))
    assert r.status_code == 500
    assert r.headers["content-type"] == "text/html"
    assert r.content == b"<h1>Traceback (most recent call last)</h1>"


async def test_no_script_answers_32601(worker, client):
    r = await client.post("/", json=rpc("x", "tasks/frobnicate"))
    assert r.status_code == 200
    assert r.json() == {"jsonrpc": "2.0", "id": "x", "error": {"code": -32601, "message": "no script for tasks/frobnicate"}}
    assert [u.method for u in worker.unmatched] == ["tasks/frobnicate"]


async def test_scripts_are_consumed_fifo_then_fallbacks(worker, client):
    worker.on("GetTask", json_result="first")
    worker.on("GetTask", json_result="always", times=None)
    worker.on(ANY, json_result="any", times=None)
    results = [(await client.post("/", json=rpc(i, "GetTask"))).json()["result"] for i in range(3)]
    assert results == ["first", "always", "always"]
    assert (await client.post("/", json=rpc(9, "ListTasks"))).json()["result"] == "any"


async def test_handler_script(worker, client):
    worker.on("GetTask", handler=lambda req: JsonResult({"echo": req.params["id"]}), times=None)
    assert (await client.post("/", json=rpc(1, "GetTask", {"id": "t-9"}))).json()["result"] == {"echo": "t-9"}


async def test_requests_are_recorded(worker, client):
    worker.on("SendMessage", json_result={})
    await client.post("/a2a/tock/?x=1", json=rpc("m", "SendMessage", {"message": {"taskId": "t-16"}}),
                      headers={"A2A-Version": "1.0", "A2A-Extensions": "urn:x"})
    await client.post("/", content=b"{not json")
    await client.get("/.well-known/agent-card.json")
    reqs = worker.requests
    assert [r.method for r in reqs] == ["SendMessage", None, None]
    first = reqs[0]
    assert first.path == "/a2a/tock/" and first.query == "x=1" and first.http_method == "POST"
    assert first.headers["a2a-version"] == "1.0" and first.headers["a2a-extensions"] == "urn:x"
    assert first.json["params"]["message"]["taskId"] == "t-16" and first.rpc_id == "m"
    assert orjson.loads(first.body) == first.json
    assert reqs[1].body == b"{not json" and reqs[1].json is None
    assert worker.calls("SendMessage") == [first]
    assert len(worker.unmatched) == 2


async def test_unmatched_non_rpc_answers(worker, client):
    r = await client.post("/", content=b"{oops")
    assert r.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "no script: body is not JSON"}}
    r = await client.get("/nope")
    assert r.status_code == 404


async def test_on_path_rest_routes(worker, client):
    import re
    card = {"name": "Tock", "supportedInterfaces": []}
    worker.on_path("GET", "/.well-known/agent-card.json", json_body=card, headers={"etag": '"v1"'}, times=None)
    worker.on_path("GET", re.compile(r"/tasks/[^/]+"), json_body={"id": "t-1"})
    worker.on_path("POST", "/message:stream", sse=[Data({"task": {"id": "t-1"}}), Data({"statusUpdate": {}})])
    r = await client.get("/.well-known/agent-card.json")
    assert r.json() == card and r.headers["etag"] == '"v1"'
    assert (await client.get("/tasks/t-1")).json() == {"id": "t-1"}
    r = await client.post("/message:stream", json={"message": {}})
    assert r.headers["content-type"] == "text/event-stream" and "content-length" not in r.headers
    assert r.content == b'data: {"task":{"id":"t-1"}}\n\ndata: {"statusUpdate":{}}\n\n'
    assert worker.path_calls("POST", "/message:stream")[0].json == {"message": {}}


# ---------------------------------------------------------------- SSE


async def test_sse_gate_first_event_arrives_before_release(worker, client):
    gate = Gate()
    worker.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-3", "status": {}}}),
        gate,
        Event(result={"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}}}),
    ])
    async with client.stream("POST", "/", json=rpc(3, "SendStreamingMessage"),
                             headers={"accept": "text/event-stream"}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "text/event-stream"
        assert "content-length" not in resp.headers
        it, buf = resp.aiter_raw(), bytearray()
        await read_until(it, buf, b"\n\n")
        await await_until(gate.reached.is_set)  # the worker is parked at the gate ...
        assert not gate.is_set()
        assert bytes(buf) == b'data: {"jsonrpc":"2.0","id":3,"result":{"task":{"id":"t-3","status":{}}}}\n\n'
        gate.release()
        async for chunk in it:
            buf.extend(chunk)
    assert buf.endswith(b'"id":3,"result":{"statusUpdate":{"status":{"state":"TASK_STATE_COMPLETED"}}}}\n\n')
    await await_until(lambda: worker.streams_completed == 1 and worker.open_streams == 0)
    assert worker.stream_disconnects == 0


async def test_sse_split_writes_arrive_as_separate_chunks(worker, client):
    gate = Gate()
    part1 = b'data: {"jsonrpc":"2.0","id":"s-1","res'
    part2 = b'ult":{"x":1}}\n\n: ping\n\nid: 4\nevent: message\nretry: 100\ndata: {}\n\n'
    worker.on("SendStreamingMessage", sse=[part1, gate, part2])
    async with client.stream("POST", "/", json=rpc("s-1", "SendStreamingMessage")) as resp:
        it, buf = resp.aiter_raw(), bytearray()
        await read_until(it, buf, b"res")
        assert bytes(buf) == part1  # exactly the first write, nothing more
        gate.release()
        async for chunk in it:
            buf.extend(chunk)
    assert bytes(buf) == part1 + part2


async def test_sse_crlf_event_name_error_and_close(worker, client):
    worker.on("message/stream", crlf=True, sse=[
        Event(result={"kind": "task"}, id="other"),
        Event(error={"code": -32006, "message": "bad"}, event="error"),
        Close(),
        Event(result="never sent"),
    ])
    r = await client.post("/", json=rpc(4, "message/stream"))
    assert r.content == (
        b'data: {"jsonrpc":"2.0","id":"other","result":{"kind":"task"}}\r\n\r\n'
        b'event: error\r\ndata: {"jsonrpc":"2.0","id":4,"error":{"code":-32006,"message":"bad"}}\r\n\r\n'
    )


async def test_sse_client_disconnect_is_tracked(worker, client):
    worker.on("SubscribeToTask", sse=[Event(result={"task": {}})], hold_open=True)
    async with client.stream("POST", "/", json=rpc(8, "SubscribeToTask")) as resp:
        it, buf = resp.aiter_raw(), bytearray()
        await read_until(it, buf, b"\n\n")
        assert worker.open_streams == 1 and not worker.stream_closed.is_set()
    # leaving the block closes the client side of the connection
    await await_until(worker.stream_closed.is_set, timeout=3)
    assert worker.stream_disconnects == 1
    assert worker.calls("SubscribeToTask")[0].disconnected.is_set()
    await await_until(lambda: worker.open_streams == 0)
    assert worker.streams_completed == 0


async def test_close_streams_ends_held_open_stream(worker, client):
    worker.on("SubscribeToTask", sse=[Event(result=1)], hold_open=True)
    async with client.stream("POST", "/", json=rpc(1, "SubscribeToTask")) as resp:
        it, buf = resp.aiter_raw(), bytearray()
        await read_until(it, buf, b"\n\n")
        worker.close_streams()
        async for chunk in it:
            buf.extend(chunk)
    # the worker thread counts the stream after its last send: wait for it, do not race it
    await await_until(lambda: worker.streams_completed == 1)
    assert worker.stream_disconnects == 0


def test_unreleased_gate_does_not_block_server_shutdown(worker):
    worker.on("SubscribeToTask", sse=[Event(result=1), Gate()])
    with serve_in_thread(worker) as srv:
        with httpx.Client(trust_env=False, timeout=5) as c, c.stream("POST", srv.url, json=rpc(1, "SubscribeToTask")) as r:
            assert next(r.iter_raw()).startswith(b"data: ")
            # leaving serve_in_thread with the gate closed must still stop promptly
    assert not srv.thread.is_alive()


async def test_sse_disconnect_while_parked_at_gate(worker, client):
    gate = Gate()
    worker.on("SendStreamingMessage", sse=[Event(result=1), gate, Event(result=2)])
    async with client.stream("POST", "/", json=rpc(1, "SendStreamingMessage")) as resp:
        await read_until(resp.aiter_raw(), bytearray(), b"\n\n")
        await await_until(gate.reached.is_set)
    await await_until(worker.stream_closed.is_set, timeout=3)
    await await_until(lambda: worker.open_streams == 0)
    assert worker.errors == []


async def test_sse_abort_cuts_connection_mid_body(worker, client):
    from tests.support.scripted_worker import Abort, Pause

    worker.on("SendStreamingMessage", sse=[Event(result=1), Pause(0.01), b"data: {\"partial", Abort()])
    with pytest.raises(httpx.RemoteProtocolError):
        await client.post("/", json=rpc(1, "SendStreamingMessage"))
    assert len(worker.calls("SendStreamingMessage")) == 1
