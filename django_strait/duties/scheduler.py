"""The scheduler duty: one run per tick of a job's ``schedule``, however many hosts run workers.

The tick math is in :mod:`django_strait.rules.cron`. This duty applies it to jobs
under the leader lock; the idempotency key ``cron:<tick in UTC>`` makes a second
host firing the same tick harmless (docs/worker.md).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from django.db import transaction
from django.db.models import Q

from django_strait.conf import strait_settings
from django_strait.database import alias
from django_strait.duties.base import DutyResult
from django_strait.duties.leader import lead
from django_strait.models import Job, JobRun
from django_strait.rules.cron import ACTIVE_STATUSES, MIN_GRACE, latest_tick, plan_ticks, tick_key
from django_strait.services.triggering import trigger
from django_strait.storage.rows import read

logger = logging.getLogger(__name__)

#: The Job columns a scheduler round reads.
_JOB_FIELDS = (
    "name",
    "enabled",
    "schedule",
    "timezone",
    "schedule_missed",
    "schedule_overlap",
    "schedule_last_tick",
    "created_at",
)


@dataclass(frozen=True, slots=True)
class Scheduler:
    """The duty that fires cron ticks: ``run_once(now)`` every ``interval`` seconds."""

    name: ClassVar[str] = "scheduler"

    interval: float = 1.0
    #: Seconds a tick stays on time; None = max(60 s, 2 x interval).
    grace: float | None = None
    using: str | None = None

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"interval: must be > 0 seconds, got {self.interval!r}")
        if self.grace is not None and not self.grace > 0:
            raise ValueError(f"grace: must be > 0 seconds or None, got {self.grace!r}")

    @classmethod
    def from_settings(cls, using: str | None = None) -> Scheduler:
        """Build the scheduler from ``STRAIT["SCHEDULER_INTERVAL"]``."""
        return cls(interval=strait_settings.SCHEDULER_INTERVAL, using=alias(using))

    @property
    def grace_seconds(self) -> float:
        """How old a tick may be and still fire as on time."""
        return self.grace if self.grace is not None else max(MIN_GRACE, 2 * self.interval)

    def run_once(self, now: dt.datetime) -> DutyResult:
        """Fire every due tick of every scheduled job, if this host leads this round."""
        with lead(self.name, using=self.using) as leading:
            if not leading:
                return DutyResult(self.name, led=False)
            counts = Counter(fired=0, skipped_overlap=0, skipped_missed=0, jobs=0, errors=0)
            # A job row that cannot be read is set aside (logged, its schedule not run);
            # every other schedule fires.
            found = read(self._scheduled_jobs())
            counts["errors"] += len({problem.pk for problem in found.unreadable})
            for job in found.rows:
                self._round_for(job, now, counts)
        return DutyResult(self.name, led=True, counts=dict(counts), looked_at=("jobs",))

    def _scheduled_jobs(self):
        # ~Q(schedule="") is the predicate of the partial index strait_job_scheduled.
        return (
            Job.objects.using(self.using).filter(~Q(schedule="")).only(*_JOB_FIELDS).order_by("pk")
        )

    def _round_for(self, job, now: dt.datetime, counts: Counter) -> None:
        try:
            # A savepoint per job: one bad job rolls back alone and the others still fire.
            with transaction.atomic(using=alias(self.using)):
                if job.enabled:
                    counts["jobs"] += 1
                    self._fire_due(job, now, counts)
                else:
                    self._drop_paused(job, now)
        except Exception as exc:  # a bad stored schedule or timezone, a refused trigger...
            counts["errors"] += 1
            logger.error(
                "schedule of job %s not run this round: %s",
                job.name,
                exc,
                extra={"job": job.name},
            )

    def _fire_due(self, job, now: dt.datetime, counts: Counter) -> None:
        plan = plan_ticks(
            job.schedule,
            job.timezone,
            last_tick=job.schedule_last_tick,
            now=now,
            grace=self.grace_seconds,
            missed=job.schedule_missed,
            created_at=job.created_at,
        )
        counts["skipped_missed"] += plan.skipped_missed
        if plan.skipped_missed:
            logger.warning(
                "job %s: %s tick(s) missed while no scheduler ran (schedule_missed=%s)",
                job.name,
                plan.skipped_missed,
                job.schedule_missed,
                extra={"job": job.name},
            )
        for tick in plan.fire:
            if job.schedule_overlap == "skip" and self._busy(job):
                counts["skipped_overlap"] += 1
                continue
            counts["fired"] += self._fire(job, tick)
        if plan.last is not None:
            self._advance(job, plan.last)

    def _fire(self, job, tick: dt.datetime) -> int:
        """Queue the run for ``tick``; return 1 if this call made it, 0 if it existed."""
        run = trigger(job.name, {"scheduled_for": tick.isoformat()}, idempotency_key=tick_key(tick))
        return 0 if run.idempotency_hit else 1

    def _busy(self, job) -> bool:
        return (
            JobRun.objects.using(self.using)
            .filter(job_id=job.pk, status__in=ACTIVE_STATUSES)
            .exists()
        )

    def _drop_paused(self, job, now: dt.datetime) -> None:
        """Move a disabled job's last tick forward: a pause is not a miss."""
        latest = latest_tick(job.schedule, job.timezone, now)
        if latest is not None and (
            job.schedule_last_tick is None or latest > job.schedule_last_tick
        ):
            self._advance(job, latest)

    def _advance(self, job, tick: dt.datetime) -> None:
        """Record ``tick`` as acted on; only ever forward (another host may be ahead)."""
        Job.objects.using(self.using).filter(
            Q(schedule_last_tick__isnull=True) | Q(schedule_last_tick__lt=tick), pk=job.pk
        ).update(schedule_last_tick=tick)
