"""Write the ``Job`` rows of the jobs declared in code (:mod:`django_strait.services.registry`).

What code declares wins: the options ``@job(...)`` names are written to the row
each time it is synced, the others stay as the admin or the API left them
(the admin shows the declared ones read-only). A schedule declared in code is
marked on the row (``schedule_in_code``), so that removing it from the code
removes it from the row at the next sync, rather than leaving the job firing
on a schedule nobody declares. A row is synced on its job's first trigger in a
process, by a worker at start-up when the job has a schedule to fire (or had
one in code), and by ``manage.py strait_sync``.

With several databases (``STRAIT["DATABASES"]``) a job lives on its queue's
alias (:func:`job_alias`): a ``@job``'s row is written to the alias of the
queue it declares (``"default"`` when it declares none).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError

from django_strait import database
from django_strait.conf import strait_settings
from django_strait.models import Job
from django_strait.rules.retry import check_registered
from django_strait.services import registry
from django_strait.services.registry import JobSpec

logger = logging.getLogger(__name__)

_synced: set[str] = set()

#: The queue of a job row made without one (``Job.queue``'s default).
DEFAULT_QUEUE = "default"


def job_alias(name: Any) -> str:
    """The alias job ``name``'s rows live on: its queue's (``STRAIT["QUEUE_DATABASES"]``).

    One alias: that one, asking nothing. Several: a ``@job``'s declared queue
    says; a job defined outside code is looked for on each alias, the first
    first (the first alias when none has it: the caller then says it is unknown).
    """
    if not database.placed():
        return database.alias()
    entry = registry.get(name) if isinstance(name, str) else None
    if entry is not None:
        return database.alias_for_queue(entry.spec.columns.get("queue", DEFAULT_QUEUE))
    if isinstance(name, str) and name:
        for where in database.aliases():
            try:
                if Job.objects.using(where).filter(name=name).exists():
                    return where
            except DatabaseError:
                continue  # a database that is away: the job may be on another
    return database.alias()


def sync(entry: Any, using: str | None = None) -> Job:
    """Create or update the ``Job`` row of a ``@job`` function on its alias; return it."""
    spec = entry.spec
    using = using or job_alias(spec.name)
    check_registered({"function": spec.columns.get("retry_function")}, prefix="@job.retry")
    _check_preset(spec)
    wanted = {"handler": spec.path, "endpoint_url": "", **spec.columns}
    wanted["schedule_in_code"] = bool(spec.schedule)
    row, created = Job.objects.using(using).get_or_create(name=spec.name, defaults=wanted)
    if not created and row.schedule_in_code and not spec.schedule:
        wanted["schedule"] = ""  # the code that declared it no longer does
        logger.info("job %s: its schedule is no longer declared in code; removed", spec.name)
    changed = [k for k, v in wanted.items() if getattr(row, k) != v]
    if not created and changed:
        for k in changed:
            setattr(row, k, wanted[k])
        row.save(using=using, update_fields=[*changed, "updated_at"])
    _synced.add(spec.name)
    return row


def _check_preset(spec: JobSpec) -> None:
    preset = spec.columns.get("preset")
    names = strait_settings.PRESETS.names
    if preset and preset not in names:
        raise ValueError(
            f"@job(preset={preset!r}) on {spec.path}: not a preset; allowed: {', '.join(names)}"
        )


def sync_all() -> list[Job]:
    """Sync every registered handler's ``Job`` row (``manage.py strait_sync``)."""
    return [sync(h) for h in registry.registered().values()]


def sync_schedules(using: str | None = None) -> list[Job]:
    """Sync the rows whose schedule code declares, or declared: a worker's start-up.

    The scheduler fires what the rows say, so a schedule in code must reach its
    row before anything triggers the job. One job that cannot be synced (a preset
    the settings lack) is logged and skipped; the others still are. With
    ``using``, only the jobs living on that alias (the worker serving it).
    """
    entries = registry.registered()
    if using is not None and database.placed():
        entries = {n: e for n, e in entries.items() if job_alias(n) == using}
    formerly = set(
        Job.objects.using(database.alias(using))
        .filter(name__in=list(entries), schedule_in_code=True)
        .values_list("name", flat=True)
    )
    synced = []
    for name, entry in entries.items():
        if entry.spec.schedule or name in formerly:
            try:
                synced.append(sync(entry))
            except ValueError as exc:
                logger.error("job %s: its row cannot be synced: %s", name, exc)
    return synced


def is_synced_or_plain(name: str) -> bool:
    """Tell whether ``name`` needs no sync before a trigger (synced here, or no @job)."""
    return name in _synced or registry.get(name) is None


def synced_row(name: str, using: str | None = None) -> Job | None:
    """Return the ``Job`` row for a ``@job`` handler, synced once per process.

    The row is synced again whenever it is missing (deleted in the admin, or a
    test database flushed), so a registered handler can always be triggered.
    """
    entry = registry.get(name)
    if entry is None:
        return None
    using = using or job_alias(name)
    if name not in _synced:
        return sync(entry, using)
    return Job.objects.using(using).filter(name=name).first() or sync(entry, using)
