"""The OJS admin-API extension (``/ojs/v1/admin/...``, ojs-admin-api.md) on Strait's runs.

Queues (list, detail, pause, resume: ``ojs.queues``), jobs (list with a state
filter, detail), workers (the project's registered workers and the OJS workers
holding jobs now), aggregate stats, and bulk retry, which needs ``confirm: true``:
each over every alias of ``STRAIT["DATABASES"]`` (``ojs.placed``).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from django.db.models import Count
from django.http import HttpResponse
from django.utils import timezone
from rest_framework.request import Request

from django_strait import transitions
from django_strait.api.auth import Rule
from django_strait.database import alias_for_id, alias_for_queue, aliases
from django_strait.models import Execution, JobRun, WorkerProcess
from django_strait.ojs import errors, placed, queues, work
from django_strait.ojs.present import stamp
from django_strait.ojs.states import OJS_STATES, in_state
from django_strait.ojs.views import OjsView, _page, answer
from django_strait.rules.states import RunStatus
from django_strait.storage import backend

_READ = Rule("runs:read", "django_strait.view_jobrun")
_RETRY = Rule("dlq:replay", "django_strait.replay_jobrun")
#: A worker not seen for this long is stale (the project's workers beat every few seconds).
STALE_AFTER = dt.timedelta(minutes=2)
#: Most jobs one bulk retry moves.
BULK_MAX = 10_000


def _pagination(total: int, page: int, per_page: int) -> dict[str, int]:
    return {"total": total, "page": page, "per_page": per_page}


def _queue_item(state: Any, by_state: dict[str, int]) -> dict[str, Any]:
    body = queues.describe(state)
    return {**body, "state": body["status"], "counts": by_state}


class AdminQueues(OjsView):
    """``GET /ojs/v1/admin/queues``: ``{items: [{name, state, counts, paused}], pagination}``."""

    rules = {"GET": _READ}

    def get(self, request: Request) -> HttpResponse:
        page, per_page = _page(request)
        listed = queues.known(self.scope)
        shown = listed[(page - 1) * per_page : page * per_page]
        counted = queues.counts(self.scope, [s.name for s in shown])
        items = [_queue_item(s, {**queues.EMPTY, **counted.get(s.name, {})}) for s in shown]
        return answer(
            request, {"items": items, "pagination": _pagination(len(listed), page, per_page)}
        )


class AdminQueue(OjsView):
    """``GET /ojs/v1/admin/queues/{name}``."""

    rules = {"GET": _READ}

    def get(self, request: Request, name: str) -> HttpResponse:
        name = queues.named(name, self.scope)
        counted = {**queues.EMPTY, **queues.counts(self.scope, [name]).get(name, {})}
        state = queues.queue_states.state(alias_for_queue(name), name)
        body = _queue_item(state, counted)
        if state.rate_limit_max is not None:
            body["configuration"] = {"rate_limit": {
                "limit": state.rate_limit_max, "period": f"PT{state.rate_limit_window_secs:g}S"}}  # fmt: skip
        return answer(request, body)


class AdminQueuePause(queues.QueuePause):
    """``POST /ojs/v1/admin/queues/{name}/pause`` and ``/resume``: ``{name, paused, ...}``."""

    def post(self, request: Request, name: str) -> HttpResponse:
        name = queues.named(name, self.scope)
        state = queues.queue_states.set_paused(
            alias_for_queue(name), name, self.pause, timezone.now()
        )
        return answer(request, queues.describe(state))


class AdminQueueResume(AdminQueuePause):
    pause = False


def _jobs(scope: Any, using: str) -> Any:
    return scope.only(
        JobRun.objects.using(using).select_related("job").filter(job__execution=Execution.EXTERNAL)
    )


class AdminJobs(OjsView):
    """``GET /ojs/v1/admin/jobs?state=&queue=&type=&page=&per_page=``: newest first."""

    rules = {"GET": _READ}

    def get(self, request: Request) -> HttpResponse:
        page, per_page = _page(request)
        runs = placed.on_each(
            lambda where: _filtered(_jobs(self.scope, where), request.query_params).order_by("-id")
        )
        shown = placed.page_over(runs, page, per_page, key=lambda run: run.pk)
        items = [work.describe(r, with_errors=False) for r in shown.rows]
        return answer(
            request, {"items": items, "pagination": _pagination(shown.total, page, per_page)}
        )


def _filtered(runs: Any, given: Any) -> Any:
    state = given.get("state")
    if state:
        if state not in OJS_STATES:
            raise errors.invalid_request("state", f"must be one of {', '.join(OJS_STATES)}")
        runs = runs.filter(in_state(timezone.now())[state])
    if given.get("queue"):
        runs = runs.filter(queue=given["queue"])
    if given.get("type"):
        runs = runs.filter(job__name=given["type"])
    return runs


class AdminJob(OjsView):
    """``GET /ojs/v1/admin/jobs/{id}``: the job object itself (not wrapped in ``job``)."""

    rules = {"GET": _READ}

    def get(self, request: Request, job_id: str) -> HttpResponse:
        return answer(request, work.describe(work.find(job_id, self.scope)))


class AdminBulkRetry(OjsView):
    """``POST /ojs/v1/admin/jobs/bulk/retry`` ``{filter, confirm: true}``: retry discarded jobs."""

    rules = {"POST": _RETRY}

    def post(self, request: Request) -> HttpResponse:
        body = self.body()
        if body.get("confirm") is not True:
            raise errors.invalid_request("confirm", "must be true: a bulk retry changes many jobs")
        wanted = body.get("filter") or {}
        if not isinstance(wanted, dict):
            raise errors.invalid_request("filter", "must be an object {queue, state, type}")
        wanted = {"state": "discarded", **wanted}
        if wanted["state"] not in ("discarded", "retryable"):
            raise errors.invalid_request("filter.state", "must be discarded or retryable")
        ids = []
        for runs in placed.on_each(lambda where: _filtered(_jobs(self.scope, where), wanted)):
            ids += runs.order_by("id").values_list("pk", "ojs_id")[: BULK_MAX + 1 - len(ids)]
        if len(ids) > BULK_MAX:
            raise errors.invalid_request("filter", f"matches more than {BULK_MAX} jobs; narrow it")
        failed = []
        for pk, ojs_id in ids:
            try:
                transitions.replay(pk, by="ojs admin", storage=backend(alias_for_id(pk)))
            except Exception as exc:  # noqa: BLE001 (reported per job, as the API says)
                failed.append({"job_id": str(ojs_id), "error": str(exc)})
        return answer(request, {"action": "retry", "matched": len(ids),
                                "succeeded": len(ids) - len(failed), "failed": len(failed),
                                "errors": failed})  # fmt: skip


def _workers(now: dt.datetime) -> list[dict[str, Any]]:
    items = [
        {"id": w.worker_id, "hostname": w.host, "queues": w.queues, "concurrency": w.concurrency,
         "active_jobs": w.in_flight, "started_at": stamp(w.started_at),
         "last_heartbeat_at": stamp(w.last_seen_at),
         "state": "running" if now - w.last_seen_at < STALE_AFTER else "stale"}
        for where in aliases()
        for w in WorkerProcess.objects.using(where)
    ]  # fmt: skip
    held: Counter[str] = Counter()
    for where in aliases():
        held.update(
            {
                row["claimed_by"]: row["n"]
                for row in JobRun.objects.using(where)
                .filter(
                    status=RunStatus.EXECUTING,
                    job__execution=Execution.EXTERNAL,
                    claimed_by__startswith="ojs:",
                )
                .values("claimed_by")
                .annotate(n=Count("id"))
            }
        )
    items += [
        {"id": claimed_by.removeprefix("ojs:"), "state": "running", "active_jobs": n}
        for claimed_by, n in held.items()
    ]
    return items


class AdminWorkers(OjsView):
    """``GET /ojs/v1/admin/workers``: ``{items, summary, pagination}``."""

    rules = {"GET": _READ}

    def get(self, request: Request) -> HttpResponse:
        page, per_page = _page(request)
        items = _workers(timezone.now())
        summary = {"total": len(items), "running": 0, "quiet": 0, "stale": 0}
        for item in items:
            summary[item["state"]] += 1
        shown = items[(page - 1) * per_page : page * per_page]
        return answer(request, {"items": shown, "summary": summary,
                                "pagination": _pagination(len(items), page, per_page)})  # fmt: skip


class AdminStats(OjsView):
    """``GET /ojs/v1/admin/stats``: queues, workers, jobs by state, the last minute's throughput."""

    rules = {"GET": _READ}

    def get(self, request: Request) -> HttpResponse:
        now = timezone.now()
        counted = queues.counts(self.scope)
        jobs = dict(queues.EMPTY)
        for by_state in counted.values():
            for name, n in by_state.items():
                jobs[name] += n
        done: Counter[str] = Counter()
        for where in aliases():
            minute = self.scope.only(
                JobRun.objects.using(where).filter(finished_at__gte=now - dt.timedelta(minutes=1))
            )
            done.update(
                minute.aggregate(
                    processed=Count("id", filter=in_state(now)["completed"]),
                    failed=Count("id", filter=in_state(now)["discarded"]),
                )
            )
        return answer(request, {"queues": len(counted), "workers": len(_workers(now)), "jobs": jobs,
                                "throughput": {"processed_per_minute": done["processed"],
                                               "failed_per_minute": done["failed"]}})  # fmt: skip
