"""Property 2: whatever REST request a client sends below a mount, the gateway never answers
with a 5xx (the worker behind it is healthy), its own refusals are JSON in the error form of
the client's version, and a request it refuses as malformed is not forwarded.

Generated: the v1.0 and v0.3 REST operations of docs/protocol.md §1.3 with the verbs §1.5
reads them by (and wrong verbs), under a base (a tenant, the worker's REST prefix, both, a
``/v1`` that is part of a v1.0 base URL), in odd letter case and with a trailing ``/``; task
and config ids that are unicode, ``%``-escapes (``%2F``, ``%3A``, ``%00``, ``%zz``, a lone
``%``), ``:``, dot segments and very long; odd query strings (``A2A-Version``, ``tenant``,
repeated and broken parameters); bodies of every shape (a good send, other JSON, JSON that is
no object, deep nesting, non-JSON, invalid UTF-8, none); with and without ``A2A-Version``.

What must hold (docs/protocol.md §1.5, §6.3):

* HTTP status below 500;
* an answer of the gateway's own (nothing forwarded) is JSON: for v1.0 a ``google.rpc.Status``
  ``{"error": {"code": <the HTTP status>, "status", "message", "details"?}}``, for v0.3
  ``{"code", "message", "type"}`` — the version being v0.3 exactly when a ``/v1`` segment
  comes right before the operation and the client does not say ``A2A-Version: 1.x``;
* a send, stream or push-config create whose body is no JSON object is refused (HTTP 400)
  and not forwarded;
* whatever is forwarded is forwarded once, as sent (verb, path, query, body), and the healthy
  worker's answer comes back unchanged but for state spellings.

Examples: 200 (``A2A_FUZZ_EXAMPLES`` for more; see tests/fuzz/conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz.conftest import fuzz, running_harness
from tests.fuzz.oracles import respelled, sse_events
from tests.fuzz.strategies import deep_text, value_text
from tests.fuzz.support import client_calls, loads_or_invalid, send_raw, sse_frames
from tests.fuzz.workers import TERMINAL_TASK, HealthyWorker
from tests.proxy.conftest import Harness

# (verbs, tail with {id} / {cid}, operation): docs/protocol.md §1.3 and §1.5
OPERATIONS = (
    ("POST", "/message:send", "send"),
    ("POST", "/message:stream", "stream"),
    ("GET", "/tasks", "list"),
    ("GET", "/tasks/{id}", "get"),
    ("POST", "/tasks/{id}:cancel", "cancel"),
    ("GET POST", "/tasks/{id}:subscribe", "subscribe"),
    ("POST", "/tasks/{id}/pushNotificationConfigs", "push-create"),
    ("GET", "/tasks/{id}/pushNotificationConfigs", "push-list"),
    ("GET DELETE", "/tasks/{id}/pushNotificationConfigs/{cid}", "push-get"),
    ("GET", "/extendedAgentCard", "card"),
    ("GET", "/card", "card-v03"),  # /v1/card only
)
JSON_BODY_OPS = frozenset({"send", "stream", "push-create"})
BASES = st.sampled_from(["", "", "", "/tenant-1", "/rest", "/tenant-1/rest", "/t%C3%BC", "/v1", "/a/b/c"])
CLEAN_IDS = st.sampled_from(["t-1", "t-2", "t-done", "t-done", "urn:uuid:0f24", "T_1", "x" * 40])
ODD_IDS = st.one_of(
    st.sampled_from(["a%2Fb", "%3A", "a:b", "a%3Acancel", "%2e%2e", "..", ".", "%", "%zz", "%00", "%C3%BC",
                     "%FF", "~!$&'()*+,;=@", "x" * 3000, "%2F", "tasks", "message:send", "%20", "a%25b"]),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=8).map(lambda t: quote(t, safe="")),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=8).map(lambda t: quote(t, safe=":@!$&'()*+,;=")),
)
QUERIES = st.sampled_from(["", "", "", "?historyLength=3", "?A2A-Version=1.0", "?a2a-version=0.3", "?tenant=t-9",
                           "?a=%zz&&=&b", "?historyLength=-1&historyLength=x", "?pageSize=1000&status=TASK_STATE_WORKING",
                           "?" + "q" * 2000, "?%00=%00"])
VERSIONS = st.sampled_from([None, None, "1.0", "1.0", "0.3", "1.1", "garbage"])


def _good_send(v03: bool) -> bytes:
    if v03:  # v0.3 REST speaks ProtoJSON (docs/protocol.md §3.2, §11 pitfall 11)
        msg = {"messageId": "m-1", "role": "ROLE_USER", "content": [{"text": "hi"}]}
        return json.dumps({"request": msg}).encode()
    return json.dumps({"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}).encode()


@st.composite
def bodies(draw: st.DrawFn, op: str, v03: bool) -> bytes | None:
    kind = draw(st.sampled_from(["good"] * 5 + ["follow-up", "json", "array", "scalar", "deep", "bytes", "bad-utf8",
                                                "empty", "none", "truncated"]))
    good = _good_send(v03) if op in ("send", "stream") else b'{"url":"https://example.invalid/hook","id":"p-1"}'
    if kind == "good":
        return good
    if kind == "follow-up":
        tid = draw(CLEAN_IDS)
        return json.dumps({"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "more"}],
                                       "taskId": tid}}).encode()
    if kind == "json":
        return ('{"message":' + draw(value_text(6)) + "}").encode()
    if kind == "array":
        return b"[" + good + b"]"
    if kind == "scalar":
        return draw(st.sampled_from([b"null", b"1", b'"x"', b"true"]))
    if kind == "deep":
        return ('{"message":{"messageId":"m","role":"ROLE_USER","parts":[],"metadata":' + draw(deep_text()) + "}}").encode()
    if kind == "bytes":
        return draw(st.binary(max_size=30))
    if kind == "bad-utf8":
        return good[:5] + b"\xff" + good[5:]
    if kind == "empty":
        return b""
    if kind == "none":
        return None
    return good[: draw(st.integers(0, len(good) - 1))]


@st.composite
def rest_request(draw: st.DrawFn) -> dict[str, Any]:
    verbs, tail, op = draw(st.sampled_from(OPERATIONS))
    verb = draw(st.sampled_from(verbs.split()))
    if draw(st.integers(0, 9)) == 4:
        verb = draw(st.sampled_from(["PUT", "PATCH", "DELETE", "GET", "POST", "OPTIONS"]))
    clean = draw(st.integers(0, 2)) > 0
    task_id = draw(CLEAN_IDS if clean else ODD_IDS)
    config_id = draw(CLEAN_IDS if clean else ODD_IDS)
    base = draw(BASES)
    v1 = draw(st.booleans()) or op == "card-v03"
    path = base + ("/v1" if v1 else "") + tail.replace("{id}", task_id).replace("{cid}", config_id)
    if draw(st.integers(0, 9)) == 4:
        path = path.upper() if draw(st.booleans()) else path + "/"
    query = draw(QUERIES)
    version = draw(VERSIONS)
    v03 = (v1 or base.endswith("/v1")) and not (version or "").strip().startswith("1")
    if version is None and "A2A-Version=1.0" in query:
        v03 = False  # the query parameter stands in for the header (docs/protocol.md §1.5)
    body = draw(bodies(op, v03)) if verb in ("POST", "PUT", "PATCH") else None
    ctype = draw(st.sampled_from(["application/json"] * 4 + ["application/a2a+json", "text/plain", None]))
    return {"verb": verb, "path": path, "query": query, "version": version, "body": body, "ctype": ctype,
            "op": op if verb in verbs.split() else None, "clean": clean, "v03": v03}


@pytest.fixture(scope="module")
def fh() -> Iterator[Harness]:
    with running_harness() as h:
        yield h


@pytest.fixture(scope="module")
def healthy(fh: Harness) -> HealthyWorker:
    worker = HealthyWorker(fh.worker)
    primed = send_raw(fh, "GET", b"/tasks/" + TERMINAL_TASK.encode(), headers={"A2A-Version": "1.0"})
    assert b"TASK_STATE_COMPLETED" in primed.body  # the ledger holds t-done as completed (F05)
    return worker


def check_own_error(reply: Any, v03: bool, doc: Any) -> None:
    """A refusal of the gateway's own in the client's version's REST form (docs/protocol.md
    §1.5, §6.3)."""
    assert reply.media == "application/json", (reply.status, reply.headers, reply.body[:200])
    assert isinstance(doc, dict), reply.body[:300]
    if "error" in doc and isinstance(doc["error"], dict):  # google.rpc.Status
        err = doc["error"]
        assert err.get("code") == reply.status, reply.body[:300]
        assert isinstance(err.get("status"), str) and isinstance(err.get("message"), str), reply.body[:300]
        assert isinstance(err.get("details", []), list), reply.body[:300]
        assert not v03 or reply.status == 400 and "path" in err["message"], (
            f"a v0.3 call refused in the v1.0 form: {reply.body[:300]!r}")  # (a bad path is refused before routing)
    else:
        assert v03, f"a v1.0 call refused in the v0.3 form: {reply.body[:300]!r}"
        assert isinstance(doc.get("code"), int) and isinstance(doc.get("message"), str), reply.body[:300]
        assert isinstance(doc.get("type", ""), str), reply.body[:300]


@fuzz(200)
@given(req=rest_request())
def test_rest_client_requests(fh: Harness, healthy: HealthyWorker, req: dict[str, Any]) -> None:
    headers = {}
    if req["version"] is not None:
        headers["A2A-Version"] = req["version"]
    if req["ctype"] is not None and req["body"] is not None:
        headers["content-type"] = req["ctype"]
    before = len(fh.worker.requests)
    target = (req["path"] + req["query"]).encode()
    reply = send_raw(fh, req["verb"], target, req["body"], headers)
    forwarded = client_calls(fh, before)

    assert reply.status < 500, (reply.status, reply.body[:300])
    doc = loads_or_invalid(reply.body) if reply.media != "text/event-stream" else None
    body_ok = isinstance(loads_or_invalid(req["body"] or b""), dict)
    malformed = req["op"] in JSON_BODY_OPS and not body_ok and req["clean"]
    if not forwarded:
        event(f"gateway's own {reply.status}" + (" (malformed body)" if malformed else ""))
        assert 400 <= reply.status < 500, (reply.status, reply.body[:300])
        check_own_error(reply, req["v03"], doc)
        return
    assert not malformed, f"a {req['op']} with a body that is no JSON object was forwarded: {req['body']!r}"
    event(f"forwarded {req['op']}")
    assert len(forwarded) == 1, [(r.http_method, r.path) for r in forwarded]
    sent = forwarded[0]
    assert sent.http_method == req["verb"]
    assert sent.query == req["query"].removeprefix("?")
    assert sent.path == unquote(req["path"], errors="replace"), (sent.path, req["path"])
    if req["verb"] not in ("GET", "DELETE"):
        assert sent.body == (req["body"] or b"")
    answered = healthy.answered(sent)
    if reply.media == "text/event-stream":
        got = [loads_or_invalid(f.data or b"") for f in sse_frames(reply.body) if f.data is not None]
        want = [e.doc for e in sse_events(b"".join(answered.steps))]
        assert len(got) == len(want) and all(respelled(w, g, "1.0") for w, g in zip(want, got)), (want, got)
        return
    if 200 <= reply.status < 300 and req["op"] not in ("card", "card-v03"):
        assert respelled(loads_or_invalid(answered.body), doc, "1.0"), (answered.body, reply.body)
