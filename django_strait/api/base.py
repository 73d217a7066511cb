"""What every django-strait API view shares: auth, permissions, throttles, limits, errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from django_strait.api.auth import (
    ApiKeyAuthentication,
    QueueScope,
    Rule,
    ScopeOrPermission,
    StraitTokenAuthentication,
)
from django_strait.api.errors import InvalidField, OutsideQueues, strait_exception_handler
from django_strait.api.pagination import MAX_ID, one
from django_strait.api.parsers import LimitedJSONParser, refuse_declared_size
from django_strait.api.throttles import AuthFailureThrottle, ClientThrottle
from django_strait.database import alias_for_id
from django_strait.models import JobRun


class StraitAPIView(APIView):
    """Token, API key or session auth; JSON in and out; the Strait error shape."""

    # Token first: its WWW-Authenticate header is what makes "no credentials" a 401.
    authentication_classes = [
        StraitTokenAuthentication,
        ApiKeyAuthentication,
        SessionAuthentication,
    ]
    permission_classes = [IsAuthenticated, ScopeOrPermission]
    throttle_classes = [ClientThrottle]
    parser_classes = [LimitedJSONParser]
    renderer_classes = [JSONRenderer]
    schema = AutoSchema()
    #: HTTP method -> what it needs (a key scope, or a user's Django permission).
    rules: Mapping[str, Rule] = {}
    #: What the URL's ``name`` names, for the 404 of a name that cannot exist.
    named = "job"
    #: Whether the endpoint works on several queues at once (workflows): a key limited
    #: to queues is refused it (403), rather than shown part of a workflow.
    across_queues = False
    #: The queues the request's credential may use (set once it is authenticated).
    scope = QueueScope()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        refuse_declared_size(request)
        super().initial(request, *args, **kwargs)
        refuse_nul(request, kwargs, named=self.named)
        self.scope = QueueScope.of(request)
        if self.across_queues and self.scope.limited:
            raise exceptions.PermissionDenied(
                "this API key is limited to queues, and this endpoint works across queues "
                "(a workflow's steps run in any queue); use a key without queues"
            )

    def runs(self, queryset: Any = None) -> Any:
        """Return ``queryset`` (every run by default) narrowed to the key's queues."""
        return self.scope.only(JobRun.objects.all() if queryset is None else queryset)

    def within_scope(self, queue: str, field: str = "queue") -> None:
        """Refuse (403) a request that names ``queue`` to enqueue into, outside the key's queues."""
        if not self.scope.allows(queue):
            raise OutsideQueues(field, self.scope.refusal(queue))

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, exceptions.AuthenticationFailed):
            exc = AuthFailureThrottle().failed(self.request) or exc
        return super().handle_exception(exc)

    def get_exception_handler(self):
        return strait_exception_handler


NUL = "\x00"


def refuse_nul(request: Request, url_kwargs: Mapping[str, Any], *, named: str = "job") -> None:
    """Refuse the NUL character anywhere in a request, naming where.

    PostgreSQL cannot store it in text or jsonb; refusing it on every database
    keeps the API's answers the same on SQLite.
    """
    for name, value in url_kwargs.items():
        if isinstance(value, str) and NUL in value:
            raise exceptions.NotFound(
                f"no {f'{named} named' if name == 'name' else name} {value!r}"
            )
    for name, values in request.query_params.lists():
        if NUL in name or any(NUL in v for v in values):
            raise InvalidField(name.replace(NUL, "\\u0000"), _NUL_MESSAGE)
    data = request.data
    fields = data.items() if isinstance(data, Mapping) else [("body", data)]
    for name, value in fields:
        if _holds_nul(name) or _holds_nul(value):
            raise InvalidField(str(name).replace(NUL, "\\u0000"), _NUL_MESSAGE)


_NUL_MESSAGE = "must not contain the NUL character (\\u0000) anywhere"


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, Mapping):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def who(request: Request) -> str:
    """Return who made the request, for ``replayed_by`` and the log."""
    return request.user.get_username()


def find_run(pk: int, runs=None) -> JobRun:
    """Return run ``pk`` from ``runs`` (all runs by default), or raise a 404 naming it."""
    runs = JobRun.objects.all() if runs is None else runs
    where = alias_for_id(pk) if pk <= MAX_ID else None  # several aliases: the id says which
    run = one(runs.using(where).filter(pk=pk)) if where else None
    if run is None:
        raise exceptions.NotFound(f"no run with id {pk}")
    return run
