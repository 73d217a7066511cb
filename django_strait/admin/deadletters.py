"""The dead-letter queue in the admin: grouped by job and error, replayed one by one or in bulk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from django_strait import database
from django_strait.admin import actions, display
from django_strait.admin.aliases import DATABASE_PARAMETER, chosen_alias
from django_strait.admin.filters import ByNameOfListedFilter, ErrorTypeFilter, QueueFilter
from django_strait.admin.inputs import row_id
from django_strait.admin.runs import JobRunAdmin
from django_strait.models import DeadLetter, Job, JobRun
from django_strait.rules.states import RunStatus

#: How many (job, error type) groups the summary above the list shows.
SUMMARY_GROUPS = 20
#: Query parameters of the list that do not select runs (page, order, error flag).
NOT_SELECTING = ("p", "o", "e")


@dataclass(frozen=True, slots=True)
class Group:
    """Dead letters of one job with one error type."""

    job_id: int
    job: str
    error_type: str
    count: int
    #: The list filtered to this group.
    url: str


def dead_letter_groups(
    limit: int = SUMMARY_GROUPS, using: str | None = None
) -> tuple[list[Group], int]:
    """Return the largest (job, error type) groups of ``using`` and how many there are in all."""
    # Grouped on strait_run_dead_letters (job, error_type) WHERE status = 'dead_letter'.
    rows = (
        JobRun.objects.using(using)
        .filter(status=RunStatus.DEAD_LETTER)
        .values_list("job_id", "error_type")
        .annotate(n=Count("id"))
        .order_by()
    )
    ordered = sorted(rows, key=lambda r: (-r[2], r[0], r[1]))
    jobs = Job.objects.using(using).filter(pk__in={r[0] for r in ordered[:limit]})
    names = dict(jobs.values_list("pk", "name"))
    changelist = reverse("admin:django_strait_deadletter_changelist")
    groups = [
        Group(
            job_id,
            names.get(job_id, str(job_id)),
            error_type,
            n,
            _group_url(changelist, job_id, error_type, using),
        )
        for job_id, error_type, n in ordered[:limit]
    ]
    return groups, len(ordered)


def _group_url(changelist: str, job_id: int, error_type: str, using: str | None) -> str:
    params: dict[str, Any] = {"job__id__exact": job_id}
    if using is not None:  # several databases: the group's own
        params[DATABASE_PARAMETER] = using
    if error_type:  # the filter has no way to say "no error type"; the job alone then
        params["error_type"] = error_type
    return f"{changelist}?{urlencode(params)}"


@admin.register(DeadLetter)
class DeadLetterAdmin(JobRunAdmin):
    """The dead-letter queue: inspect the errors, replay (one, selected, all matching) or discard."""

    list_display = (
        "id", "job_name", "error_type_cut", "error_summary", "attempts", "finished", "replays",
    )  # fmt: skip
    list_filter = (
        # Only the jobs that have dead letters (from the dead-letter index), by name alone.
        ("job", ByNameOfListedFilter),
        ErrorTypeFilter,
        QueueFilter,
        ("finished_at", admin.DateFieldListFilter),
    )
    list_deferred = ("payload", "result", "retry_overrides")
    sortable_by = ("id", "finished_at")  # (status, finished_at) is indexed
    actions = ("replay_selected", "discard_selected")
    change_list_template = "admin/django_strait/deadletter_change_list.html"

    @admin.display(description="last error")
    def error_summary(self, run: JobRun) -> SafeString | str:
        return display.cut(run.last_error, 20, lines=2)

    @admin.display(description="replays")
    def replays(self, run: JobRun) -> int:
        return run.replay_count

    def get_urls(self) -> list:
        name = f"{self.opts.app_label}_{self.opts.model_name}_replay_matching"
        view = self.admin_site.admin_view(self.replay_matching_view)
        return [path("replay-matching/", view, name=name), *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        using = chosen_alias(request) if database.placed() else None
        groups, group_count = dead_letter_groups(using=using)
        context = {
            **(extra_context or {}),
            "strait_groups": groups,
            "strait_group_count": group_count,
            "strait_can_replay": self.has_replay_permission(request),
            "strait_replay_matching_url": self._matching_url(request),
        }
        return super().changelist_view(request, context)

    def _matching_url(self, request: HttpRequest) -> str:
        params = request.GET.copy()
        for name in NOT_SELECTING:
            params.pop(name, None)
        url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_replay_matching")
        return f"{url}?{params.urlencode()}" if params else url

    def replay_matching_view(self, request: HttpRequest) -> HttpResponse:
        """Confirm (GET: how many) and replay (POST) every dead letter the list's filters match."""
        if not self.has_replay_permission(request):
            raise PermissionDenied
        try:
            matching = self._matching(request)
        except IncorrectLookupParameters as exc:
            self.message_user(request, f"Those filters are not valid: {exc}", messages.ERROR)
            return redirect("admin:django_strait_deadletter_changelist")
        if request.method == "POST":
            return self._replay_matching(request, matching)
        context = {
            **self.admin_site.each_context(request),
            "title": "Replay all matching dead letters",
            "opts": self.opts,
            "count": matching.count(),
            # Runs dead-lettered after this page was shown are not part of what was confirmed.
            "up_to_id": matching.aggregate(top=Max("pk"))["top"] or 0,
            "filters": self._described_filters(request),
            "back_url": self._list_url(request),
        }
        return TemplateResponse(request, "admin/django_strait/replay_matching.html", context)

    def _matching(self, request: HttpRequest) -> QuerySet[JobRun]:
        # The list's own ChangeList applies the filters and search exactly as the list did.
        return self.get_changelist_instance(request).queryset.order_by()

    def _replay_matching(self, request: HttpRequest, matching: QuerySet[JobRun]) -> HttpResponse:
        # The id the confirmation page showed: a run id, else the page was not the one shown.
        up_to = row_id(JobRun, request.POST.get("up_to_id", ""))
        if up_to is None:
            self.message_user(request, "Confirm on the replay page first.", messages.ERROR)
            return redirect(request.get_full_path())
        result = actions.replay_runs(matching.filter(pk__lte=up_to), by=request.user.get_username())
        self.message_user(request, result.message(), level=result.level)
        return redirect(self._list_url(request))

    def _list_url(self, request: HttpRequest) -> str:
        url = reverse("admin:django_strait_deadletter_changelist")
        return f"{url}?{request.GET.urlencode()}" if request.GET else url

    def _described_filters(self, request: HttpRequest) -> list[tuple[str, str]]:
        return [(name, value) for name, value in request.GET.items() if name not in NOT_SELECTING]
