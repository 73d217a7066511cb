"""What django-strait does when other things change: Django signal receivers, connected in ready()."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from django_strait.database import aliases, placed
from django_strait.models import Job, Project
from django_strait.storage import backend

logger = logging.getLogger(__name__)


@receiver(post_save, sender=Project, dispatch_uid="django_strait.release_budget_waiting")
def release_budget_waiting(sender: type, instance: Project, using: str, **kwargs: Any) -> None:
    """A saved project (say, a raised budget) frees the runs waiting for one, now, not tomorrow.

    Runs that still do not fit are held again at their next claim. With several
    databases the project lives on the control database and its jobs on any:
    once the save commits, each database's waiting runs are freed (one that does
    not answer is logged, and its runs wait for their day's end).
    """
    if not placed():
        backend(using).release_budget_waiting(instance.pk, now=timezone.now())
        return
    pk, name = instance.pk, instance.name
    transaction.on_commit(lambda: _on_aliases(release, pk, name, aliases()), using=using)


@receiver(post_delete, sender=Project, dispatch_uid="django_strait.forget_deleted_project")
def forget_deleted_project(sender: type, instance: Project, using: str, **kwargs: Any) -> None:
    """Several databases: the jobs of other aliases that named a deleted project name none.

    Django sets it to null on the project's own database (``on_delete=SET_NULL``);
    the jobs of the others are not its to collect: that is done once the delete commits.
    """
    if placed():
        pk, name = instance.pk, instance.name  # the delete clears instance.pk
        others = [a for a in aliases() if a != using]
        transaction.on_commit(lambda: _on_aliases(forget, pk, name, others), using=using)


def release(alias: str, project_id: int) -> None:
    backend(alias).release_budget_waiting(project_id, now=timezone.now())


def forget(alias: str, project_id: int) -> None:
    Job.objects.using(alias).filter(project_id=project_id).update(project=None)


def _on_aliases(
    do: Callable[[str, int], None], project_id: int, name: str, where: Sequence[str]
) -> None:
    for alias in where:
        try:
            do(alias, project_id)
        except DatabaseError as exc:
            logger.warning("project %s: database %r did not answer (%s); its jobs and runs "
                           "there are left as they were", name, alias, exc)  # fmt: skip
