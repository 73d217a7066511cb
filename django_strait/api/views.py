"""REST views: trigger a job, read a run. Errors share one JSON shape.

Every error these views return looks like
``{"error": {"code": "...", "message": "...", "details": {field: [messages]}}}``.
The shape is set per view (``get_exception_handler``), so the project's own DRF
settings and other APIs are left alone.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import Prefetch
from django.urls import reverse
from rest_framework import exceptions, status
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.parsers import JSONParser
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, exception_handler

from django_strait.api.serializers import (
    IDEMPOTENCY_HEADER,
    RunSerializer,
    TriggeredRunSerializer,
    TriggerRequest,
)
from django_strait.models import JobRun, RunAttempt
from django_strait.triggering import TriggerError, trigger

logger = logging.getLogger(__name__)

TRIGGER_PERMISSION = "django_strait.add_jobrun"
READ_PERMISSION = "django_strait.view_jobrun"


class UnknownJob(exceptions.NotFound):
    default_code = "unknown_job"


class InvalidField(exceptions.ValidationError):
    """A request field that ``trigger()`` (or the body parser) refused."""

    def __init__(self, error: TriggerError) -> None:
        super().__init__({error.field: [error.message]}, code="invalid")


def strait_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Answer an API error as ``{"error": {"code", "message", "details"}}``."""
    response = exception_handler(exc, context)  # DRF's: status, WWW-Authenticate, Retry-After
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    response.data = {"error": _error_body(exc)}
    return response


def _error_body(exc: exceptions.APIException) -> dict[str, Any]:
    if isinstance(exc.detail, dict):
        details = {f: [str(m) for m in _as_list(ms)] for f, ms in exc.detail.items()}
        first = next(iter(details.items()), ("", [""]))
        return {"code": "invalid", "message": f"{first[0]}: {first[1][0]}", "details": details}
    if isinstance(exc.detail, list):
        return {"code": "invalid", "message": "; ".join(map(str, exc.detail)), "details": {}}
    return {"code": exc.detail.code or exc.default_code, "message": str(exc.detail), "details": {}}


def _as_list(messages: Any) -> list[Any]:
    return messages if isinstance(messages, list) else [messages]


class HasStraitPermission(BasePermission):
    """Require the Django permission that the view names in ``required_permission``."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        needed = view.required_permission  # type: ignore[attr-defined]
        if request.user.has_perm(needed):
            return True
        self.message = f"this needs the {needed} permission"
        return False


class StraitAPIView(APIView):
    """Token or session auth, JSON in and out, the Strait error shape."""

    # Token first: its WWW-Authenticate header is what makes "no credentials" a 401.
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated, HasStraitPermission]
    parser_classes = [JSONParser]
    renderer_classes = [JSONRenderer]
    required_permission = ""

    def get_exception_handler(self):
        return strait_exception_handler


class TriggerView(StraitAPIView):
    """POST jobs/<name>/trigger/: queue one run of the job."""

    required_permission = TRIGGER_PERMISSION

    def post(self, request: Request, name: str) -> Response:
        try:
            wanted = TriggerRequest.parse(request.data, request.headers.get(IDEMPOTENCY_HEADER))
            run = trigger(name, wanted.payload, **wanted.options)
        except TriggerError as exc:
            # The job name comes from the URL: a refused name can only be an unknown job.
            if exc.field == "name":
                raise UnknownJob(f"no job named {name!r}") from None
            raise InvalidField(exc) from None
        hit = run.idempotency_hit
        logger.info(
            "api: triggered %s run %s (idempotency hit: %s)", name, run.pk, hit,
            extra={"run_id": run.pk, "job": name},
        )  # fmt: skip
        return Response(
            TriggeredRunSerializer(run).data,
            status=status.HTTP_200_OK if hit else status.HTTP_202_ACCEPTED,
            headers={"Location": reverse("django_strait_api:run", args=[run.pk])},
        )


class RunView(StraitAPIView):
    """GET runs/<id>/: a run and its attempts."""

    required_permission = READ_PERMISSION

    def get(self, request: Request, pk: int) -> Response:
        attempts = Prefetch("attempts", queryset=RunAttempt.objects.order_by("number"))
        run = JobRun.objects.select_related("job").prefetch_related(attempts).filter(pk=pk).first()
        if run is None:
            raise exceptions.NotFound(f"no run with id {pk}")
        return Response(RunSerializer(run).data)
