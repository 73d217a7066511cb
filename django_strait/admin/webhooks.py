"""Completion webhooks in the admin: the deliveries, filtered by status, and a redeliver action."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_strait.admin import display
from django_strait.admin.aliases import AcrossAliases
from django_strait.admin.inlines import HistoryInline
from django_strait.admin.inputs import GuardedInput
from django_strait.admin.unreadable import ReadsRowsAside, unshown
from django_strait.models import Job, JobRun, WebhookDelivery, Workflow, WorkflowRun
from django_strait.storage import backend
from django_strait.webhooks.redelivery import redeliver

#: Sending a delivery again: one permission wherever the action is offered.
REDELIVER_PERMISSION = "django_strait.redeliver_webhookdelivery"

_COLUMNS = (
    "event", "url", "status", "attempt", "last_status_code", "last_response", "next_attempt_at",
    "delivered_at",
)  # fmt: skip


#: A delivery's status in the colour of the run status it is like.
STATUS_COLOURS = {
    "delivered": display.BADGE_COLOURS["completed"],
    "pending": display.BADGE_COLOURS["queued"],
    "failed": display.BADGE_COLOURS["failed"],
}


class DeliveryCells:
    """How a delivery reads in a row: each long value cut, the whole of it on hover, so
    that the deliveries list and a run's webhook section fit a 1366 px screen."""

    @admin.display(description="receiver")
    def receiver(self, delivery: WebhookDelivery) -> SafeString | str:
        # Without its scheme: the host and the path are what tell receivers apart.
        shown = delivery.url.split("://", 1)[-1]
        return format_html('<span title="{}">{}</span>', delivery.url, display.cut(shown, 18))

    @admin.display(description="status")
    def status_attempts(self, delivery: WebhookDelivery) -> SafeString:
        tries = f"{delivery.attempt} attempt{'' if delivery.attempt == 1 else 's'}"
        colour = STATUS_COLOURS.get(delivery.status)
        shown = display.badge(f"{delivery.status} ×{delivery.attempt}", colour)
        return format_html('<span title="{}">{}</span>', tries, shown)

    @admin.display(description="answer")
    def last_answer(self, delivery: WebhookDelivery) -> SafeString | str:
        """The receiver's last status code; what it answered on hover (and on the page)."""
        if delivery.last_status_code is None:
            return "-"
        return format_html(
            '<span title="{}">{}</span>',
            delivery.last_response or "(no body)",
            delivery.last_status_code,
        )

    @admin.display(description="when")
    def when(self, delivery: WebhookDelivery) -> SafeString | str:
        if delivery.delivered_at is not None:
            return display.moment(delivery.delivered_at)
        if delivery.status == "pending":
            return format_html("next {}", display.moment(delivery.next_attempt_at))
        return "-"

    @admin.display(description="last error")
    def error_cut(self, delivery: WebhookDelivery) -> SafeString | str:
        return display.cut(delivery.last_error, 18, lines=2)


class WebhookDeliveryInline(DeliveryCells, HistoryInline):
    """A run's deliveries, oldest first (on the run's page); the whole of each on its own."""

    model = WebhookDelivery
    fields = ("delivery_link", "event", "receiver", "status_attempts", "last_answer", "when",
              "error_cut")  # fmt: skip
    readonly_fields = fields
    ordering = ("id",)
    verbose_name_plural = "webhook deliveries"

    @admin.display(description="delivery")
    def delivery_link(self, delivery: WebhookDelivery) -> str:
        url = reverse("admin:django_strait_webhookdelivery_change", args=[delivery.pk])
        uid = str(delivery.delivery_id)
        return format_html('<a href="{}" title="{}">{}…</a>', url, uid, uid[:8])


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(
    AcrossAliases, GuardedInput, ReadsRowsAside, DeliveryCells, admin.ModelAdmin
):
    """Every delivery: what it notifies, where, how it went; redeliver by hand."""

    # The event opens the delivery's page, where every field is whole.
    list_display = ("event", "subject", "receiver", "status_attempts", "last_answer", "when")
    list_display_links = ("event",)
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
            text = f"run {delivery.run_id} ({delivery.run.job})"
        else:
            url = reverse("admin:django_strait_workflowrun_change", args=[delivery.workflow_run_id])
            wr = delivery.workflow_run
            text = f"workflow run {wr.pk} ({wr.workflow})"
        return format_html('<a href="{}">{}</a>', url, display.cut(text, 18))

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
        # On the alias the list reads (several databases: the one its filter chose).
        ids = queryset.values_list("pk", flat=True)
        moved = redeliver(ids, by=request.user.get_username(), storage=backend(queryset.db))
        self.message_user(request, f"{moved} delivery(ies) will be sent again.", messages.SUCCESS)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django drops an action the user may not run; posted by hand, it is refused outright.
        posted = request.POST.getlist("action") if request.method == "POST" else []
        if "redeliver_selected" in posted and not self.has_redeliver_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)
