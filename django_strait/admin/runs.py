"""Runs and the dead-letter queue in the admin: read-only, moved only by transitions."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from django_strait.admin import actions
from django_strait.admin.filters import ErrorTypeFilter, QueueFilter
from django_strait.models import DeadLetter, JobRun, RunAttempt
from django_strait.states import Transition


@dataclass(frozen=True, slots=True)
class RunButton:
    """A transition a person may ask of one run from its page."""

    transition: Transition
    label: str
    help: str
    move: Callable[[QuerySet[JobRun], str], actions.ActionResult]


#: The buttons by the name in their URL; each shows only where its transition may start.
RUN_BUTTONS: dict[str, RunButton] = {
    "replay": RunButton(
        Transition.REPLAY, "Replay", "Queue it again with a fresh attempt budget.",
        lambda runs, by: actions.replay_runs(runs, by=by),
    ),
    "cancel": RunButton(
        Transition.CANCEL, "Cancel", "Stop it; a running attempt finishes first.",
        lambda runs, by: actions.cancel_runs(runs),
    ),
    "discard": RunButton(
        Transition.DROP, "Discard", "Drop it; it keeps its errors and can be replayed.",
        lambda runs, by: actions.discard_runs(runs, by=by),
    ),
}  # fmt: skip


class RunAttemptInline(admin.TabularInline):
    """A run's attempts, oldest first; history, so nothing here is editable."""

    model = RunAttempt
    extra = 0
    can_delete = False
    fields = (
        "number", "outcome", "status_code", "error_type", "error", "duration_ms",
        "started_at", "endpoint", "worker", "response_excerpt",
    )  # fmt: skip
    readonly_fields = fields
    ordering = ("number",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Shown only inside a run's page, which has already checked the run's permission.
        return True


class RunChangeList(ChangeList):
    """The run list, without the large columns that it never shows."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet:
        qs = super().get_queryset(request, exclude_parameters)
        return qs.defer(*self.model_admin.list_deferred)


def pretty_json(value: Any) -> str:
    """Render a JSON value indented, in a ``<pre>`` block."""
    if value is None:
        return "-"
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre style="white-space: pre-wrap">{}</pre>', text)


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):
    """Every run: filter, search, inspect, and replay / cancel / discard through transitions."""

    list_display = (
        "id", "job", "status", "queue", "priority", "attempt", "available_at",
        "error_type", "created_at", "finished_at",
    )  # fmt: skip
    list_filter = ("status", "job", QueueFilter, ErrorTypeFilter)
    list_select_related = ("job",)
    #: Columns the list never shows, left unread (payloads and results can be large).
    list_deferred: tuple[str, ...] = ("payload", "result", "retry_overrides", "last_error")
    # The full count is a second COUNT(*) over the whole table on every page.
    show_full_result_count = False
    # Only orders an index serves: sorting a million rows by another column is a full sort.
    sortable_by: tuple[str, ...] = ("id",)
    search_fields = ("id", "idempotency_key")
    search_help_text = "A run id, or an idempotency key (exact match)."
    actions = ("replay_selected", "cancel_selected", "discard_selected")
    inlines = (RunAttemptInline,)
    change_form_template = "admin/django_strait/run_change_form.html"
    fieldsets = (
        (None, {"fields": (
            "job", "status", "queue", "priority", "available_at", "idempotency_key",
            "created_at", "updated_at",
        )}),
        ("Payload", {"fields": ("payload_json",)}),
        ("Outcome", {"fields": (
            "result_json", "error_type", "last_error", "endpoint_used",
        )}),
        ("Attempts and retry", {"fields": (
            "attempt", "attempts_before_replay", "max_attempts", "retry_overrides_json",
        )}),
        ("Worker", {"fields": (
            "claimed_by", "dequeued_at", "started_at", "heartbeat_at", "finished_at",
            "cancel_requested",
        )}),
        ("Replays", {"fields": ("replay_count", "replayed_by", "replayed_at")}),
    )  # fmt: skip

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Runs are made by trigger() and moved by transitions: nothing here is a form field.
        return [name for _, options in self.fieldsets for name in options["fields"]]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Dead letters are never pruned, and bulk deletes of history belong to the pruner.
        return False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

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

    @admin.display(description="payload")
    def payload_json(self, run: JobRun) -> str:
        return pretty_json(run.payload)

    @admin.display(description="result")
    def result_json(self, run: JobRun) -> str:
        return pretty_json(run.result)

    @admin.display(description="retry overrides")
    def retry_overrides_json(self, run: JobRun) -> str:
        return pretty_json(run.retry_overrides)

    @admin.action(description="Replay selected runs (fresh attempt budget)", permissions=["change"])
    def replay_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, actions.replay_runs(queryset, by=request.user.get_username()))

    @admin.action(description="Cancel selected runs", permissions=["change"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, actions.cancel_runs(queryset))

    @admin.action(description="Discard selected runs", permissions=["change"])
    def discard_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, actions.discard_runs(queryset, by=request.user.get_username()))

    def _report(self, request: HttpRequest, result: actions.ActionResult) -> None:
        self.message_user(request, result.message(), level=result.level)

    # One run's page: buttons for the transitions its status allows.

    def get_urls(self) -> list:
        name = f"{self.opts.app_label}_{self.opts.model_name}_move"
        view = self.admin_site.admin_view(self.transition_view)
        own = [path("<path:object_id>/move/<str:name>/", view, name=name)]
        return own + super().get_urls()

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {
            **(extra_context or {}),
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "strait_run_actions": self._buttons(request, object_id),
        }
        return super().change_view(request, object_id, form_url, context)

    def _buttons(self, request: HttpRequest, object_id: str) -> list[dict[str, str]]:
        status = self._status(object_id)
        if status is None or not self.has_change_permission(request):
            return []
        move = f"admin:{self.opts.app_label}_{self.opts.model_name}_move"
        return [
            {"label": b.label, "help": b.help, "url": reverse(move, args=[object_id, name])}
            for name, b in RUN_BUTTONS.items()
            if status in b.transition.sources
        ]

    def _status(self, object_id: str) -> str | None:
        if not str(object_id).isdigit():
            return None
        return JobRun.objects.filter(pk=object_id).values_list("status", flat=True).first()

    def transition_view(self, request: HttpRequest, object_id: str, name: str) -> HttpResponse:
        """Replay, cancel or discard one run (POST), then show its page again."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        if name not in RUN_BUTTONS or self._status(object_id) is None:
            raise Http404(f"no run {object_id} or no transition {name!r}")
        runs = JobRun.objects.filter(pk=object_id)
        result = RUN_BUTTONS[name].move(runs, request.user.get_username())
        self._report(request, result)
        # The run's own page, not the dead-letter one: after a replay it is no dead letter.
        return redirect("admin:django_strait_jobrun_change", object_id)


@admin.register(DeadLetter)
class DeadLetterAdmin(JobRunAdmin):
    """The dead-letter queue: inspect the errors, replay or discard."""

    list_display = (
        "id", "job", "error_type", "error_summary", "attempt", "finished_at", "replay_count",
    )  # fmt: skip
    list_filter = ("job", ErrorTypeFilter, QueueFilter)
    list_deferred = ("payload", "result", "retry_overrides")
    sortable_by = ("id", "finished_at")  # (status, finished_at) is indexed
    actions = ("replay_selected", "discard_selected")

    @admin.display(description="last error")
    def error_summary(self, run: JobRun) -> str:
        return Truncator(run.last_error).chars(120)
