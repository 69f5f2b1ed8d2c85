"""Gateway configuration: YAML → validated, frozen pydantic models.

Validation errors carry the YAML path of the offending key (``upstreams.0.url: …``).
See ``config/gateway.example.yaml`` for an annotated example of every key.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.errors import ConfigError

Seconds = Annotated[float, Field(gt=0)]
#: The longest ``replay_window.retention_seconds`` (ten years of 365 days): finite, and far
#: inside what a Redis key's expiry in milliseconds can hold.
TEN_YEARS = 10 * 365 * 24 * 3600


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ListenConfig(_Frozen):
    """Where the gateway listens."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
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
    probes: bool = False
    """Also answer ``GET /healthz`` and ``/readyz`` on the traffic port (for probes that can
    only reach it); ``/metrics`` is on the admin listener only."""
    pid_file: str | None = None
    """A pid file the gateway (the supervisor under ``--workers``) holds locked (``flock``)
    while it runs, its pid inside; a second gateway with the same file refuses to start (exit
    3). A path, relative ones to the working directory; its directory is created. ``None``:
    ``<db path>.pid`` beside a SQLite ledger, none for a memory or Redis ledger (see
    :mod:`gateway.pidfile`; ``serve --pid-file`` wins). Read at start only."""


class AdminConfig(_Frozen):
    """The admin listener: ``/metrics``, ``/healthz`` and ``/readyz`` on an address and port
    of their own, apart from the traffic port (``port: 0`` picks a free port, logged at
    start). ``token_file``: a file whose content (stripped) every admin request must present
    as ``Authorization: Bearer <token>``; ``/healthz`` and ``/readyz`` stay open to probes
    unless ``protect_probes``. ``tracked_refresh_seconds``: how often the tracked-task gauge
    is refreshed from the ledger in the background (a scrape never waits on the ledger)."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=8081, ge=0, le=65535)
    token_file: str | None = None
    protect_probes: bool = False
    tracked_refresh_seconds: Seconds = 15.0


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
    read: Seconds = 300.0
    write: Seconds = 30.0



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
    wait_seconds: Seconds = 5.0


class CardConfig(_Frozen):
    """How the gateway treats one upstream's Agent Card (it governs admission of new tasks).

    ``path``: where the worker serves it (the legacy ``/.well-known/agent.json`` is tried after
    a 404). ``ttl_seconds``: freshness when the worker sends no ``Cache-Control: max-age``.
    ``on_unreachable``: ``reject`` new tasks while the card cannot be fetched, or
    ``allow_stale`` (admit against the last good card). ``signed``: a signed card (a
    non-empty ``signatures`` list; absent, ``null`` or ``[]`` is unsigned and always rewritten)
    is served ``verbatim`` (it still names the worker's URLs, so clients bypass the gateway:
    warned once per card and shown by ``a2a_gateway_card_served_verbatim``) or ``strip``ped
    and rewritten. ``unguarded_interfaces``: interfaces whose binding the gateway does not
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
    ttl_seconds: Seconds = 300.0
    on_unreachable: Literal["reject", "allow_stale"] = "reject"
    signed: Literal["verbatim", "strip"] = "verbatim"
    unguarded_interfaces: Literal["drop", "keep"] = "drop"
    required_skill: str | None = None
    retry_backoff_seconds: Seconds = 1.0
    retry_max_seconds: Seconds = 60.0
    fetch_wait_seconds: Seconds = 5.0


class UpstreamConfig(_Frozen):
    """One A2A worker mounted at a path prefix of the gateway.

    A request under ``prefix`` goes to ``url`` with the rest of its path appended. POSTs to
    ``jsonrpc_path`` (relative to the mount) — or to any path the worker's card advertises a
    JSON-RPC interface at — are A2A JSON-RPC, the REST operation paths below
    the mount (docs/protocol.md §1.3) A2A REST: both pass the invariant engine. The Agent Card
    is served rewritten; every other request under the mount is relayed transparently.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    url: str
    prefix: str = "/"
    jsonrpc_path: str = "/"
    timeouts: TimeoutConfig = TimeoutConfig()
    pool: PoolConfig = PoolConfig()
    card: CardConfig = CardConfig()

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


class LimitsConfig(_Frozen):
    """Size and time limits. Bytes and seconds."""

    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    max_event_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    max_answer_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """A worker answer read whole (unary answers, Agent Cards), counted after decompression;
    past it the client gets a transport-class error (HTTP 502). Read at start-up."""
    post_terminal_drain_seconds: float = Field(default=2.0, ge=0)
    max_json_depth: int = Field(default=128, ge=8, le=512)
    """Deepest nesting of objects and arrays accepted in a JSON body, from a client (refused
    as -32600 / HTTP 400) or a worker (a transport-class error); checked before any
    recursive code reads the body."""


DEFAULT_LEDGER_URL = "sqlite:.a2a-gateway/ledger.db"


class PublicConfig(_Frozen):
    """How the gateway names itself in the Agent Cards it serves.

    ``url``: the public origin (``https://gw.example.net``); when unset, the origin of each
    request (its ``Host``) is used, or ``Forwarded`` / ``X-Forwarded-Host`` / ``-Proto`` when
    the request comes from an address in ``trusted_proxies``.
    """

    url: str | None = None
    trusted_proxies: list[str] = Field(default_factory=list)


class StreamsConfig(_Frozen):
    """SSE relaying. ``keepalive_seconds``: the gateway's own comment to the client after this
    much silence. ``resubscribe_attempts`` / ``resubscribe_backoff_seconds``: how often (and
    with what first delay, doubling) a stream cut before its task ended is resumed upstream."""

    keepalive_seconds: Seconds = 15.0
    resubscribe_attempts: int = Field(default=3, ge=0)
    resubscribe_backoff_seconds: float = Field(default=0.2, ge=0)


class AdmissionConfig(_Frozen):
    """``skill_metadata_key``: a message ``metadata`` key whose value names the skill a new
    task wants; the card must advertise it."""

    skill_metadata_key: str | None = None


class LedgerConfig(_Frozen):
    """The task ledger.

    ``url``: ``memory``, ``sqlite:///ABS/PATH.db`` / ``sqlite:REL/PATH.db`` (default: SQLite in
    ``.a2a-gateway/`` under the working directory), ``redis://[USER:PASSWORD@]HOST:PORT/DB``
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

    url: str = DEFAULT_LEDGER_URL
    max_tasks: int = Field(default=100_000, gt=0)
    retention_seconds: float = Field(default=7 * 24 * 3600, gt=0)
    prune_interval_seconds: float = Field(default=300, gt=0)
    on_unavailable: Literal["reject", "forward"] = "reject"
    min_replica_acks: int = Field(default=0, ge=0)
    """Redis only, not ``redis+cluster://``: a terminal state is stored only once this many
    replicas acknowledged it (``WAIT``), so a failover cannot lose it; fewer within
    ``replica_ack_timeout_seconds`` fails the write (the event is not forwarded, the client gets
    the ledger error). 0 (the default): acknowledged by the primary alone (docs/resume.md §4.4)."""
    replica_ack_timeout_seconds: Seconds = 1.0
    password_file: str | None = None
    """Redis only: a file holding the password of the Redis servers (a mounted Kubernetes
    Secret; one trailing newline is dropped), read at start; the URL may name the ACL user but
    then no password."""
    sentinel_username: str | None = None
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
        """The Redis settings as the ledger takes them (:class:`~gateway.ledger.redis.RedisOptions`)."""
        from gateway.ledger.redis import RedisOptions

        return RedisOptions(self.min_replica_acks, self.replica_ack_timeout_seconds,
                            self.password_file, self.sentinel_username, self.sentinel_password_file)


def _url_password(url: str) -> bool:
    """Whether a ledger URL carries a password (in its userinfo or a ``password=`` argument)."""
    rest = url.partition("://")[2]
    userinfo, at, tail = rest.rpartition("@")
    return bool(at and ":" in userinfo) or "password=" in tail.partition("?")[2]


class LogConfig(_Frozen):
    """Logging: level name, ``json`` (default) or ``text`` lines, and how late INFO lines
    may be written (batched)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "text"] = "json"
    flush_seconds: Annotated[float, Field(ge=0)] = 1.0
    """INFO/DEBUG lines are written in batches at most this late (one write per batch, not
    per request); WARNING and above at once; 0 writes every line at once."""
    repeat_window_seconds: Annotated[float, Field(ge=0)] = 10.0
    """A WARNING-or-worse line identical to one written less than this long ago (the same
    event and fields, ``duration_s`` aside) is held back and counted; the next one after the
    window carries ``repeated`` (how many were held back). 0 writes every line."""


class BridgeConfig(_Frozen):
    """The version bridge between v0.3 and v1.0 peers (docs/bridge.md §2, §3). ``enabled``: a
    client of a version the worker does not speak (its card, or ``upstreams[].protocol_versions``)
    is bridged on its own binding — served the Agent Card in its own version's shape (a v0.3
    client — no ``A2A-Version``, a 0.x one, or the legacy ``/.well-known/agent.json`` — gets a
    v0.3 card of a v1.0-only worker; a 1.x client a v1.0 card of a v0.3-only worker; such cards
    are sent with ``Vary: A2A-Version``), and its calls translated to the worker's version and
    back. ``false``: cards and calls go on in the worker's version only, as before the bridge."""

    enabled: bool = True


class ReplayWindowConfig(_Frozen):
    """The replay window behind ``Last-Event-ID`` (docs/resume.md): every SSE event the gateway
    delivers for a task carries a gateway-issued ``id:`` and is kept in the ledger's backend,
    so a client that resubscribes with ``Last-Event-ID`` gets what it missed. ``enabled``:
    ``false`` relays the worker's own event ids and keeps nothing. The bounds: events and
    payload bytes per task, events and payload bytes in all (default 256 MiB), and seconds an
    event is kept (finite, at most ten years: the Redis keys' expiry is in milliseconds)."""

    enabled: bool = True
    max_events_per_task: int = Field(default=1000, gt=0)
    max_bytes_per_task: int = Field(default=1024 * 1024, gt=0)
    max_events_total: int = Field(default=100_000, gt=0)
    max_bytes_total: int = Field(default=256 * 1024 * 1024, gt=0)
    retention_seconds: float = Field(default=3600.0, gt=0, le=TEN_YEARS)

    def limits(self) -> Any:
        """The bounds as the ledger takes them (:class:`~gateway.ledger.base.WindowLimits`)."""
        from gateway.ledger.base import WindowLimits

        return WindowLimits(max_events_per_task=self.max_events_per_task,
                            max_bytes_per_task=self.max_bytes_per_task,
                            max_events_total=self.max_events_total,
                            max_bytes_total=self.max_bytes_total,
                            retention_seconds=self.retention_seconds)


class PushConfig(_Frozen):
    """The push-notification relay (docs/push.md): every push config the gateway forwards
    names a callback URL of the gateway's own, and the worker's notifications are judged, kept
    in a durable outbox and delivered to the client's webhook. ``enabled: false`` passes push
    configs untouched (the worker then posts to the client's webhook directly, unjudged)."""

    enabled: bool = True
    callback_url: str | None = None
    """The base URL workers reach the gateway at for callbacks (``http://gateway:8080``);
    ``None``: ``public.url``, else the origin of the client's request (as for the Agent Card)."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Webhook host names allowed even when they resolve to a refused address (exact, lower
    case; a leading ``*.`` allows the subdomains)."""
    allowed_cidrs: list[str] = Field(default_factory=list)
    """Address ranges (``10.0.0.0/8``, ``127.0.0.1/32``) a webhook may resolve to although
    they are loopback, private, link-local or otherwise not global (docs/push.md §4)."""
    delivery_timeout_seconds: Seconds = 10.0
    max_attempts: int = Field(default=8, ge=1)
    """Delivery attempts of one notification before it is dead-lettered."""
    backoff_seconds: Seconds = 1.0
    """The wait after the first failed attempt; doubled after each further one."""
    backoff_max_seconds: Seconds = 300.0
    lease_seconds: Seconds = 60.0
    """How long a claimed outbox entry is one replica's to deliver (past it, another may)."""
    poll_seconds: Seconds = 0.5
    """How often the delivery loop looks for due entries when it found none."""
    max_outbox_per_task: int = Field(default=100, gt=0)
    max_outbox_total: int = Field(default=10_000, gt=0)
    max_configs_per_task: int = Field(default=10, gt=0)
    max_configs_total: int = Field(default=100_000, gt=0)
    config_retention_seconds: float = Field(default=7 * 24 * 3600, gt=0)
    """A stored push config is deleted this long after it was created."""
    max_notification_bytes: int = Field(default=1024 * 1024, gt=0)

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
    admin: AdminConfig = AdminConfig()
    mode: Literal["enforce", "observe"] = "enforce"
    upstreams: list[UpstreamConfig] = Field(min_length=1)
    limits: LimitsConfig = LimitsConfig()
    ledger: LedgerConfig = LedgerConfig()
    log: LogConfig = LogConfig()
    public: PublicConfig = PublicConfig()
    streams: StreamsConfig = StreamsConfig()
    admission: AdmissionConfig = AdmissionConfig()
    bridge: BridgeConfig = BridgeConfig()
    replay_window: ReplayWindowConfig = ReplayWindowConfig()
    push: PushConfig = PushConfig()

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
        return self


def _format_errors(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "(top level)"
        message = str(e["msg"]).removeprefix("Value error, ")
        lines.append(f"{path}: {message}")
    return lines


def parse_config(data: Any) -> GatewayConfig:
    """Validate a parsed YAML document.

    Raises:
        ConfigError: with one ``path: problem`` line per error in ``.problems``.
    """
    if not isinstance(data, dict):
        raise ConfigError(["(top level): expected a mapping"])
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err)) from None


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a YAML config file.

    Raises:
        ConfigError: unreadable file, invalid YAML (with line and column) or invalid values.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError([f"{path}: {err.strerror}"]) from None
    except UnicodeDecodeError as err:
        raise ConfigError([f"{path}: not UTF-8 text (byte {err.start})"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError([f"{path}: invalid YAML: {err}"]) from None
    except RecursionError:
        raise ConfigError([f"{path}: invalid YAML: nested too deeply"]) from None
    return parse_config(data)


def sidecar_config(
    upstream: str,
    *,
    host: str,
    port: int,
    mode: str,
    name: str = "worker",
    ledger: str = DEFAULT_LEDGER_URL,
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
            "ledger": {"url": ledger},
        }
    )
