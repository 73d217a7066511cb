"""Budgets: each project's daily budget and today's ledger, and one project's last days."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from django_strait.api.auth import Rule
from django_strait.api.base import StraitAPIView
from django_strait.api.filters import PAGING, refuse_unknown
from django_strait.api.inputs import integer
from django_strait.api.pagination import Keyset, one, page_serializer, paginate, said
from django_strait.api.schema import documented, errors, paging_parameters
from django_strait.api.serializers import BudgetHistorySerializer, BudgetSerializer
from django_strait.models import BudgetLedger, Project
from django_strait.rules.resilience.budgets import today
from django_strait.storage.rows import SetAside, Unreadable, problem_of, read

# As circuits: whoever may read the jobs may read what their projects spent.
READ = Rule("jobs:read", "django_strait.view_project")

DEFAULT_DAYS = 7
MAX_DAYS = 90
BudgetPage = page_serializer("BudgetPage", BudgetSerializer)
DAYS_PARAMETER = OpenApiParameter(
    "days",
    int,
    description=f"Days to show, today included: 1 to {MAX_DAYS} (default {DEFAULT_DAYS}).",
)
ZERO = Decimal(0)


def _today_of(project: Project, ledger: BudgetLedger | None, day: dt.date) -> dict[str, Any]:
    spent = ledger.spent if ledger else ZERO
    reserved = ledger.reserved if ledger else ZERO
    return {
        "name": project.name,
        "daily_budget": project.daily_budget,
        "soft_limit_ratio": project.soft_limit_ratio,
        "day": day,
        "spent": spent,
        "reserved": reserved,
        "remaining": max(ZERO, project.daily_budget - spent - reserved),
    }


def _shown_today(project: Project, ledger: BudgetLedger | None, day: dt.date) -> dict[str, Any]:
    """A project's today, or, when its row or its ledger cannot be read, its name and why."""
    problems = [*getattr(project, "unreadable", ()), *getattr(ledger, "unreadable", ())]
    if not problems:
        try:
            return BudgetSerializer(_today_of(project, ledger, day)).data
        except Exception as exc:
            problems = [Unreadable(Project._meta.db_table, project.pk, "", problem_of(exc))]
    return {"name": project.name, "unreadable": said(problems)}


class BudgetListView(StraitAPIView):
    """GET budgets/: every project, by name, with what it spent and holds today."""

    rules = {"GET": READ}

    @documented(
        operation_id="budgets_list",
        parameters=paging_parameters(),
        responses={200: BudgetPage, **errors(400)},
    )
    def get(self, request: Request) -> Response:
        refuse_unknown(request.query_params, PAGING)
        page = paginate(Project.objects.all(), Keyset("name", kind=str), request)
        day = today()
        found = read(BudgetLedger.objects.filter(project__in=page.rows, day=day), stand_ins=True)
        ledgers = {row.project_id: row for row in found.rows}
        data = [_shown_today(p, ledgers.get(p.pk), day) for p in page.rows]
        return Response({"results": data, "next": page.next_url})


def history(project: Project, days: int, until: dt.date) -> list[dict[str, Any]]:
    """Return the project's ledger for the ``days`` days up to ``until``, newest first."""
    first = until - dt.timedelta(days=days - 1)
    found = read(project.ledger.filter(day__gte=first, day__lte=until))
    if found.unreadable:
        raise SetAside(found.unreadable)
    rows = {r.day: r for r in found.rows}
    return [_day(rows.get(until - dt.timedelta(days=n)), until - dt.timedelta(days=n))
            for n in range(days)]  # fmt: skip


def _day(row: BudgetLedger | None, day: dt.date) -> dict[str, Any]:
    if row is None:
        return {"day": day, "spent": ZERO, "reserved": ZERO, "soft_warning_sent_at": None}
    return {
        "day": day,
        "spent": row.spent,
        "reserved": row.reserved,
        "soft_warning_sent_at": row.soft_warning_sent_at,
    }


class BudgetView(StraitAPIView):
    """GET budgets/<project>/: one project's budget and its last days (zeros where nothing ran)."""

    rules = {"GET": READ}

    @documented(
        operation_id="budgets_retrieve",
        parameters=[DAYS_PARAMETER],
        responses={200: BudgetHistorySerializer, **errors(400, 404)},
    )
    def get(self, request: Request, project: str) -> Response:
        refuse_unknown(request.query_params, ("days",))
        days = integer(request.query_params, "days", default=DEFAULT_DAYS, low=1, high=MAX_DAYS)
        found = one(Project.objects.filter(name=project))
        if found is None:
            raise exceptions.NotFound(f"no project named {project!r}")
        try:
            data = {
                "name": found.name,
                "daily_budget": found.daily_budget,
                "soft_limit_ratio": found.soft_limit_ratio,
                "days": history(found, days, today()),
            }
            shown = BudgetHistorySerializer(data).data
        except SetAside as exc:  # a day of its ledger cannot be read
            return Response({"name": found.name, "unreadable": said(exc.problems)})
        except Exception as exc:
            problems = [Unreadable(Project._meta.db_table, found.pk, "", problem_of(exc))]
            return Response({"name": found.name, "unreadable": said(problems)})
        if getattr(found, "unreadable", None):
            shown["unreadable"] = said(found.unreadable)
        return Response(shown)
