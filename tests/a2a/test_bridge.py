"""gateway.a2a.bridge: one A2A dialect's values in, the same meaning in another's out (docs/bridge.md §1).

Every expected value is written by hand from PROTO (v1.0), TYPES03 and PROTO03 (v0.3) and the
SDK sources cited in docs/bridge.md, never computed with the code under test. A row of a
``*_ALL`` table is one value in its three dialects and is checked in all six directions; the
``*_ONE_WAY`` tables hold the lossy directions, each row a (source, value, destination,
expected) quadruple.
"""

from __future__ import annotations

import copy
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.a2a import bridge
from gateway.a2a.bridge import (
    J03,
    R03,
    V1,
    Dialect,
    convert_artifact,
    convert_error,
    convert_event,
    convert_message,
    convert_params,
    convert_part,
    convert_push_config,
    convert_result,
    convert_role,
    convert_state,
    convert_status,
    convert_task,
    dialect_of,
)
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import BridgeError, GatewayError

DIALECTS = (V1, J03, R03)
PAIRS = [(a, b) for a, b in itertools.permutations(DIALECTS, 2)]
INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def six_ways(rows):
    """(src, value, dst, expected) for every ordered pair of a row's three dialect forms."""
    return [(src, row[src], dst, row[dst]) for row in rows for src, dst in PAIRS]


def run(fn, src, value, dst):
    before = copy.deepcopy(value)
    out = fn(value, src, dst)
    assert value == before  # inputs are never changed
    return out


# ------------------------------------------------------------------------------ dialect_of

@pytest.mark.parametrize(("version", "binding", "dialect"), [
    (ProtocolVersion.V1_0, Binding.JSONRPC, Dialect.V1_0),
    (ProtocolVersion.V1_0, Binding.REST, Dialect.V1_0),
    (ProtocolVersion.V0_3, Binding.JSONRPC, Dialect.V0_3_JSONRPC),
    (ProtocolVersion.V0_3, Binding.REST, Dialect.V0_3_REST),
])
def test_dialect_of(version, binding, dialect):
    assert dialect_of(version, binding) is dialect


# ------------------------------------------------------------------------------ states, roles

STATES_ALL = [
    {V1: "TASK_STATE_UNSPECIFIED", J03: "unknown", R03: "TASK_STATE_UNSPECIFIED"},
    {V1: "TASK_STATE_SUBMITTED", J03: "submitted", R03: "TASK_STATE_SUBMITTED"},
    {V1: "TASK_STATE_WORKING", J03: "working", R03: "TASK_STATE_WORKING"},
    {V1: "TASK_STATE_COMPLETED", J03: "completed", R03: "TASK_STATE_COMPLETED"},
    {V1: "TASK_STATE_FAILED", J03: "failed", R03: "TASK_STATE_FAILED"},
    {V1: "TASK_STATE_CANCELED", J03: "canceled", R03: "TASK_STATE_CANCELLED"},
    {V1: "TASK_STATE_REJECTED", J03: "rejected", R03: "TASK_STATE_REJECTED"},
    {V1: "TASK_STATE_INPUT_REQUIRED", J03: "input-required", R03: "TASK_STATE_INPUT_REQUIRED"},
    {V1: "TASK_STATE_AUTH_REQUIRED", J03: "auth-required", R03: "TASK_STATE_AUTH_REQUIRED"},
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), six_ways(STATES_ALL))
def test_canonical_states_are_respelled(src, value, dst, expected):
    assert convert_state(value, src, dst) == expected


# Not the source dialect's canonical spelling: passed through unchanged for the engine to
# normalize and count, or refuse.
NON_CANONICAL = [
    (V1, "input_required"), (V1, "Working"), (V1, "bogus"), (V1, "completed"),
    (V1, "TASK_STATE_CANCELLED"), (V1, ""), (V1, None), (V1, 3),
    (J03, "TASK_STATE_COMPLETED"), (J03, "input_required"), (J03, "Completed"),
    (J03, "cancelled"), (J03, "paused"),
    (R03, "TASK_STATE_CANCELED"), (R03, "completed"), (R03, "task_state_working"),
]


@pytest.mark.parametrize(("src", "value"), NON_CANONICAL)
@pytest.mark.parametrize("dst", DIALECTS)
def test_non_canonical_states_pass_through(src, value, dst):
    assert convert_state(value, src, dst) == value


def test_a_misspelled_state_inside_a_task_reaches_the_engine_unchanged():
    task = {"id": "t", "contextId": "c", "status": {"state": "input_required"}}
    assert convert_task(task, V1, J03) == {"kind": "task", "id": "t", "contextId": "c",
                                           "status": {"state": "input_required"}}


ROLES_ALL = [
    {V1: "ROLE_USER", J03: "user", R03: "ROLE_USER"},
    {V1: "ROLE_AGENT", J03: "agent", R03: "ROLE_AGENT"},
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), six_ways(ROLES_ALL))
def test_roles(src, value, dst, expected):
    assert convert_role(value, src, dst) == expected


@pytest.mark.parametrize(("src", "value"), [(V1, "user"), (V1, "ROLE_UNSPECIFIED"), (J03, "ROLE_USER"),
                                            (J03, "system"), (R03, "agent"), (V1, None)])
@pytest.mark.parametrize("dst", DIALECTS)
def test_other_roles_pass_through(src, value, dst):
    assert convert_role(value, src, dst) == value


# ------------------------------------------------------------------------------ parts

PARTS_ALL = [
    {V1: {"text": "hi"}, J03: {"kind": "text", "text": "hi"}, R03: {"text": "hi"}},
    {V1: {"url": "https://x/f.pdf", "mediaType": "application/pdf"},
     J03: {"kind": "file", "file": {"uri": "https://x/f.pdf", "mimeType": "application/pdf"}},
     R03: {"file": {"fileWithUri": "https://x/f.pdf", "mimeType": "application/pdf"}}},
    {V1: {"raw": "aGk="}, J03: {"kind": "file", "file": {"bytes": "aGk="}},
     R03: {"file": {"fileWithBytes": "aGk="}}},
    {V1: {"raw": "aGk=", "mediaType": "text/plain"},
     J03: {"kind": "file", "file": {"bytes": "aGk=", "mimeType": "text/plain"}},
     R03: {"file": {"fileWithBytes": "aGk=", "mimeType": "text/plain"}}},
    {V1: {"data": {"a": [1, 2]}}, J03: {"kind": "data", "data": {"a": [1, 2]}},
     R03: {"data": {"data": {"a": [1, 2]}}}},
]
PARTS_ONE_WAY = [
    # filename: v0.3 JSON-RPC has file.name; PROTO03's FilePart has no name (lost)
    (V1, {"url": "u", "filename": "f.txt"}, J03, {"kind": "file", "file": {"uri": "u", "name": "f.txt"}}),
    (J03, {"kind": "file", "file": {"uri": "u", "name": "f.txt"}}, V1, {"url": "u", "filename": "f.txt"}),
    (V1, {"url": "u", "filename": "f.txt"}, R03, {"file": {"fileWithUri": "u"}}),
    (J03, {"kind": "file", "file": {"bytes": "eA==", "name": "x"}}, R03, {"file": {"fileWithBytes": "eA=="}}),
    # part metadata: v1.0 and TYPES03 PartBase have it; PROTO03's Part has not
    (V1, {"text": "a", "metadata": {"k": 1}}, J03, {"kind": "text", "text": "a", "metadata": {"k": 1}}),
    (J03, {"kind": "text", "text": "a", "metadata": {"k": 1}}, V1, {"text": "a", "metadata": {"k": 1}}),
    (V1, {"text": "a", "metadata": {"k": 1}}, R03, {"text": "a"}),
    # a text or data part's mediaType: v0.3 has none (lost)
    (V1, {"text": "a", "mediaType": "text/plain"}, J03, {"kind": "text", "text": "a"}),
    (V1, {"text": "a", "mediaType": "text/plain"}, R03, {"text": "a"}),
    (V1, {"data": {"a": 1}, "mediaType": "application/json"}, J03, {"kind": "data", "data": {"a": 1}}),
    # v1.0 data that is not an object: wrapped as {"value": …} (the SDK's data_part_compat)
    (V1, {"data": [1, 2]}, J03,
     {"kind": "data", "data": {"value": [1, 2]}, "metadata": {"data_part_compat": True}}),
    (V1, {"data": "s", "metadata": {"k": "v"}}, J03,
     {"kind": "data", "data": {"value": "s"}, "metadata": {"k": "v", "data_part_compat": True}}),
    (J03, {"kind": "data", "data": {"value": [1, 2]}, "metadata": {"data_part_compat": True}}, V1,
     {"data": [1, 2]}),
    (J03, {"kind": "data", "data": {"value": 7}, "metadata": {"data_part_compat": True, "k": "v"}}, V1,
     {"data": 7, "metadata": {"k": "v"}}),
    (J03, {"kind": "data", "data": {"value": 7}}, V1, {"data": {"value": 7}}),  # no marker: an object
    (V1, {"data": None}, R03, {"data": {"data": {"value": None}}}),  # PROTO03: no metadata, marker lost
    (R03, {"data": {"data": {"value": None}}}, V1, {"data": {"value": None}}),
    (V1, {"data": 5}, R03, {"data": {"data": {"value": 5}}}),
    # PROTO03 → v0.3 JSON-RPC
    (R03, {"file": {"fileWithUri": "u", "mimeType": "m"}}, J03,
     {"kind": "file", "file": {"uri": "u", "mimeType": "m"}}),
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), six_ways(PARTS_ALL) + PARTS_ONE_WAY)
def test_parts(src, value, dst, expected):
    assert run(convert_part, src, value, dst) == expected


UNKNOWN_PARTS = [
    (V1, {"mediaType": "x"}), (V1, {"text": "a", "url": "u"}), (V1, "text"), (V1, None),
    (J03, {"kind": "image", "image": "x"}), (J03, {"text": "no kind"}), (J03, {"kind": "text"}),
    (J03, {"kind": "file", "file": {"uri": "u", "bytes": "b"}}), (J03, {"kind": "file", "file": "u"}),
    (R03, {"file": {"mimeType": "m"}}), (R03, {"data": {"a": 1}}), (R03, {"kind": "text", "x": 1}),
    (R03, []),
]


@pytest.mark.parametrize(("src", "value"), UNKNOWN_PARTS)
@pytest.mark.parametrize("dst", DIALECTS)
def test_a_part_of_no_known_shape_passes_through(src, value, dst):
    assert convert_part(value, src, dst) == value


# ------------------------------------------------------------------------------ message

MESSAGES_ALL = [
    {V1: {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
     J03: {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "hi"}]},
     R03: {"messageId": "m1", "role": "ROLE_USER", "content": [{"text": "hi"}]}},
    {V1: {"messageId": "m2", "contextId": "c", "taskId": "t", "role": "ROLE_AGENT",
          "parts": [], "metadata": {"a": {"b": 1}}, "extensions": ["urn:x"]},
     J03: {"kind": "message", "messageId": "m2", "contextId": "c", "taskId": "t", "role": "agent",
           "parts": [], "metadata": {"a": {"b": 1}}, "extensions": ["urn:x"]},
     R03: {"messageId": "m2", "contextId": "c", "taskId": "t", "role": "ROLE_AGENT",
           "content": [], "metadata": {"a": {"b": 1}}, "extensions": ["urn:x"]}},
]
MESSAGES_ONE_WAY = [
    # referenceTaskIds: v1.0 and TYPES03 only
    (V1, {"messageId": "m", "role": "ROLE_USER", "parts": [], "referenceTaskIds": ["t0"]}, J03,
     {"kind": "message", "messageId": "m", "role": "user", "parts": [], "referenceTaskIds": ["t0"]}),
    (J03, {"kind": "message", "messageId": "m", "role": "user", "parts": [], "referenceTaskIds": ["t0"]}, V1,
     {"messageId": "m", "role": "ROLE_USER", "parts": [], "referenceTaskIds": ["t0"]}),
    (V1, {"messageId": "m", "role": "ROLE_USER", "parts": [], "referenceTaskIds": ["t0"]}, R03,
     {"messageId": "m", "role": "ROLE_USER", "content": []}),
    # members no version defines are dropped; a stray v1 kind too
    (V1, {"messageId": "m", "role": "ROLE_USER", "parts": [], "extra": 1, "kind": "message"}, R03,
     {"messageId": "m", "role": "ROLE_USER", "content": []}),
    (J03, {"kind": "message", "messageId": "m", "role": "user", "parts": [], "x": 1}, V1,
     {"messageId": "m", "role": "ROLE_USER", "parts": []}),
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), six_ways(MESSAGES_ALL) + MESSAGES_ONE_WAY)
def test_messages(src, value, dst, expected):
    assert run(convert_message, src, value, dst) == expected


@pytest.mark.parametrize("value", [None, "m", 3, ["m"]])
@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_a_message_that_is_not_an_object_passes_through(value, src, dst):
    assert convert_message(value, src, dst) == value


# ------------------------------------------------------------------------------ status, artifact, task

STATUSES_ALL = [
    {V1: {"state": "TASK_STATE_WORKING", "timestamp": "2026-01-02T03:04:05.678Z"},
     J03: {"state": "working", "timestamp": "2026-01-02T03:04:05.678Z"},
     R03: {"state": "TASK_STATE_WORKING", "timestamp": "2026-01-02T03:04:05.678Z"}},
    {V1: {"state": "TASK_STATE_INPUT_REQUIRED",
          "message": {"messageId": "q", "role": "ROLE_AGENT", "parts": [{"text": "?"}]}},
     J03: {"state": "input-required",
           "message": {"kind": "message", "messageId": "q", "role": "agent", "parts": [{"kind": "text", "text": "?"}]}},
     R03: {"state": "TASK_STATE_INPUT_REQUIRED",
           "message": {"messageId": "q", "role": "ROLE_AGENT", "content": [{"text": "?"}]}}},
]
STATUSES_ONE_WAY = [
    # PROTO03's field is `update` (JSON name `message`): read either
    (R03, {"state": "TASK_STATE_CANCELLED", "update": {"messageId": "q", "role": "ROLE_AGENT", "content": []}}, V1,
     {"state": "TASK_STATE_CANCELED", "message": {"messageId": "q", "role": "ROLE_AGENT", "parts": []}}),
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), six_ways(STATUSES_ALL) + STATUSES_ONE_WAY)
def test_statuses(src, value, dst, expected):
    assert run(convert_status, src, value, dst) == expected


ARTIFACTS_ALL = [
    {V1: {"artifactId": "a", "name": "n", "description": "d", "parts": [{"text": "x"}],
          "metadata": {"m": 1}, "extensions": ["urn:e"]},
     J03: {"artifactId": "a", "name": "n", "description": "d", "parts": [{"kind": "text", "text": "x"}],
           "metadata": {"m": 1}, "extensions": ["urn:e"]},
     R03: {"artifactId": "a", "name": "n", "description": "d", "parts": [{"text": "x"}],
           "metadata": {"m": 1}, "extensions": ["urn:e"]}},
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), six_ways(ARTIFACTS_ALL))
def test_artifacts(src, value, dst, expected):
    assert run(convert_artifact, src, value, dst) == expected


TASKS_ALL = [
    {V1: {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
          "artifacts": [{"artifactId": "a", "parts": [{"text": "r"}]}],
          "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "q"}]}],
          "metadata": {"k": "v"}},
     J03: {"kind": "task", "id": "t", "contextId": "c", "status": {"state": "completed"},
           "artifacts": [{"artifactId": "a", "parts": [{"kind": "text", "text": "r"}]}],
           "history": [{"kind": "message", "messageId": "m", "role": "user",
                        "parts": [{"kind": "text", "text": "q"}]}],
           "metadata": {"k": "v"}},
     R03: {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
           "artifacts": [{"artifactId": "a", "parts": [{"text": "r"}]}],
           "history": [{"messageId": "m", "role": "ROLE_USER", "content": [{"text": "q"}]}],
           "metadata": {"k": "v"}}},
    {V1: {"id": "t2", "status": {"state": "TASK_STATE_CANCELED"}},
     J03: {"kind": "task", "id": "t2", "status": {"state": "canceled"}},
     R03: {"id": "t2", "status": {"state": "TASK_STATE_CANCELLED"}}},
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), six_ways(TASKS_ALL))
def test_tasks(src, value, dst, expected):
    assert run(convert_task, src, value, dst) == expected


# ------------------------------------------------------------------------------ events

STATUS_EVENT = {"taskId": "t", "contextId": "c"}


def status_events(v1_state, j03_state, r03_state, final):
    return {V1: {"statusUpdate": {**STATUS_EVENT, "status": {"state": v1_state}}},
            J03: {"kind": "status-update", **STATUS_EVENT, "status": {"state": j03_state}, "final": final},
            R03: {"statusUpdate": {**STATUS_EVENT, "status": {"state": r03_state}, "final": final}}}


EVENTS_ALL = [
    {V1: {"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}}},
     J03: {"kind": "task", "id": "t", "contextId": "c", "status": {"state": "submitted"}},
     R03: {"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}}}},
    {V1: {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}},
     J03: {"kind": "message", "messageId": "m", "role": "agent", "parts": [{"kind": "text", "text": "hi"}]},
     R03: {"message": {"messageId": "m", "role": "ROLE_AGENT", "content": [{"text": "hi"}]}}},
    {V1: {"artifactUpdate": {**STATUS_EVENT, "artifact": {"artifactId": "a", "parts": [{"text": "x"}]},
                             "append": True, "lastChunk": False, "metadata": {"n": 1}}},
     J03: {"kind": "artifact-update", **STATUS_EVENT,
           "artifact": {"artifactId": "a", "parts": [{"kind": "text", "text": "x"}]},
           "append": True, "lastChunk": False, "metadata": {"n": 1}},
     R03: {"artifactUpdate": {**STATUS_EVENT, "artifact": {"artifactId": "a", "parts": [{"text": "x"}]},
                              "append": True, "lastChunk": False, "metadata": {"n": 1}}}},
    {V1: {"artifactUpdate": {**STATUS_EVENT, "artifact": {"artifactId": "a", "parts": []}}},
     J03: {"kind": "artifact-update", **STATUS_EVENT, "artifact": {"artifactId": "a", "parts": []}},
     R03: {"artifactUpdate": {**STATUS_EVENT, "artifact": {"artifactId": "a", "parts": []}}}},
    # final: true at terminal and interrupted states, false otherwise
    status_events("TASK_STATE_SUBMITTED", "submitted", "TASK_STATE_SUBMITTED", False),
    status_events("TASK_STATE_WORKING", "working", "TASK_STATE_WORKING", False),
    status_events("TASK_STATE_UNSPECIFIED", "unknown", "TASK_STATE_UNSPECIFIED", False),
    status_events("TASK_STATE_COMPLETED", "completed", "TASK_STATE_COMPLETED", True),
    status_events("TASK_STATE_FAILED", "failed", "TASK_STATE_FAILED", True),
    status_events("TASK_STATE_CANCELED", "canceled", "TASK_STATE_CANCELLED", True),
    status_events("TASK_STATE_REJECTED", "rejected", "TASK_STATE_REJECTED", True),
    status_events("TASK_STATE_INPUT_REQUIRED", "input-required", "TASK_STATE_INPUT_REQUIRED", True),
    status_events("TASK_STATE_AUTH_REQUIRED", "auth-required", "TASK_STATE_AUTH_REQUIRED", True),
]
EVENTS_ONE_WAY = [
    # v0.3 → v1.0 drops final whatever it says
    (J03, {"kind": "status-update", **STATUS_EVENT, "status": {"state": "input-required"}, "final": False}, V1,
     {"statusUpdate": {**STATUS_EVENT, "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}}),
    # between the v0.3 dialects the worker's final is kept; PROTO03's absent final is false
    (J03, {"kind": "status-update", **STATUS_EVENT, "status": {"state": "input-required"}, "final": False}, R03,
     {"statusUpdate": {**STATUS_EVENT, "status": {"state": "TASK_STATE_INPUT_REQUIRED"}, "final": False}}),
    (R03, {"statusUpdate": {**STATUS_EVENT, "status": {"state": "TASK_STATE_WORKING"}}}, J03,
     {"kind": "status-update", **STATUS_EVENT, "status": {"state": "working"}, "final": False}),
    # a misspelled state: final from the state it stands for, the spelling left to the engine
    (V1, {"statusUpdate": {**STATUS_EVENT, "status": {"state": "input_required"}}}, J03,
     {"kind": "status-update", **STATUS_EVENT, "status": {"state": "input_required"}, "final": True}),
    (V1, {"statusUpdate": {**STATUS_EVENT, "status": {"state": "bogus"}}}, J03,
     {"kind": "status-update", **STATUS_EVENT, "status": {"state": "bogus"}, "final": False}),
    (V1, {"statusUpdate": {**STATUS_EVENT, "status": {"state": "TASK_STATE_COMPLETED"}, "metadata": {"x": 1}}}, R03,
     {"statusUpdate": {**STATUS_EVENT, "status": {"state": "TASK_STATE_COMPLETED"}, "metadata": {"x": 1},
                       "final": True}}),
    # PROTO03's `msg` (JSON name `message`) is read too
    (R03, {"msg": {"messageId": "m", "role": "ROLE_AGENT", "content": []}}, V1,
     {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": []}}),
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), six_ways(EVENTS_ALL) + EVENTS_ONE_WAY)
def test_events(src, value, dst, expected):
    assert run(convert_event, src, value, dst) == expected


NOT_EVENTS = [
    (V1, {"task": {"id": "t"}, "message": {"messageId": "m"}}),  # two payloads
    (V1, {"kind": "task", "id": "t"}), (V1, {"result": 1}), (V1, []), (V1, None),
    (J03, {"task": {"id": "t"}}), (J03, {"kind": "bogus"}), (J03, {"kind": ["task"]}), (J03, "x"),
    (R03, {"kind": "status-update", "taskId": "t"}), (R03, {}),
]


@pytest.mark.parametrize(("src", "value"), NOT_EVENTS)
@pytest.mark.parametrize("dst", DIALECTS)
def test_an_event_of_no_known_shape_passes_through(src, value, dst):
    assert convert_event(value, src, dst) == value


# ------------------------------------------------------------------------------ push configs

PUSH_ALL = [
    {V1: {"id": "p1", "taskId": "t", "url": "https://hook", "token": "tok",
          "authentication": {"scheme": "Bearer", "credentials": "cr"}},
     J03: {"taskId": "t", "pushNotificationConfig": {"id": "p1", "url": "https://hook", "token": "tok",
                                                      "authentication": {"schemes": ["Bearer"], "credentials": "cr"}}},
     R03: {"name": "tasks/t/pushNotificationConfigs/p1",
           "pushNotificationConfig": {"id": "p1", "url": "https://hook", "token": "tok",
                                      "authentication": {"schemes": ["Bearer"], "credentials": "cr"}}}},
    {V1: {"id": "p2", "taskId": "t", "url": "u"},
     J03: {"taskId": "t", "pushNotificationConfig": {"id": "p2", "url": "u"}},
     R03: {"name": "tasks/t/pushNotificationConfigs/p2", "pushNotificationConfig": {"id": "p2", "url": "u"}}},
]
PUSH_ONE_WAY = [
    (V1, {"tenant": "acme", "id": "p", "taskId": "t", "url": "u"}, J03,
     {"taskId": "t", "pushNotificationConfig": {"id": "p", "url": "u"}}),  # tenant: no v0.3 equivalent
    (J03, {"taskId": "t", "pushNotificationConfig": {"url": "u", "authentication": {"schemes": ["A", "B"]}}}, V1,
     {"taskId": "t", "url": "u", "authentication": {"scheme": "A"}}),  # one scheme in v1.0
    (R03, {"name": "tasks/t/pushNotificationConfigs/p", "pushNotificationConfig": {"url": "u"}}, V1,
     {"taskId": "t", "id": "p", "url": "u"}),  # the id from the resource name
    (R03, {"pushNotificationConfig": {"id": "p", "url": "u"}}, V1, {"id": "p", "url": "u"}),
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), six_ways(PUSH_ALL) + PUSH_ONE_WAY)
def test_push_configs(src, value, dst, expected):
    assert run(convert_push_config, src, value, dst) == expected


@pytest.mark.parametrize(("src", "value"), [(J03, {"taskId": "t"}), (J03, {"taskId": "t", "pushNotificationConfig": "u"}),
                                            (R03, {"name": "tasks/t"}), (V1, None), (J03, [])])
@pytest.mark.parametrize("dst", DIALECTS)
def test_a_push_config_of_no_known_shape_passes_through(src, value, dst):
    assert convert_push_config(value, src, dst) == value


# ------------------------------------------------------------------------------ results

TASK_V1 = {"id": "t", "status": {"state": "TASK_STATE_CANCELED"}}
TASK_J03 = {"kind": "task", "id": "t", "status": {"state": "canceled"}}
TASK_R03 = {"id": "t", "status": {"state": "TASK_STATE_CANCELLED"}}
MSG_V1 = {"messageId": "m", "role": "ROLE_AGENT", "parts": []}
MSG_J03 = {"kind": "message", "messageId": "m", "role": "agent", "parts": []}
MSG_R03 = {"messageId": "m", "role": "ROLE_AGENT", "content": []}
PUSH_V1 = {"id": "p", "taskId": "t", "url": "u"}
PUSH_J03 = {"taskId": "t", "pushNotificationConfig": {"id": "p", "url": "u"}}
PUSH_R03 = {"name": "tasks/t/pushNotificationConfigs/p", "pushNotificationConfig": {"id": "p", "url": "u"}}

RESULTS_ALL = [
    (Operation.SEND, {V1: {"task": TASK_V1}, J03: TASK_J03, R03: {"task": TASK_R03}}),
    (Operation.SEND, {V1: {"message": MSG_V1}, J03: MSG_J03, R03: {"message": MSG_R03}}),
    (Operation.GET, {V1: TASK_V1, J03: TASK_J03, R03: TASK_R03}),
    (Operation.CANCEL, {V1: TASK_V1, J03: TASK_J03, R03: TASK_R03}),
    (Operation.PUSH_CREATE, {V1: PUSH_V1, J03: PUSH_J03, R03: PUSH_R03}),
    (Operation.PUSH_GET, {V1: PUSH_V1, J03: PUSH_J03, R03: PUSH_R03}),
    (Operation.PUSH_LIST, {V1: {"configs": [PUSH_V1]}, J03: [PUSH_J03], R03: {"configs": [PUSH_R03]}}),
    (Operation.PUSH_LIST, {V1: {"configs": []}, J03: [], R03: {"configs": []}}),
    (Operation.PUSH_DELETE, {V1: None, J03: None, R03: None}),
]
RESULTS_ONE_WAY = [
    (Operation.PUSH_LIST, V1, {"configs": [PUSH_V1], "nextPageToken": "n2"}, J03, [PUSH_J03]),  # token lost
    (Operation.PUSH_LIST, V1, {"configs": [PUSH_V1], "nextPageToken": ""}, R03,
     {"configs": [PUSH_R03], "nextPageToken": ""}),
    (Operation.PUSH_LIST, R03, {}, V1, {"configs": []}),  # ProtoJSON leaves an empty list out
    (Operation.SEND, R03, {"msg": MSG_R03}, J03, MSG_J03),
    (Operation.SEND, V1, {"statusUpdate": {"taskId": "t"}}, J03, {"statusUpdate": {"taskId": "t"}}),  # not a send result
    (Operation.SEND, J03, {"kind": "status-update", "taskId": "t"}, V1, {"kind": "status-update", "taskId": "t"}),
    (Operation.STREAM, V1, {"task": TASK_V1}, J03, TASK_J03),
    (Operation.SUBSCRIBE, J03, TASK_J03, R03, {"task": TASK_R03}),
    (Operation.EXTENDED_CARD, V1, {"name": "card", "supportedInterfaces": []}, J03,
     {"name": "card", "supportedInterfaces": []}),
    (Operation.PUSH_DELETE, V1, {}, R03, {}),
    (Operation.LIST, V1, {"tasks": [TASK_V1], "nextPageToken": "", "pageSize": 50, "totalSize": 1}, V1,
     {"tasks": [TASK_V1], "nextPageToken": "", "pageSize": 50, "totalSize": 1}),
]


@pytest.mark.parametrize(("op", "src", "value", "dst", "expected"),
                         [(op, *row) for op, forms in RESULTS_ALL for row in six_ways([forms])]
                         + RESULTS_ONE_WAY)
def test_results(op, src, value, dst, expected):
    assert convert_result(op, value, src, dst) == expected


@pytest.mark.parametrize("op", list(Operation))
@pytest.mark.parametrize(("src", "dst"), PAIRS)
@pytest.mark.parametrize("value", [None, "x", 1, [1, {"a": 2}], {"weird": True}, {"kind": {"x": 1}}])
def test_results_never_raise(op, src, dst, value):
    convert_result(op, value, src, dst)  # any JSON value in, a JSON value out


# ------------------------------------------------------------------------------ params

MSG_IN_V1 = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
MSG_IN_J03 = {"kind": "message", "messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
MSG_IN_R03 = {"messageId": "m", "role": "ROLE_USER", "content": [{"text": "hi"}]}
HOOK_V1 = {"url": "https://h", "token": "k", "authentication": {"scheme": "Bearer"}}
HOOK_V03 = {"url": "https://h", "token": "k", "authentication": {"schemes": ["Bearer"]}}

PARAMS_ALL = [
    (Operation.SEND, {
        V1: {"message": MSG_IN_V1, "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 3,
                                                     "taskPushNotificationConfig": HOOK_V1,
                                                     "returnImmediately": True},
             "metadata": {"a": 1}},
        J03: {"message": MSG_IN_J03, "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 3,
                                                       "pushNotificationConfig": HOOK_V03, "blocking": False},
              "metadata": {"a": 1}},
        R03: {"message": MSG_IN_R03, "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 3,
                                                       "pushNotification": HOOK_V03, "blocking": False},
              "metadata": {"a": 1}}}),
    (Operation.STREAM, {
        V1: {"message": MSG_IN_V1, "configuration": {"returnImmediately": False}},
        J03: {"message": MSG_IN_J03, "configuration": {"blocking": True}},
        R03: {"message": MSG_IN_R03, "configuration": {"blocking": True}}}),
    (Operation.GET, {V1: {"id": "t", "historyLength": 2}, J03: {"id": "t", "historyLength": 2},
                     R03: {"name": "tasks/t", "historyLength": 2}}),
    (Operation.GET, {V1: {"id": "t"}, J03: {"id": "t"}, R03: {"name": "tasks/t"}}),
    (Operation.CANCEL, {V1: {"id": "t"}, J03: {"id": "t"}, R03: {"name": "tasks/t"}}),
    (Operation.SUBSCRIBE, {V1: {"id": "t"}, J03: {"id": "t"}, R03: {"name": "tasks/t"}}),
    (Operation.PUSH_CREATE, {
        V1: {"taskId": "t", "id": "p", "url": "u"},
        J03: {"taskId": "t", "pushNotificationConfig": {"id": "p", "url": "u"}},
        R03: {"parent": "tasks/t", "configId": "p",
              "config": {"name": "tasks/t/pushNotificationConfigs/p", "pushNotificationConfig": {"id": "p", "url": "u"}}}}),
    (Operation.PUSH_GET, {V1: {"taskId": "t", "id": "p"}, J03: {"id": "t", "pushNotificationConfigId": "p"},
                          R03: {"name": "tasks/t/pushNotificationConfigs/p"}}),
    (Operation.PUSH_DELETE, {V1: {"taskId": "t", "id": "p"}, J03: {"id": "t", "pushNotificationConfigId": "p"},
                             R03: {"name": "tasks/t/pushNotificationConfigs/p"}}),
    (Operation.PUSH_LIST, {V1: {"taskId": "t"}, J03: {"id": "t"}, R03: {"parent": "tasks/t"}}),
    (Operation.EXTENDED_CARD, {V1: {}, J03: {}, R03: {}}),
]
PARAMS_ONE_WAY = [
    # tenant: v1.0 only
    (Operation.SEND, V1, {"tenant": "acme", "message": MSG_IN_V1, "configuration": {"returnImmediately": False}}, J03,
     {"message": MSG_IN_J03, "configuration": {"blocking": True}}),
    (Operation.GET, V1, {"tenant": "acme", "id": "t"}, J03, {"id": "t"}),
    (Operation.EXTENDED_CARD, V1, {"tenant": "acme"}, R03, {}),
    (Operation.EXTENDED_CARD, J03, None, V1, {}),
    # request metadata: v0.3 JSON-RPC TaskIdParams has it; v1.0 only on CancelTask; PROTO03 never
    (Operation.CANCEL, J03, {"id": "t", "metadata": {"r": 1}}, V1, {"id": "t", "metadata": {"r": 1}}),
    (Operation.CANCEL, V1, {"id": "t", "metadata": {"r": 1}}, R03, {"name": "tasks/t"}),
    (Operation.GET, J03, {"id": "t", "metadata": {"r": 1}}, V1, {"id": "t"}),
    (Operation.SUBSCRIBE, J03, {"id": "t", "metadata": {"r": 1}}, V1, {"id": "t"}),
    # PROTO03's field `request` has the JSON name `message`: read either
    (Operation.SEND, R03, {"request": MSG_IN_R03, "configuration": {"blocking": True}}, V1,
     {"message": MSG_IN_V1, "configuration": {"returnImmediately": False}}),
    # a REST request given as its path's ids (gateway.a2a.rest.request_params)
    (Operation.GET, R03, {"id": "t"}, V1, {"id": "t"}),
    (Operation.PUSH_GET, R03, {"taskId": "t", "id": "p"}, J03, {"id": "t", "pushNotificationConfigId": "p"}),
    # historyLength 0: kept where it means "no history"; PROTO03's int32 0 is its absent value
    (Operation.GET, V1, {"id": "t", "historyLength": 0}, J03, {"id": "t", "historyLength": 0}),
    (Operation.GET, J03, {"id": "t", "historyLength": 0}, V1, {"id": "t", "historyLength": 0}),
    (Operation.GET, R03, {"name": "tasks/t", "historyLength": 0}, V1, {"id": "t"}),
    (Operation.SEND, R03, {"message": MSG_IN_R03, "configuration": {"historyLength": 0, "blocking": True}}, V1,
     {"message": MSG_IN_V1, "configuration": {"returnImmediately": False}}),
    # push list paging: v0.3 JSON-RPC has none
    (Operation.PUSH_LIST, V1, {"taskId": "t", "pageSize": 5, "pageToken": "x"}, J03, {"id": "t"}),
    (Operation.PUSH_LIST, V1, {"taskId": "t", "pageSize": 5, "pageToken": "x"}, R03,
     {"parent": "tasks/t", "pageSize": 5, "pageToken": "x"}),
    # a v0.3 get without a config id
    (Operation.PUSH_GET, J03, {"id": "t"}, V1, {"taskId": "t"}),
    # push create: the REST body's parent and configId
    (Operation.PUSH_CREATE, R03, {"parent": "tasks/t", "configId": "p", "config": {"pushNotificationConfig": {"url": "u"}}},
     V1, {"taskId": "t", "id": "p", "url": "u"}),
    (Operation.PUSH_CREATE, V1, {"tenant": "x", "taskId": "t", "url": "u"}, R03,
     {"parent": "tasks/t", "config": {"name": "tasks/t/pushNotificationConfigs/", "pushNotificationConfig": {"url": "u"}}}),
    # inline push config: v1 taskId and tenant are no part of v0.3's PushNotificationConfig
    (Operation.SEND, V1, {"message": MSG_IN_V1, "configuration": {"taskPushNotificationConfig": {"tenant": "x", "taskId": "", "url": "u"}}},
     J03, {"message": MSG_IN_J03, "configuration": {"pushNotificationConfig": {"url": "u"}, "blocking": True}}),
]


@pytest.mark.parametrize(("op", "src", "value", "dst", "expected"),
                         [(op, *row) for op, forms in PARAMS_ALL for row in six_ways([forms])]
                         + PARAMS_ONE_WAY)
def test_params(op, src, value, dst, expected):
    before = copy.deepcopy(value)
    assert convert_params(op, value, src, dst) == expected
    assert value == before


# The blocking flag, always written explicitly: (source, configuration as sent — absent when
# None —, blocking as the source means it). docs/bridge.md §1.8 gives the SDK sources.
BLOCKING = [
    (V1, None, True), (V1, {}, True), (V1, {"returnImmediately": False}, True),
    (V1, {"returnImmediately": True}, False),
    (J03, None, True), (J03, {}, True), (J03, {"blocking": True}, True), (J03, {"blocking": False}, False),
    (R03, None, True),  # no configuration: @a2a-js/sdk 0.3 blocks
    (R03, {}, False),   # a configuration without the flag: proto3 false, both SDKs return at once
    (R03, {"acceptedOutputModes": ["a"]}, False),
    (R03, {"blocking": True}, True), (R03, {"blocking": False}, False),
]


@pytest.mark.parametrize(("src", "configuration", "blocking", "dst"),
                         [(*row, dst) for row in BLOCKING for dst in DIALECTS if dst is not row[0]])
def test_the_blocking_flag_is_written_in_every_direction(src, configuration, blocking, dst):
    params = {"message": {"messageId": "m"}} if configuration is None else \
        {"message": {"messageId": "m"}, "configuration": configuration}
    flag = convert_params(Operation.SEND, params, src, dst)["configuration"]
    expected = {"returnImmediately": not blocking} if dst is V1 else {"blocking": blocking}
    assert {k: v for k, v in flag.items() if k in ("returnImmediately", "blocking")} == expected


@pytest.mark.parametrize(("src", "dst"), [(V1, J03), (V1, R03), (J03, V1), (R03, V1)])
def test_a_blocking_flag_that_is_not_a_boolean_is_refused(src, dst):
    name = "returnImmediately" if src is V1 else "blocking"
    with pytest.raises(BridgeError) as exc:
        convert_params(Operation.SEND, {"message": {}, "configuration": {name: "yes"}}, src, dst)
    assert exc.value.code == -32602


@pytest.mark.parametrize(("src", "dst", "text"), [(V1, J03, "v0.3 JSON-RPC has no ListTasks"),
                                                  (V1, R03, "v0.3 REST has no ListTasks"),
                                                  (J03, V1, "v0.3 JSON-RPC has no ListTasks"),
                                                  (R03, V1, "v0.3 REST has no ListTasks")])
def test_list_tasks_has_no_v03_equivalent(src, dst, text):
    with pytest.raises(BridgeError) as exc:
        convert_params(Operation.LIST, {"contextId": "c"}, src, dst)
    assert exc.value.code == -32004
    assert text in exc.value.message
    assert isinstance(exc.value, GatewayError)


def test_list_tasks_in_v1_is_forwarded_as_sent():
    params = {"contextId": "c", "pageSize": 10}
    assert convert_params(Operation.LIST, params, V1, V1) == params


@pytest.mark.parametrize("op", [Operation.PUSH_GET, Operation.PUSH_DELETE])
def test_a_v03_rest_config_request_needs_the_config_id(op):
    with pytest.raises(BridgeError) as exc:
        convert_params(op, {"id": "t"}, J03, R03)
    assert exc.value.code == -32602


# ------------------------------------------------------------------------------ errors

ERRORS_ONE_WAY = [
    (V1, {"code": -32001, "message": "Task t not found",
          "data": [{"@type": INFO, "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org", "metadata": {"taskId": "t"}}]},
     J03, {"code": -32001, "message": "Task t not found", "data": {"taskId": "t"}}),
    (V1, {"code": -32002, "message": "no",
          "data": [{"@type": INFO, "reason": "TASK_NOT_CANCELABLE", "domain": "a2a-protocol.org"}]},
     R03, {"code": -32002, "message": "no"}),
    (V1, {"code": -32602, "message": "bad",
          "data": [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": []}]},
     J03, {"code": -32602, "message": "bad"}),
    # -32008 / -32009 exist only in v1.0: the code and message are kept
    (V1, {"code": -32008, "message": "Extension urn:x required",
          "data": [{"@type": INFO, "reason": "EXTENSION_SUPPORT_REQUIRED", "domain": "a2a-protocol.org"}]},
     J03, {"code": -32008, "message": "Extension urn:x required"}),
    (V1, {"code": -32009, "message": "version"}, R03, {"code": -32009, "message": "version"}),
    (J03, {"code": -32001, "message": "nf", "data": None}, V1,
     {"code": -32001, "message": "nf", "data": [{"@type": INFO, "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org"}]}),
    (J03, {"code": -32004, "message": "u", "data": {"taskId": "t"}}, V1,
     {"code": -32004, "message": "u",
      "data": [{"@type": INFO, "reason": "UNSUPPORTED_OPERATION", "domain": "a2a-protocol.org", "metadata": {"taskId": "t"}}]}),
    (R03, {"code": -32602, "message": "p", "data": "free text"}, V1,
     {"code": -32602, "message": "p", "data": [{"@type": INFO, "reason": "INVALID_PARAMS", "domain": "a2a-protocol.org"}]}),
    (J03, {"code": -32099, "message": "custom", "data": {"n": 1}}, V1, {"code": -32099, "message": "custom"}),
    (J03, {"code": -32001, "message": "nf", "data": {"n": 1}}, V1,  # not a map of strings: lost
     {"code": -32001, "message": "nf", "data": [{"@type": INFO, "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org"}]}),
    (J03, {"code": -32001, "message": "nf", "data": {"n": 1}}, R03, {"code": -32001, "message": "nf", "data": {"n": 1}}),
]


@pytest.mark.parametrize(("src", "value", "dst", "expected"), ERRORS_ONE_WAY)
def test_errors(src, value, dst, expected):
    assert run(convert_error, src, value, dst) == expected


@pytest.mark.parametrize("value", [None, "x", [1], {"code": [1], "message": "m"}, {"message": 3}])
@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_errors_never_raise(value, src, dst):
    convert_error(value, src, dst)


# ------------------------------------------------------------------------------ same dialect

@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_same_dialect_is_unchanged(dialect):
    odd = {"id": "t", "status": {"state": "Working"}, "kind": "x", "extra": [1]}
    assert convert_task(odd, dialect, dialect) is odd
    assert convert_event(odd, dialect, dialect) is odd
    assert convert_params(Operation.SEND, odd, dialect, dialect) is odd


# ------------------------------------------------------------------------------ round trips

_ids = st.text(alphabet="abcxyz0123-", min_size=1, max_size=6)
_json_leaf = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4)
_json = st.recursive(_json_leaf, lambda c: st.lists(c, max_size=2) | st.dictionaries(st.text(max_size=3), c, max_size=2),
                     max_leaves=4)
_meta = st.dictionaries(st.text(min_size=1, max_size=3), _json, min_size=1, max_size=2)


def _opt(d, **members):
    """``d`` plus each member whose strategy drew something other than ``None``."""
    return st.fixed_dictionaries(d, optional=members)


# Parts with what every dialect can express (text, files without filename or metadata, object
# data), and with v0.3 JSON-RPC's extras (filename, part metadata, data of any JSON value).
_media = st.sampled_from(["text/plain", "application/pdf"])
_common_part = st.one_of(
    st.fixed_dictionaries({"text": st.text(max_size=5)}),
    _opt({"url": st.just("https://x/f")}, mediaType=_media),
    _opt({"raw": st.just("aGk=")}, mediaType=_media),
    st.fixed_dictionaries({"data": st.dictionaries(st.text(max_size=3), _json, max_size=2)}),
)
_j03_part = st.one_of(
    _opt({"text": st.text(max_size=5)}, metadata=_meta),
    _opt({"url": st.just("https://x/f")}, mediaType=_media, filename=_ids, metadata=_meta),
    _opt({"raw": st.just("aGk=")}, mediaType=_media, filename=_ids, metadata=_meta),
    _opt({"data": _json}, metadata=_meta),
)


def _message(part):
    return _opt({"messageId": _ids, "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT"]),
                 "parts": st.lists(part, max_size=3)},
                contextId=_ids, taskId=_ids, metadata=_meta, extensions=st.lists(_ids, max_size=2))


_state = st.sampled_from(["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED",
                          "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
                          "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
                          "TASK_STATE_UNSPECIFIED"])


def _task(part):
    status = _opt({"state": _state}, message=_message(part), timestamp=st.just("2026-01-01T00:00:00Z"))
    artifact = _opt({"artifactId": _ids, "parts": st.lists(part, min_size=1, max_size=2)},
                    name=_ids, description=_ids, metadata=_meta, extensions=st.lists(_ids, max_size=1))
    return _opt({"id": _ids, "status": status}, contextId=_ids, metadata=_meta,
                artifacts=st.lists(artifact, max_size=2), history=st.lists(_message(part), max_size=2))


def _events(part):
    ids = {"taskId": _ids, "contextId": _ids}
    artifact = st.fixed_dictionaries({"artifactId": _ids, "parts": st.lists(part, min_size=1, max_size=2)})
    return st.one_of(
        st.builds(lambda t: {"task": t}, _task(part)),
        st.builds(lambda m: {"message": m}, _message(part)),
        st.builds(lambda e: {"statusUpdate": e},
                  _opt({**ids, "status": st.fixed_dictionaries({"state": _state})}, metadata=_meta)),
        st.builds(lambda e: {"artifactUpdate": e},
                  _opt({**ids, "artifact": artifact}, append=st.booleans(), lastChunk=st.booleans(), metadata=_meta)),
    )


_referenced = st.builds(lambda m, r: {**m, "referenceTaskIds": r}, _message(_j03_part), st.lists(_ids, min_size=1, max_size=2))
BOUNDED = settings(max_examples=150, derandomize=True, database=None, deadline=None)


@BOUNDED
@given(st.one_of(_events(_j03_part), st.builds(lambda m: {"message": m}, _referenced)))
def test_round_trip_through_v03_jsonrpc_keeps_everything_both_define(event):
    there = convert_event(event, V1, J03)
    assert "kind" in there
    assert convert_event(there, J03, V1) == event


@BOUNDED
@given(_events(_common_part))
def test_round_trip_through_v03_rest_keeps_everything_both_define(event):
    there = convert_event(event, V1, R03)
    assert "kind" not in there
    assert convert_event(there, R03, V1) == event


_config = _opt({}, acceptedOutputModes=st.lists(_media, min_size=1, max_size=2),
               historyLength=st.integers(1, 9), returnImmediately=st.booleans(),
               taskPushNotificationConfig=_opt({"url": st.just("https://h")}, id=_ids, token=_ids,
                                               authentication=_opt({"scheme": st.just("Bearer")},
                                                                   credentials=_ids)))


@BOUNDED
@given(_message(_common_part), _config, st.sampled_from([J03, R03]))
def test_send_params_round_trip(message, configuration, via):
    params = {"message": message, "configuration": configuration}
    back = convert_params(Operation.SEND, convert_params(Operation.SEND, params, V1, via), via, V1)
    expected = {"message": message,
                "configuration": {**configuration, "returnImmediately": configuration.get("returnImmediately", False)}}
    assert back == expected


def test_the_module_exports_what_the_exchange_layer_calls():
    for name in ("convert_params", "convert_result", "convert_event", "convert_error", "convert_message",
                 "convert_part", "convert_task", "convert_status", "convert_artifact", "convert_push_config",
                 "dialect_of", "Dialect"):
        assert hasattr(bridge, name)


# ------------------------------------------------------------------------------ task generations (A2A v1.1 draft)
# docs/bridge.md §1.11, docs/resume.md §3.5: v0.3 has no generation, no currentGeneration and no
# ifGenerationMatch (TYPES03, PROTO03); towards it they are dropped, -32010 keeps its code.

@pytest.mark.parametrize("dst", [J03, R03])
def test_generations_are_lost_towards_v03(dst):
    working = "working" if dst is J03 else "TASK_STATE_WORKING"
    got_task = run(convert_task, V1, {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"},
                                      "generation": "4"}, dst)
    assert "generation" not in got_task and got_task["status"]["state"] == working
    status = run(convert_event, V1, {"statusUpdate": {"taskId": "t", "contextId": "c",
                                                      "status": {"state": "TASK_STATE_WORKING"}, "generation": 5}}, dst)
    inner = status if dst is J03 else status["statusUpdate"]
    assert "generation" not in inner and inner["taskId"] == "t"
    art = run(convert_event, V1, {"artifactUpdate": {"taskId": "t", "contextId": "c", "generation": "6",
                                                     "artifact": {"artifactId": "a", "parts": [{"text": "x"}]}}}, dst)
    inner = art if dst is J03 else art["artifactUpdate"]
    assert "generation" not in inner and inner["artifact"]["artifactId"] == "a"


@pytest.mark.parametrize("dst", [J03, R03])
def test_current_generation_and_if_generation_match_are_lost_towards_v03(dst):
    get = convert_params(Operation.GET, {"id": "t", "currentGeneration": "5", "historyLength": 2}, V1, dst)
    assert get == ({"id": "t", "historyLength": 2} if dst is J03 else {"name": "tasks/t", "historyLength": 2})
    send = convert_params(Operation.SEND, {"message": {"messageId": "m", "role": "ROLE_USER", "taskId": "t",
                                                       "parts": [{"text": "x"}]},
                                           "configuration": {"ifGenerationMatch": "3"}}, V1, dst)
    assert send["configuration"] == {"blocking": True}


def test_a_generation_mismatch_keeps_its_code_and_metadata_towards_v03_and_its_reason_back():
    info = {"@type": INFO, "reason": "TASK_GENERATION_MISMATCH", "domain": "a2a-protocol.org",
            "metadata": {"expectedGeneration": "3", "currentGeneration": "5"}}
    error = {"code": -32010, "message": "mismatch", "data": [info]}
    to_v03 = {"code": -32010, "message": "mismatch", "data": {"expectedGeneration": "3", "currentGeneration": "5"}}
    assert run(convert_error, V1, error, J03) == to_v03
    assert run(convert_error, J03, to_v03, V1) == error
