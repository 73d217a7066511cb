"""Transitions that people ask for, one run at a time (admin, API, commands)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from django_strait import signals
from django_strait.database import alias
from django_strait.models import JobRun
from django_strait.states import RunStatus, Transition
from django_strait.transitions.errors import InvalidTransition

logger = logging.getLogger(__name__)


def apply(run_id: int, transition: Transition, **updates: Any) -> JobRun:
    """Move one run through ``transition`` if its status allows; return it fresh."""
    with transaction.atomic(using=alias()):
        moved = JobRun.objects.filter(pk=run_id, status__in=transition.sources).update(
            status=transition.target, updated_at=timezone.now(), **updates
        )
        if not moved:
            _refuse(run_id, transition)
    logger.info("run %s: %s", run_id, transition.label, extra={"run_id": run_id})
    return JobRun.objects.get(pk=run_id)


def _refuse(run_id: int, transition: Transition) -> None:
    status = JobRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:
        raise JobRun.DoesNotExist(f"run {run_id} does not exist")
    raise InvalidTransition(run_id, status, transition)


def _replay_updates(by: str, now) -> dict[str, Any]:
    return {
        "available_at": now,
        "attempts_before_replay": F("attempt"),
        "replay_count": F("replay_count") + 1,
        "replayed_by": by[:200],
        "replayed_at": now,
        "claimed_by": "",
        "cancel_requested": False,
        "finished_at": None,
    }


def replay(run_id: int, *, by: str = "", payload: Any = ...) -> JobRun:
    """Queue a dead-lettered/failed/discarded/system-failed run again, budget reset.

    ``by`` records who replayed; ``payload`` (if given) replaces the run's payload.
    """
    updates = _replay_updates(by, timezone.now())
    if payload is not ...:
        from django_strait.triggering import check_payload

        updates["payload"] = check_payload(payload)
    return apply(run_id, Transition.REPLAY, **updates)


#: Runs moved per statement by replay_many (and read per page by bulk replays).
REPLAY_BATCH_SIZE = 500


def replay_many(
    run_ids: Iterable[int], *, by: str = "", batch_size: int = REPLAY_BATCH_SIZE
) -> int:
    """Replay every replayable run among ``run_ids``, in batches; return how many moved."""
    ids = list(run_ids)
    moved = 0
    for start in range(0, len(ids), batch_size):
        chunk = ids[start : start + batch_size]
        with transaction.atomic(using=alias()):
            moved += JobRun.objects.filter(
                pk__in=chunk, status__in=Transition.REPLAY.sources
            ).update(status=Transition.REPLAY.target, **_replay_updates(by, timezone.now()))
    logger.info("replayed %s of %s runs (by %s)", moved, len(ids), by or "unknown")
    return moved


def cancel(run_id: int) -> JobRun:
    """Cancel a run; one that is executing is canceled when its attempt returns."""
    flagged = JobRun.objects.filter(pk=run_id, status=RunStatus.EXECUTING).update(
        cancel_requested=True, updated_at=timezone.now()
    )
    if flagged:
        logger.info("run %s: cancel requested while executing", run_id)
        return JobRun.objects.get(pk=run_id)
    run = apply(run_id, Transition.CANCEL, finished_at=timezone.now(), claimed_by="")
    signals.send_changed([run])
    return run


def discard(run_id: int, *, by: str = "", reason: str = "") -> JobRun:
    """Drop a run that no worker holds (queued, dead-lettered or system-failed)."""
    note = f"discarded by {by or 'unknown'}" + (f": {reason}" if reason else "")
    logger.info("run %s: %s", run_id, note)
    run = apply(run_id, Transition.DROP, finished_at=timezone.now())
    signals.send_changed([run])
    return run
