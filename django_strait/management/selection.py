"""What the commands share about selecting: names of jobs and ids of runs that must exist."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.management.base import CommandError

from django_strait.models import Job, JobRun

#: How many existing job names an error about an unknown one lists.
NAMES_SHOWN = 10


def require_jobs(names: Sequence[str]) -> None:
    """Raise a ``CommandError`` naming every name in ``names`` that no job has."""
    known = set(Job.objects.filter(name__in=list(names)).values_list("name", flat=True))
    missing = [name for name in dict.fromkeys(names) if name not in known]
    if not missing:
        return
    some = list(Job.objects.order_by("name").values_list("name", flat=True)[: NAMES_SHOWN + 1])
    shown = ", ".join(some[:NAMES_SHOWN]) + (", ..." if len(some) > NAMES_SHOWN else "")
    allowed = f"the name of a job ({shown})" if some else "the name of a job (there are none)"
    raise CommandError(f"--job: no job named {', '.join(map(repr, missing))}; allowed: {allowed}")


def require_runs(ids: Sequence[int]) -> None:
    """Raise a ``CommandError`` naming every id in ``ids`` that no run has."""
    found = set(JobRun.objects.filter(pk__in=list(ids)).values_list("pk", flat=True))
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise CommandError(f"no run has the id {', '.join(missing)}; nothing was done")
