"""Run real ASGI apps under real uvicorn for integration tests, and poll instead of sleeping.

Public API
----------
- ``serve_in_thread(app, *, name="server", ...)`` -> context manager yielding :class:`RunningServer`.
  uvicorn runs in a daemon thread with its own event loop, bound to 127.0.0.1 on an ephemeral port.
- ``serve_async(app, *, name="server", ...)`` -> async context manager yielding :class:`RunningServer`;
  uvicorn runs as a task in the *current* event loop (so asyncio objects can be shared with the app).
- ``wait_until(predicate, timeout=5.0, interval=0.01, message=None)`` / ``await_until(...)``:
  poll until the predicate is truthy, else ``AssertionError``.  Use these instead of sleeps.
- ``free_port()`` -> an unused TCP port on 127.0.0.1 (for subprocess servers).
- ``subprocess_server(cmd, url_for_ready, *, env=None, timeout=20, cwd=None, inherit_env=True,
  pass_fds=())`` -> context manager yielding a :class:`ServerProcess` (a ``subprocess.Popen``) once
  ``url_for_ready`` answers HTTP 200; SIGTERM (then SIGKILL) on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn

__all__ = [
    "RunningServer",
    "ServerProcess",
    "await_until",
    "free_port",
    "serve_async",
    "serve_in_thread",
    "subprocess_server",
    "wait_until",
]

HOST = "127.0.0.1"
READY_TIMEOUT = 10.0
GRACEFUL_SHUTDOWN = 1


@dataclass
class RunningServer:
    """A uvicorn server that is accepting connections."""

    name: str
    host: str
    port: int
    server: uvicorn.Server
    app: Any
    #: The event loop the app runs in (the server thread's loop for serve_in_thread).
    loop: asyncio.AbstractEventLoop | None = None
    thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """Base URL without trailing slash, e.g. ``http://127.0.0.1:54321``."""
        return f"http://{self.host}:{self.port}"

    def url_for(self, path: str) -> str:
        """``url_for("/x")`` -> ``http://127.0.0.1:<port>/x``."""
        return self.url + (path if path.startswith("/") else "/" + path)


class _NotifyingServer(uvicorn.Server):
    """uvicorn.Server that signals the moment startup finished (or failed)."""

    def __init__(self, config: uvicorn.Config, on_startup_done: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_startup_done = on_startup_done
        self.loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        """uvicorn's loop, looking at ``should_exit`` every 10 ms instead of every 100 ms: a
        test's server stops at once when asked (uvicorn's own ticks are for its date header)."""
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            await asyncio.sleep(0.01)
            should_exit = await self.on_tick(0 if counter % 100 == 0 else 1)  # 0: the date header, once a second

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        try:
            await super().startup(sockets=sockets)
        finally:
            self._on_startup_done()


def _make_config(app: Any, config_overrides: Mapping[str, Any] | None) -> uvicorn.Config:
    kwargs: dict[str, Any] = dict(
        host=HOST,
        port=0,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
    )
    kwargs.update(config_overrides or {})
    return uvicorn.Config(app, **kwargs)


def _bound_port(server: uvicorn.Server) -> int:
    for srv in getattr(server, "servers", []):
        for sock in srv.sockets or ():
            return int(sock.getsockname()[1])
    raise RuntimeError("uvicorn server has no listening socket")


def _before_shutdown_hook(app: Any, before_shutdown: Callable[[], Any] | None) -> Callable[[], Any] | None:
    if before_shutdown is not None:
        return before_shutdown
    # ScriptedWorker (and anything with the same hook) ends its held-open streams so that
    # uvicorn's graceful shutdown does not wait for them.
    hook = getattr(app, "close_streams", None)
    return hook if callable(hook) else None


@contextlib.contextmanager
def serve_in_thread(
    app: Any,
    *,
    name: str = "server",
    ready_timeout: float = READY_TIMEOUT,
    before_shutdown: Callable[[], Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> Iterator[RunningServer]:
    """Serve ``app`` with uvicorn on 127.0.0.1:<ephemeral> in a daemon thread.

    Readiness is signalled by an event set right after uvicorn's startup (no sleeps); if the
    server has not started within ``ready_timeout`` seconds, or startup failed, RuntimeError is
    raised.  On exit the server is asked to stop (``should_exit``), the thread is joined with a
    bound, and ``force_exit`` is used if graceful shutdown takes too long.

    ``config`` overrides uvicorn.Config keyword arguments.  ``before_shutdown`` (default: the
    app's ``close_streams`` method if it has one) is called before stopping the server.
    """
    ready = threading.Event()
    server = _NotifyingServer(_make_config(app, config), ready.set)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run()
        except BaseException as exc:  # noqa: BLE001 - includes SystemExit from uvicorn startup failure
            failure.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=run, name=f"uvicorn-{name}", daemon=True)
    thread.start()
    if not ready.wait(ready_timeout):
        server.should_exit = True
        server.force_exit = True
        thread.join(5)
        raise RuntimeError(f"{name}: uvicorn did not start within {ready_timeout}s")
    if not server.started:
        thread.join(5)
        raise RuntimeError(f"{name}: uvicorn failed to start: {failure[0]!r}" if failure else f"{name}: uvicorn failed to start")

    running = RunningServer(
        name=name, host=HOST, port=_bound_port(server), server=server, app=app, loop=server.loop, thread=thread
    )
    try:
        yield running
    finally:
        hook = _before_shutdown_hook(app, before_shutdown)
        if hook is not None:
            hook()
        server.should_exit = True
        thread.join(GRACEFUL_SHUTDOWN + 4)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5)
        if thread.is_alive():
            raise RuntimeError(f"{name}: uvicorn thread did not stop")
        if failure and not isinstance(failure[0], SystemExit):
            raise RuntimeError(f"{name}: uvicorn thread crashed: {failure[0]!r}") from failure[0]


@contextlib.asynccontextmanager
async def serve_async(
    app: Any,
    *,
    name: str = "server",
    ready_timeout: float = READY_TIMEOUT,
    before_shutdown: Callable[[], Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> AsyncIterator[RunningServer]:
    """Like :func:`serve_in_thread` but runs uvicorn as a task in the current event loop."""
    ready = asyncio.Event()
    server = _NotifyingServer(_make_config(app, config), ready.set)
    task = asyncio.create_task(server.serve(), name=f"uvicorn-{name}")
    ready_waiter = asyncio.create_task(ready.wait())
    try:
        done, _ = await asyncio.wait({task, ready_waiter}, timeout=ready_timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready_waiter.cancel()
    if not server.started:
        server.should_exit = server.force_exit = True
        if task.done():
            exc = None if task.cancelled() else task.exception()
            raise RuntimeError(f"{name}: uvicorn failed to start: {exc!r}")
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 5)
        raise RuntimeError(f"{name}: uvicorn did not start within {ready_timeout}s")

    running = RunningServer(name=name, host=HOST, port=_bound_port(server), server=server, app=app, loop=server.loop)
    try:
        yield running
    finally:
        hook = _before_shutdown_hook(app, before_shutdown)
        if hook is not None:
            hook()
        server.should_exit = True
        done, _ = await asyncio.wait({task}, timeout=GRACEFUL_SHUTDOWN + 4)
        if not done:
            server.force_exit = True
            done, _ = await asyncio.wait({task}, timeout=5)
        if not done:
            task.cancel()
            raise RuntimeError(f"{name}: uvicorn task did not stop")
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if not isinstance(exc, SystemExit):
                raise RuntimeError(f"{name}: uvicorn task crashed: {exc!r}") from exc


# --------------------------------------------------------------------------- polling helpers


def _describe(predicate: Any) -> str:
    return getattr(predicate, "__qualname__", None) or repr(predicate)


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 5.0,
    interval: float = 0.01,
    message: str | None = None,
) -> Any:
    """Poll ``predicate()`` until it returns a truthy value, and return that value.

    An AssertionError raised by the predicate counts as "not yet" (its text is reported on
    timeout).  Raises AssertionError after ``timeout`` seconds.  Blocks the calling thread: from
    async code use :func:`await_until`.
    """
    deadline = time.monotonic() + timeout
    last_error: AssertionError | None = None
    while True:
        try:
            value = predicate()
        except AssertionError as exc:
            last_error, value = exc, None
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f" (last assertion: {last_error})" if last_error else ""
            raise AssertionError(f"{message or 'condition ' + _describe(predicate)} not met within {timeout}s{detail}")
        time.sleep(interval)


async def await_until(
    predicate: Callable[[], Any | Awaitable[Any]],
    timeout: float = 5.0,
    interval: float = 0.01,
    message: str | None = None,
) -> Any:
    """Async :func:`wait_until`; ``predicate`` may be sync or return an awaitable."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last_error: AssertionError | None = None
    while True:
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
        except AssertionError as exc:
            last_error, value = exc, None
        if value:
            return value
        if loop.time() >= deadline:
            detail = f" (last assertion: {last_error})" if last_error else ""
            raise AssertionError(f"{message or 'condition ' + _describe(predicate)} not met within {timeout}s{detail}")
        await asyncio.sleep(interval)


# --------------------------------------------------------------------------- subprocess servers


def free_port() -> int:
    """An ephemeral TCP port on 127.0.0.1 that was free a moment ago (inherently racy)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class ServerProcess(subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` whose stdout/stderr go to temp files readable at any time."""

    stdout_path: str
    stderr_path: str

    def stdout_text(self) -> str:
        return _read_text(self.stdout_path)

    def stderr_text(self) -> str:
        return _read_text(self.stderr_path)


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _stop_process(proc: subprocess.Popen, grace: float = 5.0) -> None:  # type: ignore[type-arg]
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(5)


@contextlib.contextmanager
def subprocess_server(
    cmd: Sequence[str],
    url_for_ready: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 20,
    cwd: str | os.PathLike[str] | None = None,
    inherit_env: bool = True,
    stop_timeout: float = 5.0,
    pass_fds: Sequence[int] = (),
) -> Iterator[ServerProcess]:
    """Start ``cmd``, wait until GET ``url_for_ready`` returns 200, yield the process, stop it.

    ``env`` is merged over ``os.environ`` unless ``inherit_env=False``.  stdout/stderr are
    captured to temp files (``proc.stdout_text()`` / ``proc.stderr_text()``); stderr is included in
    the RuntimeError raised if the process exits early or is not ready within ``timeout`` s.
    On exit: SIGTERM, then SIGKILL after ``stop_timeout`` s. ``pass_fds``: file descriptors
    the process inherits (``subprocess.Popen``'s).
    """
    full_env = {**os.environ, **(env or {})} if inherit_env else dict(env or {})
    with tempfile.TemporaryDirectory(prefix="a2a-subproc-") as tmp:
        out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = ServerProcess(list(cmd), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=full_env, cwd=cwd,
                                 pass_fds=tuple(pass_fds))
        proc.stdout_path, proc.stderr_path = out_path, err_path
        try:
            _wait_http_ready(proc, url_for_ready, timeout)
            yield proc
        finally:
            _stop_process(proc, stop_timeout)


def _wait_http_ready(proc: ServerProcess, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: str = "no attempt"
    with httpx.Client(trust_env=False, timeout=1.0) as client:
        while True:
            code = proc.poll()
            if code is not None:
                raise RuntimeError(
                    f"process {proc.args!r} exited with {code} before {url} was ready; stderr:\n{proc.stderr_text()}"
                )
            try:
                resp = client.get(url)
                if resp.status_code == 200:
                    return
                last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            if time.monotonic() >= deadline:
                _stop_process(proc)
                raise RuntimeError(
                    f"process {proc.args!r}: {url} not ready within {timeout}s (last: {last}); stderr:\n{proc.stderr_text()}"
                )
            time.sleep(0.05)
