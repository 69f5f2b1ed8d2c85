"""A gateway loads only what its configuration uses (docs/performance.md, RSS): redis-py for a
Redis ledger, PyJWT and cryptography for ``auth.jwt``. Each costs about 11 and 19 MB of RSS
per process, so a default gateway (SQLite ledger, no caller authentication) must never import
them. Checked in a fresh interpreter that builds and starts the app as ``serve`` does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import asyncio, json, sys
from gateway.app import build_app
from gateway.config import parse_config
import gateway.cli, gateway.server

config = parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/"}],
                       "ledger": {"url": %r}})
app = build_app(config)

async def main():  # the ASGI lifespan as uvicorn drives it: start-up (the ledger opens), shutdown
    inbox = asyncio.Queue()
    for message in ({"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}):
        inbox.put_nowait(message)
    said = []

    async def send(message):
        said.append(message["type"])

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, send)
    assert said == ["lifespan.startup.complete", "lifespan.shutdown.complete"], said

asyncio.run(main())
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


@pytest.mark.parametrize("url", ["memory", "sqlite:///{tmp}/ledger.db"])
def test_a_gateway_without_redis_or_jwt_never_imports_them(tmp_path, url: str) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE % url.format(tmp=tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "gateway" in loaded and "starlette" in loaded  # the probe did build the gateway
    assert not loaded & {"redis", "jwt", "cryptography"}, loaded & {"redis", "jwt", "cryptography"}
