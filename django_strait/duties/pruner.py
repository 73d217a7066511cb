"""Pruning: delete finished runs past their retention, in batches, on one host at a time.

Only ``completed``, ``discarded`` and ``canceled`` runs are pruned. Dead letters
wait for a person (docs/concepts.md: never pruned automatically) and ``failed`` runs are
a recognised permanent failure someone may still need to read; both stay until
deleted by hand. Active runs are never touched. Attempts go with their run
(``on_delete=CASCADE``), and so do delivered completion webhooks; a run that
still owes one (pending, or failed and not redelivered) is kept, so that its
notice can still be sent, and counted (``kept_for_webhooks``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from django.db.models import Count, Q, QuerySet

from django_strait.conf import strait_settings
from django_strait.database import alias
from django_strait.duties.base import DutyResult
from django_strait.duties.leader import lead
from django_strait.models import Job, JobRun, WebhookDelivery
from django_strait.models.webhook import UNDELIVERED
from django_strait.rules.states import RunStatus
from django_strait.storage import backend
from django_strait.storage.rows import read
from django_strait.storage.values import HistoryDay

logger = logging.getLogger(__name__)

#: The only statuses pruning deletes.
PRUNABLE = (RunStatus.COMPLETED, RunStatus.DISCARDED, RunStatus.CANCELED)
#: Batches per round unless told otherwise: one round never runs unbounded.
DEFAULT_MAX_BATCHES = 100


@dataclass(frozen=True, slots=True)
class PruneSelection:
    """Which finished runs are old enough to go."""

    #: Only this job's runs (None: every job).
    job: str | None = None
    #: Seconds since finishing, for every job; None = each job's retention_days,
    #: else the RETENTION_DAYS setting.
    older_than: float | None = None
    #: Days for jobs without their own retention_days.
    default_days: int = 30


@dataclass(frozen=True, slots=True)
class PruneCount:
    """How many runs of one job and status a prune would delete."""

    job: str
    status: str
    runs: int


def prunable(selection: PruneSelection, now: dt.datetime, *, using: str | None = None) -> QuerySet:
    """Return the runs ``selection`` lets go at ``now`` (unordered, unsliced)."""
    return past_retention(selection, now, using=using).exclude(pk__in=_owing(using))


def kept_for_webhooks(
    selection: PruneSelection, now: dt.datetime, *, using: str | None = None
) -> int:
    """Count the runs past retention that are kept because they still owe a webhook."""
    return past_retention(selection, now, using=using).filter(pk__in=_owing(using)).count()


def _owing(using: str | None) -> QuerySet:
    undelivered = WebhookDelivery.objects.using(using).filter(
        status__in=UNDELIVERED, run__isnull=False
    )
    return undelivered.values("run_id")


def past_retention(
    selection: PruneSelection, now: dt.datetime, *, using: str | None = None
) -> QuerySet:
    """Return the finished runs past their retention, owing webhooks or not."""
    runs = JobRun.objects.using(using).filter(status__in=PRUNABLE)
    if selection.job is not None:
        runs = runs.filter(job__name=selection.job)
    if selection.older_than is not None:
        return runs.filter(finished_at__lt=now - dt.timedelta(seconds=selection.older_than))
    own, kept = retentions(using)
    return runs.filter(_cutoffs(own.items(), selection, now)).exclude(job_id__in=kept)


def retentions(using: str | None) -> tuple[dict[int, int], set[int]]:
    """The jobs' own ``retention_days`` by job id, and the jobs whose value cannot be read
    or is out of bounds: their runs are kept (a bad value never deletes), and logged."""
    rows = Job.objects.using(using).filter(retention_days__isnull=False).only("retention_days")
    found = read(rows, bounded=("retention_days",))
    return {job.pk: job.retention_days for job in found.rows}, {
        problem.pk for problem in found.unreadable
    }


def _cutoffs(own_days, selection: PruneSelection, now: dt.datetime) -> Q:
    """One clause per distinct retention: few clauses however many jobs set their own."""
    jobs_by_days: dict[int, list[int]] = defaultdict(list)
    for pk, days in own_days:
        jobs_by_days[days].append(pk)
    custom = [pk for pks in jobs_by_days.values() for pk in pks]
    default_cutoff = now - dt.timedelta(days=selection.default_days)
    clause = Q(finished_at__lt=default_cutoff) & ~Q(job_id__in=custom)
    for days, pks in jobs_by_days.items():
        clause |= Q(job_id__in=pks, finished_at__lt=now - dt.timedelta(days=days))
    return clause


def preview(
    selection: PruneSelection,
    now: dt.datetime,
    *,
    using: str | None = None,
    besides: Sequence[HistoryDay] = (),
) -> list[PruneCount]:
    """Return how many runs per job and status a prune at ``now`` would delete row by
    row, ``besides`` the days it drops whole."""
    runs = prunable(selection, now, using=using)
    for day in besides:
        runs = runs.exclude(finished_at__gte=day.start, finished_at__lt=day.end)
    rows = (
        runs.order_by()
        .values("job__name", "status")
        .annotate(runs=Count("id"))
        .order_by("job__name", "status")
    )
    return [PruneCount(r["job__name"], r["status"], r["runs"]) for r in rows]


def whole_days(
    selection: PruneSelection, now: dt.datetime, *, using: str | None = None, counted: bool = False
) -> list[HistoryDay]:
    """The days of history that go whole: every run in them past its job's retention.

    None with ``selection.job`` (one job's runs go row by row). A day with runs of
    a job that keeps them longer waits for that job; its other runs go row by row.
    """
    if selection.job is not None:
        return []
    storage = backend(using)
    if selection.older_than is not None:
        return storage.history_days(now - dt.timedelta(seconds=selection.older_than), counted)
    own, kept = retentions(using)
    shortest = min([selection.default_days, *own.values()])
    due = []
    for day in storage.history_days(now - dt.timedelta(days=shortest), counted):
        if day.job_ids & kept:
            continue  # a job whose retention cannot be read keeps its runs: row by row
        longest = max(
            (own.get(job, selection.default_days) for job in day.job_ids),
            default=selection.default_days,
        )
        if day.end <= now - dt.timedelta(days=longest):
            due.append(day)
    return due


@dataclass(frozen=True, slots=True)
class Pruner:
    """The duty that deletes finished runs past retention: ``run_once(now)`` per interval."""

    name: ClassVar[str] = "pruner"

    interval: float = 3600.0
    batch_size: int = 1000
    #: Batches per round; None = until nothing is left (the command's choice).
    max_batches: int | None = DEFAULT_MAX_BATCHES
    retention_days: int = 30
    using: str | None = None

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"interval: must be > 0 seconds, got {self.interval!r}")
        if not self.batch_size >= 1:
            raise ValueError(f"batch_size: must be >= 1, got {self.batch_size!r}")
        if self.max_batches is not None and not self.max_batches >= 1:
            raise ValueError(f"max_batches: must be >= 1 or None, got {self.max_batches!r}")
        if not self.retention_days >= 1:
            raise ValueError(f"retention_days: must be >= 1, got {self.retention_days!r}")

    @classmethod
    def from_settings(cls, using: str | None = None, **options) -> Pruner:
        """Build the pruner from PRUNE_INTERVAL, PRUNE_BATCH_SIZE and RETENTION_DAYS."""
        return cls(
            interval=strait_settings.PRUNE_INTERVAL,
            batch_size=strait_settings.PRUNE_BATCH_SIZE,
            retention_days=strait_settings.RETENTION_DAYS,
            using=alias(using),
            **options,
        )

    def selection(self, *, job: str | None = None, older_than: float | None = None):
        """Return the selection this pruner applies, narrowed to ``job`` or ``older_than``."""
        return PruneSelection(job=job, older_than=older_than, default_days=self.retention_days)

    def run_once(self, now: dt.datetime, selection: PruneSelection | None = None) -> DutyResult:
        """Drop whole days of history past retention (PostgreSQL, partitioned), then delete
        what is left batch by batch, each step in its own led transaction."""
        selection = selection or self.selection()
        storage = backend(self.using)
        with lead(self.name, using=self.using) as leading:
            if leading:
                storage.prepare_history(now)
                days = whole_days(selection, now, using=self.using)
        if not leading:
            return DutyResult(self.name, led=False)
        dropped = days_dropped = 0
        for day in days:
            with lead(self.name, using=self.using) as leading:
                detached = leading and storage.detach_history_day(day)
            if not leading:
                break
            if not detached:
                logger.warning("day %s of history is busy: dropped next round", day.day)
                continue
            dropped += storage.finish_history_day(day)
            days_dropped += 1
        if days_dropped:
            logger.info("dropped %s day(s) of history: %s run(s)", days_dropped, dropped)
        deleted = batches = 0
        while self.max_batches is None or batches < self.max_batches:
            with lead(self.name, using=self.using) as leading:
                gone = self._delete_batch(selection, now) if leading else None
            if not gone:  # nothing left, or another host leads now: it carries on
                break
            deleted += gone
            batches += 1
        if deleted:
            logger.info("pruned %s run(s) in %s batch(es)", deleted, batches)
        kept = kept_for_webhooks(selection, now, using=self.using)
        if kept:
            logger.warning("kept %s finished run(s) past retention: they owe webhooks", kept)
        counts = {
            "deleted": deleted + dropped,
            "batches": batches,
            "days_dropped": days_dropped,
            "kept_for_webhooks": kept,
        }
        return DutyResult(self.name, led=True, counts=counts)

    def _delete_batch(self, selection: PruneSelection, now: dt.datetime) -> int:
        ids = list(
            prunable(selection, now, using=self.using)
            .order_by()
            .values_list("pk", flat=True)[: self.batch_size]
        )
        if not ids:
            return 0
        # The whole filter again: a run replayed since the SELECT is no longer prunable.
        # Storage deletes them, loading only ids (``Storage.prune_runs``).
        gone = prunable(selection, now, using=self.using).filter(pk__in=ids)
        return backend(self.using).prune_runs(gone)
