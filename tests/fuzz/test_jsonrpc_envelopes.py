"""Property 1: whatever a client POSTs to a JSON-RPC endpoint, the gateway answers it — never
with a 5xx (the worker behind it is healthy) — in a JSON-RPC 2.0 response carrying the
client's id, and it never forwards a request it refuses as malformed.

Generated (tests/fuzz/strategies.py): envelopes with ``jsonrpc`` present, absent or wrong;
ids of every JSON type (integers beyond 64 bits, floats in any spelling, unicode strings,
null, booleans, objects, arrays); every v1.0 and v0.3 method name of docs/protocol.md §1.2,
near misses and unknown ones; params of every shape (missing, arrays, wrong types, junk,
nested a few hundred levels); duplicate and escaped member names; batches; non-JSON bytes,
truncated JSON, invalid UTF-8, a BOM, NaN, lone surrogates, trailing bytes; with and without
``A2A-Version``, plain or asking for SSE.

A body nested deeper than ``limits.max_json_depth`` (128) is -32600 before anything else, with
the client's id as it wrote it, read from the envelope alone (past orjson's 1 024 levels too)
unless it is unreadable. The oracle for "malformed" is docs/field-cases.md F15 (and docs/protocol.md §11 pitfall 17 for
batches), applied to the body as a strict JSON parser reads it: -32700 for what is not JSON,
-32600 for a batch, a non-object, an invalid id (then answered with id null), a wrong
``jsonrpc`` or a method that is no non-empty string, -32602 for an A2A method whose params are
present but no object, -32601 for an unknown name in a v0.3 namespace. A message, cancel
or subscribe naming ``t-done`` — a task the gateway's ledger holds as completed — is refused
by the gateway too (F05: -32002 for a cancel, -32004 otherwise; F17 (b): as an SSE error
event for a v0.3 streaming call, plain JSON for v1.0). Everything else is forwarded — once, byte for byte, with the client's ``A2A-Version`` as it was (docs/protocol.md
§11 pitfall 2) — and the healthy worker's answer comes back with the client's id.

Examples: 200 (``A2A_FUZZ_EXAMPLES`` for more; see tests/fuzz/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from tests.fuzz.conftest import fuzz, running_harness
from tests.fuzz.strategies import A2A_METHODS, STREAMING_METHODS, V03_NAMESPACES, client_body
from tests.fuzz.support import (
    INVALID,
    ClientId,
    check_jsonrpc_reply,
    client_calls,
    envelope_id,
    is_valid_id,
    loads_or_invalid,
    too_deep,
    raw_member,
    send,
)
from tests.fuzz.workers import TERMINAL_TASK, HealthyWorker
from tests.proxy.conftest import Harness

ENVELOPE_CODES = frozenset({-32700, -32600, -32601, -32602})
VERSIONS = st.sampled_from([None, None, "1.0", "1.0", "0.3", "1.1", "2.0", "", "x"])


@pytest.fixture(scope="module")
def fh() -> Iterator[Harness]:
    with running_harness() as h:
        HealthyWorker(h.worker)
        primed = send(h, "POST", b"/", b'{"jsonrpc":"2.0","id":0,"method":"GetTask","params":{"id":"%s"}}'
                      % TERMINAL_TASK.encode(), {"content-type": "application/json", "A2A-Version": "1.0"})
        assert b"TASK_STATE_COMPLETED" in primed.body  # the ledger holds t-done as completed
        yield h


SENDS = ("SendMessage", "SendStreamingMessage", "message/send", "message/stream")


def terminal_refusal(doc: dict[str, Any]) -> int | None:
    """docs/field-cases.md F05: an action on ``t-done``, which the gateway's ledger holds as
    completed, is refused by the gateway itself — -32002 for a cancel, -32004 for a message
    or a subscribe; ``None`` for any other request."""
    method, params = doc["method"], doc.get("params")
    if not isinstance(params, dict):
        return None
    if method in SENDS:
        message = params.get("message", params.get("request"))
        named = message.get("taskId") if isinstance(message, dict) else None
        return -32004 if named == TERMINAL_TASK else None
    if method in ("CancelTask", "tasks/cancel", "SubscribeToTask", "tasks/resubscribe"):
        if params.get("id") != TERMINAL_TASK:
            return None
        return -32002 if "ancel" in method else -32004
    return None


def expected_refusal(doc: Any) -> int | None:
    """The JSON-RPC error the gateway answers itself for this request (docs/field-cases.md
    F15), or ``None`` for a request it must forward."""
    if doc is INVALID:
        return -32700
    if not isinstance(doc, dict):  # a batch (docs/protocol.md §11 pitfall 17) or a scalar
        return -32600
    if not is_valid_id(doc.get("id")):
        return -32600
    if doc.get("jsonrpc") != "2.0":
        return -32600
    method = doc.get("method")
    if not isinstance(method, str) or not method:
        return -32600
    if method in A2A_METHODS and "params" in doc and not isinstance(doc["params"], dict):
        return -32602
    if method not in A2A_METHODS and method.startswith(V03_NAMESPACES):
        return -32601
    return None


def exchange(h: Harness, body: bytes, version: str | None, sse: bool) -> None:
    """Send ``body`` and check every property of the answer (the body of both tests)."""
    headers = {"content-type": "application/json"}
    if version is not None:
        headers["A2A-Version"] = version
    if sse:
        headers["accept"] = "text/event-stream"
    doc = loads_or_invalid(body)
    refusal = expected_refusal(doc)
    want = ClientId.of(body, doc)
    if too_deep(body):  # refused before anything else, with the id read from the envelope alone
        refusal = -32600
        want = envelope_id(body)
    before = len(h.worker.requests)

    reply = send(h, "POST", b"/", body, headers)
    forwarded = client_calls(h, before)
    event(f"refusal {refusal}" if refusal else f"forwarded {reply.media}")

    assert reply.status < 500, (reply.status, reply.body[:300])
    docs = check_jsonrpc_reply(reply, want)
    codes = [d["error"]["code"] for d in docs if "error" in d]
    if refusal is not None:
        # F15: answered by the gateway itself, HTTP 200, one JSON-RPC error, nothing forwarded
        assert reply.status == 200 and reply.media == "application/json", (reply.status, reply.headers)
        assert codes == [refusal], (refusal, reply.body[:300])
        assert forwarded == [], [r.body[:200] for r in forwarded]
        return
    assert not set(codes) & ENVELOPE_CODES, reply.body[:300]
    refused = terminal_refusal(doc)
    if refused is not None:
        event("terminal task refused")
        assert codes == [refused] and forwarded == [], (refused, reply.body[:300])
        # F17 (b): a v0.3 streaming call is refused as an SSE stream of one error event, v1.0 as JSON
        v03_stream = doc["method"] in ("message/stream", "tasks/resubscribe")
        assert reply.media == ("text/event-stream" if v03_stream else "application/json"), reply.headers
        return
    assert len(forwarded) == 1, [r.body[:200] for r in forwarded]
    sent = forwarded[0]
    assert sent.http_method == "POST" and sent.path == "/"
    assert sent.body == body  # as the client sent it: never re-encoded
    assert sent.headers.get("a2a-version") == version  # passed on as it is, never added
    assert all("result" in d for d in docs), reply.body[:300]  # the healthy worker's answer
    if doc["method"] in STREAMING_METHODS:
        assert reply.media in ("text/event-stream", "application/json"), reply.headers


@fuzz(200)
@given(body=client_body(), version=VERSIONS, sse=st.booleans())
@example(body=b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"GetTask","params":{"id":"t-1"}}',
         version="1.0", sse=False)
@example(body=b'{"jsonrpc":"2.0","id":-0.0,"method":"SubscribeToTask","params":{"id":"t-1"}}', version="1.0", sse=True)
@example(body=b'{"jsonrpc":"2.0","id":"\\u00fc","method":"tasks/resubscribe","params":{"id":"t-1"}}', version=None,
         sse=True)
def test_jsonrpc_client_envelopes(fh: Harness, body: bytes, version: str | None, sse: bool) -> None:
    exchange(fh, body, version, sse)


# ------------------------------------------------------------------------------ defects the suite found (fixed)

@pytest.mark.parametrize("raw_id", [b"1e5", b"1.50", b"-0", b"1e-400", b"100000000000000000000000000.5"])
def test_a_numeric_id_comes_back_as_the_client_wrote_it(fh: Harness, raw_id: bytes) -> None:
    """Found by the fuzz suite (1e5 came back as 100000.0, 1.50 as 1.5, 1e-400 as 0.0, a
    decimal beyond double precision rounded): a v0.3-namespace method no version defines,
    answered -32601 by the gateway itself; the answer's id text is the request's (F15)."""
    body = b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"tasks/frobnicate","params":{}}'
    reply = send(fh, "POST", b"/", body, {"content-type": "application/json", "A2A-Version": "1.0"})
    assert reply.status == 200
    assert raw_member(reply.body, "id") == raw_id, reply.body
