"""OJS over several aliases: find a run by its OJS id on any alias; keep an id unique;
list and count over every alias.

An OJS job id is a UUIDv7 in ``JobRun.ojs_id``, unique on each alias (its unique
index). It does not say its alias, as a run's integer id does: a read, a cancel,
an ack, a nack or a heartbeat looks it up on each alias, the first first (one
index lookup each). An enqueue refuses an id another alias's run holds. With one
alias each of these is the one query it always was.

Lists (dead letters, the admin API's jobs) and counts (queue and dead-letter
stats) read every alias and merge: a page takes the rows up to its end from each
alias, in the list's order, and keeps its slice; a total is the aliases' sum.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from django_strait.api.pagination import one
from django_strait.database import alias_for_queue, aliases
from django_strait.models import JobRun
from django_strait.ojs import errors
from django_strait.storage.rows import read


def find_run(key: Any) -> JobRun | None:
    """The run whose OJS id is ``key`` (with its job), on whichever alias holds it."""
    for where in aliases():
        run = one(JobRun.objects.using(where).select_related("job").filter(ojs_id=key))
        if run is not None:
            return run
    return None


def held_elsewhere(key: Any, using: str) -> str | None:
    """The alias other than ``using`` whose run holds OJS id ``key``; None if none.

    Checked before the insert: two enqueues of one id on two aliases at the same
    instant could both pass (no index spans two databases). Ids the server makes
    (UUIDv7) never meet; a client that chooses ids and sends one twice at once to
    queues of two databases can get two runs.
    """
    for where in aliases():
        if where != using and JobRun.objects.using(where).filter(ojs_id=key).exists():
            return where
    return None


def by_alias(queues: Iterable[str]) -> dict[str, list[str]]:
    """``queues`` grouped by the alias each lives on, in the aliases' order."""
    grouped: dict[str, list[str]] = {}
    for queue in queues:
        grouped.setdefault(alias_for_queue(queue), []).append(queue)
    return {where: grouped[where] for where in aliases() if where in grouped}


def batch_alias(requests: Sequence[Any]) -> str:
    """The alias of the batch's queues: a batch is all or none, one transaction of one
    database (several aliases: a batch whose queues are on two is refused, naming one)."""
    using = alias_for_queue(requests[0].queue)
    for i, request in enumerate(requests):
        if alias_for_queue(request.queue) != using:
            raise errors.invalid_request(
                f"jobs[{i}].options.queue",
                f"{request.queue!r} lives on database {alias_for_queue(request.queue)!r} and "
                "jobs[0]'s "
                f"queue on {using!r}; a batch is all or none, in one database: allowed: queues "
                "of one database per batch (STRAIT['QUEUE_DATABASES'])",
            )
    return using


def on_each(rows: Callable[[str], QuerySet]) -> list[QuerySet]:
    """``rows(alias)`` for every alias, the first first."""
    return [rows(where) for where in aliases()]


def summed(parts: Iterable[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """Counts by name, then by kind, of several aliases added up."""
    total: dict[str, dict[str, int]] = {}
    for part in parts:
        for name, counts in part.items():
            into = total.setdefault(name, dict.fromkeys(counts, 0))
            for kind, n in counts.items():
                into[kind] = into.get(kind, 0) + n
    return total


@dataclass(frozen=True)
class Page:
    """One page of a list read over every alias (a Paginator's ``get_page``)."""

    rows: list[Any]
    number: int
    total: int
    pages: int


def page_over(
    querysets: Sequence[QuerySet], number: int, per_page: int, key: Callable[[Any], Any]
) -> Page:
    """Page ``number`` of the ``querysets`` merged, each already in the list's order,
    newest (largest ``key``) first. A page past the last is the last, as Django's
    paginator answers; a row that cannot be read is left out (and logged)."""
    total = sum(rows.count() for rows in querysets)
    pages = max(1, -(-total // per_page))
    number = min(number, pages)
    start = (number - 1) * per_page
    if len(querysets) == 1:
        return Page(read(querysets[0][start : start + per_page]).rows, number, total, pages)
    heads = [read(rows[: start + per_page]).rows for rows in querysets]
    merged = heapq.merge(*heads, key=key, reverse=True)
    return Page(list(itertools.islice(merged, start, start + per_page)), number, total, pages)
