"""Genuine A2A SDK peers of both protocol versions, run as separate processes by the tests.

Four clients, one scenario format, one output format — and three genuine workers:

============  ================================  ===============================================
name          SDK                               runs as
============  ================================  ===============================================
``py03``      a2a-sdk ``>=0.3.20,<0.4``          ``.venv-a2a03/bin/python peers/client03.py``
``js03``      @a2a-js/sdk 0.3.14                 ``node peers/client03.mjs`` (npm alias ``a2a-js-03``)
``py13``      a2a-sdk 1.3 (the main venv)        ``<main venv python> peers/client13.py``
``js13``      @a2a-js/sdk 1.3.0                  ``node peers/client13.mjs`` (npm alias ``a2a-js-13``)
worker        @a2a-js/sdk 1.3.0 + express 5      ``node peers/worker13.mjs`` (:func:`js_worker`)
worker03 js   @a2a-js/sdk 0.3.14 + express 5     ``node peers/worker03.mjs`` (:func:`js_worker03`)
worker03 py   a2a-sdk 0.3 + uvicorn              ``.venv-a2a03/bin/python peers/worker03.py`` (:func:`py_worker03`)
============  ================================  ===============================================

Installs are lazy and happen once (:func:`require_peer`): the first test that needs ``py03``
or :func:`py_worker03` creates ``.venv-a2a03/`` at the repository root (``python -m venv`` +
``pip install``), the first that needs ``js03``/``js13`` or a JS worker runs ``npm ci`` in
``tests/support/peers/`` from the committed ``package.json`` + ``package-lock.json``. A stamp file in each remembers what
was installed (a digest of those inputs, so editing either reinstalls), so reruns cost nothing;
a file lock keeps two pytest processes from installing at once. When an install fails the test
is skipped with the command to run — except under CI (``CI=true``), where it fails.

The workers
-----------
``with js_worker() as base:`` (a plain context manager, for module-scoped fixtures like
``tests/e2e/conftest.py``'s ``stack``) starts ``worker13.mjs`` on 127.0.0.1 with an ephemeral
port, waits for the ``{"type": "ready", "url"}`` line it prints once listening, yields that base
URL (``http://127.0.0.1:PORT``, no trailing slash) and terminates the worker on exit (its stdin
is a pipe from this process, so it also exits if this process dies). It is the SDK's own
``DefaultRequestHandler`` + ``InMemoryTaskStore`` behind its express handlers, behaving like
``demo/worker.py`` by message text (default → ``hello <text>``, ``slow…``, ``ask…``,
``fail…``, ``direct``; see the script's header):

* ``BASE/.well-known/agent-card.json`` — the card as the SDK serves it (``signatures: []``,
  ``tenant: ""`` and the other members the 1.3 ``AgentCard`` type requires; ``streaming`` true,
  ``pushNotifications`` false);
* ``BASE/`` — JSON-RPC, v1.0 only (no v0.3 compat: requests need ``A2A-Version: 1.0``);
* ``BASE/rest`` — HTTP+JSON v1.0 (``/rest/message:send``, ``/rest/tasks/{id}``, …).

* ``GET BASE/_peer/joins/{taskId}`` — not A2A, as on the v0.3 workers below.

The card advertises exactly those two interfaces (``JSONRPC`` then ``HTTP+JSON``, both
``protocolVersion`` ``1.0``) with the port actually bound — so the v0.3 peers cannot use it
directly (their factories find no compatible interface); they reach it through the gateway.

``with js_worker03() as base:`` (@a2a-js/sdk 0.3.14, ``worker03.mjs``) and ``with py_worker03()
as base:`` (a2a-sdk 0.3 in ``.venv-a2a03``, ``worker03.py``) are the same contract for the v0.3
twins: the same behaviours by message text (states spelled ``submitted``, ``working``,
``input-required``, ``completed``, ``canceled``, ``failed``; ``fail…`` publishes ``failed``
itself rather than raising, see the scripts), v0.3 only, on one port each:

* ``BASE/.well-known/agent-card.json`` — a v0.3 card: ``protocolVersion`` ``0.3.0``, ``url``
  ``BASE/`` with ``preferredTransport`` ``JSONRPC``, ``additionalInterfaces`` ``JSONRPC`` at
  ``BASE/`` and ``HTTP+JSON`` at ``BASE/rest``; no ``supportedInterfaces``;
* ``BASE/`` — JSON-RPC v0.3 (``message/send``, ``message/stream``, ``tasks/get``, …);
* ``BASE/rest/v1/...`` — HTTP+JSON v0.3 (``/rest/v1/message:send``, ``/rest/v1/tasks/{id}``,
  ``…:cancel``, ``…:subscribe``: GET and POST on the JS worker, GET only on the Python one);
* ``GET BASE/_peer/joins/{taskId}`` — not A2A: ``{"taskId", "joins"}``, how many requests
  (resubscribe, cancel) joined the task's live events, so a test knows a resubscription is in
  place before it cancels (a2a-sdk's resubscribe sends nothing before the next event).

@a2a-js/sdk 0.3.14's REST client cannot stream from ``py_worker03``'s REST binding (it misreads
the multi-line SSE ``data:`` that a2a-sdk 0.3 sends and POSTs ``:subscribe``, which answers 405);
its unary REST calls and everything on JSON-RPC work (``tests/e2e/test_peers03.py``).

Clients
-------
Each client takes an Agent Card URL (argv) and a scenario (JSON on stdin), builds its client
from that card with the SDK's own factory (so it talks to whatever URL the card names), and
prints one JSON object per line:

``{"type": "client", "sdk", "version", "cardUrl", "transport", "endpoint", ...}``
    the SDK, the binding its factory chose (``JSONRPC`` / ``HTTP+JSON``) and the URL it took
    from the card for it, and ``requestedTransport`` (the scenario's ``transport`` or
    ``null``); ``js13`` adds the ``protocolVersion`` of its transport, ``py13`` and ``py03`` the
    SDK's ``transportClass`` (``JsonRpcTransport``, ``RestTransport``, ``Compat…`` for v0.3 in
    1.3). v0.3 peers add the card's ``preferredTransport`` and ``protocolVersion``.
``{"type": "step", "index", "op"}``
    a step begins.
``{"type": "event", "index", "at", "kind", "taskId", "contextId", "state", "final", "raw"}``
    one event (or the unary result of a ``send``, ``get``, ``cancel``; one per task a ``list``
    returned) as the SDK surfaced it; ``kind`` is the v0.3 ``kind`` (``task``,
    ``status-update``, …) or the v1.0 member (``task``, ``statusUpdate``, …); ``state`` is
    spelled as the SDK spells it; ``final`` only for v0.3; ``raw`` is the SDK's own dump of the
    object; ``at`` is seconds since the step began.
``{"type": "error", "index", "name", "text", "code", "message", "reason", "status", "cause", ...}``
    what the SDK raised: its class, text and — when the SDK exposes one — the JSON-RPC
    ``code`` and ``message`` (``py13`` derives ``code`` from the error class, so it has one on
    HTTP+JSON too; ``js13`` has none there but the ``reason`` of the error's ErrorInfo, e.g.
    ``TASK_NOT_FOUND``, and the HTTP ``status``). JS errors also carry their ``cause`` chain.
``{"type": "wire", "index", "httpMethod", "url", "rpcMethod", "status", "contentType", "a2aVersion", "body"}``
    one HTTP exchange as it reached the SDK (the response body as the SDK read it;
    ``rpcMethod`` is ``null`` on HTTP+JSON).
``{"type": "step_end", "index", "outcome"}``
    ``ended`` (the SDK's iteration finished by itself), ``stopped`` (the client stopped at the
    step's ``until``) or ``error``.
``{"type": "done"}``
    every step ran.
``{"type": "card_refused", "name", "text", ...}``
    (``py13``, ``js13`` with ``verify``) the SDK's signature verifier refused the card; the
    client exits without a ``client`` line.

A scenario is ``{"steps": [...], "timeout": seconds, "headers": {...}, "transport": binding,
"resolveFirst": bool}`` (``resolveFirst``: py13 resolves the card first, :func:`run_peer`);
each step is ``{"op", "text", "taskId", "contextId", "sameTask", "until", "pageSize", "blocking"}``
(``sameTask`` takes the task and context ids of the last event seen; ``until`` (every peer)
stops iterating after the first event whose ``state`` is that spelling, e.g.
``TASK_STATE_WORKING``, so a ``slow`` stream can be left for a later ``cancel``). The ops:

* ``send`` — non-streaming ``message/send`` / ``SendMessage``; with ``"blocking": false`` a
  non-blocking one (v0.3 ``configuration.blocking: false``, v1.0
  ``configuration.returnImmediately: true``), which the worker answers as soon as the task
  exists;
* ``stream`` — ``message/stream`` / ``SendStreamingMessage``;
* ``resubscribe`` — ``tasks/resubscribe`` / ``SubscribeToTask`` of ``taskId``;
* ``get`` (``tasks/get`` / ``GetTask``) and ``cancel`` (``tasks/cancel`` / ``CancelTask``) of
  ``taskId``, else of the last task seen: one ``task`` event;
* v1.0 peers only: ``list`` (``ListTasks``, optionally filtered by ``contextId``, with
  ``pageSize``) prints one ``task`` event per task and leaves the last task seen alone.

``headers`` go on every request (e.g. the e2e trace header). ``transport`` makes the factory
prefer that binding of the card — ``py13``: ``supported_protocol_bindings=[transport, other]``
with ``use_client_preference``, ``py03``: ``supported_transports=[transport, other]`` with
``use_client_preference``, ``js13`` and ``js03``: ``preferredTransports=[transport]`` — falling
back to the card's other binding when it lacks that one, so assert the ``client`` line's
``transport``. Without it ``py13`` and ``py03`` speak JSON-RPC only, ``js13`` takes the card's
first JSON-RPC or HTTP+JSON interface and ``js03`` the card's ``preferredTransport``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

__all__ = [
    "PEERS",
    "Peer",
    "PeerRun",
    "js_worker",
    "js_worker03",
    "py_worker03",
    "require_peer",
    "run_peer",
]

REPO = Path(__file__).resolve().parents[2]
PEERS_DIR = Path(__file__).resolve().parent / "peers"
VENV03 = REPO / ".venv-a2a03"
#: What ``.venv-a2a03`` holds: the newest a2a-sdk 0.3 (0.3.26 when this was written).
#: ``http-server`` brings starlette, fastapi and sse-starlette for ``worker03.py``; uvicorn serves it.
REQUIREMENTS03 = ("a2a-sdk[http-server]>=0.3.20,<0.4", "httpx", "uvicorn")
STAMP = ".a2a-gateway-peers-stamp"
INSTALL_TIMEOUT = 600.0  # seconds, each install command
#: What ``npm ci`` must have put in ``node_modules``: package -> version prefix.
NODE_PACKAGES = {"a2a-js-03": "0.3.", "a2a-js-13": "1.3.", "express": "5."}
WORKER_SCRIPT = "worker13.mjs"
WORKER03_JS = "worker03.mjs"
WORKER03_PY = "worker03.py"
WORKER_READY_TIMEOUT = 30.0  # seconds from spawn to the worker's ready line


@dataclass(frozen=True)
class Peer:
    name: str
    protocol: str  # "0.3" or "1.0": the protocol version the client speaks
    language: str  # "python" or "js"
    script: str  # file under tests/support/peers/


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer("py03", "0.3", "python", "client03.py"),
        Peer("js03", "0.3", "js", "client03.mjs"),
        Peer("py13", "1.0", "python", "client13.py"),
        Peer("js13", "1.0", "js", "client13.mjs"),
    )
}


# --------------------------------------------------------------------------- installs


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


class _Unavailable(Exception):
    def __init__(self, what: str, command: str, detail: str) -> None:
        super().__init__(f"cannot set up {what}: {detail.strip()[-2000:]}\nto install it by hand: {command}")


_installed: dict[str, Path | _Unavailable] = {}


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


@contextlib.contextmanager
def install_lock(what: str = "peers") -> Iterator[None]:
    """One installer of ``what`` at a time across pytest processes sharing this checkout."""
    key = hashlib.sha1(str(REPO).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"a2a-gateway-{what}-{key}.lock"
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], what: str, command: str, **kwargs: Any) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
                              stdin=subprocess.DEVNULL, check=False, **kwargs)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _Unavailable(what, command, f"{' '.join(cmd)}: {exc!r}") from exc
    if done.returncode != 0:
        raise _Unavailable(what, command, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _ensure_venv03() -> Path:
    """``.venv-a2a03/bin/python`` with a2a-sdk 0.3 installed (created on first use)."""
    command = (f"{sys.executable} -m venv {VENV03} && {VENV03}/bin/python -m pip install "
               + " ".join(f"'{r}'" for r in REQUIREMENTS03))
    what = "the a2a-sdk 0.3 peers venv (.venv-a2a03)"
    python = VENV03 / "bin" / "python"
    stamp = VENV03 / STAMP
    want = _digest(json.dumps(REQUIREMENTS03).encode(), f"{sys.version_info[:2]}".encode())
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return python
    with install_lock():
        if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
            return python  # another process installed it while we waited
        stamp.unlink(missing_ok=True)
        _run([sys.executable, "-m", "venv", "--clear", str(VENV03)], what, command)
        _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *REQUIREMENTS03],
             what, command)
        out = _run([str(python), "-c", "import a2a.client, a2a.server.apps, fastapi, httpx, uvicorn; "
                    "from importlib.metadata import version; "
                    "print(version('a2a-sdk'))"], what, command)
        if not out.strip().startswith("0.3."):
            raise _Unavailable(what, command, f"a2a-sdk {out.strip()} was installed, not 0.3.x")
        stamp.write_text(want + "\n")
    return python


def _ensure_node_modules() -> Path:
    """``tests/support/peers/node_modules`` from the committed lock file (``npm ci``)."""
    command = f"cd {PEERS_DIR} && npm ci  (node and npm: apt-get install nodejs npm)"
    what = "the @a2a-js/sdk peers (tests/support/peers/node_modules)"
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise _Unavailable(what, command, "node or npm is not on PATH")
    modules = PEERS_DIR / "node_modules"
    stamp = modules / STAMP
    want = _digest((PEERS_DIR / "package.json").read_bytes(), (PEERS_DIR / "package-lock.json").read_bytes())
    if stamp.exists() and stamp.read_text().strip() == want:
        return Path(node)
    with install_lock():
        if stamp.exists() and stamp.read_text().strip() == want:
            return Path(node)
        _run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"], what, command,
             cwd=PEERS_DIR)
        for package, major in NODE_PACKAGES.items():
            manifest = modules / package / "package.json"
            version = json.loads(manifest.read_text()).get("version", "") if manifest.exists() else ""
            if not version.startswith(major):
                raise _Unavailable(what, command, f"{package} is {version or 'missing'}, expected {major}x")
        stamp.write_text(want + "\n")
    return Path(node)


def _require(key: str) -> Path:
    """The interpreter for ``key`` (``venv03``, ``node`` or ``main``), installing what it needs on
    first use; skips the test when that fails (fails it under CI)."""
    if key not in _installed:
        try:
            if key == "venv03":
                _installed[key] = _ensure_venv03()
            elif key == "node":
                _installed[key] = _ensure_node_modules()
            else:
                _installed[key] = Path(sys.executable)
        except _Unavailable as exc:
            _installed[key] = exc
    found = _installed[key]
    if isinstance(found, _Unavailable):
        if _ci():
            pytest.fail(f"{found} (CI must be able to install the test peers)", pytrace=False)
        pytest.skip(str(found))
    return found


def require_peer(name: str) -> list[str]:
    """The command prefix that runs peer ``name`` (``[interpreter, script]``), installing what it
    needs on first use; skips the test when that fails (fails it under CI)."""
    peer = PEERS[name]
    key = "venv03" if name == "py03" else "node" if peer.language == "js" else "main"
    return [str(_require(key)), str(PEERS_DIR / peer.script)]


def _peer_env() -> dict[str, str]:
    """The environment of a peer process: loopback never proxied, no inherited NODE_OPTIONS."""
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env.pop("NODE_OPTIONS", None)
    return env


# --------------------------------------------------------------------------- the workers


def _pump(stream: IO[bytes], lines: queue.SimpleQueue[str | None]) -> None:
    """Forward the worker's stdout line by line (``None`` at EOF), so its pipe never fills."""
    with stream:
        for raw in stream:
            lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
    lines.put(None)


def _await_ready(proc: subprocess.Popen[bytes], lines: queue.SimpleQueue[str | None], stderr: IO[bytes],
                 timeout: float, script: str) -> str:
    """The ``url`` of the worker's ready line; RuntimeError (with its output) if it exits or
    stays silent for ``timeout`` seconds first."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            problem = f"printed no ready line within {timeout}s"
            break
        if line is None:
            problem = f"exited with {proc.wait()} before it was ready"
            break
        with contextlib.suppress(ValueError):
            doc = json.loads(line)
            if isinstance(doc, dict) and doc.get("type") == "ready":
                return str(doc["url"])
        seen.append(line)
    stderr.seek(0)
    detail = "\n".join([*seen, stderr.read().decode("utf-8", "replace")]).strip()[-3000:]
    raise RuntimeError(f"{script} {problem}:\n{detail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 5 s; closing its stdin tells the worker the same."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()


@contextlib.contextmanager
def _worker(interpreter: Path, script: str, host: str, timeout: float, extra: tuple[str, ...] = ()) -> Iterator[str]:
    """Run ``interpreter peers/script --port 0 --host host [extra…]``; yield the URL of its
    ready line; stop it on exit (see :func:`_stop`)."""
    cmd = [str(interpreter), str(PEERS_DIR / script), "--port", "0", "--host", host, *extra]
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                cwd=str(REPO), env=_peer_env())
        try:
            assert proc.stdout is not None
            lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
            threading.Thread(target=_pump, args=(proc.stdout, lines), name=f"{script}-stdout", daemon=True).start()
            yield _await_ready(proc, lines, stderr, timeout, script)
        finally:
            _stop(proc)


@contextlib.contextmanager
def js_worker(*, host: str = "127.0.0.1", timeout: float = WORKER_READY_TIMEOUT,
              sign_jwk: Path | None = None) -> Iterator[str]:
    """Run the genuine @a2a-js/sdk 1.3 worker (``peers/worker13.mjs``) on ``host`` and an
    ephemeral port; yield its base URL once it is listening; terminate it on exit.
    ``sign_jwk``: a private JWK file (with ``kid`` and ``alg``) the worker signs its card with,
    using the SDK's own signer.

    Installs the node modules on first use like :func:`require_peer` (skipping the test when
    that fails, failing it under CI); raises RuntimeError if the worker exits or prints no ready
    line within ``timeout`` seconds. See the module docstring for what it serves."""
    extra = ("--sign-jwk", str(sign_jwk)) if sign_jwk is not None else ()
    with _worker(_require("node"), WORKER_SCRIPT, host, timeout, extra) as base:
        yield base


@contextlib.contextmanager
def js_worker03(*, host: str = "127.0.0.1", timeout: float = WORKER_READY_TIMEOUT) -> Iterator[str]:
    """Like :func:`js_worker`, for the genuine @a2a-js/sdk 0.3 worker (``peers/worker03.mjs``):
    v0.3 only, JSON-RPC at ``BASE/``, HTTP+JSON at ``BASE/rest`` (``/rest/v1/...``)."""
    with _worker(_require("node"), WORKER03_JS, host, timeout) as base:
        yield base


@contextlib.contextmanager
def py_worker03(*, host: str = "127.0.0.1", timeout: float = WORKER_READY_TIMEOUT) -> Iterator[str]:
    """Like :func:`js_worker`, for the genuine a2a-sdk 0.3 worker (``peers/worker03.py``, run by
    ``.venv-a2a03``'s python, installing that venv on first use): v0.3 only, JSON-RPC at
    ``BASE/``, HTTP+JSON at ``BASE/rest`` (``/rest/v1/...``)."""
    with _worker(_require("venv03"), WORKER03_PY, host, timeout) as base:
        yield base


# --------------------------------------------------------------------------- runs


@dataclass
class PeerRun:
    """What one peer process printed (see the module docstring for the line types)."""

    peer: str
    returncode: int | None
    lines: list[dict[str, Any]]
    stderr: str
    timed_out: bool = False
    _junk: list[str] = field(default_factory=list)

    def of(self, kind: str, index: int | None = None) -> list[dict[str, Any]]:
        return [line for line in self.lines
                if line.get("type") == kind and (index is None or line.get("index") == index)]

    @property
    def client(self) -> dict[str, Any]:
        found = self.of("client")
        assert found, f"{self.peer} printed no client line\n{self.transcript()}"
        return found[0]

    @property
    def done(self) -> bool:
        return bool(self.of("done"))

    def events(self, index: int) -> list[dict[str, Any]]:
        return self.of("event", index)

    def errors(self, index: int) -> list[dict[str, Any]]:
        return self.of("error", index)

    def wire(self, index: int) -> list[dict[str, Any]]:
        return self.of("wire", index)

    def outcome(self, index: int) -> str | None:
        ends = self.of("step_end", index)
        return ends[0]["outcome"] if ends else None

    def surfaced(self, index: int) -> tuple[Any, Any]:
        """``(code, message)`` of the JSON-RPC error the SDK raised in step ``index`` — from the
        error itself or, for JS errors that wrap it, from the first error of its cause chain
        that carries one; ``(None, None)`` when it exposes none."""
        for error in self.errors(index):
            node: dict[str, Any] | None = error
            while node is not None:
                if isinstance(node.get("code"), int):
                    return node["code"], node.get("message")
                node = node.get("cause")
        return None, None

    def transcript(self) -> str:
        """Everything the peer printed, for assertion messages (bulky members trimmed)."""
        out = []
        for line in self.lines:
            shown = {k: v for k, v in line.items() if k not in ("raw", "traceback", "stack")}
            if "body" in shown and isinstance(shown["body"], str) and len(shown["body"]) > 1500:
                shown["body"] = shown["body"][:1500] + "…"
            out.append(json.dumps(shown))
        out.extend(f"(not JSON) {junk}" for junk in self._junk)
        if self.stderr.strip():
            out.append("stderr: " + self.stderr.strip()[-3000:])
        state = "timed out" if self.timed_out else f"exit {self.returncode}"
        return f"--- {self.peer} ({state}) ---\n" + "\n".join(out)


async def run_peer(name: str, card_url: str, steps: list[dict[str, Any]], *, timeout: float = 20.0,
                   headers: dict[str, str] | None = None, transport: str | None = None,
                   resolve_first: bool = False, verify_jwks: str | None = None) -> PeerRun:
    """Run peer ``name`` against ``card_url`` and return what it printed.

    ``transport`` (``"JSONRPC"`` / ``"HTTP+JSON"``) goes into the scenario: the binding a v1.0
    peer's factory prefers. ``resolve_first`` (py13 only): the card is fetched with the SDK's
    ``A2ACardResolver`` first (no ``A2A-Version`` on that GET), then the clients are built from
    it, as the SDK's samples build them. ``verify_jwks`` (py13, js13): the card's signatures are
    checked with the SDK's own verifier against the JWKS at that URL before the client is built
    (``card_refused`` line and exit when they do not hold). The peer's own deadline is ``timeout`` seconds; the process is
    killed 5 s after that. Does not block the event loop (the servers under test may share it)."""
    cmd = require_peer(name)
    scenario: dict[str, Any] = {"steps": steps, "timeout": timeout, "headers": headers or {}}
    if transport is not None:
        scenario["transport"] = transport
    if resolve_first:
        scenario["resolveFirst"] = True
    if verify_jwks is not None:
        scenario["verify"] = {"jwksUrl": verify_jwks}
    proc = await asyncio.create_subprocess_exec(
        *cmd, card_url, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=str(REPO), env=_peer_env())
    timed_out = False
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(json.dumps(scenario).encode()), timeout + 5.0)
    except TimeoutError:
        timed_out = True
        proc.kill()
        stdout, stderr = await proc.communicate()
    lines: list[dict[str, Any]] = []
    junk: list[str] = []
    for raw in stdout.decode("utf-8", "replace").splitlines():
        if not raw.strip():
            continue
        try:
            lines.append(json.loads(raw))
        except ValueError:
            junk.append(raw)
    return PeerRun(name, proc.returncode, lines, stderr.decode("utf-8", "replace"), timed_out, junk)
