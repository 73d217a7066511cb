"""Job definitions in the admin: edited here, validated by ``Job.clean()``; trigger now."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db import models, transaction
from django.db.models import Max, QuerySet, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_strait import database
from django_strait.admin import display, endpoints
from django_strait.admin.aliases import AcrossAliases, alias_for_key
from django_strait.admin.drilldown import endpoint_stats_view, job_stats_view
from django_strait.admin.forms import MASK, JobForm, TriggerForm, secret_state
from django_strait.admin.inputs import GuardedInput
from django_strait.admin.overview_page import overview_view
from django_strait.admin.unreadable import ReadsRowsAside, SetsAside, say_problems
from django_strait.database import alias
from django_strait.models import Job, JobPresetRecommendation, JobRun, RunRollup
from django_strait.rules.states import TERMINAL, RunStatus
from django_strait.services import registry
from django_strait.services.triggering import TriggerError, trigger
from django_strait.storage.rows import read, readable_instants

#: How far back a job's success rate and last outcome look (rollups, not runs).
STATS_WINDOW = dt.timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class JobStats:
    """A job's finished runs over the stats window, from the per-minute rollups."""

    finished: int = 0
    succeeded: int = 0
    #: Where the job's most recent attempt left its run ("" when none in the window).
    last_status: str = ""

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.finished if self.finished else None


def read_job_stats(
    job_ids: Iterable[int], now: dt.datetime, using: str | None = None
) -> dict[int, JobStats]:
    """Return the stats of each job over the window: one grouped query on ``using``'s rollups."""
    rows = (
        RunRollup.objects.using(using)
        .filter(job_id__in=list(job_ids), minute__gte=now - STATS_WINDOW)
        .filter(readable_instants("minute"))
        .values_list("job_id", "status")
        .annotate(n=Sum("count"), last=Max("minute"))
        .order_by()
    )
    by_job: dict[int, list[tuple[str, int, dt.datetime]]] = defaultdict(list)
    for job_id, status, n, last in rows:
        by_job[job_id].append((status, n, last))
    return {job_id: _stats(found) for job_id, found in by_job.items()}


def _stats(rows: Sequence[tuple[str, int, dt.datetime]]) -> JobStats:
    # A retry ("queued") is an attempt, not a finished run: it counts only as the last outcome.
    finished = sum(n for status, n, _ in rows if status in TERMINAL)
    succeeded = sum(n for status, n, _ in rows if status == RunStatus.COMPLETED)
    # Minute resolution: on a tie a finished run is shown before a retry (a run that retried
    # and then completed within the minute completed), and a failure before a success.
    _, _, _, last_status = max(
        (last, status in TERMINAL, status != RunStatus.COMPLETED, status)
        for status, _, last in rows
    )
    return JobStats(finished=finished, succeeded=succeeded, last_status=last_status)


class JobChangeList(SetsAside):
    """The job list, with each listed job's stats read in one query."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        stats = read_job_stats(
            [job.pk for job in self.result_list], timezone.now(), self.queryset.db
        )
        for job in self.result_list:
            job.strait_stats = stats.get(job.pk, JobStats())
        if apart_from_control(self.queryset.db):
            endpoints.read_protection(self.result_list, database.control_reads(self.queryset.db))


def apart_from_control(using: str) -> bool:
    """Whether jobs listed from ``using`` have their circuits and health on another
    database, the control one (several databases): read there for the page."""
    return database.placed() and using != database.control_alias()


@admin.register(Job)
class JobAdmin(AcrossAliases, GuardedInput, ReadsRowsAside, admin.ModelAdmin):
    """Jobs: what runs, where, and how it retries; pause and resume."""

    list_display = (
        "name", "enabled", "target", "last_outcome", "success_rate", "health", "circuit",
    )  # fmt: skip
    list_filter = ("enabled", "queue")
    search_fields = ("name", "endpoint_url", "handler")
    actions = ("trigger_now", "pause_selected", "resume_selected")
    change_form_template = "admin/django_strait/job_change_form.html"
    # The signing secret and header values are written, never shown (docs/security.md).
    form = JobForm
    readonly_fields = ("recommended_preset", "created_at", "updated_at")
    # A URL typed without a scheme means https (Django 6's default; 5.x warns without it).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    fieldsets = (
        (None, {"fields": ("name", "description", "enabled", "queue", "priority")}),
        ("Target: an HTTP endpoint or a Python handler", {"fields": (
            "endpoint_url", "fallback_endpoint_urls", "http_method", "headers",
            "signing_secret", "handler", "timeout_secs",
        )}),
        ("Retry policy (empty inherits STRAIT['DEFAULT_RETRY'])", {"fields": (
            "max_attempts", "retry_strategy", "retry_initial_delay_secs",
            "retry_backoff_coefficient", "retry_max_delay_secs", "retry_delays_secs",
            "retry_jitter", "retry_jitter_window_secs", "retry_function", "non_retryable_errors",
            "on_exhaustion",
        )}),
        ("Execution (Python jobs: thread, or a child process with a memory preset)", {"fields": (
            "execution", "preset", "recommended_preset",
        )}),
        ("Limits (across all workers; empty = none)", {"fields": (
            "max_concurrency", "rate_limit_max", "rate_limit_window_secs",
        )}),
        ("Budget (a project's daily budget; empty = none)", {"fields": (
            "project", "estimated_cost",
        )}),
        ("Schedule and retention", {"fields": (
            "schedule", "timezone", "schedule_missed", "schedule_overlap", "retention_days",
        )}),
        ("Completion webhook (signed with the signing secret)", {"fields": (
            "webhook_url", "webhook_events", "webhook_retry",
        )}),
        (None, {"fields": ("created_at", "updated_at")}),
    )  # fmt: skip

    @admin.display(description="recommended preset")
    def recommended_preset(self, job: Job) -> str:
        """The preset the job's runs start at after an OOM kill, while it lasts (24 h)."""
        if job.pk is None:
            return "-"
        found = read(JobPresetRecommendation.objects.using(job._state.db).filter(job_id=job.pk))
        if found.unreadable:
            return f"cannot be shown: {say_problems(found.unreadable)}"
        rec = found.rows[0] if found.rows else None
        if rec is None or rec.expires_at <= timezone.now():
            return "-"
        return (
            f"{rec.preset} (after an out-of-memory kill; until {rec.expires_at:%Y-%m-%d %H:%M} UTC)"
        )

    @admin.display(description="target")
    def target(self, job: Job) -> SafeString | str:
        return display.cut(job.endpoint_url or job.handler, 20)

    @admin.display(description="signing secret")
    def signing_secret_state(self, job: Job) -> str:
        return secret_state(job.signing_secret)

    @admin.display(description="headers")
    def masked_headers(self, job: Job) -> SafeString | str:
        names = job.headers if isinstance(job.headers, dict) else {}
        return format_html_join("", "{}: {}<br>", ((name, MASK) for name in names)) or "-"

    @admin.display(description="schedule")
    def schedule_from_code(self, job: Job) -> str:
        """A schedule that code owns, saying so (read-only, like what else code declares)."""
        entry = registry.get(job.name)
        where = f" by {entry.spec.path}" if entry is not None else ""
        return f"{job.schedule or '-'} (declared in code{where}: change it there)"

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        # What code declares, code owns: each sync writes it again (docs/schedules.md).
        found = list(super().get_readonly_fields(request, obj))
        declared = declared_fields(obj)
        extra = ["schedule_from_code"] if "schedule" in declared else []
        return found + [f for f in [*declared, *extra] if f not in found]

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> list[Any]:
        # Django shows a read-only page's fields with their values: show the secret's
        # state and the header names instead. An editable page can clear the secret.
        if obj is not None and not self.has_change_permission(request, obj):
            swap = {"signing_secret": ("signing_secret_state",), "headers": ("masked_headers",)}
        elif obj is not None:
            swap = {"signing_secret": ("signing_secret", "clear_signing_secret")}
        else:
            swap = {}
        if "schedule" in declared_fields(obj):
            swap["schedule"] = ("schedule_from_code",)
        return [
            (title, {**options, "fields": _swapped(options["fields"], swap)})
            for title, options in super().get_fieldsets(request, obj)
        ]

    @admin.display(description="last outcome")
    def last_outcome(self, job: Job) -> str:
        status = _stats_of(job).last_status
        return {"": "-", RunStatus.QUEUED: "retrying"}.get(status, status)

    @admin.display(description="success (24 h)")
    def success_rate(self, job: Job) -> str:
        stats = _stats_of(job)
        if stats.success_rate is None:
            return "-"
        return format_html(
            '<a href="{}" title="this job\'s charts">{}</a>',
            reverse("admin:django_strait_job_stats", args=[job.pk]),
            f"{stats.success_rate:.1%} of {stats.finished}",
        )

    @admin.display(description="health", ordering=endpoints.HEALTH_SCORE)
    def health(self, job: Job) -> str:
        return endpoints.show_level(
            getattr(job, endpoints.HEALTH_LEVEL, None),
            getattr(job, endpoints.HEALTH_SCORE, None),
            getattr(job, endpoints.HEALTH_SUCCESS, None),
            getattr(job, endpoints.HEALTH_FAILURE, None),
        )

    @admin.display(description="circuit", ordering=endpoints.CIRCUIT_STATE)
    def circuit(self, job: Job) -> str:
        return endpoints.show_circuit(job.endpoint_url, getattr(job, endpoints.CIRCUIT_STATE, None))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # A handler job's empty URL matches no row: its columns show "-".
        jobs = super().get_queryset(request)
        if apart_from_control(jobs.db):
            # Several databases: circuits and health live on the control database; the
            # list reads them there for its page (JobChangeList), so they do not sort it.
            return jobs.annotate(**endpoints.unread_annotation())
        return jobs.annotate(**endpoints.health_annotation(), **endpoints.circuit_annotation())

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def has_trigger_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may trigger runs (``django_strait.trigger_job``)."""
        return request.user.has_perm(f"{self.opts.app_label}.trigger_job")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Runs protect their job; Django's confirmation page would list every one of them.
        if obj is not None and obj.runs.exists():
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 passes action_location (and warns about overrides without it); 5.2 does not.
        extra = {} if action_location is None else {"action_location": action_location}
        found = super().get_actions(request, **extra)
        found.pop("delete_selected", None)  # see has_delete_permission
        return found

    @admin.action(description="Pause selected jobs", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        changed = queryset.filter(enabled=True).update(enabled=False, updated_at=timezone.now())
        self.message_user(request, f"Paused {changed} job(s).", messages.SUCCESS)

    @admin.action(description="Resume selected jobs", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        changed = queryset.filter(enabled=False).update(enabled=True, updated_at=timezone.now())
        self.message_user(request, f"Resumed {changed} job(s).", messages.SUCCESS)

    @admin.action(description="Trigger now (with a payload)…", permissions=["trigger"])
    def trigger_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        """Ask for a payload on an intermediate page, then queue one run per selected job."""
        return self._trigger_page(request, list(queryset), selected=True)

    def get_urls(self) -> list:
        view = self.admin_site.admin_view(self.trigger_view)
        name = f"{self.opts.app_label}_{self.opts.model_name}_trigger"
        # The overview lives here for a URL of its own: /admin/django_strait/job/overview/.
        overview = self.admin_site.admin_view(
            lambda request: overview_view(request, self.admin_site)
        )
        wrap = self.admin_site.admin_view
        job_stats = wrap(lambda request, job_id: job_stats_view(request, self.admin_site, job_id))
        endpoint_stats = wrap(lambda request: endpoint_stats_view(request, self.admin_site))
        return [
            path("overview/", overview, name="django_strait_overview"),
            path("endpoint-stats/", endpoint_stats, name="django_strait_endpoint_stats"),
            path("<int:job_id>/stats/", job_stats, name="django_strait_job_stats"),
            path("<path:object_id>/trigger/", view, name=name),
            *super().get_urls(),
        ]

    def trigger_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "trigger now" page of one job."""
        if not self.has_trigger_permission(request):
            raise PermissionDenied
        if not object_id.isdigit():
            raise Http404(f"no job {object_id!r}")
        job = get_object_or_404(Job.objects.using(alias_for_key(object_id)), pk=object_id)
        return self._trigger_page(request, [job], selected=False) or redirect(
            "admin:django_strait_job_change", job.pk
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Only the two columns the page's note needs: a row another column of which cannot
        # be read (JSON nested 5,000 deep in its headers) must still open, to be mended.
        jobs = Job.objects.using(alias_for_key(object_id))
        rows = jobs.filter(pk=object_id) if object_id.isdigit() else jobs.none()
        job = rows.only("name", "schedule_in_code").first()
        entry = registry.get(job.name) if job is not None else None
        context = {
            **(extra_context or {}),
            "strait_can_trigger": self.has_trigger_permission(request),
            "strait_declared_by": entry.spec.path if entry is not None else "",
            "strait_declared": [Job._meta.get_field(f).verbose_name for f in declared_fields(job)],
        }
        return super().change_view(request, object_id, form_url, context)

    def _trigger_page(
        self, request: HttpRequest, jobs: list[Job], *, selected: bool
    ) -> HttpResponse | None:
        # The action's page posts back to the list with "apply"; the job's own page posts to itself.
        applying = request.method == "POST" and (not selected or "apply" in request.POST)
        form = TriggerForm(request.POST if applying else None)
        if applying and form.is_valid():
            runs = trigger_all(form, jobs)
            if runs is not None:
                self.message_user(request, queued_message(runs), messages.SUCCESS)
                return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Trigger now",
            "opts": self.opts,
            "jobs": jobs,
            "form": form,
            "selected": selected,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/django_strait/trigger_form.html", context)


def trigger_all(form: TriggerForm, jobs: list[Job]) -> list[JobRun] | None:
    """Trigger each of ``jobs`` with the form's options; None (the form says why) if one is refused."""
    try:
        # All or none: a bad option refuses every job, not the ones after the first.
        # On the jobs' alias when they share one (else each run commits on its own alias).
        where = {job._state.db for job in jobs}
        with transaction.atomic(using=where.pop() if len(where) == 1 else alias()):
            return [trigger(job.name, **form.trigger_options()) for job in jobs]
    except TriggerError as exc:
        form.add_trigger_error(exc)
        return None


def declared_fields(job: Job | None) -> list[str]:
    """The fields of ``job`` that code declares (its ``@job``), which the admin does not edit."""
    if job is None:
        return []
    fields = list(registry.declared_columns(job.name))
    if job.schedule_in_code:  # declared by code this process may not have imported
        fields += [f for f in registry.SCHEDULE_COLUMNS if f not in fields]
    return fields


def queued_message(runs: Sequence[JobRun]) -> SafeString:
    """ "Queued run 12 of partner-webhook.", each run a link to its page."""
    links = format_html_join(
        ", ",
        '<a href="{}">run {} of {}</a>',
        (
            (reverse("admin:django_strait_jobrun_change", args=[r.pk]), r.pk, r.job.name)
            for r in runs
        ),
    )
    return format_html("Queued {}.", links)


def _swapped(fields: Sequence[str], swap: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(name for field in fields for name in swap.get(field, (field,)))


def _stats_of(job: Job) -> JobStats:
    # Set by JobChangeList for the listed jobs; a job shown elsewhere has no stats read.
    return getattr(job, "strait_stats", JobStats())
