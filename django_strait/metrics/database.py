"""Gauges read from the database at scrape time, each from a partial index.

A scrape must not cost more as history grows, so nothing here scans finished
runs: queued runs are counted on the claim indexes (``strait_run_claim_*``),
runs a worker holds on ``strait_run_active``, dead letters on
``strait_run_dead_letters``. The table's total is PostgreSQL's planner estimate
(``pg_class.reltuples``). Finished runs are counted by the workers instead
(``strait_worker_runs_finished_total``), as they happen.

With several aliases (``STRAIT["DATABASES"]``), each alias is read through its
own reader (its replica, if ``STRAIT["READ_DATABASE"]`` names one) and the run
gauges are summed per label (queue, job and status, workflow, webhook status):
no label is added, so one alias's page is what it always was. Worker processes
are counted once each (a process serving several aliases registers on each),
and circuits, endpoint health and budgets are read once, on the control database.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from django_strait import database
from django_strait.duties.registry import alive_since
from django_strait.models import (
    BudgetLedger,
    CircuitState,
    EndpointCircuit,
    EndpointHealth,
    Job,
    JobRun,
    Project,
    WebhookDelivery,
    WorkerProcess,
    Workflow,
    WorkflowRun,
    WorkflowRunStatus,
)
from django_strait.rules.states import IN_FLIGHT, RunStatus
from django_strait.storage import backend
from django_strait.storage import webhooks as outbox
from django_strait.storage.gauges import QueueGauge, merged_by_queue, queue_gauges


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape read from the database."""

    queues: tuple[QueueGauge, ...]
    #: (job, status) -> runs a worker holds.
    in_flight: dict[tuple[str, str], int]
    #: job -> runs in the dead-letter queue.
    dead_letters: dict[str, int]
    workers_alive: int
    workers_in_flight: int
    #: Rows in the run table (an estimate on PostgreSQL); None when unknown.
    runs_estimate: int | None
    #: Protection layer: circuits by state, endpoint -> (score, level), today's budgets.
    circuits: dict[str, int] = field(default_factory=dict)
    health: dict[str, tuple[float, str]] = field(default_factory=dict)
    budgets: tuple[BudgetGauge, ...] = ()
    #: workflow -> its running workflow runs.
    workflows_running: dict[str, int] = field(default_factory=dict)
    #: Completion webhooks: deliveries by status (pending, failed; delivered are not
    #: counted), those due now, and how late the oldest due one is in seconds.
    webhooks: dict[str, int] = field(default_factory=dict)
    webhooks_due: int = 0
    webhook_lag: float = 0.0
    #: The ids of the alive workers (to count a process serving several aliases once).
    alive_workers: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class BudgetGauge:
    """One project's budget day."""

    project: str
    daily_budget: float
    spent: float
    reserved: float
    soft_limit_reached: bool


def read_snapshot(
    using: str, now: dt.datetime, stale_after: float, *, shared: bool = True
) -> Snapshot:
    """Read every database gauge (a handful of index-backed queries).

    ``shared=False`` leaves out the fleet's protection state (circuits, health,
    budgets): several aliases read it once, on the control database.
    """
    jobs = dict(Job.objects.using(using).values_list("name", "queue"))
    workers = _workers(using, alive_since(now, stale_after))
    protection = _protection(database.control_reads(using), now) if shared else {}
    return Snapshot(
        queues=queue_gauges(using, now, set(jobs.values())),
        in_flight=_in_flight(using, jobs),
        dead_letters=_dead_letters(using, jobs),
        workers_alive=len(workers["ids"]),
        workers_in_flight=workers["in_flight"],
        runs_estimate=estimate_runs(using),
        workflows_running=_workflows_running(using),
        alive_workers=workers["ids"],
        **protection,
        **_webhooks(using, now),
    )


def _protection(using: str, now: dt.datetime) -> dict[str, Any]:
    return {
        "circuits": _circuits(using),
        "health": _health(using),
        "budgets": _budgets(using, now),
    }


def read_snapshots(
    readers: Sequence[str], now: dt.datetime, stale_after: float, *, control: str
) -> Snapshot:
    """The gauges of every alias (each read on ``readers``' alias), summed per label; the
    protection state read once on ``control``."""
    parts = [read_snapshot(using, now, stale_after, shared=False) for using in readers]
    alive = frozenset().union(*(part.alive_workers for part in parts))
    estimates = [part.runs_estimate for part in parts if part.runs_estimate is not None]
    return replace(
        parts[0],
        queues=merged_by_queue(g for part in parts for g in part.queues),
        in_flight=_summed(part.in_flight for part in parts),
        dead_letters=_summed(part.dead_letters for part in parts),
        workers_alive=len(alive),
        workers_in_flight=sum(part.workers_in_flight for part in parts),
        runs_estimate=sum(estimates) if estimates else None,
        workflows_running=_summed(part.workflows_running for part in parts),
        webhooks=_summed(part.webhooks for part in parts),
        webhooks_due=sum(part.webhooks_due for part in parts),
        webhook_lag=max(part.webhook_lag for part in parts),
        alive_workers=alive,
        **_protection(control, now),
    )


def _summed(counts) -> dict:
    total: Counter = Counter()
    for found in counts:
        total.update(found)
    return dict(total)


def _webhooks(using: str, now: dt.datetime) -> dict[str, Any]:
    """Undelivered webhooks by status, and the due ones' count and lag (partial index)."""
    rows = WebhookDelivery.objects.using(using).filter(status__in=["pending", "failed"])
    by_status = dict(rows.order_by().values_list("status").annotate(n=Count("id")))
    due, lag = outbox.lag(using, now)
    return {"webhooks": by_status, "webhooks_due": due, "webhook_lag": lag}


def _workflows_running(using: str) -> dict[str, int]:
    """Running workflow runs by workflow: the running ones only (``strait_wfrun_running``)."""
    counts = dict.fromkeys(Workflow.objects.using(using).values_list("name", flat=True), 0)
    rows = (
        WorkflowRun.objects.using(using)
        .filter(status=WorkflowRunStatus.RUNNING)
        .values_list("workflow__name")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts.update(dict(rows))
    return counts


def _circuits(using: str) -> dict[str, int]:
    counts = dict.fromkeys(CircuitState.values, 0)
    rows = EndpointCircuit.objects.using(using).values_list("state").annotate(n=Count("id"))
    counts.update(dict(rows.order_by()))
    return counts


def _health(using: str) -> dict[str, tuple[float, str]]:
    rows = EndpointHealth.objects.using(using).values_list("endpoint_url", "score", "level")
    return {url: (score, level) for url, score, level in rows}


def _budgets(using: str, now: dt.datetime) -> tuple[BudgetGauge, ...]:
    day = timezone.localdate(now)
    ledgers = {row.project_id: row for row in BudgetLedger.objects.using(using).filter(day=day)}
    gauges = []
    for project in Project.objects.using(using).order_by("name"):
        ledger = ledgers.get(project.pk)
        gauges.append(
            BudgetGauge(
                project.name,
                float(project.daily_budget),
                float(ledger.spent) if ledger else 0.0,
                float(ledger.reserved) if ledger else 0.0,
                bool(ledger and ledger.soft_warning_sent_at),
            )
        )
    return tuple(gauges)


def in_flight_by_job(using: str):
    """Runs a worker holds, counted by job and status on ``strait_run_active``."""
    return (
        JobRun.objects.using(using)
        .filter(status__in=IN_FLIGHT)
        .values_list("job__name", "status")
        .annotate(n=Count("id"))
        .order_by()
    )


def dead_letters_by_job(using: str):
    """Dead letters counted by job on ``strait_run_dead_letters``."""
    return (
        JobRun.objects.using(using)
        .filter(status=RunStatus.DEAD_LETTER)
        .values_list("job__name")
        .annotate(n=Count("id"))
        .order_by()
    )


def _in_flight(using: str, jobs: dict[str, str]) -> dict[tuple[str, str], int]:
    counts = {(job, status): 0 for job in jobs for status in sorted(IN_FLIGHT)}
    counts.update({(job, status): n for job, status, n in in_flight_by_job(using)})
    return counts


def _dead_letters(using: str, jobs: dict[str, str]) -> dict[str, int]:
    counts = dict.fromkeys(jobs, 0)
    counts.update(dict(dead_letters_by_job(using)))
    return counts


def _workers(using: str, since: dt.datetime) -> dict[str, Any]:
    """The alive workers' ids and the runs they said they held."""
    rows = WorkerProcess.objects.using(using).filter(last_seen_at__gte=since)
    found = list(rows.values_list("worker_id", "in_flight"))
    return {
        "ids": frozenset(worker for worker, _ in found),
        "in_flight": sum(n or 0 for _, n in found),
    }


def estimate_runs(using: str) -> int | None:
    """Return the run table's row count: the planner's estimate where there is one, else exact."""
    storage = backend(using)
    if storage.row_estimates:
        return storage.table_estimate(JobRun)  # None: never analyzed, so not known yet
    return JobRun.objects.using(using).count()


class DatabaseCollector(Collector):
    """A Prometheus collector that reads the database gauges on each scrape.

    ``using``: the one alias to read; None reads every alias of ``STRAIT["DATABASES"]``
    (summed, with several).
    """

    def __init__(self, using: str | None, stale_after: float) -> None:
        self.using = using
        self.stale_after = stale_after

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the gauges of one fresh snapshot, read off the replica when there is one."""
        now = timezone.now()
        if self.using is not None or not database.placed():
            where = database.reading(self.using)
            yield from families(read_snapshot(where.alias, now, self.stale_after))
            yield from _replica_families([where])
            return
        readings = {name: database.reading(name) for name in database.aliases()}
        control = readings.get(database.control_alias()) or database.reading(
            database.control_alias()
        )
        readers = [where.alias for where in readings.values()]
        yield from families(read_snapshots(readers, now, self.stale_after, control=control.alias))
        yield from _replica_families([*readings.values(), control])


def _replica_families(readings: Sequence[database.Reading]) -> Iterator[GaugeMetricFamily]:
    """Each replica read: whether it answered, and how far behind (none: no family)."""
    seen = {where.replica: where for where in readings if where.replica}
    if not seen:
        return
    up = GaugeMetricFamily(
        "strait_read_replica_up",
        "1 when the gauges were read off the read replica, 0 when it did not answer "
        "and they were read from the primary.",
        labels=["replica"],
    )
    lag = GaugeMetricFamily(
        "strait_read_replica_lag_seconds",
        "How far the read replica's replay was behind its primary at this scrape.",
        labels=["replica"],
    )
    for replica, where in seen.items():
        up.add_metric([replica], 1 if where.from_replica else 0)
        if where.lag_seconds is not None:
            lag.add_metric([replica], where.lag_seconds)
    yield up
    if lag.samples:
        yield lag


def families(snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    """Turn a snapshot into Prometheus metric families."""
    depth = GaugeMetricFamily(
        "strait_queue_depth", "Queued runs, due or not, by queue.", labels=["queue"]
    )
    due = GaugeMetricFamily("strait_queue_due", "Queued runs due now, by queue.", labels=["queue"])
    lag = GaugeMetricFamily(
        "strait_queue_lag_seconds",
        "How long the oldest due queued run has been due, by queue.",
        labels=["queue"],
    )
    for g in snap.queues:
        depth.add_metric([g.queue], g.depth)
        due.add_metric([g.queue], g.due)
        lag.add_metric([g.queue], g.lag_seconds)
    yield from (depth, due, lag)
    yield from _job_families(snap)
    yield from _protection_families(snap)
    running = GaugeMetricFamily(
        "strait_workflow_runs_running", "Workflow runs not finished yet, by workflow.",
        labels=["workflow"],
    )  # fmt: skip
    for name, n in sorted(snap.workflows_running.items()):
        running.add_metric([name], n)
    yield running
    yield from _webhook_families(snap)
    yield GaugeMetricFamily(
        "strait_workers_alive",
        "Worker processes seen within two heartbeat rounds (2 x STALE_AFTER / 5).",
        value=snap.workers_alive,
    )
    yield GaugeMetricFamily(
        "strait_workers_in_flight",
        "Runs the alive workers said they held at their last report.",
        value=snap.workers_in_flight,
    )
    if snap.runs_estimate is not None:
        yield GaugeMetricFamily(
            "strait_runs_estimate",
            "Rows in the run table (PostgreSQL's planner estimate; exact on SQLite).",
            value=snap.runs_estimate,
        )


def _job_families(snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    in_flight = GaugeMetricFamily(
        "strait_runs_in_flight",
        "Runs a worker holds (dequeued or executing), by job and status.",
        labels=["job", "status"],
    )
    for (job, status), n in sorted(snap.in_flight.items()):
        in_flight.add_metric([job, status], n)
    dead = GaugeMetricFamily(
        "strait_dead_letters", "Runs in the dead-letter queue, by job.", labels=["job"]
    )
    for job, n in sorted(snap.dead_letters.items()):
        dead.add_metric([job], n)
    yield from (in_flight, dead)


def _protection_families(snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    circuits = GaugeMetricFamily(
        "strait_circuits", "Endpoint circuits, by state.", labels=["state"]
    )
    for state, n in sorted(snap.circuits.items()):
        circuits.add_metric([state], n)
    score = GaugeMetricFamily(
        "strait_endpoint_health_score",
        "Endpoint health score (0-100), by endpoint and level.",
        labels=["endpoint", "level"],
    )
    for url, (value, level) in sorted(snap.health.items()):
        score.add_metric([url, level], value)
    yield from (circuits, score)
    budget = GaugeMetricFamily(
        "strait_budget_daily", "Each project's daily budget.", labels=["project"]
    )
    spent = GaugeMetricFamily(
        "strait_budget_spent", "What each project spent today.", labels=["project"]
    )
    reserved = GaugeMetricFamily(
        "strait_budget_reserved",
        "What each project's runs in flight have reserved today.",
        labels=["project"],
    )
    soft = GaugeMetricFamily(
        "strait_budget_soft_limit_reached",
        "1 once a project's committed budget reached its soft limit today.",
        labels=["project"],
    )
    for g in snap.budgets:
        budget.add_metric([g.project], g.daily_budget)
        spent.add_metric([g.project], g.spent)
        reserved.add_metric([g.project], g.reserved)
        soft.add_metric([g.project], 1.0 if g.soft_limit_reached else 0.0)
    yield from (budget, spent, reserved, soft)


def _webhook_families(snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    undelivered = GaugeMetricFamily(
        "strait_webhook_deliveries", "Webhook deliveries not delivered, by status (pending, failed).",
        labels=["status"],
    )  # fmt: skip
    for status in ("pending", "failed"):
        undelivered.add_metric([status], snap.webhooks.get(status, 0))
    yield undelivered
    yield GaugeMetricFamily(
        "strait_webhook_due", "Webhook deliveries due now, not sent yet.", value=snap.webhooks_due
    )
    yield GaugeMetricFamily(
        "strait_webhook_lag_seconds",
        "How long the oldest due webhook delivery has waited.",
        value=snap.webhook_lag,
    )
