"""What django-strait does when other things change: Django signal receivers, connected in ready()."""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError
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
    each database's waiting runs are freed (one that does not answer is logged,
    and its runs wait for their day's end).
    """
    if not placed():
        backend(using).release_budget_waiting(instance.pk, now=timezone.now())
        return
    for name in aliases():
        try:
            backend(name).release_budget_waiting(instance.pk, now=timezone.now())
        except DatabaseError as exc:
            logger.warning("runs of project %s waiting on database %r not freed: %s",
                           instance.name, name, exc)  # fmt: skip


@receiver(post_delete, sender=Project, dispatch_uid="django_strait.forget_deleted_project")
def forget_deleted_project(sender: type, instance: Project, using: str, **kwargs: Any) -> None:
    """Several databases: the jobs of other aliases that named a deleted project name none.

    Django sets it to null on the project's own database (``on_delete=SET_NULL``);
    the jobs of the others are not its to collect.
    """
    if not placed():
        return
    for name in aliases():
        if name != using:
            Job.objects.using(name).filter(project_id=instance.pk).update(project=None)
