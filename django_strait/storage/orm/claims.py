"""The worker's claim side with the ORM: claim, start, hold, unclaim, heartbeat.

Portable: every update is guarded by the status (and worker) it expects, so two
workers never take the same run. Where the database can skip locked rows
(PostgreSQL, MySQL 8, Oracle) the claim locks what it picks; elsewhere (SQLite,
which serializes writers) a row another worker took between read and write is
simply not updated, and the claim picks again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from django.db import connections
from django.db.models import Count, F, Max, Min, OuterRef, Q, Subquery, TextField
from django.db.models.functions import Cast

from django_strait.models import Execution, JobPresetRecommendation, JobRun, RunHold
from django_strait.rules.states import IN_FLIGHT, RunStatus, Transition
from django_strait.storage.values import Claimed, Hold, Waiting, json_column

#: Picks before a claim gives up when every row it picked was taken by another worker.
CLAIM_TRIES = 20

_CLAIMED_COLUMNS = (
    "id",
    "job_id",
    # As text, decoded guarded by claimed(): one unreadable row must not fail the claim.
    Cast("payload", TextField()),
    "attempt",
    "attempts_before_replay",
    "max_attempts",
    Cast("retry_overrides", TextField()),
    "endpoint_used",
    "workflow_step_run_id",
    # What a process run's preset is chosen from (docs/process-execution.md), in the
    # claim: the run's own (after an OOM); its job's live recommendation, below.
    "preset",
)


def _recommended(now: dt.datetime) -> Subquery:
    """The preset the claimed run's job recommends until its expiry (None: none, or expired)."""
    live = JobPresetRecommendation.objects.filter(job_id=OuterRef("job_id"), expires_at__gt=now)
    return Subquery(live.values("preset")[:1])


def claimed(
    rid, job_id, payload, attempt, before, max_att, overrides, used, step=None, preset="",
    recommended=None,
) -> Claimed:  # fmt: skip
    """Build a Claimed from a row whose JSON columns come as text, decoding them guarded."""
    run = Claimed(rid, job_id, None, attempt, before, max_att, None, used, step_run_id=step,
                  run_preset=preset or "", recommended_preset=recommended or "")  # fmt: skip
    try:
        run.payload = json_column(payload)
        run.retry_overrides = json_column(overrides)
    except (ValueError, RecursionError) as exc:
        run.row_error = (
            f"the stored payload or retry override cannot be read: {type(exc).__name__}: {exc}"
        )
    return run


def claim(
    alias: str,
    worker_id: str,
    queues: Sequence[str],
    limit: int,
    now: dt.datetime,
    *,
    external: bool = False,
    exclude: Sequence[str] = (),
) -> list[Claimed]:
    """Move up to ``limit`` due queued runs to dequeued for ``worker_id``, in claim order.

    ``external``: the runs of external-worker jobs (an OJS fetch), which are the
    only runs it takes; without it, they are the runs it never takes.
    """
    for _ in range(CLAIM_TRIES):
        picked, taken = _claim_once(alias, worker_id, queues, limit, now, external, exclude)
        if taken or not picked:
            return taken
    return []


def _claim_once(
    alias: str,
    worker_id: str,
    queues: Sequence[str],
    limit: int,
    now: dt.datetime,
    external: bool,
    exclude: Sequence[str] = (),
) -> tuple[int, list[Claimed]]:
    runs = JobRun.objects.using(alias)
    due = runs.filter(status=RunStatus.QUEUED, available_at__lte=now, job__enabled=True)
    if external:
        due = due.filter(job__execution=Execution.EXTERNAL)
    else:  # worked by OJS workers (docs/ojs.md), never by the project's own
        due = due.exclude(job__execution=Execution.EXTERNAL)
    if queues:
        due = due.filter(queue__in=list(queues))
    if exclude:  # paused queues (storage.queues)
        due = due.exclude(queue__in=list(exclude))
    due = due.order_by("-priority", "available_at", "id")
    if connections[alias].features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True, of=("self",))
    ids = list(due.values_list("id", flat=True)[:limit])
    if not ids:
        return 0, []
    runs.filter(pk__in=ids, status=RunStatus.QUEUED).update(
        status=RunStatus.DEQUEUED,
        claimed_by=worker_id,
        dequeued_at=now,
        heartbeat_at=now,
        updated_at=now,
    )
    rows = runs.filter(
        pk__in=ids, status=RunStatus.DEQUEUED, claimed_by=worker_id, dequeued_at=now
    ).values_list(*_CLAIMED_COLUMNS, _recommended(now))
    by_id = {row[0]: claimed(*row) for row in rows}
    # In claim order (priority, then due time): limits and budgets admit the first ones.
    return len(ids), [by_id[rid] for rid in ids if rid in by_id]


def start(alias: str, worker_id: str, ids: Sequence[int], now: dt.datetime) -> list[tuple]:
    """Move claimed runs to executing, spending an attempt; return (id, attempt, started_at)."""
    runs = JobRun.objects.using(alias)
    runs.filter(pk__in=ids, status=RunStatus.DEQUEUED, claimed_by=worker_id).update(
        status=RunStatus.EXECUTING,
        attempt=F("attempt") + 1,
        started_at=now,
        heartbeat_at=now,
        updated_at=now,
    )
    started = runs.filter(
        pk__in=ids, status=RunStatus.EXECUTING, claimed_by=worker_id, started_at=now
    )
    return list(started.values_list("id", "attempt", "started_at"))


def hold(alias: str, worker_id: str, holds: Sequence[Hold], now: dt.datetime) -> None:
    """Put claimed runs back to queued until their ``available_at``; no attempt is spent."""
    by_id = {h.run_id: h for h in holds}
    runs = JobRun.objects.using(alias)
    attempts = dict(
        runs.filter(
            pk__in=list(by_id), status__in=Transition.UNCLAIM.sources, claimed_by=worker_id
        ).values_list("id", "attempt")
    )
    for rid in attempts:
        held = by_id[rid]
        runs.filter(pk=rid).update(
            status=Transition.UNCLAIM.target,
            available_at=held.available_at,
            error_type=held.error_type,
            last_error=held.error,
            claimed_by="",
            dequeued_at=None,
            heartbeat_at=None,
            updated_at=now,
        )
    _record_periods(alias, worker_id, [(by_id[rid], n) for rid, n in attempts.items()], now)


def _record_periods(
    alias: str, worker_id: str, held: Sequence[tuple[Hold, int]], now: dt.datetime
) -> None:
    """Extend each run's latest hold period when it is the same one, else open a new period."""
    periods = RunHold.objects.using(alias)
    latest_ids = (
        periods.filter(run_id__in=[h.run_id for h, _ in held])
        .values("run_id")
        .annotate(latest=Max("id"))
        .values_list("latest", flat=True)
    )
    latest = {p.run_id: p for p in periods.filter(pk__in=list(latest_ids))}
    fresh = []
    for h, attempt in held:
        period = latest.get(h.run_id)
        if period is not None and (period.reason, period.after_attempt) == (h.error_type, attempt):
            periods.filter(pk=period.pk).update(
                last_held_at=now,
                until=h.available_at,
                times=F("times") + 1,
                error=h.error,
                endpoint=h.endpoint,
                worker=worker_id,
            )
        else:
            fresh.append(_period(h, attempt, now, worker_id))
    periods.bulk_create(fresh)


def _period(h: Hold, attempt: int, now: dt.datetime, worker_id: str) -> RunHold:
    return RunHold(
        run_id=h.run_id,
        after_attempt=attempt,
        reason=h.error_type,
        error=h.error,
        endpoint=h.endpoint,
        started_at=now,
        last_held_at=now,
        until=h.available_at,
        worker=worker_id,
    )


def hold_began(alias: str, attempts: Mapping[int, int], reason: str) -> dict[int, dt.datetime]:
    """When each run's latest hold period began, if it is for ``reason`` after its attempts."""
    periods = RunHold.objects.using(alias)
    latest_ids = (
        periods.filter(run_id__in=list(attempts))
        .values("run_id")
        .annotate(latest=Max("id"))
        .values_list("latest", flat=True)
    )
    return {
        run_id: started
        for run_id, after, why, started in periods.filter(pk__in=list(latest_ids)).values_list(
            "run_id", "after_attempt", "reason", "started_at"
        )
        if why == reason and after == attempts[run_id]
    }


def waiting(alias: str, queues: Sequence[str], now: dt.datetime) -> list[Waiting]:
    """Group the queued runs of ``queues`` not claimable at ``now`` by error type and job state."""
    queued = JobRun.objects.using(alias).filter(status=RunStatus.QUEUED)
    if queues:
        queued = queued.filter(queue__in=list(queues))
    not_due = queued.filter(Q(available_at__gt=now) | Q(job__enabled=False))
    rows = (
        not_due.values("error_type", "job__enabled")
        .annotate(runs=Count("id"), next_at=Min("available_at"))
        .order_by("error_type", "job__enabled")
    )
    return [Waiting(r["error_type"], r["job__enabled"], r["runs"], r["next_at"]) for r in rows]


def unclaim(alias: str, worker_id: str, run_ids: Sequence[int], now: dt.datetime) -> int:
    """Put claimed-but-unstarted runs back to queued; no attempt is spent."""
    return (
        JobRun.objects.using(alias)
        .filter(pk__in=list(run_ids), status__in=Transition.UNCLAIM.sources, claimed_by=worker_id)
        .update(
            status=Transition.UNCLAIM.target,
            claimed_by="",
            dequeued_at=None,
            heartbeat_at=None,
            updated_at=now,
        )
    )


def heartbeat(alias: str, worker_id: str, run_ids: Sequence[int], now: dt.datetime) -> int:
    """Mark runs this worker holds as alive (one statement for all of them)."""
    return (
        JobRun.objects.using(alias)
        .filter(pk__in=list(run_ids), status__in=IN_FLIGHT, claimed_by=worker_id)
        .update(heartbeat_at=now)
    )
