"""Budgets over several databases: reservations on the control database, closed once.

With several databases the projects and their ledger days live on the control
database (``STRAIT["CONTROL_DATABASE"]``). A claim on another alias reserves
there, in a transaction of its own committed before the claim's, and notes
each reservation (``BudgetReservation``: alias, run, attempt, amount). The
reservation is closed exactly once, by whoever deletes its row: the record's
settlement after the run's record, or the reaper of the run's alias when the
claim rolled back or the worker died (``resilience.budgets.closing``).

The control database's own runs keep the one-statement reservation and
settlement of a single database (``protection.reserve_budgets``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Greatest

from django_strait.models import BudgetLedger, BudgetReservation, JobRun, RunAttempt
from django_strait.rules.resilience import budgets
from django_strait.rules.states import RunStatus
from django_strait.storage.orm.protection import reserve_on_ledgers

ZERO = Decimal(0)


def reserve_for(
    alias: str, source: str, pending: Sequence[budgets.Pending], now: dt.datetime
) -> budgets.Allocation:
    """On the control database ``alias``: reserve for runs of ``source``, in claim order.

    Its own transaction, committed at once. A run claimed again at an attempt whose
    earlier claim rolled back first gives that claim's reservation back.
    """
    with transaction.atomic(using=alias):
        _close(alias, source, [budgets.Spend(p.run_id, p.project_id, now, ZERO, ZERO, p.attempt)
                               for p in pending])  # fmt: skip
        out, ledgers = reserve_on_ledgers(alias, pending, now)
        rows = [
            BudgetReservation(
                database=source,
                run_id=p.run_id,
                attempt=p.attempt,
                project_id=p.project_id,
                day=ledgers[p.project_id].day,
                amount=out.reserved[p.run_id],
                created_at=now,
            )  # fmt: skip
            for p in pending
            if p.run_id in out.reserved
        ]
        BudgetReservation.objects.using(alias).bulk_create(rows)
    return out


def settle_for(alias: str, source: str, spends: Sequence[budgets.Spend]) -> int:
    """On the control database ``alias``: close the reservations of ``source``'s spends.

    Each releases what its row reserved and spends the spend's cost; a spend whose
    row is gone (closed already) changes nothing. Returns how many were closed.
    """
    if not spends:
        return 0
    with transaction.atomic(using=alias):
        return _close(alias, source, spends)


def _close(alias: str, source: str, spends: Sequence[budgets.Spend]) -> int:
    cost = {(s.run_id, s.attempt): s.cost for s in spends}
    found = list(
        BudgetReservation.objects.using(alias)
        .select_for_update()
        .filter(database=source, run_id__in=sorted({s.run_id for s in spends}))
        .order_by("id")
    )
    closed = [row for row in found if (row.run_id, row.attempt) in cost]
    if not closed:
        return 0
    BudgetReservation.objects.using(alias).filter(pk__in=[row.pk for row in closed]).delete()
    totals: dict[tuple[int, dt.date], tuple[Decimal, Decimal]] = {}
    for row in closed:
        released, spent = totals.get((row.project_id, row.day), (ZERO, ZERO))
        totals[(row.project_id, row.day)] = (
            released + row.amount,
            spent + cost[(row.run_id, row.attempt)],
        )
    for (project_id, day), (released, spent) in sorted(totals.items()):
        BudgetLedger.objects.using(alias).filter(project_id=project_id, day=day).update(
            reserved=Greatest(F("reserved") - released, ZERO), spent=F("spent") + spent
        )
    return len(closed)


def stale(alias: str, source: str, before: dt.datetime, limit: int) -> list[budgets.Reservation]:
    """On the control database ``alias``: ``source``'s reservations made before ``before``."""
    rows = (
        BudgetReservation.objects.using(alias)
        .filter(database=source, created_at__lt=before)
        .order_by("created_at", "id")
        .values_list("run_id", "attempt", "project_id", "day", "amount")[:limit]
    )
    return [budgets.Reservation(*row) for row in rows]


def mark_reserved(alias: str, reserved: Mapping[int, Decimal]) -> None:
    """Note on the claimed runs what the control database reserved for them."""
    by_cost: dict[Decimal, list[int]] = {}
    for run_id, cost in reserved.items():
        by_cost.setdefault(cost, []).append(run_id)
    for cost, run_ids in by_cost.items():
        JobRun.objects.using(alias).filter(pk__in=run_ids).update(reserved_cost=cost)


def fates(alias: str, attempts: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """What became of each (run, attempt) a reservation names, in ``alias``'s own transaction.

    The runs are locked first (skipping those a claim holds: their fate is not known
    yet, and they are left out), so a claim cannot commit between the read and the answer.
    """
    if not attempts:
        return {}
    ids = sorted({run_id for run_id, _ in attempts})
    with transaction.atomic(using=alias):
        runs = dict(
            JobRun.objects.using(alias)
            .select_for_update(skip_locked=True, of=("self",))
            .filter(pk__in=ids)
            .values_list("id", "attempt")
        )
        executing = set(
            JobRun.objects.using(alias)
            .filter(pk__in=list(runs), status=RunStatus.EXECUTING)
            .values_list("id", "attempt")
        )
        existing = set(JobRun.objects.using(alias).filter(pk__in=ids).values_list("id", flat=True))
        wanted = Q()
        for run_id, attempt in attempts:
            wanted |= Q(run_id=run_id, number=attempt)
        made = set(RunAttempt.objects.using(alias).filter(wanted).values_list("run_id", "number"))
    out = {}
    for key in attempts:
        run_id, attempt = key
        if run_id not in existing:
            out[key] = budgets.Fate.MADE  # gone: it may have run, so it is paid for
        elif run_id not in runs:
            continue  # locked by a claim in progress: next round
        elif key in executing:
            out[key] = budgets.Fate.RUNNING
        elif key in made:
            out[key] = budgets.Fate.MADE
        else:
            out[key] = budgets.Fate.NEVER
    return out
