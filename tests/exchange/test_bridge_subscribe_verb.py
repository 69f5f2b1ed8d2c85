"""The bridged REST exchange as transcripts (gateway/exchange/bridge.py): no sockets.

A client's subscribe bridged to a worker of the other version keeps the client's verb, and
takes the other one when the worker answers 405 (docs/protocol.md §1.3: the verb is disputed;
a2a-sdk 0.3's REST server routes only ``GET …/v1/tasks/{id}:subscribe`` while the 1.x clients
send POST) — found end to end by tests/e2e/test_bridge.py. A v1.0 client's subscribe to a v0.3
worker starts with the gateway's own ``GetTask`` (docs/bridge.md §3.2), so the worker sees
that first."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.a2a import rest
from gateway.a2a.version import ProtocolVersion
from gateway.exchange.bridge import BridgedRestExchange
from gateway.exchange.commands import OPENED, Answer, Open, Post
from gateway.exchange.rest import RestExchange
from gateway.exchange.model import Policy
from gateway.offline import Ledger
from tests.exchange.test_rest_exchange import CARD, RestOffline, data, responds, task, worker_cmds

NOT_ALLOWED = {"raw": b"Method Not Allowed", "status": 405, "json": False}
SNAPSHOT = Post(b"", "GET", "/v1/tasks/t-1?historyLength=0", "", reason="subscribe_snapshot")


def play(verb: str, path: str, worker: list[dict[str, Any]], *, version: str | None,
         worker_version: ProtocolVersion, body: Any = None) -> RestOffline:
    call = rest.match(verb, path, version)
    assert call is not None, (verb, path)
    ex = BridgedRestExchange(call, verb, b"", rest.request_params(call, body), CARD,
                             Policy("w", resubscribe_attempts=0), worker_version, doc=body)
    offline = RestOffline("w", Ledger())
    offline.worker.extend(worker)
    offline.exchange = ex  # type: ignore[attr-defined]
    offline.run(ex.run())
    return offline


@pytest.mark.parametrize(("verb", "other"), [("POST", "GET"), ("GET", "POST")])
def test_a_subscribe_answered_405_is_retried_with_the_other_verb(verb, other):
    book = play(verb, "/tasks/t-1:subscribe", [
        {"body": task("t-1", "TASK_STATE_WORKING")}, NOT_ALLOWED, {"open": True},
        {"events": [{"task": task("t-1", "TASK_STATE_WORKING")},
                    {"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "final": True,
                                      "status": {"state": "TASK_STATE_CANCELLED"}}}]},
        {"end": True},
    ], version="1.0", worker_version=ProtocolVersion.V0_3)
    assert worker_cmds(book) == [SNAPSHOT, Open(b"", verb, "/v1/tasks/t-1:subscribe", ""),
                                 Open(b"", other, "/v1/tasks/t-1:subscribe", "")]
    got = data(book)
    assert got[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert [next(iter(d)) for d in got] == ["task", "statusUpdate"]  # the worker's own snapshot is not repeated
    assert got[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"


def test_a_subscribe_answered_405_twice_is_the_workers_error():
    book = play("POST", "/tasks/t-1:subscribe", [{"body": task("t-1", "TASK_STATE_WORKING")}, NOT_ALLOWED,
                                                 NOT_ALLOWED], version="1.0", worker_version=ProtocolVersion.V0_3)
    assert [c.method for c in worker_cmds(book)] == ["GET", "POST", "GET"]  # the snapshot's GetTask first
    [respond] = responds(book)
    assert respond.status >= 400


def test_a_stream_answered_405_is_not_retried():
    body = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}
    book = play("POST", "/message:stream", [NOT_ALLOWED], version="1.0", worker_version=ProtocolVersion.V0_3,
                body=body)
    assert [(c.method, c.target) for c in worker_cmds(book)] == [("POST", "/v1/message:stream")]


@pytest.mark.parametrize("bridged", [False, True])
def test_the_gateways_own_resubscribe_marks_both_verbs_and_passes_replies_through(bridged):
    """A resubscribe after a cut is the gateway's own request (``reason`` ``resubscribe``, for
    its client span) whichever verb it takes; the replies and a cut thrown in go through."""
    call = rest.match("POST", "/tasks/t-1:subscribe", "1.0")
    assert call is not None
    params = rest.request_params(call, None)
    if bridged:
        ex: Any = BridgedRestExchange(call, "POST", b"", params, CARD, Policy("w"), ProtocolVersion.V0_3)
    else:
        ex = RestExchange(call, "POST", b"", params, CARD, Policy("w"))
    gen = ex.resubscribe_own("t-1")
    first = gen.send(None)
    assert isinstance(first, Open) and (first.method, first.reason) == ("POST", "resubscribe")
    second = gen.send(Answer(405, b"Method Not Allowed", False))
    assert isinstance(second, Open) and (second.method, second.reason) == ("GET", "resubscribe")
    with pytest.raises(StopIteration) as stop:
        gen.send(OPENED)
    assert stop.value.value is OPENED
    assert Post(b"", reason="x") == Post(b"")  # the reason is no part of a command's equality
    thrown = ex.resubscribe_own("t-1")
    thrown.send(None)
    with pytest.raises(ValueError):
        thrown.throw(ValueError("cut"))
