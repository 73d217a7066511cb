"""The opt-in Prometheus view: staff users, or a scraper with the bearer token."""

from __future__ import annotations

import hmac
import logging

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from django_strait.conf import strait_settings
from django_strait.metrics.database import DatabaseCollector

logger = logging.getLogger(__name__)

REALM = 'Bearer realm="strait-metrics"'


def metrics_token() -> str | None:
    """Return the configured scrape token (``STRAIT["METRICS_TOKEN"]``), or None."""
    try:
        token = strait_settings.METRICS_TOKEN
    except AttributeError:
        # Until conf.py declares the key, read it straight from the STRAIT dict.
        token = (getattr(settings, "STRAIT", None) or {}).get("METRICS_TOKEN")
    return token or None


def _has_token(request: HttpRequest, token: str | None) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if not token or scheme.lower() != "bearer" or not given:
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """Return the response that refuses ``request``, or None when it may see the metrics."""
    user = getattr(request, "user", None)
    if (user is not None and user.is_active and user.is_staff) or _has_token(
        request, metrics_token()
    ):
        return None
    if user is not None and user.is_authenticated:
        return HttpResponse("Staff users only.\n", status=403, content_type="text/plain")
    response = HttpResponse(
        "Log in as staff, or send Authorization: Bearer <STRAIT METRICS_TOKEN>.\n",
        status=401,
        content_type="text/plain",
    )
    response["WWW-Authenticate"] = REALM
    return response


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Report the database gauges in the Prometheus text format."""
    refused = _refusal(request)
    if refused is not None:
        return refused
    registry = CollectorRegistry(auto_describe=False)
    # Every alias of STRAIT["DATABASES"] (one database: that one, as always).
    registry.register(DatabaseCollector(None, strait_settings.STALE_AFTER))
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(registry), content_type=content_type)
