"""Completion webhooks in the admin: the deliveries, filtered by status, and a redeliver action."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html

from django_strait.admin.inlines import HistoryInline
from django_strait.admin.unreadable import ReadsRowsAside, unshown
from django_strait.models import Job, JobRun, WebhookDelivery, Workflow, WorkflowRun
from django_strait.webhooks.redelivery import redeliver

#: Sending a delivery again: one permission wherever the action is offered.
REDELIVER_PERMISSION = "django_strait.redeliver_webhookdelivery"

_COLUMNS = (
    "event", "url", "status", "attempt", "last_status_code", "last_response", "next_attempt_at",
    "delivered_at",
)  # fmt: skip


class WebhookDeliveryInline(HistoryInline):
    """A run's deliveries, oldest first (on the run's page)."""

    model = WebhookDelivery
    fields = ("delivery_link", *_COLUMNS, "last_error")
    readonly_fields = fields
    ordering = ("id",)
    verbose_name_plural = "webhook deliveries"

    @admin.display(description="delivery")
    def delivery_link(self, delivery: WebhookDelivery) -> str:
        url = reverse("admin:django_strait_webhookdelivery_change", args=[delivery.pk])
        return format_html('<a href="{}">{}</a>', url, delivery.delivery_id)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadsRowsAside, admin.ModelAdmin):
    """Every delivery: what it notifies, where, how it went; redeliver by hand."""

    list_display = ("id", "subject", *_COLUMNS, "created_at")
    list_filter = ("status", "event")
    list_select_related = ("run__job", "workflow_run__workflow")
    search_fields = ("delivery_id", "url")
    search_help_text = "A delivery id, or a receiver URL."
    sortable_by = ("id",)
    show_full_result_count = False
    actions = ("redeliver_selected",)
    fields = (
        "delivery_id", "subject", *_COLUMNS, "last_error", "created_at",
    )  # fmt: skip
    readonly_fields = fields

    @admin.display(description="run")
    def subject(self, delivery: WebhookDelivery) -> str:
        if delivery.run_id is not None:
            url = reverse("admin:django_strait_jobrun_change", args=[delivery.run_id])
            return format_html(
                '<a href="{}">run {} ({})</a>', url, delivery.run_id, delivery.run.job
            )
        url = reverse("admin:django_strait_workflowrun_change", args=[delivery.workflow_run_id])
        wr = delivery.workflow_run
        return format_html('<a href="{}">workflow run {} ({})</a>', url, wr.pk, wr.workflow)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WebhookDelivery]:
        # Of the run and the workflow run, only what "subject" shows: their ids and names.
        rows = super().get_queryset(request).select_related("run__job", "workflow_run__workflow")
        return rows.defer(
            *unshown("run", JobRun, shown=()), *unshown("run__job", Job),
            *unshown("workflow_run", WorkflowRun, shown=()),
            *unshown("workflow_run__workflow", Workflow),
        )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_redeliver_permission(self, request: HttpRequest) -> bool:
        """Return whether the user holds ``django_strait.redeliver_webhookdelivery``."""
        return request.user.has_perm(REDELIVER_PERMISSION)

    @admin.action(description="Redeliver selected webhooks", permissions=["redeliver"])
    def redeliver_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        moved = redeliver(queryset.values_list("pk", flat=True), by=request.user.get_username())
        self.message_user(request, f"{moved} delivery(ies) will be sent again.", messages.SUCCESS)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django drops an action the user may not run; posted by hand, it is refused outright.
        posted = request.POST.getlist("action") if request.method == "POST" else []
        if "redeliver_selected" in posted and not self.has_redeliver_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)
