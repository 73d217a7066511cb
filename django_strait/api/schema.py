"""The OpenAPI 3 schema (drf-spectacular): generated from the views, served, and committed.

``docs/openapi.yaml`` is ``render_schema()``'s output; a test keeps the two equal.
Paths are relative to where the project mounts ``django_strait.api.urls``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.renderers import OpenApiYamlRenderer
from drf_spectacular.settings import patched_settings
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_strait import __version__
from django_strait.api.errors import ErrorSerializer, strait_exception_handler
from django_strait.api.throttles import ClientThrottle

SETTINGS = {
    "TITLE": "django-strait",
    "DESCRIPTION": "Trigger jobs and workflows, read runs and workflow runs, replay dead letters, "
    "read and reset circuits, read endpoint health and budgets. Errors share one shape: "
    '{"error": {"code", "message", "details"}}.',
    "VERSION": __version__,
    "SCHEMA_PATH_PREFIX": "",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "django_strait.api.schema.drop_column_ranges",
    ],
    # Circuits and health both list health levels: one enum, named for what it is.
    "ENUM_NAME_OVERRIDES": {
        "HealthLevelEnum": "django_strait.models.health.HealthLevel",
        "CircuitStateEnum": "django_strait.models.circuit.CircuitState",
        # Runs keep the name they had before workflows brought two more statuses.
        "StatusEnum": "django_strait.rules.states.RunStatus",
        "WorkflowRunStatusEnum": "django_strait.models.workflow.WorkflowRunStatus",
        "StepRunStatusEnum": "django_strait.models.workflow.StepRunStatus",
    },
}


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Describe ``Authorization: Api-Key <key>`` in the schema."""

    target_class = "django_strait.api.auth.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "Api-Key <key>, with the scope each operation names",
        }


_WHY = {
    400: "A field or parameter is refused; details names it.",
    401: "No credentials, or credentials that are not valid.",
    403: "The key lacks the scope, or the user the permission, named in message.",
    404: "No such job, run, workflow, workflow run, circuit or project; message names it.",
    409: "The run's (or workflow run's) status does not allow this.",
    413: "The body is larger than STRAIT['API_MAX_PAYLOAD_BYTES'].",
    415: "The body is not application/json.",
    429: "Throttled (over a rate, or too many failed authentications from this address); "
    "Retry-After says when to try again.",
}


#: Bounds at or past these are the database column's range, not a rule of the API.
_COLUMN_RANGE = 2**15 - 1


def drop_column_ranges(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Remove integer bounds that come from the database backend's column ranges.

    They differ between PostgreSQL and SQLite, and the schema must be one file.
    """
    _drop_ranges(result)
    return result


def _drop_ranges(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _drop_ranges(item)
    if not isinstance(node, dict):
        return
    if node.get("type") == "integer":
        if node.get("maximum", 0) >= _COLUMN_RANGE:
            node.pop("maximum")
        if node.get("minimum", 0) <= -_COLUMN_RANGE - 1:
            node.pop("minimum")
        node.pop("format", None)
    for value in node.values():
        _drop_ranges(value)


def documented(**kwargs: Any) -> Any:
    """``extend_schema`` for a method of a Strait view."""

    def decorate(method: Any) -> Any:
        # extend_schema subclasses the method's ``schema`` if it has one, else DRF's
        # DEFAULT_SCHEMA_CLASS; the project's setting must not decide it.
        method.schema = AutoSchema
        return extend_schema(**kwargs)(method)

    return decorate


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """Return the error responses an endpoint documents (401, 403 and 429 always)."""
    every = sorted({*codes, 401, 403, 429})
    return {code: OpenApiResponse(ErrorSerializer, description=_WHY[code]) for code in every}


def paging_parameters() -> list[OpenApiParameter]:
    """Return ``cursor`` and ``limit``."""
    return [
        OpenApiParameter("cursor", str, description="From the previous page's next link."),
        OpenApiParameter("limit", int, description="Rows per page, 1 to 500 (default 50)."),
    ]


def generate_schema() -> dict[str, Any]:
    """Return the schema of ``django_strait.api.urls`` as a dict."""
    with patched_settings(SETTINGS):
        generator = SchemaGenerator(urlconf="django_strait.api.urls")
        return generator.get_schema(request=None, public=True)


def render_schema() -> str:
    """Return the schema as the YAML text committed in docs/openapi.yaml."""
    with patched_settings(SETTINGS):
        return OpenApiYamlRenderer().render(generate_schema(), renderer_context={}).decode()


class SchemaView(APIView):
    """GET schema/: the OpenAPI 3 schema (JSON), readable without credentials."""

    permission_classes = [AllowAny]
    authentication_classes: list[type] = []
    # Counted by address like any client without credentials: generating it is not free.
    throttle_classes = [ClientThrottle]
    renderer_classes = [JSONRenderer]
    schema = None  # not part of itself

    def get(self, request: Request) -> Response:
        return Response(generate_schema())

    def get_exception_handler(self):
        return strait_exception_handler
