"""Budgets (docs/resilience.md): reserve before dispatch, settle on the result, never over-commit.

The rules, as pure functions; the storage backends apply them with the ledger
rows locked (``storage.Storage.reserve_budgets``):

A job with a ``project`` reserves its ``estimated_cost`` from the project's
ledger row for today (``BudgetLedger``, one per project per day, in Django's
``TIME_ZONE``) inside the claim transaction, with the ledger rows locked until
it commits: ``reserved + spent + cost <= daily_budget`` is checked and the
reservation added under that lock, so workers on any number of hosts can never
commit more than the budget between them. A run that does not fit goes back to
queued until the next day begins, spending no attempt, with the reason on the
run (``error_type`` ``budget.exhausted``) and a short-circuited attempt row;
raising the project's budget lets those runs go at once.

When the attempt is recorded its reservation becomes what it cost: the
endpoint's ``Strait-Cost`` header, else the estimate (nothing for a call that
never reached the endpoint), and the rest is released. When a project's
committed amount (reserved + spent) first reaches ``soft_limit_ratio`` of its
budget on a day, ``budget_soft_limit`` is sent once, with a warning log.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

from django.utils import timezone

#: The error type of a run waiting for its project's budget.
BUDGET_ERROR = "budget.exhausted"

ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class Pending:
    """A claimed run of a job with a project: what it would reserve."""

    run_id: int
    project_id: int
    cost: Decimal
    #: The attempt the claim starts (what a reservation on the control database names).
    attempt: int = 0


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
    #: The attempt settled (what a reservation on the control database names).
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class Reservation:
    """A reservation on the control database for a run of another database."""

    run_id: int
    attempt: int
    project_id: int
    day: dt.date
    amount: Decimal


class Fate:
    """What became of a reserved attempt, as its run's database tells (``closing``)."""

    #: Still executing at that attempt: its record will settle it.
    RUNNING = "running"
    #: The attempt was made (its attempt row exists, or its run is gone): it is paid for.
    MADE = "made"
    #: Never started (its claim rolled back, or the run was put back unstarted).
    NEVER = "never"


def closing(
    reservations: Iterable[Reservation], fates: Mapping[tuple[int, int], str]
) -> list[Spend]:
    """The settlements that close stale reservations whose attempts are not running.

    An attempt that was made spends what it reserved (as a lost attempt does: the
    call may have been made); one that never started gives it back. A run whose
    fate is unknown here (locked by a claim in progress) is left for the next round.
    """
    out = []
    for r in reservations:
        fate = fates.get((r.run_id, r.attempt))
        if fate in (Fate.MADE, Fate.NEVER):
            cost = r.amount if fate == Fate.MADE else ZERO
            started = timezone.make_aware(dt.datetime.combine(r.day, dt.time(12)))
            out.append(Spend(r.run_id, r.project_id, started, r.amount, cost, r.attempt))
    return out


@dataclass(frozen=True, slots=True)
class LedgerDay:
    """One project's ledger row for one day, with what the rules need of its project."""

    id: int
    project_id: int
    project_name: str
    daily_budget: Decimal
    soft_limit_ratio: float
    day: dt.date
    reserved: Decimal = ZERO
    spent: Decimal = ZERO
    soft_warning_sent_at: dt.datetime | None = None

    @property
    def committed(self) -> Decimal:
        return self.reserved + self.spent

    @property
    def crosses_soft_limit(self) -> bool:
        """Whether the day's committed amount reached the soft limit and nobody was told."""
        threshold = self.daily_budget * Decimal(str(self.soft_limit_ratio))
        return self.soft_warning_sent_at is None and self.committed >= threshold


@dataclass(slots=True)
class Allocation:
    """What a claim reserves: per run, per project, the runs that wait, the limits crossed."""

    reserved: dict[int, Decimal] = field(default_factory=dict)
    held: list[Held] = field(default_factory=list)
    #: Project id -> the amount this claim adds to its ledger row.
    added: dict[int, Decimal] = field(default_factory=dict)
    #: The ledger rows (as they will be) whose soft limit this claim crosses.
    crossed: list[LedgerDay] = field(default_factory=list)


def today(now: dt.datetime | None = None) -> dt.date:
    """Return the budget day of ``now`` (Django's TIME_ZONE)."""
    return timezone.localdate(now or timezone.now())


def next_day_starts(day: dt.date) -> dt.datetime:
    """Return the first moment of the day after ``day`` (Django's TIME_ZONE)."""
    return timezone.make_aware(dt.datetime.combine(day + dt.timedelta(days=1), dt.time.min))


def allocate(
    pending: Sequence[Pending], ledgers: Mapping[int, LedgerDay], *, now: dt.datetime
) -> Allocation:
    """Reserve each run's cost in claim order while it fits its project's day."""
    out = Allocation()
    for p in pending:
        ledger = ledgers[p.project_id]
        committed = ledger.committed + out.added.get(p.project_id, ZERO)
        if committed + p.cost <= ledger.daily_budget:
            out.added[p.project_id] = out.added.get(p.project_id, ZERO) + p.cost
            out.reserved[p.run_id] = p.cost
        else:
            until = next_day_starts(ledger.day)
            out.held.append(Held(p.run_id, until, _reason(ledger, committed, p.cost)))
    for project_id, amount in out.added.items():
        after = replace(ledgers[project_id], reserved=ledgers[project_id].reserved + amount)
        if after.crosses_soft_limit:
            out.crossed.append(replace(after, soft_warning_sent_at=now))
    return out


def by_ledger(spends: Iterable[Spend]) -> dict[tuple[int, dt.date], tuple[Decimal, Decimal]]:
    """Group settlements by (project, day of the reservation): (released, spent)."""
    totals: dict[tuple[int, dt.date], tuple[Decimal, Decimal]] = {}
    for s in spends:
        key = (s.project_id, today(s.started_at))
        released, spent = totals.get(key, (ZERO, ZERO))
        totals[key] = (released + s.reserved, spent + s.cost)
    return dict(sorted(totals.items()))


def _reason(ledger: LedgerDay, committed: Decimal, cost: Decimal) -> str:
    return (
        f"project {ledger.project_name}'s daily budget of {amount(ledger.daily_budget)} is "
        f"committed for {ledger.day:%Y-%m-%d} ({amount(ledger.spent)} spent, "
        f"{amount(committed - ledger.spent)} reserved; this run needs {amount(cost)}); "
        "waiting until the next day or a raised budget; no attempt spent"
    )


def amount(value: Decimal) -> str:
    """A cost as people write it: no trailing zeros."""
    return f"{value.normalize():f}"
