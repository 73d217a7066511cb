"""Throttles read from ``strait_settings``: a global rate per client, a stricter one to trigger,
and one for failed authentications per client address and presented key prefix.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

from django_strait.api.auth import KeyHolder, presented_prefix
from django_strait.conf import strait_settings


class _StraitThrottle(SimpleRateThrottle):
    setting = ""

    def get_rate(self) -> str | None:
        return getattr(strait_settings, self.setting)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": client_ident(request)}


def client_ident(request: Request) -> str:
    """Return who is asking: the API key, the user, or (unauthenticated) the address."""
    user = request.user
    if isinstance(user, KeyHolder):
        return f"key-{user.key.pk}"
    if user is not None and user.is_authenticated:
        return f"user-{user.pk}"
    return f"addr-{client_address(request)}"


def client_address(request: Request) -> str:
    """Return the client's IP address: ``REMOTE_ADDR``, or X-Forwarded-For behind trusted proxies.

    X-Forwarded-For is read only when DRF's ``NUM_PROXIES`` says how many proxies
    to trust (DRF reads it whole otherwise, so a client picks its own address),
    and only if it holds an IP address.
    """
    remote = request.META.get("REMOTE_ADDR") or ""
    if api_settings.NUM_PROXIES is None:
        return remote
    forwarded = BaseThrottle().get_ident(request)
    try:
        return str(ipaddress.ip_address(forwarded))
    except ValueError:
        return remote


class ClientThrottle(_StraitThrottle):
    """Every API request, per client: ``STRAIT["API_THROTTLE_RATE"]``."""

    scope = "strait"
    setting = "API_THROTTLE_RATE"


class TriggerThrottle(_StraitThrottle):
    """Trigger requests, per client: ``STRAIT["API_TRIGGER_THROTTLE_RATE"]``."""

    scope = "strait-trigger"
    setting = "API_TRIGGER_THROTTLE_RATE"


class AuthFailureThrottle(_StraitThrottle):
    """Failed authentications, per address and per presented key prefix:
    ``STRAIT["API_AUTH_FAILURE_THROTTLE_RATE"]``.

    A valid credential always passes, whatever failed before it from its address (a
    NAT shared with a broken client) or against its key, and resets nothing. A failed
    one is counted against its address, and against the key prefix it names (guesses
    at one key from many addresses); over the rate on either, it is answered 429 with
    ``Retry-After`` instead of 401, and counted still, so a client that keeps failing
    stays throttled. Guessing gains nothing either way: a key's secret is 256 random
    bits, a token's 160 (docs/security.md, "Bad input to the REST API").
    """

    scope = "strait-auth-failure"
    setting = "API_AUTH_FAILURE_THROTTLE_RATE"

    def failed(self, request: Request) -> exceptions.Throttled | None:
        """Count one failed authentication of ``request``; return the 429 to answer
        instead of its 401 when its address or key prefix failed too often lately."""
        if self.rate is None:
            return None
        idents = [f"addr-{client_address(request)}"]
        prefix = presented_prefix(request)
        if prefix is not None:
            idents.append(f"prefix-{prefix}")
        waits = [wait for ident in idents if (wait := self._count(ident)) is not None]
        if not waits:
            return None
        return exceptions.Throttled(
            max(waits),
            detail="too many failed authentications from this address or with this key: "
            f"more than {self.rate} (STRAIT['API_AUTH_FAILURE_THROTTLE_RATE']).",
        )

    def _count(self, ident: str) -> int | None:
        """Note a failure of ``ident``; seconds until it is under the rate again, or None."""
        key = self.cache_format % {"scope": self.scope, "ident": ident}
        now = self.timer()
        recent = [t for t in self.cache.get(key, []) if t > now - self.duration]
        # The newest failures only: a flood keeps the window full without growing it.
        recent = [now, *recent][: self.num_requests + 1]
        self.cache.set(key, recent, self.duration)
        if len(recent) <= self.num_requests:
            return None
        return max(1, math.ceil(recent[self.num_requests - 1] + self.duration - now))
