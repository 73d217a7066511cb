"""The protection steps with the ORM: limits, budgets, circuits and endpoint health.

The rules are the pure functions of ``resilience``; here they are applied to
rows, with the rows that decide locked for the claim's transaction where the
database can lock rows (on SQLite the claim already holds the only write lock).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.db.models import Min as MinOf

from django_strait.models import (
    BudgetLedger,
    EndpointCircuit,
    EndpointHealth,
    Job,
    JobRateAdmission,
    JobRun,
)
from django_strait.rules.resilience import budgets, limits
from django_strait.rules.resilience.health import Health, HealthLevel, concurrency_share
from django_strait.rules.resilience.policy import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    Change,
    Circuit,
)
from django_strait.rules.states import RunStatus
from django_strait.storage.circuit_rows import (
    as_circuit,
    readable_or_fresh,
    save_circuit,
)
from django_strait.storage.parts import settle_ledgers, settle_runs
from django_strait.storage.rows import LATEST, SetAside, check_finite, read

_ACTIVE = (RunStatus.DEQUEUED, RunStatus.EXECUTING)


# -- limits -------------------------------------------------------------------------


def group_by_job(
    pending: Sequence[limits.Pending],
) -> tuple[dict[int, list[int]], dict[int, float]]:
    """Return each job's pending run ids in claim order, and its health share."""
    by_job: dict[int, list[int]] = {}
    shares: dict[int, float] = {}
    for run in pending:
        by_job.setdefault(run.job_id, []).append(run.run_id)
        shares[run.job_id] = concurrency_share(run.health_score)
    return by_job, shares


def enforce_limits(
    alias: str, pending: Sequence[limits.Pending], now: dt.datetime
) -> list[limits.Held]:
    """Decide each limited job's share of a claim under its row lock; return the runs held."""
    by_job, shares = group_by_job(pending)
    scores = {run.job_id: run.health_score for run in pending}
    rows = (
        Job.objects.using(alias)
        .select_for_update(no_key=True)
        .filter(pk__in=sorted(by_job))
        .order_by("pk")
        .values_list("pk", "max_concurrency", "rate_limit_max", "rate_limit_window_secs")
    )
    decisions = []
    for job_id, mc, rmax, secs in rows:
        n = len(by_job[job_id])
        cap = limits.concurrency_cap(mc, shares[job_id])
        others = _active(alias, job_id) - n if cap is not None else 0
        admitted = limits.concurrency_admits(cap, others, n)
        granted, frees_at = admitted, None
        if rmax is not None and secs is not None:
            granted, frees_at = _rate(alias, job_id, rmax, secs, admitted, now)
        decisions.append(
            limits.Decision(
                job_id, mc, cap, others, admitted, rmax, secs, granted, frees_at, scores[job_id]
            )
        )
    return limits.holds(decisions, by_job, now)


def _active(alias: str, job_id: int) -> int:
    """Count the job's dequeued and executing runs (this claim's included)."""
    runs = JobRun.objects.using(alias).filter(job_id=job_id, status__in=_ACTIVE)
    return runs.aggregate(n=Count("id"))["n"]


def _rate(
    alias: str, job_id: int, rmax: int, secs: float, admitted: int, now: dt.datetime
) -> tuple[int, dt.datetime]:
    """Take up to ``admitted`` admissions from the job's sliding log; return (granted, frees_at)."""
    log = JobRateAdmission.objects.using(alias).filter(job_id=job_id)
    # An admission no reader can hold ('infinity', by hand) is no admission: it goes too.
    log.filter(
        Q(admitted_at__lte=limits.forget_before(now, secs)) | Q(admitted_at__gt=LATEST)
    ).delete()
    in_window = log.filter(admitted_at__gt=limits.window_start(now, secs))
    window = in_window.aggregate(used=Sum("count"), oldest=MinOf("admitted_at"))
    granted = limits.rate_grants(rmax, window["used"] or 0, admitted)
    if granted:
        log.create(job_id=job_id, admitted_at=now, count=granted)
    frees_at = (window["oldest"] or now) + dt.timedelta(seconds=secs)
    return granted, frees_at


# -- budgets ------------------------------------------------------------------------


def lock_ledgers(alias: str, project_ids: list[int], day: dt.date) -> dict[int, budgets.LedgerDay]:
    """Create the day's ledger rows if missing, lock them, and read them with their budgets."""
    ledgers = BudgetLedger.objects.using(alias)
    ledgers.bulk_create(
        [BudgetLedger(project_id=pid, day=day) for pid in project_ids], ignore_conflicts=True
    )
    rows = (
        ledgers.select_for_update(of=("self",))
        .select_related("project")
        .filter(project_id__in=project_ids, day=day)
        .order_by("project_id")
    )
    found = read(rows, log=False)
    if found.unreadable:  # a project's runs wait (worker.claim_failed), saying which row
        raise SetAside(found.unreadable)
    return {row.project_id: _ledger_day(row) for row in found.rows}


def _ledger_day(row: BudgetLedger) -> budgets.LedgerDay:
    project = row.project
    check_finite(
        project._meta.db_table, project.pk, daily_budget=project.daily_budget,
        soft_limit_ratio=project.soft_limit_ratio,
    )  # fmt: skip
    return budgets.LedgerDay(
        id=row.pk,
        project_id=row.project_id,
        project_name=project.name,
        daily_budget=project.daily_budget,
        soft_limit_ratio=project.soft_limit_ratio,
        day=row.day,
        reserved=row.reserved,
        spent=row.spent,
        soft_warning_sent_at=row.soft_warning_sent_at,
    )


def reserve_on_ledgers(
    alias: str, pending: Sequence[budgets.Pending], now: dt.datetime
) -> tuple[budgets.Allocation, dict]:
    """Allocate ``pending`` on their ledger days (locked) and add what each reserves;
    return the allocation and the ledgers by project. The caller notes it on the runs."""
    ledgers = lock_ledgers(alias, sorted({p.project_id for p in pending}), budgets.today(now))
    out = budgets.allocate(pending, ledgers, now=now)
    warned = {ledger.project_id for ledger in out.crossed}
    for project_id, amount in out.added.items():
        changes = {"reserved": F("reserved") + amount, "updated_at": now}
        if project_id in warned:
            changes["soft_warning_sent_at"] = now
        BudgetLedger.objects.using(alias).filter(pk=ledgers[project_id].id).update(**changes)
    return out, ledgers


def reserve_budgets(
    alias: str, pending: Sequence[budgets.Pending], now: dt.datetime
) -> budgets.Allocation:
    """Reserve each run's cost in claim order with the ledger rows locked."""
    out, _ledgers = reserve_on_ledgers(alias, pending, now)
    by_cost: dict[Decimal, list[int]] = {}
    for run_id, cost in out.reserved.items():
        by_cost.setdefault(cost, []).append(run_id)
    for cost, run_ids in by_cost.items():
        JobRun.objects.using(alias).filter(pk__in=run_ids).update(reserved_cost=cost)
    return out


def settle_budgets(alias: str, spends: list[budgets.Spend]) -> None:
    """Turn reservations into what the attempts cost, on ledgers and runs (the reaper's way)."""
    settle_ledgers(spends, alias)
    settle_runs(spends, alias)


def crossed_soft_limits(alias: str, spends: list[budgets.Spend], now: dt.datetime) -> list:
    """After settling: return the ledger days whose spending crossed the soft limit (marked once)."""
    crossed = []
    for (project_id, day), (released, spent) in budgets.by_ledger(spends).items():
        if spent <= released:
            continue  # it spent no more than it had reserved: nothing new is committed
        with transaction.atomic(using=alias):
            ledger = lock_ledgers(alias, [project_id], day)[project_id]
            if ledger.crosses_soft_limit:
                BudgetLedger.objects.using(alias).filter(pk=ledger.id).update(
                    soft_warning_sent_at=now
                )
                crossed.append(ledger)
    return crossed


def release_waiting(alias: str, project_id: int, now: dt.datetime) -> int:
    """Make the runs waiting for a project's budget due now (its budget was raised)."""
    return (
        JobRun.objects.using(alias)
        .filter(
            status=RunStatus.QUEUED,
            error_type=budgets.BUDGET_ERROR,
            job__project_id=project_id,
            available_at__gt=now,
        )
        .update(available_at=now)
    )


# -- circuits -----------------------------------------------------------------------


def load_active_circuits(alias: str) -> dict[str, Circuit]:
    """Return every circuit that is not closed or has failures counted, by URL.

    A row that cannot be read is left out (its endpoint counts as closed) and logged;
    the next result of its endpoint rewrites it (``circuit_rows.apply_circuit_results``).
    """
    rows = EndpointCircuit.objects.using(alias).filter(~Q(state=CLOSED) | Q(failures__gt=0))
    return {row.endpoint_url: as_circuit(row) for row in read(rows).rows}


def win_circuit_probe(
    alias: str, url: str, now: dt.datetime, cooldown: dt.timedelta, lost_before: dt.datetime
) -> bool:
    """Take the single half-open probe of ``url``: one conditional UPDATE, one winner."""
    cooled = Q(state=OPEN, opened_at__lte=now - cooldown)
    lost = Q(state=HALF_OPEN, probe_started_at__lte=lost_before) | Q(
        state=HALF_OPEN, probe_started_at__isnull=True
    )
    won = (
        EndpointCircuit.objects.using(alias)
        .filter(cooled | lost, endpoint_url=url)
        .update(state=HALF_OPEN, probe_started_at=now, updated_at=now)
    )
    return won == 1


def reset_circuits(alias: str, url: str | None, now: dt.datetime) -> tuple[int, list[Change]]:
    """Close ``url``'s circuit (every circuit when None); return how many changed, and how."""
    rows = EndpointCircuit.objects.using(alias)
    if url is not None:
        rows = rows.filter(endpoint_url=url)
    with transaction.atomic(using=alias):
        # A person resets a circuit that cannot be read, too: that is how it is fixed.
        found = readable_or_fresh(
            rows.select_for_update()
            .filter(~Q(state=CLOSED) | Q(failures__gt=0))
            .order_by("endpoint_url")
        )
        for row in found:
            save_circuit(alias, row.pk, Circuit(row.endpoint_url), now)
    changes = [Change(Circuit(row.endpoint_url), row.state) for row in found if row.state != CLOSED]
    return len(found), changes


# -- endpoint health ----------------------------------------------------------------


def load_unwell(alias: str) -> dict[str, Health]:
    """Return the endpoints that are degraded or unhealthy (usually none)."""
    rows = (
        EndpointHealth.objects.using(alias)
        .exclude(level=HealthLevel.HEALTHY)
        .only("endpoint_url", "score", "level", "probe_started_at")
    )
    # A row that cannot be read (a NaN score, a probe at 'infinity') is left out: healthy.
    return {
        row.endpoint_url: Health(row.endpoint_url, row.score, row.level, row.probe_started_at)
        for row in read(rows).rows
    }


def win_health_probe(alias: str, url: str, now: dt.datetime, cooldown: dt.timedelta) -> bool:
    """Take the one probe of an unhealthy endpoint for this cooldown; False if another did."""
    due = Q(probe_started_at__isnull=True) | Q(probe_started_at__lte=now - cooldown)
    return bool(
        EndpointHealth.objects.using(alias)
        .filter(due, endpoint_url=url, level=HealthLevel.UNHEALTHY)
        .update(probe_started_at=now)
    )
