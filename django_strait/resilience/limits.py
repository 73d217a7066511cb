"""Per-job concurrency and rate limits, decided inside the claim transaction (DESIGN §5).

Claims of a limited job are serialized by locking its ``Job`` row (``FOR NO
KEY UPDATE``: it excludes other claims but not the inserts of new runs, which
only take a key-share lock). Under that lock:

- concurrency counts the job's dequeued and executing runs on the partial
  index ``strait_run_active`` (active runs only, never history); while the
  job's endpoint is degraded the limit is scaled down with its health score
  (read in the same statement as the lock);
- the rate limit adds the runs it lets start to the job's current window row
  (``JobRateWindow``), capped at ``rate_limit_max``, in one upsert that also
  drops the job's older windows.

Runs over a limit go back to queued, spending no attempt: over the concurrency
limit for :data:`CONCURRENCY_WAIT`, over the rate limit until the window ends.
Jobs without limits cost no statement at all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connections
from django.db.models import Count, OuterRef, Subquery
from django.utils import timezone

from django_strait.models import EndpointHealth, Job, JobRateWindow, JobRun
from django_strait.resilience.health import effective_concurrency
from django_strait.states import RunStatus

#: How long a run over its job's concurrency limit waits before it is claimable again.
CONCURRENCY_WAIT = dt.timedelta(seconds=1)

_JOB_TABLE = Job._meta.db_table
_RUN_TABLE = JobRun._meta.db_table
_WINDOW_TABLE = JobRateWindow._meta.db_table
_HEALTH_TABLE = EndpointHealth._meta.db_table
_ACTIVE = (RunStatus.DEQUEUED.value, RunStatus.EXECUTING.value)


@dataclass(frozen=True, slots=True)
class Pending:
    """A claimed run of a limited job, in claim order."""

    run_id: int
    job_id: int


@dataclass(frozen=True, slots=True)
class Limits:
    """One job's limits as read under its row lock."""

    job_id: int
    max_concurrency: int | None
    rate_max: int | None
    rate_window_secs: float | None
    #: The health score of the job's endpoint (None: a Python job, or no results yet).
    health_score: float | None = None

    @property
    def concurrency(self) -> int | None:
        """The concurrency limit now: max_concurrency, scaled down while the endpoint is degraded."""
        if self.max_concurrency is None:
            return None
        return effective_concurrency(self.max_concurrency, self.health_score)

    @property
    def rate_limited(self) -> bool:
        return self.rate_max is not None and self.rate_window_secs is not None


@dataclass(frozen=True, slots=True)
class Window:
    """What the rate limit granted a job in the current window."""

    granted: int
    ends_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Held:
    """A run a limit sends back to queued: until when, and why."""

    run_id: int
    until: dt.datetime
    error_type: str
    reason: str


def is_limited(job: Job) -> bool:
    """Return whether claims of ``job`` need the limit check."""
    return job.max_concurrency is not None or job.rate_limit_max is not None


def enforce(pending: Sequence[Pending], *, using: str = "default") -> list[Held]:
    """Return the runs among ``pending`` that their job's limits hold back; call inside the claim.

    ``pending`` are runs this transaction has just claimed (still dequeued), of
    jobs whose cached definition has a limit; the limits themselves are read
    again under the job row lock, so a raised or removed limit applies at once.
    """
    if not pending:
        return []
    by_job: dict[int, list[int]] = {}
    for run in pending:
        by_job.setdefault(run.job_id, []).append(run.run_id)
    limits = _lock_jobs(sorted(by_job), using)
    held = _over_concurrency(by_job, limits, using)
    over = {h.run_id for h in held}
    admitted = {jid: [rid for rid in rids if rid not in over] for jid, rids in by_job.items()}
    return held + _over_rate(admitted, limits, using)


# -- locking -----------------------------------------------------------------------


def _lock_jobs(job_ids: list[int], using: str) -> dict[int, Limits]:
    # Locked in id order, so two workers claiming the same jobs never deadlock.
    # SQLite needs no lock: the claim's UPDATE already holds the database's write lock.
    if connections[using].vendor == "postgresql":
        sql = (
            f"SELECT j.id, j.max_concurrency, j.rate_limit_max, j.rate_limit_window_secs, h.score "
            f"FROM {_JOB_TABLE} AS j LEFT JOIN {_HEALTH_TABLE} AS h "
            f"ON j.endpoint_url <> '' AND h.endpoint_url = j.endpoint_url "
            f"WHERE j.id = ANY(%s) ORDER BY j.id FOR NO KEY UPDATE OF j"
        )
        with connections[using].cursor() as cursor:
            cursor.execute(sql, [job_ids])
            rows = cursor.fetchall()
    else:
        rows = (
            Job.objects.using(using)
            .filter(pk__in=job_ids)
            .annotate(
                health_score=Subquery(
                    EndpointHealth.objects.filter(endpoint_url=OuterRef("endpoint_url")).values(
                        "score"
                    )[:1]
                )
            )
            .values_list(
                "id", "max_concurrency", "rate_limit_max", "rate_limit_window_secs", "health_score"
            )
        )
    return {row[0]: Limits(*row) for row in rows}


# -- concurrency -------------------------------------------------------------------


def _over_concurrency(
    by_job: dict[int, list[int]], limits: dict[int, Limits], using: str
) -> list[Held]:
    capped = [jid for jid in by_job if jid in limits and limits[jid].concurrency is not None]
    if not capped:
        return []
    active = _active_counts(capped, using)
    until = timezone.now() + CONCURRENCY_WAIT
    held = []
    for jid in capped:
        lim = limits[jid]
        limit = lim.concurrency
        assert limit is not None
        runs = by_job[jid]
        # The count includes this batch's runs (dequeued by this transaction).
        others = active.get(jid, 0) - len(runs)
        slots = max(0, limit - others)
        if limit < (lim.max_concurrency or 0):
            cap = (
                f"its concurrency of {limit} (max_concurrency {lim.max_concurrency}, scaled down "
                f"while its endpoint is degraded: health score {lim.health_score:.0f})"
            )
        else:
            cap = f"its max_concurrency of {limit}"
        reason = f"job at {cap} ({others} runs dequeued or executing); no attempt spent"
        held += [Held(rid, until, "limit.concurrency", reason) for rid in runs[slots:]]
    return held


def _active_counts(job_ids: Iterable[int], using: str) -> dict[int, int]:
    """Count each job's dequeued and executing runs (an index scan of active runs)."""
    rows = (
        JobRun.objects.using(using)
        .filter(job_id__in=list(job_ids), status__in=_ACTIVE)
        .values("job_id")
        .annotate(n=Count("id"))
        .values_list("job_id", "n")
    )
    return dict(rows)


# -- rate --------------------------------------------------------------------------


def _over_rate(admitted: dict[int, list[int]], limits: dict[int, Limits], using: str) -> list[Held]:
    wanted = {
        jid: len(rids)
        for jid, rids in admitted.items()
        if rids and jid in limits and limits[jid].rate_limited
    }
    if not wanted:
        return []
    if connections[using].vendor == "postgresql":
        windows = _take_pg(wanted, limits, using)
    else:
        windows = _take_orm(wanted, limits, using)
    held = []
    for jid, window in windows.items():
        lim = limits[jid]
        reason = (
            f"job at its rate limit of {lim.rate_max} runs per {lim.rate_window_secs:g}s; "
            "no attempt spent"
        )
        held += [
            Held(rid, window.ends_at, "limit.rate", reason)
            for rid in admitted[jid][window.granted :]
        ]
    return held


# Windows are computed from the database's clock, which every host shares.
# ``old`` reads the count before the upsert; the job row lock makes it exact.
_TAKE_PG = f"""
WITH v AS (
    SELECT v.job_id, v.secs, v.cap, v.n,
           to_timestamp(floor(extract(epoch FROM now()) / v.secs) * v.secs) AS ws
    FROM unnest(%s::bigint[], %s::float8[], %s::integer[], %s::integer[]) AS v(job_id, secs, cap, n)
),
old AS (
    SELECT t.job_id, t.count FROM {_WINDOW_TABLE} AS t
    JOIN v ON t.job_id = v.job_id AND t.window_start = v.ws
),
gone AS (
    DELETE FROM {_WINDOW_TABLE} AS t USING v WHERE t.job_id = v.job_id AND t.window_start < v.ws
),
up AS (
    INSERT INTO {_WINDOW_TABLE} AS t (job_id, window_start, count)
    SELECT job_id, ws, LEAST(n, cap) FROM v
    ON CONFLICT (job_id, window_start) DO UPDATE
    SET count = GREATEST(t.count, LEAST(t.count + EXCLUDED.count,
                                        (SELECT cap FROM v WHERE v.job_id = t.job_id)))
    RETURNING t.job_id, t.count
)
SELECT up.job_id, up.count - COALESCE(old.count, 0), v.ws + make_interval(secs => v.secs)
FROM up JOIN v ON v.job_id = up.job_id LEFT JOIN old ON old.job_id = up.job_id
"""


def _take_pg(wanted: dict[int, int], limits: dict[int, Limits], using: str) -> dict[int, Window]:
    jids = sorted(wanted)
    columns = [
        jids,
        [limits[j].rate_window_secs for j in jids],
        [limits[j].rate_max for j in jids],
        [wanted[j] for j in jids],
    ]
    with connections[using].cursor() as cursor:
        cursor.execute(_TAKE_PG, columns)
        return {jid: Window(granted, ends_at) for jid, granted, ends_at in cursor.fetchall()}


def _take_orm(wanted: dict[int, int], limits: dict[int, Limits], using: str) -> dict[int, Window]:
    # SQLite: one writer at a time, so a read then a write cannot interleave with another claim.
    now = timezone.now()
    windows = {}
    for jid, n in wanted.items():
        lim = limits[jid]
        assert lim.rate_max is not None and lim.rate_window_secs is not None
        start, end = window_bounds(now, lim.rate_window_secs)
        rows = JobRateWindow.objects.using(using).filter(job_id=jid)
        rows.filter(window_start__lt=start).delete()
        row, _ = rows.get_or_create(job_id=jid, window_start=start, defaults={"count": 0})
        granted = max(0, min(n, lim.rate_max - row.count))
        rows.filter(pk=row.pk).update(count=row.count + granted)
        windows[jid] = Window(granted, end)
    return windows


def window_bounds(now: dt.datetime, secs: float) -> tuple[dt.datetime, dt.datetime]:
    """Return the start and end of the epoch-aligned window of ``secs`` seconds holding ``now``."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    index = (now - epoch).total_seconds() // secs
    start = epoch + dt.timedelta(seconds=index * secs)
    return start, start + dt.timedelta(seconds=secs)
