"""What django-strait does when other things change: Django signal receivers, connected in ready()."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver
from django.utils import timezone

from django_strait.models import Project
from django_strait.storage import backend


@receiver(post_save, sender=Project, dispatch_uid="django_strait.release_budget_waiting")
def release_budget_waiting(sender: type, instance: Project, using: str, **kwargs: Any) -> None:
    """A saved project (say, a raised budget) frees the runs waiting for one, now, not tomorrow.

    Runs that still do not fit are held again at their next claim.
    """
    backend(using).release_budget_waiting(instance.pk, now=timezone.now())
