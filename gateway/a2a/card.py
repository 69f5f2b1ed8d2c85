"""Agent Card knowledge: validation, ETags, URL rewriting for gateway exposure. Pure.

Implements docs/protocol.md §4 (v1.0 and v0.3 card shapes, caching, the hybrid card the SDK serves)
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


def _rewrite_url(url: str, upstream_path: str, public_base: str) -> str:
    """Map one advertised URL to the gateway: public base + what follows the upstream's path.

    Only the path of the advertised URL is used; its scheme and host (often ``localhost``,
    ``0.0.0.0`` or a pod address) are discarded (F10, F11).
    """
    path = urlsplit(url).path or "/"
    base = upstream_path.rstrip("/")
    if base and (path == base or path.startswith(base + "/")):
        rest = path[len(base):]
    else:
        rest = path
    return public_base.rstrip("/") + "/" + rest.lstrip("/")


def rewrite_card(doc: dict[str, Any], *, upstream_url: str, public_base: str) -> dict[str, Any]:
    """A copy of ``doc`` whose every interface URL points at the gateway.

    Rewrites v1.0 ``supportedInterfaces[].url`` (HTTP bindings only: a gRPC ``host:port`` is
    left alone) and v0.3 ``url`` and ``additionalInterfaces[].url``; every other member is
    unchanged. ``signatures`` are removed: they would no longer match (SPEC §8.4).

    Args:
        doc: a valid card.
        upstream_url: the upstream's configured base URL (``http://worker:8080/a2a/tock/``).
        public_base: the gateway's public URL for this mount (``https://gw/a2a/tick/``).
    """
    upstream_path = urlsplit(upstream_url).path
    out = {k: v for k, v in doc.items() if k != "signatures"}

    def fix(iface: Any) -> Any:
        if not isinstance(iface, dict) or not isinstance(iface.get("url"), str):
            return iface
        binding = str(iface.get("protocolBinding") or iface.get("transport") or "")
        if binding.upper() == "GRPC":
            return iface
        return {**iface, "url": _rewrite_url(iface["url"], upstream_path, public_base)}

    if isinstance(doc.get("supportedInterfaces"), list):
        out["supportedInterfaces"] = [fix(i) for i in doc["supportedInterfaces"]]
    if isinstance(doc.get("additionalInterfaces"), list):
        out["additionalInterfaces"] = [fix(i) for i in doc["additionalInterfaces"]]
    if isinstance(doc.get("url"), str):
        transport = str(doc.get("preferredTransport") or "JSONRPC")
        if transport.upper() != "GRPC":
            out["url"] = _rewrite_url(doc["url"], upstream_path, public_base)
    return out
