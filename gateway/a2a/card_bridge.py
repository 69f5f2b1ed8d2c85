"""The Agent Card across protocol versions: which versions and bindings a card speaks, and the
card in the other version's shape. Pure (stdlib only).

Implements docs/bridge.md §2 (the member-by-member mapping and every loss) on top of
docs/protocol.md §4.2 (the v1.0 card), §4.3 (the v0.3 card and the SDK's mixed card) and §4.5
(the bindings the gateway guards: ``JSONRPC`` and ``HTTP+JSON``, compared case-insensitively).

The gateway's version bridge keeps the binding and changes only the protocol version, so a
bridged interface points at the URL of the worker's interface of the same binding. A card that
already speaks the wanted version (the SDK's mixed card speaks both) is never bridged.

A card says what a worker *can* do; nothing here touches task state.
"""

from __future__ import annotations

from typing import Any

from gateway.a2a.version import Binding, ProtocolVersion

__all__ = [
    "CardBridgeError",
    "bridge_card",
    "card_endpoints",
    "card_versions",
    "interface_version",
    "served_card",
    "speaks",
]

_BINDINGS = {"JSONRPC": Binding.JSONRPC, "HTTP+JSON": Binding.REST}
_BINDING_NAMES = {Binding.JSONRPC: "JSONRPC", Binding.REST: "HTTP+JSON"}

V03_CARD_VERSION = "0.3.0"
"""The card-level ``protocolVersion`` of a bridged v0.3 card (TYPES03's default)."""
V10_INTERFACE_VERSION = "1.0"
"""The ``protocolVersion`` of every interface of a bridged v1.0 card (Major.Minor, PROTO)."""
V03_INTERFACE_VERSION = "0.3"
"""The ``protocolVersion`` of a bridged v0.3 interface in ``supportedInterfaces`` (Major.Minor)."""
_INTERFACE_VERSIONS = {ProtocolVersion.V1_0: V10_INTERFACE_VERSION,
                       ProtocolVersion.V0_3: V03_INTERFACE_VERSION}

# Members copied as they are in both directions (same name and shape in v0.3 and v1.0).
_SHARED = ("name", "description", "version", "documentationUrl", "iconUrl",
           "defaultInputModes", "defaultOutputModes")
_SKILL_SHARED = ("id", "name", "description", "tags", "examples", "inputModes", "outputModes")
_EXTENSION = ("uri", "description", "required", "params")

# v0.3 ``type`` tag <-> v1.0 wrapper member of a SecurityScheme, and the members each keeps.
_SCHEME_WRAPPERS = {
    "apiKey": "apiKeySecurityScheme",
    "http": "httpAuthSecurityScheme",
    "oauth2": "oauth2SecurityScheme",
    "openIdConnect": "openIdConnectSecurityScheme",
    "mutualTLS": "mtlsSecurityScheme",
}
_SCHEME_MEMBERS = {
    "apiKey": ("description", "name"),  # plus in <-> location
    "http": ("description", "scheme", "bearerFormat"),
    "oauth2": ("description", "oauth2MetadataUrl"),  # plus flows
    "openIdConnect": ("description", "openIdConnectUrl"),
    "mutualTLS": ("description",),
}
_V03_FLOWS = ("authorizationCode", "clientCredentials", "implicit", "password")
_FLOW_MEMBERS = {
    "authorizationCode": ("authorizationUrl", "tokenUrl", "refreshUrl", "scopes"),
    "clientCredentials": ("tokenUrl", "refreshUrl", "scopes"),
    "implicit": ("authorizationUrl", "refreshUrl", "scopes"),
    "password": ("tokenUrl", "refreshUrl", "scopes"),
}


class CardBridgeError(ValueError):
    """The card cannot be given in the wanted version: it advertises no guarded interface of
    the other version to bridge (e.g. a gRPC-only card, or an interface version neither 0.x nor
    1.x)."""


def interface_version(value: object) -> ProtocolVersion | None:
    """The protocol version a ``protocolVersion`` value names (docs/bridge.md §2).

    ``"0.3"``, ``"0.3.0"``, any ``"0.x"`` → :attr:`ProtocolVersion.V0_3`; ``"1.0"``, ``"1.1"``,
    any ``"1.x"`` → :attr:`ProtocolVersion.V1_0`. Empty, absent (``None``) → ``V0_3``: the SDK
    takes an interface without a version for a legacy one (``to_compat_agent_card``), TYPES03
    defaults the card-level member to ``"0.3.0"``, and docs/protocol.md §5 reads a missing
    version as 0.3. Anything else (``"2.0"``, a non-string) → ``None``: no version the
    gateway speaks.
    """
    if value is None or value == "":
        return ProtocolVersion.V0_3
    if not isinstance(value, str):
        return None
    major = value.strip().split(".")[0]
    if major == "0":
        return ProtocolVersion.V0_3
    if major == "1":
        return ProtocolVersion.V1_0
    return None


def _guarded(binding: object) -> Binding | None:
    return _BINDINGS.get(binding.upper()) if isinstance(binding, str) else None


def _v03_interfaces(card: dict[str, Any]) -> list[tuple[object, object]]:
    """(binding, url) of the v0.3 members, main interface first; ``preferredTransport`` absent
    or ``null`` means ``JSONRPC`` (TYPES03)."""
    if not isinstance(card.get("url"), str):
        return []
    transport = card.get("preferredTransport")
    out: list[tuple[object, object]] = [("JSONRPC" if transport is None else transport, card["url"])]
    extra = card.get("additionalInterfaces")
    for iface in extra if isinstance(extra, list) else []:
        if isinstance(iface, dict):
            out.append((iface.get("transport"), iface.get("url")))
    return out


def card_endpoints(card: dict[str, Any]) -> dict[tuple[ProtocolVersion, Binding], str]:
    """Where the worker serves each (protocol version, guarded binding) its card advertises.

    Read from, in this order: v1.0 ``supportedInterfaces[]`` (each by its own
    ``protocolVersion``, :func:`interface_version`), then the v0.3 members — ``url`` with
    ``preferredTransport``, then ``additionalInterfaces[]``, all of the card-level
    ``protocolVersion`` (absent: 0.3). An SDK mixed card has both; both are read. The first
    interface of a (version, binding) wins; insertion order is the card's order of preference.
    Only ``JSONRPC`` and ``HTTP+JSON`` count (any case); gRPC, custom bindings, interfaces
    without a string ``url`` and versions neither 0.x nor 1.x are skipped.

    Args:
        card: an Agent Card as JSON (any shape; nothing is validated or raised).

    Returns:
        ``{(ProtocolVersion, Binding): url}``, URLs as written in the card.
    """
    out: dict[tuple[ProtocolVersion, Binding], str] = {}
    supported = card.get("supportedInterfaces")
    for iface in supported if isinstance(supported, list) else []:
        if not isinstance(iface, dict):
            continue
        version = interface_version(iface.get("protocolVersion"))
        binding = _guarded(iface.get("protocolBinding"))
        if version is not None and binding is not None and isinstance(iface.get("url"), str):
            out.setdefault((version, binding), iface["url"])
    card_version = interface_version(card.get("protocolVersion"))
    for transport, url in _v03_interfaces(card):
        binding = _guarded(transport)
        if card_version is not None and binding is not None and isinstance(url, str):
            out.setdefault((card_version, binding), url)
    return out


def card_versions(card: dict[str, Any]) -> frozenset[tuple[ProtocolVersion, Binding]]:
    """The (protocol version, guarded binding) pairs ``card`` says the worker speaks: the keys
    of :func:`card_endpoints` (docs/bridge.md §2). Empty for a gRPC-only card."""
    return frozenset(card_endpoints(card))


def speaks(card: dict[str, Any], version: ProtocolVersion) -> bool:
    """Whether ``card`` advertises at least one guarded interface of ``version``."""
    return any(v == version for v, _ in card_versions(card))


def bridge_card(card: dict[str, Any], version: ProtocolVersion) -> dict[str, Any]:
    """``card`` in the shape of ``version``, for a client of that version (docs/bridge.md §2).

    * A card that already speaks ``version`` (:func:`speaks`; an SDK mixed card speaks both)
      comes back as a shallow copy, unchanged.
    * ``V0_3`` of a v1.0 card: a TYPES03 card — ``protocolVersion`` ``"0.3.0"``; ``url`` and
      ``preferredTransport`` from the first guarded v1.0 interface, ``additionalInterfaces``
      one entry per guarded binding (the main one included), each at the URL of the v1.0
      interface of that binding; ``supportsAuthenticatedExtendedCard`` from
      ``capabilities.extendedAgentCard``; ``security`` from ``securityRequirements`` (card and
      skills); ``securitySchemes`` unwrapped to the ``type``-tagged form.
    * ``V1_0`` of a v0.3 card: a PROTO card — ``supportedInterfaces`` from ``url`` /
      ``preferredTransport`` / ``additionalInterfaces`` (guarded ones, one per binding,
      ``protocolVersion`` ``"1.0"``); ``capabilities.extendedAgentCard`` from
      ``supportsAuthenticatedExtendedCard``; ``securityRequirements`` from ``security``;
      ``securitySchemes`` wrapped; ``capabilities.stateTransitionHistory`` dropped. A v1.0-shaped
      card whose interfaces are all 0.x keeps its v1.0 members; only its interfaces change.

    Every member the other version cannot express is dropped (``signatures`` too: a converted
    card is not the one that was signed; interface ``tenant``; gRPC and custom interfaces;
    members neither version defines); the list is in docs/bridge.md §2. Binding names come out
    upper-case (``JSONRPC``, ``HTTP+JSON``). Interface URLs are copied, never rewritten: call
    it on the card :func:`gateway.a2a.card.rewrite_card` produced (rewrite first, then bridge)
    so the served card points at the gateway — the order does not change the URLs, but the
    rewrite's signature and unguarded-interface rules (docs/protocol.md §4.5) then apply to
    the worker's own shape. Pure: ``card`` is not modified; nested values the output shares
    with it must not be modified either.

    Args:
        card: a valid Agent Card (``gateway.a2a.card.card_problem`` is ``None``).
        version: the protocol version of the client the card is for.

    Returns:
        A new card dict valid for ``version`` (v1.0: the v1.0 members only; v0.3: the TYPES03
        members only).

    Raises:
        CardBridgeError: the card speaks neither ``version`` nor the other version over a
            guarded binding (a gRPC-only card), so there is nothing to bridge.
    """
    if speaks(card, version):
        return dict(card)
    source = ProtocolVersion.V1_0 if version == ProtocolVersion.V0_3 else ProtocolVersion.V0_3
    endpoints = {binding: url for (v, binding), url in card_endpoints(card).items() if v == source}
    if not endpoints:
        raise CardBridgeError(f"the card advertises no JSONRPC or HTTP+JSON interface of "
                              f"version {source.value} or {version.value}")
    if version == ProtocolVersion.V0_3:
        return _to_v03(card, endpoints)
    return _to_v10(card, endpoints)


def served_card(card: dict[str, Any], *, bridge: bool) -> dict[str, Any]:
    """The one card every client is served, whatever its card GET carries (docs/bridge.md §2.2).

    A client picks its protocol version from the card; the ``A2A-Version`` of each *call*, not
    of the card GET, decides whether the call is bridged. So the card names every version the
    gateway serves for the worker, in the shape each version's clients read — the mixed shape
    of a2a-sdk 1.3 servers with v0.3 compatibility (docs/protocol.md §4.3):

    * ``supportedInterfaces`` (v1.0 clients): the worker's own interfaces in its order (a v0.3
      card's ``url`` / ``additionalInterfaces`` written as v1.0 interfaces of version ``"0.3"``),
      then, with ``bridge``, one interface per guarded binding of the version the worker lacks,
      at the URL of the worker's interface of that binding (``protocolVersion`` ``"1.0"`` or
      ``"0.3"``). The v1.0 SDKs pick a ``"1.0"`` interface wherever one is listed.
    * the v0.3 top-level members (``url``, ``preferredTransport``, ``protocolVersion``,
      ``additionalInterfaces``, ``supportsAuthenticatedExtendedCard``, ``security``, skills'
      ``security``, ``type``-tagged security schemes), merged in as the SDK merges them: a
      member the v1.0 card already has wins, objects are merged member by member and lists of
      objects item by item (so a security scheme carries both forms).

    A card that already speaks both versions, or neither over a guarded binding (gRPC only),
    comes back unchanged; so does a card of one version when ``bridge`` is false. Interface
    URLs are copied, never rewritten: call it on :func:`gateway.a2a.card.rewrite_card`'s
    output. Pure: ``card`` is not modified; the output may share nested values with it.

    Args:
        card: a valid Agent Card (``gateway.a2a.card.card_problem`` is ``None``), rewritten.
        bridge: ``bridge.enabled``: list the version the worker lacks too.

    Returns:
        The card to serve, a new dict unless it is ``card`` itself.
    """
    endpoints = card_endpoints(card)
    spoken = {version for version, _ in endpoints}
    if not bridge or len(spoken) != 1:
        return card
    (source,) = spoken
    target = ProtocolVersion.V0_3 if source == ProtocolVersion.V1_0 else ProtocolVersion.V1_0
    own = {binding: url for (_, binding), url in endpoints.items()}
    bridged = [{"url": url, "protocolBinding": _BINDING_NAMES[b],
                "protocolVersion": _INTERFACE_VERSIONS[target]} for b, url in own.items()]
    if isinstance(card.get("supportedInterfaces"), list):  # v1.0-shaped (any interface versions)
        v1 = dict(card)
        v1["supportedInterfaces"] = [*card["supportedInterfaces"], *bridged]
    else:  # v0.3-shaped
        v1 = _to_v10(card, own)
        v1["supportedInterfaces"] = [*_v03_as_v10_interfaces(card), *bridged]
    v03 = card if isinstance(card.get("url"), str) else _to_v03(card, own)
    return _merge(v1, v03)


def _v03_as_v10_interfaces(card: dict[str, Any]) -> list[dict[str, Any]]:
    """A v0.3 card's ``url`` / ``preferredTransport`` and ``additionalInterfaces`` as v1.0
    interfaces of the card's version (Major.Minor), repeats of a (binding, URL) left out."""
    version = card.get("protocolVersion")
    major_minor = (".".join(version.strip().split(".")[:2]) if isinstance(version, str) and version
                   else V03_INTERFACE_VERSION)
    out: list[dict[str, Any]] = []
    seen: set[tuple[object, object]] = set()
    for binding, url in _v03_interfaces(card):
        if isinstance(binding, str) and isinstance(url, str) and (binding, url) not in seen:
            seen.add((binding, url))
            out.append({"url": url, "protocolBinding": binding, "protocolVersion": major_minor})
    return out


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra``'s members added to a copy of ``into`` where it lacks them; objects merged
    member by member, lists of objects item by item (a2a-sdk 1.3's ``agent_card_to_dict``
    merge, docs/protocol.md §4.3). Neither argument is modified."""
    out = dict(into)
    for key, value in extra.items():
        mine = out.get(key)
        if key not in out:
            out[key] = value
        elif isinstance(mine, dict) and isinstance(value, dict):
            out[key] = _merge(mine, value)
        elif isinstance(mine, list) and isinstance(value, list):
            out[key] = [_merge(a, b) if isinstance(a, dict) and isinstance(b, dict) else a
                        for a, b in zip(mine, value)] + mine[len(value):]
    return out


# --------------------------------------------------------------------------- v1.0 -> v0.3


def _to_v03(card: dict[str, Any], endpoints: dict[Binding, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"protocolVersion": V03_CARD_VERSION}
    out.update((k, card[k]) for k in _SHARED if k in card)
    (main_binding, main_url), *_ = endpoints.items()
    out["url"] = main_url
    out["preferredTransport"] = _BINDING_NAMES[main_binding]
    out["additionalInterfaces"] = [{"url": url, "transport": _BINDING_NAMES[b]}
                                   for b, url in endpoints.items()]
    if isinstance(card.get("provider"), dict):
        out["provider"] = _provider(card["provider"])
    caps = card.get("capabilities")
    if not isinstance(caps, dict):
        caps = {}
    out["capabilities"] = _capabilities(caps)
    if isinstance(caps.get("extendedAgentCard"), bool):
        out["supportsAuthenticatedExtendedCard"] = caps["extendedAgentCard"]
    schemes = card.get("securitySchemes")
    if isinstance(schemes, dict):
        converted = {name: _scheme_to_v03(s) for name, s in schemes.items()}
        out["securitySchemes"] = {name: s for name, s in converted.items() if s is not None}
    if isinstance(card.get("securityRequirements"), list):
        out["security"] = _requirements_to_v03(card["securityRequirements"])
    out["skills"] = [_skill(s, to_v03=True) for s in card.get("skills") or [] if isinstance(s, dict)]
    return out


def _requirements_to_v03(requirements: list[Any]) -> list[dict[str, list[str]]]:
    """``[{"schemes": {name: {"list": [scope]}}}]`` → ``[{name: [scope]}]``."""
    out = []
    for req in requirements:
        schemes = req.get("schemes") if isinstance(req, dict) else None
        if isinstance(schemes, dict):
            out.append({name: list(v.get("list") or []) if isinstance(v, dict) else []
                        for name, v in schemes.items()})
    return out


def _scheme_to_v03(scheme: object) -> dict[str, Any] | None:
    """A v1.0 wrapped SecurityScheme in the v0.3 ``type``-tagged form; ``None`` for one of no
    known kind."""
    if not isinstance(scheme, dict):
        return None
    for tag, wrapper in _SCHEME_WRAPPERS.items():
        inner = scheme.get(wrapper)
        if isinstance(inner, dict):
            out: dict[str, Any] = {"type": tag}
            out.update((k, inner[k]) for k in _SCHEME_MEMBERS[tag] if k in inner)
            if tag == "apiKey" and "location" in inner:
                out["in"] = inner["location"]
            if tag == "oauth2":
                flows = inner.get("flows")
                if not isinstance(flows, dict):
                    flows = {}
                out["flows"] = {f: {k: flows[f][k] for k in _FLOW_MEMBERS[f] if k in flows[f]}
                                for f in _V03_FLOWS if isinstance(flows.get(f), dict)}
            return out
    return None


# --------------------------------------------------------------------------- v0.3 -> v1.0


def _to_v10(card: dict[str, Any], endpoints: dict[Binding, str]) -> dict[str, Any]:
    v1_shaped = isinstance(card.get("supportedInterfaces"), list)
    out: dict[str, Any] = {k: card[k] for k in ("name", "description") if k in card}
    out["supportedInterfaces"] = [
        {"url": url, "protocolBinding": _BINDING_NAMES[b], "protocolVersion": V10_INTERFACE_VERSION}
        for b, url in endpoints.items()]
    out.update((k, card[k]) for k in _SHARED if k in card and k not in out)
    if isinstance(card.get("provider"), dict):
        out["provider"] = _provider(card["provider"])
    caps = card.get("capabilities")
    if not isinstance(caps, dict):
        caps = {}
    out["capabilities"] = _capabilities(caps)
    extended = caps.get("extendedAgentCard") if v1_shaped else card.get("supportsAuthenticatedExtendedCard")
    if isinstance(extended, bool):
        out["capabilities"]["extendedAgentCard"] = extended
    schemes = card.get("securitySchemes")
    if isinstance(schemes, dict):
        converted = {name: s if v1_shaped else _scheme_to_v10(s) for name, s in schemes.items()}
        out["securitySchemes"] = {name: s for name, s in converted.items() if s is not None}
    requirements = card.get("securityRequirements") if v1_shaped else card.get("security")
    if isinstance(requirements, list):
        out["securityRequirements"] = (requirements if v1_shaped
                                       else _requirements_to_v10(requirements))
    out["skills"] = [_skill(s, to_v03=False, v1_shaped=v1_shaped)
                     for s in card.get("skills") or [] if isinstance(s, dict)]
    return out


def _requirements_to_v10(requirements: list[Any]) -> list[dict[str, Any]]:
    """``[{name: [scope]}]`` → ``[{"schemes": {name: {"list": [scope]}}}]``."""
    return [{"schemes": {name: {"list": list(scopes) if isinstance(scopes, list) else []}
                         for name, scopes in req.items()}}
            for req in requirements if isinstance(req, dict)]


def _scheme_to_v10(scheme: object) -> dict[str, Any] | None:
    """A v0.3 ``type``-tagged SecurityScheme in the v1.0 wrapped form; ``None`` for an unknown
    ``type``. v1.0 OAuthFlows is a oneof: of several v0.3 flows only the first of
    ``authorizationCode``, ``clientCredentials``, ``implicit``, ``password`` is kept."""
    if not isinstance(scheme, dict) or scheme.get("type") not in _SCHEME_WRAPPERS:
        return None
    tag = scheme["type"]
    inner: dict[str, Any] = {k: scheme[k] for k in _SCHEME_MEMBERS[tag] if k in scheme}
    if tag == "apiKey" and "in" in scheme:
        inner["location"] = scheme["in"]
    if tag == "oauth2":
        flows = scheme.get("flows")
        if not isinstance(flows, dict):
            flows = {}
        kept = next((f for f in _V03_FLOWS if isinstance(flows.get(f), dict)), None)
        inner["flows"] = ({} if kept is None else
                          {kept: {k: flows[kept][k] for k in _FLOW_MEMBERS[kept] if k in flows[kept]}})
    return {_SCHEME_WRAPPERS[tag]: inner}


# --------------------------------------------------------------------------- both ways


def _provider(provider: dict[str, Any]) -> dict[str, Any]:
    return {k: provider[k] for k in ("url", "organization") if k in provider}


def _capabilities(caps: dict[str, Any]) -> dict[str, Any]:
    """``streaming``, ``pushNotifications`` and ``extensions`` (the members both versions have);
    ``stateTransitionHistory`` (v0.3 only) and ``extendedAgentCard`` (moved) are left out."""
    out: dict[str, Any] = {k: caps[k] for k in ("streaming", "pushNotifications") if k in caps}
    if isinstance(caps.get("extensions"), list):
        out["extensions"] = [{k: e[k] for k in _EXTENSION if k in e}
                             for e in caps["extensions"] if isinstance(e, dict)]
    return out


def _skill(skill: dict[str, Any], *, to_v03: bool, v1_shaped: bool = True) -> dict[str, Any]:
    out = {k: skill[k] for k in _SKILL_SHARED if k in skill}
    if to_v03:
        if isinstance(skill.get("securityRequirements"), list):
            out["security"] = _requirements_to_v03(skill["securityRequirements"])
    elif v1_shaped:
        if isinstance(skill.get("securityRequirements"), list):
            out["securityRequirements"] = skill["securityRequirements"]
    elif isinstance(skill.get("security"), list):
        out["securityRequirements"] = _requirements_to_v10(skill["security"])
    return out
