"""OJS over several aliases: find a run by its OJS id on any alias; keep an id unique.

An OJS job id is a UUIDv7 in ``JobRun.ojs_id``, unique on each alias (its unique
index). It does not say its alias, as a run's integer id does: a read, a cancel,
an ack, a nack or a heartbeat looks it up on each alias, the first first (one
index lookup each). An enqueue refuses an id another alias's run holds. With one
alias each of these is the one query it always was.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django_strait.api.pagination import one
from django_strait.database import alias_for_queue, aliases
from django_strait.models import JobRun
from django_strait.ojs import errors


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
