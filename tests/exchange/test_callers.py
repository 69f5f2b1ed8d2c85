"""docs/callers.md §3 as transcripts: a local answer from the ledger — the refusal of an action
on a terminal task, the replay of a resumed stream — only for a caller seen on the task; any
other caller's request is sent to the worker, counted."""

from __future__ import annotations

from typing import Any

from gateway.a2a import jsonrpc
from gateway.a2a.states import TaskState
from gateway.exchange.commands import Open, Post, ReadWindow
from gateway.exchange.jsonrpc import JsonRpcExchange
from gateway.exchange.model import Policy
from gateway.offline import Ledger, Offline
from gateway.invariants.model import Caller, TaskRecord
from tests.exchange.test_resume import CARD, first_stream, frames, status, task

ALICE = Caller("fp-alice", frozenset({"fp-alice"}))
MALLORY = Caller("fp-mallory", frozenset({"fp-mallory"}))


def play(method: str, params: Any, worker: list[dict[str, Any]], ledger: Ledger, caller: Caller, *,
         last_event_id: str | None = None) -> Offline:
    body = jsonrpc.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    req = jsonrpc.parse_request(body)
    info = jsonrpc.lookup_method(method)
    assert isinstance(req, jsonrpc.Request) and info is not None
    ex = JsonRpcExchange(req, body, info, CARD, Policy("w", resubscribe_attempts=0), caller=caller)
    ex.last_event_id = last_event_id
    offline = Offline("w", ledger, req_id=1)
    offline.worker.extend(worker)
    gen = ex.run()
    done = offline.run(gen)
    while not done:
        offline.worker.append({"end": True})
        done = offline.resume(gen)
    return offline


def skipped(book: Offline) -> list[tuple[str, ...]]:
    return [c.labels for c in book.counts if c.metric == "local_answer_skipped"]


def terminal_ledger() -> Ledger:
    ledger = Ledger()
    ledger.add(TaskRecord("w", "t-1", "c-1", TaskState.COMPLETED, 1.0, callers=("fp-alice",)))
    return ledger


MESSAGE = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": "t-1"}}
NOT_FOUND = {"jsonrpc": "2.0", "id": 1, "error": {"code": jsonrpc.TASK_NOT_FOUND, "message": "task t-1 not found"}}
PROBE_NOT_FOUND = {"jsonrpc": "2.0", "id": "p", "error": {"code": jsonrpc.TASK_NOT_FOUND, "message": "no"}}


def test_the_caller_seen_gets_the_local_refusal_and_the_worker_is_not_asked() -> None:
    book = play("SendMessage", MESSAGE, [], terminal_ledger(), ALICE)
    assert not [c for c in book.commands if type(c) is Post]
    assert book.outputs[-1].doc["error"]["code"] == jsonrpc.UNSUPPORTED_OPERATION
    assert skipped(book) == []


def test_another_caller_is_sent_to_the_worker_and_gets_its_answer() -> None:
    book = play("SendMessage", MESSAGE, [{"answer": NOT_FOUND}, {"answer": PROBE_NOT_FOUND}],
                terminal_ledger(), MALLORY)
    posts = [c for c in book.commands if type(c) is Post]
    assert posts and posts[0].target is None  # the client's own request went on
    assert book.outputs[-1].doc["error"] == NOT_FOUND["error"]  # not rewritten to -32004
    assert skipped(book) == [("unknown_caller",), ("unknown_caller",)]  # the refusal, then the rewrite


def test_a_resume_by_another_caller_is_subscribed_upstream_without_the_replay() -> None:
    ledger = Ledger()
    first = play("SendStreamingMessage", {"message": {"messageId": "m-1", "role": "ROLE_USER",
                                                      "parts": [{"text": "go"}]}},
                 [{"open": True}, {"events": [{"task": task("t-1", "TASK_STATE_WORKING")},
                                              status("t-1", "TASK_STATE_COMPLETED")]}, {"end": True}],
                 ledger, ALICE)
    ids = [event_id for event_id, _ in frames(first)]
    assert len(ids) == 2 and None not in ids
    theirs = play("SubscribeToTask", {"id": "t-1"}, [{"answer": NOT_FOUND}, {"answer": PROBE_NOT_FOUND}],
                  ledger, MALLORY, last_event_id=ids[0])
    assert [type(c) for c in theirs.commands if type(c) in (ReadWindow, Open)] == [ReadWindow, Open]
    assert frames(theirs) == [] and theirs.outputs[-1].doc["error"] == NOT_FOUND["error"]
    assert skipped(theirs) == [("unknown_caller",), ("unknown_caller",)]  # the replay, the rewrite
    mine = play("SubscribeToTask", {"id": "t-1"}, [], ledger, ALICE, last_event_id=ids[0])
    assert skipped(mine) == [] and not [c for c in mine.commands if type(c) is Open]
    assert [event_id for event_id, _ in frames(mine)] == [ids[1]]  # the window's next event


def test_first_stream_helper_still_works_without_callers() -> None:
    """Exchanges built without a caller (replay, tests) answer as before: not told apart."""
    book = first_stream(Ledger())
    assert frames(book)
