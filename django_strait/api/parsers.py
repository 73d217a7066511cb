"""JSON bodies: at most ``STRAIT["API_MAX_PAYLOAD_BYTES"]`` (else 413), and only JSON the API can hold.

Past the size, a body is read by :func:`django_strait.rules.json_text.loads`: refused
(400, naming the top-level field at fault) when it nests too deep, holds a lone
surrogate or the NUL character, or a number past a 64-bit float's range. Cursors
are read the same way.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.request import Request

from django_strait.api.errors import InvalidField, PayloadTooLarge
from django_strait.conf import strait_settings
from django_strait.rules.json_text import JSONRefused, loads


def too_large(size: int) -> PayloadTooLarge:
    """Return the 413 for a body of ``size`` bytes (or more)."""
    limit = strait_settings.API_MAX_PAYLOAD_BYTES
    return PayloadTooLarge(
        f"the request body is {size} bytes or more; at most {limit} are allowed "
        "(STRAIT['API_MAX_PAYLOAD_BYTES'])"
    )


#: A Content-Length this long is over any limit (and past what ``int()`` reads).
_MAX_LENGTH_DIGITS = 18


def refuse_declared_size(request: Request) -> None:
    """Refuse a body whose Content-Length is over the limit, before reading it."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not (declared.isascii() and declared.isdigit()):
        return  # not a length: Django reads no body
    limit = strait_settings.API_MAX_PAYLOAD_BYTES
    if len(declared) > _MAX_LENGTH_DIGITS or int(declared) > limit:
        raise too_large(int(declared[:_MAX_LENGTH_DIGITS]))


class LimitedJSONParser(JSONParser):
    """Read no more than the limit (also without a Content-Length), then :func:`loads` it."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context=None) -> Any:
        limit = strait_settings.API_MAX_PAYLOAD_BYTES
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise too_large(len(data))
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            return loads(data.decode(encoding))
        except JSONRefused as exc:
            raise InvalidField(exc.field, exc.message) from None
        except (ValueError, LookupError) as exc:  # UnicodeDecodeError is a ValueError
            raise ParseError(f"JSON parse error - {exc}") from None
