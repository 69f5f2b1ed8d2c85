"""What an Agent Card signature covers, and the parts of a signature that are plain data. Pure.

Implements docs/protocol.md §4.2 (``AgentCardSignature``: a JWS over the card without
``signatures``, canonicalized with RFC 8785) and §4.5 (the card the gateway signs again).

SPEC §8.4 signs "the card without ``signatures``, defaults removed, canonicalized with RFC 8785".
What that means on the wire is what the verifiers clients run compute, and both reference SDKs
compute it on the card *as a v1.0 protobuf message*, not on the JSON as served (a2a-sdk 1.3
``a2a/utils/signing.py``: ``MessageToDict`` of the parsed ``AgentCard``; @a2a-js/sdk 1.3
``canonicalizeAgentCard``: ``AgentCard.toJSON(AgentCard.fromJSON(card))``), then both drop
empty strings, lists and objects and serialize with JCS. So:

* members the v1.0 schema (PROTO) does not define are not covered — the v0.3 members of a mixed
  card (``url``, ``preferredTransport``, ``additionalInterfaces``, ``security``, ``type``-tagged
  schemes, …; docs/protocol.md §4.3) and anything else a worker adds;
* a ``bool`` without field presence (``AgentExtension.required``,
  ``AuthorizationCodeOAuthFlow.pkceRequired``) is dropped when ``false``; one with presence
  (``capabilities.streaming``, ``pushNotifications``, ``extendedAgentCard``) is kept;
* ``null`` and empty strings, lists and objects are dropped everywhere,
  ``google.protobuf.Struct`` values (``AgentExtension.params``) included.

:func:`signed_view` is that projection. The two SDKs read one input differently, so a card can have two canonical forms
(:func:`signing_inputs`): a2a-sdk 1.3's card resolver (``client/card_resolver.py``
``parse_agent_card``) *converts* some v0.3 members of a mixed card before its verifier runs —
a ``type``-tagged security scheme replaces its v1.0 wrapper (so a v1.0 OAuth2 flow's
``pkceRequired``, or a ``deviceCode`` flow, which the v0.3 form lacks, is not seen), and
``security`` and ``supportsAuthenticatedExtendedCard`` fill in absent v1.0 members — while the
JS SDK ignores them. The gateway signs each distinct form (one signature each, same key), so
each SDK's verifier finds one that holds; it verifies a worker's signature only over the v1.0
reading, never over the Python resolver's conversion, so whatever it signs again was covered
by the worker's signature.

A card says what a worker *can* do; nothing here touches task state. The cryptography is in
the shell (:mod:`gateway.proxy.signing`).
"""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any

import orjson
import rfc8785

__all__ = [
    "AGENT_CARD_SCHEMA",
    "canonical",
    "card_signatures",
    "protected_header",
    "python_sdk_reading",
    "signed_view",
    "signing_inputs",
    "verification_input",
    "with_signatures",
]

# Schema leaf kinds: a string; a bool without field presence (false is the default, dropped);
# a bool with presence (false kept); a google.protobuf.Struct (any JSON object).
_STR, _BOOL, _OPT_BOOL, _STRUCT = "string", "bool", "optional bool", "struct"


def _list(item: Any) -> tuple[str, Any]:
    return ("list", item)


def _map(value: Any) -> tuple[str, Any]:
    return ("map", value)


_INTERFACE = {"url": _STR, "protocolBinding": _STR, "tenant": _STR, "protocolVersion": _STR}
_REQUIREMENT = {"schemes": _map({"list": _list(_STR)})}
_SCOPES = _map(_STR)
_FLOWS = {
    "authorizationCode": {"authorizationUrl": _STR, "tokenUrl": _STR, "refreshUrl": _STR,
                          "scopes": _SCOPES, "pkceRequired": _BOOL},
    "clientCredentials": {"tokenUrl": _STR, "refreshUrl": _STR, "scopes": _SCOPES},
    "implicit": {"authorizationUrl": _STR, "refreshUrl": _STR, "scopes": _SCOPES},
    "password": {"tokenUrl": _STR, "refreshUrl": _STR, "scopes": _SCOPES},
    "deviceCode": {"deviceAuthorizationUrl": _STR, "tokenUrl": _STR, "refreshUrl": _STR,
                   "scopes": _SCOPES},
}
_SCHEME = {
    "apiKeySecurityScheme": {"description": _STR, "location": _STR, "name": _STR},
    "httpAuthSecurityScheme": {"description": _STR, "scheme": _STR, "bearerFormat": _STR},
    "oauth2SecurityScheme": {"description": _STR, "flows": _FLOWS, "oauth2MetadataUrl": _STR},
    "openIdConnectSecurityScheme": {"description": _STR, "openIdConnectUrl": _STR},
    "mtlsSecurityScheme": {"description": _STR},
}
AGENT_CARD_SCHEMA: dict[str, Any] = {
    "name": _STR,
    "description": _STR,
    "supportedInterfaces": _list(_INTERFACE),
    "provider": {"url": _STR, "organization": _STR},
    "version": _STR,
    "documentationUrl": _STR,
    "capabilities": {
        "streaming": _OPT_BOOL,
        "pushNotifications": _OPT_BOOL,
        "extensions": _list({"uri": _STR, "description": _STR, "required": _BOOL, "params": _STRUCT}),
        "extendedAgentCard": _OPT_BOOL,
    },
    "securitySchemes": _map(_SCHEME),
    "securityRequirements": _list(_REQUIREMENT),
    "defaultInputModes": _list(_STR),
    "defaultOutputModes": _list(_STR),
    "skills": _list({"id": _STR, "name": _STR, "description": _STR, "tags": _list(_STR),
                     "examples": _list(_STR), "inputModes": _list(_STR), "outputModes": _list(_STR),
                     "securityRequirements": _list(_REQUIREMENT)}),
    "signatures": _list({"protected": _STR, "signature": _STR, "header": _STRUCT}),
    "iconUrl": _STR,
}
"""The v1.0 ``AgentCard`` (PROTO, package ``lf.a2a.v1``) as JSON member names: a nested dict is
a message, ``("list", X)`` a repeated field, ``("map", X)`` a map with string keys; leaves are
strings, bools (with or without field presence) and Structs. No AgentCard field is a number or
an enum. ``tests/a2a/test_card_signing.py`` checks it against the SDK's descriptor."""

_DROP = object()  # a value the projection leaves out


class _Undefined(ValueError):
    """A card with no canonical form (an integer beyond 2**53 outside a Struct, nesting deeper
    than JSON allows); its signatures cannot verify."""


def _empty(value: Any) -> bool:
    return value is _DROP or value == "" or value == [] or value == {}


def _struct(value: Any) -> Any:
    """A Struct value as the SDKs see it: numbers are doubles (an integer past 2**53 rounds);
    ``null`` and empty strings, lists and objects dropped."""
    if isinstance(value, dict):
        out = {k: v for k, v in ((k, _struct(v)) for k, v in value.items()) if not _empty(v)}
        return out or _DROP
    if isinstance(value, list):
        items = [v for v in (_struct(v) for v in value) if not _empty(v)]
        return items or _DROP
    if value is None:
        return _DROP
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2 ** 53:
        return float(value)
    return value


def _project(value: Any, schema: Any) -> Any:
    if value is None:
        return _DROP  # ProtoJSON reads null as the field's default
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return value  # a wrong shape is left as it is: no SDK parses it (nothing verifies)
        out = {}
        for key, sub in schema.items():
            if key in value:
                projected = _project(value[key], sub)
                if not _empty(projected):
                    out[key] = projected
        return out or _DROP
    if isinstance(schema, tuple):
        kind, inner = schema
        if kind == "list":
            if not isinstance(value, list):
                return value
            items = [v for v in (_project(v, inner) for v in value) if not _empty(v)]
            return items or _DROP
        if not isinstance(value, dict):
            return value
        entries = {k: v for k, v in ((k, _project(v, inner)) for k, v in value.items())
                   if not _empty(v)}
        return entries or _DROP
    if schema == _STRUCT:
        return _struct(value)
    if schema == _BOOL and value is False:
        return _DROP
    return _DROP if value == "" else value


def signed_view(doc: dict[str, Any]) -> dict[str, Any]:
    """The card as the SDKs' signers and verifiers see it: without ``signatures``, members the
    v1.0 schema does not define left out, ``false`` dropped from bools without field presence,
    ``null`` and empty strings, lists and objects dropped (inside Struct values too). A new
    document; ``doc`` is not modified."""
    view = _project({k: v for k, v in doc.items() if k != "signatures"}, AGENT_CARD_SCHEMA)
    return view if isinstance(view, dict) else {}


def canonical(view: dict[str, Any]) -> bytes:
    """The RFC 8785 (JCS) serialization of ``view`` (UTF-8).

    Raises:
        ValueError: the view has no canonical form (an integer beyond 2**53, a NaN, text that is
            not valid Unicode).
    """
    try:
        return rfc8785.dumps(view)
    except (rfc8785.CanonicalizationError, RecursionError) as exc:
        raise _Undefined(f"no canonical form: {exc}") from None


_LEGACY_SCHEMES = {"apiKey": "apiKeySecurityScheme", "http": "httpAuthSecurityScheme",
                   "oauth2": "oauth2SecurityScheme", "openIdConnect": "openIdConnectSecurityScheme",
                   "mutualTLS": "mtlsSecurityScheme"}


def python_sdk_reading(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` after the legacy-member conversions of a2a-sdk 1.3's card resolver
    (``parse_agent_card``), which run before its verifier sees the card: ``url`` /
    ``preferredTransport`` / ``protocolVersion`` / ``additionalInterfaces`` become
    ``supportedInterfaces`` when it is absent; ``supportsAuthenticatedExtendedCard: true`` sets
    ``capabilities.extendedAgentCard`` when absent; ``security`` (card and skills) fills an absent
    ``securityRequirements``; a ``type``-tagged security scheme is rewritten into its v1.0
    wrapper from its own members (``in`` as ``location``), whatever wrapper it also carried.
    A new document; ``doc`` is not modified."""
    card = copy.deepcopy(doc)
    if card.pop("supportsAuthenticatedExtendedCard", None):
        caps = card.setdefault("capabilities", {})
        if isinstance(caps, dict) and "extendedAgentCard" not in caps:
            caps["extendedAgentCard"] = True
    url = card.pop("url", None)
    transport = card.pop("preferredTransport", "JSONRPC")
    version = card.pop("protocolVersion", "0.3.0")
    extra = card.pop("additionalInterfaces", None) or []
    if "supportedInterfaces" not in card and url:
        card["supportedInterfaces"] = [{"url": url, "protocolBinding": transport, "protocolVersion": version}] + [
            {"url": i.get("url"), "protocolBinding": i.get("transport"), "protocolVersion": version}
            for i in extra if isinstance(i, dict)]
    legacy = card.pop("security", None)
    if "securityRequirements" not in card and isinstance(legacy, list):
        card["securityRequirements"] = _legacy_requirements(legacy)
    for skill in card.get("skills") or []:
        if isinstance(skill, dict):
            legacy = skill.pop("security", None)
            if "securityRequirements" not in skill and isinstance(legacy, list):
                skill["securityRequirements"] = _legacy_requirements(legacy)
    schemes = card.get("securitySchemes")
    for scheme in schemes.values() if isinstance(schemes, dict) else ():
        if isinstance(scheme, dict) and scheme.get("type") in _LEGACY_SCHEMES:
            tag = scheme.pop("type")
            if tag == "apiKey" and "in" in scheme:
                scheme["location"] = scheme.pop("in")
            inner = dict(scheme)
            scheme.clear()
            scheme[_LEGACY_SCHEMES[tag]] = inner
    return card


def _legacy_requirements(legacy: list[Any]) -> list[Any]:
    return [{"schemes": {name: {"list": scopes} for name, scopes in req.items()}}
            for req in legacy if isinstance(req, dict)]


def signing_inputs(doc: dict[str, Any]) -> list[bytes]:
    """The canonical forms a signature of ``doc`` must cover for both SDKs' verifiers to find
    one that holds (one signature each; usually a single form): the v1.0 reading (what
    @a2a-js/sdk 1.3 verifies, and a2a-sdk 1.3 for a card without v0.3 members), then a2a-sdk
    1.3's reading after its resolver's conversions (:func:`python_sdk_reading`) when it differs.

    Raises:
        ValueError: the card has no canonical form.
    """
    forms = [canonical(signed_view(doc)), canonical(signed_view(python_sdk_reading(doc)))]
    return list(dict.fromkeys(forms))


def verification_input(doc: dict[str, Any]) -> bytes:
    """The canonical form a worker's signature of ``doc`` must cover: its v1.0 reading (what
    a2a-sdk 1.3's and @a2a-js/sdk 1.3's signers sign). The Python resolver's conversions are
    never accepted: a signature over them would not cover the v1.0 members they replace.

    Raises:
        ValueError: the card has no canonical form.
    """
    return canonical(signed_view(doc))


def card_signatures(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The card's signature objects (``signatures[]`` entries that are objects)."""
    found = doc.get("signatures")
    return [s for s in found if isinstance(s, dict)] if isinstance(found, list) else []


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def protected_header(signature: dict[str, Any]) -> dict[str, Any] | None:
    """The decoded JWS protected header of a signature object (``alg``, ``typ``, ``kid``,
    optionally ``jku``), or ``None`` when it is not base64url of a JSON object."""
    value = signature.get("protected")
    if not isinstance(value, str) or not value:
        return None
    try:
        header = orjson.loads(_b64decode(value))
    except (binascii.Error, ValueError):
        return None
    return header if isinstance(header, dict) else None


def with_signatures(doc: dict[str, Any], signatures: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``doc`` whose ``signatures`` are exactly ``signatures`` (the member last, as the
    SDKs write it)."""
    out = {k: v for k, v in doc.items() if k != "signatures"}
    out["signatures"] = signatures
    return out
