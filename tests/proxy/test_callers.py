"""docs/callers.md through the real gateway (real uvicorn on 127.0.0.1, a scripted worker that
keeps its tasks per tenant and per owner, as a shared worker does): local answers only to the
callers seen on a task, tenants kept apart, rotated caller secrets, bearer JWTs."""

from __future__ import annotations

import asyncio

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from gateway.a2a import jsonrpc
from tests.proxy.conftest import Harness
from tests.support.scripted_worker import JsonError, JsonResult, ReceivedRequest
from tests.support.servers import serve_in_thread, wait_until

V1 = {"A2A-Version": "1.0"}
ALICE = {**V1, "Authorization": "Bearer alice"}
MALLORY = {**V1, "Authorization": "Bearer mallory"}
SECRET_ENV = "A2A_GATEWAY_CALLER_SECRET"


class OwnedTasks:
    """A worker's task store: tasks per (tenant, id), each owned by the caller (the
    ``Authorization`` header) that created it; anyone else is told "task not found", as a
    shared worker tells a caller a task it may not see. ``public`` tasks are shown to all."""

    def __init__(self) -> None:
        self.tasks: dict[tuple[str, str], dict[str, Any]] = {}
        self.public: set[tuple[str, str]] = set()

    def task(self, tenant: str, tid: str, state: str, owner: str | None) -> dict[str, Any]:
        doc = {"id": tid, "contextId": f"ctx-{tenant}-{tid}", "status": {"state": state},
               "metadata": {"owner": owner, "tenant": tenant}}
        self.tasks[(tenant, tid)] = doc
        return doc

    def visible(self, tenant: str, tid: str, caller: str | None) -> dict[str, Any] | None:
        doc = self.tasks.get((tenant, tid))
        if doc is None:
            return None
        if (tenant, tid) in self.public or doc["metadata"]["owner"] == caller:
            return doc
        return None

    def rpc(self, req: ReceivedRequest) -> Any:
        params = req.params or {}
        tenant, caller = params.get("tenant", ""), req.headers.get("authorization")
        if req.method == "SendMessage":
            message = params["message"]
            tid = message.get("taskId")
            if tid is None:  # a new task, done at once
                return JsonResult({"task": self.task(tenant, f"t-{uuid.uuid4().hex[:8]}", "TASK_STATE_COMPLETED", caller)})
            if self.visible(tenant, tid, caller) is None:
                return JsonError({"code": jsonrpc.TASK_NOT_FOUND, "message": f"task {tid} not found"})
            return JsonError({"code": jsonrpc.UNSUPPORTED_OPERATION, "message": "task is terminal"})
        tid = params.get("id")
        doc = self.visible(tenant, tid, caller)
        if doc is None:
            return JsonError({"code": jsonrpc.TASK_NOT_FOUND, "message": f"task {tid} not found"})
        return JsonResult(doc)


def _serve(h: Harness, store: OwnedTasks) -> None:
    for method in ("SendMessage", "GetTask", "CancelTask"):
        h.worker.on(method, handler=store.rpc, times=None)


def _send(h: Harness, headers: dict[str, str], task_id: str | None = None, tenant: str | None = None,
          rid: str = "r-1") -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    if task_id is not None:
        message["taskId"] = task_id
    params: dict[str, Any] = {"message": message}
    if tenant is not None:
        params["tenant"] = tenant
    r = h.rpc({"jsonrpc": "2.0", "id": rid, "method": "SendMessage", "params": params}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def _sends_seen(h: Harness, authorization: str) -> list[ReceivedRequest]:
    return [r for r in h.worker.calls("SendMessage") if r.headers.get("authorization") == authorization]


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "s3cret-" + uuid.uuid4().hex
    monkeypatch.setenv(SECRET_ENV, value)
    return value


def test_another_callers_message_to_a_terminal_task_reaches_the_worker_which_decides(
        make_harness: Any, secret: str, caplog: pytest.LogCaptureFixture) -> None:
    """The issue's scenario: A completes a task; B names it; B's request reaches the worker,
    B gets the worker's answer (task not found), counted; A still gets the local -32004 and
    the worker is not asked. Neither B's identity nor a fingerprint is logged."""
    h = make_harness()
    store = OwnedTasks()
    _serve(h, store)
    created = _send(h, ALICE)
    tid = created["result"]["task"]["id"]
    record = h.on_gateway_loop(h.runtime.ledger.get("worker", tid)).record
    assert record.terminal and len(record.callers) == 1

    with caplog.at_level(logging.INFO, logger="a2a_gateway"):
        answer = _send(h, MALLORY, tid, rid="b-1")
    assert answer["id"] == "b-1" and answer["error"]["code"] == jsonrpc.TASK_NOT_FOUND, answer
    assert "terminal" not in answer["error"]["message"]
    assert len(_sends_seen(h, "Bearer mallory")) == 1  # the worker decided
    assert h.metric("a2a_gateway_local_answer_skipped_total", upstream="worker", reason="unknown_caller") >= 1
    skipped = [r for r in caplog.records if r.getMessage() == "local_answer_skipped"]
    assert skipped and all(getattr(r, "task_id") == tid for r in skipped)
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "mallory" not in logged and not any(fp in logged for fp in record.callers)
    after = h.on_gateway_loop(h.runtime.ledger.get("worker", tid)).record
    assert after.callers == record.callers  # the worker did not answer B with the task

    before = len(h.worker.calls("SendMessage"))
    again = _send(h, ALICE, tid, rid="a-2")
    assert again["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION and "terminal" in again["error"]["message"]
    assert len(h.worker.calls("SendMessage")) == before  # answered here


def test_a_cancel_of_another_callers_terminal_task_goes_to_the_worker(make_harness: Any, secret: str) -> None:
    h = make_harness()
    store = OwnedTasks()
    _serve(h, store)
    tid = _send(h, ALICE)["result"]["task"]["id"]
    r = h.rpc({"jsonrpc": "2.0", "id": 7, "method": "CancelTask", "params": {"id": tid}}, headers=MALLORY)
    assert r.json()["error"]["code"] == jsonrpc.TASK_NOT_FOUND
    assert [c.headers.get("authorization") for c in h.worker.calls("CancelTask")] == ["Bearer mallory"]
    r = h.rpc({"jsonrpc": "2.0", "id": 8, "method": "CancelTask", "params": {"id": tid}}, headers=ALICE)
    assert r.json()["error"]["code"] == jsonrpc.TASK_NOT_CANCELABLE
    assert len(h.worker.calls("CancelTask")) == 1  # Alice's was answered here


def test_a_caller_the_worker_answers_with_the_task_is_recorded_as_seen(make_harness: Any, secret: str) -> None:
    """When the worker shows B the task (GetTask), B is seen on it from then on: B's next
    message to the terminal task is answered here."""
    h = make_harness()
    store = OwnedTasks()
    _serve(h, store)
    tid = _send(h, ALICE)["result"]["task"]["id"]
    store.public.add(("", tid))
    r = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": tid}}, headers=MALLORY)
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(h.on_gateway_loop(h.runtime.ledger.get("worker", tid)).record.callers) == 2
    answer = _send(h, MALLORY, tid)
    assert answer["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION
    assert _sends_seen(h, "Bearer mallory") == []


def test_requests_without_an_identity_are_one_caller_anonymous(make_harness: Any, secret: str) -> None:
    """No ``Authorization``: the caller ``anonymous``, a caller of its own — seen on its own
    tasks, never on Alice's."""
    h = make_harness()
    store = OwnedTasks()
    _serve(h, store)
    mine = _send(h, V1)["result"]["task"]["id"]
    assert _send(h, V1, mine)["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION  # local
    alices = _send(h, ALICE)["result"]["task"]["id"]
    assert _send(h, V1, alices)["error"]["code"] == jsonrpc.TASK_NOT_FOUND  # the worker's
    assert [c.headers.get("authorization") for c in h.worker.calls("SendMessage")] == [None, "Bearer alice", None]


# -- tenants -------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "redis"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The ledger the tenant tests run on: every backend keys records by tenant (docs/callers.md §1)."""
    if request.param == "memory":
        yield {"url": "memory"}
    elif request.param == "sqlite":
        yield {"url": f"sqlite:///{tmp_path}/ledger.db"}
    else:
        from tests.support.redis_server import redis_server

        with redis_server() as url:
            yield {"url": url}


def test_two_tenants_with_the_same_task_id_keep_separate_records_over_json_rpc(
        make_harness: Any, secret: str, ledger: dict[str, Any]) -> None:
    h = make_harness(ledger=ledger)
    store = OwnedTasks()
    _serve(h, store)
    store.task("acme", "t-same", "TASK_STATE_COMPLETED", "Bearer alice")
    store.task("beta", "t-same", "TASK_STATE_WORKING", "Bearer alice")
    for tenant in ("acme", "beta"):
        r = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                   "params": {"tenant": tenant, "id": "t-same"}}, headers=ALICE)
        assert r.json()["result"]["metadata"]["tenant"] == tenant
    ledger = h.runtime.ledger
    acme = h.on_gateway_loop(ledger.get("worker", "t-same", tenant="acme")).record
    beta = h.on_gateway_loop(ledger.get("worker", "t-same", tenant="beta")).record
    assert (acme.state.value, acme.tenant) == ("TASK_STATE_COMPLETED", "acme")
    assert (beta.state.value, beta.tenant) == ("TASK_STATE_WORKING", "beta")
    assert h.on_gateway_loop(ledger.get("worker", "t-same")) is None  # no tenant: a namespace of its own
    # acme's terminal record answers acme's message; beta's live task is the worker's
    assert _send(h, ALICE, "t-same", tenant="acme")["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION
    assert _sends_seen(h, "Bearer alice") == []
    _send(h, ALICE, "t-same", tenant="beta")
    assert [c.params["tenant"] for c in _sends_seen(h, "Bearer alice")] == ["beta"]
    # metrics carry no tenant (nor a caller): no label named tenant, no series naming acme
    scraped = h.http.get(h.admin.url + "/metrics").text
    assert "tenant=" not in scraped and "acme" not in scraped and "beta" not in scraped
    assert not any(fp in scraped for fp in acme.callers)


def test_the_gateways_own_get_task_carries_the_clients_tenant(make_harness: Any, secret: str) -> None:
    """A worker error to acme's message is checked with a GetTask in acme (docs/callers.md §1)."""
    h = make_harness()
    store = OwnedTasks()
    h.worker.on("SendMessage", json_error={"code": jsonrpc.INTERNAL_ERROR, "message": "oops"})
    h.worker.on("GetTask", handler=store.rpc, times=None)
    store.task("acme", "t-9", "TASK_STATE_COMPLETED", "Bearer alice")
    answer = _send(h, ALICE, "t-9", tenant="acme")  # unknown to the gateway: forwarded
    assert answer["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION, answer  # rewritten after the probe
    assert [p.params.get("tenant") for p in h.worker.calls("GetTask")] == ["acme"]
    assert h.on_gateway_loop(h.runtime.ledger.get("worker", "t-9", tenant="acme")).record.terminal


def test_two_tenants_with_the_same_task_id_keep_separate_records_over_rest(
        make_harness: Any, secret: str, ledger: dict[str, Any]) -> None:
    h = make_harness(ledger=ledger)
    for tenant, state in (("acme", "TASK_STATE_COMPLETED"), ("beta", "TASK_STATE_WORKING")):
        h.worker.on_path("GET", f"/{tenant}/tasks/t-same",
                         json_body={"id": "t-same", "contextId": f"c-{tenant}", "status": {"state": state}})
        r, raw = h.rest("GET", f"/{tenant}/tasks/t-same", headers=ALICE)
        assert r.status_code == 200, raw
    ledger = h.runtime.ledger
    acme = h.on_gateway_loop(ledger.get("worker", "t-same", tenant="acme")).record
    beta = h.on_gateway_loop(ledger.get("worker", "t-same", tenant="beta")).record
    assert acme.terminal and not beta.terminal and (acme.context_id, beta.context_id) == ("c-acme", "c-beta")
    # the same record over JSON-RPC: params.tenant "acme" is the REST path's "/acme"
    r = h.rpc({"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"tenant": "acme", "id": "t-same"}},
              headers=ALICE)
    assert r.json()["error"]["code"] == jsonrpc.TASK_NOT_CANCELABLE
    h.worker.on_path("POST", "/beta/tasks/t-same:cancel",
                     json_body={"id": "t-same", "contextId": "c-beta", "status": {"state": "TASK_STATE_CANCELED"}})
    r, raw = h.rest("POST", "/beta/tasks/t-same:cancel", headers=ALICE)
    assert r.status_code == 200 and orjson.loads(raw)["status"]["state"] == "TASK_STATE_CANCELED"


# -- the secret ------------------------------------------------------------------------------------


def test_a_rotated_secret_keeps_working_for_callers_seen_after_rotation(
        make_harness: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """docs/callers.md §4: [old] → [new, old] → [new]. A caller seen under the old secret is
    still recognised while it is listed; one seen after the rotation is recognised once the
    old secret is gone; one seen only under the old secret is then a stranger (forwarded)."""
    old, new = "old-secret-" + uuid.uuid4().hex, "new-secret-" + uuid.uuid4().hex
    ledger = {"url": f"sqlite:///{tmp_path}/ledger.db"}
    store = OwnedTasks()

    def gateway(*secrets: str) -> Harness:
        monkeypatch.setenv(SECRET_ENV, "\n".join(secrets))
        h = make_harness(ledger=ledger)
        _serve(h, store)
        return h

    first = gateway(old)
    alices = _send(first, ALICE)["result"]["task"]["id"]

    second = gateway(new, old)
    assert _send(second, ALICE, alices)["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION  # recognised
    carols = _send(second, {**V1, "Authorization": "Bearer carol"})["result"]["task"]["id"]
    assert second.worker.calls("SendMessage")[0].headers["authorization"] == "Bearer carol"

    third = gateway(new)
    assert _send(third, {**V1, "Authorization": "Bearer carol"}, carols)["error"]["code"] \
        == jsonrpc.UNSUPPORTED_OPERATION
    assert third.worker.calls("SendMessage") == []  # Carol was answered here
    assert _send(third, ALICE, alices)["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION  # the worker's own
    assert [c.headers["authorization"] for c in third.worker.calls("SendMessage")] == ["Bearer alice"]


def test_a_short_secret_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.app import build_app
    from gateway.config import parse_config
    from gateway.errors import ConfigError

    monkeypatch.setenv(SECRET_ENV, "short")
    with pytest.raises(ConfigError) as info:
        build_app(parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9"}],
                                "ledger": {"url": "memory"}}))
    assert "shorter than 16" in str(info.value.problems) and "short'" not in str(info.value.problems)


# -- bearer JWTs -----------------------------------------------------------------------------------

ISSUER, AUDIENCE = "https://issuer.test", "a2a-gateway-test"


class Keys:
    """RSA keys made for the test: ``known`` is in the JWKS the test serves, ``stranger`` not."""

    def __init__(self) -> None:
        self.known = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = RSAAlgorithm.to_jwk(self.known.public_key(), as_dict=True)
        self.jwks = {"keys": [{**jwk, "kid": "k-1", "use": "sig", "alg": "RS256"}]}
        self.fetches = 0

    def token(self, sub: str = "alice", *, key: Any = None, kid: str = "k-1", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + 300, **claims}
        return jwt.encode(body, key or self.known, algorithm="RS256", headers={"kid": kid})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:  # the JWKS server
        if scope["type"] != "http":
            return
        self.fetches += 1
        body = orjson.dumps(self.jwks)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def keys() -> Iterator[Keys]:
    made = Keys()
    with serve_in_thread(made, name="jwks") as server:
        made.url = server.url + "/jwks.json"  # type: ignore[attr-defined]
        yield made


@pytest.fixture
def guarded(make_harness: Any, keys: Keys, secret: str) -> Harness:
    h = make_harness(auth={"jwt": {"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": keys.url,  # type: ignore[attr-defined]
                                   "algorithms": ["RS256"]}},
                     callers={"identity": "jwt_subject"})
    _serve(h, OwnedTasks())
    return h


def _forged(keys: Keys, alg: str, signature: bytes | None = None) -> str:
    """A token of subject alice under the known kid, with header ``alg`` and ``signature``
    (default: HMAC-SHA256 keyed with the known key's public PEM, the algorithm-confusion attack)."""
    import base64
    import hashlib
    import hmac

    from cryptography.hazmat.primitives import serialization

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    now = int(time.time())
    head = b64(orjson.dumps({"alg": alg, "typ": "JWT", "kid": "k-1"}))
    body = b64(orjson.dumps({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 300}))
    if signature is None:
        pem = keys.known.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
        signature = hmac.new(pem, head + b"." + body, hashlib.sha256).digest()
    return (head + b"." + body + b"." + b64(signature)).decode()


def _bearer(token: str) -> dict[str, str]:
    return {**V1, "Authorization": f"Bearer {token}"}


def test_a_valid_jwt_is_accepted_and_its_subject_is_the_caller(guarded: Harness, keys: Keys) -> None:
    answer = _send(guarded, _bearer(keys.token("alice")))
    tid = answer["result"]["task"]["id"]
    # a new token of the same subject is the same caller: answered here
    assert _send(guarded, _bearer(keys.token("alice")), tid)["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION
    assert len(guarded.worker.calls("SendMessage")) == 1
    assert keys.fetches == 1  # cached


@pytest.mark.parametrize("case,reason", [("expired", "expired"), ("audience", "audience"),
                                         ("issuer", "issuer"), ("unknown_key", "unknown_key"),
                                         ("missing", "missing"), ("garbage", "invalid"),
                                         ("alg_none", "invalid"), ("hs256_public_key", "invalid")])
def test_a_refused_jwt_never_reaches_the_worker(guarded: Harness, keys: Keys, case: str, reason: str) -> None:
    tokens = {
        "expired": keys.token(exp=int(time.time()) - 3600, iat=int(time.time()) - 7200),
        "audience": keys.token(aud="someone-else"),
        "issuer": keys.token(iss="https://another-issuer.test"),
        "unknown_key": keys.token(key=keys.stranger, kid="k-2"),
        "garbage": "not.a.jwt",
        "alg_none": _forged(keys, "none", b""),
        "hs256_public_key": _forged(keys, "HS256"),  # the JWKS's public key as an HMAC secret
    }
    headers = V1 if case == "missing" else _bearer(tokens[case])
    r = guarded.rpc({"jsonrpc": "2.0", "id": "j-1", "method": "SendMessage",
                     "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}},
                    headers=headers)
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    doc = r.json()
    assert doc["id"] == "j-1" and doc["error"]["code"] == jsonrpc.INVALID_REQUEST
    rest, raw = guarded.rest("GET", "/tasks/t-1", headers=headers)
    assert rest.status_code == 401 and rest.headers["www-authenticate"].startswith("Bearer")
    assert orjson.loads(raw)["error"]["status"] == "UNAUTHENTICATED"
    passthrough, _ = guarded.rest("GET", "/some/other/path", headers=headers)
    assert passthrough.status_code == 401
    # v0.3: the JSON-RPC error with the client's id; the v0.3 REST body (code and type at the top)
    v03 = {k: v for k, v in headers.items() if k != "A2A-Version"}
    r = guarded.rpc({"jsonrpc": "2.0", "id": 41, "method": "tasks/get", "params": {"id": "t-1"}}, headers=v03)
    assert r.status_code == 401 and r.json()["id"] == 41 and r.json()["error"]["code"] == jsonrpc.INVALID_REQUEST
    rest, raw = guarded.rest("GET", "/v1/tasks/t-1", headers=v03)
    assert rest.status_code == 401 and rest.headers["www-authenticate"].startswith("Bearer")
    assert orjson.loads(raw)["code"] == jsonrpc.INVALID_REQUEST and "type" in orjson.loads(raw)
    assert guarded.rpc_calls() == []  # nothing reached the worker
    assert guarded.metric("a2a_gateway_auth_failures_total", upstream="worker", reason=reason) == 5
    if case == "unknown_key":
        assert keys.fetches == 1  # a refetch for the unknown key waits REFETCH_SECONDS


def test_the_agent_card_stays_public(guarded: Harness) -> None:
    r, raw = guarded.rest("GET", "/.well-known/agent-card.json")
    assert r.status_code == 200 and orjson.loads(raw)["name"]
    # everything else needs the token first, even a malformed body (no parse error before it)
    r = guarded.rpc(b'{"jsonrpc": "2.0", "id": 5, "method": ', headers=V1)
    assert r.status_code == 401 and r.json()["error"]["code"] == jsonrpc.INVALID_REQUEST
    assert guarded.rpc_calls() == []


def test_a_jwks_file_works_without_fetching(make_harness: Any, keys: Keys, tmp_path: Path, secret: str) -> None:
    path = tmp_path / "jwks.json"
    path.write_bytes(orjson.dumps(keys.jwks))
    h = make_harness(auth={"jwt": {"issuer": ISSUER, "audience": [AUDIENCE, "other"], "jwks_file": str(path)}})
    _serve(h, OwnedTasks())
    assert "result" in _send(h, _bearer(keys.token()))
    r = h.rpc({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "x"}},
              headers=_bearer(keys.token(key=keys.stranger, kid="k-2")))
    assert r.status_code == 401 and keys.fetches == 0


# -- resuming a stream (docs/callers.md §3) ------------------------------------------------------


def test_a_resume_from_the_window_is_replayed_only_to_a_caller_seen(make_harness: Any, secret: str) -> None:
    """Alice's stream fills the replay window; Mallory resuming with one of its ids is sent
    to the worker as a plain subscribe (the worker says "task not found"); Alice gets the
    window's next event from the gateway, the worker not asked."""
    from tests.proxy.conftest import frames
    from tests.support.scripted_worker import Event

    h = make_harness()
    h.worker.on("SendStreamingMessage", sse=[
        Event(result={"task": {"id": "t-r", "contextId": "c-r", "status": {"state": "TASK_STATE_WORKING"}}}),
        Event(result={"statusUpdate": {"taskId": "t-r", "contextId": "c-r",
                                       "status": {"state": "TASK_STATE_COMPLETED"}}}),
    ])
    send = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}
    r, raw = h.stream(send, headers=ALICE)
    assert r.status_code == 200
    ids = [line[3:].strip().decode() for line in raw.split(b"\n") if line.startswith(b"id:")]
    assert len(ids) == 2
    h.worker.on("SubscribeToTask", json_error={"code": jsonrpc.TASK_NOT_FOUND, "message": "task t-r not found"})
    h.worker.on("GetTask", json_error={"code": jsonrpc.TASK_NOT_FOUND, "message": "task t-r not found"})
    subscribe = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": "t-r"}}
    r, raw = h.stream(subscribe, headers={**MALLORY, "Last-Event-ID": ids[0]})
    assert orjson.loads(raw)["error"]["code"] == jsonrpc.TASK_NOT_FOUND, raw
    assert [c.headers.get("authorization") for c in h.worker.calls("SubscribeToTask")] == ["Bearer mallory"]
    assert "last-event-id" not in h.worker.calls("SubscribeToTask")[0].headers
    r, raw = h.stream(subscribe, headers={**ALICE, "Last-Event-ID": ids[0]})
    replayed = [f["data"]["result"] for f in frames(raw) if isinstance(f["data"], dict)]
    assert [e["statusUpdate"]["status"]["state"] for e in replayed] == ["TASK_STATE_COMPLETED"]
    assert len(h.worker.calls("SubscribeToTask")) == 1  # Alice's resume was the gateway's


class EndlessJwks:
    """A JWKS URL whose answer never ends: 64 KiB chunks until the reader hangs up."""

    def __init__(self) -> None:
        self.sent = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"keys": [', "more_body": True})
        gone = asyncio.Event()

        async def watch() -> None:  # the reader hanging up is an http.disconnect
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        chunk = b'{"kty": "oct", "k": "' + b"A" * 65536 + b'"},'
        while not gone.is_set() and self.sent < 256 * 1024 * 1024:  # the test's own bound: 256 MiB
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self.sent += len(chunk)
            await asyncio.sleep(0)
        watcher.cancel()
        if not gone.is_set():
            await send({"type": "http.response.body", "body": b"]}"})


def test_a_jwks_answer_over_the_bound_is_not_read_to_its_end(make_harness: Any, keys: Keys, secret: str) -> None:
    """The JWKS fetch stops reading at MAX_JWKS_BYTES (gateway/proxy/auth.py): the request is
    answered 503 (no keys can be had) and the endless answer is not held in memory."""
    from gateway.proxy.auth import MAX_JWKS_BYTES

    endless = EndlessJwks()
    with serve_in_thread(endless, name="endless-jwks") as server:
        h = make_harness(auth={"jwt": {"issuer": ISSUER, "audience": AUDIENCE,
                                       "jwks_url": server.url + "/jwks.json", "algorithms": ["RS256"]}})
        _serve(h, OwnedTasks())
        r = h.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}},
                  headers=_bearer(keys.token("alice")))
        assert r.status_code == 503, r.text
        assert h.rpc_calls() == []
        assert endless.sent < 64 * MAX_JWKS_BYTES  # hung up on long before the answer's end


# -- the admin listener's task views (docs/callers.md §6) ----------------------------------------


def test_the_admin_task_views_need_the_token_and_never_show_a_caller(make_harness: Any, secret: str,
                                                                     tmp_path: Path) -> None:
    """The timeline JSON and the status page of a task two callers asked about: 401 without
    the admin token; with it, neither a fingerprint nor an identity."""
    import httpx

    token = tmp_path / "admin-token"
    token.write_text("admin-" + uuid.uuid4().hex)
    h = make_harness(admin={"token_file": str(token)})
    store = OwnedTasks()
    _serve(h, store)
    tid = _send(h, ALICE)["result"]["task"]["id"]
    _send(h, MALLORY, tid)  # forwarded: a skipped local answer
    _send(h, ALICE, tid)  # answered here: a rejection on the timeline
    record = h.on_gateway_loop(h.runtime.ledger.get("worker", tid)).record
    assert len(record.callers) == 1
    admin = {"Authorization": f"Bearer {token.read_text()}"}
    for path in (f"/tasks/worker/{tid}/timeline", "/status"):
        assert httpx.get(h.admin.url + path, trust_env=False, timeout=10).status_code == 401
        assert httpx.get(h.admin.url + path, headers=ALICE, trust_env=False, timeout=10).status_code == 401
        shown = httpx.get(h.admin.url + path, headers=admin, trust_env=False, timeout=10)
        assert shown.status_code == 200, shown.text
        assert not any(fp in shown.text for fp in record.callers), path
        assert "alice" not in shown.text and "mallory" not in shown.text and secret not in shown.text
    doc = httpx.get(h.admin.url + f"/tasks/worker/{tid}/timeline", headers=admin, trust_env=False).json()
    assert "callers" not in doc["record"] and doc["timeline"]


# -- metrics and tenants (docs/callers.md §1) -------------------------------------------------------


def test_tenants_are_a_metric_label_only_for_the_operators_bounded_list(make_harness: Any, secret: str) -> None:
    """``admin.metric_tenants: [acme]``: acme's requests are counted by name, any other
    tenant's as ``other``, no tenant's as ``""``; no other metric carries a tenant."""
    h = make_harness(admin={"metric_tenants": ["acme"]})
    store = OwnedTasks()
    _serve(h, store)
    for tenant in ("acme", "beta", "gamma", None):
        _send(h, ALICE, tenant=tenant)
    h.worker.on_path("GET", "/acme/tasks/t-r", json_body={"id": "t-r", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}})
    r, raw = h.rest("GET", "/acme/tasks/t-r", headers=ALICE)
    assert r.status_code == 200, raw

    def count(tenant: str) -> float:
        return h.metric("a2a_gateway_tenant_requests_total", upstream="worker", tenant=tenant, outcome="ok")

    wait_until(lambda: count("acme") == 2, message="acme's two requests counted")
    assert (count("other"), count("")) == (2, 1)
    scraped = h.http.get(h.admin.url + "/metrics").text
    tenant_lines = [line for line in scraped.splitlines() if "tenant=" in line]
    assert tenant_lines and all(line.startswith("a2a_gateway_tenant_requests_") for line in tenant_lines)
    assert "beta" not in scraped and "gamma" not in scraped


def test_the_tenant_list_is_bounded() -> None:
    from pydantic import ValidationError

    from gateway.config import MAX_METRIC_TENANTS, AdminConfig

    with pytest.raises(ValidationError):
        AdminConfig(metric_tenants=[f"t-{n}" for n in range(MAX_METRIC_TENANTS + 1)])
    for bad in (["other"], [""], ["a", "a"], ["x" * 129]):
        with pytest.raises(ValidationError):
            AdminConfig(metric_tenants=bad)
