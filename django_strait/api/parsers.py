"""JSON bodies up to ``STRAIT["API_MAX_PAYLOAD_BYTES"]``; larger ones are a 413."""

from __future__ import annotations

import io
from typing import Any

from rest_framework.parsers import JSONParser
from rest_framework.request import Request

from django_strait.api.errors import PayloadTooLarge
from django_strait.conf import strait_settings


def too_large(size: int) -> PayloadTooLarge:
    """Return the 413 for a body of ``size`` bytes (or more)."""
    limit = strait_settings.API_MAX_PAYLOAD_BYTES
    return PayloadTooLarge(
        f"the request body is {size} bytes or more; at most {limit} are allowed "
        "(STRAIT['API_MAX_PAYLOAD_BYTES'])"
    )


def refuse_declared_size(request: Request) -> None:
    """Refuse a body whose Content-Length is over the limit, before reading it."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isdigit() and int(declared) > strait_settings.API_MAX_PAYLOAD_BYTES:
        raise too_large(int(declared))


class LimitedJSONParser(JSONParser):
    """DRF's JSON parser, reading no more than the limit (also without a Content-Length)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context=None) -> Any:
        limit = strait_settings.API_MAX_PAYLOAD_BYTES
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise too_large(len(data))
        return super().parse(io.BytesIO(data), media_type, parser_context)
