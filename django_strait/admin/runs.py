"""Runs in the admin: read-only, moved only by transitions, each with its own permission."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_strait import transitions
from django_strait.admin import actions, display, timeline
from django_strait.admin.filters import ByNameFilter, ErrorTypeFilter, QueueFilter
from django_strait.admin.forms import ReplayPayloadForm
from django_strait.admin.inlines import HistoryInline
from django_strait.admin.inputs import GuardedInput
from django_strait.admin.unreadable import ReadsRowsAside, SetsAside, unshown
from django_strait.admin.webhooks import WebhookDeliveryInline
from django_strait.models import Job, JobRun, RunAttempt, RunHold, WorkflowStepRun
from django_strait.rows import read
from django_strait.states import Transition
from django_strait.storage import backend
from django_strait.triggering import TriggerError


@dataclass(frozen=True, slots=True)
class RunButton:
    """A transition a person may ask of one run from its page."""

    transition: Transition
    #: The ``JobRun`` permission it needs (``replay``, ``cancel`` or ``discard``).
    permission: str
    label: str
    help: str
    move: Callable[[QuerySet[JobRun], str], actions.ActionResult]


#: The buttons by the name in their URL; each shows only where its transition may start.
RUN_BUTTONS: dict[str, RunButton] = {
    "replay": RunButton(
        Transition.REPLAY, "replay", "Replay", "Queue it again with a fresh attempt budget.",
        lambda runs, by: actions.replay_runs(runs, by=by),
    ),
    "cancel": RunButton(
        Transition.CANCEL, "cancel", "Cancel", "Stop it; a running attempt finishes first.",
        lambda runs, by: actions.cancel_runs(runs),
    ),
    "discard": RunButton(
        Transition.DROP, "discard", "Discard", "Drop it; it keeps its errors and can be replayed.",
        lambda runs, by: actions.discard_runs(runs, by=by),
    ),
}  # fmt: skip


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
        if obj is None or not RunAttempt.objects.filter(run_id=obj.pk).exclude(preset="").exists():
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


def pretty_text(value: Any) -> str:
    """Return a JSON value as indented text."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def pretty_json(value: Any) -> str:
    """Render a JSON value indented, in a ``<pre>`` block."""
    if value is None:
        return "-"
    return format_html('<pre style="white-space: pre-wrap">{}</pre>', pretty_text(value))


@admin.register(JobRun)
class JobRunAdmin(GuardedInput, ReadsRowsAside, display.AutoRefresh, admin.ModelAdmin):
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
            WorkflowStepRun.objects.filter(run_id=run.pk)
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

    # Acting on runs is not editing them: each action has its own permission
    # (Meta.permissions of JobRun), checked for the dead-letter proxy too.

    def has_replay_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may replay runs (``django_strait.replay_jobrun``)."""
        return request.user.has_perm("django_strait.replay_jobrun")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may cancel runs (``django_strait.cancel_jobrun``)."""
        return request.user.has_perm("django_strait.cancel_jobrun")

    def has_discard_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may discard runs (``django_strait.discard_jobrun``)."""
        return request.user.has_perm("django_strait.discard_jobrun")

    def has_permission_to(self, request: HttpRequest, name: str) -> bool:
        """Return whether the user holds the permission called ``name`` (replay, ...)."""
        return getattr(self, f"has_{name}_permission")(request)

    @admin.action(description="Replay selected runs (fresh attempt budget)", permissions=["replay"])
    def replay_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, actions.replay_runs(queryset, by=request.user.get_username()))

    @admin.action(description="Cancel selected runs", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, actions.cancel_runs(queryset))

    @admin.action(description="Discard selected runs", permissions=["discard"])
    def discard_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, actions.discard_runs(queryset, by=request.user.get_username()))

    def _report(self, request: HttpRequest, result: actions.ActionResult) -> None:
        self.message_user(request, result.message(), level=result.level)

    # One run's page: buttons for the transitions its status allows.

    def get_urls(self) -> list:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        own = [
            path(
                "<path:object_id>/move/<str:name>/",
                wrap(self.transition_view),
                name=f"{prefix}_move",
            ),
            path(
                "<path:object_id>/replay-with-payload/",
                wrap(self.replay_payload_view),
                name=f"{prefix}_replay_payload",
            ),
        ]
        return own + super().get_urls()

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

    def _buttons(self, request: HttpRequest, object_id: str) -> list[dict[str, str]]:
        status = self._status(object_id)
        if status is None:
            return []
        prefix = f"admin:{self.opts.app_label}_{self.opts.model_name}"
        buttons = [
            {
                "label": b.label,
                "help": b.help,
                "url": reverse(f"{prefix}_move", args=[object_id, name]),
            }
            for name, b in RUN_BUTTONS.items()
            if status in b.transition.sources and self.has_permission_to(request, b.permission)
        ]
        if status in Transition.REPLAY.sources and self.has_replay_permission(request):
            url = reverse(f"{prefix}_replay_payload", args=[object_id])
            help = "Queue it again with a payload you edit first."
            buttons.append(
                {"label": "Replay with edited payload", "help": help, "url": url, "get": "1"}
            )
        return buttons

    def _titled(self, object_id: str) -> str | None:
        """The page's title: "run 10 of partner-webhook (completed)" (None: no such run).

        Read as values, not as a run and its job: a job row that cannot be read must not
        keep its runs' pages closed.
        """
        if not str(object_id).isdigit():
            return None
        found = JobRun.objects.filter(pk=object_id).values_list("pk", "status", "job__name")
        row = found.first()
        return None if row is None else f"run {row[0]} of {row[2]} ({row[1]})"

    def _timeline(self, object_id: str) -> str:
        """The run's timeline (attempts, holds, waits), or "" when there is no such run."""
        if not str(object_id).isdigit():
            return ""
        found = read(
            JobRun.objects.filter(pk=object_id).only(
                "created_at", "finished_at", "status", "available_at"
            )
        )
        if not found.rows:
            return ""  # no such run, or one whose times cannot be read (its page says which)
        run = found.rows[0]
        line = timeline.build(
            run,
            # An attempt or a hold that cannot be read is left out of the picture (and logged).
            read(RunAttempt.objects.filter(run_id=run.pk).defer("response_excerpt")).rows,
            read(RunHold.objects.filter(run_id=run.pk)).rows,
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

    def _status(self, object_id: str) -> str | None:
        if not str(object_id).isdigit():
            return None
        return JobRun.objects.filter(pk=object_id).values_list("status", flat=True).first()

    def transition_view(self, request: HttpRequest, object_id: str, name: str) -> HttpResponse:
        """Replay, cancel or discard one run (POST), then show its page again."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if name not in RUN_BUTTONS:
            raise Http404(f"no transition {name!r}; allowed: {', '.join(RUN_BUTTONS)}")
        if not self.has_permission_to(request, RUN_BUTTONS[name].permission):
            raise PermissionDenied
        if self._status(object_id) is None:
            raise Http404(f"no run {object_id}")
        runs = JobRun.objects.filter(pk=object_id)
        result = RUN_BUTTONS[name].move(runs, request.user.get_username())
        self._report(request, result)
        # The run's own page, not the dead-letter one: after a replay it is no dead letter.
        return redirect("admin:django_strait_jobrun_change", object_id)

    def replay_payload_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Replay one run with a payload edited on a form (GET shows it, POST replays)."""
        if not self.has_replay_permission(request):
            raise PermissionDenied
        if not str(object_id).isdigit():
            raise Http404(f"no run {object_id!r}")
        run = get_object_or_404(JobRun, pk=object_id)
        if request.method == "POST":
            form = ReplayPayloadForm(request.POST)
            if form.is_valid() and self._replay_with(request, run, form):
                return redirect("admin:django_strait_jobrun_change", run.pk)
        else:
            form = ReplayPayloadForm(initial={"payload": pretty_text(run.payload)})
        context = {
            **self.admin_site.each_context(request),
            "title": f"Replay run {run.pk} with an edited payload",
            "opts": self.opts,
            "run": run,
            "form": form,
        }
        return TemplateResponse(request, "admin/django_strait/replay_payload_form.html", context)

    def _replay_with(self, request: HttpRequest, run: JobRun, form: ReplayPayloadForm) -> bool:
        try:
            transitions.replay(
                run.pk, by=request.user.get_username(), payload=form.cleaned_data["payload"]
            )
        except TriggerError as exc:
            form.add_trigger_error(exc)
            return False
        except transitions.InvalidTransition as exc:
            form.add_error(None, str(exc))
            return False
        self.message_user(
            request, f"Replayed run {run.pk} with the edited payload.", messages.SUCCESS
        )
        return True
