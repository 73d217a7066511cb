"""Runs in the admin: read-only, moved only by transitions, each with its own permission."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_strait.admin import display, timeline
from django_strait.admin.aliases import AcrossAliases, alias_for_key
from django_strait.admin.filters import ByNameFilter, ErrorTypeFilter, QueueFilter
from django_strait.admin.inlines import HistoryInline
from django_strait.admin.inputs import GuardedInput
from django_strait.admin.run_moves import RunMoves, pretty_text
from django_strait.admin.unreadable import ReadsRowsAside, SetsAside, unshown
from django_strait.admin.webhooks import WebhookDeliveryInline
from django_strait.models import Job, JobRun, RunAttempt, RunHold, WorkflowStepRun
from django_strait.storage import backend
from django_strait.storage.rows import read


class RunAttemptInline(HistoryInline):
    """A run's attempts, oldest first; history, so nothing here is editable."""

    model = RunAttempt
    fields = (
        "number", "outcome_badge", "preset", "status_code", "error_type", "error_cut",
        "duration", "started", "endpoint_cut", "response",
    )  # fmt: skip
    readonly_fields = fields
    ordering = ("started_at", "id")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """Every column, but ``preset`` only for a run with process attempts (room at 1366 px)."""
        fields = list(self.fields)
        attempts = RunAttempt.objects.using(obj._state.db) if obj is not None else None
        if attempts is None or not attempts.filter(run_id=obj.pk).exclude(preset="").exists():
            fields.remove("preset")
        return fields

    # Cut to fit 1366 px; the whole value is the tooltip.

    @admin.display(description="outcome")
    def outcome_badge(self, a: RunAttempt) -> SafeString:
        return display.badge(a.outcome, timeline.OUTCOME_COLOURS.get(a.outcome))

    @admin.display(description="error")
    def error_cut(self, a: RunAttempt) -> SafeString | str:
        return display.cut(a.error, 26)

    @admin.display(description="took")
    def duration(self, a: RunAttempt) -> str:
        return f"{a.duration_ms} ms"

    @admin.display(description="started (UTC)")
    def started(self, a: RunAttempt) -> str:
        return timeline.stamp(a.started_at)[11:] if a.started_at else "-"

    @admin.display(description="endpoint")
    def endpoint_cut(self, a: RunAttempt) -> SafeString | str:
        return display.cut(a.endpoint, 24)

    @admin.display(description="response")
    def response(self, a: RunAttempt) -> SafeString | str:
        return display.cut(a.response_excerpt, 16)


#: Up to this many matching runs the list counts them exactly; past it, PostgreSQL estimates.
EXACT_COUNT_UP_TO = 100_000


#: Pages that start past this many rows are read by their ids first.
DEEP_PAGE_FROM = 10_000


class EstimatedCountPaginator(Paginator):
    """Count a run list without reading a million rows (PostgreSQL).

    The unfiltered list takes the table's row estimate from ``pg_class.reltuples``
    (kept by ANALYZE and autovacuum). A filtered list is counted exactly up to
    ``exact_up_to`` rows, and past that takes the planner's estimate for
    its filter. ``estimated`` says whether ``count`` is one; the list then reads
    "about N". Other databases count exactly.
    """

    estimated = False
    exact_up_to = EXACT_COUNT_UP_TO
    deep_page_from = DEEP_PAGE_FROM

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return super().count
        rows = rows.order_by()  # what is counted, not in which order: any index may serve
        storage = backend(rows.db)
        if not rows.query.where:
            guess = storage.table_estimate(rows.model)
        else:
            counted = rows[: self.exact_up_to + 1].count()
            if counted <= self.exact_up_to:
                return counted
            planned = storage.query_estimate(rows)
            guess = None if planned is None else max(planned, counted)
        if guess is None or guess <= self.exact_up_to:
            return rows.count()  # no estimate here, never analyzed, or small: exact is cheap
        self.estimated = True
        return guess

    def _get_page(self, object_list: Any, number: int, paginator: Paginator) -> Any:
        # A deep page (the last of a million) would join and skip every row before it:
        # skip ids in the primary key's index instead, then read the page's rows only.
        rows = self.object_list
        deep = isinstance(rows, QuerySet) and (number - 1) * self.per_page > self.deep_page_from
        if deep and backend(rows.db).pages_by_primary_key:
            page_ids = object_list.values("pk")
            object_list = rows.filter(pk__in=page_ids)
        return super()._get_page(object_list, number, paginator)


class RunChangeList(SetsAside):
    """The run list, without the large columns that it never shows."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        if not self.has_active_filters and not self.query:
            # Unfiltered, the page's count is the whole list's: no "(Show all)" link to itself.
            self.full_result_count = self.result_count

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet:
        qs = super().get_queryset(request, exclude_parameters)
        return qs.defer(*self.model_admin.list_deferred)


def pretty_json(value: Any) -> str:
    """Render a JSON value indented, in a ``<pre>`` block."""
    if value is None:
        return "-"
    return format_html('<pre style="white-space: pre-wrap">{}</pre>', pretty_text(value))


@admin.register(JobRun)
class JobRunAdmin(
    AcrossAliases, GuardedInput, ReadsRowsAside, RunMoves, display.AutoRefresh, admin.ModelAdmin
):
    """Every run: filter, search, inspect, and replay / cancel / discard through transitions."""

    list_display = (
        "id", "job_name", "status_badge", "attempts", "available", "error_type_cut", "finished",
    )  # fmt: skip
    list_filter = (
        "status", ("job", ByNameFilter), QueueFilter, ErrorTypeFilter,
        ("created_at", admin.DateFieldListFilter),
    )  # fmt: skip
    list_select_related = ("job",)
    #: Columns the list never shows, left unread (payloads and results can be large).
    list_deferred: tuple[str, ...] = ("payload", "result", "retry_overrides", "last_error")
    # The full count is a second COUNT(*) over the whole table on every page.
    show_full_result_count = False
    # And the list's own count is an estimate past EXACT_COUNT_UP_TO runs.
    paginator = EstimatedCountPaginator
    # Only orders an index serves: sorting a million rows by another column is a full sort.
    sortable_by: tuple[str, ...] = ("id",)
    search_fields = ("id", "idempotency_key")
    search_help_text = "A run id, or an idempotency key (exact match; an OJS job's id is its key)."
    searches_ids = True  # several databases: an id opens its own database's list
    actions = ("replay_selected", "cancel_selected", "discard_selected")
    inlines = (RunAttemptInline, WebhookDeliveryInline)
    change_form_template = "admin/django_strait/run_change_form.html"
    fieldsets = (
        (None, {"fields": (
            "job", "workflow_step", "status", "queue", "priority", "available_at",
            "idempotency_key", "created_at", "updated_at",
        )}),
        ("Payload", {"fields": ("payload_json",)}),
        ("Outcome", {"fields": (
            "result_json", "error_type", "last_error", "endpoint_used",
        )}),
        ("Attempts and retry", {"fields": (
            "attempt", "attempts_before_replay", "max_attempts", "retry_overrides_json", "preset",
        )}),
        ("Worker", {"fields": (
            "claimed_by", "dequeued_at", "started_at", "heartbeat_at", "finished_at",
            "cancel_requested",
        )}),
        ("Replays", {"fields": ("replay_count", "replayed_by", "replayed_at")}),
    )  # fmt: skip

    #: An external worker's run (OJS, docs/ojs.md): its job id and visibility deadline. Its
    #: worker id, attempts and errors are in the sections every run has.
    ojs_fieldset = ("OJS", {"fields": ("ojs_id", "visible_until")})

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and obj.ojs_id is not None:
            return (*self.fieldsets, self.ojs_fieldset)
        return self.fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Runs are made by trigger() and moved by transitions: nothing here is a form field.
        fieldsets = self.get_fieldsets(request, obj)
        return [name for _, options in fieldsets for name in options["fields"]]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Dead letters are never pruned, and bulk deletes of history belong to the pruner.
        return False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobRun]:
        # Of the job, only its name (the title, the job column): a job row that cannot be
        # read does not close its runs' pages.
        return super().get_queryset(request).select_related("job").defer(*unshown("job", Job))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        """Match an id or an idempotency key exactly, so that the indexes serve the search."""
        term = search_term.strip()
        if not term:
            return queryset, False
        condition = Q(idempotency_key=term)
        if term.isdigit():
            condition |= Q(pk=int(term))
        return queryset.filter(condition), False

    # List cells: short, so that the list fits 1366 px; the whole value on hover.

    @admin.display(description="job")
    def job_name(self, run: JobRun) -> SafeString | str:
        return display.cut(run.job.name, 18)

    @admin.display(description="status")
    def status_badge(self, run: JobRun) -> SafeString:
        return display.badge(run.status)

    @admin.display(description="attempts")
    def attempts(self, run: JobRun) -> int:
        return run.attempt

    @admin.display(description="available")
    def available(self, run: JobRun) -> SafeString | str:
        return display.moment(run.available_at)

    @admin.display(description="error type")
    def error_type_cut(self, run: JobRun) -> SafeString | str:
        return display.cut(run.error_type, 16)

    @admin.display(description="created")
    def created(self, run: JobRun) -> SafeString | str:
        return display.moment(run.created_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, run: JobRun) -> SafeString | str:
        return display.moment(run.finished_at)

    @admin.display(description="payload")
    def payload_json(self, run: JobRun) -> str:
        return pretty_json(run.payload)

    @admin.display(description="workflow")
    def workflow_step(self, run: JobRun) -> str:
        """Say which step of which workflow run this run executes, linking to that run."""
        step = (
            WorkflowStepRun.objects.using(run._state.db)
            .filter(run_id=run.pk)
            .values_list("step__name", "workflow_run_id")
            .first()
        )
        if step is None:
            return "-"
        url = reverse("admin:django_strait_workflowrun_change", args=[step[1]])
        return format_html('step {} of <a href="{}">workflow run {}</a>', step[0], url, step[1])

    @admin.display(description="result")
    def result_json(self, run: JobRun) -> str:
        return pretty_json(run.result)

    @admin.display(description="retry overrides")
    def retry_overrides_json(self, run: JobRun) -> str:
        return pretty_json(run.retry_overrides)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        title = self._titled(object_id)
        context = {
            **(extra_context or {}),
            **({"title": title, "subtitle": None} if title is not None else {}),
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "strait_run_actions": self._buttons(request, object_id),
            "strait_timeline": self._timeline(object_id),
        }
        return super().change_view(request, object_id, form_url, context)

    def _titled(self, object_id: str) -> str | None:
        """The page's title: "run 10 of partner-webhook (completed)" (None: no such run).

        Read as values, not as a run and its job: a job row that cannot be read must not
        keep its runs' pages closed.
        """
        if not str(object_id).isdigit():
            return None
        runs = JobRun.objects.using(alias_for_key(object_id))
        found = runs.filter(pk=object_id).values_list("pk", "status", "job__name")
        row = found.first()
        return None if row is None else f"run {row[0]} of {row[2]} ({row[1]})"

    def _timeline(self, object_id: str) -> str:
        """The run's timeline (attempts, holds, waits), or "" when there is no such run."""
        if not str(object_id).isdigit():
            return ""
        using = alias_for_key(object_id)
        found = read(
            JobRun.objects.using(using)
            .filter(pk=object_id)
            .only("created_at", "finished_at", "status", "available_at")
        )
        if not found.rows:
            return ""  # no such run, or one whose times cannot be read (its page says which)
        run = found.rows[0]
        line = timeline.build(
            run,
            # An attempt or a hold that cannot be read is left out of the picture (and logged).
            read(
                RunAttempt.objects.using(using).filter(run_id=run.pk).defer("response_excerpt")
            ).rows,
            read(RunHold.objects.using(using).filter(run_id=run.pk)).rows,
            now=timezone.now(),
        )
        return render_to_string(
            "admin/django_strait/run_timeline.html",
            {
                "picture": timeline.draw(line),
                "legend": timeline.legend(),
                "rows": timeline.rows(line),
            },
        )
