"""The admin overview page: throughput, queues, dead letters, workers, health and budgets.

Every number comes from a rollup, a partial index or a small table, never from
a scan of run history, so the page costs the same with a thousand runs or a
million: throughput from ``RunRollup`` (per-minute counts the worker writes),
queue depth and lag from the claim indexes, dead letters from
``strait_run_dead_letters``, endpoint health from ``EndpointHealth`` (one row
per URL) and its history from ``HealthSample``, budgets from today's
``BudgetLedger`` rows.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from django_strait import database
from django_strait.admin import charts, endpoints, series
from django_strait.admin.budgets import budget_day, projects_today
from django_strait.admin.charts import STATUS_COLOURS, BudgetDay, Column, Series
from django_strait.conf import strait_settings
from django_strait.duties.registry import alive_since
from django_strait.metrics.database import dead_letters_by_job
from django_strait.models import EndpointHealth, Job, Project, RunRollup, WorkerProcess
from django_strait.storage.gauges import QueueGauge, queue_gauges
from django_strait.storage.rows import read, readable_instants

#: At most this many endpoints (the least healthy first) and projects are shown.
MOST_SHOWN = 20


@dataclass(frozen=True, slots=True)
class EndpointRow:
    """One endpoint's health on the overview."""

    endpoint_url: str
    score: float
    level: str
    #: The endpoint's circuit state, None when it has no circuit row.
    circuit: str | None
    #: Scores over the sparkline window, oldest first.
    history: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ProjectRow:
    """One project's budget today on the overview."""

    name: str
    today: BudgetDay


@dataclass(frozen=True, slots=True)
class Overview:
    """What the overview page shows, read in a handful of index-backed queries."""

    now: dt.datetime
    #: One column per minute of the window, oldest first.
    throughput: tuple[Column, ...]
    #: Statuses seen in the window, in legend order.
    outcomes: tuple[str, ...]
    queues: tuple[QueueGauge, ...]
    #: (job name, dead letters), most first.
    dead_letters: tuple[tuple[str, int], ...]
    workers: tuple[WorkerProcess, ...]
    workers_alive: int
    #: Per minute: attempts ended, runs finished; durations (p50, p95); lag of the laggiest queues.
    counts: series.RunCounts
    latency: series.Latency
    lag: dict[str, list[float | None]]
    #: Jobs with attempts in the window, busiest first (at most MOST_SHOWN): (id, name, attempts).
    busy_jobs: tuple[tuple[int, str, int], ...]
    #: The least healthy endpoints first (at most MOST_SHOWN), and how many there are.
    endpoints: tuple[EndpointRow, ...]
    endpoint_count: int
    #: Projects by name (at most MOST_SHOWN), and how many there are.
    budgets: tuple[ProjectRow, ...]
    project_count: int
    #: Several databases: each alias's latency, drawn as its own p50 and p95 lines.
    latencies: tuple[tuple[str, series.Latency], ...] = ()

    @property
    def finished_in_window(self) -> int:
        return sum(c.total for c in self.throughput)


def read_overview(
    now: dt.datetime | None = None, using: str | None = None, *, shared: bool = True
) -> Overview:
    """Read everything the overview page shows of ``using``.

    ``shared=False`` leaves out endpoint health and budgets (one alias of several:
    they are the fleet's, read once on the control database by ``overview_aliases``).
    """
    now = now or timezone.now()
    throughput, outcomes, counts = _throughput(now, using)
    control = database.control_reads(using)  # circuits, health, budgets: the fleet's
    minutes = series.minutes_of(now)
    since = alive_since(now, strait_settings.STALE_AFTER)
    alive = WorkerProcess.objects.using(using).filter(readable_instants("last_seen_at"))
    workers = tuple(read(alive.filter(last_seen_at__gte=since)[:50]).rows)
    return Overview(
        now=now,
        throughput=throughput,
        outcomes=outcomes,
        counts=counts,
        latency=series.latency(minutes, using),
        lag=series.queue_lag(minutes, using),
        busy_jobs=_busy_jobs(minutes, using),
        queues=_queues(now, using),
        dead_letters=tuple(sorted(dead_letters_by_job(using), key=lambda r: (-r[1], r[0]))),
        workers=workers,
        workers_alive=len(workers),
        endpoints=read_endpoints(now, control) if shared else (),
        endpoint_count=EndpointHealth.objects.using(control).count() if shared else 0,
        budgets=read_budgets(now, control) if shared else (),
        project_count=Project.objects.using(control).count() if shared else 0,
    )


def _throughput(now: dt.datetime, using: str) -> tuple[tuple[Column, ...], tuple[str, ...], Any]:
    minutes = series.minutes_of(now)
    counts = series.outcome_counts(minutes, using)
    seen = {status for by_status in counts.values() for status in by_status}
    # Known outcomes in a fixed order (so colours stack the same way), then any others.
    outcomes = [s for s in STATUS_COLOURS if s in seen] + sorted(seen - set(STATUS_COLOURS))
    local = timezone.localtime
    columns = tuple(Column(f"{local(m):%H:%M}", counts.get(m, {})) for m in minutes)
    return columns, tuple(outcomes), series.RunCounts.of(minutes, counts)


def _busy_jobs(minutes: list[dt.datetime], using: str) -> tuple[tuple[int, str, int], ...]:
    rows = (
        RunRollup.objects.using(using)
        .filter(readable_instants("minute"), minute__gte=minutes[0])
        .values_list("job_id", "job__name")
        .annotate(n=Sum("count"))
        .order_by("-n", "job__name")[:MOST_SHOWN]
    )
    return tuple(rows)


def _queues(now: dt.datetime, using: str) -> tuple[QueueGauge, ...]:
    known = set(Job.objects.using(using).values_list("queue", flat=True).distinct())
    return queue_gauges(using, now, known)


def read_endpoints(now: dt.datetime, using: str) -> tuple[EndpointRow, ...]:
    """The least healthy endpoints, with their circuits and last hour's scores."""
    rows = list(
        EndpointHealth.objects.using(using)
        .annotate(**endpoints.circuit_annotation())
        .order_by("score", "endpoint_url")
        .values_list("endpoint_url", "score", "level", endpoints.CIRCUIT_STATE)[:MOST_SHOWN]
    )
    history = endpoints.read_sparklines([row[0] for row in rows], now, using)
    return tuple(
        EndpointRow(url, score, level, circuit, tuple(history.get(url, ())))
        for url, score, level, circuit in rows
    )


def read_budgets(now: dt.datetime, using: str) -> tuple[ProjectRow, ...]:
    projects = projects_today(Project.objects.using(using).order_by("name"), now)[:MOST_SHOWN]
    # A project whose budget or ledger cannot be read is left out here (and logged);
    # the projects' list shows it, and what cannot be read.
    return tuple(ProjectRow(p.name, budget_day(p)) for p in read(projects).rows)


THROUGHPUT_COLOURS = ("#447e9b", "#2e7d32")
PERCENTILE_COLOURS = ("#1565c0", "#c62828")
QUEUE_COLOURS = ("#447e9b", "#ef6c00", "#6a1b9a", "#2e7d32", "#c62828")


def time_charts(data: Overview) -> dict[str, Any]:
    """The overview's charts over the last hour, each with its legend."""
    labels = [c.label for c in data.throughput]
    throughput = [
        Series("attempts ended", data.counts.attempts, THROUGHPUT_COLOURS[0]),
        Series("runs finished", data.counts.finished, THROUGHPUT_COLOURS[1]),
    ]
    outcomes = [
        Series(s, [c.counts.get(s, 0) for c in data.throughput], charts.colour(s))
        for s in data.outcomes
    ]
    latency = (
        [
            line
            for i, (name, lat) in enumerate(data.latencies)
            for line in percentile_series(lat, name, i)
        ]
        if data.latencies
        else percentile_series(data.latency)
    )
    lag = [
        Series(queue, values, QUEUE_COLOURS[i % len(QUEUE_COLOURS)])
        for i, (queue, values) in enumerate(data.lag.items())
    ]
    return {
        "throughput_chart": charts.time_chart(labels, throughput, unit="/min"),
        "throughput_legend": charts.series_legend(throughput),
        "outcomes_chart": charts.time_chart(labels, outcomes, stacked=True),
        "outcomes_legend": charts.series_legend(outcomes),
        "latency_chart": charts.time_chart(labels, latency, unit=" ms",
                                           empty="No attempt started in this window."),
        "latency_legend": charts.series_legend(latency),
        "lag_time_chart": charts.time_chart(labels, lag, unit=" s",
                                            empty="No queue samples yet (a worker takes one a minute)."),
        "lag_time_legend": charts.series_legend(lag),
    }  # fmt: skip


def percentile_series(latency: series.Latency, database: str = "", index: int = 0) -> list[Series]:
    """p50 and p95 of attempt durations per minute, as two lines (of ``database``, the
    ``index``-th alias, if named: each alias's own pair of colours)."""
    if not database:
        return [
            Series("p50", latency.p50, PERCENTILE_COLOURS[0]),
            Series("p95", latency.p95, PERCENTILE_COLOURS[1]),
        ]
    p50, p95 = (QUEUE_COLOURS[(2 * index + k) % len(QUEUE_COLOURS)] for k in (0, 1))
    return [
        Series(f"p50 {database}", latency.p50, p50),
        Series(f"p95 {database}", latency.p95, p95),
    ]
