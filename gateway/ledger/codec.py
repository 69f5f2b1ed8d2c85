"""TaskRecord ↔ compact JSON for the durable ledgers (SQLite, Redis).

The stored document uses short keys to keep a tracked task small::

    {"u": upstream, "t": taskId, "c": contextId|null, "s": "WORKING", "oa": 1764445538.47,
     "ts": {terminal status}|null, "p": poisoned, "a": {"artifactId": [sealed, parts, digest?]},
     "e": card ETag|null, "g": generation, "pg": "generation_gap", "n": tenant,
     "cl": [caller fingerprint, …], "cg": card generation}

``g`` (the task generation, A2A v1.1 draft) and ``pg`` (the reason a ``GetTask`` is owed) are
written only when set (docs/resume.md §3.1): a record of a worker without generations keeps
its size, and a document written before they existed reads as ``None`` for both. ``n`` (the
tenant, docs/callers.md §1) and ``cl`` (the callers seen, docs/callers.md §2) likewise: absent
is no tenant (``""``) and no caller seen. An artifact's ``digest`` (what the client was shown of
a frozen artifact, docs/field-cases.md F18) is its list's third element, only when known, and
``cg`` (the card generation the task was last observed under, F20) is written only when known:
a document written before either reads as ``None`` for it.

The ledger's bookkeeping, ``version`` and ``needs_resync``, is not part of the record: it lives
beside the document (columns / hash fields), so the ledger updates it without rewriting the
document, and comes back beside the decoded record in a :class:`~gateway.ledger.base.Stored`.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.invariants.model import ArtifactRecord, TaskRecord, artifact_record
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
        "a": {k: [v.sealed, v.parts] if v.digest is None else [v.sealed, v.parts, v.digest.hex()]
              for k, v in record.artifacts.items()},
        "e": record.card_etag,
    }
    if record.generation is not None:
        doc["g"] = record.generation
    if record.pending_get is not None:
        doc["pg"] = record.pending_get
    if record.tenant:
        doc["n"] = record.tenant
    if record.callers:
        doc["cl"] = list(record.callers)
    if record.card_generation is not None:
        doc["cg"] = record.card_generation
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
            artifacts={k: _artifact(v) for k, v in doc["a"].items()},
            card_etag=doc.get("e"),
            generation=_generation(doc.get("g")),
            pending_get=_text(doc.get("pg")),
            tenant=_text(doc.get("n")) or "",
            callers=_callers(doc.get("cl")),
            card_generation=_generation(doc.get("cg")),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"not a stored task record: {exc}") from exc


def _artifact(value: Any) -> ArtifactRecord:
    """A stored artifact: ``[sealed, parts]``, or ``[sealed, parts, digest]`` (hex)."""
    digest = _text(value[2]) if len(value) > 2 else None
    return artifact_record(bool(value[0]), int(value[1]), None if digest is None else bytes.fromhex(digest))


def _generation(value: Any) -> int | None:
    """A stored generation (of the task, or of the card): ``None`` (absent), else a
    non-negative integer."""
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise ValueError(f"generation {value!r} is not a non-negative integer")
    return value


def _callers(value: Any) -> tuple[str, ...]:
    """Stored caller fingerprints: absent is none, else a list of strings."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"callers {value!r} are not a list of strings")
    return tuple(value)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{value!r} is not a string")
