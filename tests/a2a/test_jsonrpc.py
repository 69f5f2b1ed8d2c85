"""gateway.a2a.jsonrpc: envelope parsing (F15), methods (docs/protocol.md §1.2), errors (§6)."""

from __future__ import annotations

import orjson
import pytest

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation, ParseFailure, Request, parse_request
from gateway.a2a.version import ProtocolVersion

V10 = ProtocolVersion.V1_0
V03 = ProtocolVersion.V0_3


def parse(body: bytes | str) -> Request | ParseFailure:
    return parse_request(body.encode() if isinstance(body, str) else body)


def failure(body: bytes | str) -> ParseFailure:
    out = parse(body)
    assert isinstance(out, ParseFailure), out
    return out


def request(body: bytes | str) -> Request:
    out = parse(body)
    assert isinstance(out, Request), out
    return out


def assert_is_error_response(doc: dict, code: int, req_id: object) -> None:
    """A JSON-RPC 2.0 error response: jsonrpc, the id as sent, error.code, a message."""
    assert doc["jsonrpc"] == "2.0"
    assert "id" in doc and doc["id"] == req_id and type(doc["id"]) is type(req_id)
    assert doc["error"]["code"] == code
    assert isinstance(doc["error"]["message"], str) and doc["error"]["message"]
    assert "result" not in doc


class TestF15Envelope:
    """The F15 table, row by row."""

    def test_f15_cut_off_json_is_parse_error_with_null_id(self):
        out = failure('{"jsonrpc":"2.0","id":1,"method":"GetTask","params":')
        assert out.code == -32700
        assert_is_error_response(out.error, -32700, None)

    def test_f15_missing_jsonrpc_member_is_invalid_request_with_the_clients_id(self):
        out = failure('{"id":2,"method":"GetTask","params":{"id":"t-15"}}')
        assert out.code == -32600
        assert_is_error_response(out.error, -32600, 2)

    def test_f15_object_id_is_invalid_request_with_null_id(self):
        out = failure('{"jsonrpc":"2.0","id":{"x":1},"method":"GetTask","params":{"id":"t-15"}}')
        assert out.code == -32600
        assert_is_error_response(out.error, -32600, None)

    def test_f15_params_array_is_invalid_params(self):
        out = failure('{"jsonrpc":"2.0","id":4,"method":"GetTask","params":["t-15"]}')
        assert out.code == -32602
        assert_is_error_response(out.error, -32602, 4)

    def test_f15_unknown_method_in_an_a2a_namespace_is_method_not_found(self):
        out = failure('{"jsonrpc":"2.0","id":5,"method":"tasks/frobnicate","params":{}}')
        assert out.code == -32601
        assert_is_error_response(out.error, -32601, 5)

    def test_f15_string_id_stays_a_string(self):
        req = request('{"jsonrpc":"2.0","id":"7","method":"GetTask","params":{"id":"t-15"}}')
        assert req.id == "7" and isinstance(req.id, str)

    def test_f15_numeric_id_stays_a_number(self):
        req = request('{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"id":"t-15"}}')
        assert req.id == 7 and type(req.id) is int

    def test_f15_string_id_stays_a_string_in_an_error(self):
        """An error answer echoes "7" as a string, not the number 7."""
        out = failure('{"jsonrpc":"2.0","id":"7","method":"GetTask","params":["t-15"]}')
        assert_is_error_response(out.error, -32602, "7")

    def test_f15_error_bodies_serialize_as_json(self):
        """The ParseFailure holds a complete JSON-serializable response object."""
        out = failure('{"jsonrpc":"2.0","id":4,"method":"GetTask","params":["t-15"]}')
        assert orjson.loads(jsonrpc.dumps(out.error)) == out.error


class TestEnvelopeEdges:
    def test_batch_array_is_invalid_request(self):
        """docs/protocol.md §11 pitfall 17: batches are rejected with -32600."""
        out = failure('[{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t-1"}}]')
        assert_is_error_response(out.error, -32600, None)

    @pytest.mark.parametrize("body", ['"GetTask"', "42", "null", "true"])
    def test_non_object_json_is_invalid_request(self, body):
        assert_is_error_response(failure(body).error, -32600, None)

    @pytest.mark.parametrize("bad_id", ["true", "false", "[1]"])
    def test_bool_or_array_id_is_invalid_request_with_null_id(self, bad_id):
        """JSON-RPC ids are string, number or null; a bool is not a number."""
        body = '{"jsonrpc":"2.0","id":' + bad_id + ',"method":"GetTask","params":{"id":"t-1"}}'
        assert_is_error_response(failure(body).error, -32600, None)

    def test_wrong_jsonrpc_version_is_invalid_request(self):
        out = failure('{"jsonrpc":"1.0","id":3,"method":"GetTask","params":{"id":"t-1"}}')
        assert_is_error_response(out.error, -32600, 3)

    @pytest.mark.parametrize("method", ["", "5", "null"])
    def test_missing_or_non_string_method_is_invalid_request(self, method):
        member = "" if method == "" else f',"method":{method}'
        out = failure('{"jsonrpc":"2.0","id":3' + member + "}")
        assert_is_error_response(out.error, -32600, 3)

    def test_invalid_utf8_is_parse_error(self):
        out = failure(b'{"jsonrpc":"2.0","id":1,"method":"\xff"}')
        assert out.code == -32700

    @pytest.mark.parametrize("params", ['"t-1"', "7", "null"])
    def test_non_object_params_for_an_a2a_method_is_invalid_params(self, params):
        out = failure('{"jsonrpc":"2.0","id":8,"method":"tasks/get","params":' + params + "}")
        assert_is_error_response(out.error, -32602, 8)

    def test_unknown_non_namespaced_method_parses(self):
        """A custom extension method outside A2A's namespaces passes through untouched."""
        body = '{"jsonrpc":"2.0","id":9,"method":"acme.Custom","params":[1,2]}'
        req = request(body)
        assert req.method == "acme.Custom"
        assert req.params == [1, 2]
        assert req.body == orjson.loads(body)
        assert jsonrpc.lookup_method("acme.Custom") is None

    @pytest.mark.parametrize("name", ["message/frobnicate", "agent/whoami", "tasks/list"])
    def test_unknown_names_in_v03_namespaces_are_method_not_found(self, name):
        """v0.3 has no tasks/list (docs/protocol.md §1.2): the SDK answers -32601, so do we."""
        out = failure('{"jsonrpc":"2.0","id":1,"method":"' + name + '","params":{}}')
        assert out.code == -32601

    def test_notification_has_no_id(self):
        req = request('{"jsonrpc":"2.0","method":"GetTask","params":{"id":"t-1"}}')
        assert req.has_id is False
        assert req.id is None

    def test_explicit_null_id_is_not_a_notification(self):
        req = request('{"jsonrpc":"2.0","id":null,"method":"GetTask","params":{"id":"t-1"}}')
        assert req.has_id is True
        assert req.id is None
    def test_absent_params_is_not_invalid_params(self):
        """JSON-RPC §4.2: params MAY be omitted; only a present non-object params is -32602."""
        req = request('{"jsonrpc":"2.0","id":1,"method":"agent/getAuthenticatedExtendedCard"}')
        assert req.params is None


V10_NAMES = {
    "SendMessage": Operation.SEND,
    "SendStreamingMessage": Operation.STREAM,
    "GetTask": Operation.GET,
    "ListTasks": Operation.LIST,
    "CancelTask": Operation.CANCEL,
    "SubscribeToTask": Operation.SUBSCRIBE,
    "CreateTaskPushNotificationConfig": Operation.PUSH_CREATE,
    "GetTaskPushNotificationConfig": Operation.PUSH_GET,
    "ListTaskPushNotificationConfigs": Operation.PUSH_LIST,
    "DeleteTaskPushNotificationConfig": Operation.PUSH_DELETE,
    "GetExtendedAgentCard": Operation.EXTENDED_CARD,
}
V03_NAMES = {
    "message/send": Operation.SEND,
    "message/stream": Operation.STREAM,
    "tasks/get": Operation.GET,
    "tasks/cancel": Operation.CANCEL,
    "tasks/resubscribe": Operation.SUBSCRIBE,
    "tasks/pushNotificationConfig/set": Operation.PUSH_CREATE,
    "tasks/pushNotificationConfig/get": Operation.PUSH_GET,
    "tasks/pushNotificationConfig/list": Operation.PUSH_LIST,
    "tasks/pushNotificationConfig/delete": Operation.PUSH_DELETE,
    "agent/getAuthenticatedExtendedCard": Operation.EXTENDED_CARD,
}
STREAMING = {"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"}


class TestMethodTable:
    @pytest.mark.parametrize(("name", "op"), V10_NAMES.items())
    def test_v10_method_names(self, name, op):
        """docs/protocol.md §1.2 v1.0 column."""
        info = jsonrpc.lookup_method(name)
        assert info is not None
        assert (info.name, info.operation, info.version) == (name, op, V10)

    @pytest.mark.parametrize(("name", "op"), V03_NAMES.items())
    def test_v03_method_names(self, name, op):
        """docs/protocol.md §1.2 v0.3 JSON-RPC column."""
        info = jsonrpc.lookup_method(name)
        assert info is not None
        assert (info.name, info.operation, info.version) == (name, op, V03)

    def test_table_holds_exactly_the_spec_names(self):
        assert set(jsonrpc.METHODS) == set(V10_NAMES) | set(V03_NAMES)

    @pytest.mark.parametrize("name", ["getTask", "sendmessage", "ListTask", "TaskSubscription",
                                      "tasks/Get", "message/send "])
    def test_near_misses_are_not_a2a_methods(self, name):
        """Method names are case-sensitive; v0.3 gRPC names are not JSON-RPC names."""
        assert jsonrpc.lookup_method(name) is None

    @pytest.mark.parametrize("name", sorted(set(V10_NAMES) | set(V03_NAMES)))
    def test_streaming_flag(self, name):
        """F09: stream and subscribe (both versions) take the streaming path, nothing else."""
        info = jsonrpc.lookup_method(name)
        assert info is not None
        assert info.streaming is (name in STREAMING)

    def test_probe_and_resubscribe_envelopes_per_version(self):
        assert jsonrpc.task_get_request("t-1", V10) == {
            "jsonrpc": "2.0", "id": jsonrpc.PROBE_ID, "method": "GetTask",
            "params": {"id": "t-1", "historyLength": 0}}
        assert jsonrpc.task_get_request("t-1", V03)["method"] == "tasks/get"
        assert jsonrpc.subscribe_request(7, "t-1", V10) == {
            "jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask", "params": {"id": "t-1"}}
        assert jsonrpc.subscribe_request("a", "t-1", V03)["method"] == "tasks/resubscribe"


def info(name: str) -> jsonrpc.MethodInfo:
    found = jsonrpc.lookup_method(name)
    assert found is not None
    return found


class TestRequestTaskId:
    @pytest.mark.parametrize("name", ["SendMessage", "SendStreamingMessage", "message/send",
                                      "message/stream"])
    def test_messages_name_their_task_in_message_task_id(self, name):
        params = {"message": {"messageId": "m-1", "taskId": "t-1", "contextId": "c-1",
                              "parts": []}}
        assert jsonrpc.request_task_id(info(name), params) == "t-1"

    @pytest.mark.parametrize("name", ["SendMessage", "message/stream"])
    def test_a_message_without_task_id_may_create_a_task(self, name):
        params = {"message": {"messageId": "m-1", "contextId": "c-1", "parts": []}}
        assert jsonrpc.request_task_id(info(name), params) is None

    @pytest.mark.parametrize("name", ["GetTask", "CancelTask", "SubscribeToTask", "tasks/get",
                                      "tasks/cancel", "tasks/resubscribe"])
    def test_get_cancel_subscribe_use_params_id(self, name):
        """docs/protocol.md §11 pitfall 14."""
        assert jsonrpc.request_task_id(info(name), {"id": "t-2"}) == "t-2"

    @pytest.mark.parametrize("name", ["CreateTaskPushNotificationConfig",
                                      "GetTaskPushNotificationConfig",
                                      "ListTaskPushNotificationConfigs",
                                      "DeleteTaskPushNotificationConfig"])
    def test_v10_push_config_methods_use_task_id_not_id(self, name):
        """docs/protocol.md §8: in v1.0, params.id is the config id and taskId the task id."""
        assert jsonrpc.request_task_id(info(name), {"id": "cfg-1", "taskId": "t-3"}) == "t-3"

    @pytest.mark.parametrize("name", ["tasks/pushNotificationConfig/get",
                                      "tasks/pushNotificationConfig/list",
                                      "tasks/pushNotificationConfig/delete"])
    def test_v03_push_config_methods_use_params_id(self, name):
        """docs/protocol.md §8: in v0.3, params.id is the task id."""
        params = {"id": "t-4", "pushNotificationConfigId": "cfg-1"}
        assert jsonrpc.request_task_id(info(name), params) == "t-4"

    def test_v03_push_config_set_uses_task_id(self):
        """v0.3 set takes a TaskPushNotificationConfig {taskId, pushNotificationConfig}."""
        params = {"taskId": "t-5", "pushNotificationConfig": {"id": "cfg-1", "url": "https://x"}}
        assert jsonrpc.request_task_id(info("tasks/pushNotificationConfig/set"), params) == "t-5"

    @pytest.mark.parametrize("name", ["ListTasks", "GetExtendedAgentCard",
                                      "agent/getAuthenticatedExtendedCard"])
    def test_methods_without_a_task_name_none(self, name):
        assert jsonrpc.request_task_id(info(name), {"id": "t-6", "taskId": "t-6"}) is None

    @pytest.mark.parametrize("params", [None, [], "t-1", {"id": ""}, {"id": 7}, {"id": None}])
    def test_missing_empty_or_non_string_ids_are_none(self, params):
        assert jsonrpc.request_task_id(info("GetTask"), params) is None

    @pytest.mark.parametrize("message", [None, "t-1", {"taskId": 3}, {"taskId": ""}])
    def test_malformed_message_names_no_task(self, message):
        assert jsonrpc.request_task_id(info("SendMessage"), {"message": message}) is None


A2A_REASONS = {
    -32001: "TASK_NOT_FOUND",
    -32002: "TASK_NOT_CANCELABLE",
    -32003: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    -32004: "UNSUPPORTED_OPERATION",
    -32005: "CONTENT_TYPE_NOT_SUPPORTED",
    -32006: "INVALID_AGENT_RESPONSE",
    -32009: "VERSION_NOT_SUPPORTED",
    -32010: "TASK_GENERATION_MISMATCH",  # A2A v1.1 draft (docs/resume.md §3.3)
}


class TestErrorResponse:
    @pytest.mark.parametrize(("code", "reason"), A2A_REASONS.items())
    def test_v10_a2a_error_carries_an_error_info_array(self, code, reason):
        """docs/protocol.md §6.3: v1.0 error.data is an array of typed objects with ErrorInfo."""
        doc = jsonrpc.error_response(11, code, "boom", version=V10)
        assert_is_error_response(doc, code, 11)
        assert doc["error"]["data"] == [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "a2a-protocol.org",
        }]

    def test_f05_error_info_carries_metadata(self):
        """F05: the -32004 answer names the task in ErrorInfo.metadata."""
        doc = jsonrpc.error_response(11, -32004, "task t-5 is terminal", version=V10,
                                     metadata={"taskId": "t-5"})
        assert doc["error"]["data"][0]["metadata"] == {"taskId": "t-5"}
        assert doc["error"]["data"][0]["reason"] == "UNSUPPORTED_OPERATION"

    @pytest.mark.parametrize("code", sorted(A2A_REASONS))
    def test_v03_errors_have_no_data_array(self, code):
        """docs/protocol.md §6.3: v0.3 data is free-form; the gateway sends none."""
        doc = jsonrpc.error_response("k", code, "boom", version=V03, metadata={"taskId": "t"})
        assert_is_error_response(doc, code, "k")
        assert "data" not in doc["error"]

    @pytest.mark.parametrize("code", [-32700, -32600, -32601, -32602, -32603])
    def test_standard_jsonrpc_errors_have_no_error_info(self, code):
        doc = jsonrpc.error_response(1, code, "boom")
        assert "data" not in doc["error"]

    def test_default_version_is_v10(self):
        assert "data" in jsonrpc.error_response(1, -32004, "x")["error"]

    def test_error_object_keeps_code_and_message(self):
        err = jsonrpc.error_object(-32002, "cannot cancel", version=V03)
        assert err == {"code": -32002, "message": "cannot cancel"}
    @pytest.mark.parametrize(("code", "reason"), [(-32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
                                                  (-32008, "EXTENSION_SUPPORT_REQUIRED")])
    def test_v10_card_and_extension_errors_carry_error_info(self, code, reason):
        doc = jsonrpc.error_response(1, code, "x", version=V10)
        assert doc["error"]["data"][0]["reason"] == reason

    def test_a2a_codes_match_protocol_table(self):
        """docs/protocol.md §6.1/6.2 code numbers."""
        assert (jsonrpc.PARSE_ERROR, jsonrpc.INVALID_REQUEST, jsonrpc.METHOD_NOT_FOUND,
                jsonrpc.INVALID_PARAMS, jsonrpc.INTERNAL_ERROR) == (-32700, -32600, -32601,
                                                                     -32602, -32603)
        assert (jsonrpc.TASK_NOT_FOUND, jsonrpc.TASK_NOT_CANCELABLE,
                jsonrpc.UNSUPPORTED_OPERATION, jsonrpc.INVALID_AGENT_RESPONSE,
                jsonrpc.VERSION_NOT_SUPPORTED, jsonrpc.TASK_GENERATION_MISMATCH) == (
                    -32001, -32002, -32004, -32006, -32009, -32010)


def test_loads_bounds_nesting_counting_the_top_level() -> None:
    import orjson as _orjson

    from gateway.a2a.jsonrpc import loads, nesting_exceeds
    from gateway.errors import NestingTooDeepError

    assert loads(b'{"a": [1]}', 2) == {"a": [1]}
    with pytest.raises(NestingTooDeepError):
        loads(b'{"a": [[1]]}', 2)
    with pytest.raises(NestingTooDeepError):  # past orjson's own limit: still "too deep"
        loads(b"[" * 2000 + b"]" * 2000, 128)
    with pytest.raises(_orjson.JSONDecodeError):
        loads(b"[", 128)
    # brackets inside strings count for the quick test only, never as depth
    assert loads(b'["' + b"[" * 300 + b'"]', 8) == ["[" * 300]
    assert loads('{"a": {"b": {}}}', 3) == {"a": {"b": {}}}
    assert not nesting_exceeds([1, "x", None], 1) and nesting_exceeds([[]], 1)


@pytest.mark.parametrize("raw_id", [b"1e5", b"1.50", b"-0", b"1E5", b"2.50e1"])
def test_answers_written_by_the_gateway_keep_a_numeric_id_as_written(raw_id: bytes) -> None:
    from gateway.a2a.jsonrpc import dumps, error_response, parse_request

    body = b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"tasks/frobnicate"}'
    failure = parse_request(body)
    assert dumps(failure.error).startswith(b'{"jsonrpc":"2.0","id":' + raw_id + b",")
    ok = parse_request(b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"GetTask","params":{"id":"t"}}')
    assert ok.id == orjson.loads(raw_id)  # the value, for comparisons with a worker's id
    assert b'"id":' + raw_id + b"," in dumps(error_response(ok.reply_id, -32603, "x"))
    plain = parse_request(b'{"jsonrpc":"2.0","id":7,"method":"GetTask"}')
    assert plain.reply_id == 7 and parse_request(b'{"jsonrpc":"2.0","id":1.5,"method":"GetTask"}').reply_id == 1.5
    # the standard library's encoder (integers past 64 bits elsewhere) writes the value instead
    assert dumps({"id": ok.reply_id, "n": 2**70}) == b'{"id":' + orjson.dumps(orjson.loads(raw_id)) + b',"n":1180591620717411303424}'


# --- the top-level id of a body nested too deep to parse (issue #35) --------------------------

_DEEP = b"[" * 1100 + b"]" * 1100


@pytest.mark.parametrize(("body", "want"), [
    (b'{"jsonrpc":"2.0","id":5,"params":' + _DEEP + b"}", (True, 5)),
    (b' {\n"params" : {"s":"}]\\"[{","x":' + _DEEP + b'} ,\t"id" : "abc" } ', (True, "abc")),
    (b'{"\\u0069d":18446744073709551616,"p":' + _DEEP + b"}", (True, 18446744073709551616)),
    (b'{"id":1e5,"p":' + _DEEP + b"}", (True, jsonrpc.ExactNumber(b"1e5"))),
    (b'{"id":1e400,"p":' + _DEEP + b"}", (True, jsonrpc.ExactNumber(b"1e400"))),
    (b'{"id":-0,"p":' + _DEEP + b"}", (True, jsonrpc.ExactNumber(b"-0"))),
    (b'{"id":1.0,"p":' + _DEEP + b"}", (True, 1.0)),
    (b'{"id":null,"p":' + _DEEP + b"}", (True, None)),
    (b'{"id":1,"id":2,"p":' + _DEEP + b"}", (True, 2)),  # the last one, as every parser reads it
    (b'{"id":[1],"p":' + _DEEP + b"}", (False, None)),  # no id
    (b'{"id":true,"p":' + _DEEP + b"}", (False, None)),
    (b'{"id":"\\ud800","p":' + _DEEP + b"}", (False, None)),  # a lone surrogate: no id to write back
    (b'{"id":5,"p":' + _DEEP, (False, None)),  # never closes
    (b'{"id":5,"p":' + _DEEP + b"} x", (False, None)),  # trailing bytes
    (b'{"id":5 "p":1}', (False, None)),
    (b"[" + _DEEP + b"]", (False, None)),
    (b"", (False, None)),
])
def test_top_level_id_reads_the_envelope_without_the_nested_members(body: bytes, want: tuple[bool, object]) -> None:
    assert jsonrpc.top_level_id(body) == want


def test_top_level_id_gives_up_past_its_token_budget() -> None:
    many = b'{"p":[' + b'"a",' * 300 + b'"a"],"id":5}'
    assert jsonrpc.top_level_id(many) == (True, 5)
    assert jsonrpc.top_level_id(many, max_tokens=100) == (False, None)


def test_a_body_past_orjsons_depth_is_refused_with_its_id() -> None:
    failure = jsonrpc.parse_request(b'{"jsonrpc":"2.0","id":"x-1","method":"GetTask","params":{"m":' + _DEEP + b"}}")
    assert isinstance(failure, jsonrpc.ParseFailure) and failure.limit == "max_json_depth"
    assert failure.error["id"] == "x-1" and failure.code == jsonrpc.INVALID_REQUEST
