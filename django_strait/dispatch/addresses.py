"""Which addresses HTTP jobs may call (docs/http-jobs.md): the rules, and how a URL's host is read.

Pure (no HTTP client): ``Job.clean`` checks a URL's host on save with these,
and the worker's guard (``dispatch.ssrf``) checks every address it connects to
with the same ``refusal`` and reads hosts with the same ``host_address``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from yarl import URL

__all__ = [
    "AddressRefused",
    "Refusal",
    "host_address",
    "is_forbidden",
    "refusal",
    "url_problem",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = ("http", "https")

#: Special-purpose blocks (IANA registries) that ``ipaddress`` flags only as "not global",
#: named so that the refusal says what the address is.
_NAMED_BLOCKS: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(net), name)
    for net, name in (
        ("0.0.0.0/8", "this-network"),
        ("100.64.0.0/10", "shared address space (CGNAT)"),
        ("192.0.0.0/24", "IETF protocol assignment"),
        ("192.0.2.0/24", "documentation"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
        ("2001:db8::/32", "documentation"),
        ("2001::/32", "Teredo"),
        ("100::/64", "discard-only"),
    )
)

#: NAT64's well-known prefix: the last 32 bits are the IPv4 address the gateway calls.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _own_reason(address: Address) -> str | None:
    """Return what makes ``address`` itself non-public, or None."""
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local"
    for network, name in _NAMED_BLOCKS:
        if address.version == network.version and address in network:
            return name
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:
        return "not globally routable"
    return None


def _embedded(address: Address) -> ipaddress.IPv4Address | None:
    """Return the IPv4 address a connection to ``address`` really reaches, if it carries one."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def _reason(address: Address) -> str | None:
    """Return why ``address`` is not public (``"private"``), or None for a public address."""
    inner = _embedded(address)
    if inner is None:
        return _own_reason(address)
    inner_reason = _own_reason(inner)
    if inner_reason is not None:
        return f"{inner_reason} {inner} inside"
    # ::ffff:8.8.8.8, 64:ff9b::8.8.8.8 and 2002:808:808:: reach 8.8.8.8, whatever their
    # own block is classed as (Python 3.13 classes 2002::/16 as private, 3.12 did not).
    if address.ipv4_mapped is not None or address in _NAT64 or address.sixtofour is not None:
        return None
    return _own_reason(address)


def _admitted(address: Address, allowed: Iterable[Network]) -> bool:
    inner = _embedded(address)
    for network in allowed:
        if address.version == network.version and address in network:
            return True
        if inner is not None and network.version == 4 and inner in network:
            return True
    return False


def refusal(address: Address | str, allowed: Iterable[Network] = ()) -> str | None:
    """Return why a connection to ``address`` is refused (e.g. ``"private"``), or None if allowed.

    An address is refused when it is not public (private, loopback, link-local,
    multicast, reserved, unspecified, site-local, CGNAT, benchmarking, ..., or an
    IPv6 address that carries such an IPv4 address: mapped, NAT64, 6to4, Teredo)
    and no network in ``allowed`` contains it.
    """
    if isinstance(address, str):
        address = ipaddress.ip_address(address)
    reason = _reason(address)
    if reason is None or _admitted(address, tuple(allowed)):
        return None
    return reason


def is_forbidden(address: Address | str, allowed: Iterable[Network] = ()) -> bool:
    """Tell whether a connection to ``address`` is refused under the allow-list ``allowed``."""
    return refusal(address, allowed) is not None


#: What admits a refused address.
ALLOW_LIST = "not in ALLOWED_PRIVATE_NETWORKS"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused address: which, why, the host that led to it, and what would admit it.

    ``fix`` is :data:`ALLOW_LIST` when listing a network would admit the address;
    a host that spells an address oddly, or spells none, is refused whatever the list.
    """

    address: str
    reason: str
    host: str = ""
    fix: str = ALLOW_LIST

    @property
    def message(self) -> str:
        """Return the error message recorded on the attempt."""
        via = f" for host {self.host}" if self.host and self.host != self.address else ""
        return f"refused to connect to {self.address} ({self.reason}){via}: {self.fix}"

    @property
    def problem(self) -> str:
        """Return the error given when a job naming this host is saved."""
        if self.fix != ALLOW_LIST:
            return f"{self.address} is {self.reason}; {self.fix}"
        written = f"; written {self.host}" if self.host and self.host != self.address else ""
        return (
            f"{self.address} ({self.reason}{written}) is not a public address; allowed: public "
            'addresses, and networks listed in STRAIT["ALLOWED_PRIVATE_NETWORKS"]'
        )


class AddressRefused(OSError):
    """A connection the SSRF guard refused; aiohttp reports it as a connection error."""

    def __init__(self, refused: Refusal) -> None:
        super().__init__(refused.message)
        self.refusal = refused


#: One part of an IPv4 address as inet_aton and the WHATWG URL parser read it:
#: hexadecimal after 0x ("0x" alone is 0), octal after a leading 0, else decimal.
_IPV4_PART = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")


def host_address(host: str) -> Address | None:
    """Return the address a URL's host denotes, in any spelling, or None for a host name.

    The one reader of hosts for the check on save and the check before dispatch.
    ``host`` is the host as yarl gives it (aiohttp's view: lower case, IDNA applied,
    IPv6 without brackets). Every spelling that the resolver's ``inet_aton`` reads
    as an address is read here as the same address (``0x7f000001``, ``0177.0.0.1``,
    ``127.1``, ``2130706433``), and so is what the WHATWG URL parser reads (a
    trailing dot, percent-escapes). Raise ValueError for a host written as an
    address that denotes none (``256.0.0.1``, ``1.2.3.4.5``).
    """
    text = unquote(host)
    if ":" in text:
        return ipaddress.IPv6Address(text)
    parts = text.split(".")
    if len(parts) > 1 and not parts[-1]:
        parts.pop()  # the root's empty label of a fully qualified name
    if not _IPV4_PART.fullmatch(parts[-1]):
        return None  # a name: only a name's last label is not a number
    return _ipv4(parts)


def _ipv4(parts: list[str]) -> ipaddress.IPv4Address:
    if len(parts) > 4:
        raise ValueError(f"{len(parts)} parts")
    *leading, last = (_ipv4_number(part) for part in parts)
    # The last number fills the bytes the others leave: 127.1 is 127.0.0.1.
    if any(n > 255 for n in leading) or last >= 256 ** (4 - len(leading)):
        raise ValueError("a number out of range")
    return ipaddress.IPv4Address(sum(n << 8 * (3 - i) for i, n in enumerate(leading)) + last)


def _ipv4_number(part: str) -> int:
    if not _IPV4_PART.fullmatch(part):
        raise ValueError(f"{part!r} is not a number")
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        if part.strip("01234567"):
            raise ValueError(f"{part} starts with 0 but is not octal")
        return int(part, 8)
    return int(part)


_WRITE_PLAINLY = (
    "write an IPv4 address as four numbers 0-255 (10.20.0.5), an IPv6 address in "
    "brackets ([fd00::5]), or a host name"
)


def _is_plain(host: str) -> bool:
    # What aiohttp connects to without a resolver: a dotted quad, or an IPv6 address.
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def url_problem(url: str, allowed: Iterable[Network] = ()) -> str | None:
    """Return what is wrong with ``url`` as an HTTP job endpoint, or None; never resolve DNS.

    Checks the scheme (http or https), that there is a host, and a host written as
    an IP address against :func:`refusal`. A host name passes: its addresses are
    checked when the worker resolves it.
    """
    try:
        parsed = URL(url)
    except (TypeError, ValueError):
        return "not a valid URL"
    if parsed.scheme.lower() not in SCHEMES:
        return f"scheme {parsed.scheme or '(none)'!r} is not allowed; use http:// or https://"
    host = parsed.raw_host or ""
    if not host:
        return "the URL has no host"
    literal = _literal_refusal(host, allowed)
    return None if literal is None else literal.problem


def _literal_refusal(host: str, allowed: Iterable[Network]) -> Refusal | None:
    """Return the refusal of a URL's host written as an address (in any spelling), or None."""
    try:
        address = host_address(host)
    except ValueError as exc:
        return Refusal(host, f"not a valid IP address: {exc}", fix=_WRITE_PLAINLY)
    if address is None:
        return None
    reason = refusal(address, allowed)
    plain = _is_plain(host)
    if reason is not None:
        return Refusal(str(address), reason, host="" if plain else host)
    if not plain:
        # aiohttp refuses 127.1 outright and resolves 0x7f000001 through the C library:
        # only the plain spelling is called, the same way on every worker.
        return Refusal(host, f"{address} written another way", fix=f"write it as {address}")
    return None
