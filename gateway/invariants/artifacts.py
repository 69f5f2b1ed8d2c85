"""Artifact merge rules — append, replace and ``lastChunk`` sealing (docs/field-cases.md F06) —
and what a client was shown of an artifact, against which every later answer is corrected
(docs/field-cases.md F18, F19).

docs/protocol.md §3.1 TaskArtifactUpdateEvent: ``append=false`` creates or replaces the artifact,
``append=true`` appends its parts (or creates it when the id is new), ``lastChunk=true`` seals
it; a later update to a sealed id is an agent bug and is not delivered.

An artifact is *frozen* once it is sealed or its task is terminal. The record then keeps what
the client was shown of it: its parts count and, when the gateway saw the whole content
delivered, their fold (:func:`fold`, a digest of each part's content in order, the same
whatever the protocol version or binding). An answer showing a frozen artifact — a ``GetTask``,
``ListTasks``, a subscribe snapshot, a pushed Task, in any binding and version — shows it only
as far as it agrees: cut back to the frozen parts when it only has more of them, withheld when
its content differs (the gateway keeps no content, so it cannot show the original instead).

The fold is taken per delivered part, by the stream that delivered it
(:attr:`~gateway.invariants.model.StreamState.shown`), and written into the record only when
the artifact is frozen; a snapshot's artifacts are folded once, when they are checked against
a frozen artifact or frozen themselves. Pure: stdlib only.
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


def shown_after(update: dict[str, Any], artifact: dict[str, Any], known: bool,
                shown: Mapping[str, Shown], dialect: Dialect) -> Shown | None:
    """What a stream that delivered ``shown`` has shown of the artifact once it delivers
    ``update``: a replace, or an append creating the artifact (not ``known`` to the record),
    starts afresh; an append continues the stream's own fold. ``None``: the stream does not
    know the whole artifact (it appends to one it never saw whole)."""
    aid = artifact["artifactId"]
    parts = _parts(artifact)
    if not flag(update, "append") or (not known and aid not in shown):
        return len(parts), fold(EMPTY, parts, dialect)
    before = shown.get(aid)
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
    (:attr:`~gateway.invariants.model.StreamState.shown`; ``None`` outside a stream: nothing
    is folded unless the update seals). Returns ``(refusal, view)``: ``refusal`` is ``None``
    when the update is delivered, else the finding's kind (``artifact_after_last_chunk``, or
    :data:`LIMIT` for an artifact past :data:`~gateway.invariants.model.MAX_ARTIFACTS`) after
    appending the finding; ``view`` is what the stream has shown of the artifact with this
    update (``None``: not known). An update to a sealed artifact is delivered only when it
    shows again exactly what was sealed (a second stream of the task catching up); the record
    is then left as it is. A sealing update records the stream's view, digest included, when
    the stream knows the whole artifact.
    """
    aid = artifact["artifactId"]
    prev = artifacts.get(aid)
    last = flag(update, "lastChunk")
    view = None
    if shown is not None or last or (prev is not None and prev.sealed):
        view = shown_after(update, artifact, prev is not None, shown or {}, dialect)
    if prev is not None and prev.sealed:
        if view is not None and prev.digest is not None and view == (prev.parts, prev.digest):
            return None, view
        findings.append(Finding("divergence", AFTER_LAST_CHUNK, f"artifact {aid}"))
        return AFTER_LAST_CHUNK, None
    if prev is None and len(artifacts) >= MAX_ARTIFACTS:
        findings.append(Finding("limit", LIMIT, f"artifact {aid}"))
        return LIMIT, None
    count = len(_parts(artifact))
    if flag(update, "append") and prev is not None:
        count += prev.parts
    digest = None
    if last and view is not None:
        count, digest = view  # the sealing stream's own deliveries: what its client was shown
    artifacts[aid] = artifact_record(last, count, digest)
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
    """The task became terminal: each artifact without a digest takes what the stream that
    recorded the terminal state delivered of it, when it delivered it whole (``shown``);
    ``artifacts`` is mutated in place. The others keep their part count only."""
    for aid, view in shown.items():
        known = artifacts.get(aid)
        if known is not None and known.digest is None:
            artifacts[aid] = ArtifactRecord(known.sealed, view[0], view[1])


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
      the others are written into ``out`` — frozen ones as they were, the rest with the
      snapshot's part count, and with ``freeze_all`` (this snapshot makes the task terminal)
      with their fold too.
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
        view = (len(parts), fold(EMPTY, parts, dialect)) if freeze_all or views is not None else None
        if views is not None and view is not None:
            views[aid] = view
        if out is not None:
            out[aid] = artifact_record(known.sealed if known is not None else False, len(parts),
                                       view[1] if freeze_all and view is not None else None)
    if withheld:
        result = [a for a in result if not (isinstance(a, dict) and a.get("artifactId") in withheld)]
        changed = True
        if corrected is not None:
            corrected.extend(aid for aid in merged if aid in withheld)
    return result if changed else arts
