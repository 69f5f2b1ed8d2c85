"""The version bridge's translation core: one A2A dialect's values in, the same meaning in another's out.

Implements docs/bridge.md §1 (every table there is one table here): §1.1 the three dialects
and the pass-through rule, §1.2 states and roles, §1.3 parts, §1.4 messages, §1.5 tasks,
statuses and artifacts, §1.6 stream events and unary results, §1.7 push configs, §1.8 the send
configuration, §1.9 requests, §1.10 errors. Pure: stdlib only (docs/architecture.md,
convention 2).

Everything is a member-rename table read by one small walker (:func:`_walk`); the few shapes
that are not renames (parts, push configs, resource names, ``final``, the blocking flag) have
a function each. Conversions of worker payloads never raise: a value that is not the expected
shape is passed through unchanged, so the invariant engine downstream sees it and refuses it.
Only :func:`convert_params` raises (:class:`~gateway.errors.BridgeError`), for a request the
destination version cannot express.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Any

from gateway.a2a import jsonrpc
from gateway.a2a.jsonrpc import Operation
from gateway.a2a.rest import REASONS
from gateway.a2a.states import Spelling, TaskState, normalize_state, spell_state
from gateway.a2a.version import Binding, ProtocolVersion
from gateway.errors import BridgeError, UnknownStateError


class Dialect(enum.Enum):
    """One wire form of A2A objects (docs/bridge.md §1.1)."""

    V1_0 = "1.0"
    """v1.0 ProtoJSON; its JSON-RPC and REST bindings carry the same objects."""
    V0_3_JSONRPC = "0.3/jsonrpc"
    """v0.3 JSON-RPC (TYPES03): ``kind`` tags, lower-case kebab states, roles ``user``/``agent``."""
    V0_3_REST = "0.3/rest"
    """v0.3 REST and gRPC ProtoJSON (PROTO03): ``Message.content``, ``TASK_STATE_CANCELLED``."""


V1 = Dialect.V1_0
J03 = Dialect.V0_3_JSONRPC
R03 = Dialect.V0_3_REST
_V03 = (J03, R03)


def dialect_of(version: ProtocolVersion, binding: Binding) -> Dialect:
    """The dialect a client or worker of ``version`` speaks on ``binding`` (docs/bridge.md §1.1)."""
    if version is not ProtocolVersion.V0_3:
        return V1
    return J03 if binding is Binding.JSONRPC else R03


# ---------------------------------------------------------------------------------------------
# Walker. A field is (names per dialect, converter): the names are a tuple whose first element
# is written and all of which are read (PROTO03's proto field names beside their json_name);
# an empty tuple means the dialect has no such member, so it is dropped (docs/bridge.md §1.1).

Conv = Callable[[Any, Dialect, Dialect], Any]
Field = tuple[dict[Dialect, tuple[str, ...]], Conv | None]


def _f(v1: str, j03: str | tuple[str, ...] | None = "", r03: str | tuple[str, ...] | None = "",
       conv: Conv | None = None) -> Field:
    """A field named ``v1`` in v1.0; ``""`` means the same name in that v0.3 dialect, ``None``
    none at all."""
    def names(name: str | tuple[str, ...] | None) -> tuple[str, ...]:
        if name is None:
            return ()
        if name == "":
            return (v1,)
        return name if isinstance(name, tuple) else (name,)
    return {V1: (v1,), J03: names(j03), R03: names(r03)}, conv


def _walk(obj: Any, src: Dialect, dst: Dialect, fields: tuple[Field, ...],
          kind: str | None = None) -> Any:
    """``obj`` with every field of ``fields`` renamed (and converted) from ``src`` to ``dst``;
    members no field names are dropped; a v0.3 JSON-RPC destination gets ``kind``. A
    non-object is returned unchanged."""
    if src is dst or not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    if kind is not None and dst is J03:
        out["kind"] = kind
    for names, conv in fields:
        written = names[dst]
        if not written:
            continue
        for name in names[src]:
            if name in obj:
                value = obj[name]
                out[written[0]] = value if conv is None else conv(value, src, dst)
                break
    return out


def _each(conv: Conv) -> Conv:
    """A converter of a list of values, each by ``conv`` (a non-list passes unchanged)."""
    def convert(value: Any, src: Dialect, dst: Dialect) -> Any:
        return [conv(v, src, dst) for v in value] if isinstance(value, list) else value
    return convert


# ---------------------------------------------------------------------------------------------
# docs/bridge.md §1.2 States and roles

_SPELLING = {V1: Spelling.V1_0, J03: Spelling.V0_3, R03: Spelling.V0_3_PROTO}
# Each dialect's canonical spelling of each state (states.py's table, read per dialect).
_CANONICAL: dict[Dialect, dict[str, TaskState]] = {
    d: {spell_state(s, spelling): s for s in TaskState} for d, spelling in _SPELLING.items()
}
_ROLES = {V1: ("ROLE_USER", "ROLE_AGENT"), J03: ("user", "agent"), R03: ("ROLE_USER", "ROLE_AGENT")}


def convert_state(state: Any, src: Dialect, dst: Dialect) -> Any:
    """A ``TaskState`` spelled for ``dst`` when ``state`` is ``src``'s canonical spelling of one
    (``TASK_STATE_COMPLETED`` ↔ ``completed`` ↔ ``TASK_STATE_COMPLETED``; unspecified ↔
    ``unknown``); anything else unchanged, so the engine normalizes and counts a misspelling or
    refuses an unknown state (docs/bridge.md §1.2)."""
    canonical = _CANONICAL[src].get(state) if isinstance(state, str) else None
    return state if canonical is None else spell_state(canonical, _SPELLING[dst])


def convert_role(role: Any, src: Dialect, dst: Dialect) -> Any:
    """``user`` ↔ ``ROLE_USER``, ``agent`` ↔ ``ROLE_AGENT``; other values unchanged
    (docs/bridge.md §1.2)."""
    if isinstance(role, str) and role in _ROLES[src]:
        return _ROLES[dst][_ROLES[src].index(role)]
    return role


# ---------------------------------------------------------------------------------------------
# docs/bridge.md §1.3 Parts

DATA_PART_COMPAT = "data_part_compat"
"""The part-metadata key that marks a v1.0 data value that is not an object, wrapped as
``{"value": …}`` in v0.3 (the a2a-sdk compat layer's convention, docs/bridge.md §1.3)."""
_V1_CONTENT = ("text", "raw", "url", "data")
_PART_EXTRAS = ("metadata", "filename", "mediaType")


def _part_to_v1(part: dict[str, Any], src: Dialect) -> dict[str, Any] | None:
    """A v0.3 part as a v1.0 part, or ``None`` when it holds no known content."""
    out: dict[str, Any] = {}
    if src is J03:
        kind = part.get("kind")
        meta = part.get("metadata")
        if kind == "text" and "text" in part:
            out["text"] = part["text"]
        elif kind == "file" and isinstance(part.get("file"), dict):
            file = part["file"]
            content = [m for m in ("uri", "bytes") if m in file]
            if len(content) != 1:
                return None
            out["url" if content[0] == "uri" else "raw"] = file[content[0]]
            _copy(file, out, (("mimeType", "mediaType"), ("name", "filename")))
        elif kind == "data" and "data" in part:
            data = part["data"]
            if isinstance(meta, dict) and meta.get(DATA_PART_COMPAT) is True \
                    and isinstance(data, dict) and "value" in data:
                data = data["value"]
                meta = {k: v for k, v in meta.items() if k != DATA_PART_COMPAT} or None
            out["data"] = data
        else:
            return None
        if meta is not None:
            out["metadata"] = meta
        return out
    if "text" in part:  # R03: {text} | {file: {fileWithUri|fileWithBytes, mimeType}} | {data: {data}}
        out["text"] = part["text"]
    elif isinstance(part.get("file"), dict):
        file = part["file"]
        content = [m for m in ("fileWithUri", "fileWithBytes") if m in file]
        if len(content) != 1:
            return None
        out["url" if content[0] == "fileWithUri" else "raw"] = file[content[0]]
        _copy(file, out, (("mimeType", "mediaType"),))
    elif isinstance(part.get("data"), dict) and "data" in part["data"]:
        out["data"] = part["data"]["data"]
    else:
        return None
    return out


def _part_from_v1(part: dict[str, Any], dst: Dialect) -> dict[str, Any] | None:
    """A v1.0 part as a ``dst`` (v0.3) part, or ``None`` when it holds no one known content."""
    content = [m for m in _V1_CONTENT if m in part]
    if len(content) != 1:
        return None
    member = content[0]
    value = part[member]
    meta = part.get("metadata")
    if member == "text":
        out: dict[str, Any] = {"kind": "text", "text": value} if dst is J03 else {"text": value}
    elif member == "data":
        if not isinstance(value, dict):
            value = {"value": value}
            meta = {**(meta if isinstance(meta, dict) else {}), DATA_PART_COMPAT: True}
        out = {"kind": "data", "data": value} if dst is J03 else {"data": {"data": value}}
    elif dst is J03:
        file = {"uri" if member == "url" else "bytes": value}
        _copy(part, file, (("mediaType", "mimeType"), ("filename", "name")))
        out = {"kind": "file", "file": file}
    else:
        file = {"fileWithUri" if member == "url" else "fileWithBytes": value}
        _copy(part, file, (("mediaType", "mimeType"),))
        out = {"file": file}
    if dst is J03 and meta is not None:
        out["metadata"] = meta
    return out


def _copy(src_obj: dict[str, Any], dst_obj: dict[str, Any], renames: tuple[tuple[str, str], ...]) -> None:
    for src_name, dst_name in renames:
        if src_name in src_obj:
            dst_obj[dst_name] = src_obj[src_name]


def convert_part(part: Any, src: Dialect, dst: Dialect) -> Any:
    """One Part (docs/bridge.md §1.3): v1.0 ``{text|raw|url|data, mediaType?, filename?,
    metadata?}`` ↔ v0.3 JSON-RPC ``{kind, text | file{uri|bytes, mimeType?, name?} | data{…},
    metadata?}`` ↔ v0.3 REST ``{text | file{fileWithUri|fileWithBytes, mimeType?} |
    data{data{…}}}``. A part with no one known content is returned unchanged."""
    if src is dst or not isinstance(part, dict):
        return part
    v1 = part if src is V1 else _part_to_v1(part, src)
    if v1 is None:
        return part
    out = v1 if dst is V1 else _part_from_v1(v1, dst)
    return part if out is None else out


# ---------------------------------------------------------------------------------------------
# docs/bridge.md §1.4 Message, §1.5 Task, TaskStatus, Artifact

_PARTS = _each(convert_part)


def convert_message(message: Any, src: Dialect, dst: Dialect) -> Any:
    """One Message (docs/bridge.md §1.4): ``parts`` ↔ PROTO03 ``content``, roles, ``kind``."""
    return _walk(message, src, dst, _MESSAGE, "message")


def convert_status(status: Any, src: Dialect, dst: Dialect) -> Any:
    """One TaskStatus (docs/bridge.md §1.5): ``state``, ``message`` (PROTO03 field ``update``,
    JSON name ``message``), ``timestamp``."""
    return _walk(status, src, dst, _STATUS)


def convert_artifact(artifact: Any, src: Dialect, dst: Dialect) -> Any:
    """One Artifact (docs/bridge.md §1.5)."""
    return _walk(artifact, src, dst, _ARTIFACT)


def convert_task(task: Any, src: Dialect, dst: Dialect) -> Any:
    """One Task (docs/bridge.md §1.5), its status, artifacts and history included."""
    return _walk(task, src, dst, _TASK, "task")


_MESSAGE: tuple[Field, ...] = (
    _f("messageId"), _f("contextId"), _f("taskId"),
    _f("role", conv=convert_role),
    _f("parts", "parts", "content", _PARTS),
    _f("metadata"), _f("extensions"),
    _f("referenceTaskIds", r03=None),
)
_STATUS: tuple[Field, ...] = (
    _f("state", conv=convert_state),
    _f("message", r03=("message", "update"), conv=convert_message),
    _f("timestamp"),
)
_ARTIFACT: tuple[Field, ...] = (
    _f("artifactId"), _f("name"), _f("description"),
    _f("parts", conv=_PARTS),
    _f("metadata"), _f("extensions"),
)
_TASK: tuple[Field, ...] = (
    _f("id"), _f("contextId"),
    _f("status", conv=convert_status),
    _f("artifacts", conv=_each(convert_artifact)),
    _f("history", conv=_each(convert_message)),
    _f("metadata"),
)


# ---------------------------------------------------------------------------------------------
# docs/bridge.md §1.6 Stream events and unary results

_STATUS_UPDATE: tuple[Field, ...] = (
    _f("taskId"), _f("contextId"), _f("status", conv=convert_status), _f("metadata"),
)
_ARTIFACT_UPDATE: tuple[Field, ...] = (
    _f("taskId"), _f("contextId"), _f("artifact", conv=convert_artifact),
    _f("append"), _f("lastChunk"), _f("metadata"),
)


def _ends_stream(status: Any, src: Dialect) -> bool:
    """True when ``status.state`` is terminal or interrupted, however ``src`` spells it
    (states.py folds the spelling; an unknown state is neither)."""
    state = status.get("state") if isinstance(status, dict) else None
    try:
        canonical = normalize_state(state, _SPELLING[src]).state
    except UnknownStateError:
        return False
    return canonical.is_terminal or canonical.is_interrupted


def convert_status_update(event: Any, src: Dialect, dst: Dialect) -> Any:
    """One TaskStatusUpdateEvent (docs/bridge.md §1.6). To v0.3, ``final`` is ``true`` exactly
    when the state is terminal or interrupted (a v1.0 stream ends there); between the two
    v0.3 dialects the source's ``final`` is kept (PROTO03's absent ``final`` is ``false``);
    to v1.0 it is dropped."""
    out = _walk(event, src, dst, _STATUS_UPDATE, "status-update")
    if out is event or dst is V1:
        return out
    if src is V1:
        out["final"] = _ends_stream(event.get("status"), src)
    else:
        out["final"] = event.get("final", False)
    return out


def convert_artifact_update(event: Any, src: Dialect, dst: Dialect) -> Any:
    """One TaskArtifactUpdateEvent (docs/bridge.md §1.6); ``append`` and ``lastChunk`` are
    carried as sent (absent stays absent: false in every dialect)."""
    return _walk(event, src, dst, _ARTIFACT_UPDATE, "artifact-update")


# The payload kinds: (StreamResponse member names per dialect — first written, all read —,
# v0.3 JSON-RPC kind, converter). PROTO03's `msg` has the JSON name `message`.
_PAYLOADS: dict[str, tuple[dict[Dialect, tuple[str, ...]], str, Conv]] = {
    "task": ({V1: ("task",), R03: ("task",)}, "task", convert_task),
    "message": ({V1: ("message",), R03: ("message", "msg")}, "message", convert_message),
    "statusUpdate": ({V1: ("statusUpdate",), R03: ("statusUpdate",)}, "status-update",
                     convert_status_update),
    "artifactUpdate": ({V1: ("artifactUpdate",), R03: ("artifactUpdate",)}, "artifact-update",
                       convert_artifact_update),
}
_BY_KIND = {kind: name for name, (_, kind, _) in _PAYLOADS.items()}
_SEND_KINDS = ("task", "message")


def _payload(result: Any, src: Dialect, dst: Dialect, kinds: tuple[str, ...]) -> Any:
    """A SendMessageResponse or StreamResponse (one of ``kinds``) from ``src`` to ``dst``: the
    v1.0 / PROTO03 one-member wrapper, or v0.3 JSON-RPC's bare ``kind``-tagged object."""
    if src is dst or not isinstance(result, dict):
        return result
    found: list[tuple[str, Any]] = []
    if src is J03:
        kind = result.get("kind")
        name = _BY_KIND.get(kind) if isinstance(kind, str) else None
        if name is not None and name in kinds:
            found.append((name, result))
    else:
        for name in kinds:
            members = [m for m in _PAYLOADS[name][0][src] if m in result]
            found += [(name, result[m]) for m in members[:1]]
    if len(found) != 1:
        return result  # no payload, or two at once: not this shape
    name, inner = found[0]
    wrappers, _, conv = _PAYLOADS[name]
    converted = conv(inner, src, dst)
    return converted if dst is J03 else {wrappers[dst][0]: converted}


def convert_event(result: Any, src: Dialect, dst: Dialect) -> Any:
    """One stream event's payload — a JSON-RPC ``result`` or a REST ``data:`` body
    (docs/bridge.md §1.6).

    v1.0 and v0.3 REST: a StreamResponse ``{task | message | statusUpdate | artifactUpdate}``
    (PROTO03's ``msg`` is read too); v0.3 JSON-RPC: the bare Task, Message, ``status-update``
    or ``artifact-update`` object. Anything else is returned unchanged. Never raises.
    """
    return _payload(result, src, dst, tuple(_PAYLOADS))


# ---------------------------------------------------------------------------------------------
# docs/bridge.md §1.7 Push notification configs

_TASK_NAME = re.compile(r"tasks/([^/]+)")
_CONFIG_NAME = re.compile(r"tasks/([^/]+)/pushNotificationConfigs/([^/]*)")
# PushNotificationConfig: the same members in v0.3 JSON-RPC and PROTO03.
_PNC = ("id", "url", "token")


def _task_name(task_id: Any) -> Any:
    return f"tasks/{task_id}" if isinstance(task_id, str) else task_id


def _config_name(task_id: Any, config_id: Any) -> str | None:
    if not isinstance(task_id, str):
        return None
    return f"tasks/{task_id}/pushNotificationConfigs/{config_id if isinstance(config_id, str) else ''}"


def _ids_of_name(name: Any) -> tuple[str | None, str | None]:
    """``(taskId, configId)`` of a PROTO03 resource name (``tasks/{id}`` or
    ``tasks/{id}/pushNotificationConfigs/{configId}``), ``None`` for what it lacks."""
    if not isinstance(name, str):
        return None, None
    m = _CONFIG_NAME.fullmatch(name)
    if m:
        return m[1], m[2] or None
    m = _TASK_NAME.fullmatch(name)
    return (m[1], None) if m else (None, None)


def _pnc_to_v1(pnc: dict[str, Any]) -> dict[str, Any]:
    """A v0.3 PushNotificationConfig as the members of a v1.0 TaskPushNotificationConfig."""
    out = {k: pnc[k] for k in _PNC if k in pnc}
    auth = pnc.get("authentication")
    if isinstance(auth, dict):
        v1_auth: dict[str, Any] = {}
        schemes = auth.get("schemes")
        if isinstance(schemes, list) and schemes:
            v1_auth["scheme"] = schemes[0]  # v1.0 has one scheme: the rest are lost
        if "credentials" in auth:
            v1_auth["credentials"] = auth["credentials"]
        out["authentication"] = v1_auth
    elif "authentication" in pnc:
        out["authentication"] = auth
    return out


def _pnc_from_v1(config: dict[str, Any]) -> dict[str, Any]:
    """The v0.3 PushNotificationConfig of a v1.0 TaskPushNotificationConfig (tenant and
    taskId are not part of it)."""
    out = {k: config[k] for k in _PNC if k in config}
    auth = config.get("authentication")
    if isinstance(auth, dict):
        v03_auth: dict[str, Any] = {"schemes": [auth["scheme"]] if "scheme" in auth else []}
        if "credentials" in auth:
            v03_auth["credentials"] = auth["credentials"]
        out["authentication"] = v03_auth
    elif "authentication" in config:
        out["authentication"] = auth
    return out


def _push_to_v1(config: dict[str, Any], src: Dialect) -> dict[str, Any] | None:
    """A v0.3 TaskPushNotificationConfig as v1.0's flat one, or ``None`` (not that shape)."""
    pnc = config.get("pushNotificationConfig")
    if not isinstance(pnc, dict):
        return None
    flat = _pnc_to_v1(pnc)
    if src is J03:
        task_id = config.get("taskId")
    else:
        task_id, config_id = _ids_of_name(config.get("name"))
        if "id" not in flat and config_id is not None:
            flat["id"] = config_id
    out = {} if task_id is None else {"taskId": task_id}
    if "id" in flat:
        out["id"] = flat.pop("id")
    return {**out, **flat}


def _push_from_v1(config: dict[str, Any], dst: Dialect) -> dict[str, Any]:
    if dst is J03:
        out: dict[str, Any] = {"taskId": config["taskId"]} if "taskId" in config else {}
    else:
        name = _config_name(config.get("taskId"), config.get("id"))
        out = {} if name is None else {"name": name}
    out["pushNotificationConfig"] = _pnc_from_v1(config)
    return out


def convert_push_config(config: Any, src: Dialect, dst: Dialect) -> Any:
    """One TaskPushNotificationConfig (docs/bridge.md §1.7): v1.0 flat ``{tenant?, id, taskId,
    url, token, authentication{scheme, credentials}}`` ↔ v0.3 JSON-RPC ``{taskId,
    pushNotificationConfig{id, url, token, authentication{schemes[], credentials}}}`` ↔
    PROTO03 ``{name: "tasks/{taskId}/pushNotificationConfigs/{id}", pushNotificationConfig}``.
    Not that shape: returned unchanged."""
    if src is dst or not isinstance(config, dict):
        return config
    v1 = config if src is V1 else _push_to_v1(config, src)
    if v1 is None:
        return config
    return v1 if dst is V1 else _push_from_v1(v1, dst)


def _push_list(result: Any, src: Dialect, dst: Dialect) -> Any:
    """ListTaskPushNotificationConfigs' result: v1.0 and PROTO03 ``{configs[], nextPageToken}``
    ↔ v0.3 JSON-RPC's bare list (no page token: lost)."""
    if src is dst:
        return result
    if src is J03:
        configs = result
    elif isinstance(result, dict) and isinstance(result.get("configs", []), list):
        configs = result.get("configs", [])
    else:
        return result
    if not isinstance(configs, list):
        return result
    converted = [convert_push_config(c, src, dst) for c in configs]
    if dst is J03:
        return converted
    out: dict[str, Any] = {"configs": converted}
    if isinstance(result, dict) and "nextPageToken" in result:
        out["nextPageToken"] = result["nextPageToken"]
    return out


# ---------------------------------------------------------------------------------------------
# Unary results

def _list_tasks(result: Any, src: Dialect, dst: Dialect) -> Any:
    if src is dst or not isinstance(result, dict):
        return result
    return {**result, **({"tasks": _each(convert_task)(result["tasks"], src, dst)}
                         if "tasks" in result else {})}


def _unchanged(result: Any, src: Dialect, dst: Dialect) -> Any:
    return result


_RESULTS: dict[Operation, Conv] = {
    Operation.SEND: lambda r, s, d: _payload(r, s, d, _SEND_KINDS),
    Operation.STREAM: convert_event,
    Operation.SUBSCRIBE: convert_event,
    Operation.GET: convert_task,
    Operation.CANCEL: convert_task,
    Operation.LIST: _list_tasks,
    Operation.PUSH_CREATE: convert_push_config,
    Operation.PUSH_GET: convert_push_config,
    Operation.PUSH_LIST: _push_list,
    Operation.PUSH_DELETE: _unchanged,
    Operation.EXTENDED_CARD: _unchanged,
}


def convert_result(op: Operation, result: Any, src: Dialect, dst: Dialect) -> Any:
    """The unary result of ``op`` from ``src`` to ``dst`` (docs/bridge.md §1.6, §1.7).

    SendMessage: v1.0 ``{"task"|"message": …}``, v0.3 JSON-RPC the bare ``kind``-tagged Task or
    Message, PROTO03 ``{"task"|"message": …}`` (``msg`` read too). GetTask / CancelTask: the
    bare Task. Push configs: :func:`convert_push_config`; their list: v1.0 / PROTO03
    ``{configs, nextPageToken}`` ↔ v0.3 JSON-RPC's bare list. Delete (``null``) and the
    extended card (converted elsewhere) are returned unchanged. Never raises.
    """
    return _RESULTS[op](result, src, dst)


# ---------------------------------------------------------------------------------------------
# docs/bridge.md §1.8 The send configuration

def _absent_blocking(src: Dialect, has_configuration: bool) -> bool:
    """What an absent blocking flag means in ``src`` (docs/bridge.md §1.8): v1.0 blocks
    (``returnImmediately`` false); v0.3 JSON-RPC blocks (both SDK servers); v0.3 REST blocks
    without a configuration (@a2a-js/sdk 0.3; a2a-sdk clients always send one) and returns
    immediately with one (proto3: an absent bool is false; both SDK servers)."""
    return src is not R03 or not has_configuration


def _blocking(configuration: Any, src: Dialect) -> bool:
    """Whether the ``src`` send configuration asks for a blocking send.

    Raises:
        BridgeError: -32602 when the flag is present but not a boolean (its meaning is not
            known, so it cannot be turned into the other version's opposite flag).
    """
    name = "returnImmediately" if src is V1 else "blocking"
    if not isinstance(configuration, dict) or name not in configuration:
        return _absent_blocking(src, isinstance(configuration, dict))
    flag = configuration[name]
    if not isinstance(flag, bool):
        raise BridgeError(jsonrpc.INVALID_PARAMS,
                          f"Invalid params: configuration.{name} must be a boolean")
    return not flag if src is V1 else flag


def _inline_push(value: Any, src: Dialect, dst: Dialect) -> Any:
    """The push config given at send time: v1.0 ``taskPushNotificationConfig`` (flat) ↔ v0.3
    ``pushNotificationConfig`` / PROTO03 ``pushNotification`` (a PushNotificationConfig)."""
    if src is dst or not isinstance(value, dict):
        return value
    if src is not V1:
        value = _pnc_to_v1(value)
    return value if dst is V1 else _pnc_from_v1(value)


_CONFIGURATION: tuple[Field, ...] = (
    _f("acceptedOutputModes"),
    _f("taskPushNotificationConfig", "pushNotificationConfig", "pushNotification", _inline_push),
    _f("historyLength"),
)


def convert_configuration(configuration: Any, src: Dialect, dst: Dialect) -> dict[str, Any]:
    """A SendMessageConfiguration (docs/bridge.md §1.8), always with the blocking flag written
    for ``dst`` (``returnImmediately`` for v1.0, ``blocking`` for v0.3) as ``src`` means it —
    an absent flag included. An absent configuration gives one holding only that flag.
    PROTO03's ``historyLength`` of 0 is its absent value, so it is left out.

    Raises:
        BridgeError: a blocking flag that is not a boolean (:func:`_blocking`).
    """
    if src is dst:
        return configuration if isinstance(configuration, dict) else {}
    blocking = _blocking(configuration, src)
    out = _walk(configuration, src, dst, _CONFIGURATION) if isinstance(configuration, dict) else {}
    if src is R03 and out.get("historyLength") == 0:
        del out["historyLength"]
    if dst is V1:
        out["returnImmediately"] = not blocking
    else:
        out["blocking"] = blocking
    return out


# ---------------------------------------------------------------------------------------------
# docs/bridge.md §1.9 Requests

def _send_params(params: dict[str, Any], src: Dialect, dst: Dialect) -> dict[str, Any]:
    """SendMessage / SendStreamingMessage: ``{tenant?, message, configuration, metadata}``;
    PROTO03's ``message`` is the JSON name of its field ``request`` (read too)."""
    out: dict[str, Any] = {}
    for name in ("message", "request") if src is R03 else ("message",):
        if name in params:
            out["message"] = convert_message(params[name], src, dst)
            break
    out["configuration"] = convert_configuration(params.get("configuration"), src, dst)
    if "metadata" in params:
        out["metadata"] = params["metadata"]
    return out


def _ids(params: dict[str, Any], src: Dialect, op: Operation) -> tuple[Any, Any]:
    """``(taskId, configId)`` of a request: v1.0 ``id`` (``taskId`` and ``id`` for push
    configs), v0.3 JSON-RPC ``id`` and ``pushNotificationConfigId``, PROTO03 resource names
    (or, for a REST request given as its path's ids, what :func:`gateway.a2a.rest.request_params`
    makes: ``id``, or ``taskId`` and ``id``)."""
    push = op in _PUSH_OPS
    if src is J03:
        return params.get("id"), params.get("pushNotificationConfigId")
    if src is R03:
        name = params.get("parent" if op is Operation.PUSH_LIST else "name")
        if name is not None:
            return _ids_of_name(name)
    if push:
        return params.get("taskId"), params.get("id")
    return params.get("id"), None


_PUSH_OPS = (Operation.PUSH_GET, Operation.PUSH_LIST, Operation.PUSH_DELETE)


def _id_params(op: Operation, params: dict[str, Any], src: Dialect, dst: Dialect) -> dict[str, Any]:
    """GetTask, CancelTask, SubscribeToTask and the push config get / list / delete."""
    task_id, config_id = _ids(params, src, op)
    out: dict[str, Any] = {}
    if dst is R03:
        if op is Operation.PUSH_LIST:
            if task_id is not None:
                out["parent"] = _task_name(task_id)
        elif op in _PUSH_OPS:
            if config_id is None:
                raise BridgeError(jsonrpc.INVALID_PARAMS, "Invalid params: v0.3 REST names a push "
                                  "notification config by its id, and the request has none")
            name = _config_name(task_id, config_id)
            if name is not None:
                out["name"] = name
        elif task_id is not None:
            out["name"] = _task_name(task_id)
    elif dst is J03:
        if task_id is not None:
            out["id"] = task_id
        if config_id is not None:
            out["pushNotificationConfigId"] = config_id
    elif op in _PUSH_OPS:
        out.update({k: v for k, v in (("taskId", task_id), ("id", config_id)) if v is not None})
    elif task_id is not None:
        out["id"] = task_id
    for name in _ID_EXTRAS[op]:
        if name in params and name in _ID_EXTRAS_IN[dst]:
            out[name] = params[name]
    if op is Operation.GET and src is R03 and out.get("historyLength") == 0:
        del out["historyLength"]  # PROTO03's int32: 0 is its absent value
    return out


# Members a request may carry beside its ids, and which dialect defines them.
_ID_EXTRAS: dict[Operation, tuple[str, ...]] = {
    Operation.GET: ("historyLength", "metadata"),
    Operation.CANCEL: ("metadata",),
    Operation.SUBSCRIBE: ("metadata",),
    Operation.PUSH_GET: ("metadata",),
    Operation.PUSH_LIST: ("pageSize", "pageToken", "metadata"),
    Operation.PUSH_DELETE: ("metadata",),
}
_ID_EXTRAS_IN: dict[Dialect, frozenset[str]] = {
    V1: frozenset({"historyLength", "metadata", "pageSize", "pageToken"}),
    J03: frozenset({"historyLength", "metadata"}),
    R03: frozenset({"historyLength", "pageSize", "pageToken"}),
}


def _metadata_in(op: Operation, dst: Dialect) -> bool:
    """v1.0 keeps request metadata only on CancelTask (PROTO); v0.3 JSON-RPC on every TaskIdParams."""
    return dst is J03 or (dst is V1 and op is Operation.CANCEL)


def _push_create_params(params: dict[str, Any], src: Dialect, dst: Dialect) -> dict[str, Any]:
    """CreateTaskPushNotificationConfig: v1.0 the flat config, v0.3 JSON-RPC the nested one,
    PROTO03 ``{parent, configId, config{name, pushNotificationConfig}}``."""
    if src is R03:
        config = params.get("config")
        if not isinstance(config, dict):
            return {}
        v1 = _push_to_v1(config, src) or {}
        parent_task, _ = _ids_of_name(params.get("parent"))
        if parent_task is not None:
            v1 = {"taskId": parent_task, **{k: v for k, v in v1.items() if k != "taskId"}}
        if "id" not in v1 and isinstance(params.get("configId"), str) and params["configId"]:
            v1["id"] = params["configId"]
    else:
        v1 = params if src is V1 else (_push_to_v1(params, src) or {})
    if dst is V1:
        return {k: v for k, v in v1.items() if k != "tenant"}
    if dst is J03:
        return _push_from_v1(v1, dst)
    out: dict[str, Any] = {}
    if "taskId" in v1:
        out["parent"] = _task_name(v1["taskId"])
    if "id" in v1:
        out["configId"] = v1["id"]
    out["config"] = _push_from_v1(v1, dst)
    return out


def convert_params(op: Operation, params: Any, src: Dialect, dst: Dialect) -> dict[str, Any]:
    """The request of ``op`` from ``src`` to ``dst`` (docs/bridge.md §1.9): JSON-RPC ``params``
    or the REST JSON body (send, stream, push create), else the equivalent params dict (v1.0
    ``{id}`` / ``{taskId, id}``; PROTO03 requests with resource names, ``{name: "tasks/{id}"}``).
    An absent ``params`` reads as ``{}``. v1.0's ``tenant`` is dropped; the blocking flag is
    always written (docs/bridge.md §1.8).

    Raises:
        BridgeError: -32004 for ListTasks to v0.3 (neither v0.3 binding has it); -32602 for a
            blocking flag that is not a boolean, or a v0.3 REST push config request without
            a config id.
    """
    body = params if isinstance(params, dict) else {}
    if src is dst:
        return body
    if op is Operation.LIST:
        side = "v0.3 JSON-RPC" if J03 in (src, dst) else "v0.3 REST"
        raise BridgeError(jsonrpc.UNSUPPORTED_OPERATION,
                          f"Unsupported operation: {side} has no ListTasks (A2A v1.0 added it)")
    if op in (Operation.SEND, Operation.STREAM):
        return _send_params(body, src, dst)
    if op is Operation.PUSH_CREATE:
        return _push_create_params(body, src, dst)
    if op is Operation.EXTENDED_CARD:
        return {}
    out = _id_params(op, body, src, dst)
    if not _metadata_in(op, dst):
        out.pop("metadata", None)
    return out


# ---------------------------------------------------------------------------------------------
# docs/bridge.md §1.10 Errors

def _error_info(data: Any) -> dict[str, Any] | None:
    if isinstance(data, list):
        for item in data:
            if isinstance(item, dict) and item.get("@type") == jsonrpc.ERROR_INFO_TYPE:
                return item
    return None


def convert_error(error: dict[str, Any], src: Dialect, dst: Dialect) -> dict[str, Any]:
    """A JSON-RPC error object ``{code, message, data?}`` (docs/bridge.md §1.10).

    ``code`` and ``message`` are kept as they are — -32008, -32009 and the v1.1 draft's -32010
    too, which v0.3 does not define: a v0.3 client reads them as a server error with its message. v1.0 → v0.3: ``data``
    becomes the ``ErrorInfo``'s ``metadata`` (left out when there is none); other ``@type``
    details are lost. v0.3 → v1.0: ``data`` becomes one ``ErrorInfo`` with the code's reason
    (``gateway.a2a.rest.REASONS``), its ``metadata`` the v0.3 ``data`` when that is an object
    of strings; any other v0.3 ``data`` is lost. Not an object: returned unchanged.
    """
    if src is dst or not isinstance(error, dict) or (src in _V03 and dst in _V03):
        return error
    out: dict[str, Any] = {k: error[k] for k in ("code", "message") if k in error}
    data = error.get("data")
    if dst is V1:
        code = error.get("code")
        reason = REASONS.get(code) if type(code) is int else None
        if reason is not None:
            info: dict[str, Any] = {"@type": jsonrpc.ERROR_INFO_TYPE, "reason": reason,
                                    "domain": jsonrpc.ERROR_DOMAIN}
            if isinstance(data, dict) and data and all(isinstance(v, str) for v in data.values()):
                info["metadata"] = data
            out["data"] = [info]
        return out
    info_in = _error_info(data)
    metadata = info_in.get("metadata") if info_in is not None else None
    if isinstance(metadata, dict) and metadata:
        out["data"] = metadata
    return out
