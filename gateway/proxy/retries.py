"""Safe retries, the shell's part (docs/retries.md): take a send's retry key before it is
forwarded, wait for a first call still in flight, and leave the outcome under the key.

The decisions are :mod:`gateway.exchange.retries`'s; the keys live in the retry store
(:mod:`gateway.ledger.retries`), every call through :meth:`InstrumentedLedger.timed <gateway.proxy.instrumented.InstrumentedLedger.timed>` (timed,
failures counted). :meth:`Retries.begin` runs before an exchange is driven
(:meth:`gateway.proxy.endpoint.ExchangeHandler.drive`):

* a send with no key, or with ``retries.enabled`` off: nothing to do;
* the key is free: it is written (state ``in_flight``) *before* the request is forwarded,
  and the returned :class:`Turn` owns it — for a stream, the driver notes the task id under it
  as soon as the first record of the task is stored (so a retried stream can attach while the
  first one runs; a unary send learns its task with its answer, written by
  :meth:`Turn.finish` right after), and :meth:`Turn.finish` leaves the outcome (``done`` with the task, or the Message
  answer; released when nothing reached the worker; ``unknown`` when it cannot be said);
* the key is taken: :func:`~gateway.exchange.retries.decide` — a first call still in flight
  with no task yet is polled (at most ``retries.wait_seconds``), then the exchange is given
  its :class:`~gateway.exchange.retries.Decision` (``exchange.retry``) and answers from it,
  forwarding nothing; counted in ``a2a_gateway_retries_total{outcome}`` and logged
  (``retry_answered``, with the key's digest, never the key). In observe mode the retry is
  counted and logged (``retry_observed``) without waiting, and forwarded as it is.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import secrets
import time
from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.errors import LedgerError
from gateway.exchange.commands import Count
from gateway.exchange.request import RequestExchange
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
    poll_interval,
    request_digest,
    scoped_key,
)
from gateway.invariants.model import Mode
from gateway.ledger.retries import RetryStore

RELEASED_OUTCOMES = frozenset({"not_admitted", "rejected", "worker_error", "upstream_status", "at_capacity",
                               "invalid_agent_response"})
"""Outcomes of a first call without a task after which a retry may go to the worker again:
the request was refused before it was sent, or the worker answered it with an error."""


class Turn:
    """A send that owns its retry key (:meth:`Retries.begin`): the driver notes the task
    (:meth:`note_task`), :meth:`finish` leaves the outcome."""

    def __init__(self, retries: Retries, key: str, entry: RetryEntry) -> None:
        self.retries = retries
        self.key = key
        self.entry = entry
        self.noted: str | None = None
        self.finished = False

    async def note_task(self, task_id: str) -> None:
        """The first call's task is ``task_id`` (its first record was just stored): kept under
        the key, still in flight. A failure is logged; the outcome is written at the end."""
        if self.noted is not None:
            return
        self.noted = task_id
        now = time.time()
        self.entry = RetryEntry(self.entry.digest, IN_FLIGHT, self.entry.created, now, task_id)
        try:
            await self.retries.call("retry_put", lambda: self.retries.store.put(self.key, self.entry, now))
        except LedgerError:
            pass

    async def finish(self, exchange: RequestExchange) -> None:
        """Leave the first call's outcome under the key (docs/retries.md §2): before a whole
        response goes to the client (the driver's ``before_respond``), else when the exchange
        ended (a stream). Once."""
        if self.finished:
            return
        self.finished = True
        summary, now = exchange.summary, time.time()
        task_id = summary.task_id or self.noted
        entry: RetryEntry | None = None
        if summary.outcome in RELEASED_OUTCOMES or exchange.unsent:
            entry = None  # refused before it was sent, or the worker refused it: it may go again
        elif task_id is not None:
            entry = RetryEntry(self.entry.digest, DONE, self.entry.created, now, task_id)
        elif isinstance(exchange.judged, dict) and not exchange.streaming:
            result = orjson.dumps(exchange.judged)
            kept = result if len(result) <= self.retries.rt.config.retries.max_result_bytes else None
            entry = RetryEntry(self.entry.digest, DONE, self.entry.created, now, None, kept,
                               form_of(exchange.ex.version.value, exchange.ex.binding))
        elif summary.outcome == "ok":  # answered without a task (a stream's direct Message)
            entry = RetryEntry(self.entry.digest, DONE, self.entry.created, now)
        else:
            entry = RetryEntry(self.entry.digest, UNKNOWN, self.entry.created, now)
        store = self.retries.store
        try:
            if entry is None:
                await self.retries.call("retry_delete", lambda: store.delete(self.key))
            else:
                await self.retries.call("retry_put", lambda: store.put(self.key, entry, now))
        except LedgerError:
            pass


class Retries:
    """The retry keys of one gateway process (``rt.retries``)."""

    def __init__(self, rt: Any, store: RetryStore) -> None:
        self.rt = rt
        self.store = store
        callers = rt.callers
        self._digest_key = callers.retry_secret() if callers is not None else secrets.token_bytes(32)

    async def call(self, operation: str, call: Any) -> Any:
        """``call()`` (a retry store call) timed and counted as ledger ``operation``."""
        return await self.rt.ledger.timed(operation, call())

    async def recover(self) -> int:
        """At start-up: keys left in flight become ``unknown`` (memory, SQLite)."""
        return int(await self.call("retry_recover", lambda: self.store.recover(time.time())))

    def stored_key(self, scoped: bytes) -> str:
        """The keyed digest a key is stored under (HMAC-SHA-256 with the callers' secret)."""
        digest = hmac.digest(self._digest_key, scoped, "sha256")  # one-shot: the same value, in C
        return base64.urlsafe_b64encode(digest[:24]).decode()

    def _stored_key_of(self, handler: Any, exchange: RequestExchange) -> str | None:
        """The stored name of ``exchange``'s retry key; ``None``: it has none (or an unusable one)."""
        upstream = handler.route.upstream
        key = client_key(exchange.ex.operation, handler.header(b"idempotency-key"), exchange.params,
                         message_id_keys=upstream.retries.message_id_keys)
        if key is None or key_problem(key) is not None:
            return None
        ex = exchange.ex
        return self.stored_key(scoped_key(upstream.name, ex.tenant, ex.caller, key))

    async def taken(self, handler: Any, exchange: RequestExchange) -> bool:
        """Whether ``exchange`` is a send whose retry key is already taken: it then makes no
        task of its own (it gets the first call's, waits, or is refused; docs/retries.md §2), so it needs no
        live-task slot (docs/limits.md §1). Read only; a store that fails answers False.

        Raises nothing."""
        if not self.rt.config.retries.enabled or exchange.policy.mode is Mode.OBSERVE:
            return False
        stored = self._stored_key_of(handler, exchange)
        if stored is None:
            return False
        try:
            held = await self.call("retry_get", lambda: self.store.get(stored, time.time()))
        except LedgerError:
            return False
        return held is not None

    async def begin(self, handler: Any, exchange: RequestExchange) -> Turn | None:
        """Take ``exchange``'s retry key, or set ``exchange.retry`` when the key is taken.
        Returns the :class:`Turn` when this request owns the key, else ``None``."""
        config = self.rt.config.retries
        upstream = handler.route.upstream
        if not config.enabled or exchange.retry is not None:
            return None
        key = client_key(exchange.ex.operation, handler.header(b"idempotency-key"), exchange.params,
                         message_id_keys=upstream.retries.message_id_keys)
        if key is None:
            return None
        problem = key_problem(key)
        if problem is not None and exchange.policy.mode is not Mode.OBSERVE:
            exchange.retry = Decision("invalid", error=(jsonrpc.INVALID_REQUEST, problem))
            return None
        if problem is not None:
            return None
        ex = exchange.ex
        stored = self.stored_key(scoped_key(upstream.name, ex.tenant, ex.caller, key))
        digest = request_digest(exchange.params)
        form = form_of(ex.version.value, ex.binding)
        began = now = time.time()
        mine = RetryEntry(digest, IN_FLIGHT, now, now)
        observe = exchange.policy.mode is Mode.OBSERVE  # counted, never answered from the key
        attempt = 0
        try:
            held = await self.call("retry_claim", lambda: self.store.claim(stored, mine, now))
            while True:
                if held is None:
                    if attempt:  # the key was released or expired while this request waited
                        held = await self.call("retry_claim", lambda: self.store.claim(stored, mine, now))
                        if held is not None:
                            continue
                    return Turn(self, stored, mine)
                decision = decide(held, digest, streaming=exchange.streaming, form=form, now=now,
                                  waited_since=began, wait_seconds=0.0 if observe else config.wait_seconds,
                                  in_flight_seconds=config.in_flight_seconds)
                if decision.outcome != "wait":
                    break
                await asyncio.sleep(poll_interval(attempt))
                attempt += 1
                now = time.time()
                held = await self.call("retry_get", lambda: self.store.get(stored, now))
        except LedgerError:
            if exchange.policy.fail_open:
                handler.reporter.report(Count("unchecked"))
                return None
            exchange.retry = Decision("unavailable", error=(jsonrpc.INTERNAL_ERROR,
                                                            "gateway task ledger unavailable"))
            return None
        outcome = decision.outcome
        if attempt and outcome == "replayed":
            outcome = "waited"
        elif outcome == "attach":
            outcome = "attached"
        handler.reporter.report(Count("retries", (outcome,)))
        self.rt.log.info("retry_observed" if observe else "retry_answered", extra={
            "upstream": upstream.name, "outcome": outcome, "key_digest": stored[:16], "task_id": decision.task_id})
        if not observe:
            exchange.retry = decision
        return None
