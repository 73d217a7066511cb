"""Endpoint health in the admin: each endpoint's score and level, its circuit, its last hour.

Read-only: the workers write the rows with every batch of results and the
database computes score and level. A page reads its rows with their circuit
states in one query and the sparklines of all its rows in one more.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from django_strait.admin import charts, display, endpoints
from django_strait.admin.circuits import ResetCircuitsMixin
from django_strait.admin.inputs import GuardedInput
from django_strait.admin.unreadable import ReadsRowsAside, SetsAside
from django_strait.models import EndpointHealth


class HealthChangeList(SetsAside):
    """The health list, with the sparklines of the listed endpoints read in one query."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        urls = [row.endpoint_url for row in self.result_list]
        scores = endpoints.read_sparklines(urls, timezone.now())
        for row in self.result_list:
            row.strait_history = scores.get(row.endpoint_url, [])


@admin.register(EndpointHealth)
class EndpointHealthAdmin(
    GuardedInput, ReadsRowsAside, display.AutoRefresh, ResetCircuitsMixin, admin.ModelAdmin
):
    """Endpoint health, one row per endpoint URL, worst first."""

    list_display = (
        "endpoint", "score_display", "level_display", "success", "p95", "circuit",
        "history",
    )  # fmt: skip
    list_filter = ("level",)
    search_fields = ("endpoint_url",)
    ordering = ("score", "endpoint_url")
    actions = ["reset_circuits", "reset_health"]
    readonly_fields = (
        "endpoint_url", "score", "level", "success_rate", "failure_rate", "latency_p95_ms",
        "timeout_ms", "samples", "probe_started_at", "updated_at",
    )  # fmt: skip

    def get_queryset(self, request: HttpRequest) -> QuerySet[EndpointHealth]:
        return super().get_queryset(request).annotate(**endpoints.circuit_annotation())

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return HealthChangeList

    @admin.display(description="endpoint URL", ordering="endpoint_url")
    def endpoint(self, row: EndpointHealth) -> SafeString | str:
        return display.cut(row.endpoint_url, 26)

    @admin.display(description="score", ordering="score")
    def score_display(self, row: EndpointHealth) -> SafeString:
        url = reverse("admin:django_strait_endpoint_stats")
        return format_html(
            '<a href="{}?{}" title="this endpoint\'s charts">{}</a>',
            url, urlencode({"url": row.endpoint_url}), f"{row.score:.0f}",
        )  # fmt: skip

    @admin.display(description="level", ordering="level")
    def level_display(self, row: EndpointHealth) -> SafeString | str:
        return endpoints.show_level(
            row.level, success_rate=row.success_rate, failure_rate=row.failure_rate
        )

    @admin.display(description="success", ordering="success_rate")
    def success(self, row: EndpointHealth) -> str:
        return f"{row.success_rate:.1%}"

    @admin.display(description="failure rate", ordering="failure_rate")
    def failure(self, row: EndpointHealth) -> str:
        return f"{row.failure_rate:.1%}"

    @admin.display(description="p95 ms", ordering="latency_p95_ms")
    def p95(self, row: EndpointHealth) -> str:
        return f"{row.latency_p95_ms:.0f}"

    @admin.display(description="circuit", ordering=endpoints.CIRCUIT_STATE)
    def circuit(self, row: EndpointHealth) -> SafeString | str:
        return endpoints.show_circuit(row.endpoint_url, getattr(row, endpoints.CIRCUIT_STATE, None))

    @admin.display(description="last hour")
    def history(self, row: EndpointHealth) -> SafeString:
        # Set by HealthChangeList for the listed rows.
        return charts.sparkline(getattr(row, "strait_history", []), level=row.level, width=72)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Rows change through storage's verbs only (the reset actions: ``reset_circuits``,
        # ``forget_health``), never by the admin's generic delete.
        return False
