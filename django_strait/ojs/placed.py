"""OJS over several aliases: find a run by its OJS id on any alias; keep an id unique;
list and count over every alias.

An OJS job id is a UUIDv7 in ``JobRun.ojs_id``, unique on each alias (its unique
index). It does not say its alias, as a run's integer id does: a read, a cancel,
an ack, a nack or a heartbeat looks it up on each alias, the first first (one
index lookup each). An enqueue refuses an id another alias's run holds; no index
spans two databases, so an enqueue of ids a client chose checks and inserts them
while it holds their locks on the control database (``ids_held``). With one
alias each of these is the one query it always was.

Lists (dead letters, the admin API's jobs) and counts (queue and dead-letter
stats) read every alias and merge: a page takes the rows up to its end from each
alias, in the list's order, and keeps its slice; a total is the aliases' sum.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models import QuerySet

from django_strait.api.pagination import one
from django_strait.database import alias_for_queue, aliases, control_alias, placed
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


def chosen(requests: Iterable[Any]) -> list[Any]:
    """The OJS ids among ``requests`` (``inputs.Enqueue``) that their client chose."""
    return [r.id for r in requests if r.chosen_id]


def held_elsewhere(key: Any, using: str) -> str | None:
    """The alias other than ``using`` whose run holds OJS id ``key``; None if none.

    Checked before the insert, inside ``ids_held(key)``: two enqueues of one id on
    two aliases at once take turns, and the second finds the first's run.
    """
    for where in aliases():
        if where != using and JobRun.objects.using(where).filter(ojs_id=key).exists():
            return where
    return None


#: The advisory locks' first key (``'OJS1'``); the second is one of ``ID_LOCKS`` buckets.
ID_LOCK_SPACE = 0x4F4A5331
#: Buckets an OJS id's lock falls in: a batch of ids takes at most this many locks.
ID_LOCKS = 256


@contextmanager
def ids_held(keys: Iterable[Any]) -> Iterator[None]:
    """Hold the locks of OJS ids ``keys`` (those a client chose) while checking that no
    other alias holds them and inserting them; given back when the block ends, after
    the insert has committed (or in its transaction, when it is the control database's).

    Several aliases only, with PostgreSQL as the control database: a transaction
    advisory lock per bucket of ids there, taken in the buckets' order so that two
    batches never wait on each other in a circle. With one alias the unique index
    does it; with an SQLite control database nothing is held (documented).
    """
    given = [k for k in keys if isinstance(k, uuid.UUID)]
    control = control_alias()
    if not given or not placed() or connections[control].vendor != "postgresql":
        yield
        return
    with transaction.atomic(using=control), connections[control].cursor() as cursor:
        for bucket in sorted({k.int % ID_LOCKS for k in given}):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [ID_LOCK_SPACE, bucket])
        yield


def by_alias(queues: Iterable[str]) -> dict[str, list[str]]:
    """``queues`` grouped by the alias each lives on, in the aliases' order."""
    grouped: dict[str, list[str]] = {}
    for queue in queues:
        grouped.setdefault(alias_for_queue(queue), []).append(queue)
    return {where: grouped[where] for where in aliases() if where in grouped}


def batch_alias(requests: Sequence[Any]) -> str:
    """The alias of the batch's queues: a batch is all or none, one transaction of one
    database (several aliases: a batch whose queues are on two is refused, naming one)."""
    return one_alias(requests, "jobs", "a batch is all or none, in one database")


def one_alias(requests: Sequence[Any], key: str, why: str) -> str:
    """The alias of ``requests``' queues (``key[i]`` in the body), which must be one:
    else a 400 naming the first request on another and ``why``."""
    using = alias_for_queue(requests[0].queue)
    for i, request in enumerate(requests):
        where = alias_for_queue(request.queue)
        if where != using:
            raise errors.invalid_request(
                f"{key}[{i}].options.queue",
                f"{request.queue!r} lives on database {where!r} and {key}[0]'s queue on "
                f"{using!r}; {why}: allowed: queues of one database "
                "(STRAIT['QUEUE_DATABASES'])",
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
