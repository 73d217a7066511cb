"""External workers' transitions (OJS, docs/ojs.md): fetch, visibility, and the end of an attempt.

A fetch claims and starts runs of external-worker jobs in one transaction, as
the worker's ``claim_and_start`` does, and gives each a deadline; a claimed run
that has expired is dropped instead (discarded, no attempt spent). A heartbeat
moves deadlines on; an ack or nack is recorded through the same ``record`` as a
worker's attempt (attempt row, retry policy, webhooks, workflows).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping, Sequence

from django.utils import timezone

from django_strait.models import JobRun
from django_strait.storage import Claimed, RecordBatch, Recorded, Storage, backend, moves
from django_strait.storage import queues as queue_states
from django_strait.storage.values import Envelope, Record
from django_strait.transitions import sending
from django_strait.transitions.worker import record
from django_strait.transitions.workflows import moving_steps

#: A run's deadline from the run and its start (visibility timeout, timeout_ms).
Deadline = Callable[[Claimed, dt.datetime], dt.datetime]
#: Which of the claimed runs have expired and must not start (OJS ``expires_at``).
Expired = Callable[[Sequence[Claimed], dt.datetime], set[int]]
#: Most claims one fetch makes while it keeps finding expired runs.
FETCH_TRIES = 5


def fetch(
    worker_id: str,
    *,
    queues: Sequence[str],
    limit: int,
    deadline: Deadline,
    expired: Expired = lambda runs, now: set(),
    storage: Storage | None = None,
) -> list[Claimed]:
    """Claim and start up to ``limit`` due external runs, the first queue first; set deadlines."""
    storage = storage or backend()
    queues = queue_states.unpaused(storage.alias, queues)
    started: list[Claimed] = []
    dropped: list[JobRun] = []
    if not queues:
        return started
    with storage.claim_transaction():
        now = timezone.now()
        queues, room = _within_rates(storage, queues, limit, now)
        for _ in range(FETCH_TRIES):
            claimed = storage.claim_external(
                worker_id, queues=queues, limit=room - len(started), now=now
            )
            gone = expired(claimed, now)
            dropped += _drop(storage, worker_id, gone, now)
            started += storage.start(worker_id, [r for r in claimed if r.id not in gone], now=now)
            if not gone or len(started) >= room:
                break
        # From the start as recorded (the database's clock on PostgreSQL).
        deadlines = {run.id: deadline(run, run.started_at or now) for run in started}
        storage.set_deadlines(worker_id, deadlines, now=now)
    sending.send_started(started, None, using=storage.alias)
    sending.send_changed(dropped)
    return started


def _within_rates(
    storage: Storage, queues: Sequence[str], limit: int, now: dt.datetime
) -> tuple[list[str], int]:
    """The queues a fetch may take from, and how many runs, under the queues' rate limits
    (``storage.queues``; a limited queue with no room left is left out)."""
    if not queue_states.limited(storage.alias):
        return list(queues), limit
    open_queues = []
    for queue in queues:
        room = queue_states.rate_room(storage.alias, queue, now)
        if room is None or room > 0:
            open_queues.append(queue)
            if room is not None:
                limit = min(limit, room)
    return open_queues, limit if open_queues else 0


def fetch_at_once(
    worker_id: str, *, queue: str, limit: int, visible_ms: int, storage: Storage | None = None
) -> tuple[list[tuple], bool]:
    """Claim and start up to ``limit`` plain runs of ``queue`` in one statement, visible for
    ``visible_ms`` (``Storage.fetch_external``: PostgreSQL's, for the OJS fast door).

    Return their rows and whether a run that is not plain (an expiry, timeouts of its
    own, no OJS id yet) blocked it: then nothing changed, and :func:`fetch` is the way.
    """
    taken, blocked = fetch_together(queue, [(worker_id, limit, visible_ms)], storage=storage)
    return taken[0], blocked


def fetch_together(
    queue: str, asks: Sequence[tuple[str, int, int]], *, storage: Storage | None = None
) -> tuple[list[list[tuple]], bool]:
    """:func:`fetch_at_once` for several fetches of ``queue`` (each ``(worker, limit,
    visible_ms)``) in one statement: the runs in claim order go to the first fetch
    until it has its ``limit``, then to the next. Return each fetch's rows (in the order
    of ``asks``), and whether a run that is not plain blocked them all (nothing changed).
    """
    storage = storage or backend()
    if queue in queue_states.paused(storage.alias):
        return [[] for _ in asks], False
    if queue in queue_states.limited(storage.alias):
        return [[] for _ in asks], True  # the ordinary fetch, which counts the queue's starts
    slots: list[tuple[str, int]] = []
    owner: list[int] = []
    for i, (worker, limit, visible_ms) in enumerate(asks):
        slots += [(worker, visible_ms)] * limit
        owner += [i] * limit
    if not slots:
        return [[] for _ in asks], False
    # Again if a queued run was canceled (moved to history) between the read and its lock.
    rows, blocked = moves.rerun_moved(
        lambda: storage.fetch_external(slots, queue=queue)  # type: ignore[attr-defined]
    )
    taken: list[list[tuple]] = [[] for _ in asks]
    for row in rows:
        taken[owner[row[0]]].append(row[1:])
    started = [Claimed(row[1], row[2], None, row[6], row[7], row[8], None) for row in rows]
    sending.send_started(started, None, using=storage.alias)
    return taken, blocked


def _drop(storage: Storage, worker_id: str, run_ids: set[int], now: dt.datetime) -> list[JobRun]:
    """Put expired claimed runs back and drop them: discarded, no attempt spent."""
    if not run_ids:
        return []
    storage.unclaim(worker_id, sorted(run_ids), now=now)
    with moving_steps(storage) as moved:
        dropped = [storage.drop(rid, now=now) for rid in sorted(run_ids)]
        moved += sorted(run_ids)
    return dropped


def extend(
    worker_id: str, deadlines: Mapping[int, dt.datetime], *, storage: Storage | None = None
) -> list[int]:
    """Move the deadlines of runs ``worker_id`` holds on (a heartbeat); return the runs that moved."""
    return (storage or backend()).set_deadlines(worker_id, deadlines, now=timezone.now())


def finish(worker_id: str, done: Record, *, storage: Storage | None = None) -> Recorded:
    """Record the end of an external worker's attempt (ack or nack) held by ``worker_id``."""
    return record(RecordBatch(worker_id=worker_id, records=[done]), storage=storage)


def finish_together(done: Sequence[Record], *, storage: Storage | None = None) -> Recorded:
    """Record the ends of several external workers' attempts in one statement (the OJS fast
    door's acks, ``ojs.together``): each record names the worker that holds its attempt."""
    return record(RecordBatch(worker_id=done[0].worker, records=done), storage=storage)


def name(ids: Mapping[int, uuid.UUID], *, storage: Storage | None = None) -> list[int]:
    """Give fetched runs that have no OJS id (a schedule's, ``trigger()``'s) theirs."""
    return (storage or backend()).set_external_ids(ids) if ids else []


def note_retry_delay(run_id: int, delay: float, *, storage: Storage | None = None) -> bool:
    """Keep in a nacked run's envelope the delay its retry was given (OJS shows it)."""
    return (storage or backend()).set_external_retry_delay(run_id, int(delay * 1000))


def report_progress(
    run_id: int, worker_id: str, attempt: int, progress: dict, *, storage: Storage | None = None
) -> dict | None:
    """Keep an external worker's progress on the attempt it holds (OJS ext-progress)."""
    return (storage or backend()).set_external_progress(run_id, worker_id, attempt, progress)


def give_envelopes(envelopes: Sequence[Envelope], *, storage: Storage | None = None) -> None:
    """Give the runs a batch enqueue just inserted their OJS ids, envelopes and due times."""
    if envelopes:
        (storage or backend()).set_external_envelopes(envelopes)
