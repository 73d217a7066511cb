"""Worker processes in the admin: who is alive, where, and how busy (read-only)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone
from django.utils.safestring import SafeString

from django_strait.admin import display
from django_strait.admin.aliases import AcrossAliases
from django_strait.admin.inputs import GuardedInput
from django_strait.admin.unreadable import ReadsRowsAside
from django_strait.conf import strait_settings
from django_strait.duties.registry import alive_since
from django_strait.models import WorkerProcess


@admin.register(WorkerProcess)
class WorkerProcessAdmin(
    AcrossAliases, GuardedInput, ReadsRowsAside, display.AutoRefresh, admin.ModelAdmin
):
    """Registered workers; rows are written by the workers themselves."""

    list_display = (
        "worker", "alive", "host_cut", "pid", "queue_list", "concurrency", "in_flight",
        "started", "last_seen",
    )  # fmt: skip
    list_filter = ("host",)
    search_fields = ("worker_id", "host")
    ordering = ("-last_seen_at",)

    @admin.display(boolean=True, description="alive")
    def alive(self, obj: WorkerProcess) -> bool:
        return obj.last_seen_at >= alive_since(timezone.now(), strait_settings.STALE_AFTER)

    @admin.display(description="worker id", ordering="worker_id")
    def worker(self, obj: WorkerProcess) -> SafeString | str:
        return display.cut(obj.worker_id, 32)

    @admin.display(description="host", ordering="host")
    def host_cut(self, obj: WorkerProcess) -> SafeString | str:
        return display.cut(obj.host, 24)

    @admin.display(description="queues")
    def queue_list(self, obj: WorkerProcess) -> SafeString | str:
        return display.cut(", ".join(obj.queues) or "every queue", 30)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: WorkerProcess) -> SafeString | str:
        return display.moment(obj.started_at)

    @admin.display(description="last seen", ordering="last_seen_at")
    def last_seen(self, obj: WorkerProcess) -> SafeString | str:
        return display.moment(obj.last_seen_at)

    def has_delete_permission(self, request: HttpRequest, obj: WorkerProcess | None = None) -> bool:
        # Rows are the workers' own: a live one writes its row back, a dead one's goes
        # with the reaper (10 x STALE_AFTER). Deleting by hand would only mislead.
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: WorkerProcess | None = None) -> bool:
        return False
