"""A whole stream — cut, probe and resubscribe — replayed offline gives what the live gateway
gives (issue: one exchange core). The transcript tests/fixtures/transcripts/
f08_cut_probe_resubscribe.jsonl is played by the scripted worker behind the real gateway and
by ``gateway.replay``; the client-visible documents and the counted outcome must agree. And a
push notification (issue #29: one interpreter): a send with an inline push config, then the
worker's notification to the gateway's callback, gives the client the same answer and its
webhook the same document live and through :class:`gateway.offline.Offline`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.model import Policy
from gateway.exchange.push import PushLimits, PushStep, find_callback, intake, notification, settle
from gateway.invariants.admission import CardView
from gateway.offline import Offline, run_now
from gateway.replay import replay
from tests.proxy.conftest import Harness, frames
from tests.support.push_peers import Receiver
from tests.support.scripted_worker import Event
from tests.support.servers import serve_in_thread, wait_until

F08 = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts" / "f08_cut_probe_resubscribe.jsonl"


def _exchange_line() -> dict[str, Any]:
    [line] = [t for t in F08.read_text().splitlines() if t.strip() and not t.startswith("#")]
    doc: dict[str, Any] = orjson.loads(line)
    return doc


def _script_worker(h: Harness, acts: list[dict[str, Any]]) -> None:
    """The transcript's worker acts as scripted-worker answers: each opened stream carries
    the events of the reads after it and ends where the transcript says ``end``."""
    methods = iter(["SendStreamingMessage", "SubscribeToTask"])
    events: list[Any] | None = None
    for act in acts:
        if act.get("open"):
            events = []
        elif "events" in act and events is not None:
            events.extend(Event(result=e) for e in act["events"])
        elif act.get("end") and events is not None:
            h.worker.on(next(methods), sse=events)
            events = None
        elif "answer" in act:
            h.worker.on("GetTask", json_result=act["answer"]["result"])


def test_f08ii_cut_probe_resubscribe_live_and_offline_agree(h: Harness) -> None:
    line = _exchange_line()
    _script_worker(h, line["worker"])
    body = {"jsonrpc": "2.0", "id": line["id"], "method": line["method"], "params": line["params"]}
    _, raw = h.stream(body, headers={"A2A-Version": "1.0"})
    live = [f["data"] for f in frames(raw) if isinstance(f["data"], dict)]

    [verdict] = list(replay(F08.read_text().splitlines()))

    assert verdict.outputs == live
    assert [next(iter(d["result"])) for d in live] == ["task", "artifactUpdate", "statusUpdate"]
    assert live[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert verdict.action == "forward" and verdict.error is None
    assert len(h.worker.calls("GetTask")) == 1 and len(h.worker.calls("SubscribeToTask")) == 1
    assert h.metric("a2a_gateway_stream_resubscribes_total", outcome="resubscribed") == 1
    assert h.metric("a2a_gateway_forced_get_total", reason="upstream_eof") == 1


# --- a push notification, live and offline (issue #29: push is exchanges too) -----------------------------------

PUSH_CARD = CardView(doc={"capabilities": {"streaming": True, "pushNotifications": True}}, fresh=True,
                     reachable=True, etag=None)
WORKING = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}
DONE = {"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": {"state": "completed"}}}  # a v0.3 spelling


def _send(webhook: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]},
        "configuration": {"taskPushNotificationConfig": {"url": webhook, "token": "client-token"}}}}


def _offline(webhook: str) -> tuple[Any, bytes, list[Any]]:
    """The send with its inline push config, then the worker's notification, performed by
    :class:`gateway.offline.Offline` through the exchanges the gateway runs (intake, the send,
    settle; find_callback, notification): the send's answer, the webhook's body, what the
    worker was answered."""
    limits, policy = PushLimits(), Policy("worker")
    off = Offline("worker", req_id=1)
    doc = _send(webhook)
    req = jsonrpc.parse_request(jsonrpc.dumps(doc))
    info = jsonrpc.lookup_method("SendMessage")
    assert isinstance(req, jsonrpc.Request) and info is not None
    first = JsonRpcExchange(req, jsonrpc.dumps(doc), info, PUSH_CARD, policy).ex
    assert off.run(intake("worker", first.operation, first.version, first.binding, req.params, first.task_id,
                          None, first.tenant, callback_base="http://gateway.test", limits=limits))
    step: PushStep = off.value
    body = jsonrpc.dumps({**doc, "params": step.doc})
    req = jsonrpc.parse_request(body)
    assert isinstance(req, jsonrpc.Request)
    send = JsonRpcExchange(req, body, info, PUSH_CARD, policy)
    send.rewrite_result = step.restore
    send.pending_push = tuple(e.callback_id for e in step.pending)
    off.worker.append({"answer": {"jsonrpc": "2.0", "id": 1, "result": {"task": WORKING}}})
    assert off.run(send.run())
    assert off.run(settle(step, send.summary.outcome, send.summary.task_id, limits))
    [callback] = step.created
    assert off.run(find_callback("POST", callback.callback_id, frozenset({"worker"})))
    entry = off.value
    assert entry is not None and entry.task_id == "t-1"  # bound to the task the answer named
    off.request_body = orjson.dumps(DONE)
    assert off.run(notification(policy, entry, "wt-1", 1 << 20, limits))
    [queued] = run_now(off.ledger.memory.outbox_claim(off.now, 60.0, 10))
    return off.outputs[0].doc, queued.body, [o.doc for o in off.outputs[1:]]


def test_a_push_notification_live_and_offline_agree(make_harness: Any) -> None:
    receiver = Receiver()
    with serve_in_thread(receiver, name="webhook") as hook:
        h = make_harness(push={"allowed_cidrs": ["127.0.0.0/8"], "backoff_seconds": 0.05})
        h.worker.on("SendMessage", json_result={"task": WORKING})
        webhook = hook.url + "/hook"
        live_answer = h.rpc(_send(webhook), headers={"A2A-Version": "1.0"}).json()
        [call] = h.worker.calls("SendMessage")
        sent = call.json["params"]["configuration"]["taskPushNotificationConfig"]
        assert sent["url"].startswith(h.gateway.url + "/_a2a_gateway/push/") and sent["token"] != "client-token"
        posted = h.http.post(sent["url"], content=orjson.dumps(DONE),
                             headers={"X-A2A-Notification-Token": sent["token"]})
        delivered = wait_until(receiver.bodies, timeout=10, message="the notification delivered")

    offline_answer, offline_body, offline_worker = _offline(webhook)
    assert live_answer == offline_answer
    assert delivered == [orjson.loads(offline_body)]  # the webhook's document, through the outbox
    assert delivered[0]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"  # normalized
    assert offline_worker == [posted.json()] == [{"status": 200, "message": "accepted"}]
    assert receiver.posts[0].headers["x-a2a-notification-token"] == "client-token"
