"""Throttles read from ``strait_settings``: a global rate per client, a stricter one to trigger,
and one for failed authentications per client address, checked before authenticating.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

from django_strait.api.auth import KeyHolder
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
    """Failed authentications, per address: ``STRAIT["API_AUTH_FAILURE_THROTTLE_RATE"]``.

    DRF authenticates before it throttles, and a failure ends the request: this one
    is counted where authentication fails and checked before authenticating, so an
    address over the rate gets 429 whatever credentials it sends next.
    """

    scope = "strait-auth-failure"
    setting = "API_AUTH_FAILURE_THROTTLE_RATE"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}

    def refuse_if_over(self, request: Request) -> None:
        """Raise ``Throttled`` if the request's address failed too often lately."""
        if self.rate is None or len(self._recent(request)) < self.num_requests:
            return
        oldest_that_counts = self.history[self.num_requests - 1]
        raise exceptions.Throttled(
            max(1, math.ceil(oldest_that_counts + self.duration - self.now)),
            detail=f"too many failed authentications from this address: more than {self.rate} "
            "(STRAIT['API_AUTH_FAILURE_THROTTLE_RATE']).",
        )

    def count(self, request: Request) -> None:
        """Count one failed authentication of the request's address."""
        if self.rate is not None:
            self._recent(request).insert(0, self.now)
            self.cache.set(self.key, self.history, self.duration)

    def _recent(self, request: Request) -> list[float]:
        self.key = self.get_cache_key(request, None)
        self.now = self.timer()
        self.history = [t for t in self.cache.get(self.key, []) if t > self.now - self.duration]
        return self.history
