"""Periodic duties a worker runs for the whole cluster: each on one host at a time.

A duty is a small service with ``run_once(now)`` (River's ``runOnce``, Oban's
plugins): validated options with named defaults, a result with counts, batched
work, and leadership taken for the length of one transaction so that exactly one
host does it per round (DESIGN §6).
"""

from __future__ import annotations

from django.utils.module_loading import import_string


def default_duties(*, using: str = "default") -> list:
    """The duties every worker takes part in, configured from ``STRAIT``."""
    duties = []
    for path in (
        "django_strait.duties.reaper.Reaper",
        "django_strait.duties.scheduler.Scheduler",
        "django_strait.duties.pruner.Pruner",
    ):
        try:
            cls = import_string(path)
        except ImportError:  # not built yet in this tree
            continue
        duties.append(cls.from_settings(using=using))
    return duties
