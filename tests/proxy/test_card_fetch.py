"""Fetching Agent Cards through the real gateway (issue #13 item 4; docs/protocol.md §4.1): the
gateway listens without waiting for any card, callers share one fetch in flight, a failed fetch
is retried only after a back-off — unless no card was ever fetched and the worker was
unreachable: then a request fetches past the back-off, and ``/readyz`` is 503 until the first
card is in — and an invalid card is told apart from an unreachable one."""

from __future__ import annotations

import asyncio
import logging
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.app import build_app
from gateway.proxy import card as card_module
from gateway.proxy.card import CardCache
from tests.proxy.conftest import Harness, _config
from tests.support.gateway import serve_gateway
from tests.support.scripted_worker import JsonBody, Raw, ReceivedRequest, ScriptedWorker, default_card
from tests.support.servers import serve_in_thread, wait_until

V1 = {"A2A-Version": "1.0"}
CARD_PATH = "/.well-known/agent-card.json"
WORKING = {"task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}


def new_task(req_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "method": "SendMessage", "params": {
        "message": {"messageId": f"m-{req_id}", "role": "ROLE_USER", "parts": [{"text": "go"}]}}}


def card_gets(worker: ScriptedWorker) -> int:
    """Card fetches the worker received, at either well-known path."""
    return len([r for r in worker.requests if r.path.startswith("/.well-known/")])


def refused_for_the_card(r: httpx.Response) -> bool:
    return r.status_code == 503 and r.json()["error"]["code"] == -32603 and "agent card" in r.text


def held(release: threading.Event, answer: Any) -> Callable[[ReceivedRequest], Any]:
    """A worker handler that accepts the request and answers nothing until ``release`` is set."""
    async def handler(request: ReceivedRequest) -> Any:
        while not release.is_set():
            await asyncio.sleep(0.005)  # the worker's own loop keeps serving meanwhile
        return answer
    return handler


@pytest.fixture
def down_port() -> Iterator[int]:
    """A 127.0.0.1 port where nothing listens (a connection is refused) and that stays so until
    a worker is served on it (``serve_in_thread(..., config={"port": down_port})``): a socket
    bound with ``SO_REUSEADDR`` and never listening holds it, so no other process can take it
    meanwhile, while uvicorn (which sets ``SO_REUSEADDR`` too) can still bind and listen."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        yield int(holder.getsockname()[1])


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets held worker answers go; set at the latest when the test ends (before teardown)."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def gateway_for(release: threading.Event) -> Iterator[Callable[..., Harness]]:
    """``gateway_for(worker, **config)``: a gateway in front of an already scripted ``worker``,
    returned as soon as it listens (``make_harness`` also waits for the start-up card fetch)."""
    with contextlib.ExitStack() as stack:
        def start(worker: ScriptedWorker, **overrides: Any) -> Harness:
            wsrv = stack.enter_context(serve_in_thread(worker, name="worker"))
            registry = CollectorRegistry()
            app = build_app(_config(wsrv.url + "/", **overrides), registry=registry)
            gsrv, asrv = stack.enter_context(serve_gateway(app))
            http = stack.enter_context(httpx.Client(trust_env=False, timeout=10))
            return Harness(worker, gsrv, asrv, registry, http)

        yield start
        release.set()  # before the servers stop: no worker handler is left waiting


class FrozenClock:
    """The card cache's monotonic clock, still until the test moves it on (``advance``); the
    event loops' own clocks are untouched."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    perf_counter = staticmethod(time.perf_counter)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FrozenClock:
    frozen = FrozenClock()
    monkeypatch.setattr(card_module, "time", frozen)
    return frozen


# ------------------------------------------------------------------------------ start-up

def test_start_up_never_waits_for_a_card_endpoint_that_does_not_answer(
        gateway_for: Any, release: threading.Event) -> None:
    """The card endpoint accepts and never answers (read timeout 30 s): the gateway listens at
    once, ``/healthz`` answers and a new task is refused 503 / -32603 while the start-up fetch
    is still pending; once the worker answers, that same fetch brings the card."""
    worker = ScriptedWorker()
    worker.on_path("GET", CARD_PATH, handler=held(release, JsonBody(default_card())), times=None)
    h = gateway_for(worker, upstream={"timeouts": {"read": 30}, "card": {"fetch_wait_seconds": 0.05}})
    wait_until(lambda: card_gets(worker) == 1, message="the start-up fetch reached the worker")
    assert h.http.get(h.admin.url + "/healthz").status_code == 200
    assert h.http.get(h.admin.url + "/readyz").json()["upstreams"]["worker"]["card"] == "pending"
    assert refused_for_the_card(h.rpc(new_task(1), headers=V1))
    assert h.http.get(h.gateway.url + CARD_PATH).status_code == 502  # no card to serve yet
    assert h.runtime.card_status() == {"worker": {
        "card": "pending", "admitting_new_tasks": False, "reason": "no card fetched yet",
        "retry_in_s": None}}
    assert not release.is_set()  # all of the above was answered while the fetch hung
    release.set()
    wait_until(lambda: h.runtime.card_status()["worker"]["card"] == "ok")
    worker.on("SendMessage", json_result=WORKING)
    assert "result" in h.rpc(new_task(2), headers=V1).json()
    assert card_gets(worker) == 1  # the requests joined the one fetch, none started another
    assert worker.calls("SendMessage")[0].rpc_id == 2


# ------------------------------------------------------------------------------ the first card

def readyz(h: Harness) -> tuple[int, dict[str, Any]]:
    answer = h.http.get(h.admin.url + "/readyz")
    return answer.status_code, answer.json()


def test_a_worker_that_refused_the_first_fetch_is_admitted_on_the_first_request_once_up(
        make_harness: Any, gateway_warnings: Any, down_port: int) -> None:
    """The start-up fetch finds nothing listening (the worker is still starting); the worker
    comes up on that port right after. The first request is admitted at once — it fetches the
    card itself instead of waiting out the back-off (60 s here, so only that fetch can bring
    the card) — and ``/readyz`` is 503 until that card is in, 200 after."""
    port = down_port
    h = make_harness(upstream={"url": f"http://127.0.0.1:{port}/",
                               "card": {"retry_backoff_seconds": 60}})
    assert h.metric("a2a_gateway_card_fetches_total", outcome="unreachable") == 1
    code, body = readyz(h)
    assert (code, body["status"]) == (503, "not ready")
    assert body["upstreams"]["worker"]["card"] == "unreachable"
    assert body["upstreams"]["worker"]["admitting_new_tasks"] is False
    worker = ScriptedWorker()
    worker.on("SendMessage", json_result=WORKING)
    with serve_in_thread(worker, name="late-worker", config={"port": port}):
        assert readyz(h)[0] == 503  # up now, but no card fetched yet (the back-off holds)
        answer = h.rpc(new_task(1), headers=V1)
        assert answer.status_code == 200 and answer.json()["result"]["task"]["id"] == "t-1"
        assert card_gets(worker) == 1  # the request's own fetch, then the task
        assert [c.rpc_id for c in worker.calls("SendMessage")] == [1]
        code, body = readyz(h)
        assert (code, body) == (200, {"status": "ready", "upstreams": {"worker": {
            "card": "ok", "admitting_new_tasks": True, "reason": None, "retry_in_s": None}}})
        assert h.http.get(h.gateway.url + CARD_PATH).json()["name"] == "scripted"
        assert card_gets(worker) == 1  # a known, fresh card: no more fetches
    assert len(gateway_warnings("card_unreachable")) == 1


def test_readyz_turns_ready_once_the_background_retry_brings_the_first_card(
        make_harness: Any, down_port: int) -> None:
    """No request comes: the background retry fetches the first card as soon as the back-off
    (0.2 s, at most 0.4 s) runs out — well before the refresher's 5 s period — and ``/readyz``
    turns 200 then, 503 before; the traffic port's ``/readyz`` (``listen.probes``) alike."""
    port = down_port
    h = make_harness(listen={"probes": True},
                     upstream={"url": f"http://127.0.0.1:{port}/",
                               "card": {"retry_backoff_seconds": 0.2, "retry_max_seconds": 0.4}})
    assert readyz(h)[0] == 503
    assert h.http.get(h.gateway.url + "/readyz").status_code == 503
    with serve_in_thread(ScriptedWorker(), name="late-worker", config={"port": port}):
        wait_until(lambda: readyz(h)[0] == 200, timeout=3, message="/readyz 200 after the first card")
        assert readyz(h)[1]["upstreams"]["worker"]["card"] == "ok"
        assert h.http.get(h.gateway.url + "/readyz").json() == {"status": "ready"}
        assert h.runtime.cards["worker"].holds_card()


def test_requests_with_no_card_share_one_fetch_past_the_back_off(
        make_harness: Any, monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> None:
    """The start-up fetch got HTTP 503 (a worker still starting); the back-off is 60 s. Four
    new tasks arrive at once: they share one fetch (held until ``release``), and all are
    admitted once it brings the card."""
    h = make_harness(upstream={"card": {"retry_backoff_seconds": 60}})
    cache = h.runtime.cards["worker"]
    h.worker.default_card = None
    h.worker.on_path("GET", CARD_PATH, raw=(503, {}, b"starting"), times=1)
    h.worker.on_path("GET", CARD_PATH, handler=held(release, JsonBody(default_card())), times=None)
    cache._cards.clear()  # as if the start-up fetch had been the failed one
    assert h.on_gateway_loop(cache.refresh()) == "unreachable"
    assert not cache.holds_card() and readyz(h)[0] == 503
    h.worker.on("SendMessage", json_result=WORKING, times=None)
    waiting: list[str] = []
    real_current = CardCache.current

    async def counted(self: CardCache, a2a_version: str = "") -> Any:
        waiting.append(a2a_version)
        return await real_current(self, a2a_version)

    monkeypatch.setattr(CardCache, "current", counted)
    before = card_gets(h.worker)

    def one(i: int) -> httpx.Response:
        with httpx.Client(trust_env=False, timeout=10) as client:
            return client.post(h.gateway.url + "/", content=orjson.dumps(new_task(i)),
                               headers={"content-type": "application/json", **V1})

    with ThreadPoolExecutor(4) as pool:
        answers = [pool.submit(one, i) for i in range(4)]
        wait_until(lambda: len(waiting) == 4 and card_gets(h.worker) - before == 1,
                   message="all four requests wait for one fetch")
        assert not any(a.done() for a in answers)  # none was refused during the back-off
        release.set()
        assert all("result" in a.result().json() for a in answers)
    assert card_gets(h.worker) - before == 1
    assert len(h.worker.calls("SendMessage")) == 4
    assert readyz(h)[0] == 200


# ------------------------------------------------------------------------------ single flight

def test_concurrent_new_tasks_share_one_fetch_of_an_unreachable_card(
        make_harness: Any, monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> None:
    """Six new tasks arrive while the card is being revalidated and the worker's card endpoint
    is failing: they wait for the one fetch in flight, and after it failed none fetches again
    (the back-off), each refused at once."""
    h = make_harness()
    waiting: list[str] = []
    real_current = CardCache.current

    async def counted(self: CardCache, a2a_version: str = "") -> Any:
        waiting.append(a2a_version)
        return await real_current(self, a2a_version)

    monkeypatch.setattr(CardCache, "current", counted)
    h.worker.default_card = None
    h.worker.on_path("GET", CARD_PATH, handler=held(release, Raw(503, {}, b"down")), times=None)
    h.runtime.cards["worker"].mark_stale()
    before = card_gets(h.worker)

    def one(i: int) -> httpx.Response:
        with httpx.Client(trust_env=False, timeout=10) as client:
            return client.post(h.gateway.url + "/", content=orjson.dumps(new_task(i)),
                               headers={"content-type": "application/json", **V1})

    with ThreadPoolExecutor(6) as pool:
        answers = [pool.submit(one, i) for i in range(6)]
        wait_until(lambda: len(waiting) == 6, message="all six requests wait for the card")
        release.set()
        assert all(refused_for_the_card(a.result()) for a in answers)
    assert card_gets(h.worker) - before == 1
    assert h.metric("a2a_gateway_card_fetches_total", outcome="unreachable") == 1
    assert h.worker.calls("SendMessage") == []


# ------------------------------------------------------------------------------ back-off

def test_a_failed_fetch_is_retried_only_after_a_doubling_back_off_reset_by_success(
        make_harness: Any, clock: FrozenClock, gateway_warnings: Any) -> None:
    """After a failure no request fetches the card until the back-off (1 s, then 2 s …) has
    run out; then one does. A good fetch resets the back-off. One warning per failed fetch."""
    h = make_harness(upstream={"card": {"retry_backoff_seconds": 1, "retry_max_seconds": 60}})
    h.worker.default_card = None
    h.worker.on_path("GET", CARD_PATH, raw=(503, {}, b"down"), times=None)
    cache = h.runtime.cards["worker"]
    cache.mark_stale()
    start = card_gets(h.worker)

    def fetches_after(advance: float, requests: int = 3) -> int:
        clock.advance(advance)
        for i in range(requests):
            assert refused_for_the_card(h.rpc(new_task(i), headers=V1))
        return card_gets(h.worker) - start

    assert fetches_after(0) == 1  # the first request fetched; the others met the back-off
    assert h.runtime.card_status()["worker"] == {
        "card": "unreachable", "admitting_new_tasks": False, "reason": "HTTP 503",
        "retry_in_s": 1.0}
    assert fetches_after(0.5) == 1
    assert fetches_after(0.5) == 2  # 1 s on: one fetch, failed again; the next step is 2 s
    assert h.runtime.card_status()["worker"]["retry_in_s"] == 2.0
    assert fetches_after(1.5) == 2
    assert fetches_after(0.5) == 3
    assert len(gateway_warnings("card_unreachable")) == 3  # one per fetch, not one per request
    h.worker.reset()  # the worker's card is back
    h.worker.default_card = default_card()
    h.worker.on("SendMessage", json_result=WORKING)
    clock.advance(4)
    assert "result" in h.rpc(new_task(9), headers=V1).json()
    assert h.runtime.card_status()["worker"] == {
        "card": "ok", "admitting_new_tasks": True, "reason": None, "retry_in_s": None}
    h.worker.default_card = None  # down again: the back-off starts over at 1 s
    h.worker.on_path("GET", CARD_PATH, raw=(503, {}, b"down"), times=None)
    cache.mark_stale()
    assert refused_for_the_card(h.rpc(new_task(10), headers=V1))
    assert h.runtime.card_status()["worker"]["retry_in_s"] == 1.0


def test_the_back_off_is_capped_by_the_card_ttl(make_harness: Any, clock: FrozenClock) -> None:
    h = make_harness(upstream={"card": {"retry_backoff_seconds": 4, "ttl_seconds": 6}})
    h.worker.default_card = None
    h.worker.on_path("GET", CARD_PATH, raw=(503, {}, b"down"), times=None)
    h.runtime.cards["worker"].mark_stale()
    steps = []
    for _ in range(3):
        h.rpc(new_task(1), headers=V1)
        steps.append(h.runtime.card_status()["worker"]["retry_in_s"])
        clock.advance(steps[-1])
    assert steps == [4.0, 6.0, 6.0]


# ------------------------------------------------------------------------------ invalid / unreachable

INVALID = {
    "html": (Raw(200, {"content-type": "text/html"}, b"<html><body>Sign in</body></html>"),
             200, "text/html", "not JSON"),
    "text": (Raw(200, {"content-type": "text/plain"}, b"ok"), 200, "text/plain", "not JSON"),
    "json-no-card": (JsonBody({"name": "broken"}), 200, "application/json",
                     "not an Agent Card: missing "),
    "redirect": (Raw(302, {"location": "https://login.example/"}, b""), 302, None,
                 "HTTP 302: a redirect (not followed)"),
    "forbidden": (Raw(403, {"content-type": "text/plain"}, b"no"), 403, "text/plain", "HTTP 403"),
}


@pytest.mark.parametrize("answer,status,content_type,reason", INVALID.values(), ids=INVALID.keys())
def test_an_invalid_card_is_told_apart_and_not_fetched_per_request(
        gateway_for: Any, gateway_warnings: Any, answer: Any, status: int,
        content_type: str | None, reason: str) -> None:
    worker = ScriptedWorker()
    worker.on_path("GET", CARD_PATH, respond=answer, times=None)
    h = gateway_for(worker, upstream={"card": {"retry_backoff_seconds": 60}})
    wait_until(lambda: h.metric("a2a_gateway_card_fetches_total") == 1)
    for i in range(4):
        assert refused_for_the_card(h.rpc(new_task(i), headers=V1))
        assert h.http.get(h.gateway.url + CARD_PATH).status_code == 502
    assert card_gets(worker) == 1
    assert h.metric("a2a_gateway_card_fetches_total", outcome="invalid") == 1
    assert h.metric("a2a_gateway_upstream_degraded", reason="card_invalid") == 1
    assert h.metric("a2a_gateway_upstream_degraded", reason="card_unreachable") == 0
    [warning] = gateway_warnings("card_invalid")
    assert warning.reason.startswith(reason)  # type: ignore[attr-defined]
    assert (warning.status, warning.content_type) == (status, content_type)  # type: ignore[attr-defined]
    assert gateway_warnings("card_unreachable") == []
    card = h.runtime.card_status()["worker"]
    assert (card["card"], card["admitting_new_tasks"]) == ("invalid", False)
    assert card["reason"].startswith(reason) and card["retry_in_s"] > 0
    assert h.runtime.cards["worker"].reachable  # no transport degradation: no forced GetTask


def test_a_refused_connection_is_unreachable(
        make_harness: Any, gateway_warnings: Any, clock: FrozenClock, down_port: int) -> None:
    """No card was ever fetched: each request tries once more past the back-off (and is
    refused when that fails too), without advancing the back-off or warning again."""
    h = make_harness(upstream={"url": f"http://127.0.0.1:{down_port}/",
                               "card": {"retry_backoff_seconds": 60}})
    assert h.runtime.card_status()["worker"]["retry_in_s"] == 60.0
    for i in range(3):
        assert refused_for_the_card(h.rpc(new_task(i), headers=V1))
    assert h.metric("a2a_gateway_card_fetches_total", outcome="unreachable") == 1 + 3
    assert h.runtime.card_status()["worker"]["retry_in_s"] == 60.0  # not pushed back by requests
    assert h.metric("a2a_gateway_card_fetches_total", outcome="invalid") == 0
    assert h.metric("a2a_gateway_upstream_degraded", reason="card_unreachable") == 1
    assert h.metric("a2a_gateway_upstream_degraded", reason="card_invalid") == 0
    [warning] = gateway_warnings("card_unreachable")
    assert warning.reason == "worker unreachable: connection failed"  # type: ignore[attr-defined]
    assert warning.status is None  # type: ignore[attr-defined]
    assert h.runtime.card_status()["worker"]["card"] == "unreachable"
    assert not h.runtime.cards["worker"].reachable


def test_a_card_endpoint_that_times_out_is_unreachable(
        gateway_for: Any, gateway_warnings: Any, release: threading.Event) -> None:
    worker = ScriptedWorker()
    worker.on_path("GET", CARD_PATH, handler=held(release, JsonBody(default_card())), times=None)
    h = gateway_for(worker, upstream={"timeouts": {"read": 0.2}, "card": {"retry_backoff_seconds": 60}})
    wait_until(lambda: h.metric("a2a_gateway_card_fetches_total", outcome="unreachable") == 1)
    [warning] = gateway_warnings("card_unreachable")
    assert warning.reason == "worker timed out (ReadTimeout)"  # type: ignore[attr-defined]
    # no card yet: the request tries once more (bounded by the read timeout), refused when that
    # times out too; the same problem is not warned again
    assert refused_for_the_card(h.rpc(new_task(1), headers=V1))
    assert card_gets(worker) == 2
    assert h.metric("a2a_gateway_card_fetches_total", outcome="unreachable") == 2
    assert len(gateway_warnings("card_unreachable")) == 1


def test_a_worker_error_keeps_the_last_good_card_served_and_marks_it_unreachable(
        make_harness: Any, gateway_warnings: Any) -> None:
    h = make_harness()
    h.worker.default_card = None
    h.worker.on_path("GET", CARD_PATH, raw=(500, {"content-type": "text/html"}, b"<h1>oops</h1>"),
                     times=None)
    h.runtime.cards["worker"].mark_stale()
    served = h.http.get(h.gateway.url + CARD_PATH)
    assert served.status_code == 200 and served.json()["name"] == "scripted"
    [warning] = gateway_warnings("card_unreachable")
    assert (warning.reason, warning.status) == ("HTTP 500", 500)  # type: ignore[attr-defined]
    assert h.metric("a2a_gateway_upstream_degraded", reason="card_unreachable") == 1
    assert h.runtime.card_status()["worker"]["admitting_new_tasks"] is False  # stale, reject


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _card_warnings(url: str, *, repeat_window: float = 0.0, fetches: int = 1) -> list[dict[str, Any]]:
    """The card warnings of ``fetches`` fetches from ``url`` (a CardCache on a real client),
    through the log's repeat filter when ``repeat_window``."""
    from gateway.observability.logging import RepeatFilter, record_fields
    from gateway.observability.metrics import Metrics
    from gateway.proxy.transport import UpstreamClient

    log = logging.getLogger(f"a2a_gateway.test_card_cause.{url}")
    log.propagate, lines = False, _Lines()
    log.handlers[:] = [lines]
    if repeat_window:
        lines.addFilter(RepeatFilter(repeat_window))
    config = _config(url, upstream={"card": {"retry_backoff_seconds": 0.001}, "timeouts": {"connect": 2}})

    async def go() -> None:
        client = UpstreamClient()
        cache = CardCache(client, Metrics(CollectorRegistry()), log, config.upstreams[0])
        try:
            for _ in range(fetches):
                await cache.refresh()
        finally:
            await client.aclose()

    asyncio.run(go())
    return [{"event": r.getMessage(), **record_fields(r)} for r in lines.records]


def test_card_warnings_name_the_url_and_the_cause(down_port: int) -> None:
    """DNS failure, connection refused, an HTTP status and an invalid card each say so, with
    the card URL fetched."""
    refused = _card_warnings(f"http://127.0.0.1:{down_port}")
    assert [(w["event"], w["cause"], w["url"]) for w in refused] == [
        ("card_unreachable", "connection_refused", f"http://127.0.0.1:{down_port}{CARD_PATH}")]
    (dns,) = _card_warnings("http://does-not-exist.invalid")
    assert (dns["cause"], dns["url"]) == ("dns", f"http://does-not-exist.invalid{CARD_PATH}")
    worker = ScriptedWorker()
    worker.on_path("GET", CARD_PATH, raw=(503, {}, b"down"), times=1)
    worker.on_path("GET", CARD_PATH, json_body={"name": "no card"}, times=1)
    with serve_in_thread(worker) as srv:
        (status,) = _card_warnings(srv.url)
        (invalid,) = _card_warnings(srv.url)
    assert (status["event"], status["cause"], status["status"]) == ("card_unreachable", "http_status", 503)
    assert (invalid["event"], invalid["cause"]) == ("card_invalid", "invalid_card")


def test_repeated_card_warnings_are_held_back_within_the_repeat_window(down_port: int) -> None:
    """The same failure fetch after fetch is one line per log.repeat_window_seconds, although
    each names a longer back-off (retry_in_s is not a difference)."""
    assert len(_card_warnings(f"http://127.0.0.1:{down_port}", fetches=4)) == 4
    assert len(_card_warnings(f"http://127.0.0.1:{down_port}", repeat_window=60, fetches=4)) == 1
