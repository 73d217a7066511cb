"""Queue depth and lag read from the runs table: one read shared by the metrics view, the admin and the sampler.

The queue sampler (a duty) stores these figures each minute, the Prometheus
view reports them at scrape time, the admin's overview shows them; the read
lives here, below all three, so that none of them imports another.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Min, Q

from django_strait.models import JobRun
from django_strait.rules.states import RunStatus
from django_strait.storage.rows import readable_instants


@dataclass(frozen=True, slots=True)
class QueueGauge:
    """One queue's queued runs: all of them, those due now, and how late the oldest due is."""

    queue: str
    depth: int
    due: int
    lag_seconds: float


def queued_by_queue(using: str, now: dt.datetime):
    """The queued runs' per-queue aggregate: one pass over the claim index."""
    due = Q(available_at__lte=now)
    # A due time no reader can hold ('-infinity', written by hand) is counted, not aged.
    aged = due & readable_instants("available_at")
    return (
        JobRun.objects.using(using)
        .filter(status=RunStatus.QUEUED)
        .values("queue")
        .annotate(
            depth=Count("id"), due=Count("id", filter=due), oldest=Min("available_at", filter=aged)
        )
        .order_by()
    )


def queue_gauges(using: str, now: dt.datetime, known: set[str]) -> tuple[QueueGauge, ...]:
    """Depth, due count and lag per queue; ``known`` queues show as empty, not absent."""
    # The lag comes from the same pass as the count: with priorities, the oldest
    # due run is not at the head of the claim order, so a LIMIT 1 would miss it.
    found = {
        row["queue"]: QueueGauge(
            row["queue"],
            row["depth"],
            row["due"],
            max((now - row["oldest"]).total_seconds(), 0.0) if row["oldest"] else 0.0,
        )
        for row in queued_by_queue(using, now)
    }
    # Queues of known jobs report 0 rather than vanish when they empty.
    empty = {q: QueueGauge(q, 0, 0, 0.0) for q in known if q not in found}
    return tuple(sorted({**empty, **found}.values(), key=lambda g: g.queue))


def merged_by_queue(gauges: Iterable[QueueGauge]) -> tuple[QueueGauge, ...]:
    """One gauge per queue from several aliases' gauges, by name: a queue with runs on
    two aliases has its depths and due counts added and the larger lag."""
    by_queue: dict[str, QueueGauge] = {}
    for gauge in gauges:
        seen = by_queue.get(gauge.queue)
        by_queue[gauge.queue] = gauge if seen is None else QueueGauge(
            gauge.queue, seen.depth + gauge.depth, seen.due + gauge.due,
            max(seen.lag_seconds, gauge.lag_seconds),
        )  # fmt: skip
    return tuple(sorted(by_queue.values(), key=lambda g: g.queue))
