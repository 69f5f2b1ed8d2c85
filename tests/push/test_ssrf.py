"""Which webhooks the gateway may reach (gateway/push/ssrf.py, docs/push.md §4)."""

from __future__ import annotations

import ipaddress

import pytest

from gateway.config import PushConfig
from gateway.push.delivery import pinned_request
from gateway.push.ssrf import Refused, Target, address_allowed, check_webhook


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
                                     "100.64.0.1", "0.0.0.0", "224.0.0.1", "::1", "fe80::1", "fd00::1",
                                     "::ffff:127.0.0.1", "::ffff:169.254.169.254", "240.0.0.1",
                                     # 6to4 and NAT64 addresses that lead to loopback, metadata, private
                                     "2002:7f00:1::1", "2002:a9fe:a9fe::1", "2002:a00:1::",
                                     "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::a00:1"])
def test_non_global_addresses_are_refused(address: str) -> None:
    assert not address_allowed(ipaddress.ip_address(address), [])


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8",
                                     "64:ff9b::808:808"])  # NAT64 (DNS64 on an IPv6-only host)
def test_global_addresses_are_allowed(address: str) -> None:
    assert address_allowed(ipaddress.ip_address(address), [])


def test_an_allowance_lets_a_range_through_and_nothing_else() -> None:
    assert address_allowed(ipaddress.ip_address("127.0.0.1"), ["127.0.0.1/32"])
    assert not address_allowed(ipaddress.ip_address("127.0.0.2"), ["127.0.0.1/32"])
    assert address_allowed(ipaddress.ip_address("::ffff:10.0.0.5"), ["10.0.0.0/8"])
    assert address_allowed(ipaddress.ip_address("2002:a00:5::1"), ["10.0.0.0/8"])


async def test_creation_time_checks_resolve_the_host() -> None:
    strict = PushConfig()
    for url, reason in [("ftp://8.8.8.8/x", "scheme"), ("http:///nohost", "scheme"),
                        ("http://127.0.0.1:9/hook", "address"), ("http://localhost/hook", "address"),
                        ("http://169.254.169.254/latest/meta-data", "address"),
                        ("http://no-such-host.invalid/hook", "unresolvable"),
                        ("http://" + "a" * 64 + ".example/hook", "unresolvable")]:  # no IDNA name
        with pytest.raises(Refused) as refused:
            await check_webhook(url, strict)
        assert refused.value.reason == reason, url
    allowed = PushConfig(allowed_cidrs=["127.0.0.1/32"], allowed_hosts=["*.corp.example"])
    assert await check_webhook("http://127.0.0.1:9/hook", allowed) == Target("http://127.0.0.1:9/hook", "127.0.0.1",
                                                                               "127.0.0.1")
    by_name = await check_webhook("https://hooks.corp.example/x", allowed)
    assert by_name.address is None  # allowed by name: not resolved, connected to as usual
    assert (await check_webhook("https://8.8.8.8/x", strict)).address == "8.8.8.8"


def test_a_delivery_connects_to_the_checked_address() -> None:
    url, headers, extensions = pinned_request(Target("https://hooks.example.net:8443/a?b=1", "hooks.example.net",
                                                     "93.184.216.34"))
    assert url == "https://93.184.216.34:8443/a?b=1"
    assert headers == {"Host": "hooks.example.net:8443"} and extensions == {"sni_hostname": "hooks.example.net"}
    url, headers, _ = pinned_request(Target("http://h.example/x", "h.example", "2606:4700::1"))
    assert url == "http://[2606:4700::1]/x" and headers == {"Host": "h.example"}
    assert pinned_request(Target("https://a.example/", "a.example", None)) == ("https://a.example/", {}, {})
