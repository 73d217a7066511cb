"""Budgets (DESIGN §5): reserve before dispatch, settle on the result, never over-commit.

A job with a ``project`` reserves its ``estimated_cost`` from the project's
ledger row for today (``BudgetLedger``, one per project per day, in Django's
``TIME_ZONE``) inside the claim transaction, with the ledger rows locked
until it commits: ``reserved + spent + cost <= daily_budget`` is checked and
the reservation added under that lock, so workers on any number of hosts can
never commit more than the budget between them. A run that does not fit goes
back to queued until the next day begins, spending no attempt, with the
reason on the run (``error_type`` ``budget.exhausted``) and a short-circuited
attempt row; raising the project's budget lets those runs go at once.

When the attempt is recorded its reservation becomes what it cost: the
endpoint's ``Strait-Cost`` header, else the estimate (nothing for a call that
never reached the endpoint), and the rest is released. When a project's
committed amount (reserved + spent) first reaches ``soft_limit_ratio`` of its
budget on a day, ``budget_soft_limit`` is sent once, with a warning log.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db import connections, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from django_strait.database import alias
from django_strait.models import BudgetLedger, JobRun, Project
from django_strait.sql import server_bound_cursor
from django_strait.states import RunStatus

logger = logging.getLogger(__name__)

#: The error type of a run waiting for its project's budget.
BUDGET_ERROR = "budget.exhausted"

ZERO = Decimal(0)

_LEDGER_TABLE = BudgetLedger._meta.db_table
_PROJECT_TABLE = Project._meta.db_table
_RUN_TABLE = JobRun._meta.db_table


@dataclass(frozen=True, slots=True)
class Pending:
    """A claimed run of a job with a project: what it would reserve."""

    run_id: int
    project_id: int
    cost: Decimal


@dataclass(frozen=True, slots=True)
class Held:
    """A run that does not fit its project's budget today."""

    run_id: int
    until: dt.datetime
    reason: str


@dataclass(frozen=True, slots=True)
class Spend:
    """One recorded attempt's settlement: release ``reserved``, spend ``cost``."""

    run_id: int
    project_id: int
    #: When the attempt started: its reservation was made on that day.
    started_at: dt.datetime
    reserved: Decimal
    cost: Decimal


def today(now: dt.datetime | None = None) -> dt.date:
    """Return the budget day of ``now`` (Django's TIME_ZONE)."""
    return timezone.localdate(now or timezone.now())


def next_day_starts(day: dt.date) -> dt.datetime:
    """Return the first moment of the day after ``day`` (Django's TIME_ZONE)."""
    return timezone.make_aware(dt.datetime.combine(day + dt.timedelta(days=1), dt.time.min))


# -- reserve (inside the claim) ------------------------------------------------------


def reserve(
    pending: Sequence[Pending], *, now: dt.datetime, using: str | None = None
) -> tuple[dict[int, Decimal], list[Held]]:
    """Reserve each run's cost in claim order; return the reservations and the runs that wait.

    Call inside the claim transaction: the ledger rows stay locked until it ends.
    """
    if not pending:
        return {}, []
    day = today(now)
    ledgers = _lock_ledgers(sorted({p.project_id for p in pending}), day, using)
    reserved: dict[int, Decimal] = {}
    held: list[Held] = []
    added: dict[int, Decimal] = {}
    for p in pending:
        ledger = ledgers[p.project_id]
        committed = ledger.reserved + added.get(p.project_id, ZERO) + ledger.spent
        if committed + p.cost <= ledger.project.daily_budget:
            added[p.project_id] = added.get(p.project_id, ZERO) + p.cost
            reserved[p.run_id] = p.cost
        else:
            held.append(Held(p.run_id, next_day_starts(day), _reason(ledger, committed, p.cost)))
    crossed = []
    warn: dict[int, bool] = {}
    for project_id, amount in added.items():
        ledger = ledgers[project_id]
        ledger.reserved += amount
        warn[project_id] = _crosses_soft_limit(ledger)
        if warn[project_id]:
            ledger.soft_warning_sent_at = now
            crossed.append(ledger)
    _write_reservations(ledgers, added, warn, reserved, using)
    _announce_on_commit(crossed, using)
    return reserved, held


# The ledger rows of this claim's projects for the day, created if missing, locked
# (ON CONFLICT DO UPDATE locks the row and returns its latest committed version) and
# read with their project's budget: one statement.
_LOCK_PG = f"""
INSERT INTO {_LEDGER_TABLE} AS t (project_id, day, reserved, spent, updated_at)
SELECT p, %s::date, 0, 0, now() FROM unnest(%s::bigint[]) AS p ORDER BY p
ON CONFLICT (project_id, day) DO UPDATE SET updated_at = EXCLUDED.updated_at
RETURNING t.id, t.project_id, t.day, t.reserved, t.spent, t.soft_warning_sent_at,
          (SELECT p.name FROM {_PROJECT_TABLE} AS p WHERE p.id = t.project_id),
          (SELECT p.daily_budget FROM {_PROJECT_TABLE} AS p WHERE p.id = t.project_id),
          (SELECT p.soft_limit_ratio FROM {_PROJECT_TABLE} AS p WHERE p.id = t.project_id)
"""

# The reservations: added to the ledger rows (with the day's soft-limit mark) and noted
# on the runs, in one statement.
_RESERVE_PG = f"""
WITH l AS (
    UPDATE {_LEDGER_TABLE} AS t
    SET reserved = t.reserved + v.amount, updated_at = now(),
        soft_warning_sent_at = CASE WHEN v.warn THEN now() ELSE t.soft_warning_sent_at END
    FROM unnest(%s::bigint[], %s::numeric[], %s::boolean[]) AS v(id, amount, warn)
    WHERE t.id = v.id
    RETURNING 1
),
r AS (
    UPDATE {_RUN_TABLE} AS r SET reserved_cost = v.cost
    FROM unnest(%s::bigint[], %s::numeric[]) AS v(id, cost)
    WHERE r.id = v.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM l), (SELECT count(*) FROM r)
"""


def _lock_ledgers(project_ids: list[int], day: dt.date, using: str) -> dict[int, BudgetLedger]:
    if connections[alias(using)].vendor != "postgresql":
        return _lock_ledgers_orm(project_ids, day, using)
    with server_bound_cursor(connections[alias(using)]) as cursor:
        cursor.execute(_LOCK_PG, [day, project_ids])
        rows = cursor.fetchall()
    ledgers = {}
    for lid, pid, lday, reserved, spent, warned, name, budget, ratio in rows:
        ledger = BudgetLedger(
            id=lid, project_id=pid, day=lday, reserved=reserved, spent=spent,
            soft_warning_sent_at=warned,
        )  # fmt: skip
        ledger.project = Project(id=pid, name=name, daily_budget=budget, soft_limit_ratio=ratio)
        ledgers[pid] = ledger
    return ledgers


def _lock_ledgers_orm(project_ids: list[int], day: dt.date, using: str) -> dict[int, BudgetLedger]:
    BudgetLedger.objects.using(using).bulk_create(
        [BudgetLedger(project_id=pid, day=day) for pid in project_ids], ignore_conflicts=True
    )
    rows = (
        BudgetLedger.objects.using(using)
        .select_for_update(of=("self",))
        .select_related("project")
        .filter(project_id__in=project_ids, day=day)
        .order_by("project_id")
    )
    return {row.project_id: row for row in rows}


def _write_reservations(
    ledgers: dict[int, BudgetLedger],
    added: dict[int, Decimal],
    warn: dict[int, bool],
    reserved: dict[int, Decimal],
    using: str,
) -> None:
    if not added:
        return
    if connections[alias(using)].vendor == "postgresql":
        pids = sorted(added)
        params = [
            [ledgers[p].pk for p in pids],
            [added[p] for p in pids],
            [warn[p] for p in pids],
            list(reserved),
            list(reserved.values()),
        ]
        with server_bound_cursor(connections[alias(using)]) as cursor:
            cursor.execute(_RESERVE_PG, params)
        return
    for pid in added:
        fields = ["reserved", "updated_at", *(["soft_warning_sent_at"] if warn[pid] else [])]
        ledgers[pid].save(update_fields=fields, using=using)
    by_cost: dict[Decimal, list[int]] = {}
    for run_id, cost in reserved.items():
        by_cost.setdefault(cost, []).append(run_id)
    for cost, run_ids in by_cost.items():
        JobRun.objects.using(using).filter(pk__in=run_ids).update(reserved_cost=cost)


def _reason(ledger: BudgetLedger, committed: Decimal, cost: Decimal) -> str:
    project = ledger.project
    return (
        f"project {project.name}'s daily budget of {_amount(project.daily_budget)} is committed "
        f"for {ledger.day:%Y-%m-%d} ({_amount(ledger.spent)} spent, "
        f"{_amount(committed - ledger.spent)} reserved; this run needs {_amount(cost)}); "
        "waiting until the next day or a raised budget; no attempt spent"
    )


def _amount(value: Decimal) -> str:
    return f"{value.normalize():f}"


# -- settle (with the record) --------------------------------------------------------


def by_ledger(spends: Iterable[Spend]) -> dict[tuple[int, dt.date], tuple[Decimal, Decimal]]:
    """Group settlements by (project, day of the reservation): (released, spent)."""
    totals: dict[tuple[int, dt.date], tuple[Decimal, Decimal]] = {}
    for s in spends:
        key = (s.project_id, today(s.started_at))
        released, spent = totals.get(key, (ZERO, ZERO))
        totals[key] = (released + s.reserved, spent + s.cost)
    return dict(sorted(totals.items()))


def settle(spends: Sequence[Spend], *, using: str | None = None) -> None:
    """Turn reservations into what the attempts cost; call in the record's transaction.

    On PostgreSQL the worker's record statement does this itself
    (``transitions.batch.record``); this is the ORM's way, and the reaper's.
    """
    for (project_id, day), (released, spent) in by_ledger(spends).items():
        BudgetLedger.objects.using(using).filter(project_id=project_id, day=day).update(
            reserved=Greatest(F("reserved") - released, Value(ZERO)),
            spent=F("spent") + spent,
            updated_at=timezone.now(),
        )
    by_cost: dict[Decimal, list[int]] = {}
    for s in spends:
        by_cost.setdefault(s.cost, []).append(s.run_id)
    for cost, run_ids in by_cost.items():
        JobRun.objects.using(using).filter(pk__in=run_ids).update(
            reserved_cost=None, actual_cost=Coalesce(F("actual_cost"), Value(ZERO)) + cost
        )
    check_soft_limits(spends, using=using)


def check_soft_limits(spends: Sequence[Spend], *, using: str | None = None) -> None:
    """After settling: a project that spent more than it reserved may cross its soft limit."""
    for (project_id, day), (released, spent) in by_ledger(spends).items():
        if spent > released:
            with transaction.atomic(using=alias(using)):
                _announce_on_commit(_check_soft_limit(project_id, day, using), using)


def _check_soft_limit(project_id: int, day: dt.date, using: str) -> list[BudgetLedger]:
    ledger = (
        BudgetLedger.objects.using(using)
        .select_for_update(of=("self",))
        .select_related("project")
        .get(project_id=project_id, day=day)
    )
    if not _crosses_soft_limit(ledger):
        return []
    ledger.soft_warning_sent_at = timezone.now()
    ledger.save(update_fields=["soft_warning_sent_at"], using=using)
    return [ledger]


def _crosses_soft_limit(ledger: BudgetLedger) -> bool:
    project = ledger.project
    threshold = project.daily_budget * Decimal(str(project.soft_limit_ratio))
    return ledger.soft_warning_sent_at is None and ledger.reserved + ledger.spent >= threshold


def _announce_on_commit(ledgers: list[BudgetLedger], using: str) -> None:
    if ledgers:
        transaction.on_commit(lambda: _announce(ledgers), using=alias(using))


def _announce(ledgers: Iterable[BudgetLedger]) -> None:
    from django_strait import signals

    for ledger in ledgers:
        # The whole row: the claim's copy holds only what the reservation needed.
        project = Project.objects.get(pk=ledger.project_id)
        committed = ledger.reserved + ledger.spent
        logger.warning(
            "project %s has committed %s of its daily budget of %s on %s (soft limit %.0f%%)",
            project.name,
            _amount(committed),
            _amount(project.daily_budget),
            ledger.day,
            project.soft_limit_ratio * 100,
            extra={"project": project.name, "budget_day": str(ledger.day)},
        )
        signals.send_budget_soft_limit(project, ledger)


# -- a raised budget -----------------------------------------------------------------


def release_waiting(project: Project, *, using: str | None = None) -> int:
    """Make the runs waiting for ``project``'s budget due now (after its budget was raised).

    Runs that still do not fit are held again at their next claim.
    """
    return (
        JobRun.objects.using(using)
        .filter(
            status=RunStatus.QUEUED,
            error_type=BUDGET_ERROR,
            job__project=project,
            available_at__gt=timezone.now(),
        )
        .update(available_at=timezone.now())
    )
