"""Job definitions in the admin: edited here, validated by ``Job.clean()``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from django_strait.models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Jobs: what runs, where, and how it retries; pause and resume."""

    list_display = ("name", "enabled", "queue", "priority", "target", "max_attempts", "updated_at")
    list_filter = ("enabled", "queue")
    search_fields = ("name", "endpoint_url", "handler")
    actions = ("pause_selected", "resume_selected")
    readonly_fields = ("created_at", "updated_at")
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
            "retry_jitter", "retry_function", "non_retryable_errors", "on_exhaustion",
        )}),
        ("Schedule and retention", {"fields": (
            "schedule", "timezone", "schedule_missed", "schedule_overlap", "retention_days",
        )}),
        (None, {"fields": ("created_at", "updated_at")}),
    )  # fmt: skip

    @admin.display(description="target")
    def target(self, job: Job) -> str:
        return job.endpoint_url or job.handler

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
