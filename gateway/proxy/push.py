"""The push relay's ends on the proxy (docs/push.md): the callback endpoint a worker posts its
notifications to, the callback base of the configs rewritten on the way in, and the
client-less driver that performs the relay's other exchanges. Every decision is an exchange of
:mod:`gateway.exchange.push`; this module only builds the driver (:class:`Driver`) that
performs its commands.
"""

from __future__ import annotations

from typing import Any

from gateway.exchange.commands import CommandGenerator
from gateway.exchange.push import CALLBACK_PATH, find_callback, notification
from gateway.proxy.card import public_base
from gateway.proxy.driver import Driver
from gateway.proxy.forward import Route
from gateway.proxy.runtime import Runtime
from gateway.proxy.sweep import SweepDriver
from gateway.proxy.types import Receive, Scope, Send


def callback_base(rt: Runtime, route: Route, scope: Scope) -> str:
    """The base of this gateway's callback URLs: ``push.callback_url``, else ``public.url``
    without the mount, else the listener address the request came to (``scope["server"]``)
    — never the request's ``Host`` or forwarded headers, which the client writes: they
    would make the worker post anywhere, the cloud metadata address included
    (docs/push.md §1)."""
    configured = rt.config.push.callback_url
    if configured:
        return configured.rstrip("/")
    if rt.config.public.url:
        base = public_base(rt.config.public, route, scope).rstrip("/")
        prefix = route.upstream.prefix.rstrip("/")
        return base[: len(base) - len(prefix)] if prefix and base.endswith(prefix) else base
    host, port = scope.get("server") or ("127.0.0.1", None)
    host = f"[{host}]" if ":" in host else host
    scheme = "https" if scope.get("scheme") == "https" else "http"
    return f"{scheme}://{host}" if port is None else f"{scheme}://{host}:{port}"


async def serve_callback(rt: Runtime, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve one request to a callback URL (docs/push.md §2): the
    :func:`~gateway.exchange.push.find_callback` exchange, then — for the config's upstream —
    :func:`~gateway.exchange.push.notification`, each performed by a :class:`Driver`."""
    push = rt.push
    assert push is not None  # the app routes callbacks here only with a relay
    callback_id = scope["path"][len(CALLBACK_PATH):]
    upstreams = {u.name: u for u in rt.config.upstreams}
    # the config's upstream is not known yet: find_callback reports nothing and names no task,
    # so the first upstream's driver performs it (only its ledger and client commands)
    any_upstream = rt.config.upstreams[0]
    finder = Driver(rt, Route(any_upstream, "/"), scope, send, rt.reporter(any_upstream.name), "push")
    try:
        await finder.run(find_callback(scope["method"], callback_id, frozenset(upstreams)))
    finally:
        await finder.aclose()
    entry = finder.value
    if entry is None:
        return
    upstream = upstreams[entry.upstream]
    policy = rt.policy(upstream, rt.card_cache(upstream).heartbeat_seconds())
    driver = Driver(rt, Route(upstream, "/"), scope, send, rt.reporter(upstream.name), "push")
    driver.receive = receive
    token = _header(scope, b"x-a2a-notification-token") or ""
    cfg = rt.config.push
    try:
        await driver.run(notification(policy, entry, token, cfg.max_notification_bytes, push.limits))
    finally:
        await driver.aclose()


def perform_for(rt: Runtime) -> Any:
    """What performs an exchange no client asked for on an upstream (named) and returns its
    result: a client-less :class:`~gateway.proxy.sweep.SweepDriver` (``PushRelay.perform``).

    Raises:
        LookupError: no upstream of that name under the config in force.
    """

    async def perform(upstream_name: str, gen: CommandGenerator[Any]) -> Any:
        upstream = next((u for u in rt.config.upstreams if u.name == upstream_name), None)
        if upstream is None:
            raise LookupError(f"no upstream {upstream_name!r}")
        driver = SweepDriver(rt, upstream)
        try:
            await driver.run(gen)
        finally:
            await driver.aclose()
        return driver.value

    return perform


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
