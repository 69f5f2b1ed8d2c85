"""gateway.invariants.artifacts: append / replace / lastChunk rules (F06, docs/protocol.md §3.1)."""

from __future__ import annotations

import copy

from gateway.a2a.states import TaskState
from gateway.a2a.bridge import V1
from gateway.invariants.artifacts import EMPTY, apply_update, clean_snapshot_artifacts, fold
from gateway.invariants.model import ArtifactRecord, Finding, TaskRecord


def update(aid: str, n_parts: int, *, append: bool | None = None, last: bool | None = None):
    """(update event, its artifact) with ``n_parts`` text parts."""
    artifact = {"artifactId": aid, "parts": [{"text": str(i)} for i in range(n_parts)]}
    event: dict = {"taskId": "t-6", "contextId": "c-6", "artifact": artifact}
    if append is not None:
        event["append"] = append
    if last is not None:
        event["lastChunk"] = last
    return event, artifact


def apply(arts: dict, aid: str, n: int, **flags) -> tuple[str | None, list[Finding]]:
    findings: list[Finding] = []
    event, artifact = update(aid, n, **flags)
    return apply_update(event, artifact, arts, findings)[0], findings


def counts(arts: dict[str, ArtifactRecord]) -> dict[str, tuple[bool, int]]:
    """Each artifact's (sealed, parts)."""
    return {aid: (a.sealed, a.parts) for aid, a in arts.items()}


def record(artifacts: dict[str, ArtifactRecord]) -> TaskRecord:
    return TaskRecord("w", "t-6", "c-6", TaskState.WORKING, 1.0, artifacts=artifacts)


class TestApplyUpdate:
    def test_a_new_id_is_created_unsealed(self):
        arts: dict = {}
        assert apply(arts, "a-1", 2) == (None, [])
        assert counts(arts) == {"a-1": (False, 2)}
        assert arts["a-1"].digest == fold(EMPTY, [{"text": "0"}, {"text": "1"}], V1)  # what was shown

    def test_f06_append_to_an_unknown_id_creates_it(self):
        arts: dict = {}
        assert apply(arts, "a-7", 1, append=True) == (None, [])
        assert counts(arts)["a-7"] == (False, 1)

    def test_f06_append_adds_parts_to_an_existing_id(self):
        arts = {"a-6": ArtifactRecord(sealed=False, parts=1)}
        apply(arts, "a-6", 1, append=True)
        assert arts["a-6"].parts == 2

    def test_f06_append_false_replaces_an_unsealed_id_whole(self):
        arts = {"a-6": ArtifactRecord(sealed=False, parts=5)}
        assert apply(arts, "a-6", 1, append=False) == (None, [])
        assert counts(arts)["a-6"] == (False, 1)

    def test_f06_absent_append_means_replace(self):
        """append defaults to false (docs/protocol.md §3.1)."""
        arts = {"a-6": ArtifactRecord(sealed=False, parts=5)}
        apply(arts, "a-6", 2)
        assert arts["a-6"].parts == 2

    def test_f06_last_chunk_seals(self):
        arts = {"a-6": ArtifactRecord(sealed=False, parts=1)}
        apply(arts, "a-6", 1, append=True, last=True)
        assert arts["a-6"] == ArtifactRecord(sealed=True, parts=2)

    def test_f06_any_update_to_a_sealed_id_is_refused_and_changes_nothing(self):
        for flags in ({"append": True}, {"append": False}, {"append": True, "last": True}, {}):
            arts = {"a-6": ArtifactRecord(sealed=True, parts=2)}
            result, findings = apply(arts, "a-6", 1, **flags)
            assert result == "artifact_after_last_chunk"
            assert [(f.category, f.kind) for f in findings] == \
                [("divergence", "artifact_after_last_chunk")]
            assert arts == {"a-6": ArtifactRecord(sealed=True, parts=2)}

    def test_other_ids_are_untouched(self):
        arts = {"a-6": ArtifactRecord(sealed=True, parts=2)}
        apply(arts, "a-7", 1)
        assert arts["a-6"] == ArtifactRecord(sealed=True, parts=2)

    def test_non_boolean_flags_count_as_false(self):
        arts = {"a-6": ArtifactRecord(sealed=False, parts=3)}
        apply(arts, "a-6", 1, append="true", last=1)  # type: ignore[arg-type]
        assert counts(arts)["a-6"] == (False, 1)


def snap(*entries: tuple[str, list[str]]) -> list[dict]:
    return [{"artifactId": aid, "parts": [{"text": t} for t in texts]} for aid, texts in entries]


class TestCleanSnapshot:
    def test_an_agreeing_snapshot_is_returned_as_the_same_list(self):
        arts = snap(("a-6", ["Hel", "lo"]), ("a-7", ["x"]))
        findings: list[Finding] = []
        rec = record({"a-6": ArtifactRecord(sealed=True, parts=2)})
        assert clean_snapshot_artifacts(arts, rec, findings) is arts
        assert findings == []

    def test_f06_a_sealed_artifact_with_extra_parts_is_cut_back(self):
        arts = snap(("a-6", ["Hel", "lo", "!!"]))
        before = copy.deepcopy(arts)
        findings: list[Finding] = []
        rec = record({"a-6": ArtifactRecord(sealed=True, parts=2)})
        out = clean_snapshot_artifacts(arts, rec, findings)
        assert out == snap(("a-6", ["Hel", "lo"]))
        assert [f.kind for f in findings] == ["artifact_after_last_chunk"]
        assert arts == before  # the worker's snapshot is not mutated

    def test_an_unsealed_artifact_may_grow(self):
        arts = snap(("a-6", ["Hel", "lo", "!!"]))
        rec = record({"a-6": ArtifactRecord(sealed=False, parts=2)})
        assert clean_snapshot_artifacts(arts, rec, []) is arts

    def test_f06_entries_sharing_an_id_are_merged_into_the_first(self):
        arts = snap(("a-6", ["Hel"]), ("a-7", ["x"]), ("a-6", ["lo"]))
        before = copy.deepcopy(arts)
        out = clean_snapshot_artifacts(arts, record({}), [])
        assert out == snap(("a-6", ["Hel", "lo"]), ("a-7", ["x"]))
        assert arts == before

    def test_merged_duplicates_are_then_cut_to_the_sealed_size(self):
        arts = snap(("a-6", ["Hel"]), ("a-6", ["lo", "!!"]))
        rec = record({"a-6": ArtifactRecord(sealed=True, parts=2)})
        assert clean_snapshot_artifacts(arts, rec, []) == snap(("a-6", ["Hel", "lo"]))

    def test_entries_without_an_id_are_kept_in_place(self):
        arts = [{"parts": []}, "junk", *snap(("a-1", ["x"]))]
        assert clean_snapshot_artifacts(arts, record({}), []) is arts

    def test_out_receives_records_with_sealed_flags_from_the_ledger(self):
        arts = snap(("a-6", ["Hel", "lo", "!!"]), ("a-8", ["new"]))
        rec = record({"a-6": ArtifactRecord(sealed=True, parts=2)})
        out: dict[str, ArtifactRecord] = {}
        clean_snapshot_artifacts(arts, rec, [], out)
        assert counts(out) == {"a-6": (True, 2), "a-8": (False, 1)}
        assert out["a-6"] is rec.artifacts["a-6"]  # sealed: kept as it was
