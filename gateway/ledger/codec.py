"""TaskRecord ↔ compact JSON for the durable ledgers (SQLite, Redis).

The stored document uses short keys to keep a tracked task small::

    {"u": upstream, "t": taskId, "c": contextId|null, "s": "WORKING", "oa": 1764445538.47,
     "ts": {terminal status}|null, "p": poisoned, "a": {"artifactId": [sealed, parts]},
     "e": card ETag|null}

The ledger's bookkeeping, ``version`` and ``needs_resync``, is not part of the record: it lives
beside the document (columns / hash fields), so the ledger updates it without rewriting the
document, and comes back beside the decoded record in a :class:`~gateway.ledger.base.Stored`.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.invariants.model import ArtifactRecord, TaskRecord
from gateway.a2a.states import TaskState

_PREFIX = "TASK_STATE_"


def encode(record: TaskRecord) -> bytes:
    """The stored JSON document of ``record`` (UTF-8 bytes)."""
    doc: dict[str, Any] = {
        "u": record.upstream,
        "t": record.task_id,
        "c": record.context_id,
        "s": record.state.value.removeprefix(_PREFIX),
        "oa": record.observed_at,
        "ts": dict(record.terminal_status) if record.terminal_status is not None else None,
        "p": record.poisoned,
        "a": {k: [v.sealed, v.parts] for k, v in record.artifacts.items()},
        "e": record.card_etag,
    }
    return orjson.dumps(doc)


def decode(data: bytes | str) -> TaskRecord:
    """Rebuild a :class:`TaskRecord` from :func:`encode` output.

    Raises:
        ValueError: the document is not a stored record.
    """
    try:
        doc = orjson.loads(data)
        return TaskRecord(
            upstream=doc["u"],
            task_id=doc["t"],
            context_id=doc["c"],
            state=TaskState(_PREFIX + doc["s"]),
            observed_at=float(doc["oa"]),
            terminal_status=doc["ts"],
            poisoned=bool(doc["p"]),
            artifacts={k: ArtifactRecord(bool(v[0]), int(v[1])) for k, v in doc["a"].items()},
            card_etag=doc.get("e"),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"not a stored task record: {exc}") from exc
