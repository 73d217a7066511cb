"""What the worker reads about its process runs: their presets, and whether it still holds them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django_strait.models import JobPresetRecommendation, JobRun
from django_strait.states import RunStatus
from django_strait.storage.values import PresetsOf


def presets_of(
    alias: str, run_ids: Sequence[int], job_ids: Sequence[int], now: dt.datetime
) -> PresetsOf:
    """Return the runs' stored presets and the jobs' recommendations that have not expired."""
    runs = JobRun.objects.using(alias).filter(pk__in=list(run_ids)).exclude(preset="")
    recommended = JobPresetRecommendation.objects.using(alias).filter(
        job_id__in=list(job_ids), expires_at__gt=now
    )
    return PresetsOf(
        runs=dict(runs.values_list("id", "preset")),
        recommended=dict(recommended.values_list("job_id", "preset")),
    )


def let_go(alias: str, worker_id: str, run_ids: Sequence[int]) -> list[int]:
    """Return the runs among ``run_ids`` that this worker should stop: not its, or canceled."""
    held = (
        JobRun.objects.using(alias)
        .filter(
            pk__in=list(run_ids),
            status=RunStatus.EXECUTING,
            claimed_by=worker_id,
            cancel_requested=False,
        )
        .values_list("id", flat=True)
    )
    kept = set(held)
    return [run_id for run_id in run_ids if run_id not in kept]
