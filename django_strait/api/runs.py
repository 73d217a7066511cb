"""Runs: list with filters, read one with its attempts, cancel, replay."""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from django_strait import transitions
from django_strait.api.auth import Rule
from django_strait.api.base import StraitAPIView, find_run, who
from django_strait.api.errors import Conflict, InvalidField
from django_strait.api.filters import RUN_FILTERS, run_condition
from django_strait.api.pagination import Keyset, page_serializer, paginate, shown
from django_strait.api.placement import listed_aliases, storage_of
from django_strait.api.schema import documented, errors, paging_parameters
from django_strait.api.serializers import ReplaySerializer, RunSerializer, RunSummarySerializer
from django_strait.models import JobRun, RunAttempt
from django_strait.rules.states import RunStatus
from django_strait.services.triggering import TriggerError

logger = logging.getLogger(__name__)

READ = Rule("runs:read", "django_strait.view_jobrun")
CANCEL = Rule("runs:write", "django_strait.cancel_jobrun")
REPLAY = Rule("runs:write", "django_strait.replay_jobrun")

#: Newest first, by id: the primary key is the keyset, so any page is an index range.
NEWEST_FIRST = Keyset("id", descending=True)
RunPage = page_serializer("RunPage", RunSummarySerializer)

_FILTER_HELP = {
    "status": f"Comma-separated statuses: {', '.join(RunStatus.values)}.",
    "job": "Comma-separated job names.",
    "queue": "Comma-separated queue names.",
    "error_type": "Comma-separated error types, exact (http.503) or a prefix (http.*).",
    "created_after": "ISO 8601 datetime with offset: created at or after it.",
    "created_before": "ISO 8601 datetime with offset: created before it.",
    "database": "Several databases only: the alias to list (default: every alias, merged).",
}


def filter_parameters(names: tuple[str, ...] = RUN_FILTERS) -> list[OpenApiParameter]:
    """Return the filters ``names`` as query parameters, with paging."""
    names = (*names, "database")
    return [OpenApiParameter(n, str, description=_FILTER_HELP[n]) for n in names] + (
        paging_parameters()
    )


def with_attempts(runs: Any = None) -> Any:
    """Return ``runs`` with their job and attempts (oldest first) loaded."""
    runs = JobRun.objects.all() if runs is None else runs
    attempts = Prefetch("attempts", queryset=RunAttempt.objects.order_by("started_at", "id"))
    return runs.select_related("job").prefetch_related(attempts)


class RunListView(StraitAPIView):
    """GET runs/: runs, newest first, filtered."""

    rules = {"GET": READ}

    @documented(
        operation_id="runs_list",
        parameters=filter_parameters(),
        responses={200: RunPage, **errors(400)},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        runs = self.runs(JobRun.objects.filter(run_condition(params)))
        runs = runs.select_related("job")
        page = paginate(runs, NEWEST_FIRST, request, across=listed_aliases(params))
        data = shown(RunSummarySerializer, page.rows)
        return Response({"results": data, "next": page.next_url})


class RunView(StraitAPIView):
    """GET runs/<id>/: a run and its attempts."""

    rules = {"GET": READ}

    @documented(operation_id="runs_retrieve", responses={200: RunSerializer, **errors(404)})
    def get(self, request: Request, pk: int) -> Response:
        return Response(shown(RunSerializer, [find_run(pk, self.runs(with_attempts()))])[0])


class CancelView(StraitAPIView):
    """POST runs/<id>/cancel/: cancel a run (an executing one when its attempt returns)."""

    rules = {"POST": CANCEL}

    @documented(
        operation_id="runs_cancel", request=None, responses={200: RunSerializer, **errors(404, 409)}
    )
    def post(self, request: Request, pk: int) -> Response:
        find_run(pk, self.runs())
        try:
            transitions.cancel(pk, storage=storage_of(pk))
        except transitions.InvalidTransition as exc:
            raise Conflict.of(exc) from None
        logger.info("api: run %s canceled by %s", pk, who(request), extra={"run_id": pk})
        return Response(RunSerializer(find_run(pk, with_attempts())).data)


def replay(request: Request, pk: int, runs: Any) -> Response:
    """Replay run ``pk`` (found among ``runs``), with the body's payload if it has one."""
    find_run(pk, runs)
    body = ReplaySerializer(data=request.data if request.data is not None else {})
    body.is_valid(raise_exception=True)
    payload = request.data.get("payload", ...) if isinstance(request.data, dict) else ...
    try:
        transitions.replay(pk, by=who(request), payload=payload, storage=storage_of(pk))
    except transitions.InvalidTransition as exc:
        raise Conflict.of(exc) from None
    except TriggerError as exc:
        raise InvalidField.of(exc) from None
    logger.info("api: run %s replayed by %s", pk, who(request), extra={"run_id": pk})
    return Response(RunSerializer(find_run(pk, with_attempts())).data)


class ReplayView(StraitAPIView):
    """POST runs/<id>/replay/: queue a finished-without-success run again, budget reset."""

    rules = {"POST": REPLAY}

    @documented(
        operation_id="runs_replay",
        request=ReplaySerializer,
        responses={200: RunSerializer, **errors(400, 404, 409, 413, 415)},
    )
    def post(self, request: Request, pk: int) -> Response:
        return replay(request, pk, self.runs())
