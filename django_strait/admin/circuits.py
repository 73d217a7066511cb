"""Endpoint circuits in the admin: which endpoints are held back, their health, and a reset action."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString

from django_strait.admin import display, endpoints
from django_strait.admin.inputs import GuardedInput
from django_strait.admin.unreadable import ReadsRowsAside
from django_strait.circuits import reset_circuit, reset_health
from django_strait.models import CircuitState, EndpointCircuit, EndpointHealth, HealthLevel

#: Closing circuits by hand: one permission wherever the action is offered.
RESET_PERMISSION = "django_strait.reset_endpointcircuit"


class ResetCircuitsMixin:
    """A "reset circuits" action on a model admin whose rows have an ``endpoint_url``."""

    def has_reset_permission(self, request: HttpRequest) -> bool:
        """Return whether the user holds ``django_strait.reset_endpointcircuit``."""
        return request.user.has_perm(RESET_PERMISSION)

    @admin.action(description="Reset selected circuits (close them)", permissions=["reset"])
    def reset_circuits(self, request: HttpRequest, queryset: QuerySet) -> None:
        urls = list(queryset.values_list("endpoint_url", flat=True))
        closed = sum(reset_circuit(url) for url in urls)
        self.message_user(request, f"Reset {closed} circuit(s).", messages.SUCCESS)
        unhealthy = unhealthy_scores(urls)
        if unhealthy:
            listed = ", ".join(f"{url} ({score:.0f})" for url, score in unhealthy.items())
            self.message_user(
                request,
                f"Still unhealthy: {listed}. Their runs stay held by health (one probe per "
                "cooldown) until the score passes 30, whatever the circuit says. To let them "
                'run now, select the same rows and choose "Reset health of selected '
                'endpoints too".',
                messages.WARNING,
            )

    @admin.action(
        description="Reset health of selected endpoints too (forget their scores)",
        permissions=["reset"],
    )
    def reset_health(self, request: HttpRequest, queryset: QuerySet) -> None:
        urls = list(queryset.values_list("endpoint_url", flat=True))
        forgotten = reset_health(urls)
        closed = sum(reset_circuit(url) for url in urls)
        self.message_user(
            request,
            f"Forgot the health score of {forgotten} endpoint(s) and reset {closed} "
            "circuit(s): their runs are claimed again, and new answers score them afresh.",
            messages.SUCCESS,
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django drops an action the user may not run and says "no action selected";
        # a reset posted by hand without the permission is refused outright instead.
        posted = request.POST.getlist("action") if request.method == "POST" else []
        resets = {"reset_circuits", "reset_health"}
        if resets.intersection(posted) and not self.has_reset_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)


def unhealthy_scores(urls: list[str]) -> dict[str, float]:
    """The endpoints among ``urls`` whose health still holds their runs, with their scores."""
    rows = EndpointHealth.objects.filter(endpoint_url__in=urls, level=HealthLevel.UNHEALTHY)
    return dict(rows.values_list("endpoint_url", "score"))


@admin.register(EndpointCircuit)
class EndpointCircuitAdmin(
    GuardedInput, ReadsRowsAside, display.AutoRefresh, ResetCircuitsMixin, admin.ModelAdmin
):
    """Circuits, one per endpoint URL; rows are written by the workers."""

    list_display = (
        "endpoint", "state_badge", "failures", "health_level", "opened", "last_failure",
        "probe_started",
    )  # fmt: skip
    list_filter = ("state",)
    search_fields = ("endpoint_url",)
    ordering = ("endpoint_url",)
    actions = ["reset_circuits", "reset_health"]

    @admin.display(description="endpoint URL", ordering="endpoint_url")
    def endpoint(self, circuit: EndpointCircuit) -> SafeString | str:
        return display.cut(circuit.endpoint_url, 26)

    @admin.display(description="state", ordering="state")
    def state_badge(self, circuit: EndpointCircuit) -> SafeString:
        colour = endpoints.CIRCUIT_COLOURS.get(circuit.state)
        return display.badge(display.label(CircuitState, circuit.state), colour)

    @admin.display(description="opened", ordering="opened_at")
    def opened(self, circuit: EndpointCircuit) -> SafeString | str:
        return display.moment(circuit.opened_at)

    @admin.display(description="last failure", ordering="last_failure_at")
    def last_failure(self, circuit: EndpointCircuit) -> SafeString | str:
        return display.moment(circuit.last_failure_at)

    @admin.display(description="probe sent", ordering="probe_started_at")
    def probe_started(self, circuit: EndpointCircuit) -> SafeString | str:
        return display.moment(circuit.probe_started_at)

    def get_queryset(self, request: HttpRequest) -> QuerySet[EndpointCircuit]:
        return super().get_queryset(request).annotate(**endpoints.health_annotation())

    @admin.display(description="health", ordering=endpoints.HEALTH_SCORE)
    def health_level(self, circuit: EndpointCircuit) -> str:
        return endpoints.show_level(
            getattr(circuit, endpoints.HEALTH_LEVEL, None),
            getattr(circuit, endpoints.HEALTH_SCORE, None),
            getattr(circuit, endpoints.HEALTH_SUCCESS, None),
            getattr(circuit, endpoints.HEALTH_FAILURE, None),
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Rows change through storage's verbs only (the reset actions: ``reset_circuits``,
        # ``forget_health``), never by the admin's generic delete.
        return False
