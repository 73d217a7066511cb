"""Choose runs to replay in bulk (``manage.py strait_replay``) and replay them.

The status change itself is ``transitions.replay_many``; this module only says
which runs, and reports what happened.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Q, QuerySet

from django_strait import transitions
from django_strait.database import alias, alias_for_id, aliases
from django_strait.models import Job, JobRun
from django_strait.rules.states import REPLAYABLE, RunStatus
from django_strait.storage import backend

logger = logging.getLogger(__name__)

#: How many run ids a report shows before "...".
SHOWN_IDS = 20


class SelectionError(ValueError):
    """A replay selection that names something that does not exist or is not allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_error_type_pattern(pattern: str) -> str:
    """Return ``pattern`` if it is an exact error type or a ``prefix.*``, else raise."""
    body = pattern.removesuffix(".*")
    if not pattern or not body or "*" in body or any(c.isspace() for c in pattern):
        raise SelectionError(
            "error_type",
            f"{pattern!r} is not an error type pattern; use an exact type (http.503) "
            "or a prefix ending in .* (http.*)",
        )
    return pattern


def error_type_condition(patterns: Iterable[str]) -> Q:
    """Return a filter matching any of ``patterns`` (exact, or ``prefix.*``).

    As for ``non_retryable_errors``: ``auth.*`` matches ``auth.expired``, not ``auth``.
    """
    condition = Q()
    for pattern in patterns:
        check_error_type_pattern(pattern)
        if pattern.endswith(".*"):
            condition |= Q(error_type__startswith=pattern[:-1])
        else:
            condition |= Q(error_type=pattern)
    return condition


@dataclass(frozen=True, slots=True)
class ReplaySelection:
    """Which runs to replay: every given criterion must hold (an AND)."""

    ids: tuple[int, ...] = ()
    jobs: tuple[str, ...] = ()
    error_types: tuple[str, ...] = ()
    statuses: tuple[str, ...] = (RunStatus.DEAD_LETTER,)

    def __post_init__(self) -> None:
        if not self.statuses:
            raise SelectionError("status", f"name at least one of {_replayable_list()}")
        for status in self.statuses:
            if status not in REPLAYABLE:
                raise SelectionError(
                    "status", f"{status!r} cannot be replayed; allowed: {_replayable_list()}"
                )
        for pattern in self.error_types:
            check_error_type_pattern(pattern)

    @property
    def is_everything(self) -> bool:
        """Return whether no criterion narrows the statuses (every run in them)."""
        return not (self.ids or self.jobs or self.error_types)

    def queryset(self, using: str | None = None) -> QuerySet[JobRun]:
        """Return the selected runs of alias ``using`` (default: the first), oldest first."""
        using = alias(using)
        runs = JobRun.objects.using(using).filter(status__in=self.statuses)
        if self.ids:
            runs = runs.filter(pk__in=self.ids)
        if self.jobs:
            runs = runs.filter(job__in=self._job_ids(using))
        if self.error_types:
            runs = runs.filter(error_type_condition(self.error_types))
        return runs.order_by("pk")

    def check_jobs(self) -> None:
        """Refuse a job name that no alias's job has."""
        found: set[str] = set()
        for where in aliases():
            jobs = Job.objects.using(where).filter(name__in=self.jobs)
            found.update(jobs.values_list("name", flat=True))
        missing = [name for name in self.jobs if name not in found]
        if missing:
            raise SelectionError("job", f"no job named {', '.join(map(repr, missing))}")

    def _job_ids(self, using: str) -> list[int]:
        jobs = Job.objects.using(using).filter(name__in=self.jobs)
        return list(jobs.values_list("pk", flat=True))


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What a replay selected and moved (nothing moves on a dry run)."""

    selected: int
    moved: int
    first_ids: tuple[int, ...]
    dry_run: bool
    by: str
    #: Ids asked for by number that were not selected -> why (their status, or missing).
    skipped: dict[int, str] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        """Selected runs that were no longer replayable when the update ran."""
        return 0 if self.dry_run else self.selected - self.moved


def replay(selection: ReplaySelection, *, by: str, dry_run: bool = False) -> ReplayReport:
    """Replay every run in ``selection`` (or only count them, on a dry run), on every alias
    (each alias's runs by its own storage)."""
    selection.check_jobs()
    ids: list[int] = []
    moved = 0
    for where in aliases():
        found = list(selection.queryset(where).values_list("pk", flat=True))
        if found and not dry_run:
            moved += transitions.replay_many(found, by=by, storage=backend(where))
        ids += found
    if not dry_run:
        logger.info("strait_replay: %s of %s selected runs replayed by %s", moved, len(ids), by)
    return ReplayReport(
        selected=len(ids),
        moved=moved,
        first_ids=tuple(ids[:SHOWN_IDS]),
        dry_run=dry_run,
        by=by,
        skipped=_skipped(selection, set(ids)),
    )


def _skipped(selection: ReplaySelection, selected: set[int]) -> dict[int, str]:
    unselected = [pk for pk in selection.ids if pk not in selected]
    statuses = statuses_of(unselected)
    return {pk: _why_not(statuses.get(pk), selection) for pk in unselected}


def statuses_of(ids: Iterable[int]) -> dict[int, str]:
    """The status of each run of ``ids`` that exists, each read on the alias its id names."""
    by_alias: dict[str, list[int]] = {}
    for pk in ids:
        where = alias_for_id(pk)
        if where is not None:
            by_alias.setdefault(where, []).append(pk)
    statuses: dict[int, str] = {}
    for where, some in by_alias.items():
        runs = JobRun.objects.using(where).filter(pk__in=some)
        statuses.update(runs.values_list("pk", "status"))
    return statuses


def _why_not(status: str | None, selection: ReplaySelection) -> str:
    if status is None:
        return "does not exist"
    if status not in selection.statuses:
        return f"is {status}"
    return "does not match the job or error type asked for"


def _replayable_list() -> str:
    return ", ".join(sorted(REPLAYABLE))
