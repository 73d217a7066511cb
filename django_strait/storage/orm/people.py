"""The transitions people ask for, with the ORM: one guarded update each (or per batch).

Each applies a transition already decided (a person asked for it): the verb says
which, and writes only that transition's columns.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import F

from django_strait.models import JobRun
from django_strait.rules.states import InvalidTransition, RunStatus, Transition
from django_strait.storage import webhooks

#: ``replay``'s payload when the run keeps its own.
KEEP: Any = ...


def replay(alias: str, run_id: int, by: str, now: dt.datetime, payload: Any = KEEP) -> JobRun:
    """Queue a replayable run again, its attempt budget reset (``payload``: a new one)."""
    updates = _replayed(by, now)
    if payload is not KEEP:
        updates["payload"] = payload
    return _move(alias, run_id, Transition.REPLAY, updates, now)


def cancel(alias: str, run_id: int, now: dt.datetime) -> JobRun:
    """Cancel a run no longer held (its worker, its deadline let go of)."""
    updates = {"finished_at": now, "claimed_by": "", "visible_until": None, "updated_at": now}
    return _move(alias, run_id, Transition.CANCEL, updates, now)


def drop(alias: str, run_id: int, now: dt.datetime) -> JobRun:
    """Discard a run no worker holds."""
    return _move(alias, run_id, Transition.DROP, {"finished_at": now, "updated_at": now}, now)


def _move(
    alias: str, run_id: int, transition: Transition, updates: dict[str, Any], now: dt.datetime
) -> JobRun:
    """Move one run through ``transition`` if its status allows; return it fresh.

    Raises ``InvalidTransition`` naming the run's status, or ``JobRun.DoesNotExist``.
    """
    runs = JobRun.objects.using(alias)
    with transaction.atomic(using=alias):
        moved = runs.filter(pk=run_id, status__in=transition.sources).update(
            status=transition.target, **updates
        )
        if not moved:
            status = runs.filter(pk=run_id).values_list("status", flat=True).first()
            if status is None:
                raise JobRun.DoesNotExist(f"run {run_id} does not exist")
            raise InvalidTransition(run_id, status, transition)
        webhooks.notify_runs(alias, [run_id], now)
    return runs.select_related("job").get(pk=run_id)


def _replayed(by: str, now: dt.datetime) -> dict[str, Any]:
    """What a replay writes besides the status: due now, a fresh attempt budget, who and when."""
    return {
        "available_at": now,
        "attempts_before_replay": F("attempt"),
        "replay_count": F("replay_count") + 1,
        "replayed_by": by[:200],
        "replayed_at": now,
        "claimed_by": "",
        "cancel_requested": False,
        "finished_at": None,
        "updated_at": now,
    }


def replay_many(alias: str, run_ids: Sequence[int], by: str, now: dt.datetime) -> int:
    """Replay every replayable run among ``run_ids`` in one statement; return how many moved."""
    return (
        JobRun.objects.using(alias)
        .filter(pk__in=list(run_ids), status__in=Transition.REPLAY.sources)
        .update(status=Transition.REPLAY.target, **_replayed(by, now))
    )


def request_cancel(alias: str, run_id: int, now: dt.datetime) -> bool:
    """Flag an executing run to be canceled when its attempt returns; False if it is not executing."""
    return bool(
        JobRun.objects.using(alias)
        .filter(pk=run_id, status=RunStatus.EXECUTING)
        .update(cancel_requested=True, updated_at=now)
    )
