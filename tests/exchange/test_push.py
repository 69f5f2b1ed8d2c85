"""The push relay's pure part (gateway/exchange/push.py; docs/push.md §1, docs/push.md §2), plain dicts in,
plain values out: config rewriting and restoring, and a notification judged as a stream event."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Any

import orjson
import pytest

from gateway.a2a.jsonrpc import Operation
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.exchange.commands import (
    AppendTimeline,
    Count,
    Enqueue,
    Found,
    GetPushConfig,
    Load,
    Log,
    PutPushConfig,
    Store,
)
from gateway.exchange.model import Policy
from gateway.offline import Ledger, Offline, run_now
from gateway.exchange.push import (
    CALLBACK_PATH,
    PushConfigData,
    PushLimits,
    PushStep,
    Subscription,
    Webhook,
    client_body,
    client_webhooks,
    digest,
    find_callback,
    intake,
    judge_notification,
    notification,
    relays,
    read_notification,
    restore_answer,
    rewrite_request,
)
from gateway.a2a.states import TaskState
from gateway.invariants.model import Clock, TaskRecord
from gateway.records import PushConfigEntry

CB = "https://gw.example/_a2a_gateway/push/cb-1"


# --- docs/push.md §1: configs in requests ---------------------------------------------------------------


def test_v1_create_is_rewritten_and_the_client_credentials_never_reach_the_worker() -> None:
    params = {"taskId": "t-1", "url": "https://client.example/hook", "token": "client-secret",
              "authentication": {"scheme": "Bearer", "credentials": "c-cred"}}
    out = rewrite_request(Operation.PUSH_CREATE, params, [(CB, "worker-token")])
    assert out == {"taskId": "t-1", "url": CB, "token": "worker-token"}
    assert params["url"] == "https://client.example/hook"  # the client's doc is left alone
    (hook,) = client_webhooks(Operation.PUSH_CREATE, params)
    assert hook.url == "https://client.example/hook" and hook.token == "client-secret"
    assert hook.headers() == [("X-A2A-Notification-Token", "client-secret"), ("Authorization", "Bearer c-cred")]


@pytest.mark.parametrize("doc,path", [
    ({"taskId": "t", "pushNotificationConfig": {"url": "https://c/h", "token": "x"}}, ("pushNotificationConfig",)),
    ({"parent": "tasks/t", "config": {"name": "n", "pushNotificationConfig": {"url": "https://c/h"}}},
     ("config", "pushNotificationConfig")),
])
def test_v03_create_shapes_are_found(doc: dict[str, Any], path: tuple[str, ...]) -> None:
    out = rewrite_request(Operation.PUSH_CREATE, doc, [(CB, "w")])
    inner = out
    for key in path:
        inner = inner[key]
    assert inner["url"] == CB and inner["token"] == "w"


@pytest.mark.parametrize("key", ["taskPushNotificationConfig", "pushNotificationConfig", "pushNotification"])
def test_inline_configs_of_a_send_are_rewritten(key: str) -> None:
    params = {"message": {"messageId": "m"}, "configuration": {key: {"url": "https://c/h"}, "blocking": True}}
    out = rewrite_request(Operation.SEND, params, [(CB, "w")])
    assert out["configuration"][key] == {"url": CB, "token": "w"}
    assert out["configuration"]["blocking"] is True


def test_a_create_with_a_config_of_each_version_names_both() -> None:
    """A decoy v1.0 ``url`` beside the v0.3 config a v0.3 worker reads: both are found, so the
    relay can refuse the create rather than check and rewrite only the decoy."""
    doc = {"taskId": "t", "url": "https://c/decoy", "pushNotificationConfig": {"url": "http://169.254.169.254/"}}
    assert [h.url for h in client_webhooks(Operation.PUSH_CREATE, doc)] == ["https://c/decoy",
                                                                            "http://169.254.169.254/"]


def test_a_send_without_config_has_no_webhook() -> None:
    assert client_webhooks(Operation.SEND, {"message": {}}) == []
    assert client_webhooks(Operation.PUSH_GET, {"url": "https://c/h"}) == []


def test_answers_are_given_back_the_client_webhook_in_every_shape() -> None:
    hooks = {CB: Webhook("https://c/h", "client-token", {"schemes": ["Bearer"]})}
    flat = {"id": "p", "taskId": "t", "url": CB, "token": "w"}
    assert restore_answer(flat, hooks) == {"id": "p", "taskId": "t", "url": "https://c/h",
                                           "token": "client-token", "authentication": {"schemes": ["Bearer"]}}
    listed = {"configs": [flat, {"id": "other", "url": "https://elsewhere/"}]}
    restored = restore_answer(listed, hooks)
    assert restored["configs"][0]["url"] == "https://c/h"
    assert restored["configs"][1] == {"id": "other", "url": "https://elsewhere/"}
    v03 = [{"taskId": "t", "pushNotificationConfig": {"url": CB, "token": "w"}}]
    assert restore_answer(v03, hooks)[0]["pushNotificationConfig"]["token"] == "client-token"
    untouched = {"configs": [{"url": "https://elsewhere/"}]}
    assert restore_answer(untouched, hooks) is untouched


def test_a_callback_of_another_task_or_tenant_loses_the_worker_token() -> None:
    """A config naming a gateway callback that is not this task's (another tenant's, or one the
    ledger lost) keeps its url, never the worker's token or credentials (docs/push.md §1.2)."""
    other = {"id": "p", "url": "https://gw.example/_a2a_gateway/push/cb-9", "token": "w",
             "authentication": {"schemes": ["Bearer"]}}
    assert restore_answer({"configs": [other]}, {}) == {"configs": [{"id": "p", "url": other["url"]}]}
    v03 = [{"taskId": "t", "pushNotificationConfig": {"url": other["url"], "token": "w"}}]
    assert restore_answer(v03, {CB: Webhook("https://c/h", "c", None)})[0]["pushNotificationConfig"] \
        == {"url": other["url"]}


# --- docs/push.md §2: notifications -------------------------------------------------------------------------


def run(gen: Generator[Any, Any, Any], ledger: Ledger, *, now: float = 1000.0,
        configs: dict[str, PushConfigEntry] | None = None) -> tuple[Any, list[Any]]:
    """Perform the commands against a dict ledger (and ``configs``, push configs by callback
    id); returns (verdict, the commands seen)."""
    configs = {} if configs is None else configs
    seen: list[Any] = []
    reply: Any = None
    while True:
        try:
            cmd = gen.send(reply)
        except StopIteration as stop:
            return stop.value, seen
        seen.append(cmd)
        reply = None
        if isinstance(cmd, Load):
            reply = ledger.load("w", cmd.task_id, Clock(now)) if cmd.task_id else ledger.load("w", "", Clock(now))
        elif isinstance(cmd, Store):
            reply = ledger.put(cmd.record, cmd.expected_version)
        elif isinstance(cmd, Enqueue):
            reply = "1"
        elif isinstance(cmd, GetPushConfig):
            reply = configs.get(cmd.callback_id)
        elif isinstance(cmd, PutPushConfig):
            configs[cmd.entry.callback_id] = cmd.entry
        else:
            assert isinstance(cmd, (Count, Found, Log, AppendTimeline)), cmd


POLICY = Policy(upstream="w")


def sub(task_id: str = "t-1", version: ProtocolVersion = ProtocolVersion.V1_0) -> Subscription:
    return Subscription("cb-1", "w", task_id, version, Binding.JSONRPC)


def status(state: str, task_id: str = "t-1") -> bytes:
    return orjson.dumps({"statusUpdate": {"taskId": task_id, "contextId": "c", "status": {"state": state}}})


def enqueued(seen: list[Any]) -> list[Any]:
    return [orjson.loads(c.body) for c in seen if isinstance(c, Enqueue)]


def test_a_notification_is_normalized_stored_then_enqueued() -> None:
    ledger = Ledger()
    verdict, seen = run(judge_notification(POLICY, sub(), status("completed")), ledger)
    assert verdict.status == 200 and verdict.reason is None
    (body,) = enqueued(seen)
    assert body["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    stores = [i for i, c in enumerate(seen) if isinstance(c, Store)]
    assert stores and stores[0] < next(i for i, c in enumerate(seen) if isinstance(c, Enqueue))
    assert ledger.get("w", "t-1").state.value == "TASK_STATE_COMPLETED"  # type: ignore[union-attr]


def test_a_notification_after_the_terminal_state_is_not_delivered() -> None:
    ledger = Ledger()
    first, _ = run(judge_notification(POLICY, sub(), status("TASK_STATE_CANCELED")), ledger)
    assert first.ended  # the webhook had the task's end: the shell marks its config terminal_sent
    done = dataclasses.replace(sub(), terminal_sent=True)
    verdict, seen = run(judge_notification(POLICY, done, status("TASK_STATE_COMPLETED")), ledger)
    assert verdict.status == 200 and verdict.reason == "invariant"
    assert enqueued(seen) == []
    assert Count("push_refused", ("invariant",)) in seen
    assert ledger.get("w", "t-1").state.value == "TASK_STATE_CANCELED"  # type: ignore[union-attr]


def test_a_webhook_gets_the_terminal_state_once_even_when_the_ledger_had_it_first() -> None:
    """A cancel's answer recorded CANCELED before the worker's CANCELED notification: the
    webhook has not had the end yet, so it gets it — the recorded status, even when the worker
    now says otherwise (docs/push.md §2)."""
    ledger = Ledger()
    ledger.put(TaskRecord("w", "t-1", "c", TaskState.CANCELED, 1.0,
                          terminal_status={"state": "TASK_STATE_CANCELED"}), 0)
    verdict, seen = run(judge_notification(POLICY, sub(), status("TASK_STATE_CANCELED")), ledger)
    assert verdict.reason is None and verdict.ended
    (body,) = enqueued(seen)
    assert body["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    verdict, seen = run(judge_notification(POLICY, sub(), status("TASK_STATE_COMPLETED")), ledger)
    (body,) = enqueued(seen)
    assert body["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED" and verdict.ended


def test_an_unknown_state_is_refused_and_nothing_enqueued() -> None:
    verdict, seen = run(judge_notification(POLICY, sub(), status("almost-done")), Ledger())
    assert verdict.reason == "invariant" and enqueued(seen) == []


def test_another_tasks_notification_and_garbage_are_400() -> None:
    verdict, _ = run(judge_notification(POLICY, sub(), status("working", "t-other")), Ledger())
    assert (verdict.status, verdict.reason) == (400, "task_mismatch")
    verdict, _ = run(judge_notification(POLICY, sub(), b"not json"), Ledger())
    assert (verdict.status, verdict.reason) == (400, "malformed")
    verdict, _ = run(judge_notification(POLICY, sub(), b'{"hello": 1}'), Ledger())
    assert verdict.reason == "malformed"


def test_a_pending_inline_config_takes_the_task_the_notification_names() -> None:
    data = PushConfigData(Webhook("https://client.example/hook", None, None), "x", "cb", ProtocolVersion.V1_0,
                          Binding.JSONRPC, None)
    configs = {"cb-1": PushConfigEntry("cb-1", "w", "", data.encode())}
    verdict, seen = run(judge_notification(POLICY, sub(""), status("working", "t-new")), Ledger(),
                        configs=configs)
    assert verdict.status == 200 and verdict.task_id == "t-new" and len(enqueued(seen)) == 1
    # bound to its task before anything of the notification is read or stored (docs/push.md §1.3)
    kinds = [type(c) for c in seen]
    assert kinds.index(PutPushConfig) < kinds.index(Load)
    assert configs["cb-1"].task_id == "t-new"
    assert PushConfigData.decode(configs["cb-1"].data).config_id == "t-new"  # a2a-sdk names it after its task


def test_a_v03_task_as_a2a_sdk_03_posts_it_is_read_and_a_v03_client_gets_v03() -> None:
    v03_task = {"kind": "task", "id": "t-1", "contextId": "c", "status": {"state": "completed"}}
    assert read_notification(orjson.dumps(v03_task), 32) == {
        "task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}}
    verdict, seen = run(judge_notification(POLICY, sub(version=ProtocolVersion.V0_3), orjson.dumps(v03_task)),
                        Ledger())
    (body,) = enqueued(seen)
    assert body["kind"] == "task" and body["status"]["state"] == "completed"


def test_client_body_is_the_stream_response_for_v1() -> None:
    judged = {"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}
    assert orjson.loads(client_body(judged, ProtocolVersion.V1_0, Binding.REST)) == judged
    v03 = orjson.loads(client_body(judged, ProtocolVersion.V0_3, Binding.JSONRPC))
    assert v03["kind"] == "status-update" and v03["status"]["state"] == "working"


# --- docs/field-cases.md F18, F19: what a stream refused is not pushed either -----------------------


def _artifact(aid: str, *texts: str, task_id: str = "t-1", **flags: bool) -> bytes:
    return orjson.dumps({"artifactUpdate": {"taskId": task_id, "contextId": "c", **flags,
                                            "artifact": {"artifactId": aid, "parts": [{"text": t} for t in texts]}}})


def _task(state: str, *artifacts: tuple[str, list[str]]) -> bytes:
    return orjson.dumps({"task": {"id": "t-1", "contextId": "c", "status": {"state": state},
                                  "artifacts": [{"artifactId": a, "parts": [{"text": t} for t in ts]}
                                                for a, ts in artifacts]}})


def test_f18_a_pushed_update_of_a_sealed_artifact_and_a_pushed_rewrite_are_not_delivered() -> None:
    ledger = Ledger()
    run(judge_notification(POLICY, sub(), status("TASK_STATE_WORKING")), ledger)
    run(judge_notification(POLICY, sub(), _artifact("a-3", "draft", lastChunk=True)), ledger)
    for rewrite in (_artifact("a-3", "more", append=True), _artifact("a-3", "redraft")):
        verdict, seen = run(judge_notification(POLICY, sub(), rewrite), ledger)
        assert verdict.reason == "invariant" and enqueued(seen) == []
    verdict, seen = run(judge_notification(POLICY, sub(), _artifact("a-3", "draft", lastChunk=True)), ledger)
    assert verdict.reason is None and len(enqueued(seen)) == 1  # exactly what was sealed: a repeat
    verdict, seen = run(judge_notification(POLICY, sub(), _task("TASK_STATE_WORKING", ("a-3", ["redraft"]))), ledger)
    (body,) = enqueued(seen)
    assert body["task"]["artifacts"] == [] and body["task"]["metadata"]["a2a-gateway/corrected"]["artifacts"] == ["a-3"]


def test_f19_a_pushed_task_after_completed_shows_only_what_was_delivered() -> None:
    ledger = Ledger()
    for body in (status("TASK_STATE_WORKING"), _artifact("a-25", "part one")):
        run(judge_notification(POLICY, sub(), body), ledger)
    first, _ = run(judge_notification(POLICY, sub(), status("TASK_STATE_COMPLETED")), ledger)
    assert first.ended
    done = dataclasses.replace(sub(), terminal_sent=True)
    late, seen = run(judge_notification(POLICY, done, _artifact("a-25", "part two", append=True)), ledger)
    assert late.reason == "invariant" and enqueued(seen) == []
    # another webhook of the task, which has not had the end yet, gets the Task as frozen
    verdict, seen = run(judge_notification(POLICY, sub(), _task("TASK_STATE_COMPLETED",
                                                                ("a-25", ["part one", "part two"]))), ledger)
    (body,) = enqueued(seen)
    assert [p["text"] for p in body["task"]["artifacts"][0]["parts"]] == ["part one"]


# --- push as exchanges, performed offline (gateway/offline.py; issue #29) ------------------------------------------

def _intake(off: Any, operation: Operation, doc: Any, task_id: str | None = None, *,
            limits: PushLimits = PushLimits()) -> PushStep:
    assert off.run(intake("w", operation, ProtocolVersion.V1_0, Binding.JSONRPC, doc, task_id, None, "",
                          callback_base="https://gw.example", limits=limits))
    step: PushStep = off.value
    return step


def test_intake_stores_the_config_and_names_the_gateway_to_the_worker() -> None:
    off = Offline("w")
    doc = {"taskId": "t-1", "url": "https://client.example/hook", "token": "client-token",
           "authentication": {"scheme": "Bearer", "credentials": "secret"}}
    step = _intake(off, Operation.PUSH_CREATE, doc, "t-1")
    assert step.refusal is None and step.doc["url"] == "https://gw.example" + CALLBACK_PATH + "cb-1"
    assert step.doc["token"] == "wt-1" and "authentication" not in step.doc  # the client's credentials stay
    [entry] = run_now(off.ledger.memory.push_configs("w", "t-1"))
    data = PushConfigData.decode(entry.data)
    assert data.webhook.token == "client-token" and data.worker_token_sha256 == digest("wt-1")
    assert step.restore is not None and step.restore(step.doc)["url"] == "https://client.example/hook"


def test_intake_refuses_an_ambiguous_create_and_a_full_task_storing_nothing() -> None:
    off = Offline("w")
    both = {"taskId": "t-1", "url": "https://a.example/h", "pushNotificationConfig": {"url": "https://b.example/h"}}
    step = _intake(off, Operation.PUSH_CREATE, both, "t-1")
    assert step.refusal is not None and step.refusal[0] == "ambiguous"
    assert run_now(off.ledger.memory.push_configs("w", "t-1")) == []
    one = {"taskId": "t-1", "url": "https://a.example/h"}
    assert _intake(off, Operation.PUSH_CREATE, one, "t-1", limits=PushLimits(1, 10)).refusal is None
    other = {"taskId": "t-1", "id": "cfg-2", "url": "https://c.example/h"}
    step = _intake(off, Operation.PUSH_CREATE, other, "t-1", limits=PushLimits(1, 10))
    assert step.refusal is not None and step.refusal[0] == "limit"
    assert [c.labels for c in off.counts if c.metric == "push_webhooks_refused"] == [("ambiguous",), ("limit",)]


def test_a_callback_is_post_only_and_unknown_callbacks_are_404() -> None:
    off = Offline("w")
    assert off.run(find_callback("GET", "cb-1", frozenset({"w"}))) and off.value is None
    assert off.run(find_callback("POST", "cb-nope", frozenset({"w"}))) and off.value is None
    assert [(o.status, o.doc["message"]) for o in off.outputs] == [
        (405, "POST only"), (404, "no such push notification callback")]


def test_a_notification_with_the_wrong_token_is_401_and_nothing_is_judged() -> None:
    off = Offline("w")
    _intake(off, Operation.PUSH_CREATE, {"taskId": "t-1", "url": "https://client.example/hook"}, "t-1")
    assert off.run(find_callback("POST", "cb-1", frozenset({"w"})))
    entry = off.value
    off.request_body = status("completed")
    assert off.run(notification(POLICY, entry, "not-the-token", 1024, PushLimits())) and off.value is None
    assert off.outputs[-1].status == 401 and off.ledger.get("w", "t-1") is None
    assert [c.labels for c in off.counts if c.metric == "push_refused"] == [("token",)]
    assert run_now(off.ledger.memory.outbox_depth()) == 0


def test_intake_runs_only_for_requests_push_touches() -> None:
    """A send without a push config costs no intake (and so no driver) at all."""
    send = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}
    with_hook = {**send, "configuration": {"taskPushNotificationConfig": {"url": "https://c.example/h"}}}
    assert not relays(Operation.SEND, send, None) and relays(Operation.SEND, with_hook, None)
    assert relays(Operation.PUSH_CREATE, {"taskId": "t-1"}, "t-1")  # its answer may name a callback
    assert relays(Operation.PUSH_GET, {}, "t-1") and relays(Operation.PUSH_DELETE, {}, "t-1")
    assert not relays(Operation.PUSH_DELETE, {}, None) and not relays(Operation.GET, {"id": "t-1"}, "t-1")
