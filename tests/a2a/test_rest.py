"""gateway/a2a/rest.py: REST path and verb → operation (docs/protocol.md §1.3, §1.4, §5), and
the ``google.rpc.Status`` errors both ways (§6.1, §6.3). Pure: strings and dicts in, values out."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gateway.a2a import jsonrpc, rest
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.rest import RestCall, match
from gateway.a2a.version import ProtocolVersion

V10, V03 = ProtocolVersion.V1_0, ProtocolVersion.V0_3

# (verb, path below the base, operation, task id, config id): every row of docs/protocol.md §1.3
PATHS = [
    ("POST", "/message:send", Operation.SEND, None, None),
    ("POST", "/message:stream", Operation.STREAM, None, None),
    ("GET", "/tasks/t-1", Operation.GET, "t-1", None),
    ("GET", "/tasks", Operation.LIST, None, None),
    ("POST", "/tasks/t-1:cancel", Operation.CANCEL, "t-1", None),
    ("GET", "/tasks/t-1:subscribe", Operation.SUBSCRIBE, "t-1", None),
    ("POST", "/tasks/t-1:subscribe", Operation.SUBSCRIBE, "t-1", None),
    ("POST", "/tasks/t-1/pushNotificationConfigs", Operation.PUSH_CREATE, "t-1", None),
    ("GET", "/tasks/t-1/pushNotificationConfigs", Operation.PUSH_LIST, "t-1", None),
    ("GET", "/tasks/t-1/pushNotificationConfigs/p-1", Operation.PUSH_GET, "t-1", "p-1"),
    ("DELETE", "/tasks/t-1/pushNotificationConfigs/p-1", Operation.PUSH_DELETE, "t-1", "p-1"),
]
V10_ONLY = [("GET", "/extendedAgentCard", Operation.EXTENDED_CARD, None, None)]
V03_ONLY = [("GET", "/card", Operation.EXTENDED_CARD, None, None)]
BASES = ["", "/acme", "/rest", "/acme/rest", "/a2a/tock/rest"]


def _ids(rows: list[tuple[Any, ...]]) -> list[str]:
    return [f"{verb} {path}" for verb, path, *_ in rows]


class TestV10Paths:
    @pytest.mark.parametrize("base", BASES)
    @pytest.mark.parametrize(("verb", "path", "op", "tid", "cid"), PATHS + V10_ONLY, ids=_ids(PATHS + V10_ONLY))
    @pytest.mark.parametrize("header", ["1.0", None], ids=["a2a-1.0", "no-header"])
    def test_every_path_under_every_base(self, base, verb, path, op, tid, cid, header):
        """v1.0 paths have no ``/v1``: they are v1.0 whatever the header says."""
        assert match(verb, base + path, header) == RestCall(op, V10, base, tid, cid)

    @pytest.mark.parametrize("header", ["1.0", "1.0.2", "1.1", " 1.0 ", "1"])
    def test_v1_segment_with_a_major_1_header_is_part_of_the_base(self, header):
        call = match("POST", "/v1/message:send", header)
        assert call == RestCall(Operation.SEND, V10, "/v1")
        assert call.task_get_target("t-1") == "/v1/tasks/t-1?historyLength=0"  # the road kept as it came
        assert match("GET", "/acme/v1/tasks/t-1", header) == RestCall(Operation.GET, V10, "/acme/v1", "t-1")

    def test_v1_card_is_no_v10_path(self):
        assert match("GET", "/v1/card", "1.0") is None
        assert match("GET", "/card", None) is None
        assert match("GET", "/acme/card", "1.0") is None


class TestV03Paths:
    @pytest.mark.parametrize("base", BASES)
    @pytest.mark.parametrize(("verb", "path", "op", "tid", "cid"), PATHS + V03_ONLY, ids=_ids(PATHS + V03_ONLY))
    @pytest.mark.parametrize("header", [None, "", "0.3", "0.3.0"], ids=["none", "empty", "0.3", "0.3.0"])
    def test_every_path_under_v1_and_every_base(self, base, verb, path, op, tid, cid, header):
        """``/v1`` right before the operation, without ``A2A-Version: 1.x``, is v0.3; the base
        excludes the ``/v1`` (the calls the gateway makes add it again)."""
        assert match(verb, base + "/v1" + path, header) == RestCall(op, V03, base, tid, cid)

    def test_targets_go_back_under_v1_on_the_same_base(self):
        call = match("POST", "/acme/v1/message:stream", None)
        assert call.version is V03 and call.base == "/acme"
        assert call.task_get_target("t-9") == "/acme/v1/tasks/t-9?historyLength=0"
        assert call.subscribe_target("t-9") == "/acme/v1/tasks/t-9:subscribe"
        assert call.target("/x") == "/acme/v1/x"

    def test_only_the_last_v1_segment_marks_the_version(self):
        assert match("POST", "/v1/v1/message:send", None) == RestCall(Operation.SEND, V03, "/v1")
        assert match("GET", "/v1/acme/tasks/t-1", None) == RestCall(Operation.GET, V10, "/v1/acme", "t-1")


class TestTargets:
    @pytest.mark.parametrize("base", ["", "/acme/rest"])
    def test_probe_and_resubscribe_stay_on_the_clients_road(self, base):
        call = match("POST", base + "/message:stream", "1.0")
        assert call.task_get_target("t-9") == base + "/tasks/t-9?historyLength=0"
        assert call.subscribe_target("t-9") == base + "/tasks/t-9:subscribe"

    def test_streaming_is_stream_and_subscribe_only(self):
        streaming = {op for verb, path, op, *_ in PATHS + V10_ONLY if match(verb, path).streaming}
        assert streaming == {Operation.STREAM, Operation.SUBSCRIBE}


class TestPercentEncoding:
    @pytest.mark.parametrize(("raw", "decoded"), [
        ("t%2F5", "t/5"), ("a%3Ab", "a:b"), ("t%205", "t 5"), ("%C3%A9t%C3%A9", "été"),
        ("50%25", "50%"), ("a%2541", "a%41"), ("t-1", "t-1"),
    ])
    def test_ids_are_decoded_once_and_encoded_again_for_the_gateways_calls(self, raw, decoded):
        get = match("GET", f"/acme/tasks/{raw}", "1.0")
        assert get == RestCall(Operation.GET, V10, "/acme", decoded)
        assert get.task_get_target(decoded) == f"/acme/tasks/{_quoted(decoded)}?historyLength=0"
        assert get.subscribe_target(decoded) == f"/acme/tasks/{_quoted(decoded)}:subscribe"
        for verb, tail, op in (("POST", ":cancel", Operation.CANCEL), ("GET", ":subscribe", Operation.SUBSCRIBE),
                               ("POST", ":subscribe", Operation.SUBSCRIBE)):
            assert match(verb, f"/tasks/{raw}{tail}", "1.0") == RestCall(op, V10, "", decoded)

    def test_encoded_slash_in_an_id_is_not_a_path_separator(self):
        """``%2F`` keeps the id one segment: the push-config path of ``t/5`` is not a config ``5``."""
        call = match("GET", "/tasks/t%2F5/pushNotificationConfigs/p%2F1", "1.0")
        assert call == RestCall(Operation.PUSH_GET, V10, "", "t/5", "p/1")
        assert match("GET", "/tasks/t/5", "1.0") is None

    def test_an_encoded_base_stays_raw(self):
        """The base is kept as sent (it is sent back to the worker as is)."""
        call = match("POST", "/ac%20me/message:send", "1.0")
        assert call.base == "/ac%20me"
        assert call.task_get_target("t/1") == "/ac%20me/tasks/t%2F1?historyLength=0"


class TestAsTheWorkersRoutersReadIt:
    """Letter case and one trailing ``/`` do not hide an operation: express (the @a2a-js/sdk
    server) routes case-insensitively and non-strictly (docs/protocol.md §1.5); ids keep
    their case."""

    @pytest.mark.parametrize(("verb", "path", "op", "tid"), [
        ("POST", "/Message:Send", Operation.SEND, None), ("POST", "/message:send/", Operation.SEND, None),
        ("GET", "/tasks/", Operation.LIST, None), ("GET", "/tasks/T-1/", Operation.GET, "T-1"),
        ("POST", "/rest/TASKS/Ab:CANCEL", Operation.CANCEL, "Ab"),
        ("GET", "/V1/Tasks/t-1", Operation.GET, "t-1")])
    def test_case_and_a_trailing_slash(self, verb, path, op, tid):
        call = match(verb, path, None)
        assert call is not None and (call.operation, call.task_id) == (op, tid)


class TestIdsWithColons:
    """A GET of ``/tasks/{id}`` takes any id without ``/`` (``urn:uuid:…``, as SDK clients
    send them unencoded): the workers' routers read ``GET /tasks/t-1:cancel`` as the task
    ``t-1:cancel`` too (only a POST is a cancel)."""

    @pytest.mark.parametrize("tid", ["urn:uuid:1796120488", "t-1:cancel", "t-1:frobnicate",
                                     "t-1:subscribe:cancel:x"])
    def test_a_get_with_colons_in_the_id_is_get_task(self, tid):
        assert match("GET", f"/tasks/{tid}", "1.0") == RestCall(Operation.GET, ProtocolVersion.V1_0, "", tid)

    def test_subscribe_and_cancel_still_win_for_their_verbs(self):
        assert match("GET", "/tasks/t-1:subscribe", "1.0").operation is Operation.SUBSCRIBE
        assert match("POST", "/tasks/urn:x:cancel", "1.0") == RestCall(
            Operation.CANCEL, ProtocolVersion.V1_0, "", "urn:x")


class TestNotRest:
    @pytest.mark.parametrize(("verb", "path"), [
        ("GET", "/message:send"), ("PUT", "/message:send"), ("DELETE", "/message:stream"),
        ("DELETE", "/tasks/t-1:cancel"), ("PUT", "/tasks/t-1:subscribe"),
        ("DELETE", "/tasks/t-1:subscribe"), ("POST", "/tasks/t-1"), ("DELETE", "/tasks/t-1"),
        ("PATCH", "/tasks/t-1"), ("POST", "/tasks"), ("DELETE", "/tasks"),
        ("DELETE", "/tasks/t-1/pushNotificationConfigs"), ("PUT", "/tasks/t-1/pushNotificationConfigs"),
        ("POST", "/tasks/t-1/pushNotificationConfigs/p-1"), ("POST", "/extendedAgentCard"),
        ("HEAD", "/tasks/t-1"), ("get", "/tasks/t-1"), ("POST", "/v1/card"), ("GET", "/v1/message:send"),
    ])
    def test_wrong_verbs(self, verb, path):
        assert match(verb, path, "1.0") is None
        assert match(verb, "/acme" + path, None) is None

    @pytest.mark.parametrize("path", [
        "/", "", "/message", "/message:frobnicate", "/messages:send",
        "/tasks/t-1/artifacts", "/tasks/t-1:cancel/x",
        "/tasks/t-1/pushNotificationConfigs/p-1/x", "/.well-known/agent-card.json", "/v1", "/v1/",
        "//message:send", "/acme//message:send", "/tasks//pushNotificationConfigs",
        "message:send",
    ])
    @pytest.mark.parametrize("verb", ["GET", "POST", "DELETE"])
    def test_unknown_paths(self, path, verb):
        assert match(verb, path, "1.0") is None
        assert match(verb, path, None) is None


# ------------------------------------------------------------------------------ errors

# (code, HTTP status, google.rpc status name, ErrorInfo reason): docs/protocol.md §6.1 (v1.0.1), §6.2
ERRORS = [
    (jsonrpc.TASK_NOT_FOUND, 404, "NOT_FOUND", "TASK_NOT_FOUND"),
    (jsonrpc.TASK_NOT_CANCELABLE, 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"),
    (jsonrpc.PUSH_NOTIFICATION_NOT_SUPPORTED, 400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    (jsonrpc.UNSUPPORTED_OPERATION, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"),
    (jsonrpc.CONTENT_TYPE_NOT_SUPPORTED, 400, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED"),
    (jsonrpc.INVALID_AGENT_RESPONSE, 500, "INTERNAL", "INVALID_AGENT_RESPONSE"),
    (jsonrpc.EXTENDED_AGENT_CARD_NOT_CONFIGURED, 400, "FAILED_PRECONDITION", "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    (jsonrpc.EXTENSION_SUPPORT_REQUIRED, 400, "FAILED_PRECONDITION", "EXTENSION_SUPPORT_REQUIRED"),
    (jsonrpc.VERSION_NOT_SUPPORTED, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED"),
    # A2A v1.1 draft, SPEC11 §5.4: TaskGenerationMismatchError is 409 / ABORTED
    (jsonrpc.TASK_GENERATION_MISMATCH, 409, "ABORTED", "TASK_GENERATION_MISMATCH"),
    (jsonrpc.PARSE_ERROR, 400, "INVALID_ARGUMENT", "INVALID_REQUEST"),
    (jsonrpc.INVALID_REQUEST, 400, "INVALID_ARGUMENT", "INVALID_REQUEST"),
    (jsonrpc.INVALID_PARAMS, 400, "INVALID_ARGUMENT", "INVALID_PARAMS"),
    (jsonrpc.METHOD_NOT_FOUND, 404, "NOT_FOUND", "METHOD_NOT_FOUND"),
    (jsonrpc.INTERNAL_ERROR, 500, "INTERNAL", "INTERNAL_ERROR"),
]


class TestErrorBody:
    @pytest.mark.parametrize(("code", "http", "name", "reason"), ERRORS)
    def test_every_code_has_its_status_and_reason(self, code, http, name, reason):
        body = rest.error_body(code, "no", metadata={"taskId": "t-1"})
        assert body == {"error": {"code": http, "status": name, "message": "no", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
             "domain": "a2a-protocol.org", "metadata": {"taskId": "t-1"}}]}}
        assert rest.http_status(code) == http

    def test_the_error_table_covers_every_known_code(self):
        assert {code for code, *_ in ERRORS} == set(jsonrpc.KNOWN_CODES)

    def test_metadata_defaults_to_an_empty_object(self):
        [info] = rest.error_body(jsonrpc.UNSUPPORTED_OPERATION, "m")["error"]["details"]
        assert info["metadata"] == {}

    @pytest.mark.parametrize(("status", "name"), [(503, "UNAVAILABLE"), (502, "UNAVAILABLE"),
                                                  (504, "DEADLINE_EXCEEDED"), (413, "INVALID_ARGUMENT")])
    def test_status_overrides_the_http_status_and_keeps_the_reason(self, status, name):
        body = rest.error_body(jsonrpc.INTERNAL_ERROR, "not now", status=status)["error"]
        assert (body["code"], body["status"]) == (status, name)
        assert body["details"][0]["reason"] == "INTERNAL_ERROR"

    def test_status_equal_to_the_codes_own_changes_nothing(self):
        assert rest.error_body(jsonrpc.TASK_NOT_FOUND, "m", status=404) == rest.error_body(jsonrpc.TASK_NOT_FOUND, "m")

    @pytest.mark.parametrize("code", [-32099, 0, 42])
    def test_an_unknown_code_is_500_internal(self, code):
        body = rest.error_body(code, "m")["error"]
        assert (body["code"], body["status"], body["details"][0]["reason"]) == (500, "INTERNAL", "INTERNAL_ERROR")
        assert rest.http_status(code) == 500

    def test_transport_error_body_has_no_a2a_details(self):
        assert rest.transport_error_body(502, "upstream error: x") == {
            "error": {"code": 502, "status": "UNAVAILABLE", "message": "upstream error: x"}}
        assert rest.transport_error_body(504, "t")["error"]["status"] == "DEADLINE_EXCEEDED"
        assert rest.transport_error_body(599, "t")["error"]["status"] == "INTERNAL"


def _status(http: int, *details: Any) -> dict[str, Any]:
    return {"error": {"code": http, "status": "X", "message": "m", "details": list(details)}}


def _info(reason: Any) -> dict[str, Any]:
    return {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org"}


class TestErrorCode:
    @pytest.mark.parametrize(("code", "http", "name", "reason"), ERRORS)
    def test_the_gateways_own_bodies_read_back_as_their_code(self, code, http, name, reason):
        back = rest.error_code(http, rest.error_body(code, "m"))
        assert back == (jsonrpc.INVALID_REQUEST if code == jsonrpc.PARSE_ERROR else code)

    def test_the_reason_wins_over_the_http_status(self):
        assert rest.error_code(400, _status(400, _info("TASK_NOT_FOUND"))) == jsonrpc.TASK_NOT_FOUND
        assert rest.error_code(500, _status(500, _info("UNSUPPORTED_OPERATION"))) == jsonrpc.UNSUPPORTED_OPERATION

    def test_the_first_known_error_info_counts(self):
        other = {"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": []}
        body = _status(400, other, _info("NO_SUCH_REASON"), _info("TASK_NOT_CANCELABLE"), _info("TASK_NOT_FOUND"))
        assert rest.error_code(400, body) == jsonrpc.TASK_NOT_CANCELABLE

    @pytest.mark.parametrize(("http", "code"), [(404, jsonrpc.TASK_NOT_FOUND), (400, jsonrpc.INVALID_PARAMS),
                                                (409, jsonrpc.TASK_NOT_CANCELABLE), (500, jsonrpc.INTERNAL_ERROR),
                                                (403, None), (401, None), (502, None), (200, None)])
    @pytest.mark.parametrize("body", [
        {"error": {"code": 0, "message": "no details"}},
        _status(0, _info("NOT_AN_A2A_REASON")),
        _status(0, _info(None)), _status(0, _info(["TASK_NOT_FOUND"])),
        _status(0, {"reason": "TASK_NOT_FOUND"}),  # no @type: not an ErrorInfo
        {"error": {"details": "TASK_NOT_FOUND"}}, {"error": "TASK_NOT_FOUND"}, {"code": -1, "message": "v0.3"},
        {"type": "NoSuchError"}, {"code": True},
        [], "text", None, 7,
    ])
    def test_without_a_known_reason_the_http_status_decides(self, http, code, body):
        assert rest.error_code(http, body) == code


class TestRequestParams:
    @pytest.mark.parametrize("op_path", ["/message:send", "/message:stream"])
    def test_a_send_is_its_json_body(self, op_path):
        call = match("POST", op_path)
        body = {"message": {"messageId": "m", "taskId": "t-1"}, "configuration": {"returnImmediately": True}}
        assert rest.request_params(call, body) is body
        assert rest.request_params(call, ["not", "an", "object"]) == {}
        assert rest.request_params(call, None) == {}

    @pytest.mark.parametrize(("verb", "path", "params"), [
        ("GET", "/tasks/t%2F1", {"id": "t/1"}),
        ("POST", "/tasks/t-1:cancel", {"id": "t-1"}),
        ("GET", "/tasks/t-1:subscribe", {"id": "t-1"}),
        ("POST", "/tasks/t-1/pushNotificationConfigs", {"taskId": "t-1"}),
        ("GET", "/tasks/t-1/pushNotificationConfigs", {"taskId": "t-1"}),
        ("GET", "/tasks/t-1/pushNotificationConfigs/p-1", {"taskId": "t-1", "id": "p-1"}),
        ("DELETE", "/tasks/t-1/pushNotificationConfigs/p-1", {"taskId": "t-1", "id": "p-1"}),
        ("GET", "/tasks", {}),
        ("GET", "/extendedAgentCard", {}),
    ])
    def test_other_operations_are_their_path_ids(self, verb, path, params):
        assert rest.request_params(match(verb, path, "1.0"), {"ignored": True}) == params


def _quoted(task_id: str) -> str:
    from urllib.parse import quote

    return quote(task_id, safe="")


class TestV03ErrorForm:
    """v0.3 REST errors carry the A2A code and the error name at the top level."""

    @pytest.mark.parametrize(("body", "code"), [
        ({"code": -32004, "message": "v0.3 (a2a-js)"}, jsonrpc.UNSUPPORTED_OPERATION),
        ({"message": "m", "type": "TaskNotCancelableError"}, jsonrpc.TASK_NOT_CANCELABLE),
        ({"code": -32001, "message": "m", "type": "TaskNotFoundError"}, jsonrpc.TASK_NOT_FOUND)])
    def test_a_v03_worker_error_is_read_by_code_or_type(self, body, code):
        assert rest.error_code(400, body) == code

    @pytest.mark.parametrize(("code", "http", "name"), [
        (jsonrpc.UNSUPPORTED_OPERATION, 400, "UnsupportedOperationError"),
        (jsonrpc.TASK_NOT_CANCELABLE, 409, "TaskNotCancelableError"),
        (jsonrpc.TASK_NOT_FOUND, 404, "TaskNotFoundError"),
        (jsonrpc.INVALID_AGENT_RESPONSE, 502, "InvalidAgentResponseError")])
    def test_the_gateways_v03_error_is_readable_by_both_v03_sdks(self, code, http, name):
        body = rest.error_body(code, "refused", version=V03)
        assert body == {"code": code, "message": "refused", "type": name}
        assert rest.http_status(code, V03) == http
        assert rest.error_code(http, body) == code


# -- the tenant of a REST call (docs/callers.md §1) ------------------------------------------------


@pytest.mark.parametrize("path,prefixes,tenant", [
    ("/tasks/t-1", ["/rest"], ""),
    ("/rest/tasks/t-1", ["/rest"], ""),
    ("/acme/rest/tasks/t-1", ["/rest"], "acme"),
    ("/acme/REST/tasks/t-1", ["/rest/"], "acme"),
    ("/acme/tasks/t-1", ["/rest"], "acme"),
    ("/a%20b/rest/message:send", ["/rest"], "a b"),
    ("/acme/rest/tasks/t-1", [], "acme/rest"),
    ("/xrest/tasks/t-1", ["/rest"], "xrest"),
])
def test_rest_tenant_is_the_base_without_the_workers_prefix(path: str, prefixes: list[str], tenant: str) -> None:
    method = "POST" if path.endswith(":send") else "GET"
    call = rest.match(method, path)
    assert call is not None and rest.rest_tenant(call, prefixes) == tenant


def test_rest_tenant_falls_back_to_the_tenant_query_parameter() -> None:
    call = rest.match("GET", "/tasks/t-1")
    assert call is not None
    assert rest.rest_tenant(dataclasses.replace(call, query="tenant=acme&A2A-Version=1.0")) == "acme"
    assert rest.rest_tenant(dataclasses.replace(rest.match("GET", "/beta/tasks/t-1"), query="tenant=acme")) == "beta"
