"""The overview page: one database's overview, or every alias's summed (``overview_aliases``)."""

from __future__ import annotations

from django.apps import apps
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from django_strait import database
from django_strait.admin import charts, display, endpoints
from django_strait.admin.overview import read_overview, time_charts
from django_strait.admin.overview_aliases import read_overviews


def overview_view(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Render the overview page for a user who may view runs."""
    if not request.user.has_perm("django_strait.view_jobrun"):
        raise PermissionDenied
    if database.placed():
        data, per_database = read_overviews(timezone.now())
        where = per_database[0].reading
    else:
        where, per_database = database.reading(), ()
        data = read_overview(using=where.alias)
    context = {
        **site.each_context(request),
        "reading": where,
        "per_database": per_database,
        "title": "Strait overview",
        "refresh_seconds": display.REFRESH_SECONDS,
        "app_config": apps.get_app_config("django_strait"),
        "overview": data,
        **time_charts(data),
        "depth_chart": charts.horizontal_bars([(q.queue, q.depth) for q in data.queues]),
        "lag_chart": charts.horizontal_bars(
            [(q.queue, q.lag_seconds) for q in data.queues], unit=" s"
        ),
        "dead_letter_chart": charts.horizontal_bars(list(data.dead_letters[:20])),
        "endpoint_rows": [
            (
                row,
                endpoints.show_level(row.level, row.score),
                endpoints.show_circuit(row.endpoint_url, row.circuit),
                charts.sparkline(row.history, level=row.level),
            )
            for row in data.endpoints
        ],
        "budget_rows": [
            {
                "name": row.name,
                "spent": charts.amount(row.today.spent),
                "reserved": charts.amount(row.today.reserved),
                "budget": charts.amount(row.today.budget),
                "used": f"{row.today.used:.0%}",
                "bar": charts.budget_bar(row.today),
            }
            for row in data.budgets
        ],
    }
    return TemplateResponse(request, "admin/django_strait/overview.html", context)
