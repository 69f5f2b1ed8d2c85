"""Which webhooks the gateway may POST to (docs/push.md §4): an ``http``/``https`` URL whose
host resolves only to global unicast addresses, or to addresses inside ``push.allowed_cidrs``,
or whose host name is in ``push.allowed_hosts``. Loopback, link-local (the cloud metadata
address 169.254.169.254 among them), private, shared (100.64.0.0/10), multicast, reserved and
unspecified addresses are refused; an IPv4-mapped IPv6 address is judged as its IPv4 address.

The host is resolved when the push config is created and again before every delivery (DNS
rebinding), and the delivery connects to the address just checked (:class:`Target`), not to
whatever a second resolution would give.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.config import PushConfig

RESOLVE_TIMEOUT = 5.0
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Target:
    """A webhook allowed now: the ``url``, its ``host`` name and the checked ``address`` to
    connect to (``None``: the host is allowed by name, connect as usual)."""

    url: str
    host: str
    address: str | None


class Refused(Exception):
    """A webhook the gateway does not POST to; ``reason`` is a bounded label (``scheme``,
    ``address``, ``unresolvable``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _host_allowed(host: str, allowed: list[str]) -> bool:
    host = host.lower().rstrip(".")
    for item in allowed:
        item = item.lower().rstrip(".")
        if host == item or (item.startswith("*.") and host.endswith(item[1:])):
            return True
    return False


def address_allowed(address: IPAddress, cidrs: list[str]) -> bool:
    """True for a global unicast address, or one inside one of ``cidrs``."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    if any(address in ipaddress.ip_network(c, strict=False) for c in cidrs):
        return True
    return address.is_global and not (address.is_multicast or address.is_reserved
                                      or address.is_link_local or address.is_loopback
                                      or address.is_unspecified or address.is_private)


async def check_webhook(url: str, config: PushConfig) -> Target:
    """The webhook ``url`` as a :class:`Target`, resolved and checked now.

    Raises:
        Refused: not http(s) or no host (``scheme``), the host does not resolve within
            :data:`RESOLVE_TIMEOUT` seconds (``unresolvable``), or some address it resolves to
            is not allowed (``address``).
    """
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused("scheme", "the webhook URL is not a URL") from None
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise Refused("scheme", "the webhook URL must be http:// or https:// with a host")
    if _host_allowed(host, config.allowed_hosts):
        return Target(url, host, None)
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT)
        except (OSError, asyncio.TimeoutError):
            raise Refused("unresolvable", f"the webhook host {host!r} does not resolve") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    refused = [a for a in addresses if not address_allowed(a, config.allowed_cidrs)]
    if refused or not addresses:
        raise Refused("address", f"the webhook host {host!r} resolves to an address the gateway does "
                                 "not send to (loopback, private, link-local or reserved; see push.allowed_cidrs)")
    return Target(url, host, str(addresses[0]))
