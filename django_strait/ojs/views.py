"""The OJS HTTP binding's views (DRF): the envelope, the error shape, auth and scopes.

Every answer carries ``OJS-Version: 1.0`` and exactly the configured content
type (``STRAIT["OJS_CONTENT_TYPE"]``); errors are ``{"error": {...}}`` with the
OJS codes (docs/ojs.md).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from django_strait import __version__
from django_strait.api.auth import (
    ApiKeyAuthentication,
    QueueScope,
    Rule,
    ScopeOrPermission,
    StraitTokenAuthentication,
)
from django_strait.api.throttles import AuthFailureThrottle, ClientThrottle
from django_strait.conf import strait_settings
from django_strait.ojs import batch, errors, events, inputs, placed, schedules, work
from django_strait.ojs.errors import OjsError
from django_strait.ojs.present import stamp

logger = logging.getLogger(__name__)

SPEC_VERSION = "1.0"
#: The highest level of the suite this server passes whole, with every level below it
#: (levels build on each other): core, reliable, scheduled, workflows, advanced (docs/ojs.md).
CONFORMANCE_LEVEL = 4
#: http-binding 21.2's feature flags.
CAPABILITIES = {
    "batch_enqueue": True, "cron_jobs": True, "dead_letter": True, "delayed_jobs": True,
    "job_ttl": True, "priority_queues": True, "rate_limiting": True, "schema_validation": False,
    "unique_jobs": True, "workflows": True, "pause_resume": True,
}  # fmt: skip


class BearerKeyAuthentication(ApiKeyAuthentication):
    """``Authorization: Bearer <api key>``: the OJS SDKs' form of the same API keys."""

    keyword = "Bearer"


class OjsView(APIView):
    """JSON (either content type) in, the OJS envelope out; keys and scopes as the REST API."""

    authentication_classes = [
        BearerKeyAuthentication,
        ApiKeyAuthentication,
        StraitTokenAuthentication,
    ]
    throttle_classes = [ClientThrottle]
    #: The queues the request's credential may use (set once it is authenticated).
    scope = QueueScope()
    parser_classes: list = []
    rules: Mapping[str, Rule] = {}

    def get_permissions(self) -> list:
        if not strait_settings.OJS_REQUIRE_AUTH:
            return []
        return [IsAuthenticated(), ScopeOrPermission()]

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # One representation, whatever Accept says: the SDKs send the OJS type, JSON or */*.
        return JSONRenderer(), strait_settings.OJS_CONTENT_TYPE

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        refuse_nul(request, kwargs)
        self.scope = QueueScope.of(request)

    def within_scope(self, queue: str, field: str) -> None:
        """Refuse (403) naming ``queue`` to fetch from or enqueue into, if outside the key's queues."""
        if not self.scope.allows(queue):
            raise errors.forbidden(field, self.scope.refusal(queue))

    def body(self) -> dict[str, Any]:
        """The request's JSON object; an empty or unreadable body is ``invalid_payload``."""
        limit = strait_settings.API_MAX_PAYLOAD_BYTES
        declared = self.request.META.get("CONTENT_LENGTH") or "0"
        try:
            too_long = declared.isdigit() and (len(declared) > 18 or int(declared) > limit)
            raw = b"" if too_long else self.request._request.body
        except RequestDataTooBig:  # past DATA_UPLOAD_MAX_MEMORY_SIZE, if that is lower
            too_long, raw = True, b""
        return inputs.body_of(raw, too_long)

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, exceptions.AuthenticationFailed):
            exc = AuthFailureThrottle().failed(self.request) or exc
        error = _as_ojs(exc)
        return answer(
            self.request, error.body(request_id(self.request)), error.status, error.headers
        )

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        response["OJS-Version"] = SPEC_VERSION
        response["X-Request-ID"] = request_id(request)
        return response


NUL = "\x00"


def refuse_nul(request: Request, url_kwargs: Mapping[str, Any]) -> None:
    """Refuse the NUL character in the path and the query string, naming where.

    No id, name or queue holds it, and PostgreSQL cannot compare text with it: a
    path parameter holding it names nothing (404), a query parameter is refused (400).
    """
    for name, value in url_kwargs.items():
        if isinstance(value, str) and NUL in value:
            raise OjsError(
                404,
                "not_found",
                f"{name} {value!r} not found: no {name} holds the NUL character (\\u0000)",
                details={name: value},
            )
    for name, values in request.query_params.lists():
        if NUL in name or any(NUL in v for v in values):
            raise errors.invalid_request(
                name.replace(NUL, "\\u0000"), "must not contain the NUL character (\\u0000)"
            )


def _as_ojs(exc: Exception) -> OjsError:
    if isinstance(exc, OjsError):
        return exc
    if isinstance(exc, exceptions.Throttled):
        wait = int(exc.wait or 1)
        return OjsError(
            429, "rate_limited", str(exc.detail), retryable=True, headers={"Retry-After": str(wait)}
        )
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        return OjsError(
            401, "unauthorized", str(exc.detail), headers={"WWW-Authenticate": "Bearer"}
        )
    if isinstance(exc, exceptions.PermissionDenied):
        return OjsError(403, "forbidden", str(exc.detail))
    if isinstance(exc, exceptions.MethodNotAllowed):
        return OjsError(405, "invalid_request", str(exc.detail))
    if isinstance(exc, exceptions.APIException):
        return OjsError(exc.status_code, "invalid_request", str(exc.detail))
    # Unforeseen: logged, and answered in the envelope (as the fast door does), not Django's page.
    logger.error("OJS request failed", exc_info=exc)
    return OjsError(500, "internal_error", "the server failed to answer; see its log")


def request_id(request: Any) -> str:
    """The client's ``X-Request-ID`` (printable, short), or a new one."""
    given = request.META.get("HTTP_X_REQUEST_ID", "")
    if given and len(given) <= 200 and given.isprintable():
        return given
    cached = getattr(request, "_ojs_request_id", None)
    if cached is None:
        cached = f"req_{uuid.uuid4().hex}"
        request._ojs_request_id = cached
    return cached


def answer(
    request: Any, data: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> HttpResponse:
    """A JSON answer in the configured OJS content type, with nothing after it."""
    if status == 204:
        response = HttpResponse(status=204)
    else:
        response = HttpResponse(
            json.dumps(data), status=status, content_type=strait_settings.OJS_CONTENT_TYPE
        )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


@csrf_exempt  # it changes nothing, and a POST must get the same 404
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Answer a path under ``/ojs/`` that no endpoint serves (``/ojs/v1/jobs/a/b``) in the OJS shape."""
    error = OjsError(404, "not_found", f"no OJS endpoint at {request.path}")
    response = answer(request, error.body(request_id(request)), 404)
    response["OJS-Version"] = SPEC_VERSION
    response["X-Request-ID"] = request_id(request)
    return response


def _read(scope: str) -> Rule:
    return Rule(scope, "django_strait.view_jobrun")


_ENQUEUE = Rule("jobs:trigger", "django_strait.trigger_job")
_WORK = Rule("runs:write", "django_strait.change_jobrun")
_CANCEL = Rule("runs:write", "django_strait.cancel_jobrun")
_DLQ_READ = Rule("dlq:read", "django_strait.view_jobrun")
_DLQ_WRITE = Rule("dlq:replay", "django_strait.replay_jobrun")
_CRON_READ = Rule("jobs:read", "django_strait.view_job")
_CRON_WRITE = Rule("jobs:write", "django_strait.change_job")


class Manifest(OjsView):
    """``GET /ojs/manifest``: what this server implements."""

    rules = {"GET": _read("jobs:read")}

    def get(self, request: Request) -> HttpResponse:
        return answer(request, {
            "ojs_version": SPEC_VERSION,
            "specversion": SPEC_VERSION,  # the name before http-binding 21.2; kept for old clients
            "implementation": {"name": "django-strait", "version": __version__, "language": "python",
                               "homepage": "https://github.com/django-strait/django-strait"},
            "conformance_level": CONFORMANCE_LEVEL,
            "protocols": ["http"],
            "backend": "postgresql-or-sqlite",
            "capabilities": CAPABILITIES,
            "extensions": ["dead-letter", "cron", "events", "admin-api", "progress",
                           "events-stream"],
            "endpoints": {"base_url": "/ojs/v1", "manifest": "/ojs/manifest",
                          "health": "/ojs/v1/health"},
        })  # fmt: skip


class Health(OjsView):
    """``GET /ojs/v1/health``."""

    rules = {"GET": _read("runs:read")}

    def get(self, request: Request) -> HttpResponse:
        return answer(request, {"status": "ok", "version": SPEC_VERSION})


class Jobs(OjsView):
    """``POST /ojs/v1/jobs``: enqueue one job."""

    rules = {"POST": _ENQUEUE}

    def post(self, request: Request) -> HttpResponse:
        wanted = inputs.job_request(self.body())
        self.within_scope(wanted.queue, "options.queue")
        status, body, headers = work.enqueued(work.enqueue(wanted, self.scope))
        return answer(request, body, status, headers)


class JobsBatch(OjsView):
    """``POST /ojs/v1/jobs/batch``: enqueue many, all or none."""

    rules = {"POST": _ENQUEUE}

    def post(self, request: Request) -> HttpResponse:
        jobs = self.body().get("jobs")
        if not isinstance(jobs, list) or not 1 <= len(jobs) <= inputs.BATCH_MAX:
            raise errors.invalid_request(
                "jobs", f"must be an array of 1 to {inputs.BATCH_MAX} jobs"
            )
        wanted = [inputs.job_request(j, f"jobs[{i}].") for i, j in enumerate(jobs)]
        for i, one in enumerate(wanted):
            self.within_scope(one.queue, f"jobs[{i}].options.queue")
        if any(one.unique is not None for one in wanted):
            runs = work.enqueue_batch(wanted, self.scope)
        else:
            runs = batch.enqueue_batch(wanted)
        bodies = [work.describe(r, with_errors=False) for r in runs]
        return answer(request, {"jobs": bodies, "count": len(bodies)}, 201)


class JobDetail(OjsView):
    """``GET /ojs/v1/jobs/{id}`` and ``DELETE`` (cancel)."""

    rules = {"GET": _read("runs:read"), "DELETE": _CANCEL}

    def get(self, request: Request, job_id: str) -> HttpResponse:
        return answer(request, {"job": work.describe(work.find(job_id, self.scope))})

    def delete(self, request: Request, job_id: str) -> HttpResponse:
        return answer(request, {"job": work.describe(work.cancel(job_id, self.scope))})


class Fetch(OjsView):
    """``POST /ojs/v1/workers/fetch``."""

    rules = {"POST": _WORK}

    def post(self, request: Request) -> HttpResponse:
        queues, count, worker, visibility = inputs.fetch_request(self.body())
        for i, queue in enumerate(queues):
            self.within_scope(queue, f"queues[{i}]")
        runs = work.fetch(queues, count, worker, visibility)
        return answer(request, {"jobs": [work.describe(r, with_errors=False) for r in runs]})


class Ack(OjsView):
    """``POST /ojs/v1/workers/ack``."""

    rules = {"POST": _WORK}

    def post(self, request: Request) -> HttpResponse:
        body = self.body()
        run = work.ack(body.get("job_id"), body.get("result"), inputs.holder(body), self.scope)
        return answer(request, work.ended(run))


class Nack(OjsView):
    """``POST /ojs/v1/workers/nack``."""

    rules = {"POST": _WORK}

    def post(self, request: Request) -> HttpResponse:
        body = self.body()
        error = body.get("error") or {}
        if not isinstance(error, dict):
            raise errors.invalid_request(
                "error", "must be an object {code, message, retryable, details}"
            )
        run, decision = work.nack(
            body.get("job_id"), error, body.get("requeue") is True, inputs.holder(body), self.scope
        )
        return answer(request, work.ended(run, decision))


class Heartbeat(OjsView):
    """``POST /ojs/v1/workers/heartbeat``."""

    rules = {"POST": _WORK}

    def post(self, request: Request) -> HttpResponse:
        body = self.body()
        ids, vis, worker = inputs.heartbeat(body)
        directive, extended = work.heartbeat(worker, ids, vis, self.scope)
        return answer(request, {"state": directive, "directive": directive,
                                "jobs_extended": extended, "server_time": job_stamp()})  # fmt: skip


def job_stamp() -> str:
    return stamp(timezone.now()) or ""


class DeadLetters(OjsView):
    """``GET /ojs/v1/dead-letter`` (``jobs``) and the extension's ``/admin/dead-letter`` (``items``)."""

    rules = {"GET": _DLQ_READ}
    key = "jobs"

    def get(self, request: Request) -> HttpResponse:
        page_number, per_page = _page(request)
        # Every alias's, newest first; a run that cannot be read is left out of its
        # page (and logged), not the page.
        page = placed.page_over(
            placed.on_each(lambda where: work.dead_letters(self.scope, where)),
            page_number, per_page, key=_dead_order,
        )  # fmt: skip
        bodies = [work.describe(run) for run in page.rows]
        return answer(request, {self.key: bodies, "pagination": {
            "page": page.number, "per_page": per_page, "total": page.total, "pages": page.pages}})  # fmt: skip


_NEVER = dt.datetime.min.replace(tzinfo=dt.UTC)


def _dead_order(run: Any) -> tuple[bool, Any, int]:
    """The dead-letter list's order (finished, newest first; PostgreSQL's nulls first)."""
    return (run.finished_at is None, run.finished_at or _NEVER, run.pk)


def _page(request: Request) -> tuple[int, int]:
    try:
        page = max(int(request.query_params.get("page", 1)), 1)
        per_page = min(
            max(
                int(request.query_params.get("per_page", request.query_params.get("limit", 50))), 1
            ),
            500,
        )
    except ValueError:
        raise errors.invalid_request("page", "page and per_page must be whole numbers") from None
    return page, per_page


class AdminDeadLetters(DeadLetters):
    key = "items"


class DeadLetterStats(OjsView):
    """``GET /ojs/v1/admin/dead-letter/stats``."""

    rules = {"GET": _DLQ_READ}

    def get(self, request: Request) -> HttpResponse:
        by_type: dict[str, int] = {}
        by_queue: dict[str, int] = {}
        for runs in placed.on_each(lambda where: work.dead_letters(self.scope, where)):
            for name, queue in runs.values_list("job__name", "queue"):
                by_type[name] = by_type.get(name, 0) + 1
                by_queue[queue] = by_queue.get(queue, 0) + 1
        return answer(
            request, {"total": sum(by_type.values()), "by_type": by_type, "by_queue": by_queue}
        )


class DeadLetterRetry(OjsView):
    """``POST .../dead-letter/{id}/retry``."""

    rules = {"POST": _DLQ_WRITE}

    def post(self, request: Request, job_id: str) -> HttpResponse:
        return answer(request, {"job": work.describe(work.retry_dead_letter(job_id, self.scope))})


class DeadLetterDetail(OjsView):
    """``DELETE /ojs/v1/dead-letter/{id}``: ``{deleted, job_id}``; the extension's answers 204."""

    rules = {"GET": _DLQ_READ, "DELETE": _DLQ_WRITE}
    no_content = False

    def get(self, request: Request, job_id: str) -> HttpResponse:
        return answer(request, {"job": work.describe(work.dead_letter(job_id, self.scope))})

    def delete(self, request: Request, job_id: str) -> HttpResponse:
        work.delete_dead_letter(job_id, self.scope)
        if self.no_content:
            return answer(request, None, 204)
        return answer(request, {"deleted": True, "job_id": job_id})


class AdminDeadLetterDetail(DeadLetterDetail):
    no_content = True


class Crons(OjsView):
    """``GET /ojs/v1/cron`` and ``POST`` (register)."""

    rules = {"GET": _CRON_READ, "POST": _CRON_WRITE}

    def get(self, request: Request) -> HttpResponse:
        now = timezone.now()
        listed = [schedules.describe(j, now) for j in schedules.crons(self.scope)]
        return answer(request, {"crons": listed, "cron_jobs": listed})

    def post(self, request: Request) -> HttpResponse:
        described = schedules.describe(schedules.register(self.body(), self.scope), timezone.now())
        return answer(request, {"cron": described, "cron_job": described}, 201)


class CronDetail(OjsView):
    """``DELETE /ojs/v1/cron/{name}``."""

    rules = {"GET": _CRON_READ, "DELETE": _CRON_WRITE}

    def get(self, request: Request, name: str) -> HttpResponse:
        described = schedules.describe(schedules.find(name, self.scope), timezone.now())
        return answer(request, {"cron": described, "cron_job": described})

    def delete(self, request: Request, name: str) -> HttpResponse:
        job = schedules.delete(name, self.scope)
        described = {**schedules.describe(job, timezone.now()), "enabled": False}
        return answer(request, {"cron": described, "cron_job": described, "deleted": True})


class Events(OjsView):
    """``GET /ojs/v1/events?types=&queues=&limit=``: recent state changes, newest first."""

    rules = {"GET": _read("runs:read")}

    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        types = [t for t in params.get("types", "").split(",") if t]
        queues = [q for q in params.get("queues", "").split(",") if q]
        try:
            limit = min(max(int(params.get("limit", 50)), 1), 500)
        except ValueError:
            raise errors.invalid_request("limit", "must be a whole number from 1 to 500") from None
        return answer(request, {"events": events.recent(types, queues, limit, self.scope)})


class Activate(OjsView):
    """``POST /ojs/v1/jobs/{id}/activate``: a scheduled job becomes available now."""

    rules = {"POST": _ENQUEUE}

    def post(self, request: Request, job_id: str) -> HttpResponse:
        raise errors.conflict(f"job {job_id} is not pending: django-strait has no pending jobs yet")
