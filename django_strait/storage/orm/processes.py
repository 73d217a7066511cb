"""What the worker reads about its process runs while they execute: whether it still holds them.

Their presets come with the claim (``claims._CLAIMED_COLUMNS``).
"""

from __future__ import annotations

from collections.abc import Sequence

from django_strait.models import JobRun
from django_strait.rules.states import RunStatus


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
