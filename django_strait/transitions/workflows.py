"""Announcing what moved workflow runs: the signals storage does not send.

Storage moves workflow runs in the transaction that moved their steps' runs
and returns what changed (``storage.values.Advanced``); these send, once that
transaction commits, ``run_enqueued`` for the runs of the steps it started and
``workflow_started``/``workflow_completed``/``workflow_failed`` for the
workflow runs whose status moved. Every path that moves a workflow run (a
record, people's transitions, the reaper, a trigger, a cancel, a stall) ends here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction
from django.utils import timezone

from django_strait import signals
from django_strait.models import JobRun
from django_strait.storage import Storage
from django_strait.storage.values import Advanced
from django_strait.transitions import sending


def announce(advanced: Advanced, *, using: str) -> None:
    """Send the signals of what a move of workflow runs changed, once its transaction commits."""
    if advanced.started and sending.listened(signals.run_enqueued):
        created = JobRun.objects.using(using).filter(workflow_step_run__in=advanced.started)
        by_job: dict[str, list[JobRun]] = {}
        for run in created.select_related("job"):
            by_job.setdefault(run.job.name, []).append(run)
        for job, runs in by_job.items():
            sending.send_enqueued(job, runs, using=using)
    changes = list(advanced.changes)
    if changes:
        transaction.on_commit(lambda: sending.send_workflow_changes(changes), using=using)


@contextmanager
def moving_steps(storage: Storage) -> Iterator[list[int]]:
    """A transaction in which runs move; their workflow runs move on before it commits.

    Put the ids of the runs that moved (any of them may be a workflow's step) in the
    list it yields: the workflow runs of those that are move on in the same transaction,
    and what changed is announced once it commits.
    """
    moved: list[int] = []
    with storage.atomic():
        yield moved
        advanced = storage.advance_workflows(moved, now=timezone.now()) if moved else Advanced()
        announce(advanced, using=storage.alias)
