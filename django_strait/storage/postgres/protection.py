"""The PostgreSQL backend's protection steps inside a claim: one statement each.

Limits (queries.sql, "limits") and budgets ("budget.lock", then "budget.reserve")
decide in the claim's transaction what of the claimed runs may start; the rules
are ``resilience.limits`` and ``resilience.budgets``, the rows are locked here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django_strait.models import BudgetLedger, Project
from django_strait.rules.resilience import budgets, limits
from django_strait.rules.resilience.health import concurrency_share
from django_strait.storage.postgres import queries
from django_strait.storage.postgres.statements import Statements
from django_strait.storage.rows import check_finite, explain


class ProtectionStatements(Statements):
    """Concurrency and rate limits, budget reservations: a mixin of ``PostgresStorage``."""

    def enforce_limits(
        self, pending: Sequence[limits.Pending], *, now: dt.datetime
    ) -> list[limits.Held]:
        if not pending:
            return []
        by_job: dict[int, list[int]] = {}
        scores: dict[int, float | None] = {}
        for run in pending:
            by_job.setdefault(run.job_id, []).append(run.run_id)
            scores[run.job_id] = run.health_score
        jobs = sorted(by_job)
        rows = self._execute(
            queries.get("limits"),
            {
                "job_id": jobs,
                "n": [len(by_job[j]) for j in jobs],
                "share": [concurrency_share(scores[j]) for j in jobs],
                "kept": limits.RATE_LOG_KEPT,
            },
        )
        decisions = [limits.Decision(*row, health_score=scores[row[0]]) for row in rows]
        return limits.holds(decisions, by_job, now)

    def reserve_budgets(
        self, pending: Sequence[budgets.Pending], *, now: dt.datetime
    ) -> budgets.Allocation:
        if not pending:
            return budgets.Allocation()
        projects = sorted({p.project_id for p in pending})
        day = budgets.today(now)
        try:
            rows = self._execute(queries.get("budget.lock"), {"day": day, "projects": projects})
        except Exception as exc:  # a ledger day that cannot be read: say which (its runs wait)
            ledgers = BudgetLedger.objects.using(self.alias)
            explain(ledgers.filter(project_id__in=projects, day=day).select_related("project"), exc)
            raise
        ledgers = {row[1]: _ledger_day(row) for row in rows}
        out = budgets.allocate(pending, ledgers, now=now)
        if out.added:
            warned = {ledger.project_id for ledger in out.crossed}
            pids = sorted(out.added)
            self._execute(
                queries.by_id("budget.reserve", self._partitioned()),
                {
                    "ledger": [ledgers[p].id for p in pids],
                    "amount": [out.added[p] for p in pids],
                    "warn": [p in warned for p in pids],
                    "runs": list(out.reserved),
                    "cost": list(out.reserved.values()),
                },
            )
        return out


def _ledger_day(row: tuple) -> budgets.LedgerDay:
    lid, pid, day, reserved, spent, warned, name, budget, ratio = row
    check_finite(BudgetLedger._meta.db_table, lid, reserved=reserved, spent=spent)
    check_finite(Project._meta.db_table, pid, daily_budget=budget, soft_limit_ratio=ratio)
    return budgets.LedgerDay(lid, pid, name, budget, ratio, day, reserved, spent, warned)
