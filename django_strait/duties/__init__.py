"""Periodic duties a worker runs for the whole cluster: each on one host at a time.

A duty is a small service with ``run_once(now)`` (River's ``runOnce``, Oban's
plugins): validated options with named defaults, a result with counts, batched
work, and leadership taken for the length of one transaction so that exactly one
host does it per round (docs/worker.md).
"""

from __future__ import annotations

from django_strait.duties.base import Duty
from django_strait.duties.pruner import Pruner
from django_strait.duties.reaper import Reaper
from django_strait.duties.sampler import HealthSampler, QueueSampler
from django_strait.duties.scheduler import Scheduler
from django_strait.duties.vacuum import Vacuumer


def default_duties(*, using: str | None = None) -> list[Duty]:
    """The duties every worker takes part in, configured from ``STRAIT``."""
    duties = (Reaper, Scheduler, Pruner, HealthSampler, QueueSampler, Vacuumer)
    return [cls.from_settings(using=using) for cls in duties]
