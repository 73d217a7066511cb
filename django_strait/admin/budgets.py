"""Projects and their budgets in the admin: today's spend against the budget, the last 14 days.

The list reads each project's ledger row for today with the project (two
subqueries on the unique (project, day) index), so a page is one query. The
budget day is the worker's: ``timezone.localdate()`` in Django's TIME_ZONE.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.contrib import admin
from django.db.models import DecimalField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_strait.admin import charts
from django_strait.admin.aliases import AcrossAliases
from django_strait.admin.inputs import GuardedInput
from django_strait.admin.unreadable import ReadsRowsAside, problems_of, say_problems
from django_strait.models import BudgetLedger, Project
from django_strait.models.budget import COST_FIELD
from django_strait.rules.resilience.budgets import today
from django_strait.storage.rows import read, readable_instants

#: How many days of ledger a project's page shows.
HISTORY_DAYS = 14

SPENT_TODAY = "strait_spent_today"
RESERVED_TODAY = "strait_reserved_today"


def today_annotation(day: dt.date) -> dict[str, Coalesce]:
    """Return ``annotate()`` keywords for each project's spent and reserved on ``day``."""
    rows = BudgetLedger.objects.filter(project=OuterRef("pk"), day=day)
    zero = Value(Decimal(0), output_field=DecimalField(**COST_FIELD))
    return {
        name: Coalesce(Subquery(rows.values(column)[:1]), zero, output_field=zero.output_field)
        for name, column in ((SPENT_TODAY, "spent"), (RESERVED_TODAY, "reserved"))
    }


def budget_day(project: Project) -> charts.BudgetDay:
    """Return a project annotated by :func:`today_annotation` as its day in figures."""
    return charts.BudgetDay(
        spent=getattr(project, SPENT_TODAY, Decimal(0)),
        reserved=getattr(project, RESERVED_TODAY, Decimal(0)),
        budget=project.daily_budget,
        soft_limit_ratio=project.soft_limit_ratio,
    )


def projects_today(queryset: QuerySet[Project], now: dt.datetime | None = None) -> QuerySet:
    """Return ``queryset`` with today's spent and reserved on each project."""
    return queryset.annotate(**today_annotation(today(now)))


@admin.register(Project)
class ProjectAdmin(AcrossAliases, GuardedInput, ReadsRowsAside, admin.ModelAdmin):
    """Projects: a daily budget shared by the jobs that name the project."""

    list_display = (
        "name", "budget", "spent_today", "reserved_today", "used_today", "soft_limit",
        "updated_at",
    )  # fmt: skip
    search_fields = ("name",)
    ordering = ("name",)
    fieldsets = (
        (None, {"fields": ("name", "daily_budget", "soft_limit_ratio")}),
        (f"Last {HISTORY_DAYS} days (bars against today's budget)", {"fields": ("recent_days",)}),
        (None, {"fields": ("created_at", "updated_at")}),
    )
    readonly_fields = ("recent_days", "created_at", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        return projects_today(super().get_queryset(request))

    @admin.display(description="daily budget", ordering="daily_budget")
    def budget(self, project: Project) -> str:
        return charts.amount(project.daily_budget)

    @admin.display(description="spent today", ordering=SPENT_TODAY)
    def spent_today(self, project: Project) -> str:
        return charts.amount(budget_day(project).spent)

    @admin.display(description="reserved today", ordering=RESERVED_TODAY)
    def reserved_today(self, project: Project) -> str:
        return charts.amount(budget_day(project).reserved)

    @admin.display(description="today")
    def used_today(self, project: Project) -> SafeString:
        day = budget_day(project)
        return format_html(
            '{} <span class="strait-budget-used">{}%</span>',
            charts.budget_bar(day), f"{day.used * 100:.0f}",
        )  # fmt: skip

    @admin.display(description="soft limit", ordering="soft_limit_ratio")
    def soft_limit(self, project: Project) -> str:
        return f"{project.soft_limit_ratio:.0%}"

    @admin.display(description="ledger")
    def recent_days(self, project: Project) -> SafeString | str:
        if project.pk is None:
            return "-"
        if problems_of(project):
            return f"Not drawn: {say_problems(problems_of(project))}."
        since = today() - dt.timedelta(days=HISTORY_DAYS - 1)
        rows = project.ledger.filter(readable_instants("day", dates=True), day__gte=since)
        found = read(rows.order_by("-day"))  # a day that cannot be read is left out, logged
        lines = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (_ledger_cells(project, row) for row in found.rows),
        )
        if not lines:
            return "Nothing reserved or spent in this time."
        return format_html(
            '<table class="strait-ledger"><thead><tr><th>day</th><th>spent</th>'
            "<th>reserved</th><th></th><th>soft-limit warning</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            lines,
        )


def _ledger_cells(project: Project, row: BudgetLedger) -> tuple[object, ...]:
    day = charts.BudgetDay(row.spent, row.reserved, project.daily_budget, project.soft_limit_ratio)
    warned = row.soft_warning_sent_at
    warned = f"{timezone.localtime(warned):%H:%M:%S}" if warned else "-"
    return (
        f"{row.day:%Y-%m-%d}", charts.amount(row.spent), charts.amount(row.reserved),
        charts.budget_bar(day, width=120), warned,
    )  # fmt: skip
