"""gateway.a2a.payloads: the task-bearing object in either version (docs/protocol.md §3.4-3.5)."""

from __future__ import annotations

import copy

import pytest

from gateway.a2a.payloads import (
    Kind,
    artifact_of,
    flag,
    generation_of,
    locate,
    parts_count,
    rebuild,
    with_state,
)

TASK = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}
MESSAGE = {"messageId": "m-1", "role": "ROLE_AGENT", "taskId": "t-1", "contextId": "c-1",
           "parts": [{"text": "hi"}]}
STATUS = {"taskId": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"}}
ARTIFACT = {"taskId": "t-1", "contextId": "c-1",
            "artifact": {"artifactId": "a-1", "parts": [{"text": "x"}]}, "append": True}


class TestLocateV10:
    @pytest.mark.parametrize(("member", "inner", "kind"), [
        ("task", TASK, Kind.TASK),
        ("message", MESSAGE, Kind.MESSAGE),
        ("statusUpdate", STATUS, Kind.STATUS),
        ("artifactUpdate", ARTIFACT, Kind.ARTIFACT),
    ])
    def test_stream_response_wrappers(self, member, inner, kind):
        """v1.0 StreamResponse / SendMessageResponse: one member names the payload."""
        item = locate({member: inner})
        assert item.kind is kind
        assert item.obj is inner
        assert item.wrapper == member

    def test_bare_task_from_get_task(self):
        """v1.0 GetTask/CancelTask answer a bare Task, not wrapped."""
        item = locate(TASK)
        assert (item.kind, item.obj, item.wrapper) == (Kind.TASK, TASK, None)

    def test_bare_task_whose_status_is_empty(self):
        """F03: ProtoJSON leaves out the zero enum, so status may be {}."""
        task = {"id": "t-3", "contextId": "c-3", "status": {}}
        assert locate(task).kind is Kind.TASK


class TestLocateV03:
    @pytest.mark.parametrize(("kind_value", "kind"), [
        ("task", Kind.TASK),
        ("message", Kind.TASK),  # a Message carries no status: an id and a status make a Task
        ("status-update", Kind.STATUS),
        ("artifact-update", Kind.ARTIFACT),
    ])
    def test_kind_objects_are_located_in_place(self, kind_value, kind):
        """v0.3: result is the object itself with a kind discriminator (an object with an id
        and a status is judged as a Task whatever else it claims: its state never escapes)."""
        obj = {"kind": kind_value, "id": "t-1", "taskId": "t-1", "contextId": "c-1",
               "status": {"state": "working"}}
        item = locate(obj)
        assert item.kind is kind
        assert item.obj is obj
        assert item.wrapper is None

    def test_v03_task_with_a_message_in_history_is_still_a_task(self):
        obj = {"kind": "task", "id": "t-1", "contextId": "c-1", "status": {"state": "working"},
               "history": [{"kind": "message", "messageId": "m", "role": "user", "parts": []}]}
        assert locate(obj).kind is Kind.TASK


class TestLocateOther:
    @pytest.mark.parametrize("result", [None, "x", 3, [], [TASK], {}, {"configs": []},
                                        {"tasks": [TASK], "nextPageToken": ""},
                                        {"kind": "nonsense"}])
    def test_anything_else_is_other(self, result):
        assert locate(result).kind is Kind.OTHER

    def test_a_wrapper_member_that_is_not_an_object_is_other(self):
        assert locate({"task": "t-1"}).kind is Kind.OTHER


class TestAccessors:
    def test_task_id_of_a_task_is_its_id(self):
        assert locate({"task": TASK}).task_id == "t-1"

    @pytest.mark.parametrize("result", [{"statusUpdate": STATUS}, {"artifactUpdate": ARTIFACT},
                                        {"message": MESSAGE}])
    def test_task_id_of_events_and_messages_is_task_id(self, result):
        assert locate(result).task_id == "t-1"

    def test_context_id(self):
        assert locate({"statusUpdate": STATUS}).context_id == "c-1"

    @pytest.mark.parametrize("value", ["", 7, None])
    def test_empty_or_non_string_ids_read_as_none(self, value):
        item = locate({"task": {"id": value, "contextId": value, "status": {}}})
        assert item.task_id is None
        assert item.context_id is None

    def test_ids_are_read_once_when_the_item_is_made(self):
        inner = {**STATUS}
        item = locate({"statusUpdate": inner})
        inner["taskId"] = "t-other"
        assert (item.task_id, item.context_id) == ("t-1", "c-1")
        assert not hasattr(item, "__dict__")  # a __slots__ class: cheap to make per observation

    def test_raw_state_is_exactly_what_was_sent(self):
        item = locate({"statusUpdate": {**STATUS, "status": {"state": "Input-Required"}}})
        assert item.raw_state == "Input-Required"

    def test_raw_state_of_an_empty_status_is_none(self):
        assert locate({"task": {"id": "t-3", "status": {}}}).raw_state is None

    def test_raw_state_keeps_non_string_values(self):
        assert locate({"task": {"id": "t-3", "status": {"state": 3}}}).raw_state == 3

    def test_artifact_updates_and_messages_have_no_status(self):
        assert locate({"artifactUpdate": ARTIFACT}).status is None
        assert locate({"artifactUpdate": ARTIFACT}).raw_state is None
        assert locate({"message": MESSAGE}).status is None

    def test_non_object_status_reads_as_none(self):
        assert locate({"task": {"id": "t-1", "status": "working"}}).status is None


class TestHelpers:
    def test_rebuild_keeps_the_wrapper(self):
        result = {"statusUpdate": STATUS}
        new = {**STATUS, "status": {"state": "completed"}}
        assert rebuild(locate(result), new, result) == {"statusUpdate": new}

    def test_rebuild_of_a_bare_object_is_the_object(self):
        new = {**TASK, "status": {"state": "working"}}
        assert rebuild(locate(TASK), new, TASK) is new

    def test_with_state_copies_and_keeps_other_status_fields(self):
        obj = {"id": "t-1", "status": {"state": "working", "timestamp": "2026-01-01T00:00:00Z"}}
        before = copy.deepcopy(obj)
        out = with_state(obj, "TASK_STATE_WORKING")
        assert out["status"] == {"state": "TASK_STATE_WORKING", "timestamp": "2026-01-01T00:00:00Z"}
        assert obj == before

    def test_with_state_adds_a_missing_status(self):
        assert with_state({"id": "t-1"}, "unknown") == {"id": "t-1", "status": {"state": "unknown"}}

    def test_artifact_of_requires_an_artifact_id(self):
        assert artifact_of(locate({"artifactUpdate": ARTIFACT})) == ARTIFACT["artifact"]
        no_id = {**ARTIFACT, "artifact": {"parts": []}}
        assert artifact_of(locate({"artifactUpdate": no_id})) is None

    def test_parts_count(self):
        assert parts_count({"parts": [{"text": "a"}, {"text": "b"}]}) == 2
        assert parts_count({}) == 0
        assert parts_count({"parts": "ab"}) == 0

    @pytest.mark.parametrize(("obj", "expected"), [
        ({"append": True}, True), ({"append": False}, False), ({}, False),
        ({"append": "true"}, False), ({"append": 1}, False),
    ])
    def test_flag_is_true_only_for_json_true(self, obj, expected):
        """append / lastChunk are bools defaulting to false (docs/protocol.md §3.1)."""
        assert flag(obj, "append") is expected


@pytest.mark.parametrize(("value", "expected"), [
    (1, 1), (5, 5), ("5", 5), ("0005", 5), (7.0, 7), (2**63 - 1, 2**63 - 1), (str(2**63 - 1), 2**63 - 1),
    (0, None), ("0", None), (-1, None), ("-1", None), (2**63, None), (str(2**63), None),
    (True, None), (False, None), (2.5, None), (float("inf"), None), (float("nan"), None),
    ("", None), (" 5", None), ("5 ", None), ("+5", None), ("1e3", None), ("\uff15", None),
    (None, None), ([5], None), ({"value": 5}, None),
    ("0" * 18 + "5", 5), ("9" * 5000, None),  # past Python's int() digit limit: none, never an error
])
def test_generation_of_reads_protojson_int64_and_nothing_else(value, expected):
    """SPEC11 §3.2.7 / PROTO11 int64 ``generation`` (docs/resume.md §3.1): ProtoJSON writes a
    decimal string, parsers also read numbers; 0 (the proto3 default) means none."""
    assert generation_of({"generation": value}) == expected
    assert generation_of({}) is None
