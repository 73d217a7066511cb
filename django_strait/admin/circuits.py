"""Endpoint circuits in the admin: which endpoints are held back, and a reset action."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.db.models import QuerySet
from django.http import HttpRequest

from django_strait.models import EndpointCircuit
from django_strait.resilience import reset_circuit


@admin.register(EndpointCircuit)
class EndpointCircuitAdmin(admin.ModelAdmin):
    """Circuits, one per endpoint URL; rows are written by the workers."""

    list_display = (
        "endpoint_url", "state", "failures", "opened_at", "last_failure_at", "probe_started_at",
        "updated_at",
    )  # fmt: skip
    list_filter = ("state",)
    search_fields = ("endpoint_url",)
    ordering = ("endpoint_url",)
    actions = ["reset_circuits"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_reset_permission(self, request: HttpRequest) -> bool:
        """Return whether the user holds ``django_strait.reset_endpointcircuit``."""
        codename = get_permission_codename("reset", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    @admin.action(description="Reset selected circuits (close them)", permissions=["reset"])
    def reset_circuits(self, request: HttpRequest, queryset: QuerySet[EndpointCircuit]) -> None:
        closed = sum(reset_circuit(url) for url in queryset.values_list("endpoint_url", flat=True))
        self.message_user(request, f"Reset {closed} circuit(s).", messages.SUCCESS)
