"""Per-job concurrency and rate limits, decided inside the claim transaction (DESIGN §5).

Claims of a limited job are serialized by locking its ``Job`` row (``FOR NO
KEY UPDATE``: it excludes other claims but not the inserts of new runs, which
only take a key-share lock). On PostgreSQL the claim statement itself takes
that lock (``transitions.batch``), and everything below is one more statement
(:data:`_ENFORCE_PG`), whose snapshot, taken after the lock was granted, sees
every claim committed before it. Under that lock:

- concurrency counts the job's dequeued and executing runs on the partial
  index ``strait_run_active`` (active runs only, never history); while the
  job's endpoint is degraded the limit is scaled down with its health score
  (from the worker's cache of endpoints that are not healthy, at most a second old);
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
from django.db.models import Count
from django.utils import timezone

from django_strait.database import alias
from django_strait.models import Job, JobRateWindow, JobRun
from django_strait.resilience.health import concurrency_share, effective_concurrency
from django_strait.sql import server_bound_cursor
from django_strait.states import RunStatus

#: How long a run over its job's concurrency limit waits before it is claimable again.
CONCURRENCY_WAIT = dt.timedelta(seconds=1)

_JOB_TABLE = Job._meta.db_table
_RUN_TABLE = JobRun._meta.db_table
_WINDOW_TABLE = JobRateWindow._meta.db_table
_ACTIVE = (RunStatus.DEQUEUED.value, RunStatus.EXECUTING.value)


@dataclass(frozen=True, slots=True)
class Pending:
    """A claimed run of a limited job, in claim order."""

    run_id: int
    job_id: int
    #: The health score of the job's endpoint, from the worker's cache (None: healthy,
    #: or a Python job): a degraded endpoint scales max_concurrency down.
    health_score: float | None = None


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
        if not self.max_concurrency:  # None or 0: no limit, as in Strait
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
    return bool(job.max_concurrency) or job.rate_limit_max is not None


def enforce(pending: Sequence[Pending], *, using: str | None = None) -> list[Held]:
    """Return the runs among ``pending`` that their job's limits hold back; call inside the claim.

    ``pending`` are runs this transaction has just claimed (still dequeued), of
    jobs whose cached definition has a limit; the limits themselves are read
    again under the job row lock, so a raised or removed limit applies at once.
    On PostgreSQL the claim (``transitions.batch.claim``) must have locked the
    jobs' rows in this transaction.
    """
    if not pending:
        return []
    by_job: dict[int, list[int]] = {}
    scores: dict[int, float | None] = {}
    for run in pending:
        by_job.setdefault(run.job_id, []).append(run.run_id)
        scores[run.job_id] = run.health_score
    if connections[alias(using)].vendor == "postgresql":
        return _enforce_pg(by_job, scores, using)
    limits = _read_limits(sorted(by_job), scores, using)
    held = _over_concurrency(by_job, limits, using)
    over = {h.run_id for h in held}
    admitted = {jid: [rid for rid in rids if rid not in over] for jid, rids in by_job.items()}
    return held + _over_rate(admitted, limits, using)


# -- PostgreSQL: one statement ---------------------------------------------------------

# Per job: its limits; its active runs (this batch's included) on the
# active-runs index; the concurrency limit now and how many of the batch it admits; the
# rate window's grant for those, with the job's older windows dropped. The limits are
# read here, under the lock, so a raised or removed limit applies at once.
_ENFORCE_PG = f"""
WITH v AS (
    SELECT * FROM unnest(%s::bigint[], %s::integer[], %s::float8[]) AS v(job_id, n, share)
),
j AS (
    SELECT v.job_id, v.n, v.share, NULLIF(j.max_concurrency, 0) AS mc, j.rate_limit_max AS rmax,
           j.rate_limit_window_secs AS secs
    FROM v JOIN {_JOB_TABLE} AS j ON j.id = v.job_id
),
-- One equality per status: both columns of the (job, status) index bound, so the
-- count never walks the job's queued backlog, whatever the planner's statistics say.
act AS (
    SELECT j.job_id,
           (SELECT count(*) FROM {_RUN_TABLE} AS r
            WHERE r.job_id = j.job_id AND r.status = '{_ACTIVE[0]}')
         + (SELECT count(*) FROM {_RUN_TABLE} AS r
            WHERE r.job_id = j.job_id AND r.status = '{_ACTIVE[1]}') AS c
    FROM j WHERE j.mc IS NOT NULL
),
cap AS (
    SELECT j.*, COALESCE(act.c, 0) - j.n AS others,
           CASE WHEN j.mc IS NULL THEN NULL
                ELSE GREATEST(1, floor(j.mc * j.share))::integer END AS eff
    FROM j LEFT JOIN act ON act.job_id = j.job_id
),
adm AS (
    SELECT cap.*,
           CASE WHEN eff IS NULL THEN n ELSE LEAST(n, GREATEST(0, eff - others)) END AS admitted,
           CASE WHEN rmax IS NULL OR secs IS NULL THEN NULL
                ELSE to_timestamp(floor(extract(epoch FROM now()) / secs) * secs) END AS ws
    FROM cap
),
old AS (
    SELECT t.job_id, t.count FROM {_WINDOW_TABLE} AS t
    JOIN adm ON t.job_id = adm.job_id AND t.window_start = adm.ws
),
gone AS (
    DELETE FROM {_WINDOW_TABLE} AS t USING adm
    WHERE adm.ws IS NOT NULL AND t.job_id = adm.job_id AND t.window_start < adm.ws
),
up AS (
    INSERT INTO {_WINDOW_TABLE} AS t (job_id, window_start, count)
    SELECT job_id, ws, LEAST(admitted, rmax) FROM adm WHERE ws IS NOT NULL AND admitted > 0
    ON CONFLICT (job_id, window_start) DO UPDATE
    SET count = GREATEST(t.count, LEAST(t.count + EXCLUDED.count,
                                        (SELECT rmax FROM adm WHERE adm.job_id = t.job_id)))
    RETURNING t.job_id, t.count
)
SELECT adm.job_id, adm.mc, adm.eff, adm.others, adm.admitted, adm.rmax, adm.secs,
       CASE WHEN adm.ws IS NULL THEN adm.admitted
            WHEN up.job_id IS NULL THEN 0
            ELSE up.count - COALESCE(old.count, 0) END,
       adm.ws + make_interval(secs => adm.secs)
FROM adm LEFT JOIN up ON up.job_id = adm.job_id LEFT JOIN old ON old.job_id = adm.job_id
"""


def _enforce_pg(
    by_job: dict[int, list[int]], scores: dict[int, float | None], using: str
) -> list[Held]:
    jids = sorted(by_job)
    shares = [concurrency_share(scores.get(j)) for j in jids]
    with server_bound_cursor(connections[alias(using)]) as cursor:
        cursor.execute(_ENFORCE_PG, [jids, [len(by_job[j]) for j in jids], shares])
        rows = cursor.fetchall()
    until = timezone.now() + CONCURRENCY_WAIT
    held = []
    for jid, mc, eff, others, admitted, rmax, secs, granted, ends_at in rows:
        runs = by_job[jid]
        if admitted < len(runs):
            limits = Limits(jid, mc, rmax, secs, scores.get(jid))
            reason = _concurrency_reason(limits, eff, others)
            held += [Held(rid, until, "limit.concurrency", reason) for rid in runs[admitted:]]
        if granted < admitted:
            reason = _rate_reason(rmax, secs)
            held += [Held(rid, ends_at, "limit.rate", reason) for rid in runs[granted:admitted]]
    return held


# -- SQLite: with the ORM -------------------------------------------------------------


def _read_limits(
    job_ids: list[int], scores: dict[int, float | None], using: str
) -> dict[int, Limits]:
    # SQLite needs no row lock: the claim's UPDATE already holds the database's write lock.
    rows = (
        Job.objects.using(using)
        .filter(pk__in=job_ids)
        .values_list("id", "max_concurrency", "rate_limit_max", "rate_limit_window_secs")
    )
    return {row[0]: Limits(*row, health_score=scores.get(row[0])) for row in rows}


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
        reason = _concurrency_reason(lim, limit, others)
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
    windows = _take_orm(wanted, limits, using)
    held = []
    for jid, window in windows.items():
        lim = limits[jid]
        reason = _rate_reason(lim.rate_max, lim.rate_window_secs)
        held += [
            Held(rid, window.ends_at, "limit.rate", reason)
            for rid in admitted[jid][window.granted :]
        ]
    return held


def _take_orm(wanted: dict[int, int], limits: dict[int, Limits], using: str) -> dict[int, Window]:
    # One writer at a time, so a read then a write cannot interleave with another claim.
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


def _concurrency_reason(lim: Limits, limit: int, others: int) -> str:
    if limit < (lim.max_concurrency or 0):
        cap = (
            f"its concurrency of {limit} (max_concurrency {lim.max_concurrency}, scaled down "
            f"while its endpoint is degraded: health score {lim.health_score:.0f})"
        )
    else:
        cap = f"its max_concurrency of {limit}"
    return f"job at {cap} ({others} runs dequeued or executing); no attempt spent"


def _rate_reason(rate_max: int | None, window_secs: float | None) -> str:
    return f"job at its rate limit of {rate_max} runs per {window_secs:g}s; no attempt spent"


def window_bounds(now: dt.datetime, secs: float) -> tuple[dt.datetime, dt.datetime]:
    """Return the start and end of the epoch-aligned window of ``secs`` seconds holding ``now``."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    index = (now - epoch).total_seconds() // secs
    start = epoch + dt.timedelta(seconds=index * secs)
    return start, start + dt.timedelta(seconds=secs)
