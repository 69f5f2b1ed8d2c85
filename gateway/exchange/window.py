"""What the replay window keeps of a delivered event, sans I/O (docs/resume.md §1.3).

The ledger stores opaque payload bytes (:meth:`~gateway.ledger.base.TaskLedger.append_event`);
this module is their one encoding: the event's payload as the client received it — a JSON-RPC
``result`` or a REST ``data:`` body — with the dialect it is written in and whether the task
was terminal after it::

    {"d": "1.0" | "0.3/jsonrpc" | "0.3/rest", "t": true | false, "r": <payload>}

A replayed event goes to a client of any binding and version: it is converted from the stored
dialect into the client's (:func:`gateway.a2a.bridge.convert_event`) and framed with the new
request's JSON-RPC id.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.a2a import jsonrpc
from gateway.a2a.bridge import Dialect, convert_event
from gateway.errors import NestingTooDeepError


def encode(result: Any, dialect: Dialect, terminal: bool) -> bytes:
    """The window payload of one delivered event (``result`` in ``dialect``), a ``bytes``
    object of its own length: orjson (3.13) returns its output in a block of at least 4 KiB,
    which a kept payload would hold for as long as the window keeps the event (about 4 KiB
    per event instead of a few hundred bytes in the memory ledger); the copy costs ~1 µs."""
    return bytes(memoryview(jsonrpc.dumps({"d": dialect.value, "t": terminal, "r": result})))


def decode(payload: bytes, dialect: Dialect, max_depth: int) -> tuple[Any, bool]:
    """``(payload in dialect, terminal)`` of a stored event.

    Raises:
        ValueError: the bytes are no window payload (a damaged or foreign entry).
    """
    try:
        doc = jsonrpc.loads(payload, max_depth)
        stored, result, terminal = Dialect(doc["d"]), doc["r"], doc["t"]
    except (orjson.JSONDecodeError, NestingTooDeepError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a replay window payload: {exc}") from None
    if stored is not dialect:
        result = convert_event(result, stored, dialect)
    return result, bool(terminal)
