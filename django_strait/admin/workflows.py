"""Workflows in the admin: definitions (read-only, they come from code) and runs with their DAG.

A workflow run's page draws its steps as SVG (see :mod:`.dagpicture`) and offers
two buttons: cancel the workflow run (``cancel_workflow_run``) and replay its
failed steps' runs (the replay transition, which resumes the workflow).
Acting needs the run permissions of the run admin: ``cancel_jobrun`` and
``replay_jobrun``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_strait.admin import actions, display
from django_strait.admin.aliases import AcrossAliases, alias_for_key
from django_strait.admin.charts import OTHER_COLOUR
from django_strait.admin.dagpicture import Box, draw
from django_strait.admin.filters import ByNameFilter
from django_strait.admin.inlines import HistoryInline
from django_strait.admin.inputs import GuardedInput
from django_strait.admin.runs import pretty_json
from django_strait.admin.unreadable import ReadsRowsAside, unshown
from django_strait.admin.webhooks import WebhookDeliveryInline
from django_strait.models import (
    Job,
    JobRun,
    StepRunStatus,
    Workflow,
    WorkflowRun,
    WorkflowRunStatus,
    WorkflowStep,
    WorkflowStepRun,
)
from django_strait.rules.states import Transition
from django_strait.storage.rows import read
from django_strait.workflows import cancel_workflow_run

RUN_COLOURS: Mapping[str, str] = {
    WorkflowRunStatus.RUNNING: "#1976d2",
    WorkflowRunStatus.COMPLETED: "#2e7d32",
    WorkflowRunStatus.FAILED: "#c62828",
    WorkflowRunStatus.CANCELED: "#90a4ae",
}
#: Statuses a workflow run can be canceled from.
CANCELABLE = (WorkflowRunStatus.RUNNING, WorkflowRunStatus.FAILED)


def badge(status: str) -> SafeString:
    """Return ``status`` as a small coloured label."""
    return format_html(
        '<span style="background:{};color:#fff;padding:1px 6px;border-radius:3px">{}</span>',
        RUN_COLOURS.get(status, OTHER_COLOUR), status,
    )  # fmt: skip


class ReadOnlyAdmin(GuardedInput, ReadsRowsAside, admin.ModelAdmin):
    """Nothing is added, changed or deleted here: code and the workflow engine write these."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class WorkflowStepInline(HistoryInline):
    """A workflow's steps, as ``define_workflow`` wrote them."""

    model = WorkflowStep
    fields = (
        "name", "job", "parents", "retry_backoff", "retry_initial_delay_secs",
        "retry_max_delay_secs", "max_attempts", "continue_on_failure",
    )  # fmt: skip
    readonly_fields = fields
    ordering = ("id",)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("job").defer(*unshown("job", Job))

    @admin.display(description="depends on")
    def parents(self, step: WorkflowStep) -> str:
        return ", ".join(_parents(step)) or "-"


@admin.register(Workflow)
class WorkflowAdmin(AcrossAliases, ReadOnlyAdmin):
    """Workflow definitions with their steps; ``define_workflow`` in code is where they change."""

    list_display = ("name", "step_count", "description", "updated_at")
    search_fields = ("name",)
    fields = ("name", "description", "webhook_url", "webhook_events", "created_at", "updated_at")
    readonly_fields = fields
    inlines = (WorkflowStepInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).annotate(step_count=Count("steps"))

    @admin.display(description="steps", ordering="step_count")
    def step_count(self, workflow: Workflow) -> int:
        return workflow.step_count  # type: ignore[attr-defined]


@admin.register(WorkflowRun)
class WorkflowRunAdmin(AcrossAliases, ReadOnlyAdmin):
    """Workflow runs: filter by status, see the DAG, cancel, replay the failed step."""

    list_display = ("id", "workflow_name", "status_badge", "created", "finished")
    list_filter = ("status", ("workflow", ByNameFilter))
    list_select_related = ("workflow",)
    sortable_by: tuple[str, ...] = ("id",)
    search_fields = ("id", "idempotency_key")
    search_help_text = "A workflow run id, or an idempotency key (exact match)."
    actions = ("cancel_selected",)
    change_form_template = "admin/django_strait/workflowrun_change_form.html"
    inlines = (WebhookDeliveryInline,)
    fields = (
        "workflow", "status_badge", "idempotency_key", "error_type", "last_error", "payload_json",
        "created_at", "progressed_at", "finished_at",
    )  # fmt: skip
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        rows = super().get_queryset(request).select_related("workflow")
        return rows.defer("payload", *unshown("workflow", Workflow))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        """Match an id or an idempotency key exactly (indexed), never a scan."""
        term = search_term.strip()
        if not term:
            return queryset, False
        if term.isdigit() and len(term) <= 18:
            return queryset.filter(pk=int(term)), False
        return queryset.filter(idempotency_key=term), False

    @admin.display(description="status", ordering="status")
    def status_badge(self, wr: WorkflowRun) -> SafeString:
        return badge(wr.status)

    @admin.display(description="workflow")
    def workflow_name(self, wr: WorkflowRun) -> SafeString | str:
        return display.cut(wr.workflow.name, 24)

    @admin.display(description="created")
    def created(self, wr: WorkflowRun) -> SafeString | str:
        return display.moment(wr.created_at)

    @admin.display(description="finished")
    def finished(self, wr: WorkflowRun) -> SafeString | str:
        return display.moment(wr.finished_at)

    @admin.display(description="payload")
    def payload_json(self, wr: WorkflowRun) -> str:
        return pretty_json(wr.payload)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may cancel runs (``django_strait.cancel_jobrun``)."""
        return request.user.has_perm("django_strait.cancel_jobrun")

    def has_replay_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may replay runs (``django_strait.replay_jobrun``)."""
        return request.user.has_perm("django_strait.replay_jobrun")

    @admin.action(description="Cancel selected workflow runs", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        ids = list(queryset.filter(status__in=CANCELABLE).values_list("pk", flat=True))
        for pk in ids:
            cancel_workflow_run(pk)
        self.message_user(request, f"Canceled {len(ids)} workflow run(s).", messages.SUCCESS)

    # One workflow run's page: its DAG, its steps, and the buttons.

    def get_urls(self) -> list:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        own = [
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name=f"{prefix}_cancel"),
            path(
                "<path:object_id>/replay-failed/",
                wrap(self.replay_failed_view),
                name=f"{prefix}_replay_failed",
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
        wr = self._find(object_id) if self.has_view_permission(request) else None
        context = dict(extra_context or {})
        if wr is not None:
            steps = step_runs(wr.pk)
            context.update(
                strait_dag=draw([_box(sr) for sr in steps]),
                strait_steps=[_row(sr) for sr in steps],
                strait_workflow_actions=self._buttons(request, wr, steps),
            )
        return super().change_view(request, object_id, form_url, context)

    def _find(self, object_id: str) -> WorkflowRun | None:
        if not str(object_id).isdigit() or len(str(object_id)) > 18:
            return None
        rows = WorkflowRun.objects.using(alias_for_key(object_id))
        return rows.filter(pk=object_id).only("pk", "status").first()

    def _buttons(
        self, request: HttpRequest, wr: WorkflowRun, steps: list[WorkflowStepRun]
    ) -> list[dict[str, str]]:
        prefix = f"admin:{self.opts.app_label}_{self.opts.model_name}"
        buttons = []
        if wr.status in CANCELABLE and self.has_cancel_permission(request):
            buttons.append({
                "label": "Cancel", "url": reverse(f"{prefix}_cancel", args=[wr.pk]),
                "help": "Cancel the workflow run and its unfinished steps.",
            })  # fmt: skip
        if replayable(steps) and self.has_replay_permission(request):
            buttons.append({
                "label": "Replay failed step", "url": reverse(f"{prefix}_replay_failed", args=[wr.pk]),
                "help": "Replay the failed step's run; the workflow resumes from there.",
            })  # fmt: skip
        return buttons

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Cancel one workflow run (POST), then show its page again."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        wr = self._acted_on(request, object_id, self.has_cancel_permission)
        if wr.status not in CANCELABLE:
            self.message_user(
                request, f"Workflow run {wr.pk} is {wr.status}: nothing to cancel.", messages.ERROR
            )
        else:
            cancel_workflow_run(wr.pk)
            self.message_user(request, f"Canceled workflow run {wr.pk}.", messages.SUCCESS)
        return redirect("admin:django_strait_workflowrun_change", wr.pk)

    def replay_failed_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Replay the runs of the workflow run's failed steps (POST); the workflow resumes."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        wr = self._acted_on(request, object_id, self.has_replay_permission)
        ids = replayable(step_runs(wr.pk, using=wr._state.db))
        result = actions.replay_runs(
            JobRun.objects.using(wr._state.db).filter(pk__in=ids), by=request.user.get_username()
        )
        self.message_user(request, result.message(), level=result.level)
        return redirect("admin:django_strait_workflowrun_change", wr.pk)

    def _acted_on(self, request: HttpRequest, object_id: str, allowed: Any) -> WorkflowRun:
        if not (self.has_view_permission(request) and allowed(request)):
            raise PermissionDenied
        wr = self._find(object_id)
        if wr is None:
            raise Http404(f"no workflow run {object_id!r}")
        return wr


def step_runs(wr_id: int, using: str | None = None) -> list[WorkflowStepRun]:
    """Return a workflow run's step runs with step, job and run, in one query.

    The runs' payloads and results are left unread: a wide workflow's page must
    not carry every step's result.
    """
    # A step run (or its step) that cannot be read stands in with the bad fields empty.
    return read(
        WorkflowStepRun.objects.using(using or alias_for_key(wr_id))
        .filter(workflow_run_id=wr_id)
        .summaries(),
        stand_ins=True,
    ).rows


def replayable(steps: list[WorkflowStepRun]) -> list[int]:
    """Return the run ids of the failed steps whose runs the replay transition accepts."""
    return [
        sr.run.pk
        for sr in steps
        if sr.status == StepRunStatus.FAILED
        and sr.run is not None
        and sr.run.status in Transition.REPLAY.sources
    ]


def _run_url(sr: WorkflowStepRun) -> str | None:
    if sr.run is None:
        return None
    return reverse("admin:django_strait_jobrun_change", args=[sr.run.pk])


def _box(sr: WorkflowStepRun) -> Box:
    detail = ""
    if sr.run is not None:
        detail = f"attempt {sr.run.attempt}"
        if sr.run.error_type:
            detail += f", {sr.run.error_type}"
    return Box(sr.step.name, _parents(sr.step), sr.status, detail, _run_url(sr))


def _parents(step: WorkflowStep) -> list[str]:
    """A step's parents by name ([] when its ``depends_on`` cannot be read)."""
    names = step.depends_on
    return [str(n) for n in names] if isinstance(names, list) else []


def _row(sr: WorkflowStepRun) -> dict[str, Any]:
    run = sr.run
    return {
        "name": sr.step.name,
        "status": sr.status,
        "job": sr.step.job.name,
        "depends_on": ", ".join(_parents(sr.step)),
        "run_id": run.pk if run else None,
        "run_status": run.status if run else "",
        "attempt": run.attempt if run else "",
        "error_type": run.error_type if run else "",
        "url": _run_url(sr),
    }
