"""Hypothesis strategies that write JSON *text* (not Python values), so the properties control
what the wire carries: number spellings (``1e5``, ``1.50``, integers beyond 64 bits, beyond
double range), string escapes, duplicate members, member order, whitespace, deep nesting —
and, on top of that, the broken forms (truncation, invalid UTF-8, a BOM, NaN, lone
surrogates, trailing bytes, batches).

Method names and shapes are those of docs/protocol.md §1.2 (JSON-RPC), §1.3 and §1.5 (REST),
§3 (objects) and §2 (task states).
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

# ------------------------------------------------------------------------------ names (docs/protocol.md §1.2)

V10_METHODS = ("SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask",
               "SubscribeToTask", "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
               "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig",
               "GetExtendedAgentCard")
V03_METHODS = ("message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe",
               "tasks/pushNotificationConfig/set", "tasks/pushNotificationConfig/get",
               "tasks/pushNotificationConfig/list", "tasks/pushNotificationConfig/delete",
               "agent/getAuthenticatedExtendedCard")
A2A_METHODS = V10_METHODS + V03_METHODS
STREAMING_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"})
V03_NAMESPACES = ("message/", "tasks/", "agent/")
"""An unknown name inside these is answered -32601 by the gateway; any other unknown method
is a custom one and relayed (docs/field-cases.md F15)."""

# Near misses of real names, unknown names inside and outside the v0.3 namespaces.
ODD_METHODS = ("tasks/list", "tasks/frobnicate", "message/", "agent/", "tasks/get/", "sendMessage",
               "getTask", "GETTASK", "SendMessage ", " GetTask", "message/send\u0000", "tasks/ü",
               "Custom", "x-ext/ping", "rpc.discover", "SubscribeToTasks", "GetTask\n")

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
"""Unicode text without lone surrogates (those are written as escapes, deliberately)."""
TASK_IDS = st.one_of(st.sampled_from(["t-1", "t-2", "t-done", "t-done", "urn:uuid:0", ""]), TEXT)
"""Task ids; ``t-done`` is the one the healthy worker (tests/fuzz/workers.py) holds as completed."""

# ------------------------------------------------------------------------------ JSON text

WS = st.sampled_from(["", "", "", "", " ", "\n", "\t", "\r\n  "])

EDGE_INTS = (0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**64) - 1, 10**30)
INT_TEXT = st.one_of(
    st.integers(-1000, 1000), st.integers(-(2**80), 2**80), st.sampled_from(EDGE_INTS),
).map(str)


@st.composite
def spelled_float(draw: st.DrawFn) -> str:
    """A number with a fraction or an exponent, in any of JSON's spellings."""
    sign = draw(st.sampled_from(["", "", "-"]))
    whole = draw(st.sampled_from(["0", "1", "7", "12", "100000000000000000000000000"]))
    frac = draw(st.sampled_from(["", ".0", ".5", ".50", ".25", ".000001", ".30000000000000004"]))
    exp = draw(st.sampled_from(["", "", "e5", "E5", "e+5", "E-3", "e0", "e-400", "e400", "e308", "e-320"]))
    if not frac and not exp:
        frac = ".0"
    return sign + whole + frac + exp


FLOAT_TEXT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),  # repr-like: 1e+16, -0.0
    spelled_float(),
)
NUMBER_TEXT = st.one_of(INT_TEXT, FLOAT_TEXT)


@st.composite
def string_text(draw: st.DrawFn, values: st.SearchStrategy[str] = TEXT) -> str:
    """A JSON string literal for a drawn value, escaped one way or another."""
    value = draw(values)
    style = draw(st.sampled_from(["plain", "plain", "ascii", "escape-all"]))
    if style == "plain":
        return json.dumps(value, ensure_ascii=False)
    if style == "ascii":
        return json.dumps(value)
    return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else json.dumps(c)[1:-1] for c in value) + '"'


SCALAR_TEXT = st.one_of(NUMBER_TEXT, string_text(), st.sampled_from(["true", "false", "null"]))


def _array(items: list[str], ws: str) -> str:
    return "[" + ws + ("," + ws).join(items) + ws + "]"


def _object(members: list[tuple[str, str]], ws: str) -> str:
    return "{" + ws + ("," + ws).join(f"{k}{ws}:{ws}{v}" for k, v in members) + ws + "}"


def value_text(max_leaves: int = 10) -> st.SearchStrategy[str]:
    """Any JSON value, as text."""
    return st.recursive(
        SCALAR_TEXT,
        lambda kids: st.one_of(
            st.builds(_array, st.lists(kids, max_size=4), WS),
            st.builds(_object, st.lists(st.tuples(string_text(), kids), max_size=4), WS),
        ),
        max_leaves=max_leaves,
    )


@st.composite
def deep_text(draw: st.DrawFn, max_depth: int = 1200) -> str:
    """A value nested ``1..max_depth`` levels deep (arrays, objects or both); by default past
    orjson's own 1 024 levels too, where no parse reaches a client's id (issue #35)."""
    depth = draw(st.integers(1, max_depth))
    kind = draw(st.sampled_from(["array", "object", "mixed"]))
    leaf = draw(SCALAR_TEXT)
    if kind == "array":
        return "[" * depth + leaf + "]" * depth
    if kind == "object":
        return '{"a":' * depth + leaf + "}" * depth
    opens = "".join('[{"k":' if i % 2 else "[" for i in range(depth))
    closes = "".join("}]" if i % 2 else "]" for i in reversed(range(depth)))
    return opens + leaf + closes


def key_text(name: str) -> st.SearchStrategy[str]:
    """The member name ``name`` as a JSON string, plain or escaped (``"\\u0069d"`` is ``"id"``)."""
    escaped = '"' + "".join(f"\\u{ord(c):04x}" for c in name) + '"'
    return st.sampled_from([json.dumps(name)] * 5 + [escaped])


def dumps_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


# ------------------------------------------------------------------------------ A2A params (docs/protocol.md §3)

def _message_v10(task_id: str | None) -> dict:
    msg: dict = {"messageId": "m-fuzz", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    if task_id is not None:
        msg["taskId"] = task_id
    return msg


def _message_v03(task_id: str | None) -> dict:
    msg: dict = {"kind": "message", "messageId": "m-fuzz", "role": "user",
                 "parts": [{"kind": "text", "text": "hi"}]}
    if task_id is not None:
        msg["taskId"] = task_id
    return msg


@st.composite
def good_params(draw: st.DrawFn, method: str) -> str:
    """Params of the right shape for ``method`` (with odd ids inside), as text."""
    tid = draw(st.one_of(st.none(), TASK_IDS))
    v03 = "/" in method
    if method in ("SendMessage", "SendStreamingMessage", "message/send", "message/stream"):
        msg = _message_v03(tid) if v03 else _message_v10(tid)
        params: dict = {"message": msg}
        if draw(st.booleans()):
            params["configuration"] = {"blocking": True} if v03 else {"historyLength": 0}
        return dumps_text(params)
    if method in ("GetTask", "CancelTask", "SubscribeToTask", "tasks/get", "tasks/cancel", "tasks/resubscribe"):
        return dumps_text({"id": tid if tid is not None else "t-1"})
    if method.startswith("tasks/pushNotificationConfig/"):
        return dumps_text({"id": tid or "t-1", "pushNotificationConfigId": "p-1",
                           "pushNotificationConfig": {"url": "https://example.invalid/hook"}})
    if "PushNotificationConfig" in method:
        return dumps_text({"taskId": tid or "t-1", "id": "p-1", "url": "https://example.invalid/hook"})
    if method == "ListTasks":
        return dumps_text({"pageSize": draw(st.integers(-5, 200))})
    return "{}"


@st.composite
def params_text(draw: st.DrawFn, method: str) -> str:
    """Params of every shape: right, wrong types inside, not an object, junk, deep."""
    kind = draw(st.sampled_from(["good"] * 5 + ["object-junk", "array", "scalar", "deep", "deep-inside", "empty"]))
    if kind == "good":
        return draw(good_params(method))
    if kind == "object-junk":
        members = draw(st.lists(st.tuples(st.sampled_from(['"id"', '"message"', '"taskId"', '"metadata"',
                                                           '"configuration"', '"x"']), value_text()),
                                max_size=4))
        return _object(members, "")
    if kind == "array":
        return draw(st.builds(_array, st.lists(value_text(4), max_size=3), WS))
    if kind == "scalar":
        return draw(SCALAR_TEXT)
    if kind == "deep":
        return draw(deep_text())
    if kind == "deep-inside":
        return '{"id":"t-1","metadata":' + draw(deep_text()) + "}"
    return "{}"


# ------------------------------------------------------------------------------ envelopes

ID_TEXT = st.one_of(
    NUMBER_TEXT, NUMBER_TEXT, NUMBER_TEXT,
    string_text(), string_text(), string_text(st.sampled_from(["", "7", "ü🙂", "\u2028", "a\u0000b", "x" * 300])),
    st.just("null"),
)
BAD_ID_TEXT = st.sampled_from(["true", "false", "{}", '{"x":1}', "[1]", "[]"])  # not an id: -32600
JSONRPC_TEXT = st.sampled_from(['"2.0"'] * 30 + ['"2\\u002e0"', '"1.0"', "2.0", "null", '"2.0 "', '"2"', '["2.0"]', '""'])


@st.composite
def method_name(draw: st.DrawFn) -> str:
    return draw(st.one_of(st.sampled_from(A2A_METHODS), st.sampled_from(A2A_METHODS), st.sampled_from(A2A_METHODS),
                          st.sampled_from(sorted(STREAMING_METHODS)), st.sampled_from(ODD_METHODS),
                          st.builds(lambda ns, s: ns + s, st.sampled_from(V03_NAMESPACES), TEXT), TEXT))


def rarely(draw: st.DrawFn) -> bool:
    """True about one time in ten. (A middle value: Hypothesis draws the ends of an integer
    range far more often than the rest.)"""
    return draw(st.integers(0, 9)) == 4


@st.composite
def envelope_text(draw: st.DrawFn) -> str:
    """One JSON-RPC request object as text: each member present, absent or wrong; members
    in any order, sometimes duplicated, sometimes with extra members."""
    method = draw(method_name())
    members: list[tuple[str, str]] = []
    if not rarely(draw):  # usually present, sometimes wrong
        members.append((draw(key_text("jsonrpc")), draw(JSONRPC_TEXT)))
    if not rarely(draw):
        members.append((draw(key_text("id")), draw(BAD_ID_TEXT if rarely(draw) else ID_TEXT)))
    if not rarely(draw):
        members.append((draw(key_text("method")), draw(string_text(st.just(method)))))
    elif draw(st.booleans()):
        members.append(('"method"', draw(st.sampled_from(["5", "null", '""', '["GetTask"]', "{}", "true"]))))
    if not rarely(draw):
        members.append((draw(key_text("params")), draw(params_text(method))))
    for _ in range(draw(st.integers(1, 2)) if rarely(draw) else 0):
        name = draw(st.sampled_from(["id", "method", "params", "jsonrpc", "extra", "result", "error"]))
        value = draw(st.one_of(ID_TEXT, JSONRPC_TEXT, value_text(4)))
        members.append((json.dumps(name), value))  # an extra or duplicated member
    members = draw(st.permutations(members))
    return _object(members, draw(WS))


@st.composite
def client_body(draw: st.DrawFn) -> bytes:
    """What a client may POST to a JSON-RPC endpoint: mostly envelopes, then batches,
    non-objects, non-JSON and broken JSON."""
    kind = draw(st.sampled_from(["envelope"] * 16 + ["batch", "scalar", "bytes", "truncated", "bad-utf8",
                                                     "bom", "nan", "surrogate", "trailing", "ws"]))
    env = draw(envelope_text())
    if kind == "envelope":
        return env.encode()
    if kind == "batch":
        return _array(draw(st.lists(envelope_text(), max_size=3)), draw(WS)).encode()
    if kind == "scalar":
        return draw(value_text(4)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=40))
    raw = env.encode()
    if kind == "truncated":
        return raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
    if kind == "bad-utf8":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"])) + raw[at:]
    if kind == "bom":
        return b"\xef\xbb\xbf" + raw
    if kind == "nan":
        return raw.replace(b'"2.0"', b'"2.0","id":' + draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity"])), 1)
    if kind == "surrogate":
        return raw.replace(b'"2.0"', b'"2.0","id":"\\ud800x"', 1)
    if kind == "trailing":
        return raw + draw(st.sampled_from([b"x", b"{}", b",", b"\x00", b" //c", b"]"]))
    return draw(WS).encode() + raw + draw(WS).encode()
