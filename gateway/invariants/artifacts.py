"""Artifact merge rules — append, replace and ``lastChunk`` sealing (docs/field-cases.md F06) —
and what a client was shown of an artifact, against which every later answer is corrected
(docs/field-cases.md F18, F19).

docs/protocol.md §3.1 TaskArtifactUpdateEvent: ``append=false`` creates or replaces the artifact,
``append=true`` appends its parts (or creates it when the id is new), ``lastChunk=true`` seals
it; a later update to a sealed id is an agent bug and is not delivered.

The record keeps, per artifact, what the gateway showed of it: its part count and the fold of
its parts (:func:`fold`, a 16-byte digest of each part's content in order, the same whatever
the protocol version or binding, and whatever the chunking) — after each delivered update and
each delivered Task snapshot. A stream folds its own deliveries
(:attr:`~gateway.invariants.model.StreamState.shown`), so that two streams of one task never
fold one chunk twice; a stream appending to an artifact it never showed whole (a later turn's)
continues the record's fold. An artifact is *frozen* once it is sealed or its task is terminal
(with the view of the stream that recorded the terminal state, for the artifacts it showed
whole); from then on an answer showing it — a ``GetTask``, ``ListTasks``, a subscribe snapshot,
a pushed Task, in any binding and version — shows it only as far as it agrees: cut back to the
frozen parts when it only has more of them, withheld when its content differs (the gateway
keeps no content, so it cannot show the original instead). Where the fold is not known (a
record written before folds, a view lost to a race), only the part count bounds the answer.
Pure: stdlib only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from hashlib import blake2b
from typing import Any

import orjson

from gateway.a2a.bridge import V1, Dialect, convert_part
from gateway.a2a.payloads import flag
from gateway.invariants.model import (
    MAX_ARTIFACTS,
    NO_ARTIFACTS,
    NO_SHOWN,
    ArtifactRecord,
    Finding,
    Shown,
    TaskRecord,
    artifact_record,
)

EMPTY = bytes(16)
"""The fold of no parts (a fold is 16 bytes)."""
LIMIT = "max_artifacts_per_task"
"""The bound an artifact past :data:`~gateway.invariants.model.MAX_ARTIFACTS` reaches (a
``limit`` finding: ``a2a_gateway_limits_reached_total{limit="max_artifacts_per_task"}``)."""
AFTER_LAST_CHUNK = "artifact_after_last_chunk"
AFTER_TERMINAL = "artifact_after_terminal"
_CONTENT = ((b"t", "text"), (b"r", "raw"), (b"u", "url"), (b"d", "data"))
_SORTED = orjson.OPT_SORT_KEYS


def part_content(part: Any, dialect: Dialect) -> bytes:
    """What a part says, as bytes that are the same whatever version and binding carried it:
    its one content member in v1.0 form (``text``, ``raw``, ``url`` or ``data``, docs/bridge.md
    §1.3), tagged; media type, file name and metadata are left out (not every version carries
    them). A part of no known shape is taken whole."""
    if type(part) is dict and (dialect is V1 or part.get("kind") == "text"):
        text = part.get("text")  # the common part, read without converting it
        if type(text) is str:
            return b"t" + text.encode("utf-8", "surrogatepass")
    v1 = part if dialect is V1 else convert_part(part, dialect, V1)
    if isinstance(v1, dict):
        for tag, member in _CONTENT:
            if member in v1:
                value = v1[member]
                if member != "data" and type(value) is str:
                    return tag + value.encode("utf-8", "surrogatepass")
                return tag + _dumps(value)
    return b"?" + _dumps(v1)


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=_SORTED)
    except TypeError:  # a value orjson cannot write (it came from another parser): its repr
        return repr(value).encode("utf-8", "surrogatepass")


def fold(digest: bytes, parts: Iterable[Any], dialect: Dialect) -> bytes:
    """``digest`` (the fold of the parts before, :data:`EMPTY` for none) folded over ``parts``
    one by one, so the fold of an artifact does not depend on how it was chunked."""
    for part in parts:
        digest = blake2b(digest + part_content(part, dialect), digest_size=16).digest()
    return digest


def _parts(artifact: dict[str, Any]) -> list[Any]:
    """An artifact's ``parts`` as a list (empty when missing or malformed)."""
    parts = artifact.get("parts")
    return parts if isinstance(parts, list) else []


def shown_after(update: dict[str, Any], artifact: dict[str, Any], prev: ArtifactRecord | None,
                shown: Mapping[str, Shown], dialect: Dialect) -> Shown | None:
    """What has been shown of the artifact once ``update`` is delivered, by a stream that
    delivered ``shown`` before (empty outside a stream): a replace, or an append creating the
    artifact (``prev``, the record's, is ``None``), starts afresh; an append continues the
    stream's own view of the artifact, else the record's (``prev``, a later turn's stream
    appending to an earlier turn's artifact). ``None``: neither knows the whole artifact."""
    aid = artifact["artifactId"]
    parts = _parts(artifact)
    if not flag(update, "append") or (prev is None and aid not in shown):
        return len(parts), fold(EMPTY, parts, dialect)
    before = shown.get(aid)
    if before is None and prev is not None and prev.digest is not None:
        before = prev.parts, prev.digest
    if before is None:
        return None
    return before[0] + len(parts), fold(before[1], parts, dialect)


def apply_update(
    update: dict[str, Any],
    artifact: dict[str, Any],
    artifacts: dict[str, ArtifactRecord],
    findings: list[Finding],
    *,
    dialect: Dialect = V1,
    shown: Mapping[str, Shown] | None = None,
) -> tuple[str | None, Shown | None]:
    """Apply one ``artifactUpdate`` to ``artifacts`` (mutated in place).

    ``shown`` is what the stream carrying the update delivered before
    (:attr:`~gateway.invariants.model.StreamState.shown`; ``None`` outside a stream). Returns
    ``(refusal, view)``: ``refusal`` is ``None`` when the update is delivered, else the
    finding's kind (``artifact_after_last_chunk``, or :data:`LIMIT` for an artifact past
    :data:`~gateway.invariants.model.MAX_ARTIFACTS`) after appending the finding; ``view`` is
    what has been shown of the artifact with this update (:func:`shown_after`; ``None``: not
    known). The record takes that view — its part count and fold — or, when it is not known,
    the part count alone. An update to a sealed artifact is delivered only when it shows again
    exactly what was sealed (a second stream of the task catching up); the record is then left
    as it is.
    """
    aid = artifact["artifactId"]
    prev = artifacts.get(aid)
    view = shown_after(update, artifact, prev, shown if shown is not None else NO_SHOWN, dialect)
    if prev is not None and prev.sealed:
        if view is not None and prev.digest is not None and view == (prev.parts, prev.digest):
            return None, view
        findings.append(Finding("divergence", AFTER_LAST_CHUNK, f"artifact {aid}"))
        return AFTER_LAST_CHUNK, None
    if prev is None and len(artifacts) >= MAX_ARTIFACTS:
        findings.append(Finding("limit", LIMIT, f"artifact {aid}"))
        return LIMIT, None
    if view is not None:
        count, digest = view
    else:
        count, digest = len(_parts(artifact)), None
        if flag(update, "append") and prev is not None:
            count += prev.parts
    artifacts[aid] = artifact_record(flag(update, "lastChunk"), count, digest)
    return None, view


def within_frozen(prev: ArtifactRecord, view: Shown | None) -> bool:
    """True when a stream's view of a frozen artifact (``prev``), after one more update, still
    fits what was frozen: fewer parts (a stream catching up), or exactly the frozen ones. An
    update whose view is not known fits an unsealed artifact (nothing tells it apart from a
    late chunk the record already counted) and never a sealed one."""
    if view is None:
        return not prev.sealed
    if view[0] < prev.parts:
        return True
    return view[0] == prev.parts and (prev.digest is None or view[1] == prev.digest)


def freeze(artifacts: dict[str, ArtifactRecord], shown: Mapping[str, Shown]) -> None:
    """The task became terminal: each unsealed artifact takes what the stream that recorded
    the terminal state delivered of it, when it delivered it whole (``shown``: that stream's
    client was shown exactly that); the others keep the record's view. ``artifacts`` is
    mutated in place."""
    for aid, view in shown.items():
        known = artifacts.get(aid)
        if known is not None and not known.sealed and (known.parts, known.digest) != view:
            artifacts[aid] = ArtifactRecord(False, view[0], view[1])


def clean_snapshot_artifacts(
    arts: list[Any],
    record: TaskRecord | None,
    findings: list[Finding],
    out: dict[str, ArtifactRecord] | None = None,
    *,
    dialect: Dialect = V1,
    frozen: bool = False,
    freeze_all: bool = False,
    views: dict[str, Shown] | None = None,
    corrected: list[str] | None = None,
) -> list[Any]:
    """Make a Task snapshot's ``artifacts`` agree with the ledger (``record`` ``None``: a task
    the ledger does not know yet, so nothing is frozen).

    * Two entries sharing one ``artifactId`` are merged into the first (parts appended).
    * A frozen artifact — sealed, or any known one when ``frozen`` (the task is terminal) — is
      shown only as far as it agrees with the record: cut back to its recorded parts when the
      answer has more (and, with a digest, their fold matches), withheld when its content
      differs or it has fewer parts than a digest covers; ``artifact_after_last_chunk`` (sealed)
      or ``artifact_after_terminal`` is counted.
    * With ``out`` (the new record's artifacts), an artifact the record does not hold past
      :data:`~gateway.invariants.model.MAX_ARTIFACTS` is withheld (a :data:`LIMIT` finding);
      the others are written into ``out`` — frozen ones as they were, the rest as the snapshot
      shows them (part count and fold). A unary answer (no ``views``) that shows a known
      artifact otherwise than the record, without making the task terminal (``freeze_all``),
      may have raced a stream's updates: the record takes its part count but no fold.
    * ``views`` (a stream's snapshot) receives what is delivered of each artifact.
    * ``corrected`` receives the ids of the artifacts cut or withheld.

    Returns ``arts`` itself when nothing changed, else a new list.
    """
    merged: dict[str, dict[str, Any]] = {}
    result: list[Any] = []
    changed = False
    for art in arts:
        aid = art.get("artifactId") if isinstance(art, dict) else None
        if not isinstance(aid, str):
            result.append(art)
            continue
        if aid in merged:
            first = merged[aid]
            first["parts"] = _parts(first) + _parts(art)
            changed = True
            continue
        copy = dict(art)
        merged[aid] = copy
        result.append(copy)
    known_artifacts = record.artifacts if record is not None else NO_ARTIFACTS
    withheld: set[str] = set()
    for aid, art in merged.items():
        known = known_artifacts.get(aid)
        parts = _parts(art)
        if known is not None and (known.sealed or frozen):
            kind = AFTER_LAST_CHUNK if known.sealed else AFTER_TERMINAL
            n, digest = known.parts, known.digest
            if digest is not None and (len(parts) < n or fold(EMPTY, parts[:n], dialect) != digest):
                findings.append(Finding("divergence", kind, f"artifact {aid} not as it was shown"))
                withheld.add(aid)
                continue
            if len(parts) > n:
                findings.append(Finding("divergence", kind, f"artifact {aid}"))
                art["parts"] = parts = parts[:n]
                changed = True
                if corrected is not None:
                    corrected.append(aid)
            if views is not None:
                views[aid] = (n, digest) if digest is not None else (len(parts), fold(EMPTY, parts, dialect))
            if out is not None:
                out[aid] = known
            continue
        if known is None and out is not None and aid not in out and len(out) >= MAX_ARTIFACTS:
            findings.append(Finding("limit", LIMIT, f"artifact {aid}"))
            withheld.add(aid)
            continue
        if out is None and views is None:
            continue  # an artifact a terminal record does not hold: shown as it is, nothing to keep
        view = (len(parts), fold(EMPTY, parts, dialect))
        if views is not None:
            views[aid] = view
        if out is not None:
            if known is None or freeze_all or views is not None or view == (known.parts, known.digest):
                out[aid] = artifact_record(False, *view)
            else:  # an answer not in a stream's order may race its updates: its fold is not taken
                out[aid] = artifact_record(False, view[0], None)
    if withheld:
        result = [a for a in result if not (isinstance(a, dict) and a.get("artifactId") in withheld)]
        changed = True
        if corrected is not None:
            corrected.extend(aid for aid in merged if aid in withheld)
    return result if changed else arts
