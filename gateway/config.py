"""Gateway configuration: YAML → validated, frozen pydantic models.

Validation errors carry the YAML path of the offending key (``upstreams[0].url: …``), all of
them at once, with a did-you-mean hint for an unknown key. ``docs/configuration.md`` is the
reference of every key, generated from these models (``python -m gateway.config_reference``).
See ``config/gateway.example.yaml`` for an annotated example of every key.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.errors import ConfigError

Seconds = Annotated[float, Field(gt=0)]
#: The longest ``replay_window.retention_seconds`` (ten years of 365 days): finite, and far
#: inside what a Redis key's expiry in milliseconds can hold.
TEN_YEARS = 10 * 365 * 24 * 3600


class _Frozen(BaseModel):
    # use_attribute_docstrings: a field's docstring is its description (docs/configuration.md
    # is generated from them: python -m gateway.config_reference)
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def check_host(value: str) -> str:
    """``value`` if it is an IP address literal or a host name by RFC 1123 (dot-separated
    labels of letters, digits and inner hyphens, 1-63 characters each, 253 in all).

    Raises:
        ValueError: anything else (an empty string, spaces, a URL, a port).
    """
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    name = value[:-1] if value.endswith(".") else value
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(f"{value!r} is not an IP address or a host name (RFC 1123); "
                         "0.0.0.0 or :: listens on every address")
    return value


Host = Annotated[str, AfterValidator(check_host)]


class ListenTlsConfig(_Frozen):
    """TLS on the traffic listener (HTTPS). Both files are PEM; they are read at start and
    again on SIGHUP (a new certificate serves new connections; open ones keep theirs; a
    reload whose files do not load is refused and the old certificate stays)."""

    cert_file: str
    """The server certificate chain (leaf first)."""
    key_file: str
    """The private key of ``cert_file``."""
    client_ca_file: str | None = None
    """CA certificates a client certificate must chain to (mutual TLS); needed by
    ``client_cert: optional | required``."""
    client_cert: Literal["none", "optional", "required"] = "none"
    """Whether clients are asked for a certificate: ``none``; ``optional`` (one that is sent
    must verify); ``required`` (a handshake without one fails)."""

    @model_validator(mode="after")
    def _ca_for_clients(self) -> ListenTlsConfig:
        if self.client_cert != "none" and not self.client_ca_file:
            raise ValueError("client_ca_file: needed by client_cert: optional or required")
        return self


class UpstreamTlsConfig(_Frozen):
    """TLS towards one upstream (an ``https://`` URL), for its requests and its Agent Card
    fetches alike. PEM files, read at start and when a reload changes these settings."""

    ca_file: str | None = None
    """CA certificates the worker's certificate must chain to, instead of the system's."""
    cert_file: str | None = None
    """A client certificate (chain) the gateway presents to the worker (mutual TLS)."""
    key_file: str | None = None
    """The private key of ``cert_file`` (default: inside ``cert_file``)."""
    verify: bool = True
    """``false`` accepts any worker certificate (testing only: anyone on the path can then
    impersonate the worker)."""

    @model_validator(mode="after")
    def _key_needs_cert(self) -> UpstreamTlsConfig:
        if self.key_file and not self.cert_file:
            raise ValueError("key_file: needs cert_file")
        return self


class ListenConfig(_Frozen):
    """Where the gateway listens."""

    host: Host = "127.0.0.1"
    """The listen address: an IP literal or a host name (``0.0.0.0`` / ``::``: every address)."""
    port: int = Field(default=8080, ge=0, le=65535)
    """The listen port (``0``: a free one, logged as ``listening``)."""
    tls: ListenTlsConfig | None = None
    """HTTPS on this listener (``None``: plain HTTP)."""
    shutdown_grace_seconds: float = Field(default=30.0, ge=0)
    """After SIGTERM, in-flight requests and open streams get this long to finish; streams
    still open then are closed cleanly (an SSE comment, then the end of the body)."""
    max_connections: int = Field(default=10_000, gt=0)
    """Open client connections per gateway process (idle keep-alive ones and streams
    included); a connection beyond it is answered HTTP 503 and closed at once."""
    header_timeout_seconds: Seconds = 10.0
    """A request's head (request line and headers) must arrive within this many seconds of
    the connection's accept, or of the request's first byte; else the connection is closed."""
    max_header_bytes: int = Field(default=65536, ge=1024)
    """The most a request head (request line and headers) may take; a longer one is answered
    HTTP 431 and the connection closed."""
    idle_timeout_seconds: Seconds = 60.0
    """A keep-alive connection with no request in flight is closed after this many seconds."""
    body_timeout_seconds: Seconds = 30.0
    """A request body must be whole within this many seconds of the end of its head (a
    body sent slowly, or stopped); else ``HTTP/1.1 408`` (``Connection: close``) and the
    close. A request whose body came with its head (most) is not timed."""
    probes: bool = False
    """Also answer ``GET /healthz`` and ``/readyz`` on the traffic port (for probes that can
    only reach it); ``/metrics`` is on the admin listener only."""
    pid_file: str | None = None
    """A pid file the gateway (the supervisor under ``--workers``) holds locked (``flock``)
    while it runs, its pid inside; a second gateway with the same file refuses to start (exit
    3). A path, relative ones to the working directory; its directory is created. ``None``:
    ``<db path>.pid`` beside a SQLite ledger, none for a memory or Redis ledger (see
    :mod:`gateway.pidfile`; ``serve --pid-file`` wins). Read at start only."""


MAX_METRIC_TENANTS = 100
"""The most tenants ``admin.metric_tenants`` may name (each is a label value)."""
OTHER_TENANT = "other"
"""The ``tenant`` label of a tenant ``admin.metric_tenants`` does not name."""


class AdminConfig(_Frozen):
    """The admin listener: ``/metrics``, ``/healthz`` and ``/readyz`` on an address and port
    of their own, apart from the traffic port (``port: 0`` picks a free port, logged at
    start). ``token_file``: a file whose content (stripped) every admin request must present
    as ``Authorization: Bearer <token>``; ``/healthz`` and ``/readyz`` stay open to probes
    unless ``protect_probes``. ``tracked_refresh_seconds``: how often the tracked-task gauge
    is refreshed from the ledger in the background (a scrape never waits on the ledger)."""

    enabled: bool = True
    """Run the admin listener (``false``: none; probes then need ``listen.probes``)."""
    host: Host = "127.0.0.1"
    """The admin listener's address."""
    port: int = Field(default=8081, ge=0, le=65535)
    """The admin listener's port (``0``: a free one, logged as ``admin_listening``)."""
    token_file: str | None = None
    """A file whose content (stripped) every admin request must present as a bearer token."""
    protect_probes: bool = False
    """Ask the token of ``/healthz`` and ``/readyz`` too."""
    metric_tenants: list[str] = Field(default_factory=list, max_length=MAX_METRIC_TENANTS)
    """Tenants counted by name in ``a2a_gateway_tenant_requests_total{tenant}`` (at most
    100; every other tenant is counted as ``other``, no tenant as ``""``). Empty (the
    default): no metric carries a tenant (docs/callers.md §1)."""
    tracked_refresh_seconds: Seconds = 15.0
    """How often the tracked-task gauge is refreshed from the ledger."""

    @field_validator("metric_tenants")
    @classmethod
    def _metric_tenants(cls, value: list[str]) -> list[str]:
        for item in value:
            if not item or len(item) > 128:
                raise ValueError(f"{item!r}: a tenant of 1 to 128 characters")
            if item == OTHER_TENANT:
                raise ValueError(f"{item!r} is the label of every tenant not listed")
        if len(set(value)) != len(value):
            raise ValueError("a tenant is listed twice")
        return value


class TimeoutConfig(_Frozen):
    """Upstream timeouts in seconds. ``read`` bounds the wait for each chunk of a response:
    a blocking ``SendMessage`` may legitimately take minutes (docs/protocol.md §11 pitfall 15),
    so may a ``GetTask`` long-poll (``currentGeneration``, A2A v1.1 draft) the worker holds
    until the task's generation moves (docs/resume.md §3.4), and a stream is bounded only by
    this idle gap, not by an overall deadline. ``connect`` bounds the TCP connect. ``write``
    is accepted but not enforced: the aiohttp transport has no per-write timeout (a stalled
    upstream is caught by ``read``). The wait for a pooled connection is
    :attr:`PoolConfig.wait_seconds` (``upstreams[].pool``), not a timeout of the worker's."""

    connect: Seconds = 5.0
    """Seconds a TCP connect (and TLS handshake) to the worker may take."""
    read: Seconds = 300.0
    """Seconds of silence allowed between chunks of a worker's answer (the idle gap; no overall
    deadline for streams)."""
    write: Seconds = 30.0
    """Accepted, not enforced (the aiohttp transport has no per-write timeout)."""



DEFAULT_POOL_CONNECTIONS = 5000
"""The default of ``upstreams[].pool.max_connections``."""


class PoolConfig(_Frozen):
    """The gateway's connection pool to one upstream, per gateway process (each of
    ``serve --workers N`` has its own).

    ``max_connections``: open connections to the worker at most (idle pooled ones included).
    A request holds one until its answer is read; an SSE stream holds one for as long as it
    runs, so this bounds the streams open to the worker at once. ``0`` (unbounded) is refused:
    the process's own bound (``listen.max_connections``) must stay the last one met, not the
    first. ``wait_seconds``: how long a request waits for a free connection when all are in
    use (a new connection's TCP connect, bounded by ``timeouts.connect``, counts in it too, as
    aiohttp measures it); then the client gets "gateway at capacity" — HTTP 503 with
    ``Retry-After``, in its binding's form — counted as
    ``a2a_gateway_upstream_errors_total{reason="pool_exhausted"}``, never as a worker timeout.
    """

    max_connections: int = Field(default=DEFAULT_POOL_CONNECTIONS, gt=0)
    """Open connections to the worker at most, idle pooled ones included (0, unbounded, is
    refused)."""
    wait_seconds: Seconds = 5.0
    """How long a request waits for a free pooled connection, then "gateway at capacity" (HTTP 503,
    ``Retry-After``)."""


CARD_SIGNATURE_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                             "ES256", "ES384", "ES512", "EdDSA")
"""The JWS algorithms of Agent Card signatures, the worker's and the gateway's: asymmetric only
(``none`` and the HMAC family are refused; docs/protocol.md §4.2)."""


def _asymmetric_algorithms(cls: type, value: list[str]) -> list[str]:
    """The ``algorithms`` validator of the card trust and JWT settings: asymmetric ones only."""
    bad = [a for a in value if a not in CARD_SIGNATURE_ALGORITHMS]
    if bad:
        raise ValueError(f"not allowed: {', '.join(bad)} (one of {', '.join(CARD_SIGNATURE_ALGORITHMS)})")
    return value


class PinnedKeyConfig(_Frozen):
    """One public key trusted for a worker's card signatures, pinned by file."""

    kid: str = Field(min_length=1)
    """The key id a signature's protected header names (``kid``)."""
    public_key_file: str
    """The public key, PEM (``-----BEGIN PUBLIC KEY-----``; EC, Ed25519 or RSA)."""


class CardTrustConfig(_Frozen):
    """Which keys a worker's signed Agent Card is verified against (docs/protocol.md §4.5).

    Keys come from ``jwks_url`` (fetched through the upstream's client: its timeouts, TLS
    settings and ``limits.max_answer_bytes``; kept ``cache_seconds``, fetched again sooner — at
    most every 30 s — when a signature names a key it lacks), ``jwks_file`` (read at start),
    ``keys`` (pinned PEM files), and a signature's own ``jku`` only when that URL begins with one
    of ``jku_allowed``. ``signatures``: ``if_signed`` (the default) verifies a signed card and
    accepts an unsigned one; ``required`` refuses an unsigned card too; ``optional`` treats a
    card whose signatures do not verify as unsigned (accepted, counted and warned). A card
    refused is ``invalid``: new tasks are not admitted on it, existing tasks are untouched, the
    last good card stays (docs/protocol.md §4.1). Verification runs when the gateway signs cards
    (``card.signing``) or when this upstream names a key source or ``signatures: required``."""

    jwks_url: str | None = None
    """A JWKS URL trusted for this worker's card signatures (``http://`` or ``https://``)."""
    jwks_file: str | None = None
    """A JWKS file trusted for this worker's card signatures (read at start)."""
    keys: list[PinnedKeyConfig] = Field(default_factory=list)
    """Pinned public keys trusted for this worker's card signatures."""
    jku_allowed: list[str] = Field(default_factory=list)
    """URL prefixes (``https://keys.example.net/a2a/``) a signature's ``jku`` must begin with to
    be fetched for its keys; empty (the default): a ``jku`` is never followed."""
    algorithms: list[str] = Field(default_factory=lambda: list(CARD_SIGNATURE_ALGORITHMS), min_length=1)
    """The signature algorithms accepted (asymmetric only)."""
    signatures: Literal["if_signed", "required", "optional"] = "if_signed"
    """``if_signed``: a signed card must verify, an unsigned one is accepted; ``required``: an
    unsigned card is refused too; ``optional``: signatures that do not verify are treated as
    none (the card is accepted as unsigned)."""
    cache_seconds: Seconds = 300.0
    """Seconds a fetched JWKS (``jwks_url`` or an allowed ``jku``) is used before it is fetched again."""

    _asymmetric = field_validator("algorithms")(_asymmetric_algorithms)

    @field_validator("jwks_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("jku_allowed")
    @classmethod
    def _prefixes(cls, value: list[str]) -> list[str]:
        for item in value:
            parts = urlsplit(item)
            if parts.scheme not in ("http", "https") or not parts.hostname or not parts.path.startswith("/"):
                raise ValueError(f"{item!r}: an http:// or https:// URL prefix with a path "
                                 "(https://keys.example.net/ at least)")
        return value

    def configured(self) -> bool:
        """Whether this upstream names a key source or requires signatures."""
        return bool(self.jwks_url or self.jwks_file or self.keys or self.jku_allowed
                    or self.signatures == "required")


class CardConfig(_Frozen):
    """How the gateway treats one upstream's Agent Card (it governs admission of new tasks).

    ``path``: where the worker serves it (the legacy ``/.well-known/agent.json`` is tried after
    a 404). ``ttl_seconds``: freshness when the worker sends no ``Cache-Control: max-age``.
    ``on_unreachable``: ``reject`` new tasks while the card cannot be fetched, or
    ``allow_stale`` (admit against the last good card). ``signed``: a signed card (a
    non-empty ``signatures`` list; absent, ``null`` or ``[]`` is unsigned and always rewritten)
    is served ``verbatim`` (it still names the worker's URLs, so clients bypass the gateway:
    warned once per card and shown by ``a2a_gateway_card_served_verbatim``) or ``strip``ped
    and rewritten — when the gateway has no signing key (``card.signing``); with one, a signed
    card is verified (``trust``), rewritten and signed again. ``unguarded_interfaces``: interfaces whose binding the gateway does not
    guard (anything but ``JSONRPC`` and ``HTTP+JSON``, e.g. gRPC or a custom binding URI) are
    left out of the served card (``drop``), or passed on as the worker wrote them, URLs
    untouched (``keep``: warned once per card and counted in
    ``a2a_gateway_card_unguarded_interfaces``). ``required_skill``: a skill id the card must
    advertise for new tasks to be admitted. (docs/protocol.md §4.5)

    Fetching (docs/protocol.md §4.1): ``retry_backoff_seconds``: after a failed fetch
    (unreachable or invalid) the card is not fetched again for this long, doubling with each
    further failure up to ``retry_max_seconds`` and never beyond ``ttl_seconds``; a good fetch
    resets it — but while no card was ever fetched and the worker was unreachable, a request
    fetches past it (without advancing it). ``fetch_wait_seconds``: the longest a request waits
    for a card fetch in flight (the start-up fetch, a revalidation, its own fetch of a first
    card) before it is answered from the cache as it is — a new task with no card yet gets
    HTTP 503 / -32603; the fetch itself goes on, bounded by the upstream's ``timeouts``.
    """

    path: str = "/.well-known/agent-card.json"
    """Where the worker serves its Agent Card (the legacy ``/.well-known/agent.json`` is tried
    after a 404)."""
    ttl_seconds: Seconds = 300.0
    """Card freshness when the worker sends no ``Cache-Control: max-age``."""
    on_unreachable: Literal["reject", "allow_stale"] = "reject"
    """While the card cannot be fetched: ``reject`` new tasks, or ``allow_stale`` (admit against
    the last good card)."""
    signed: Literal["verbatim", "strip"] = "verbatim"
    """Without ``card.signing``: a signed card (non-empty ``signatures``) is served ``verbatim``
    (its URLs name the worker; warned) or ``strip``ped and rewritten. With a gateway key it is
    verified, rewritten and signed again whatever this says."""
    trust: CardTrustConfig = CardTrustConfig()
    """The keys the worker's card signatures are verified against, and whether it must be signed."""
    unguarded_interfaces: Literal["drop", "keep"] = "drop"
    """Interfaces of bindings the gateway does not guard (gRPC, custom): ``drop`` them from the
    served card, or ``keep`` them as written (warned)."""
    required_skill: str | None = None
    """A skill id the card must advertise for new tasks to be admitted."""
    retry_backoff_seconds: Seconds = 1.0
    """After a failed fetch, no new fetch for this long, doubling per further failure."""
    retry_max_seconds: Seconds = 60.0
    """The back-off's cap (never beyond ``ttl_seconds``)."""
    fetch_wait_seconds: Seconds = 5.0
    """The longest a request waits for a card fetch in flight before it is answered from the cache
    as it is."""


JWKS_PATH = "/.well-known/a2a-gateway-jwks.json"
"""Where below every mount the gateway publishes its card-signing keys (``card.signing``)."""


class SigningKeyConfig(_Frozen):
    """A private key the gateway signs served Agent Cards with (docs/protocol.md §4.5)."""

    key_file: str
    """The private key, PEM (PKCS#8 or traditional, unencrypted): EC P-256 / P-384 / P-521,
    Ed25519, or RSA of 2048 bits or more. Read at start; a key that does not load is a config
    error."""
    kid: str = Field(min_length=1, max_length=128)
    """The key id written in each signature's protected header and in the published JWKS."""
    algorithm: Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                       "ES256", "ES384", "ES512", "EdDSA"] | None = None
    """The JWS algorithm; ``None``: from the key (EC P-256 ``ES256``, P-384 ``ES384``, P-521
    ``ES512``, Ed25519 ``EdDSA``, RSA ``RS256``)."""


class PreviousKeyConfig(SigningKeyConfig):
    """The key being retired during a rotation: published beside the new one and, with
    ``sign`` (the default), still signing — a second signature — so a client that holds a JWKS
    from before the rotation verifies the card too."""

    sign: bool = True
    """Also sign with this key (``false``: only publish it)."""


class CardSigningConfig(SigningKeyConfig):
    """The gateway's own Agent Card signatures (docs/protocol.md §4.5). With a key, the card
    served for every upstream — rewritten to the gateway's URLs, unguarded interfaces left out,
    both versions listed (docs/bridge.md §2.2) — is signed (JWS, RFC 8785 canonical form, as
    a2a-sdk 1.3 and @a2a-js/sdk 1.3 verify it), a worker's signed card first verified against
    ``upstreams[].card.trust``; the extended card likewise. The public keys are published on
    the traffic listener at ``<mount>/.well-known/a2a-gateway-jwks.json`` (and named by
    ``jku``). Read at start: changing it needs a restart."""

    jku: str | None = None
    """The JWKS URL written in the protected header; ``None``: the gateway's own, under the
    mount the card is served from (``<public base of the mount>.well-known/a2a-gateway-jwks.json``)."""
    previous: PreviousKeyConfig | None = None
    """During a key rotation, the key being retired (published, and signing too unless
    ``sign: false``)."""
    sign_unsigned: bool = True
    """Also sign the card of a worker that sends it unsigned (``false``: served unsigned, as
    without a key)."""

    @field_validator("jku")
    @classmethod
    def _jku_url(cls, value: str | None) -> str | None:
        if value is not None and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _distinct_kids(self) -> CardSigningConfig:
        if self.previous is not None and self.previous.kid == self.kid:
            raise ValueError("previous.kid: must differ from kid")
        return self


class GatewayCardConfig(_Frozen):
    """Agent Card settings of the gateway as a whole (each upstream's are ``upstreams[].card``)."""

    signing: CardSigningConfig | None = None
    """The gateway's card-signing key (``null``: served cards are not signed; a worker's signed
    card follows ``upstreams[].card.signed``)."""


class UpstreamConfig(_Frozen):
    """One A2A worker mounted at a path prefix of the gateway.

    A request under ``prefix`` goes to ``url`` with the rest of its path appended. POSTs to
    ``jsonrpc_path`` (relative to the mount) — or to any path the worker's card advertises a
    JSON-RPC interface at — are A2A JSON-RPC, the REST operation paths below
    the mount (docs/protocol.md §1.3) A2A REST: both pass the invariant engine. The Agent Card
    is served rewritten; every other request under the mount is relayed transparently.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """The upstream's name: the ``upstream`` metric label and part of the ledger key;
    ``[A-Za-z0-9_.-]``, 1-64 characters, unique."""
    url: str
    """The worker's base URL (``http://`` or ``https://``); a request's path below ``prefix`` is
    appended to it."""
    prefix: str = "/"
    """The path prefix the worker is mounted at (``/`` for a sidecar); unique."""
    jsonrpc_path: str = "/"
    """Where below the mount POSTs are A2A JSON-RPC (relative to the mount)."""
    timeouts: TimeoutConfig = TimeoutConfig()
    """Timeouts of requests to this worker."""
    pool: PoolConfig = PoolConfig()
    """The connection pool to this worker (per gateway process)."""
    card: CardConfig = CardConfig()
    """How the worker's Agent Card is fetched and served."""
    tls: UpstreamTlsConfig = UpstreamTlsConfig()
    """TLS settings towards this worker (an ``https://`` URL): CA, client certificate."""

    @model_validator(mode="before")
    @classmethod
    def _moved_pool_timeout(cls, data: Any) -> Any:
        """``timeouts.pool`` of earlier versions is ``pool.wait_seconds`` now (the wait for a
        pooled connection is the gateway's capacity, not the worker's timeout): still read,
        unless ``pool.wait_seconds`` is given too."""
        if not isinstance(data, dict) or not isinstance(data.get("timeouts"), dict) or "pool" not in data["timeouts"]:
            return data
        timeouts = dict(data["timeouts"])
        wait = timeouts.pop("pool")
        pool = data.get("pool", {})
        if isinstance(pool, dict):  # anything else is refused by the field's own validation
            pool = {"wait_seconds": wait, **pool}
        return {**data, "timeouts": timeouts, "pool": pool}
    heartbeat_seconds: Seconds = 30.0
    """Expected longest silence of a live task (unless the card declares one, see
    ``gateway.a2a.card.HEARTBEAT_EXTENSION``); past it an action on the task is preceded by a
    forced GetTask."""
    protocol_versions: list[Literal["0.3", "1.0"]] | None = Field(default=None, min_length=1)
    """The A2A versions the worker speaks, on the bindings its card names, instead of what the
    card says (docs/bridge.md §3.1); ``None``: learnt from the card. A client of another
    version is bridged to one of these when ``bridge.enabled``."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        if not urlsplit(value).hostname:
            raise ValueError("has no host")
        return value.rstrip("/") + "/"

    @field_validator("prefix", "jsonrpc_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return "/" + value.strip("/") if value != "/" else "/"


MAX_LIMIT_OVERRIDES = 1000
"""The most entries ``limits.tenants`` and ``limits.callers`` may hold, each."""


class QuotaConfig(_Frozen):
    """One set of fair-share limits (docs/limits.md §1); every field ``null`` (the default) is
    off. ``requests_per_second`` with ``burst``: a token bucket (GCRA) of the requests let
    through; ``live_tasks``: tasks not yet terminal in the ledger that requests of this scope
    created; ``open_streams``: SSE streams open at once; ``push_configs``: push-notification
    configs kept in the ledger. Past one, the request is answered HTTP 429 with
    ``Retry-After`` before the worker is called."""

    requests_per_second: float | None = Field(default=None, gt=0, le=1_000_000)
    """Requests let through per second, on average (``null``: unlimited)."""
    burst: int | None = Field(default=None, ge=1, le=1_000_000)
    """Requests that may come at once above the rate (``null``: the rate rounded up, at least 1)."""
    live_tasks: int | None = Field(default=None, ge=0, le=1_000_000)
    """Tasks not yet terminal that this scope's requests created (``null``: unlimited)."""
    open_streams: int | None = Field(default=None, ge=0, le=1_000_000)
    """SSE streams open at once (``null``: unlimited)."""
    push_configs: int | None = Field(default=None, ge=0, le=1_000_000)
    """Push-notification configs kept at once (``null``: unlimited)."""

    def over(self, other: QuotaConfig) -> QuotaConfig:
        """This quota with the fields ``other`` sets replaced by ``other``'s (an override)."""
        return self.model_copy(update={name: getattr(other, name) for name in other.model_fields_set})

    @property
    def configured(self) -> bool:
        """Whether any limit is set."""
        return any(getattr(self, name) is not None for name in QUOTA_KINDS)


QUOTA_KINDS = ("requests_per_second", "live_tasks", "open_streams", "push_configs")
"""The limits of a :class:`QuotaConfig` (``burst`` goes with ``requests_per_second``)."""


class LimitsConfig(_Frozen):
    """Size and time limits (bytes and seconds), and the fair-share limits per upstream,
    tenant and caller (docs/limits.md; all off by default)."""

    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    """A client request body larger than this is refused (HTTP 413)."""
    max_event_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    """One SSE event from a worker larger than this ends the stream with an error."""
    max_answer_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """A worker answer read whole (unary answers, Agent Cards), counted after decompression;
    past it the client gets a transport-class error (HTTP 502). Read at start-up."""
    post_terminal_drain_seconds: float = Field(default=2.0, ge=0)
    """After a terminal event, how long the worker's stream is read on to count late events."""
    max_json_depth: int = Field(default=128, ge=8, le=512)
    """Deepest nesting of objects and arrays accepted in a JSON body, from a client (refused
    as -32600 / HTTP 400) or a worker (a transport-class error); checked before any
    recursive code reads the body."""
    max_inflight_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    """The client request bodies (JSON-RPC and REST) one gateway process holds at once, from
    the first byte read (a body's ``Content-Length`` at once) to the end of its request; a
    body that would pass it is answered HTTP 503 with ``Retry-After: 1`` (JSON-RPC -32603,
    REST ``UNAVAILABLE``). At least ``max_body_bytes``."""

    per_upstream: QuotaConfig = QuotaConfig()
    """Fair-share limits of each upstream, all its callers together (docs/limits.md)."""
    per_tenant: QuotaConfig = QuotaConfig()
    """Fair-share limits of each A2A tenant (no tenant, ``""``, is one tenant of its own)."""
    per_caller: QuotaConfig = QuotaConfig()
    """Fair-share limits of each caller (the identity of docs/callers.md §2)."""
    tenants: dict[str, QuotaConfig] = Field(default_factory=dict, max_length=MAX_LIMIT_OVERRIDES)
    """Overrides of ``per_tenant`` by tenant name: the fields an entry sets replace the default's."""
    callers: dict[str, QuotaConfig] = Field(default_factory=dict, max_length=MAX_LIMIT_OVERRIDES)
    """Overrides of ``per_caller`` by the caller's identity (the header value, certificate
    subject or JWT subject of docs/callers.md §2.2); matched by fingerprint, never kept."""
    stale_seconds: Seconds = 3600.0
    """An open-stream or pending-task slot older than this is reclaimed (a replica that died)."""

    @model_validator(mode="after")
    def _budget_holds_a_body(self) -> LimitsConfig:
        if self.max_inflight_body_bytes < self.max_body_bytes:
            raise ValueError("max_inflight_body_bytes: must be at least max_body_bytes (else a body of "
                             "max_body_bytes is never read)")
        return self


STATE_DIR_ENV = "A2A_GATEWAY_STATE_DIR"
"""Environment variable naming the gateway's state directory (:func:`state_dir`)."""


def state_dir() -> Path:
    """The directory of the default SQLite ledger (``ledger.db``, its pid file beside it):
    ``$A2A_GATEWAY_STATE_DIR``, else ``$XDG_STATE_HOME/a2a-gateway``, else
    ``~/.local/state/a2a-gateway`` (the XDG Base Directory default) — absolute, so ``serve``
    and ``ledger`` run from any working directory find the same file. The Docker image sets
    ``A2A_GATEWAY_STATE_DIR=/var/lib/a2a-gateway``. ``serve`` creates it (mode 0700) when it
    is missing."""
    given = os.environ.get(STATE_DIR_ENV) or None
    if given:
        return Path(given).expanduser().absolute()
    xdg = os.environ.get("XDG_STATE_HOME") or None
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return (base / "a2a-gateway").absolute()


def default_ledger_url() -> str:
    """The default ``ledger.url``: ``sqlite:///<state dir>/ledger.db`` (:func:`state_dir`)."""
    return f"sqlite://{state_dir() / 'ledger.db'}"


class PublicConfig(_Frozen):
    """How the gateway names itself in the Agent Cards it serves.

    ``url``: the public origin (``https://gw.example.net``); when unset, the origin of each
    request (its ``Host``) is used, or ``Forwarded`` / ``X-Forwarded-Host`` / ``-Proto`` when
    the request comes from an address in ``trusted_proxies``.
    """

    url: str | None = None
    """The public origin (``https://gw.example.net``); unset: each request's own ``Host``."""
    trusted_proxies: list[str] = Field(default_factory=list)
    """Addresses whose ``Forwarded`` / ``X-Forwarded-Host`` / ``-Proto`` headers are believed."""


class StreamsConfig(_Frozen):
    """SSE relaying. ``keepalive_seconds``: the gateway's own comment to the client after this
    much silence. ``resubscribe_attempts`` / ``resubscribe_backoff_seconds``: how often (and
    with what first delay, doubling) a stream cut before its task ended is resumed upstream."""

    keepalive_seconds: Seconds = 15.0
    """After this much silence the gateway sends the client an SSE comment of its own."""
    resubscribe_attempts: int = Field(default=3, ge=0)
    """How often a worker stream cut before its task ended is resumed upstream."""
    resubscribe_backoff_seconds: float = Field(default=0.2, ge=0)
    """The first delay before a resubscribe, doubling."""


class AdmissionConfig(_Frozen):
    """``skill_metadata_key``: a message ``metadata`` key whose value names the skill a new
    task wants; the card must advertise it."""

    skill_metadata_key: str | None = None
    """A message ``metadata`` key naming the skill a new task wants (the card must advertise it)."""


class LedgerConfig(_Frozen):
    """The task ledger.

    ``url``: ``memory``, ``sqlite:///ABS/PATH.db`` / ``sqlite:REL/PATH.db`` (default:
    ``ledger.db`` in the state directory, :func:`state_dir`), ``redis://[USER:PASSWORD@]HOST:PORT/DB``
    (``rediss://`` with TLS: ``?ssl_ca_certs=CA.pem&ssl_certfile=CERT.pem&ssl_keyfile=KEY.pem``)
    or ``redis+sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT/SERVICE/DB`` (the primary found
    through Sentinels; ``rediss+sentinel://`` with TLS) or
    ``redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]`` (Redis Cluster, startup nodes;
    ``rediss+cluster://`` with TLS; no ``min_replica_acks``) — docs/resume.md §4.
    ``retention_seconds``: how long terminal tasks are kept (default 7 days), pruned every
    ``prune_interval_seconds``. ``max_tasks`` bounds the memory backend.
    ``on_unavailable``: ``reject`` (default; fail closed with a transport-class error) or
    ``forward`` (relay unchecked, counted) when the ledger cannot be read or written.
    """

    url: str = Field(default_factory=default_ledger_url)
    """The ledger: ``memory``, ``sqlite:///ABS/PATH.db``, ``sqlite:REL/PATH.db``, ``redis://…``,
    ``redis+sentinel://…`` or ``redis+cluster://…`` (see above); default ``ledger.db`` in the
    state directory."""
    max_tasks: int = Field(default=100_000, gt=0)
    """The memory backend's bound on tasks (the oldest terminal ones go first)."""
    retention_seconds: float = Field(default=7 * 24 * 3600, gt=0)
    """How long terminal tasks are kept before they are pruned (default 7 days)."""
    prune_interval_seconds: float = Field(default=300, gt=0)
    """How often terminal tasks past ``retention_seconds`` are pruned."""
    probe_interval_seconds: float = Field(default=5.0, gt=0, le=3600)
    """How often the gateway writes a probe to the ledger (one small write that changes
    nothing anyone reads): while the last probe or ledger call failed, ``/readyz`` answers 503
    (with ``ledger.on_unavailable: reject``); a write that succeeds makes it ready again."""
    on_unavailable: Literal["reject", "forward"] = "reject"
    """When the ledger cannot be read or written: ``reject`` (fail closed, a transport-class error)
    or ``forward`` (relay unchecked, counted)."""
    min_replica_acks: int = Field(default=0, ge=0)
    """Redis only, not ``redis+cluster://``: a terminal state is stored only once this many
    replicas acknowledged it (``WAIT``), so a failover cannot lose it; fewer within
    ``replica_ack_timeout_seconds`` fails the write (the event is not forwarded, the client gets
    the ledger error). 0 (the default): acknowledged by the primary alone (docs/resume.md §4.4)."""
    replica_ack_timeout_seconds: Seconds = 1.0
    """How long a terminal state waits for ``min_replica_acks`` acknowledgements."""
    password_file: str | None = None
    """Redis only: a file holding the password of the Redis servers (a mounted Kubernetes
    Secret; one trailing newline is dropped), read at start; the URL may name the ACL user but
    then no password."""
    sentinel_username: str | None = None
    """``redis+sentinel://`` only: the user the Sentinels themselves want (none by default)."""
    sentinel_password_file: str | None = None
    """``redis+sentinel://`` only: the user and password file the Sentinels themselves want
    (their ``requirepass`` / ACL); apart from the servers' (the URL's or ``password_file``),
    none by default."""

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        from gateway.ledger import ledger_from_url

        ledger_from_url(value)  # raises ValueError with a clear message
        return value

    @model_validator(mode="after")
    def _redis_settings(self) -> LedgerConfig:
        redis = self.url.startswith(("redis://", "rediss://", "unix://", "redis+sentinel://",
                                     "rediss+sentinel://", "redis+cluster://", "rediss+cluster://"))
        sentinel = self.url.startswith(("redis+sentinel://", "rediss+sentinel://"))
        if self.min_replica_acks and self.url.startswith(("redis+cluster://", "rediss+cluster://")):
            raise ValueError("min_replica_acks: not supported with a redis+cluster:// ledger URL "
                             "(WAIT covers one shard); set it to 0 (docs/resume.md §4.6)")
        for name in ("min_replica_acks", "password_file"):
            if getattr(self, name) and not redis:
                raise ValueError(f"{name}: needs a Redis ledger URL")
        for name in ("sentinel_username", "sentinel_password_file"):
            if getattr(self, name) and not sentinel:
                raise ValueError(f"{name}: needs a redis+sentinel:// ledger URL")
        if self.password_file and _url_password(self.url):
            raise ValueError("password_file: the URL names a password too; give one of them")
        return self

    def redis_options(self) -> Any:
        """The Redis settings as the ledger takes them (:class:`~gateway.ledger.redis.RedisOptions`);
        ``None`` for a ledger that is not Redis (redis-py, ~11 MB of RSS, is then never imported)."""
        if not self.url.startswith(("redis", "unix://")):
            return None
        from gateway.ledger.redis import RedisOptions

        return RedisOptions(self.min_replica_acks, self.replica_ack_timeout_seconds,
                            self.password_file, self.sentinel_username, self.sentinel_password_file)


def _url_password(url: str) -> bool:
    """Whether a ledger URL carries a password (in its userinfo or a ``password=`` argument)."""
    rest = url.partition("://")[2]
    userinfo, at, tail = rest.rpartition("@")
    return bool(at and ":" in userinfo) or "password=" in tail.partition("?")[2]


class LogConfig(_Frozen):
    """Logging: level name, ``json`` (default) or ``text`` lines, how late INFO lines may be
    written (batched), and how many may wait for stderr. Lines are written by a thread of
    their own, never by the event loop."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    """The lowest level written."""
    format: Literal["json", "text"] = "json"
    """``json``: one object per line on stderr; ``text``: ``<ts> <LEVEL> <event> key=value …``, the
    same fields."""
    flush_seconds: Annotated[float, Field(ge=0)] = 1.0
    """INFO/DEBUG lines are written in batches at most this late (one write per batch, not
    per request); WARNING and above at once; 0 writes every line at once."""
    repeat_window_seconds: Annotated[float, Field(ge=0)] = 10.0
    """A WARNING-or-worse line identical to one written less than this long ago (the same
    event and fields, ``duration_s`` aside) is held back and counted; the next one after the
    window carries ``repeated`` (how many were held back). 0 writes every line."""
    max_queued_lines: int = Field(default=10_000, ge=1)
    """Lines waiting to be written by the log thread (a log call on the event loop only queues
    its line, it never waits for stderr); past it, while stderr does not take lines (a pipe
    nobody reads), lines are dropped and counted in ``a2a_gateway_log_dropped_total``."""


class BridgeConfig(_Frozen):
    """The version bridge between v0.3 and v1.0 peers (docs/bridge.md §2, §3). ``enabled``: a
    client of a version the worker does not speak (its card, or ``upstreams[].protocol_versions``)
    is bridged on its own binding — the served Agent Card of a one-version worker also lists the
    other version's interfaces and v0.3 members (one card for every client, whatever its card
    GET carries), and each call of the other version is translated to the worker's version and
    back. ``false``: cards and calls go on in the worker's version only, as before the bridge."""

    enabled: bool = True
    """Bridge a client of a version the worker does not speak (``false``: the worker's version
    only)."""


class ReplayWindowConfig(_Frozen):
    """The replay window behind ``Last-Event-ID`` (docs/resume.md): every SSE event the gateway
    delivers for a task carries a gateway-issued ``id:`` and is kept in the ledger's backend,
    so a client that resubscribes with ``Last-Event-ID`` gets what it missed. ``enabled``:
    ``false`` relays the worker's own event ids and keeps nothing. The bounds: events and
    payload bytes per task, events and payload bytes in all (default 256 MiB), and seconds an
    event is kept (finite, at most ten years: the Redis keys' expiry is in milliseconds)."""

    enabled: bool = True
    """Issue gateway event ids and keep delivered events (``false``: the worker's own ids, nothing
    kept)."""
    max_events_per_task: int = Field(default=1000, gt=0)
    """Events kept per task (the oldest go first)."""
    max_bytes_per_task: int = Field(default=1024 * 1024, gt=0)
    """Payload bytes kept per task."""
    max_events_total: int = Field(default=100_000, gt=0)
    """Events kept over all tasks."""
    max_bytes_total: int = Field(default=256 * 1024 * 1024, gt=0)
    """Payload bytes kept over all tasks (default 256 MiB)."""
    retention_seconds: float = Field(default=3600.0, gt=0, le=TEN_YEARS)
    """Seconds an event is kept (at most ten years)."""

    def limits(self) -> Any:
        """The bounds as the ledger takes them (:class:`~gateway.ledger.base.WindowLimits`)."""
        from gateway.ledger.base import WindowLimits

        return WindowLimits(max_events_per_task=self.max_events_per_task,
                            max_bytes_per_task=self.max_bytes_per_task,
                            max_events_total=self.max_events_total,
                            max_bytes_total=self.max_bytes_total,
                            retention_seconds=self.retention_seconds)


class SweepConfig(_Frozen):
    """The proactive sweep (docs/sweep.md): a background loop that sends one ``GetTask`` per
    heartbeat gap to the worker of each live task the gateway has not observed for longer
    than its upstream's heartbeat interval (``upstreams[].heartbeat_seconds``, or the card's)
    and that has no client stream open through this process, so a task that moved on without
    anyone asking (a worker restarted it as ``failed``) is noticed and recorded.

    ``enabled``: ``false`` sends no such ``GetTask`` at all. ``interval_seconds``: the loop's
    period; each period reads at most ``batch_size`` live tasks per upstream from the ledger
    (the next period goes on from there). ``requests_per_second``: per upstream and per
    gateway process, the most sweep ``GetTask`` requests sent (spaced evenly, no burst);
    ``max_in_flight``: per upstream and process, the most awaiting their answer at once (each
    bounded by the upstream's ``timeouts``). A task is noticed within about
    ``heartbeat_seconds + interval_seconds`` while the rate keeps up (docs/sweep.md §2)."""

    enabled: bool = True
    """Send sweep ``GetTask`` requests (``false``: none at all)."""
    interval_seconds: float = Field(default=5.0, gt=0, le=3600)
    """Seconds between two passes of the loop."""
    batch_size: int = Field(default=100, gt=0, le=10_000)
    """Live tasks read per upstream and pass (the next pass goes on from there)."""
    requests_per_second: float = Field(default=5.0, gt=0, le=10_000)
    """Sweep ``GetTask`` requests per second, per upstream and gateway process (spaced evenly)."""
    max_in_flight: int = Field(default=4, gt=0, le=1000)
    """Sweep ``GetTask`` requests awaiting their answer at once, per upstream and process."""


class TimelineConfig(_Frozen):
    """The task timeline (docs/observability.md §2): the observations of each task the
    gateway judged, kept in the ledger's backend for ``a2a-gateway ledger show`` and the admin
    listener. ``enabled``: ``false`` keeps none. Bounds: entries per task (the oldest go
    first) and tasks with a timeline (the least recently written goes first); entries are kept
    as long as records (``ledger.retention_seconds``)."""

    enabled: bool = True
    """Keep a timeline per task (``false``: none)."""
    max_entries_per_task: int = Field(default=200, gt=0, le=100_000)
    """Entries kept per task (the oldest go first)."""
    max_tasks: int = Field(default=10_000, gt=0)
    """Tasks with a timeline (the least recently written goes first)."""

    def limits(self, retention_seconds: float) -> Any:
        """The bounds as the ledger takes them (:class:`~gateway.ledger.base.TimelineLimits`)."""
        from gateway.ledger.base import TimelineLimits

        return TimelineLimits(max_entries_per_task=self.max_entries_per_task, max_tasks=self.max_tasks,
                              retention_seconds=retention_seconds)


class TracingConfig(_Frozen):
    """OpenTelemetry traces over OTLP/HTTP (docs/observability.md §1; needs the ``otel``
    extra: ``pip install 'a2a-gateway[otel]'``). The standard ``OTEL_*`` variables win over
    these keys, as every variable wins over the file. ``enabled``: on or off unless
    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER`` (``otlp`` / ``none``) says; ``null``
    (the default): on when an ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` is set. ``endpoint``: the
    OTLP/HTTP traces URL (``http://collector:4318/v1/traces``) unless those variables name one.
    ``service_name``: ``service.name`` unless ``OTEL_SERVICE_NAME`` or a ``service.name`` in
    ``OTEL_RESOURCE_ATTRIBUTES`` is set (else ``a2a-gateway``). ``sampling_ratio``: the share of
    new traces recorded (a client's sampled ``traceparent`` is followed whatever it is) unless
    ``OTEL_TRACES_SAMPLER`` is set (then the SDK's sampler, with ``OTEL_TRACES_SAMPLER_ARG``)."""

    enabled: bool | None = None
    """Export traces (``OTEL_SDK_DISABLED`` / ``OTEL_TRACES_EXPORTER`` win; ``null``: on when an OTLP endpoint variable is set)."""
    endpoint: str | None = None
    """The OTLP/HTTP traces URL (``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` win; ``null``: ``http://localhost:4318/v1/traces``)."""
    service_name: str | None = None
    """``service.name`` (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES`` win; ``null``: ``a2a-gateway``)."""
    sampling_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    """The share of new traces recorded (a client's sampled ``traceparent`` is followed; ``OTEL_TRACES_SAMPLER`` wins)."""


class CallersConfig(_Frozen):
    """Telling callers apart on a task (docs/callers.md §2-§4): an answer the gateway builds
    from its ledger goes only to a caller seen on the task; anyone else's request goes to the
    worker. ``identity``: what names a caller — the ``header`` (default ``Authorization``),
    the TLS ``client_cert`` subject, or the ``jwt_subject`` verified by ``auth.jwt``.
    ``secret_file``: the HMAC secrets of the fingerprints, one per line, the first signing
    (``A2A_GATEWAY_CALLER_SECRET`` wins when set; none: one made once and kept in
    ``caller-secret`` beside the SQLite ledger or in the state directory, docs/callers.md §4).
    ``enabled: false`` gives local answers to anyone (one caller per deployment). Read at
    start only."""

    enabled: bool = True
    """Tell callers apart (``false``: local answers go to anyone)."""
    identity: Literal["header", "client_cert", "jwt_subject"] = "header"
    """What names a caller: a request ``header``, the TLS ``client_cert`` subject, or the ``jwt_subject``."""
    header: str = Field(default="authorization", pattern=r"^[A-Za-z0-9-]{1,64}$")
    """The header whose value names the caller (``identity: header``)."""
    secret_file: str | None = None
    """A file of HMAC secrets, one per line, the first signing (``A2A_GATEWAY_CALLER_SECRET`` wins)."""


#: The signature algorithms ``auth.jwt.algorithms`` may name: asymmetric ones only (a JWKS
#: holds public keys; ``none`` and the HMAC family are refused).
JWT_ALGORITHMS = CARD_SIGNATURE_ALGORITHMS


class JwtConfig(_Frozen):
    """Bearer JWTs checked at the gateway before anything reaches a worker (docs/callers.md
    §5): signed by a key of the JWKS (``jwks_url``, fetched and cached ``cache_seconds``, or
    ``jwks_file``) with one of ``algorithms``, issued by ``issuer`` for ``audience`` (one or
    a list), with ``exp`` (and ``nbf``/``iat`` when present) checked with ``leeway_seconds``.
    Read at start only."""

    issuer: str = Field(min_length=1)
    """The ``iss`` every token must carry."""
    audience: str | list[str] = Field(min_length=1)
    """The ``aud`` a token must name (one of them, when a list)."""
    jwks_url: str | None = None
    """The JWKS URL (fetched and cached; or ``jwks_file``)."""
    jwks_file: str | None = None
    """A JWKS file (or ``jwks_url``)."""
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"], min_length=1)
    """The signature algorithms accepted (asymmetric only)."""
    leeway_seconds: float = Field(default=30.0, ge=0, le=3600)
    """Clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
    cache_seconds: Seconds = 300.0
    """Seconds a fetched JWKS is used before it is fetched again."""
    fetch_timeout_seconds: Seconds = 5.0
    """Timeout of one JWKS fetch."""

    _asymmetric = field_validator("algorithms")(_asymmetric_algorithms)

    @field_validator("jwks_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> JwtConfig:
        if (self.jwks_url is None) == (self.jwks_file is None):
            raise ValueError("exactly one of jwks_url and jwks_file")
        return self


class AuthConfig(_Frozen):
    """Caller authentication at the gateway (docs/callers.md §5); off without ``jwt``."""

    jwt: JwtConfig | None = None
    """Bearer JWT checking (``null``: off)."""


class PushConfig(_Frozen):
    """The push-notification relay (docs/push.md): every push config the gateway forwards
    names a callback URL of the gateway's own, and the worker's notifications are judged, kept
    in a durable outbox and delivered to the client's webhook. ``enabled: false`` passes push
    configs untouched (the worker then posts to the client's webhook directly, unjudged)."""

    enabled: bool = True
    """Relay push configs through the gateway (``false``: pass them untouched)."""
    callback_url: str | None = None
    """The base URL workers reach the gateway at for callbacks (``http://gateway:8080``);
    ``None``: ``public.url``, else the listener address the client's request came to (never its ``Host``)."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Webhook host names allowed even when they resolve to a refused address (exact, lower
    case; a leading ``*.`` allows the subdomains)."""
    allowed_cidrs: list[str] = Field(default_factory=list)
    """Address ranges (``10.0.0.0/8``, ``127.0.0.1/32``) a webhook may resolve to although
    they are loopback, private, link-local or otherwise not global (docs/push.md §4)."""
    delivery_timeout_seconds: Seconds = 10.0
    """Timeout of one delivery POST to a client's webhook."""
    max_attempts: int = Field(default=8, ge=1)
    """Delivery attempts of one notification before it is dead-lettered."""
    backoff_seconds: Seconds = 1.0
    """The wait after the first failed attempt; doubled after each further one."""
    backoff_max_seconds: Seconds = 300.0
    """The longest wait between two attempts."""
    lease_seconds: Seconds = 60.0
    """How long a claimed outbox entry is one replica's to deliver (past it, another may)."""
    poll_seconds: Seconds = 0.5
    """How often the delivery loop looks for due entries when it found none."""
    max_outbox_per_task: int = Field(default=100, gt=0)
    """Notifications waiting per task (past it the worker gets 503 and retries)."""
    max_outbox_total: int = Field(default=10_000, gt=0)
    """Notifications waiting in all."""
    max_configs_per_task: int = Field(default=10, gt=0)
    """Push configs kept per task."""
    max_configs_total: int = Field(default=100_000, gt=0)
    """Push configs kept in all."""
    config_retention_seconds: float = Field(default=7 * 24 * 3600, gt=0)
    """A stored push config is deleted this long after it was created."""
    max_notification_bytes: int = Field(default=1024 * 1024, gt=0)
    """The largest notification body a worker may post (413 past it)."""

    @field_validator("allowed_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError as exc:
                raise ValueError(f"{item!r} is not an address range: {exc}") from None
        return value

    @field_validator("callback_url")
    @classmethod
    def _callback(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError("must be an http:// or https:// URL")
        return value


class GatewayConfig(_Frozen):
    """The whole gateway configuration."""

    listen: ListenConfig = ListenConfig()
    """The traffic listener: address, TLS, connection bounds."""
    admin: AdminConfig = AdminConfig()
    """The admin listener: ``/metrics``, ``/healthz``, ``/readyz``."""
    mode: Literal["enforce", "observe"] = "enforce"
    """``enforce``: verdicts are applied (terminal tasks stay terminal, late events are not
    delivered, unknown states refused with -32006); ``observe``: every verdict and metric is
    computed, traffic goes on unchanged."""
    upstreams: list[UpstreamConfig] = Field(min_length=1)
    """The A2A workers, each mounted at a path prefix (longest prefix wins); at least one."""
    limits: LimitsConfig = LimitsConfig()
    """Size and time bounds of bodies, events and answers; fair-share limits (docs/limits.md)."""
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)  # its url: the state directory at use
    """The task ledger (where task states are kept)."""
    log: LogConfig = LogConfig()
    """Log lines: level, format, batching, repeats."""
    public: PublicConfig = PublicConfig()
    """How the gateway names itself in the Agent Cards it serves."""
    streams: StreamsConfig = StreamsConfig()
    """SSE relaying: keep-alives and resubscribes."""
    admission: AdmissionConfig = AdmissionConfig()
    """Admission of new tasks against the Agent Card."""
    bridge: BridgeConfig = BridgeConfig()
    """The version bridge between v0.3 and v1.0 peers."""
    replay_window: ReplayWindowConfig = ReplayWindowConfig()
    """The replay window behind ``Last-Event-ID``."""
    sweep: SweepConfig = SweepConfig()
    """The proactive sweep: a ``GetTask`` for live tasks nobody asked about for a heartbeat."""
    timeline: TimelineConfig = TimelineConfig()
    """The task timeline kept for ``ledger show`` and the admin listener."""
    tracing: TracingConfig = TracingConfig()
    """OpenTelemetry traces over OTLP/HTTP."""
    callers: CallersConfig = CallersConfig()
    """Telling callers apart on a task (local answers only to callers seen on it)."""
    auth: AuthConfig = AuthConfig()
    """Caller authentication at the gateway (bearer JWTs)."""
    push: PushConfig = PushConfig()
    """The push-notification relay: callbacks, the outbox, webhook address checks."""
    card: GatewayCardConfig = GatewayCardConfig()
    """The gateway's own Agent Card signatures (per-upstream card settings: ``upstreams[].card``)."""

    @model_validator(mode="after")
    def _unique(self) -> GatewayConfig:
        names = [u.name for u in self.upstreams]
        prefixes = [u.prefix for u in self.upstreams]
        for label, values in (("name", names), ("prefix", prefixes)):
            dupes = sorted({v for v in values if values.count(v) > 1})
            if dupes:
                raise ValueError(f"upstreams: duplicate {label} {', '.join(dupes)}")
        if self.admin.enabled and self.admin.port and self.admin.port == self.listen.port:
            raise ValueError("admin.port: must differ from listen.port (the admin listener is "
                             "apart from the traffic port; admin.enabled: false to have none)")
        if self.callers.identity == "jwt_subject" and self.auth.jwt is None:
            raise ValueError("callers.identity: jwt_subject needs auth.jwt")
        if self.limits.callers and not self.callers.enabled:
            raise ValueError("limits.callers: needs callers.enabled (without it callers are not told apart)")
        return self


def yaml_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """A location as a YAML path: ``("upstreams", 1, "name")`` → ``upstreams[1].name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config model at a location (``("upstreams", 0, "card")`` → :class:`CardConfig`)."""
    model: Any = GatewayConfig
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return None
        model = _inner_model(model.model_fields[part].annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    """The model inside ``list[X]``, ``X | None`` or ``X``; else the annotation itself."""
    for arg in (*getattr(annotation, "__args__", ()), annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        inner = getattr(arg, "__args__", ())
        if inner and arg is not annotation:
            found = _inner_model(arg)
            if isinstance(found, type):
                return found
    return annotation


def _unknown_key(loc: tuple[Any, ...]) -> str:
    """An unknown key's problem, with the closest known keys as a hint (``difflib``)."""
    model = _model_at(loc[:-1])
    known = list(model.model_fields) if model is not None else []
    key = str(loc[-1])
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6) or [
        k for k in known if k.startswith(key) or key.startswith(k)][:3]
    if close:
        return "unknown key; did you mean " + " or ".join(repr(c) for c in close) + "?"
    return "unknown key" + (f" (known here: {', '.join(known)})" if known else "")


def _format_errors(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        if e["type"] == "extra_forbidden":
            message = _unknown_key(loc)
        else:
            message = str(e["msg"]).removeprefix("Value error, ")
        lines.append(f"{yaml_path(loc)}: {message}")
    return lines


def _normal_prefix(value: Any) -> Any:
    """A prefix as :class:`UpstreamConfig` stores it; ``None`` for one it refuses (its own
    problem line says why, and it is nobody's duplicate)."""
    if not isinstance(value, str) or not value.startswith("/"):
        return None
    return "/" + value.strip("/") if value != "/" else "/"


def _cross_problems(data: dict[str, Any]) -> list[str]:
    """The checks across keys (duplicate upstream names and prefixes, the admin port equal
    to the listen port), read from the raw document so they are reported together with every
    other problem, each at the path of the offending key (``upstreams[1].name``)."""
    lines: list[str] = []
    upstreams = data.get("upstreams")
    if isinstance(upstreams, list):
        for key, norm in (("name", lambda v: v), ("prefix", _normal_prefix)):
            first: dict[Any, int] = {}
            for i, upstream in enumerate(upstreams):
                if not isinstance(upstream, dict) or key not in upstream and key != "prefix":
                    continue
                value = norm(upstream.get(key, "/"))
                if value is None:
                    continue
                try:
                    seen = first.setdefault(value, i)
                except TypeError:  # not hashable: its own type error is reported
                    continue
                if seen != i:
                    lines.append(f"upstreams[{i}].{key}: duplicate {key} {value} "
                                 f"(also upstreams[{seen}].{key})")
    listen, admin = data.get("listen", {}), data.get("admin", {})
    if isinstance(listen, dict) and isinstance(admin, dict):
        port = listen.get("port", ListenConfig.model_fields["port"].default)
        admin_port = admin.get("port", AdminConfig.model_fields["port"].default)
        if admin.get("enabled", True) and admin_port and admin_port == port:
            lines.append("admin.port: must differ from listen.port (the admin listener is apart "
                         "from the traffic port; admin.enabled: false to have none)")
    return lines


def parse_config(data: Any) -> GatewayConfig:
    """Validate a parsed YAML document; every problem is reported at once.

    Raises:
        ConfigError: with one ``path: problem`` line per error in ``.problems`` (paths as
            :func:`yaml_path` writes them; an unknown key with a did-you-mean hint).
    """
    if not isinstance(data, dict):
        raise ConfigError(["(top level): expected a mapping"])
    cross = _cross_problems(data)
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as err:
        lines = _format_errors(err)
        if cross:  # the model's own check of the same: reported once, at its key's path
            lines = [ln for ln in lines if not ln.startswith("(top level): ")]
        raise ConfigError(cross + lines) from None
    if cross:
        raise ConfigError(cross)
    return config


def read_document(path: str | Path) -> Any:
    """A config file's YAML document, not yet validated (:func:`parse_config` does that).

    Raises:
        ConfigError: unreadable file, not UTF-8, invalid YAML (with line and column).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError([f"{path}: {err.strerror}"]) from None
    except UnicodeDecodeError as err:
        raise ConfigError([f"{path}: not UTF-8 text (byte {err.start})"]) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError([f"{path}: invalid YAML: {err}"]) from None
    except RecursionError:
        raise ConfigError([f"{path}: invalid YAML: nested too deeply"]) from None


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a YAML config file.

    Raises:
        ConfigError: unreadable file, invalid YAML (with line and column) or invalid values
            (every one at once).
    """
    data = read_document(path)
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: (top level): {not_a_mapping(data)}"])
    return parse_config(data)


def not_a_mapping(data: Any) -> str:
    """Why a config document is not one: ``expected a mapping`` and, for an empty file (YAML
    ``null``), that it is empty."""
    return "expected a mapping (the file is empty)" if data is None else "expected a mapping"


def sidecar_config(
    upstream: str,
    *,
    host: str,
    port: int,
    mode: str,
    name: str = "worker",
    ledger: str | None = None,
    heartbeat_seconds: float = 30.0,
    card_ttl_seconds: float = 300.0,
) -> GatewayConfig:
    """The config of the no-file sidecar form: one upstream mounted at ``/``.

    Raises:
        ConfigError: an invalid URL, port or ledger URL.
    """
    return parse_config(
        {
            "listen": {"host": host, "port": port},
            "mode": mode,
            "upstreams": [{"name": name, "url": upstream, "prefix": "/",
                           "heartbeat_seconds": heartbeat_seconds,
                           "card": {"ttl_seconds": card_ttl_seconds}}],
            **({"ledger": {"url": ledger}} if ledger is not None else {}),
        }
    )
