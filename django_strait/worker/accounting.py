"""What a batch of ended attempts tells about endpoints: health samples and circuit results.

Both ride on the batch's record (``RecordBatch.health``, ``RecordBatch.circuits``):
one round trip writes the runs, their endpoints' health and their circuits. The
inline worker of ``django_strait.testing`` builds its batches the same way.

On several databases they have one home instead, ``STRAIT["CONTROL_DATABASE"]``
(:func:`write_shared`): written after the runs' record, in writes of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.utils import timezone

from django_strait.conf import strait_settings
from django_strait.models import AttemptOutcome
from django_strait.rules.resilience import health as endpoint_health
from django_strait.services.breaker import Attempted, CircuitBreaker
from django_strait.storage import Record, RecordBatch, Recorded, Storage
from django_strait.worker.catalog import Catalog

logger = logging.getLogger(__name__)


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


def write_shared(
    control: Storage, circuits: CircuitBreaker, chunk: Sequence[Record], catalog: Catalog
) -> bool:
    """Fold ``chunk``'s health samples and circuit results on the control database (the
    breaker's storage); False when it did not answer: they are dropped, and logged.

    The runs' record has committed by then on their own alias: a control database
    that is away costs the fleet these samples, never a run or its result.
    """
    samples = health_samples(chunk, catalog)
    attempted = [Attempted(r.endpoint, r.error_type, r.status_code) for r in chunk if r.endpoint]
    if not attempted:
        return True
    try:
        control.fold_health(samples)
        circuits.account(
            attempted, now=timezone.now(), threshold=strait_settings.CIRCUIT_FAILURE_THRESHOLD
        )
    except Exception as exc:
        logger.warning(
            "endpoint health and circuit results of %s attempts not written: the control "
            "database %r did not answer (%s: %s)",
            len(attempted), control.alias, type(exc).__name__, str(exc).split("\n", 1)[0],
        )  # fmt: skip
        return False
    return True
