"""What the commands share about selecting: names of jobs and ids of runs that must exist."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.management.base import CommandError

from django_strait.database import alias
from django_strait.models import Job
from django_strait.services.replaying import statuses_of

#: How many existing job names an error about an unknown one lists.
NAMES_SHOWN = 10


def require_jobs(names: Sequence[str], *, using: Sequence[str] | None = None) -> None:
    """Raise a ``CommandError`` naming every name in ``names`` that no job has (on the
    aliases ``using``; default: the first)."""
    known: set[str] = set()
    for where in using or (alias(),):
        jobs = Job.objects.using(where).filter(name__in=list(names))
        known.update(jobs.values_list("name", flat=True))
    missing = [name for name in dict.fromkeys(names) if name not in known]
    if not missing:
        return
    names_of = (
        Job.objects.using(where).order_by("name").values_list("name", flat=True)[: NAMES_SHOWN + 1]
        for where in using or (alias(),)
    )
    some = sorted({name for found in names_of for name in found})[: NAMES_SHOWN + 1]
    shown = ", ".join(some[:NAMES_SHOWN]) + (", ..." if len(some) > NAMES_SHOWN else "")
    allowed = f"the name of a job ({shown})" if some else "the name of a job (there are none)"
    raise CommandError(f"--job: no job named {', '.join(map(repr, missing))}; allowed: {allowed}")


def require_runs(ids: Sequence[int]) -> None:
    """Raise a ``CommandError`` naming every id in ``ids`` that no run has."""
    found = set(statuses_of(ids))  # each id on the alias it names
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise CommandError(f"no run has the id {', '.join(missing)}; nothing was done")


def add_database_option(parser: Any, verb: str, default: str) -> None:
    """``--database ALIAS`` (repeatable) of a command that acts on each alias of
    ``STRAIT["DATABASES"]``: "<verb> only this alias ...; Default: <default>"."""
    parser.add_argument(
        "--database", dest="databases", action="append", default=[], metavar="ALIAS",
        help=f"{verb} only this alias of STRAIT['DATABASES']; repeat for several. "
        f"Default: {default}",
    )  # fmt: skip
