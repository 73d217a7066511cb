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
from django_strait.models import Job, JobRun
from django_strait.rules.states import REPLAYABLE, RunStatus

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

    def queryset(self) -> QuerySet[JobRun]:
        """Return the selected runs, oldest first."""
        runs = JobRun.objects.filter(status__in=self.statuses)
        if self.ids:
            runs = runs.filter(pk__in=self.ids)
        if self.jobs:
            runs = runs.filter(job__in=self._job_ids())
        if self.error_types:
            runs = runs.filter(error_type_condition(self.error_types))
        return runs.order_by("pk")

    def _job_ids(self) -> list[int]:
        found = dict(Job.objects.filter(name__in=self.jobs).values_list("name", "pk"))
        missing = [name for name in self.jobs if name not in found]
        if missing:
            raise SelectionError("job", f"no job named {', '.join(map(repr, missing))}")
        return list(found.values())


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
    """Replay every run in ``selection`` (or only count them, on a dry run)."""
    ids = list(selection.queryset().values_list("pk", flat=True))
    moved = 0 if dry_run else transitions.replay_many(ids, by=by)
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
    statuses = dict(JobRun.objects.filter(pk__in=unselected).values_list("pk", "status"))
    return {pk: _why_not(statuses.get(pk), selection) for pk in unselected}


def _why_not(status: str | None, selection: ReplaySelection) -> str:
    if status is None:
        return "does not exist"
    if status not in selection.statuses:
        return f"is {status}"
    return "does not match the job or error type asked for"


def _replayable_list() -> str:
    return ", ".join(sorted(REPLAYABLE))
