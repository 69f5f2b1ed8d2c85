"""Command line: ``a2a-gateway serve | check-config | replay``. Parses arguments only; the
work is done by :mod:`gateway.app`, :mod:`gateway.config` and :mod:`gateway.replay`.

Exit codes: 0 success, 1 runtime failure (ledger cannot be opened, task not found, ``replay
--strict`` found divergences, the pid file cannot be opened), 2 invalid configuration or usage
(an unreadable or empty ``admin.token_file`` too), 3 the server could not start (the listen or
the admin address in use, the pid file held by another gateway). ``serve`` runs
:func:`gateway.server.run` (or :func:`gateway.workers.supervise`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson

from gateway import __version__
from gateway.errors import ConfigError

if TYPE_CHECKING:
    from gateway.config import LedgerConfig
    from gateway.ledger.base import Stored

EXAMPLES = """\
environment: A2A_GATEWAY_CONFIG, _UPSTREAM, _HOST, _PORT, _ADMIN_HOST, _ADMIN_PORT, _MODE, _LEDGER,
_SHUTDOWN_GRACE, _HEARTBEAT_INTERVAL, _CARD_TTL, _WORKERS and _PID_FILE set the serve flags of the
same name (a flag given on the command line wins; both win over the config file).

examples:
  a2a-gateway serve --upstream http://127.0.0.1:9999/ --port 8080 --admin-port 8081
  a2a-gateway serve --upstream http://127.0.0.1:9999/ --ledger redis://127.0.0.1:6379/0
  a2a-gateway serve --config config/gateway.example.yaml
  a2a-gateway check-config config/gateway.example.yaml
  a2a-gateway replay tests/fixtures/transcripts/f04_cancel_then_completed.jsonl
  a2a-gateway ledger stats
  a2a-gateway ledger --config gateway.yaml show 6db7f1c2-...
  a2a-gateway ledger --config gateway.yaml show --tenant acme 6db7f1c2-...
"""


def _env(name: str) -> str | None:
    """A ``serve`` flag's default from ``A2A_GATEWAY_<NAME>`` (flags win over the environment;
    both win over the config file)."""
    return os.environ.get(f"A2A_GATEWAY_{name}") or None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="a2a-gateway",
        description="A2A gateway: a reverse proxy for A2A (Agent2Agent) workers that keeps "
        "task state true (one normalization boundary, absorbing terminal states, metrics) on "
        "both bindings, JSON-RPC and REST (HTTP+JSON), v1.0 and v0.3.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"a2a-gateway {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the gateway",
                           description="Run the gateway. Give --config FILE, or --upstream URL "
                           "for the no-file sidecar form (one worker mounted at /). It serves "
                           "the worker's Agent Card rewritten to point at itself and guards "
                           "JSON-RPC and REST alike; GET /metrics, /healthz and /readyz are "
                           "answered on a separate admin listener (--admin-host, --admin-port; "
                           "the traffic port relays every path to the mounts); logs are JSON "
                           "lines on stderr; SIGHUP reloads --config.")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--config", metavar="FILE", default=_env("CONFIG"),
                        help="YAML configuration file [A2A_GATEWAY_CONFIG]")
    source.add_argument("--upstream", metavar="URL", default=_env("UPSTREAM"),
                        help="the worker's base URL (sidecar form) [A2A_GATEWAY_UPSTREAM]")
    serve.add_argument("--host", default=_env("HOST"),
                       help="listen address (default 127.0.0.1, or listen.host) [A2A_GATEWAY_HOST]")
    serve.add_argument("--port", type=int, default=_env("PORT"),
                       help="listen port (default 8080, or listen.port) [A2A_GATEWAY_PORT]")
    serve.add_argument("--admin-host", metavar="HOST", default=_env("ADMIN_HOST"),
                       help="admin listener address: /metrics, /healthz, /readyz (default "
                       "127.0.0.1, or admin.host) [A2A_GATEWAY_ADMIN_HOST]")
    serve.add_argument("--admin-port", metavar="PORT", type=int, default=_env("ADMIN_PORT"),
                       help="admin listener port, 0 for a free one (logged as admin_listening; "
                       "default 8081, or admin.port) [A2A_GATEWAY_ADMIN_PORT]")
    serve.add_argument("--mode", choices=["enforce", "observe"], default=_env("MODE"),
                       help="enforce (default) applies verdicts; observe only counts them "
                       "[A2A_GATEWAY_MODE]")
    serve.add_argument("--heartbeat-interval", metavar="SECONDS", type=float,
                       default=_env("HEARTBEAT_INTERVAL"),
                       help="longest expected silence of a live task before an action on it "
                       "is preceded by a forced GetTask (default 30; sidecar form) "
                       "[A2A_GATEWAY_HEARTBEAT_INTERVAL]")
    serve.add_argument("--card-ttl", metavar="SECONDS", type=float, default=_env("CARD_TTL"),
                       help="Agent Card freshness when the worker sends no max-age "
                       "(default 300; sidecar form) [A2A_GATEWAY_CARD_TTL]")
    serve.add_argument("--shutdown-grace", metavar="SECONDS", type=float,
                       default=_env("SHUTDOWN_GRACE"),
                       help="after SIGTERM, how long requests and open streams may run on "
                       "before streams are closed cleanly (default 30, or "
                       "listen.shutdown_grace_seconds) [A2A_GATEWAY_SHUTDOWN_GRACE]")
    serve.add_argument("--workers", metavar="N", type=int, default=_env("WORKERS"),
                       help="gateway processes sharing the listen and admin sockets, one per core "
                       "(default 1); more than 1 needs a shared ledger (sqlite or redis); they "
                       "drain and exit when this process dies, even by kill -9 "
                       "[A2A_GATEWAY_WORKERS]")
    serve.add_argument("--pid-file", metavar="PATH", default=_env("PID_FILE"),
                       help="a file this process holds locked (flock) while it runs, its pid "
                       "inside; a second gateway given the same file exits 3 (default "
                       "listen.pid_file, else <db path>.pid beside a SQLite ledger; none for "
                       "memory or redis) [A2A_GATEWAY_PID_FILE]")
    serve.add_argument("--ledger", metavar="URL", default=_env("LEDGER"),
                       help="task ledger: memory, sqlite:///PATH, sqlite:REL/PATH, "
                       "redis://HOST:PORT/DB, redis+sentinel://HOST:PORT,HOST:PORT/SERVICE/DB "
                       "or redis+cluster://HOST:PORT,HOST:PORT "
                       "(default sqlite:.a2a-gateway/ledger.db, or ledger.url; the other ledger.* "
                       "settings still come from the config) [A2A_GATEWAY_LEDGER]")

    source = argparse.ArgumentParser(add_help=False)
    where = source.add_mutually_exclusive_group()
    where.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                       help="take the ledger settings (url, password files) from this config file")
    where.add_argument("--ledger", metavar="URL", default=argparse.SUPPRESS,
                       help="ledger URL (default sqlite:.a2a-gateway/ledger.db, relative to the "
                       "working directory)")
    ledger = sub.add_parser("ledger", help="inspect the task ledger", parents=[source],
                            description="Read the task ledger of a gateway (running or not). "
                            "A SQLite ledger must already exist; nothing is created.")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    show = ledger_sub.add_parser("show", help="print one task's record as JSON", parents=[source])
    show.add_argument("task_id", metavar="TASK_ID")
    show.add_argument("--upstream", metavar="NAME",
                      help="upstream name (default: every upstream of the config; 'worker' in "
                      "the sidecar form)")
    show.add_argument("--tenant", metavar="TENANT", default="",
                      help="the A2A tenant the task lives in (default: none; docs/callers.md §1)")
    ledger_sub.add_parser("stats", help="print tracked tasks by state as JSON", parents=[source])

    check = sub.add_parser("check-config", help="validate a config file and print it normalized",
                           description="Validate FILE; print the normalized config as JSON "
                           "(exit 0) or one 'yaml.path: problem' line per error (exit 2).")
    check.add_argument("file", metavar="FILE")

    rep = sub.add_parser("replay", help="judge a recorded transcript offline",
                         description="Run recorded observations (JSONL; format in "
                         "gateway/replay.py and the README) through the invariant engine and "
                         "print one verdict per line.")
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
    print(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    return 0


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
    if bool(args.config) == bool(args.upstream):
        print("a2a-gateway serve: give exactly one of --config FILE or --upstream URL", file=sys.stderr)
        return 2

    import asyncio
    import atexit

    from gateway.admin import read_token
    from gateway.config import DEFAULT_LEDGER_URL, load_config, parse_config, sidecar_config
    from gateway.errors import PidFileHeldError
    from gateway.ledger import redact
    from gateway.observability.logging import configure_logging, get_logger
    from gateway.pidfile import PidFile, default_pid_file
    from gateway.workers import LISTEN_FD_ENV

    try:
        if args.config:
            data = load_config(args.config).model_dump(mode="json")
            for key in ("host", "port"):
                if getattr(args, key) is not None:
                    data["listen"][key] = getattr(args, key)
            if args.mode:
                data["mode"] = args.mode
            if args.ledger:
                data["ledger"]["url"] = args.ledger
            config = parse_config(data)
        else:
            config = sidecar_config(args.upstream, host=args.host or "127.0.0.1",
                                    port=args.port if args.port is not None else 8080,
                                    mode=args.mode or "enforce",
                                    ledger=args.ledger or DEFAULT_LEDGER_URL,
                                    heartbeat_seconds=args.heartbeat_interval or 30.0,
                                    card_ttl_seconds=args.card_ttl or 300.0)
        data = config.model_dump(mode="json")  # flags of both forms
        if args.shutdown_grace is not None:
            data["listen"]["shutdown_grace_seconds"] = args.shutdown_grace
        if args.admin_host:
            data["admin"]["host"] = args.admin_host
        if args.admin_port is not None:
            data["admin"]["port"] = args.admin_port
        config = parse_config(data)
        if config.admin.enabled:
            read_token(config.admin)  # an unreadable or empty token file: exit 2 now
    except ConfigError as err:
        for line in err.problems:
            print(line, file=sys.stderr)
        return 2
    if args.config and (args.heartbeat_interval or args.card_ttl):
        print("--heartbeat-interval and --card-ttl belong to the sidecar form; set "
              "upstreams[].heartbeat_seconds and upstreams[].card.ttl_seconds in the config",
              file=sys.stderr)
        return 2
    workers = args.workers if args.workers is not None else 1
    if workers < 1 or (workers > 1 and config.ledger.url == "memory"):
        print("a2a-gateway serve: --workers must be 1 or more, and more than 1 needs a shared "
              "ledger (--ledger sqlite:///PATH or redis://HOST:PORT/DB), not memory", file=sys.stderr)
        return 2
    if workers > 1:  # SIGHUP means "reload" to the supervisor: never die of one before it listens
        import signal

        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    configure_logging(config.log.level, config.log.format, config.log.flush_seconds,
                      config.log.repeat_window_seconds)
    # Taken before the ledger is touched, so a refused start flags no live task for a resync;
    # held until this process exits. A worker of serve --workers N takes none: its supervisor holds it.
    given = args.pid_file or config.listen.pid_file
    pid_file = given or default_pid_file(config.ledger.url)
    if pid_file is not None and LISTEN_FD_ENV not in os.environ:
        try:
            atexit.register(PidFile(pid_file).release)
        except PidFileHeldError as err:
            print(f"a2a-gateway serve: {err}", file=sys.stderr)
            return 3
        except OSError as err:
            beside = "" if given else f" (beside ledger {redact(config.ledger.url)})"
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
        "workers": workers})
    if workers > 1:
        from gateway.workers import supervise

        return supervise(args.argv, host=config.listen.host, port=config.listen.port, admin=admin,
                         workers=workers, grace_seconds=config.listen.shutdown_grace_seconds,
                         log=get_logger())
    from gateway.server import run

    return run(config, args.config)


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

    from gateway.config import DEFAULT_LEDGER_URL, load_config
    from gateway.ledger import ledger_from_url, redact, sqlite_path

    config_file = getattr(args, "config", None)
    try:
        settings = load_config(config_file).ledger if config_file else None
        url = settings.url if settings else getattr(args, "ledger", DEFAULT_LEDGER_URL)
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
                found = [s for s in [await ledger.get(n, args.task_id, tenant=args.tenant) for n in names] if s]
                if not found:
                    tenant = f" in tenant {args.tenant!r}" if args.tenant else ""
                    print(f"task {args.task_id}{tenant} is not in the ledger under upstream "
                          f"{', '.join(names)}", file=sys.stderr)
                    return 1
                doc = [_record_json(r) for r in found]
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
    """A ledger entry as ``ledger show`` prints it: the record's fields, then the ledger's
    ``version`` and ``needs_resync`` kept beside it. The callers' fingerprints are not shown,
    only how many were seen (docs/callers.md §6)."""
    import dataclasses

    doc = dataclasses.asdict(stored.record)
    doc["callers"] = len(stored.record.callers)
    return {**doc, "version": stored.version, "needs_resync": stored.needs_resync}
