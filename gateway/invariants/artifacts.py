"""Artifact merge rules: append, replace and ``lastChunk`` sealing (docs/field-cases.md F06).

docs/protocol.md §3.1 TaskArtifactUpdateEvent: ``append=false`` creates or replaces the artifact,
``append=true`` appends its parts (or creates it when the id is new), ``lastChunk=true`` seals
it; a later update to a sealed id is an agent bug and is not delivered. Pure: stdlib only.
"""

from __future__ import annotations

from typing import Any

from gateway.a2a.payloads import flag, parts_count
from gateway.invariants.model import (
    NO_ARTIFACTS,
    ArtifactRecord,
    Finding,
    TaskRecord,
    artifact_record,
)


def apply_update(
    update: dict[str, Any],
    artifact: dict[str, Any],
    artifacts: dict[str, ArtifactRecord],
    findings: list[Finding],
) -> str | None:
    """Apply one ``artifactUpdate`` to ``artifacts`` (mutated in place).

    Returns ``None`` when the update is accepted, else the divergence kind
    (``artifact_after_last_chunk``) after appending its finding.
    """
    aid = artifact["artifactId"]
    prev = artifacts.get(aid)
    if prev is not None and prev.sealed:
        findings.append(Finding("divergence", "artifact_after_last_chunk", f"artifact {aid}"))
        return "artifact_after_last_chunk"
    count = parts_count(artifact)
    if flag(update, "append") and prev is not None:
        count += prev.parts
    artifacts[aid] = artifact_record(flag(update, "lastChunk"), count)
    return None


def clean_snapshot_artifacts(
    arts: list[Any],
    record: TaskRecord | None,
    findings: list[Finding],
    out: dict[str, ArtifactRecord] | None = None,
) -> list[Any]:
    """Make a Task snapshot's ``artifacts`` agree with the ledger (``record`` ``None``: a task
    the ledger does not know yet, so no artifact is sealed).

    Two entries sharing one ``artifactId`` are merged into the first (parts appended); a sealed
    artifact carrying more parts than it had when sealed is cut back and counted as
    ``artifact_after_last_chunk``. When ``out`` is given, it receives the resulting
    per-artifact records (sealed flags kept from ``record``).

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
    for aid, art in merged.items():
        known = known_artifacts.get(aid)
        if known is not None and known.sealed and parts_count(art) > known.parts:
            findings.append(Finding("divergence", "artifact_after_last_chunk", f"artifact {aid}"))
            art["parts"] = _parts(art)[: known.parts]
            changed = True
        if out is not None:
            sealed = known.sealed if known is not None else False
            out[aid] = artifact_record(sealed, parts_count(art))
    return result if changed else arts


def _parts(artifact: dict[str, Any]) -> list[Any]:
    """An artifact's ``parts`` as a list (empty when missing or malformed)."""
    parts = artifact.get("parts")
    return list(parts) if isinstance(parts, list) else []
