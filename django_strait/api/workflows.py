"""Workflows: trigger a run of one, list and read workflow runs with their steps, cancel one.

Over several aliases a workflow run lives with its workflow, on its steps' jobs'
alias: read and canceled by id on the alias its id names, listed from every
alias merged newest id first (``?database=ALIAS`` for one), as runs are
(:mod:`django_strait.api.placement`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.db.models import Prefetch, Q, QuerySet
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from django_strait.api.auth import Rule
from django_strait.api.base import StraitAPIView, who
from django_strait.api.errors import Conflict, InvalidField
from django_strait.api.filters import PAGING, listed, refuse_unknown
from django_strait.api.jobs import IDEMPOTENCY_PARAMETER
from django_strait.api.pagination import MAX_ID, Keyset, one, page_serializer, paginate, shown
from django_strait.api.placement import DATABASE_PARAMETER, listed_aliases, placement_params
from django_strait.api.schema import documented, errors, paging_parameters
from django_strait.api.serializers import (
    IDEMPOTENCY_HEADER,
    TriggeredWorkflowRunSerializer,
    WorkflowRunSerializer,
    WorkflowRunSummarySerializer,
    WorkflowTriggerRequest,
    WorkflowTriggerSerializer,
)
from django_strait.api.throttles import ClientThrottle, TriggerThrottle
from django_strait.database import alias_for_id, aliases, placed
from django_strait.models import Workflow, WorkflowRun, WorkflowRunStatus, WorkflowStepRun
from django_strait.services.triggering import TriggerError
from django_strait.workflows import cancel_workflow_run, trigger_workflow

logger = logging.getLogger(__name__)

# The same scopes as a job's trigger and a run's read and cancel: a workflow run is runs.
TRIGGER = Rule("jobs:trigger", "django_strait.trigger_job")
READ = Rule("runs:read", "django_strait.view_workflowrun")
CANCEL = Rule("runs:write", "django_strait.cancel_jobrun")

NEWEST_FIRST = Keyset("id", descending=True)
WorkflowRunPage = page_serializer("WorkflowRunPage", WorkflowRunSummarySerializer)
LIST_FILTERS = ("status", "workflow")
#: Statuses a workflow run can be canceled from.
CANCELABLE = (WorkflowRunStatus.RUNNING, WorkflowRunStatus.FAILED)


class UnknownWorkflow(exceptions.NotFound):
    default_code = "unknown_workflow"


def with_steps(runs: QuerySet | None = None) -> QuerySet:
    """Return ``runs`` with their workflow and step runs (step, job, run) in three queries.

    The step runs' JobRuns are read without payload and result: a wide workflow's
    page must not carry every step's result.
    """
    runs = WorkflowRun.objects.all() if runs is None else runs
    steps = WorkflowStepRun.objects.summaries()
    return runs.select_related("workflow").prefetch_related(Prefetch("step_runs", queryset=steps))


def find_workflow_run(pk: int, runs: QuerySet | None = None) -> WorkflowRun:
    """Return workflow run ``pk`` (on the alias its id names), or raise a 404 naming it."""
    runs = WorkflowRun.objects.all() if runs is None else runs
    where = alias_for_id(pk) if pk <= MAX_ID else None
    wr = one(runs.using(where).filter(pk=pk)) if where else None
    if wr is None:
        raise exceptions.NotFound(f"no workflow run with id {pk}")
    return wr


def list_condition(params: Mapping[str, str]) -> Q:
    """Return the filter a workflow run list's query string asks for."""
    refuse_unknown(params, LIST_FILTERS + PAGING + placement_params())
    condition = Q()
    if (value := params.get("status")) is not None:
        statuses = listed(value, "status")
        unknown = [s for s in statuses if s not in WorkflowRunStatus.values]
        if unknown:
            allowed = ", ".join(WorkflowRunStatus.values)
            raise InvalidField("status", f"unknown status {unknown[0]!r}; allowed: {allowed}")
        condition &= Q(status__in=statuses)
    if (value := params.get("workflow")) is not None:
        condition &= _workflows(listed(value, "workflow"))
    return condition


def _workflows(names: list[str]) -> Q:
    """Refuse a name that no workflow has, as the run list refuses an unknown job."""
    if placed():
        return _workflows_anywhere(names)
    found = dict(Workflow.objects.filter(name__in=names).values_list("name", "pk"))
    missing = [n for n in names if n not in found]
    if missing:
        raise InvalidField("workflow", f"no workflow named {', '.join(map(repr, missing))}")
    return Q(workflow__in=found.values())


def _workflows_anywhere(names: list[str]) -> Q:
    """Several aliases: a workflow's id is its alias's, so the filter names the workflows;
    a name no alias has is refused."""
    found: set[str] = set()
    for where in aliases():
        rows = Workflow.objects.using(where).filter(name__in=names)
        found.update(rows.values_list("name", flat=True))
    missing = [n for n in names if n not in found]
    if missing:
        raise InvalidField("workflow", f"no workflow named {', '.join(map(repr, missing))}")
    return Q(workflow__name__in=names)


class WorkflowTriggerView(StraitAPIView):
    """POST workflows/<name>/trigger/: start a run of the workflow."""

    across_queues = True
    rules = {"POST": TRIGGER}
    throttle_classes = [ClientThrottle, TriggerThrottle]
    named = "workflow"

    @documented(
        operation_id="workflows_trigger",
        request=WorkflowTriggerSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={
            202: TriggeredWorkflowRunSerializer,
            200: OpenApiResponse(
                TriggeredWorkflowRunSerializer, description="An idempotency repeat."
            ),
            **errors(400, 404, 413, 415, 429),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        try:
            wanted = WorkflowTriggerRequest.parse(
                request.data, request.headers.get(IDEMPOTENCY_HEADER)
            )
            wr = trigger_workflow(name, wanted.payload, idempotency_key=wanted.idempotency_key)
        except TriggerError as exc:
            if exc.field == "name":  # from the URL: only an unknown workflow
                raise UnknownWorkflow(f"no workflow named {name!r}") from None
            raise InvalidField.of(exc) from None
        hit = wr.idempotency_hit
        logger.info(
            "api: triggered workflow %s run %s (idempotency hit: %s)", name, wr.pk, hit,
            extra={"workflow_run_id": wr.pk},
        )  # fmt: skip
        wr.workflow = Workflow(name=name)  # for the answer, without reading it again
        return Response(
            TriggeredWorkflowRunSerializer(wr).data,
            status=status.HTTP_200_OK if hit else status.HTTP_202_ACCEPTED,
            headers={"Location": reverse("django_strait_api:workflow-run", args=[wr.pk])},
        )


class WorkflowRunListView(StraitAPIView):
    """GET workflow-runs/: workflow runs, newest first, filtered by status and workflow."""

    across_queues = True
    rules = {"GET": READ}

    @documented(
        operation_id="workflow_runs_list",
        parameters=[
            OpenApiParameter(
                "status", str,
                description=f"Comma-separated statuses: {', '.join(WorkflowRunStatus.values)}.",
            ),
            OpenApiParameter("workflow", str, description="Comma-separated workflow names."),
            DATABASE_PARAMETER,
            *paging_parameters(),
        ],
        responses={200: WorkflowRunPage, **errors(400)},
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        params = request.query_params
        runs = WorkflowRun.objects.filter(list_condition(params)).select_related("workflow")
        page = paginate(runs, NEWEST_FIRST, request, across=listed_aliases(params))
        data = shown(WorkflowRunSummarySerializer, page.rows)
        return Response({"results": data, "next": page.next_url})


class WorkflowRunView(StraitAPIView):
    """GET workflow-runs/<id>/: a workflow run and its step runs."""

    across_queues = True
    rules = {"GET": READ}

    @documented(
        operation_id="workflow_runs_retrieve",
        responses={200: WorkflowRunSerializer, **errors(404)},
    )
    def get(self, request: Request, pk: int) -> Response:
        return Response(shown(WorkflowRunSerializer, [find_workflow_run(pk, with_steps())])[0])


class WorkflowRunCancelView(StraitAPIView):
    """POST workflow-runs/<id>/cancel/: cancel a workflow run and its unfinished steps."""

    across_queues = True
    rules = {"POST": CANCEL}

    @documented(
        operation_id="workflow_runs_cancel",
        request=None,
        responses={200: WorkflowRunSerializer, **errors(404, 409)},
    )
    def post(self, request: Request, pk: int) -> Response:
        wr = find_workflow_run(pk)
        if wr.status not in CANCELABLE:
            raise Conflict(
                f"workflow run {pk} is {wr.status}; only a running or failed one can be canceled"
            )
        cancel_workflow_run(pk)
        logger.info(
            "api: workflow run %s canceled by %s", pk, who(request),
            extra={"workflow_run_id": pk},
        )  # fmt: skip
        return Response(WorkflowRunSerializer(find_workflow_run(pk, with_steps())).data)
