"""Safe retries' decisions as transcripts (docs/retries.md): the retry key a send carries, what
"the same request" means, what a retry under a taken key gets (:func:`decide`), and the
exchange that answers it (:func:`replay`) against a scripted worker — no sockets, no loop.
"""

from __future__ import annotations

from typing import Any

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.rest import match as rest_match
from gateway.a2a.version import Binding
from gateway.exchange.commands import Open, Post
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.model import Policy
from gateway.offline import Ledger, Offline
from gateway.exchange.rest import RestExchange
from gateway.exchange.retries import (
    DONE,
    IN_FLIGHT,
    UNKNOWN,
    Decision,
    RetryEntry,
    client_key,
    decide,
    form_of,
    key_problem,
    request_digest,
)
from gateway.invariants.admission import CardView

CARD = CardView(doc={"capabilities": {"streaming": True}}, fresh=True, reachable=True, etag=None)
MESSAGE = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "book it"}]}
SEND = {"message": MESSAGE}
NOW = 1_780_000_000.0
FORM = form_of("1.0", Binding.JSONRPC)


def look(entry: RetryEntry, digest: str, *, streaming: bool = False, now: float = NOW,
         waited_since: float = NOW, form: str = FORM) -> Decision:
    return decide(entry, digest, streaming=streaming, form=form, now=now, waited_since=waited_since,
                  wait_seconds=30.0, in_flight_seconds=600.0)


def task(tid: str, state: str) -> dict[str, Any]:
    return {"id": tid, "contextId": "c-1", "status": {"state": state}}


class TestTheKey:
    def test_the_idempotency_key_header_comes_first(self):
        assert client_key(Operation.SEND, " k-1 ", SEND, message_id_keys=True) == "h:k-1"

    def test_without_the_header_the_message_id_is_the_key(self):
        assert client_key(Operation.STREAM, None, SEND, message_id_keys=True) == "m:m-1"
        v03_rest = {"request": {"messageId": "m-2", "role": "ROLE_USER", "content": [{"text": "x"}]}}
        assert client_key(Operation.SEND, "", v03_rest, message_id_keys=True) == "m:m-2"

    def test_message_id_keys_off_leaves_only_the_header(self):
        assert client_key(Operation.SEND, None, SEND, message_id_keys=False) is None
        assert client_key(Operation.SEND, "k", SEND, message_id_keys=False) == "h:k"

    def test_only_sends_carry_a_key(self):
        assert client_key(Operation.GET, "k", {"id": "t-1"}, message_id_keys=True) is None
        assert client_key(Operation.SEND, None, {"message": {"role": "ROLE_USER"}}, message_id_keys=True) is None

    def test_an_overlong_key_is_refused(self):
        assert key_problem("h:" + "k" * 255) is None
        assert key_problem("h:" + "k" * 256) is not None


class TestTheSameRequest:
    def test_member_order_and_the_envelope_do_not_matter(self):
        reordered = {"message": {"parts": [{"text": "book it"}], "role": "ROLE_USER", "messageId": "m-1"}}
        assert request_digest(SEND) == request_digest(reordered)

    def test_another_text_or_configuration_is_another_request(self):
        assert request_digest(SEND) != request_digest({"message": {**MESSAGE, "parts": [{"text": "cancel it"}]}})
        assert request_digest(SEND) != request_digest({**SEND, "configuration": {"returnImmediately": True}})

    def test_an_entry_survives_its_stored_form(self):
        entry = RetryEntry("d", DONE, NOW, NOW + 1, "t-1", b'{"message":{}}', FORM)
        assert RetryEntry.decode(entry.encode()) == entry


class TestDecide:
    digest = request_digest(SEND)

    def test_a_different_request_under_the_key_is_a_conflict(self):
        decision = look(RetryEntry(self.digest, DONE, NOW, NOW, "t-1"), request_digest({"message": {**MESSAGE, "parts": []}}))
        assert decision.outcome == "conflict" and decision.error is not None
        assert decision.error[0] == jsonrpc.INVALID_REQUEST and "different request" in decision.error[1]

    def test_after_the_first_call_the_retry_gets_its_task(self):
        assert look(RetryEntry(self.digest, DONE, NOW, NOW, "t-1"), self.digest) == Decision("replayed", "t-1")

    def test_a_message_answer_is_given_again_in_the_form_it_was_written(self):
        entry = RetryEntry(self.digest, DONE, NOW, NOW, None, b'{"message":{"messageId":"a"}}', FORM)
        assert look(entry, self.digest).result == entry.result
        other = look(entry, self.digest, form=form_of("0.3", Binding.JSONRPC))
        assert other.outcome == "unknown" and other.error is not None

    def test_while_the_first_call_runs_with_no_task_the_retry_waits_then_is_told(self):
        entry = RetryEntry(self.digest, IN_FLIGHT, NOW, NOW)
        assert look(entry, self.digest, now=NOW + 29, waited_since=NOW).outcome == "wait"
        late = look(entry, self.digest, now=NOW + 31, waited_since=NOW)
        assert late.outcome == "in_progress" and late.error is not None and "in progress" in late.error[1]

    def test_a_unary_retry_past_its_wait_gets_the_task_as_recorded_now(self):
        entry = RetryEntry(self.digest, IN_FLIGHT, NOW, NOW, "t-1")
        assert look(entry, self.digest, now=NOW + 31, waited_since=NOW) == Decision("in_progress", "t-1")

    def test_a_stream_retry_attaches_to_a_running_task_at_once(self):
        entry = RetryEntry(self.digest, IN_FLIGHT, NOW, NOW, "t-1")
        assert look(entry, self.digest, streaming=True) == Decision("attach", "t-1")

    def test_a_key_left_in_flight_too_long_is_unknown(self):
        stale = RetryEntry(self.digest, IN_FLIGHT, NOW, NOW - 601)
        decision = look(stale, self.digest)
        assert decision.outcome == "unknown" and decision.error is not None
        assert decision.error[0] == jsonrpc.INTERNAL_ERROR
        assert look(RetryEntry(self.digest, UNKNOWN, NOW, NOW, "t-1"), self.digest) == Decision("unknown", "t-1")


def play_jsonrpc(method: str, decision: Decision, worker: list[dict[str, Any]], *,
                 version: str = "1.0") -> Offline:
    body = jsonrpc.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": SEND})
    req = jsonrpc.parse_request(body)
    info = jsonrpc.lookup_method(method)
    assert isinstance(req, jsonrpc.Request) and info is not None
    ex = JsonRpcExchange(req, body, info, CARD, Policy("w", resubscribe_attempts=1))
    ex.retry = decision
    return _run(ex, worker)


def _run(ex: Any, worker: list[dict[str, Any]]) -> Offline:
    offline = Offline("w", Ledger(), req_id=7)
    offline.worker.extend(worker)
    gen = ex.run()
    done = offline.run(gen)
    while not done:
        offline.worker.append({"end": True})
        done = offline.resume(gen)
    return offline


def posted(book: Offline) -> list[bytes]:
    return [c.body for c in book.commands if type(c) in (Post, Open)]


class TestReplay:
    def test_a_unary_retry_gets_the_task_as_recorded_and_sends_nothing_again(self):
        book = play_jsonrpc("SendMessage", Decision("replayed", "t-1"), [
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-1", "TASK_STATE_COMPLETED")}}])
        [get] = posted(book)
        assert b'"GetTask"' in get and b"SendMessage" not in get
        [out] = book.outputs
        assert out.doc["id"] == 7 and out.doc["result"]["task"]["id"] == "t-1"
        assert out.doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        [(tid, entry)] = [(t, e) for t, e in book.timeline if e.direction == "request"]
        assert tid == "t-1" and entry.verdict == "answered_locally" and entry.findings[0][:2] == ("retry", "replayed")

    def test_a_stored_message_answer_is_given_back_without_the_worker(self):
        book = play_jsonrpc("SendMessage", Decision("replayed", result=b'{"message":{"messageId":"a-1"}}'), [])
        assert posted(book) == []
        assert book.outputs[0].doc == {"jsonrpc": "2.0", "id": 7, "result": {"message": {"messageId": "a-1"}}}

    def test_a_conflict_is_refused_in_the_clients_form_and_nothing_is_sent(self):
        refusal = Decision("conflict", error=(jsonrpc.INVALID_REQUEST, "different request"))
        book = play_jsonrpc("SendMessage", refusal, [])
        assert posted(book) == []
        [out] = book.outputs
        assert out.status == 200 and out.doc["id"] == 7 and out.doc["error"]["code"] == -32600

    def test_a_rest_conflict_is_422_and_still_in_progress_409(self):
        call = rest_match("POST", "/message:send", "1.0")
        assert call is not None
        for outcome, status in (("conflict", 422), ("in_progress", 409)):
            ex = RestExchange(call, "POST", jsonrpc.dumps(SEND), dict(SEND), CARD, Policy("w"))
            ex.retry = Decision(outcome, error=(jsonrpc.INVALID_REQUEST, "no"))
            book = _run(ex, [])
            assert posted(book) == [] and book.outputs[0].status == status

    def test_a_stream_retry_of_a_finished_task_gets_its_snapshot_and_ends(self):
        book = play_jsonrpc("SendStreamingMessage", Decision("replayed", "t-1"), [
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-1", "TASK_STATE_COMPLETED")}}])
        assert len(posted(book)) == 1  # the GetTask only
        events = [o.doc for o in book.outputs if o.frame and o.doc is not None]
        assert [e["result"]["task"]["status"]["state"] for e in events] == ["TASK_STATE_COMPLETED"]

    def test_a_stream_retry_of_a_running_task_gets_its_snapshot_then_the_live_events(self):
        book = play_jsonrpc("SendStreamingMessage", Decision("attach", "t-1"), [
            {"answer": {"jsonrpc": "2.0", "id": "p", "result": task("t-1", "TASK_STATE_WORKING")}},
            {"open": True},
            {"events": [{"task": task("t-1", "TASK_STATE_WORKING")},
                        {"statusUpdate": {"taskId": "t-1", "contextId": "c-1",
                                          "status": {"state": "TASK_STATE_COMPLETED"}}}]},
        ])
        get, subscribe = posted(book)
        assert b'"GetTask"' in get and b'"SubscribeToTask"' in subscribe
        events = [o.doc["result"] for o in book.outputs if o.frame and o.doc is not None]
        # the snapshot, then the live update; the worker's repeated snapshot is not delivered twice
        assert events[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert len(events) == 2
        assert all(o.doc["id"] == 7 for o in book.outputs if o.frame and o.doc is not None)

    def test_a_task_the_worker_no_longer_gives_is_an_error_never_a_second_send(self):
        book = play_jsonrpc("SendMessage", Decision("replayed", "t-1"), [
            {"answer": {"jsonrpc": "2.0", "id": "p", "error": {"code": -32001, "message": "not found"}}}])
        assert all(b"SendMessage" not in body for body in posted(book))
        assert book.outputs[-1].doc["error"]["code"] == jsonrpc.INTERNAL_ERROR
