"""Command line: ``a2a-gateway serve | check-config | replay``. Parses arguments only; the
work is done by :mod:`gateway.app`, :mod:`gateway.config` and :mod:`gateway.replay`.

Exit codes: 0 success, 1 runtime failure, 2 invalid configuration or usage, 3 the listen
socket could not be opened (uvicorn's startup failure).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import orjson

from gateway import __version__
from gateway.errors import ConfigError

EXAMPLES = """\
examples:
  a2a-gateway serve --upstream http://127.0.0.1:9999/ --port 8080
  a2a-gateway serve --config config/gateway.example.yaml
  a2a-gateway check-config config/gateway.example.yaml
  a2a-gateway replay tests/fixtures/transcripts/f04_cancel_then_completed.jsonl
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="a2a-gateway",
        description="A2A gateway: a reverse proxy for A2A (Agent2Agent) workers that keeps "
        "task state true (one normalization boundary, absorbing terminal states, metrics).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"a2a-gateway {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the gateway",
                           description="Run the gateway. Give --config FILE, or --upstream URL "
                           "for the no-file sidecar form (one worker mounted at /).")
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", metavar="FILE", help="YAML configuration file")
    source.add_argument("--upstream", metavar="URL", help="the worker's base URL (sidecar form)")
    serve.add_argument("--host", help="listen address (default 127.0.0.1, or listen.host)")
    serve.add_argument("--port", type=int, help="listen port (default 8080, or listen.port)")
    serve.add_argument("--mode", choices=["enforce", "observe"],
                       help="enforce (default) applies verdicts; observe only counts them")

    check = sub.add_parser("check-config", help="validate a config file and print it normalized",
                           description="Validate FILE; print the normalized config as JSON "
                           "(exit 0) or one 'yaml.path: problem' line per error (exit 2).")
    check.add_argument("file", metavar="FILE")

    rep = sub.add_parser("replay", help="judge a recorded transcript offline",
                         description="Run recorded observations (JSONL; format in "
                         "gateway/replay.py and the README) through the invariant engine and "
                         "print one verdict per line.")
    rep.add_argument("file", metavar="FILE.jsonl")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``a2a-gateway`` console script. Returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "check-config":
        return _check_config(args.file)
    if args.command == "replay":
        return _replay(args.file)
    return _serve(args)


def _check_config(path: str) -> int:
    from gateway.config import load_config

    try:
        config = load_config(path)
    except ConfigError as err:
        for line in err.problems:
            print(line, file=sys.stderr)
        return 2
    print(orjson.dumps(config.model_dump(mode="json"), option=orjson.OPT_INDENT_2).decode())
    return 0


def _replay(path: str) -> int:
    from gateway.replay import TranscriptError, replay

    try:
        with open(path, encoding="utf-8") as fh:
            for verdict in replay(fh):
                print(verdict.render())
    except OSError as err:
        print(f"{path}: {err.strerror}", file=sys.stderr)
        return 2
    except TranscriptError as err:
        print(f"{path}: {err}", file=sys.stderr)
        return 2
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import build_app
    from gateway.config import load_config, parse_config, sidecar_config
    from gateway.observability.logging import configure_logging

    try:
        if args.config:
            data = load_config(args.config).model_dump(mode="json")
            for key in ("host", "port"):
                if getattr(args, key) is not None:
                    data["listen"][key] = getattr(args, key)
            if args.mode:
                data["mode"] = args.mode
            config = parse_config(data)
        else:
            config = sidecar_config(args.upstream, host=args.host or "127.0.0.1",
                                    port=args.port if args.port is not None else 8080,
                                    mode=args.mode or "enforce")
    except ConfigError as err:
        for line in err.problems:
            print(line, file=sys.stderr)
        return 2
    configure_logging(config.log.level, config.log.format)
    app = build_app(config)
    uvicorn.run(app, host=config.listen.host, port=config.listen.port, log_level="warning",
                access_log=False, timeout_graceful_shutdown=10)
    return 0
