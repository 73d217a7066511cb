"""Jobs: list, read, create, update, pause/resume, trigger one run, trigger many."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from django_strait.api.auth import QueueScope, Rule
from django_strait.api.base import StraitAPIView
from django_strait.api.errors import InvalidField, UnknownJob
from django_strait.api.filters import refuse_unknown
from django_strait.api.pagination import Keyset, one, page_serializer, paginate, shown
from django_strait.api.placement import (
    DATABASE_PARAMETER,
    listed_aliases,
    placed_job,
    placement_params,
    stays_on_its_alias,
)
from django_strait.api.schema import documented, errors, paging_parameters
from django_strait.api.serializers import (
    IDEMPOTENCY_HEADER,
    BulkTriggeredSerializer,
    BulkTriggerRequest,
    BulkTriggerSerializer,
    JobSerializer,
    JobUpdateSerializer,
    PauseSerializer,
    TriggeredRunSerializer,
    TriggerRequest,
    TriggerSerializer,
)
from django_strait.api.throttles import ClientThrottle, TriggerThrottle
from django_strait.conf import strait_settings
from django_strait.models import Job, JobRun
from django_strait.services.syncing import job_alias
from django_strait.services.triggering import TriggerError, trigger, trigger_many

logger = logging.getLogger(__name__)

READ = Rule("jobs:read", "django_strait.view_job")
CREATE = Rule("jobs:write", "django_strait.add_job")
CHANGE = Rule("jobs:write", "django_strait.change_job")
TRIGGER = Rule("jobs:trigger", "django_strait.trigger_job")

JobPage = page_serializer("JobPage", JobSerializer)


def find_job(name: str, scope: QueueScope) -> Job:
    """Return the job named ``name`` (if its queue is in ``scope``), or raise a 404 naming it.

    Several aliases: read on the job's own (its ``@job`` queue's, else the alias that has it).
    """
    job = one(scope.only(Job.objects.using(job_alias(name)).filter(name=name)))
    if job is None:
        raise UnknownJob(f"no job named {name!r}")
    return job


class JobListView(StraitAPIView):
    """GET jobs/: the jobs, by name. POST jobs/: define a job."""

    rules = {"GET": READ, "POST": CREATE}

    @documented(
        operation_id="jobs_list",
        parameters=[*paging_parameters(), DATABASE_PARAMETER],
        responses={200: JobPage, **errors(400)},
    )
    def get(self, request: Request) -> Response:
        refuse_unknown(request.query_params, ("cursor", "limit", *placement_params()))
        across = listed_aliases(request.query_params)
        jobs = self.scope.only(Job.objects.all())
        page = paginate(jobs, Keyset("name", kind=str), request, across=across)
        return Response({"results": shown(JobSerializer, page.rows), "next": page.next_url})

    @documented(
        operation_id="jobs_create",
        request=JobSerializer,
        responses={201: JobSerializer, **errors(400, 413, 415)},
    )
    def post(self, request: Request) -> Response:
        serializer = JobSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self.within_scope(serializer.validated_data.get("queue", "default"))
        job = placed_job(serializer)
        logger.info("api: job %s defined by %s", job.name, request.user.get_username())
        return Response(
            JobSerializer(job).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": reverse("django_strait_api:job", args=[job.name])},
        )


class JobView(StraitAPIView):
    """GET, PUT, PATCH jobs/<name>/: read or change a job (its name stays)."""

    rules = {"GET": READ, "PUT": CHANGE, "PATCH": CHANGE}

    @documented(operation_id="jobs_retrieve", responses={200: JobSerializer, **errors(404)})
    def get(self, request: Request, name: str) -> Response:
        return Response(shown(JobSerializer, [find_job(name, self.scope)])[0])

    @documented(
        operation_id="jobs_update",
        request=JobUpdateSerializer,
        responses={200: JobSerializer, **errors(400, 404, 413, 415)},
    )
    def put(self, request: Request, name: str) -> Response:
        return self._change(request, name, partial=False)

    @documented(
        operation_id="jobs_partial_update",
        request=JobUpdateSerializer(partial=True),
        responses={200: JobSerializer, **errors(400, 404, 413, 415)},
    )
    def patch(self, request: Request, name: str) -> Response:
        return self._change(request, name, partial=True)

    def _change(self, request: Request, name: str, *, partial: bool) -> Response:
        job = find_job(name, self.scope)
        serializer = JobUpdateSerializer(job, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        self.within_scope(serializer.validated_data.get("queue", job.queue))
        stays_on_its_alias(job, serializer.validated_data.get("queue", job.queue))
        job = serializer.save()
        logger.info("api: job %s changed by %s", job.name, request.user.get_username())
        return Response(JobSerializer(job).data)


class _EnabledView(StraitAPIView):
    rules = {"POST": CHANGE}
    enabled = True

    def post(self, request: Request, name: str) -> Response:
        job = find_job(name, self.scope)
        # A guarded update: a repeat changes nothing and still answers the state.
        Job.objects.using(job._state.db).filter(pk=job.pk).exclude(enabled=self.enabled).update(
            enabled=self.enabled, updated_at=timezone.now()
        )
        logger.info(
            "api: job %s %s by %s", name, "resumed" if self.enabled else "paused",
            request.user.get_username(),
        )  # fmt: skip
        return Response({"name": job.name, "enabled": self.enabled})


class PauseView(_EnabledView):
    """POST jobs/<name>/pause/: stop workers from claiming its runs (they stay queued)."""

    enabled = False

    @documented(
        operation_id="jobs_pause", request=None, responses={200: PauseSerializer, **errors(404)}
    )
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)


class ResumeView(_EnabledView):
    """POST jobs/<name>/resume/: let workers claim its runs again."""

    enabled = True

    @documented(
        operation_id="jobs_resume", request=None, responses={200: PauseSerializer, **errors(404)}
    )
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)


IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    str,
    OpenApiParameter.HEADER,
    description="A repeat with the same key answers 200 with the first run.",
)


class TriggerView(StraitAPIView):
    """POST jobs/<name>/trigger/: queue one run of the job."""

    rules = {"POST": TRIGGER}
    throttle_classes = [ClientThrottle, TriggerThrottle]

    @documented(
        operation_id="jobs_trigger",
        request=TriggerSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={
            202: TriggeredRunSerializer,
            200: OpenApiResponse(TriggeredRunSerializer, description="An idempotency repeat."),
            **errors(400, 404, 413, 415, 429),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        try:
            wanted = TriggerRequest.parse(request.data, request.headers.get(IDEMPOTENCY_HEADER))
            within_trigger_scope(self, name, wanted.options)
            run = trigger(name, wanted.payload, **wanted.options)
        except TriggerError as exc:
            raise _refused(exc, name) from None
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


class BulkTriggerView(StraitAPIView):
    """POST jobs/<name>/bulk-trigger/: queue one run per payload, in one statement."""

    rules = {"POST": TRIGGER}
    throttle_classes = [ClientThrottle, TriggerThrottle]

    @documented(
        operation_id="jobs_bulk_trigger",
        request=BulkTriggerSerializer,
        responses={
            202: BulkTriggeredSerializer,
            200: OpenApiResponse(BulkTriggeredSerializer, description="Every key was a repeat."),
            **errors(400, 404, 413, 415, 429),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        try:
            wanted = BulkTriggerRequest.parse(request.data, strait_settings.API_BULK_TRIGGER_MAX)
            within_trigger_scope(self, name, wanted.options)
            taken = _taken_keys(name, wanted.options.get("idempotency_keys"))
            runs = trigger_many(name, wanted.payloads, **wanted.options)
        except TriggerError as exc:
            raise _refused(exc, name) from None
        for run in runs:
            if not hasattr(run, "idempotency_hit"):
                run.idempotency_hit = run.idempotency_key in taken
        created = sum(not r.idempotency_hit for r in runs)
        logger.info("api: triggered %s runs of %s (%s new)", len(runs), name, created)
        return Response(
            {"runs": TriggeredRunSerializer(runs, many=True).data, "created": created},
            status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK,
        )


def within_trigger_scope(view: StraitAPIView, name: str, options: Mapping[str, Any]) -> None:
    """Refuse (403) a trigger whose runs go to a queue outside the key's: the one asked, or the job's.

    Nothing is read for a key without queues (the trigger's path stays as it was).
    """
    if not view.scope.limited:
        return
    asked = options.get("queue")
    if not isinstance(asked, str):
        jobs = Job.objects.using(job_alias(name)).filter(name=name)
        asked = jobs.values_list("queue", flat=True).first()
    if asked is not None:  # None: no such job, and trigger() says so
        view.within_scope(asked)


def _taken_keys(name: str, keys: Any) -> set[str]:
    """Return which of ``keys`` the job's runs already hold (those runs are repeats).

    ``trigger_many`` knows exactly which runs it made but does not say; a key taken
    by a simultaneous request between this read and the INSERT reads as new.
    """
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return set()  # trigger_many refuses them, naming the field
    runs = JobRun.objects.using(job_alias(name)).filter(job__name=name, idempotency_key__in=keys)
    return set(runs.values_list("idempotency_key", flat=True))


def _refused(exc: TriggerError, name: str) -> Exception:
    # The job name comes from the URL: a refused name can only be an unknown job.
    if exc.field == "name":
        return UnknownJob(f"no job named {name!r}")
    return InvalidField.of(exc)
