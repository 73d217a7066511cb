"""Worker processes in the admin: who is alive, where, and how busy (read-only)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from django_strait.conf import strait_settings
from django_strait.duties.registry import alive_since
from django_strait.models import WorkerProcess


@admin.register(WorkerProcess)
class WorkerProcessAdmin(admin.ModelAdmin):
    """Registered workers; rows are written by the workers themselves."""

    list_display = (
        "worker_id", "alive", "host", "pid", "queue_list", "concurrency", "in_flight",
        "started_at", "last_seen_at",
    )  # fmt: skip
    list_filter = ("host",)
    search_fields = ("worker_id", "host")
    ordering = ("-last_seen_at",)

    @admin.display(boolean=True, description="alive")
    def alive(self, obj: WorkerProcess) -> bool:
        return obj.last_seen_at >= alive_since(timezone.now(), strait_settings.STALE_AFTER)

    @admin.display(description="queues")
    def queue_list(self, obj: WorkerProcess) -> str:
        return ", ".join(obj.queues) or "every queue"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: WorkerProcess | None = None) -> bool:
        return False
