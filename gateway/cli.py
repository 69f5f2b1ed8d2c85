"""Command line: ``a2a-gateway serve | check-config | replay | ledger``. Parses arguments and
applies the one precedence rule of every setting (:data:`SERVE_SETTINGS`: a flag, else its
``A2A_GATEWAY_*`` variable, else the config file, else the default; :func:`resolve`,
:func:`serve_config`); the work is done by :mod:`gateway.app`, :mod:`gateway.config` and
:mod:`gateway.replay`.

Exit codes: 0 success, 1 runtime failure (ledger cannot be opened, task not found, ``replay
--strict`` found divergences, the pid file cannot be opened), 2 invalid configuration or usage
(an unreadable or empty ``admin.token_file`` too), 3 the server could not start (the listen or
the admin address in use, the pid file held by another gateway). ``serve`` runs
:func:`gateway.server.run` (or :func:`gateway.workers.supervise`).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from gateway import __version__
from gateway.errors import ConfigError

if TYPE_CHECKING:
    from gateway.config import GatewayConfig, LedgerConfig
    from gateway.ledger.base import Stored, TimelineEntry

@dataclass(frozen=True, slots=True)
class Setting:
    """One ``serve`` setting: its flag, its environment variable and the config key it sets
    (``path``; ``None``: no key, or a rule of its own). Precedence, for every one: the flag,
    else the variable, else the config file, else the default."""

    dest: str
    env: str
    kind: type
    path: tuple[str, ...] | None
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")


SERVE_SETTINGS = (
    Setting("config", "A2A_GATEWAY_CONFIG", str, None, "YAML configuration file", "FILE"),
    Setting("upstream", "A2A_GATEWAY_UPSTREAM", str, None,
            "the worker's base URL. Without a config file: the sidecar form (one upstream "
            "'worker' mounted at /); with one: the url of its only upstream (a file with "
            "several upstreams is refused)", "URL"),
    Setting("host", "A2A_GATEWAY_HOST", str, ("listen", "host"), "listen address (default 127.0.0.1)"),
    Setting("port", "A2A_GATEWAY_PORT", int, ("listen", "port"), "listen port (default 8080)"),
    Setting("admin_host", "A2A_GATEWAY_ADMIN_HOST", str, ("admin", "host"),
            "admin listener address: /metrics, /healthz, /readyz (default 127.0.0.1)", "HOST"),
    Setting("admin_port", "A2A_GATEWAY_ADMIN_PORT", int, ("admin", "port"),
            "admin listener port, 0 for a free one (logged as admin_listening; default 8081)", "PORT"),
    Setting("mode", "A2A_GATEWAY_MODE", str, ("mode",),
            "enforce (default) applies verdicts; observe only counts them", None, ("enforce", "observe")),
    Setting("ledger", "A2A_GATEWAY_LEDGER", str, ("ledger", "url"),
            "task ledger: memory, sqlite:///PATH, sqlite:REL/PATH, redis://HOST:PORT/DB, "
            "redis+sentinel://HOST:PORT,HOST:PORT/SERVICE/DB or redis+cluster://HOST:PORT,HOST:PORT "
            "(default sqlite:///$A2A_GATEWAY_STATE_DIR/ledger.db; the other ledger.* settings "
            "still come from the config)", "URL"),
    Setting("shutdown_grace", "A2A_GATEWAY_SHUTDOWN_GRACE", float, ("listen", "shutdown_grace_seconds"),
            "after SIGTERM, how long requests and open streams may run on before streams are "
            "closed cleanly (default 30)", "SECONDS"),
    Setting("heartbeat_interval", "A2A_GATEWAY_HEARTBEAT_INTERVAL", float, None,
            "longest expected silence of a live task before an action on it is preceded by a "
            "forced GetTask; sets upstreams[].heartbeat_seconds of every upstream (default 30)", "SECONDS"),
    Setting("card_ttl", "A2A_GATEWAY_CARD_TTL", float, None,
            "Agent Card freshness when the worker sends no max-age; sets "
            "upstreams[].card.ttl_seconds of every upstream (default 300)", "SECONDS"),
    Setting("workers", "A2A_GATEWAY_WORKERS", int, None,
            "gateway processes sharing the listen and admin sockets, one per core (default 1); "
            "more than 1 needs a shared ledger (sqlite or redis); they drain and exit when this "
            "process dies, even by kill -9", "N"),
    Setting("pid_file", "A2A_GATEWAY_PID_FILE", str, ("listen", "pid_file"),
            "a file this process holds locked (flock) while it runs, its pid inside; a second "
            "gateway given the same file exits 3 (default <db path>.pid beside a SQLite ledger; "
            "none for memory or redis)", "PATH"),
)
"""Every ``serve`` setting with a flag and an environment variable."""

LEDGER_SETTINGS = tuple(s for s in SERVE_SETTINGS if s.dest in ("config", "ledger"))
"""The settings the ``ledger`` subcommands read, by the same rule."""


_KEY_OF = {"config": "(the file itself)", "upstream": "upstreams[0].url",
           "heartbeat_interval": "upstreams[].heartbeat_seconds", "card_ttl": "upstreams[].card.ttl_seconds"}
"""The config key of the settings without a ``path`` (``--help``)."""


def _environment_help(settings: Sequence[Setting] = SERVE_SETTINGS) -> str:
    """The environment section of ``--help``: every variable, its flag and config key; for
    ``serve`` also the caller secret and OpenTelemetry's ``OTEL_*``, which have no flag."""
    lines = ["environment (a flag wins over its variable, a variable over the config file, the "
             "file over the default):"]
    for s in settings:
        key = ".".join(s.path) if s.path else _KEY_OF.get(s.dest, "-")
        lines.append(f"  {s.env:32} {s.flag:22} {key}")
    lines.append(f"  {STATE_DIR_ENV:32} {'':22} the state directory of the default SQLite "
                 "ledger (else $XDG_STATE_HOME/a2a-gateway, else ~/.local/state/a2a-gateway)")
    if settings is SERVE_SETTINGS:
        lines.append(f"  {CALLER_SECRET_ENV:32} {'':22} the caller-fingerprint secret; wins over "
                     "callers.secret_file (docs/callers.md §4)")
        lines.append(f"  {'OTEL_*':32} {'':22} tracing: the OpenTelemetry SDK's own variables "
                     "(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_TRACES_EXPORTER, OTEL_SDK_DISABLED, ...); "
                     "they win over the config file's tracing.* (docs/observability.md §1)")
    return "\n".join(lines) + "\n"


EXAMPLES = """\
examples:
  a2a-gateway serve --upstream http://127.0.0.1:9999/ --port 8080 --admin-port 8081
  a2a-gateway serve --upstream http://127.0.0.1:9999/ --ledger redis://127.0.0.1:6379/0
  a2a-gateway serve --config config/gateway.example.yaml
  A2A_GATEWAY_PORT=9090 a2a-gateway serve --config config/gateway.example.yaml
  a2a-gateway check-config config/gateway.example.yaml
  a2a-gateway replay tests/fixtures/transcripts/f04_cancel_then_completed.jsonl
  a2a-gateway ledger stats
  a2a-gateway ledger show 6db7f1c2-...     # why was a message refused: the task's record and timeline
  a2a-gateway ledger --config gateway.yaml show 6db7f1c2-...
  a2a-gateway ledger --config gateway.yaml show --tenant acme 6db7f1c2-...
"""


STATE_DIR_ENV = "A2A_GATEWAY_STATE_DIR"  # gateway.config.STATE_DIR_ENV (not imported: --help stays fast)
CALLER_SECRET_ENV = "A2A_GATEWAY_CALLER_SECRET"  # gateway.proxy.callers.SECRET_ENV (not imported: the same)


class UsageError(Exception):
    """A setting's value that cannot be used: one line naming where it came from."""


def resolve(args: argparse.Namespace, settings: Sequence[Setting] = SERVE_SETTINGS,
            environ: Mapping[str, str] | None = None) -> dict[str, tuple[Any, str]]:
    """Each setting given by a flag or an environment variable: ``dest -> (value, source)``,
    ``source`` the flag (``--port``) or the variable (``A2A_GATEWAY_PORT``); the flag wins.

    Raises:
        UsageError: a variable's value is not of the setting's type or choices
            (``A2A_GATEWAY_PORT: invalid int value 'x'``).
    """
    environ = os.environ if environ is None else environ
    out: dict[str, tuple[Any, str]] = {}
    for s in settings:
        given = getattr(args, s.dest, None)
        if given is not None:
            out[s.dest] = (given, s.flag)
            continue
        raw = environ.get(s.env) or None
        if raw is None:
            continue
        try:
            value = s.kind(raw)
        except ValueError:
            hint = (" (a Kubernetes service link of a Service named a2a-gateway? set "
                    "enableServiceLinks: false)") if raw.startswith("tcp://") else ""
            raise UsageError(f"{s.env}: invalid {s.kind.__name__} value {raw!r}{hint}") from None
        if s.choices and value not in s.choices:
            raise UsageError(f"{s.env}: invalid choice {raw!r} (choose from {', '.join(s.choices)})")
        out[s.dest] = (value, s.env)
    return out


def serve_config(given: Mapping[str, tuple[Any, str]]) -> GatewayConfig:
    """The configuration ``serve`` runs: the config file (if one is given), then every
    setting ``given`` (:func:`resolve`) on top of it. ``upstream`` without a file is the
    sidecar form (one upstream ``worker`` at ``/``); with a file it replaces the url of the
    file's only upstream.

    Raises:
        ConfigError: an unreadable or invalid file, a value that does not validate (its line
            names the flag or variable: ``listen.port (from --port): …``), neither a file
            nor an upstream, or an upstream URL for a file of several upstreams.
    """
    from gateway.config import not_a_mapping, parse_config, read_document

    config_file = given.get("config", (None, ""))[0]
    upstream = given.get("upstream")
    sources: dict[str, str] = {}  # config path -> the flag or variable its value came from
    if config_file:
        data = read_document(config_file)
        if not isinstance(data, dict):
            raise ConfigError([f"{config_file}: (top level): {not_a_mapping(data)}"])
        data = copy.deepcopy(data)
    elif upstream:
        data = {"upstreams": [{"name": "worker", "url": upstream[0], "prefix": "/"}]}
        sources["upstreams[0].url"] = upstream[1]
    else:
        raise ConfigError(["a2a-gateway serve: give --config FILE or --upstream URL "
                           "(or A2A_GATEWAY_CONFIG / A2A_GATEWAY_UPSTREAM)"])
    upstreams = data.get("upstreams")
    if config_file and upstream:
        if not (isinstance(upstreams, list) and len(upstreams) == 1 and isinstance(upstreams[0], dict)):
            count = len(upstreams) if isinstance(upstreams, list) else 0
            raise ConfigError([f"upstreams ({upstream[1]}): {upstream[1]} sets the url of the config "
                               f"file's only upstream, and {config_file} has {count}; set each "
                               f"upstreams[].url in the file instead"])
        upstreams[0]["url"] = upstream[0]
        sources["upstreams[0].url"] = upstream[1]
    for s in SERVE_SETTINGS:
        if s.path is None or s.dest not in given:
            continue
        value, source = given[s.dest]
        section = data
        for key in s.path[:-1]:
            section = section.setdefault(key, {}) if isinstance(section.get(key, {}), dict) else {}
        section[s.path[-1]] = value
        sources[".".join(s.path)] = source
    for dest, keys in (("heartbeat_interval", ("heartbeat_seconds",)), ("card_ttl", ("card", "ttl_seconds"))):
        if dest in given and isinstance(upstreams, list):
            value, source = given[dest]
            for i, entry in enumerate(upstreams):
                if isinstance(entry, dict):
                    target = entry.setdefault("card", {}) if len(keys) == 2 else entry
                    if isinstance(target, dict):
                        target[keys[-1]] = value
                        sources[f"upstreams[{i}].{'.'.join(keys)}"] = source
    try:
        return parse_config(data)
    except ConfigError as err:
        raise ConfigError([_with_source(line, sources) for line in err.problems]) from None


def _with_source(line: str, sources: Mapping[str, str]) -> str:
    """A problem line with the flag or variable its value came from: ``listen.port (from
    A2A_GATEWAY_PORT): …``."""
    path, sep, message = line.partition(": ")
    source = sources.get(path)
    return f"{path} (from {source}){sep}{message}" if source else line


def _parser() -> argparse.ArgumentParser:
    epilog = _environment_help() + "\n" + EXAMPLES
    parser = argparse.ArgumentParser(
        prog="a2a-gateway",
        description="A2A gateway: a reverse proxy for A2A (Agent2Agent) workers that keeps "
        "task state true (one normalization boundary, absorbing terminal states, metrics) on "
        "both bindings, JSON-RPC and REST (HTTP+JSON), v1.0 and v0.3.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"a2a-gateway {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the gateway", epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           description="Run the gateway. Give --config FILE, or --upstream URL "
                           "for the no-file sidecar form (one worker mounted at /). It serves "
                           "the worker's Agent Card rewritten to point at itself and guards "
                           "JSON-RPC and REST alike; GET /metrics, /healthz and /readyz are "
                           "answered on a separate admin listener (--admin-host, --admin-port; "
                           "the traffic port relays every path to the mounts); logs are JSON "
                           "lines on stderr (log.format: text for key=value lines); SIGHUP "
                           "reloads --config (flags and variables still win over it).")
    for s in SERVE_SETTINGS:
        serve.add_argument(s.flag, metavar=s.metavar, type=s.kind, choices=s.choices, default=None,
                           help=f"{s.help} [{s.env}]")

    ledger_epilog = _environment_help(LEDGER_SETTINGS)
    source = argparse.ArgumentParser(add_help=False)
    source.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                        help="take the ledger settings (url, password files) from this config "
                        "file [A2A_GATEWAY_CONFIG]")
    source.add_argument("--ledger", metavar="URL", default=argparse.SUPPRESS,
                        help="ledger URL; wins over the config file's (default "
                        "sqlite:///$A2A_GATEWAY_STATE_DIR/ledger.db, as serve) [A2A_GATEWAY_LEDGER]")
    ledger = sub.add_parser("ledger", help="inspect the task ledger", parents=[source],
                            epilog=ledger_epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
                            description="Read the task ledger of a gateway (running or not), found "
                            "by the rule serve uses. A SQLite ledger must already exist; nothing "
                            "is created.")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    show = ledger_sub.add_parser("show", help="print one task's record and timeline", parents=[source],
                                 description="Print the task's record and its timeline (what the gateway "
                                 "judged about it, oldest first; docs/observability.md §2), times in "
                                 "ISO-8601 UTC. --json prints the same as JSON.",
                                 epilog=ledger_epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("task_id", metavar="TASK_ID")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.add_argument("--upstream", metavar="NAME",
                      help="upstream name (default: every upstream of the config; 'worker' in "
                      "the sidecar form)")
    show.add_argument("--tenant", metavar="TENANT", default="",
                      help="the A2A tenant the task lives in (default: none; docs/callers.md §1)")
    ledger_sub.add_parser("stats", help="print tracked tasks by state as JSON", parents=[source],
                          epilog=ledger_epilog, formatter_class=argparse.RawDescriptionHelpFormatter)

    check = sub.add_parser("check-config", help="validate a config file and print it normalized",
                           description="Validate FILE; print the normalized config as JSON "
                           "(exit 0) or one 'yaml.path: problem' line per error, every error "
                           "at once (exit 2). The environment is not read: the file alone is "
                           "checked. Files it names (certificates, keys, token, secret, JWKS and "
                           "password files) and a SQLite ledger's directory that this host lacks "
                           "are 'warning: yaml.path: ...' lines on stderr, exit 0 (serve here "
                           "would stop).", epilog="environment: none read (" + STATE_DIR_ENV +
                           " only sets the default ledger.url printed)")
    check.add_argument("file", metavar="FILE")

    rep = sub.add_parser("replay", help="judge a recorded transcript offline",
                         description="Run recorded observations (JSONL; format in "
                         "gateway/replay.py and docs/guide/replay.md) through the invariant engine and "
                         "print one verdict per line.", epilog="environment: none read")
    rep.add_argument("file", metavar="FILE.jsonl")
    rep.add_argument("--strict", action="store_true",
                     help="exit 1 when any line has a divergence or a rejection (for CI)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``a2a-gateway`` console script. Returns the exit code."""
    args = _parser().parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    if args.command == "check-config":
        return _check_config(args.file)
    if args.command == "replay":
        return _replay(args.file, strict=args.strict)
    if args.command == "ledger":
        return _ledger(args)
    return _serve(args)


def _check_config(path: str) -> int:
    from gateway.config import load_config
    from gateway.ledger import redact

    try:
        config = load_config(path)
    except ConfigError as err:
        for line in err.problems:
            print(line, file=sys.stderr)
        return 2
    data = config.model_dump(mode="json")
    data["ledger"]["url"] = redact(data["ledger"]["url"])
    for upstream in data["upstreams"]:  # an upstream URL may carry basic-auth credentials
        upstream["url"] = redact(upstream["url"])
    print(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    for line in missing_on_this_host(config):
        print(f"warning: {line}", file=sys.stderr)
    return 0


def missing_on_this_host(config: GatewayConfig) -> list[str]:
    """The files the config names (certificates, keys, token, secret, JWKS and password files,
    card-signing and trusted card keys)
    that this host does not have, and a SQLite ledger's directory when missing (other than the
    state directory, which ``serve`` creates): one ``yaml.path: problem`` line each. Warnings
    of ``check-config`` (exit 0), since a file is often checked away from the host it is for;
    ``serve`` here would stop (exit 2, or 1 for the directory)."""
    from gateway.config import state_dir
    from gateway.ledger import sqlite_path

    named: list[tuple[str, str | None]] = [
        ("admin.token_file", config.admin.token_file),
        ("callers.secret_file", config.callers.secret_file),
        ("ledger.password_file", config.ledger.password_file),
        ("ledger.sentinel_password_file", config.ledger.sentinel_password_file)]
    if config.listen.tls is not None:
        tls = config.listen.tls
        named += [("listen.tls.cert_file", tls.cert_file), ("listen.tls.key_file", tls.key_file),
                  ("listen.tls.client_ca_file", tls.client_ca_file)]
    for i, upstream in enumerate(config.upstreams):
        named += [(f"upstreams[{i}].tls.{key}", getattr(upstream.tls, key))
                  for key in ("ca_file", "cert_file", "key_file")]
    if config.auth.jwt is not None:
        named.append(("auth.jwt.jwks_file", config.auth.jwt.jwks_file))
    for i, upstream in enumerate(config.upstreams):
        trust = upstream.card.trust
        named.append((f"upstreams[{i}].card.trust.jwks_file", trust.jwks_file))
        named += [(f"upstreams[{i}].card.trust.keys[{j}].public_key_file", key.public_key_file)
                  for j, key in enumerate(trust.keys)]
    signing = config.card.signing
    if signing is not None:
        named.append(("card.signing.key_file", signing.key_file))
        if signing.previous is not None:
            named.append(("card.signing.previous.key_file", signing.previous.key_file))
    lines = [f"{where}: {path}: not found on this host" for where, path in named
             if path and not os.path.isfile(path)]
    url = config.ledger.url
    if url.startswith("sqlite:"):
        directory = sqlite_path(url).absolute().parent
        if not directory.exists() and directory != state_dir():
            lines.append(f"ledger.url: the directory {directory} does not exist on this host")
    return lines


def _replay(path: str, *, strict: bool = False) -> int:
    from gateway.errors import TranscriptError
    from gateway.replay import replay

    flagged = 0
    try:
        with open(path, encoding="utf-8") as fh:
            for verdict in replay(fh):
                print(verdict.render())
                if verdict.action == "reject" or any(
                    f.startswith(("divergence:", "rejection:")) for f in verdict.findings
                ):
                    flagged += 1
    except OSError as err:
        print(f"{path}: {err.strerror}", file=sys.stderr)
        return 2
    except TranscriptError as err:
        print(f"{path}: {err}", file=sys.stderr)
        return 2
    if strict and flagged:
        print(f"{flagged} line(s) with divergences or rejections", file=sys.stderr)
        return 1
    return 0


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import atexit

    from gateway.admin import read_token
    from gateway.errors import PidFileHeldError
    from gateway.ledger import redact
    from gateway.observability.logging import configure_logging, get_logger
    from gateway.pidfile import PidFile, default_pid_file
    from gateway.workers import LISTEN_FD_ENV

    try:
        given = resolve(args)
        config = serve_config(given)
        if config.admin.enabled:
            read_token(config.admin)  # an unreadable or empty token file: exit 2 now
        check_tls_files(config)
    except UsageError as err:
        print(f"a2a-gateway serve: {err}", file=sys.stderr)
        return 2
    except ConfigError as err:
        for line in err.problems:
            print(line, file=sys.stderr)
        return 2
    values = {dest: value for dest, (value, _) in given.items()}
    args.config, args.pid_file, args.workers = (values.get("config"), values.get("pid_file"),
                                                values.get("workers"))
    workers = args.workers if args.workers is not None else 1
    if workers < 1 or (workers > 1 and config.ledger.url == "memory"):
        source = given["workers"][1]
        print(f"a2a-gateway serve: {workers} (from {source}): --workers must be 1 or more, and "
              "more than 1 needs a shared ledger (--ledger sqlite:///PATH or redis://HOST:PORT/DB), "
              "not memory", file=sys.stderr)
        return 2
    if workers > 1:  # SIGHUP means "reload" to the supervisor: never die of one before it listens
        import signal

        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    configure_logging(config.log.level, config.log.format, config.log.flush_seconds,
                      config.log.repeat_window_seconds, max_queued=config.log.max_queued_lines)
    # Taken before the ledger is touched, so a refused start flags no live task for a resync;
    # held until this process exits. A worker of serve --workers N takes none: its supervisor holds it.
    problem = sqlite_directory(config.ledger.url)  # before the pid file beside it is made
    if problem:
        print(f"ledger {redact(config.ledger.url)}: {problem}", file=sys.stderr)
        return 1
    chosen = args.pid_file or config.listen.pid_file
    pid_file = chosen or default_pid_file(config.ledger.url)
    if pid_file is not None and LISTEN_FD_ENV not in os.environ:
        try:
            atexit.register(PidFile(pid_file).release)
        except PidFileHeldError as err:
            print(f"a2a-gateway serve: {err}", file=sys.stderr)
            return 3
        except OSError as err:
            beside = "" if chosen else f" (beside ledger {redact(config.ledger.url)})"
            print(f"a2a-gateway serve: cannot open the pid file {os.path.abspath(pid_file)}{beside}: "
                  f"{err.strerror}", file=sys.stderr)
            return 1
    problem = asyncio.run(_check_ledger(config.ledger, resync=workers > 1))
    if problem:
        print(f"ledger {redact(config.ledger.url)}: {problem}", file=sys.stderr)
        return 1
    admin = (config.admin.host, config.admin.port) if config.admin.enabled else None
    get_logger().info("starting", extra={
        "listen": f"{config.listen.host}:{config.listen.port}",
        "admin": f"{admin[0]}:{admin[1]}" if admin else None, "mode": config.mode,
        "ledger": redact(config.ledger.url), "upstreams": {u.prefix: u.url for u in config.upstreams},
        "workers": workers, **state_dir_in_use(config)})
    if workers > 1:
        from gateway.workers import supervise

        return supervise(args.argv, host=config.listen.host, port=config.listen.port, admin=admin,
                         workers=workers, grace_seconds=config.listen.shutdown_grace_seconds,
                         log=get_logger())
    from gateway.server import run

    # a reload (SIGHUP) re-reads the file under the same flags and variables
    return run(config, args.config, reload=(lambda: serve_config(given)) if args.config else None)


def state_dir_in_use(config: GatewayConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{"state_dir": PATH}`` for the ``starting`` line when this run keeps something in the
    state directory (:func:`gateway.config.state_dir`): a SQLite ledger there (the default
    one), or the generated caller secret of a Redis ledger (no ``A2A_GATEWAY_CALLER_SECRET``,
    no ``callers.secret_file``; docs/callers.md §4); else ``{}``, so an explicit ``--ledger``
    elsewhere names no directory it does not use."""
    from gateway.config import state_dir
    from gateway.ledger import sqlite_path

    environ = os.environ if environ is None else environ
    url, directory = config.ledger.url, state_dir()
    if url.startswith("sqlite:"):
        used = sqlite_path(url).absolute().parent == directory
    else:
        callers = config.callers
        used = (url != "memory" and callers.enabled and not callers.secret_file
                and not environ.get(CALLER_SECRET_ENV))
    return {"state_dir": str(directory)} if used else {}


def check_tls_files(config: GatewayConfig) -> None:
    """Load ``listen.tls`` and every ``upstreams[].tls`` once, so unusable files are a
    configuration error (exit 2) before anything starts.

    Raises:
        ConfigError: a file cannot be read, is not PEM, or a key does not match.
    """
    from gateway.tls import client_context, server_context

    if config.listen.tls is not None:
        server_context(config.listen.tls)
    for upstream in config.upstreams:
        client_context(upstream.tls, upstream.name)


def sqlite_directory(url: str) -> str | None:
    """For a SQLite ledger URL whose directory is missing: create it when it is the state
    directory (:func:`gateway.config.state_dir`, mode 0700) and return ``None``; else the
    problem, one line. ``None`` for any other ledger."""
    from gateway.config import state_dir
    from gateway.ledger import sqlite_path

    if not url.startswith("sqlite:"):
        return None
    directory = sqlite_path(url).absolute().parent
    if directory.exists():
        return None
    if directory == state_dir():
        try:
            directory.mkdir(mode=0o700, parents=True)
        except OSError as err:
            return f"cannot create the state directory {directory}: {err.strerror}"
        return None
    return (f"the directory {directory} does not exist; create it, or leave ledger.url unset "
            f"for the default in the state directory ({STATE_DIR_ENV}, now {state_dir()})")


async def _check_ledger(settings: LedgerConfig, *, resync: bool = False) -> str | None:
    """Open and close the ledger ``settings`` (a :class:`~gateway.config.LedgerConfig`) name
    once, so a bad path, a down Redis or an unreadable password file is one clear line.
    ``resync``: also flag the live tasks for a resync (``serve --workers``: once, here)."""
    from gateway.ledger import ledger_from_url
    from gateway.observability.logging import get_logger

    ledger = ledger_from_url(settings.url, redis=settings.redis_options())
    try:
        await ledger.open()
        if resync:
            flagged = await ledger.mark_resync()
            get_logger().info("ledger_opened", extra={"backend": ledger.backend, "needs_resync": flagged})
    except Exception as exc:  # any backend failure becomes one readable line
        return f"cannot open: {type(exc).__name__}: {exc}"
    finally:
        await ledger.close()
    return None


def _ledger(args: argparse.Namespace) -> int:
    import asyncio

    from gateway.config import default_ledger_url, load_config
    from gateway.ledger import ledger_from_url, redact, sqlite_path

    try:
        given = resolve(args, LEDGER_SETTINGS)
    except UsageError as err:
        print(f"a2a-gateway ledger: {err}", file=sys.stderr)
        return 2
    config_file = given.get("config", (None, ""))[0]
    args.config = config_file  # the upstream names of `show` come from it too
    try:
        settings = load_config(config_file).ledger if config_file else None
        url = given["ledger"][0] if "ledger" in given else (settings.url if settings else default_ledger_url())
        if url.startswith("sqlite:") and not sqlite_path(url).is_file():
            print(f"{url}: no ledger database at {sqlite_path(url).resolve()}", file=sys.stderr)
            return 1
        ledger = ledger_from_url(url, redis=settings.redis_options() if settings else None)
    except ConfigError as err:
        for line in err.problems:
            print(line, file=sys.stderr)
        return 2
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2

    async def run() -> int:
        try:
            await ledger.open()
        except Exception as exc:  # any backend failure: report it, do not trace
            print(f"{redact(url)}: cannot open ledger: {type(exc).__name__}", file=sys.stderr)
            return 1
        try:
            if args.ledger_command == "stats":
                counts = await ledger.count_by_state()
                doc: object = {"backend": ledger.backend, "url": redact(url), "tasks": sum(counts.values()),
                               "by_state": counts}
            else:
                names = [args.upstream] if args.upstream else _upstreams(args)
                found = []
                for name in names:
                    stored = await ledger.get(name, args.task_id, tenant=args.tenant)
                    entries = await ledger.timeline(name, args.task_id, tenant=args.tenant)
                    if stored is not None or entries:
                        found.append((name, stored, entries))
                if not found:
                    tenant = f" in tenant {args.tenant!r}" if args.tenant else ""
                    hint = "" if args.upstream or args.config else (
                        " (the sidecar form's name; a gateway run with --config names its upstreams "
                        "there: add --config FILE or --upstream NAME)")
                    print(f"task {args.task_id}{tenant} is not in the ledger under upstream "
                          f"{', '.join(names)}{hint}", file=sys.stderr)
                    return 1
                if not args.json:
                    print("\n\n".join(_task_text(args.task_id, *item) for item in found))
                    return 0
                doc = [_task_json(*item) for item in found]
            print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
            return 0
        finally:
            await ledger.close()

    return asyncio.run(run())


def _upstreams(args: argparse.Namespace) -> list[str]:
    """Upstream names to look a task up under: the config's, else the sidecar default."""
    config_file = getattr(args, "config", None)
    if config_file:
        from gateway.config import load_config

        return [u.name for u in load_config(config_file).upstreams]
    return ["worker"]


def _record_json(stored: Stored) -> dict[str, object]:
    """A ledger entry as ``ledger show --json`` prints it: the record's fields, then the ledger's
    ``version`` and ``needs_resync`` kept beside it. The callers' fingerprints are not shown,
    only how many were seen (docs/callers.md §6)."""
    import dataclasses

    doc = dataclasses.asdict(stored.record)
    doc["callers"] = len(stored.record.callers)
    return {**doc, "version": stored.version, "needs_resync": stored.needs_resync}


def _task_json(upstream: str, stored: Stored | None, entries: list[TimelineEntry]) -> dict[str, object]:
    """``ledger show --json``: the record (``None`` when pruned) and the timeline, times as
    ISO-8601 UTC (``observed_at`` stays epoch seconds, ``observed_at_utc`` beside it)."""
    from gateway.observability.status_page import iso

    record: dict[str, object] | None = None
    if stored is not None:
        record = {**_record_json(stored), "observed_at_utc": iso(stored.record.observed_at)}
    return {"upstream": upstream, "record": record,
            "timeline": [{**e.to_doc(), "at": iso(e.at)} for e in entries]}


def _task_text(task_id: str, upstream: str, stored: Stored | None, entries: list[TimelineEntry]) -> str:
    """``ledger show``: the record's state, then the timeline, one observation per line."""
    from gateway.observability.status_page import iso, printable, timeline_lines

    lines = [f"task {task_id} (upstream {upstream})"]
    if stored is None:
        lines.append("  record: none (pruned or never stored)")
    else:
        r = stored.record
        flags = (["terminal"] if r.terminal else []) + (
            ["poisoned: the worker contradicted its terminal state"] if r.poisoned else [])
        lines += [f"  state        {r.state.value}{' (' + ', '.join(flags) + ')' if flags else ''}",
                  f"  context      {r.context_id or '-'}",
                  f"  observed at  {iso(r.observed_at)}",
                  f"  version {stored.version}, needs_resync {'yes' if stored.needs_resync else 'no'}, "
                  f"card ETag {r.card_etag or '-'}, card generation {r.card_generation or '-'}"]
    if not entries:
        lines.append("timeline: none kept")
    else:
        lines.append(f"timeline ({len(entries)} entries, oldest first; UTC):")
        lines += [f"  {line}" for line in timeline_lines(entries)]
    return "\n".join(printable(line) for line in lines)  # a worker's context id or ETag included
