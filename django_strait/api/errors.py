"""One JSON shape for every API error: ``{"error": {"code", "message", "details"}}``.

The shape is set per view (``get_exception_handler``), so the project's own DRF
settings and other APIs are left alone.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from django_strait.services.triggering import TriggerError
from django_strait.transitions import InvalidTransition


class UnknownJob(exceptions.NotFound):
    default_code = "unknown_job"


class PayloadTooLarge(exceptions.APIException):
    """A request body over ``STRAIT["API_MAX_PAYLOAD_BYTES"]``."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"


class Conflict(exceptions.APIException):
    """A transition the run's status does not allow (e.g. replaying a queued run)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "invalid_transition"

    @classmethod
    def of(cls, error: InvalidTransition) -> Conflict:
        """Return the 409 for ``error``, which names the run, its status and what is allowed."""
        return cls(str(error))


class InvalidField(exceptions.ValidationError):
    """A request field that was refused; ``details`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__({field: [message]}, code="invalid")

    @classmethod
    def of(cls, error: TriggerError) -> InvalidField:
        """Return the 400 for a refused ``trigger()`` argument."""
        return cls(error.field, error.message)


class OutsideQueues(exceptions.PermissionDenied):
    """A queue the request's API key is not limited to (403); ``details`` names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__({field: [message]})


def strait_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Answer an API error as ``{"error": {"code", "message", "details"}}``."""
    response = exception_handler(exc, context)  # DRF's: status, WWW-Authenticate, Retry-After
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    response.data = {"error": error_body(exc)}
    return response


def error_body(exc: exceptions.APIException) -> dict[str, Any]:
    """Return the ``error`` object for ``exc``."""
    if isinstance(exc.detail, dict):
        details = _flatten(exc.detail)
        first = next(iter(details.items()), ("", [""]))
        code = exc.default_code if isinstance(exc, exceptions.PermissionDenied) else "invalid"
        return {"code": code, "message": f"{first[0]}: {first[1][0]}", "details": details}
    if isinstance(exc.detail, list):
        return {"code": "invalid", "message": "; ".join(map(str, exc.detail)), "details": {}}
    return {"code": exc.detail.code or exc.default_code, "message": str(exc.detail), "details": {}}


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Map dotted field names (``payloads.3``) to their messages, however deep DRF nests them."""
    if isinstance(detail, dict):
        items = detail.items()
    elif isinstance(detail, list) and any(isinstance(d, dict | list) for d in detail):
        items = ((str(i), d) for i, d in enumerate(detail) if d)
    else:
        return {prefix or "body": [str(m) for m in _as_list(detail)]}
    flat: dict[str, list[str]] = {}
    for key, value in items:
        name = str(key) if key != "non_field_errors" else "body"
        flat.update(_flatten(value, f"{prefix}.{name}" if prefix else name))
    return flat


def _as_list(messages: Any) -> list[Any]:
    return messages if isinstance(messages, list) else [messages]


class ErrorDetailSerializer(serializers.Serializer):
    """The ``error`` object (for the schema)."""

    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


class ErrorSerializer(serializers.Serializer):
    """Every error answer (for the schema)."""

    error = ErrorDetailSerializer()


@csrf_exempt  # nothing to protect: it changes nothing, and a POST must get the JSON 404 too
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Answer a path under the API that no endpoint serves."""
    body = {"code": "not_found", "message": f"no endpoint at {request.path}", "details": {}}
    return JsonResponse({"error": body}, status=status.HTTP_404_NOT_FOUND)
