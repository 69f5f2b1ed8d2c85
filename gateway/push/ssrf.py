"""Which webhooks the gateway may POST to (docs/push.md §4): an ``http``/``https`` URL whose
host resolves only to global unicast addresses, or to addresses inside ``push.allowed_cidrs``,
or whose host name is in ``push.allowed_hosts``. Loopback, link-local (the cloud metadata
address 169.254.169.254 among them), private, shared (100.64.0.0/10), multicast, reserved and
unspecified addresses are refused; an IPv4-mapped, 6to4 or NAT64 IPv6 address is judged as the
IPv4 address it leads to.

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


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): its last 32 bits are the IPv4 address reached."""


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to: IPv4-mapped (``::ffff:a.b.c.d``), 6to4
    (``2002:AABB:CCDD::/48``) or NAT64 (``64:ff9b::a.b.c.d``); ``None`` for any other."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_allowed(address: IPAddress, cidrs: list[str]) -> bool:
    """True for a global unicast address, or one inside one of ``cidrs``; an IPv6 address
    that leads to an IPv4 one (:func:`embedded_ipv4`) is judged as that IPv4 address."""
    address = embedded_ipv4(address) or address
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
        except (OSError, asyncio.TimeoutError, UnicodeError):  # UnicodeError: no IDNA name (a label past 63)
            raise Refused("unresolvable", f"the webhook host {host!r} does not resolve") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    refused = [a for a in addresses if not address_allowed(a, config.allowed_cidrs)]
    if refused or not addresses:
        raise Refused("address", f"the webhook host {host!r} resolves to an address the gateway does "
                                 "not send to (loopback, private, link-local or reserved; see push.allowed_cidrs)")
    return Target(url, host, str(addresses[0]))
