"""Agent Card knowledge: validation, ETags, URL rewriting for gateway exposure. Pure.

Implements docs/protocol.md §4 (v1.0 and v0.3 card shapes, caching, the hybrid card the SDK serves;
§4.5 what the gateway serves: only the bindings it guards, and when a card counts as signed)
and §11 pitfall 12, docs/field-cases.md F10 (rewrite behind a path-rewriting route, no doubled
segment, v1.0 cards without a top-level ``url``) and F11 (card hosts are never used for
routing).

A card says what a worker *can* do (skills, capabilities); it never says what state a task is
in — nothing here touches task state.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlsplit

import orjson

WELL_KNOWN_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
HEARTBEAT_EXTENSION = "urn:a2a-gateway:heartbeat:v1"
"""Card extension a worker may declare in ``capabilities.extensions[]`` with
``params.intervalSeconds`` to set the heartbeat interval the gateway expects from it."""

_V10_REQUIRED = ("name", "description", "supportedInterfaces", "version", "capabilities",
                 "defaultInputModes", "defaultOutputModes", "skills")
_V03_REQUIRED = ("protocolVersion", "name", "description", "url", "version", "capabilities",
                 "defaultInputModes", "defaultOutputModes", "skills")


def card_problem(doc: object) -> str | None:
    """Why ``doc`` is not a usable Agent Card, or ``None`` when it is one.

    Valid means: a JSON object with every required member of v1.0 (docs/protocol.md §4.2; the
    interfaces each with ``url``, ``protocolBinding`` and ``protocolVersion``) or of v0.3
    (§4.3), ``capabilities`` an object and ``skills`` a list.
    """
    if not isinstance(doc, dict):
        return "not a JSON object"
    missing_v10 = [k for k in _V10_REQUIRED if k not in doc]
    missing_v03 = [k for k in _V03_REQUIRED if k not in doc]
    if missing_v10 and missing_v03:
        shortest = min(missing_v10, missing_v03, key=len)
        return "missing " + ", ".join(shortest)
    if not isinstance(doc.get("capabilities"), dict):
        return "capabilities is not an object"
    if not isinstance(doc.get("skills"), list):
        return "skills is not a list"
    if not missing_v10:
        interfaces = doc["supportedInterfaces"]
        if not isinstance(interfaces, list) or not interfaces:
            return "supportedInterfaces is empty"
        for i, iface in enumerate(interfaces):
            if not isinstance(iface, dict) or not all(
                isinstance(iface.get(k), str) for k in ("url", "protocolBinding", "protocolVersion")
            ):
                return f"supportedInterfaces[{i}] lacks url, protocolBinding or protocolVersion"
    return None


def content_etag(body: bytes) -> str:
    """A strong ETag from a hash of the bytes (the served card's own ETag)."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def canonical_etag(doc: dict[str, Any]) -> str:
    """An ETag derived from the canonical JSON of a card (keys sorted), for workers that send
    none — so every card has an ETag and equal cards have equal ETags."""
    return content_etag(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))


def skill_ids(doc: dict[str, Any]) -> set[str]:
    """The ``id`` of every advertised skill."""
    return {s["id"] for s in doc.get("skills", []) if isinstance(s, dict) and isinstance(s.get("id"), str)}


def capability(doc: dict[str, Any], name: str) -> bool:
    """A boolean capability (``streaming``, ``pushNotifications``); absent means false."""
    caps = doc.get("capabilities")
    return isinstance(caps, dict) and caps.get(name) is True


def heartbeat_interval(doc: dict[str, Any]) -> float | None:
    """Seconds from the card's :data:`HEARTBEAT_EXTENSION` declaration, if any (> 0)."""
    caps = doc.get("capabilities")
    exts = caps.get("extensions") if isinstance(caps, dict) else None
    for ext in exts if isinstance(exts, list) else []:
        if isinstance(ext, dict) and ext.get("uri") == HEARTBEAT_EXTENSION:
            params = ext.get("params")
            value = params.get("intervalSeconds") if isinstance(params, dict) else None
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                return float(value)
    return None


GUARDED_BINDINGS = ("JSONRPC", "HTTP+JSON")
"""The bindings the gateway guards (compared case-insensitively); it does not proxy gRPC, and a
custom binding URI is nothing it knows (docs/protocol.md §1.1, §4.5)."""


def is_signed(doc: dict[str, Any]) -> bool:
    """True when the card carries at least one signature (a non-empty ``signatures`` list).

    An absent, ``null`` or empty ``signatures`` member is an unsigned card: @a2a-js/sdk 1.3
    workers always send ``"signatures": []`` (docs/protocol.md §4.5).
    """
    signatures = doc.get("signatures")
    return isinstance(signatures, list) and len(signatures) > 0


def credential_headers(doc: dict[str, Any]) -> frozenset[str]:
    """The request headers, lower-case, in which the card's ``securitySchemes`` say clients send
    their credentials (docs/protocol.md §4.2, §4.3): an API key's ``name`` when it goes in a header (v1.0
    ``apiKeySecurityScheme.location``, v0.3 ``in``), ``cookie`` when in a cookie, and
    ``authorization`` for HTTP, OAuth 2.0 and OpenID Connect schemes. Mutual TLS and anything
    unreadable name none; an API key in the query string names none either."""
    schemes = doc.get("securitySchemes")
    out: set[str] = set()
    for scheme in schemes.values() if isinstance(schemes, dict) else ():
        if not isinstance(scheme, dict):
            continue
        inner: Any
        if "type" in scheme:  # v0.3: {"type": "apiKey", "in": "header", "name": ...}
            kind, inner, where = scheme.get("type"), scheme, scheme.get("in")
        else:  # v1.0: {"apiKeySecurityScheme": {"location": "header", "name": ...}}
            [(kind, inner)] = scheme.items() if len(scheme) == 1 else [(None, None)]
            where = inner.get("location") if isinstance(inner, dict) else None
        if kind in ("apiKey", "apiKeySecurityScheme") and isinstance(inner, dict):
            name = inner.get("name")
            if str(where).lower() == "header" and isinstance(name, str) and name:
                out.add(name.lower())
            elif str(where).lower() == "cookie":
                out.add("cookie")
        elif kind in ("http", "oauth2", "openIdConnect", "httpAuthSecurityScheme",
                      "oauth2SecurityScheme", "openIdConnectSecurityScheme"):
            out.add("authorization")
    return frozenset(out)


def is_guarded(binding: object) -> bool:
    """Whether the gateway guards a ``protocolBinding`` / ``transport`` value."""
    return isinstance(binding, str) and binding.upper() in GUARDED_BINDINGS


def _binding(iface: object, key: str) -> object:
    return iface.get(key) if isinstance(iface, dict) else None


def _top_level_transport(doc: dict[str, Any]) -> object:
    """The v0.3 ``preferredTransport``; absent or ``null`` means ``JSONRPC`` (TYPES03)."""
    transport = doc.get("preferredTransport")
    return "JSONRPC" if transport is None else transport


def binding_label(binding: object) -> str:
    """A bounded metric label for a binding (docs/architecture.md, convention 10): the core
    ones upper-cased (``GRPC``), ``other`` for a custom URI (the worker's card writes it:
    never a label), ``unspecified`` when the interface names none."""
    if not isinstance(binding, str) or not binding:
        return "unspecified"
    upper = binding.upper()
    return upper if upper in (*GUARDED_BINDINGS, "GRPC") else "other"


def _legacy_version(iface: dict[str, Any]) -> bool:
    version = iface.get("protocolVersion")
    return not version or (isinstance(version, str) and version.startswith("0."))


def drop_unguarded(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` that advertises only interfaces the gateway guards; URLs as written.

    * v1.0 ``supportedInterfaces[]``: entries whose ``protocolBinding`` is not guarded go.
    * v0.3 ``additionalInterfaces[]``: entries whose ``transport`` is not guarded go (the list
      may become empty; it is optional).
    * v0.3 top-level ``url`` / ``preferredTransport`` with an unguarded transport: replaced by
      the first guarded ``additionalInterfaces`` entry, else the first guarded
      ``supportedInterfaces`` entry with a 0.x or empty ``protocolVersion`` (the interface the
      SDK's hybrid card takes its v0.3 members from, docs/protocol.md §4.3).

    A required member is never emptied: when no guarded interface is left to stand in,
    ``supportedInterfaces`` (and the top-level ``url``) stay as the worker wrote them, so the
    card stays valid; :func:`unguarded_interfaces` then still counts them.
    """
    out = dict(doc)
    v10 = doc.get("supportedInterfaces")
    if isinstance(v10, list):
        kept = [i for i in v10 if is_guarded(_binding(i, "protocolBinding"))]
        out["supportedInterfaces"] = kept if kept else list(v10)
    v03 = doc.get("additionalInterfaces")
    if isinstance(v03, list):
        out["additionalInterfaces"] = [i for i in v03 if is_guarded(_binding(i, "transport"))]
    if isinstance(doc.get("url"), str) and not is_guarded(_top_level_transport(doc)):
        stand_in = _stand_in(out)
        if stand_in is not None:
            out["url"], out["preferredTransport"] = stand_in
    return out


def _stand_in(card: dict[str, Any]) -> tuple[str, str] | None:
    """(url, transport) of the first guarded interface that can be the v0.3 main one."""
    for iface in card.get("additionalInterfaces") or []:
        if isinstance(iface, dict) and isinstance(iface.get("url"), str) and is_guarded(iface.get("transport")):
            return iface["url"], iface["transport"]
    supported = card.get("supportedInterfaces")
    for iface in supported if isinstance(supported, list) else []:
        if (isinstance(iface, dict) and isinstance(iface.get("url"), str)
                and is_guarded(iface.get("protocolBinding")) and _legacy_version(iface)):
            return iface["url"], iface["protocolBinding"]
    return None


def unguarded_interfaces(doc: dict[str, Any]) -> dict[str, int]:
    """How many interfaces with an unguarded binding ``doc`` advertises, by
    :func:`binding_label` (sorted). One (binding, url) pair counts once, wherever it appears:
    an SDK hybrid card names its 0.x interfaces again in ``url`` and ``additionalInterfaces``."""
    seen: set[tuple[str, str]] = set()
    lists = (("supportedInterfaces", "protocolBinding"), ("additionalInterfaces", "transport"))
    for member, key in lists:
        entries = doc.get(member)
        for iface in entries if isinstance(entries, list) else []:
            binding = _binding(iface, key)
            if not is_guarded(binding):
                url = iface.get("url") if isinstance(iface, dict) else None
                seen.add((binding_label(binding), url if isinstance(url, str) else ""))
    if isinstance(doc.get("url"), str) and not is_guarded(_top_level_transport(doc)):
        seen.add((binding_label(_top_level_transport(doc)), doc["url"]))
    counts: dict[str, int] = {}
    for label, _ in sorted(seen):
        counts[label] = counts.get(label, 0) + 1
    return counts


def advertised_urls(doc: dict[str, Any]) -> list[str]:
    """Every interface URL the card names (top-level ``url`` first), without repeats."""
    urls = [doc.get("url")]
    for member in ("supportedInterfaces", "additionalInterfaces"):
        entries = doc.get(member)
        urls += [i.get("url") for i in entries if isinstance(i, dict)] if isinstance(entries, list) else []
    return list(dict.fromkeys(u for u in urls if isinstance(u, str)))


def _below(url: str, upstream_path: str) -> str:
    """The path of an advertised URL below the upstream's own path (the whole path when it is
    not below it); its scheme and host are never used (F11)."""
    path = urlsplit(url).path or "/"
    base = upstream_path.rstrip("/")
    if base and (path == base or path.startswith(base + "/")):
        return path[len(base):]
    return path


def _rewrite_url(url: str, upstream_path: str, public_base: str) -> str:
    """Map one advertised URL to the gateway: public base + what follows the upstream's path.

    Only the path of the advertised URL is used; its scheme and host (often ``localhost``,
    ``0.0.0.0`` or a pod address) are discarded (F10, F11).
    """
    return public_base.rstrip("/") + "/" + _below(url, upstream_path).lstrip("/")


def jsonrpc_paths(doc: dict[str, Any], upstream_url: str) -> frozenset[str]:
    """The paths below the mount at which the card advertises JSON-RPC (v1.0
    ``supportedInterfaces`` with ``protocolBinding`` JSONRPC, the v0.3 ``url`` when its
    ``preferredTransport`` is JSONRPC or absent, v0.3 ``additionalInterfaces``), without a
    trailing ``/`` and in lower case (``""`` for the mount itself): the served card sends
    clients there, so the gateway guards them as JSON-RPC endpoints whatever
    ``jsonrpc_path`` says."""
    upstream_path = urlsplit(upstream_url).path
    urls: list[object] = []
    if str(_top_level_transport(doc)).upper() == "JSONRPC":
        urls.append(doc.get("url"))
    for member, key in (("supportedInterfaces", "protocolBinding"), ("additionalInterfaces", "transport")):
        entries = doc.get(member)
        for iface in entries if isinstance(entries, list) else []:
            if isinstance(iface, dict) and str(iface.get(key) or "").upper() == "JSONRPC":
                urls.append(iface.get("url"))
    return frozenset(_below(u, upstream_path).rstrip("/").lower() for u in urls if isinstance(u, str))


def rewrite_card(doc: dict[str, Any], *, upstream_url: str, public_base: str,
                 keep_unguarded: bool = False) -> dict[str, Any]:
    """A copy of ``doc`` that advertises the gateway: every guarded interface URL points at it.

    Unguarded interfaces (gRPC, custom bindings) are left out (:func:`drop_unguarded`) unless
    ``keep_unguarded``; kept ones are passed on as the worker wrote them, URL included. Guarded
    ones are rewritten: v1.0 ``supportedInterfaces[].url``, v0.3 ``url`` (when its
    ``preferredTransport`` is guarded) and ``additionalInterfaces[].url``. A non-empty
    ``signatures`` list is removed (it would no longer match, SPEC §8.4); ``"signatures": []``
    stays (the @a2a-js/sdk card type requires the member), any other value goes. Every other
    member is unchanged. Pure and deterministic: the extended card is rewritten by the same
    function (docs/protocol.md §4.4, §4.5).

    Args:
        doc: a valid card.
        upstream_url: the upstream's configured base URL (``http://worker:8080/a2a/tock/``).
        public_base: the gateway's public URL for this mount (``https://gw/a2a/tick/``).
        keep_unguarded: ``card.unguarded_interfaces: keep``.
    """
    upstream_path = urlsplit(upstream_url).path
    served = doc if keep_unguarded else drop_unguarded(doc)
    out = {k: v for k, v in served.items() if k != "signatures" or v == []}

    def fix(iface: Any, key: str) -> Any:
        if not isinstance(iface, dict) or not isinstance(iface.get("url"), str):
            return iface
        if not is_guarded(iface.get(key)):
            return iface
        return {**iface, "url": _rewrite_url(iface["url"], upstream_path, public_base)}

    if isinstance(served.get("supportedInterfaces"), list):
        out["supportedInterfaces"] = [fix(i, "protocolBinding") for i in served["supportedInterfaces"]]
    if isinstance(served.get("additionalInterfaces"), list):
        out["additionalInterfaces"] = [fix(i, "transport") for i in served["additionalInterfaces"]]
    if isinstance(served.get("url"), str) and is_guarded(_top_level_transport(served)):
        out["url"] = _rewrite_url(served["url"], upstream_path, public_base)
    return out
