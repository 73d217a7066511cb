"""Refuse HTTP job calls to private, loopback and other non-public addresses (docs/http-jobs.md).

A job definition names a URL; without this guard it could be pointed at the
worker's own network (a database admin page, a cloud metadata service at
169.254.169.254). Three places check the same rule, :func:`refusal`:

- before a request, the URL itself: scheme, host, and a host written as an IP
  address in any spelling (:func:`host_address`, the one reader of such hosts, also
  used when a job is saved, so that both checks agree);
- :class:`GuardedResolver`, the resolver for host names (aiohttp's, filtered): it
  drops refused addresses from what it returns, and the client (dispatch/wire.py)
  connects only to returned addresses, so a name that resolves to a public address
  now and a private one later (DNS rebinding) is checked on every resolution;
- :meth:`AddressGuard.socket`, the client's socket factory: the last check, on
  the exact address a socket is about to connect to.

Verdicts are cached per address, so the hot path is a dictionary lookup.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from django_strait.dispatch.addresses import (
    AddressRefused,
    Network,
    Refusal,
    _literal_refusal,
    host_address,
    is_forbidden,
    refusal,
    url_problem,
)

#: The most addresses whose verdicts an AddressGuard keeps; a guard starts over beyond it.
_CACHE_SIZE = 4096

__all__ = [
    "AddressGuard",
    "AddressRefused",
    "GuardedResolver",
    "Refusal",
    "host_address",
    "is_forbidden",
    "refusal",
    "url_problem",
]


class AddressGuard:
    """The SSRF rule for one allow-list, with verdicts cached per address and per URL."""

    def __init__(self, allowed: Iterable[Network] = ()) -> None:
        self.allowed: tuple[Network, ...] = tuple(allowed)
        self._addresses: dict[str, str | None] = {}
        self._urls: dict[str, Refusal | None] = {}

    def reason(self, address: str) -> str | None:
        """Return why ``address`` (text) is refused, or None; unreadable text is refused."""
        try:
            return self._addresses[address]
        except KeyError:
            pass
        try:
            verdict = refusal(address, self.allowed)
        except ValueError:
            verdict = "not a plain IP address"
        _remember(self._addresses, address, verdict)
        return verdict

    def check_url(self, url: str) -> Refusal | None:
        """Return the refusal of a URL whose host is an IP address, or None; never resolve DNS."""
        try:
            return self._urls[url]
        except KeyError:
            pass
        try:
            host = URL(url).raw_host or ""
        except (TypeError, ValueError):
            host = ""
        verdict = _literal_refusal(host, self.allowed) if host else None
        _remember(self._urls, url, verdict)
        return verdict

    def socket(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """Create the socket for ``addr_info``, refusing a forbidden address (a socket factory)."""
        family, type_, proto, _, sockaddr = addr_info
        host = str(sockaddr[0])
        reason = self.reason(host)
        if reason is not None:
            raise AddressRefused(Refusal(host, reason))
        return socket.socket(family=family, type=type_, proto=proto)


def _remember(cache: dict[str, Any], key: str, value: Any) -> None:
    # Bounded without an LRU's bookkeeping: endpoints are few, so a full cache is rare.
    if len(cache) >= _CACHE_SIZE:
        cache.clear()
    cache[key] = value


class GuardedResolver(AbstractResolver):
    """aiohttp's default resolver, returning only the addresses the guard allows."""

    def __init__(self, guard: AddressGuard, inner: AbstractResolver | None = None) -> None:
        self._guard = guard
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Resolve ``host`` and drop refused addresses; raise AddressRefused if none is left."""
        results = await self._inner.resolve(host, port, family)
        allowed = [r for r in results if self._guard.reason(r["host"]) is None]
        if allowed or not results:
            return allowed
        first = results[0]["host"]
        reason = self._guard.reason(first) or "refused"
        raise AddressRefused(Refusal(first, reason, host=host.rstrip(".")))

    async def close(self) -> None:
        """Close the wrapped resolver."""
        await self._inner.close()
