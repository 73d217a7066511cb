"""What a batch of ended attempts tells about endpoints: health samples and circuit results.

Both ride on the batch's record (``RecordBatch.health``, ``RecordBatch.circuits``):
one round trip writes the runs, their endpoints' health and their circuits. The
inline worker of ``django_strait.testing`` builds its batches the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from django_strait.conf import strait_settings
from django_strait.models import AttemptOutcome
from django_strait.rules.resilience import health as endpoint_health
from django_strait.services.breaker import Attempted, CircuitBreaker
from django_strait.storage import Record, RecordBatch, Recorded
from django_strait.worker.catalog import Catalog


def health_samples(chunk: Sequence[Record], catalog: Catalog) -> list[endpoint_health.Sample]:
    """Summarize the batch's HTTP answers per endpoint (written with the results)."""
    answers = [
        endpoint_health.Answer(
            r.endpoint,
            r.outcome == AttemptOutcome.SUCCEEDED,
            r.error_type,
            r.status_code,
            r.duration_ms,
            catalog.timeout_of(r.job_id),
        )
        for r in chunk
        if r.endpoint
    ]
    if not answers:
        return []
    return endpoint_health.summarize(answers, alpha=strait_settings.HEALTH_EWMA_ALPHA)


def batch_of(
    worker_id: str, chunk: Sequence[Record], catalog: Catalog, circuits: CircuitBreaker
) -> RecordBatch:
    """The record of ``chunk``, with its endpoints' health samples and circuit results."""
    attempted = (Attempted(r.endpoint, r.error_type, r.status_code) for r in chunk if r.endpoint)
    return RecordBatch(
        worker_id, chunk, health_samples(chunk, catalog), circuits=circuits.worth(attempted)
    )


def accounted(circuits: CircuitBreaker, done: Recorded) -> None:
    """Keep in the breaker's cache the circuits the record wrote."""
    if done.circuits:
        circuits.accounted(done.circuits)
