"""Throttles read from ``strait_settings``: a global rate per client, a stricter one to trigger."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from django_strait.api.auth import KeyHolder
from django_strait.conf import strait_settings


class _StraitThrottle(SimpleRateThrottle):
    setting = ""

    def get_rate(self) -> str | None:
        return getattr(strait_settings, self.setting)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": client_ident(self, request)}


def client_ident(throttle: SimpleRateThrottle, request: Request) -> str:
    """Return who is asking: the API key, the user, or (unauthenticated) the address."""
    user = request.user
    if isinstance(user, KeyHolder):
        return f"key-{user.key.pk}"
    if user is not None and user.is_authenticated:
        return f"user-{user.pk}"
    return f"addr-{throttle.get_ident(request)}"


class ClientThrottle(_StraitThrottle):
    """Every API request, per client: ``STRAIT["API_THROTTLE_RATE"]``."""

    scope = "strait"
    setting = "API_THROTTLE_RATE"


class TriggerThrottle(_StraitThrottle):
    """Trigger requests, per client: ``STRAIT["API_TRIGGER_THROTTLE_RATE"]``."""

    scope = "strait-trigger"
    setting = "API_TRIGGER_THROTTLE_RATE"
