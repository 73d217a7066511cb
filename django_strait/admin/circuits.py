"""Endpoint circuits in the admin: which endpoints are held back, their health, and a reset action."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from django_strait.admin import endpoints
from django_strait.circuits import reset_circuit
from django_strait.models import EndpointCircuit

#: Closing circuits by hand: one permission wherever the action is offered.
RESET_PERMISSION = "django_strait.reset_endpointcircuit"


class ResetCircuitsMixin:
    """A "reset circuits" action on a model admin whose rows have an ``endpoint_url``."""

    def has_reset_permission(self, request: HttpRequest) -> bool:
        """Return whether the user holds ``django_strait.reset_endpointcircuit``."""
        return request.user.has_perm(RESET_PERMISSION)

    @admin.action(description="Reset selected circuits (close them)", permissions=["reset"])
    def reset_circuits(self, request: HttpRequest, queryset: QuerySet) -> None:
        urls = queryset.values_list("endpoint_url", flat=True)
        closed = sum(reset_circuit(url) for url in urls)
        self.message_user(request, f"Reset {closed} circuit(s).", messages.SUCCESS)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django drops an action the user may not run and says "no action selected";
        # a reset posted by hand without the permission is refused outright instead.
        posted = request.POST.getlist("action") if request.method == "POST" else []
        if "reset_circuits" in posted and not self.has_reset_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)


@admin.register(EndpointCircuit)
class EndpointCircuitAdmin(ResetCircuitsMixin, admin.ModelAdmin):
    """Circuits, one per endpoint URL; rows are written by the workers."""

    list_display = (
        "endpoint_url", "state", "failures", "health_score", "health_level", "opened_at", "last_failure_at",
        "probe_started_at", "updated_at",
    )  # fmt: skip
    list_filter = ("state",)
    search_fields = ("endpoint_url",)
    ordering = ("endpoint_url",)
    actions = ["reset_circuits"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[EndpointCircuit]:
        return super().get_queryset(request).annotate(**endpoints.health_annotation())

    @admin.display(description="health score", ordering=endpoints.HEALTH_SCORE)
    def health_score(self, circuit: EndpointCircuit) -> str:
        score = getattr(circuit, endpoints.HEALTH_SCORE, None)
        return "-" if score is None else f"{score:.0f}"

    @admin.display(description="health level", ordering=endpoints.HEALTH_LEVEL)
    def health_level(self, circuit: EndpointCircuit) -> str:
        return endpoints.show_level(getattr(circuit, endpoints.HEALTH_LEVEL, None))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
