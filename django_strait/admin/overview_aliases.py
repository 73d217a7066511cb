"""The overview over several databases: each alias read through its own reader, then summed.

Each alias of ``STRAIT["DATABASES"]`` is read as one database's overview is
(:func:`django_strait.admin.overview.read_overview`), through its own
:func:`django_strait.database.reading` (its replica, if ``STRAIT["READ_DATABASE"]``
names one). Counts and per-minute series are summed; the queues, the busiest jobs,
the dead letters by job and the workers are those of every alias; endpoint health
is read once, on the control database (where it lives). Percentiles cannot be
summed: the latency chart draws each alias's p50 and p95. A table says, per
database, where it was read, what is queued, executing and dead, and what finished.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, fields, replace

from django_strait import database
from django_strait.admin import overview, series
from django_strait.admin.charts import STATUS_COLOURS, Column
from django_strait.database import Reading
from django_strait.models import EndpointHealth, JobRun, Project
from django_strait.rules.states import RunStatus
from django_strait.storage.gauges import merged_by_queue


@dataclass(frozen=True, slots=True)
class DatabaseRow:
    """One alias's share of the overview."""

    alias: str
    reading: Reading
    queued: int
    due: int
    executing: int
    dead_letters: int
    finished_in_window: int
    workers_alive: int


def read_overviews(now: dt.datetime) -> tuple[overview.Overview, tuple[DatabaseRow, ...]]:
    """The overview summed over every alias, and each alias's row."""
    readings = [database.reading(name) for name in database.aliases()]
    parts = [overview.read_overview(now, r.alias, shared=False) for r in readings]
    control = database.reading(database.control_alias())
    rows = tuple(
        _row(name, r, part)
        for name, r, part in zip(database.aliases(), readings, parts, strict=True)
    )
    summed = _summed(parts, database.aliases())
    shared = replace(
        summed,
        endpoints=overview.read_endpoints(now, control.alias),
        endpoint_count=EndpointHealth.objects.using(control.alias).count(),
        budgets=overview.read_budgets(now, control.alias),
        project_count=Project.objects.using(control.alias).count(),
    )
    return shared, rows


def _row(name: str, reading: Reading, part: overview.Overview) -> DatabaseRow:
    executing = JobRun.objects.using(reading.alias).filter(status=RunStatus.EXECUTING).count()
    return DatabaseRow(
        alias=name,
        reading=reading,
        queued=sum(q.depth for q in part.queues),
        due=sum(q.due for q in part.queues),
        executing=executing,
        dead_letters=sum(n for _, n in part.dead_letters),
        finished_in_window=part.finished_in_window,
        workers_alive=part.workers_alive,
    )


def _summed(parts: list[overview.Overview], names: tuple[str, ...]) -> overview.Overview:
    first = parts[0]
    columns = tuple(
        Column(column.label, _added(p.throughput[i].counts for p in parts))
        for i, column in enumerate(first.throughput)
    )
    seen = {status for c in columns for status in c.counts}
    outcomes = [s for s in STATUS_COLOURS if s in seen] + sorted(seen - set(STATUS_COLOURS))
    dead = _added(dict(p.dead_letters) for p in parts)
    lag = _laggiest_per_minute(p.lag for p in parts)
    laggiest = sorted(lag, key=lambda q: (-max((v for v in lag[q] if v is not None), default=0), q))
    return replace(
        first,
        throughput=columns,
        outcomes=tuple(outcomes),
        counts=series.RunCounts(
            *(
                _zipped_sum(getattr(p.counts, f.name) for p in parts)
                for f in fields(series.RunCounts)
            )
        ),
        latency=series.slowest([p.latency for p in parts]),
        latencies=tuple(zip(names, (p.latency for p in parts), strict=True)),
        lag={q: lag[q] for q in laggiest[:5]},
        busy_jobs=tuple(
            sorted((j for p in parts for j in p.busy_jobs), key=lambda j: (-j[2], j[1]))[
                : overview.MOST_SHOWN
            ]
        ),
        queues=merged_by_queue(g for p in parts for g in p.queues),
        dead_letters=tuple(sorted(dead.items(), key=lambda r: (-r[1], r[0]))),
        workers=_one_per_process(w for p in parts for w in p.workers)[:50],
        workers_alive=len({w.worker_id for p in parts for w in p.workers}),
    )


def _laggiest_per_minute(parts) -> dict[str, list[float | None]]:
    """Each queue's lag per minute, the larger of its aliases' where it lives on several."""
    lag: dict[str, list[float | None]] = {}
    for queue, values in ((q, v) for p in parts for q, v in p.items()):
        seen = lag.get(queue)
        lag[queue] = (
            list(values)
            if seen is None
            else [
                max((x for x in pair if x is not None), default=None)
                for pair in zip(seen, values, strict=True)
            ]
        )
    return lag


def _one_per_process(workers) -> tuple:
    """A process serving several aliases has a row on each: it is one worker (the
    first alias's row shows it)."""
    seen: dict[str, object] = {}
    for worker in workers:
        seen.setdefault(worker.worker_id, worker)
    return tuple(seen.values())


def _added(counts) -> dict[str, int]:
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)
    return dict(total)


def _zipped_sum(rows) -> tuple[int, ...]:
    return tuple(sum(values) for values in zip(*rows, strict=True))
