"""Oracles for worker answers, written from the docs rather than from the gateway's code:
task-state spellings (docs/protocol.md §2, docs/field-cases.md F01, F03 and the unknown-state
policy), a WHATWG reading of a worker's SSE stream (docs/protocol.md §7), and "nothing
invented": what the client gets is what the worker sent, with at most the state re-spelled
for the client's version and the v0.3 end-of-stream flag set (F17 (a)).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.fuzz.support import INVALID, loads_or_invalid, same_value

STATES = ("UNSPECIFIED", "SUBMITTED", "WORKING", "COMPLETED", "FAILED", "CANCELED", "INPUT_REQUIRED",
          "REJECTED", "AUTH_REQUIRED")
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELED", "REJECTED"})
INTERRUPTED = frozenset({"INPUT_REQUIRED", "AUTH_REQUIRED"})
V10_SPELLING = {s: "TASK_STATE_" + s for s in STATES}
V03_SPELLING = {"UNSPECIFIED": "unknown", **{s: s.lower().replace("_", "-") for s in STATES[1:]}}
V03_REST_SPELLING = {**V10_SPELLING, "CANCELED": "TASK_STATE_CANCELLED"}  # v0.3 REST is ProtoJSON (docs/protocol.md §2, §11 pitfall 11)
CANONICAL = {"1.0": frozenset(V10_SPELLING.values()), "0.3": frozenset(V03_SPELLING.values()),
             "0.3-rest": frozenset(V03_REST_SPELLING.values())}
"""The spellings a client gets, by wire form: v1.0 (both bindings), v0.3 JSON-RPC, v0.3 REST."""

# The spellings the docs name outright (docs/protocol.md §2 table, docs/field-cases.md F01, F03,
# F17 (a)): each must be accepted.
DOCUMENTED = {
    **{v: s for s, v in V10_SPELLING.items()}, **{v: s for s, v in V03_SPELLING.items()},
    "TASK_STATE_CANCELLED": "CANCELED", "cancelled": "CANCELED", "input_required": "INPUT_REQUIRED",
    "INPUT_REQUIRED": "INPUT_REQUIRED", "Input-Required": "INPUT_REQUIRED", "Working": "WORKING",
    "Completed": "COMPLETED", "": "UNSPECIFIED",
}
UNKNOWN = "?"


def fold(raw: Any) -> str | None:
    """The canonical state of a spelling by the docs' rule — letter case and ``-`` / ``_`` /
    space separators do not matter, a ``TASK_STATE_`` prefix neither, ``unknown`` is
    unspecified, a double-l cancel is a cancel — or :data:`UNKNOWN` for anything else (a
    non-string, a lookalike letter, ``paused``). ``None`` (absent) is unspecified."""
    if raw is None or raw == "":
        return "UNSPECIFIED"
    if not isinstance(raw, str) or not raw.isascii():
        return UNKNOWN
    key = re.sub(r"[-\s]", "_", raw.strip().upper()).removeprefix("TASK_STATE_")
    key = {"UNKNOWN": "UNSPECIFIED", "CANCELLED": "CANCELED"}.get(key, key)
    return key if key in STATES else UNKNOWN


def must_refuse(raw: Any) -> bool:
    """A state the gateway must refuse (the unknown-state policy): no reading of it exists."""
    return fold(raw) == UNKNOWN and not must_accept(raw)


def must_accept(raw: Any) -> bool:
    """A state the docs name outright (or an absent one): the gateway must read it."""
    return raw is None or (isinstance(raw, str) and raw in DOCUMENTED)


# ------------------------------------------------------------------------------ SSE, WHATWG

@dataclass
class WorkerEvent:
    """One event a worker's SSE body dispatches (``dangling``: the last one, cut off by EOF)."""

    data: str
    event: str | None
    doc: Any  # the data parsed strictly, or INVALID
    dangling: bool = False


def sse_events(raw: bytes) -> list[WorkerEvent]:
    """The events of a worker's SSE body by the WHATWG rules: the body is UTF-8 decoded with
    replacement, a leading BOM dropped; CR, LF and CRLF end lines; a field line without
    ``:`` is that field with an empty value; an event is dispatched at a blank line when it
    has data. An event cut off by EOF (no blank line after it), which WHATWG drops, is kept
    with ``dangling=True``: docs/field-cases.md F08 (i) leaves its use to the gateway."""
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
    *lines, tail = re.split(r"\r\n|\r|\n", text)
    out: list[WorkerEvent] = []
    data: list[str] = []
    event: list[str | None] = [None]

    def dispatch(dangling: bool) -> None:
        if data:
            joined = "\n".join(data)
            out.append(WorkerEvent(joined, event[0], loads_or_invalid(joined.encode()), dangling))
        data.clear()
        event[0] = None

    def field(line: str) -> None:
        if line.startswith(":"):
            return
        name, sep, value = line.partition(":")
        value = value[1:] if sep and value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event[0] = value

    for line in lines:
        if line == "":
            dispatch(False)
        else:
            field(line)
    if tail:
        field(tail)
    dispatch(True)
    return out


# ------------------------------------------------------------------------------ nothing invented

def respelled(worker: Any, client: Any, version: str, parent: str | None = None) -> bool:
    """True when ``client`` is ``worker`` with, at most, each ``status.state`` re-spelled
    canonically for ``version`` (same state by :func:`fold`; an absent state may become the
    unspecified one) and the ``final`` flag of a status update set or dropped."""
    if isinstance(worker, dict) and isinstance(client, dict):
        keys = set(worker) | set(client)
        for key in keys:
            if key == "final" and "status" in worker:
                if key in client and not isinstance(client[key], bool):
                    return False
                continue
            if key == "state" and parent == "status":
                w, c = worker.get(key), client.get(key)
                if key in client and key in worker and same_value(c, w):
                    continue
                if key not in client:
                    if fold(w) != "UNSPECIFIED":
                        return False
                    continue
                if c not in CANONICAL[version] or fold(w) == UNKNOWN or fold(c) != fold(w):
                    return False
                continue
            if key == "status" and key not in worker and ("id" in worker or worker.get("kind") == "task"):
                # a Task without a status reads as unspecified; a v0.3 client is told so
                if client[key] != {"state": V03_SPELLING["UNSPECIFIED"] if version == "0.3" else V10_SPELLING["UNSPECIFIED"]}:
                    return False
                continue
            if key not in worker or key not in client:
                return False
            if key == "artifacts" and _artifacts_deduplicated(worker[key], client[key]):
                continue
            if not respelled(worker[key], client[key], version, key):
                return False
        return True
    if isinstance(worker, list) and isinstance(client, list):
        return len(worker) == len(client) and all(respelled(w, c, version, parent) for w, c in zip(worker, client))
    return same_value(client, worker)


def _artifacts_deduplicated(worker: Any, client: Any) -> bool:
    """docs/field-cases.md F06: "No two artifacts ever share the id" — a snapshot listing one
    artifact id twice reaches the client with one of them, as the worker wrote it."""
    if not (isinstance(worker, list) and isinstance(client, list)) or len(client) >= len(worker):
        return False
    ids = [a.get("artifactId") if isinstance(a, dict) else None for a in client]
    if any(not isinstance(i, str) for i in ids) or len(set(ids)) != len(ids):
        return False
    worker_ids = {a.get("artifactId") for a in worker if isinstance(a, dict) and isinstance(a.get("artifactId"), str)}
    return set(ids) == worker_ids and all(any(same_value(c, w) for w in worker) for c in client)


def states_in(value: Any, parent: str | None = None) -> list[Any]:
    """Every ``status.state`` inside ``value``."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "state" and parent == "status":
                found.append(item)
            else:
                found.extend(states_in(item, key))
    elif isinstance(value, list):
        for item in value:
            found.extend(states_in(item, parent))
    return found


__all__ = ["INVALID", "CANONICAL", "TERMINAL", "INTERRUPTED", "fold", "must_refuse", "must_accept",
           "sse_events", "respelled", "states_in", "WorkerEvent"]
