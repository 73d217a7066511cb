"""The SSRF rule: which addresses and URLs HTTP jobs may call (no connection is ever made)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from django.core.exceptions import ValidationError
from django.test import override_settings

from django_strait.dispatch.ssrf import (
    AddressGuard,
    AddressRefused,
    GuardedResolver,
    Refusal,
    is_forbidden,
    refusal,
    url_problem,
)
from django_strait.models import Job


def nets(*cidrs: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# is_forbidden / refusal


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.0.0.1", "private"),
        ("10.255.255.255", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.254", "private"),
        ("192.168.1.1", "private"),
        ("127.0.0.1", "loopback"),
        ("127.0.0.2", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("fd00::1", "private"),
        ("fc00::1", "private"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("0.1.2.3", "this-network"),
        ("100.64.0.1", "shared address space (CGNAT)"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.1", "benchmarking"),
        ("192.0.2.1", "documentation"),
        ("2001:db8::1", "documentation"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("fec0::1", "site-local"),
        ("::ffff:10.0.0.1", "private 10.0.0.1 inside"),
        ("::ffff:127.0.0.1", "loopback 127.0.0.1 inside"),
        ("64:ff9b::a9fe:a9fe", "link-local 169.254.169.254 inside"),
        ("2002:a00:1::", "private 10.0.0.1 inside"),
    ],
)
def test_refusal__non_public_address__names_the_reason(address, reason):
    assert refusal(address) == reason
    assert is_forbidden(address, ())


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "2001:4860:4860::8888",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
        "172.32.0.1",
        "100.128.0.1",
        "11.0.0.1",
    ],
)
def test_is_forbidden__public_address__is_allowed(address):
    assert refusal(address) is None
    assert not is_forbidden(address, ())


def test_is_forbidden__accepts_address_objects():
    assert is_forbidden(ipaddress.ip_address("10.0.0.1"), ())
    assert not is_forbidden(ipaddress.ip_address("8.8.8.8"), ())


def test_is_forbidden__allow_list__admits_only_its_networks():
    allowed = nets("127.0.0.1/32")

    assert not is_forbidden("127.0.0.1", allowed)
    assert is_forbidden("127.0.0.2", allowed)
    assert is_forbidden("::1", allowed)
    assert is_forbidden("10.0.0.1", allowed)


def test_is_forbidden__allow_list__covers_ipv4_mapped_form_of_its_addresses():
    allowed = nets("10.20.0.0/16")

    assert not is_forbidden("::ffff:10.20.1.2", allowed)
    assert is_forbidden("::ffff:10.21.1.2", allowed)


def test_is_forbidden__allow_list__ipv6_network():
    allowed = nets("fd00:1234::/32")

    assert not is_forbidden("fd00:1234::5", allowed)
    assert is_forbidden("fd00:1235::5", allowed)
    assert is_forbidden("10.0.0.1", allowed)


def test_refusal__unreadable_text__raises_value_error():
    with pytest.raises(ValueError):
        refusal("not-an-address")


# Refusal message


def test_refusal_message__names_address_reason_and_host():
    refused = Refusal("10.0.0.5", "private", host="internal.example")

    assert refused.message == (
        "refused to connect to 10.0.0.5 (private) for host internal.example: "
        "not in ALLOWED_PRIVATE_NETWORKS"
    )


def test_refusal_message__ip_literal__omits_the_host():
    refused = Refusal("10.0.0.5", "private", host="10.0.0.5")

    assert refused.message == (
        "refused to connect to 10.0.0.5 (private): not in ALLOWED_PRIVATE_NETWORKS"
    )


# url_problem (no DNS)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ftp://files.example.com/x", "scheme 'ftp' is not allowed; use http:// or https://"),
        ("file:///etc/passwd", "scheme 'file' is not allowed; use http:// or https://"),
        ("example.com/hook", "scheme '(none)' is not allowed; use http:// or https://"),
        ("http://", "the URL has no host"),
        ("http://10.0.0.5:8080/hook", "10.0.0.5 (private) is not a public address"),
        ("http://169.254.169.254/latest/", "169.254.169.254 (link-local) is not a public address"),
        ("http://[::1]:8000/", "::1 (loopback) is not a public address"),
        ("http://127.1/", "127.0.0.1 (loopback; written 127.1) is not a public address"),
        ("http://0x7f000001/", "127.0.0.1 (loopback; written 0x7f000001) is not a public address"),
        ("http://256.0.0.1/", "256.0.0.1 is not a valid IP address: a number out of range"),
    ],
)
def test_url_problem__bad_url__says_what_is_wrong(url, expected):
    problem = url_problem(url)

    assert problem is not None
    assert problem.startswith(expected)


@pytest.mark.parametrize(
    "url",
    ["https://hooks.example.com/x", "HTTP://8.8.8.8/", "http://[2001:4860:4860::8888]:8080/"],
)
def test_url_problem__public_url__passes(url):
    assert url_problem(url) is None


def test_url_problem__host_name__is_not_resolved():
    # localhost resolves to loopback, but url_problem never resolves: the worker does.
    assert url_problem("http://localhost:8000/hook") is None


def test_url_problem__allowed_ip_literal__passes():
    assert url_problem("http://127.0.0.1:8000/", nets("127.0.0.1/32")) is None
    assert url_problem("http://127.0.0.2:8000/", nets("127.0.0.1/32")) is not None


# AddressGuard


def test_address_guard__check_url__refuses_private_literal_and_passes_names():
    guard = AddressGuard(nets("127.0.0.1/32"))

    assert guard.check_url("http://127.0.0.2:9/") == Refusal("127.0.0.2", "loopback")
    assert guard.check_url("http://127.0.0.1:9/") is None
    assert guard.check_url("http://internal.example/") is None


def test_address_guard__reason__caches_the_verdict_and_refuses_unreadable_text():
    guard = AddressGuard()

    assert guard.reason("10.0.0.1") == "private"
    assert guard.reason("10.0.0.1") == "private"
    assert guard.reason("8.8.8.8") is None
    assert guard.reason("not-an-address") == "not a plain IP address"


def test_address_guard__socket__refuses_before_creating_a_socket():
    guard = AddressGuard(nets("127.0.0.1/32"))
    addr_info = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.2", 80))

    with pytest.raises(AddressRefused) as caught:
        guard.socket(addr_info)

    assert caught.value.refusal == Refusal("127.0.0.2", "loopback")
    assert isinstance(caught.value, OSError)


def test_address_guard__socket__allowed_address__returns_an_unconnected_socket():
    guard = AddressGuard(nets("127.0.0.1/32"))
    addr_info = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", 80))

    sock = guard.socket(addr_info)
    try:
        assert sock.family == socket.AF_INET
        with pytest.raises(OSError):
            sock.getpeername()  # created, not connected: aiohttp connects it
    finally:
        sock.close()


# GuardedResolver, over a resolver that answers fixed addresses (no DNS, no connection)


class FixedResolver(AbstractResolver):
    """Answer every lookup with the given addresses."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=a,
                port=port,
                family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                proto=0,
                flags=0,
            )
            for a in self.addresses
        ]

    async def close(self) -> None:
        pass


def resolve_with(guard: AddressGuard, *addresses: str) -> list[str]:
    async def scenario() -> list[str]:
        resolver = GuardedResolver(guard, FixedResolver(*addresses))
        return [r["host"] for r in await resolver.resolve("internal.example", 80)]

    return asyncio.run(scenario())


def test_guarded_resolver__drops_refused_addresses():
    assert resolve_with(AddressGuard(), "10.0.0.5", "93.184.216.34") == ["93.184.216.34"]


def test_guarded_resolver__nothing_allowed__raises_naming_address_and_host():
    with pytest.raises(AddressRefused) as caught:
        resolve_with(AddressGuard(), "10.0.0.5", "::1")

    assert str(caught.value) == (
        "refused to connect to 10.0.0.5 (private) for host internal.example: "
        "not in ALLOWED_PRIVATE_NETWORKS"
    )


def test_guarded_resolver__allow_list__keeps_admitted_addresses():
    guard = AddressGuard(nets("10.0.0.0/8"))

    assert resolve_with(guard, "10.0.0.5", "192.168.0.1") == ["10.0.0.5"]


# Job.clean (no DNS: a host name passes whatever it resolves to)


def http_job(url: str, *fallbacks: str) -> Job:
    return Job(name="hook", endpoint_url=url, fallback_endpoint_urls=list(fallbacks))


@override_settings(STRAIT={})
def test_job_clean__private_ip_literal__refused_naming_field_and_address():
    with pytest.raises(ValidationError) as caught:
        http_job("http://10.0.0.5/hook").clean()

    (message,) = caught.value.message_dict["endpoint_url"]
    assert message.startswith("http://10.0.0.5/hook: 10.0.0.5 (private) is not a public address")
    assert "ALLOWED_PRIVATE_NETWORKS" in message


@override_settings(STRAIT={"ALLOWED_PRIVATE_NETWORKS": ["10.0.0.0/8"]})
def test_job_clean__private_ip_literal__accepted_when_allowed():
    http_job("http://10.0.0.5/hook").clean()


@override_settings(STRAIT={})
def test_job_clean__ftp_url__refused():
    with pytest.raises(ValidationError) as caught:
        http_job("ftp://files.example.com/x").clean()

    (message,) = caught.value.message_dict["endpoint_url"]
    assert "scheme 'ftp' is not allowed" in message


@override_settings(STRAIT={})
def test_job_clean__https_public_host_name__accepted_without_dns():
    # .invalid never resolves (RFC 6761): accepting it proves no lookup happens.
    http_job("https://hooks.example.invalid/x", "https://backup.example.invalid/x").clean()


@override_settings(STRAIT={"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.1/32"]})
def test_job_clean__fallback_entries__each_checked_naming_the_entry():
    job = http_job(
        "https://hooks.example.com/x",
        "http://127.0.0.1:8000/ok",
        "http://127.0.0.2:8000/no",
        "gopher://example.com/",
    )

    with pytest.raises(ValidationError) as caught:
        job.clean()

    first, second = caught.value.message_dict["fallback_endpoint_urls"]
    assert first.startswith("Entry 1 (http://127.0.0.2:8000/no): 127.0.0.2 (loopback)")
    assert second.startswith("Entry 2 (gopher://example.com/): scheme 'gopher' is not allowed")
    assert "endpoint_url" not in caught.value.message_dict
