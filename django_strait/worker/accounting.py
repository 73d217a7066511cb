"""What a batch of ended attempts tells about endpoints: health samples and circuit counts.

The worker records each batch with the health samples of its HTTP answers (in
the record's statement), then counts them against their endpoints' circuits.
The inline worker of ``django_strait.testing`` does the same on the caller's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.utils import timezone

from django_strait.conf import strait_settings
from django_strait.models import AttemptOutcome
from django_strait.resilience import health as endpoint_health
from django_strait.resilience.breaker import Attempted, CircuitBreaker
from django_strait.storage import Record
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


def account_circuits(circuits: CircuitBreaker, chunk: Sequence[Record]) -> None:
    """Count the batch's HTTP outcomes against their endpoints' circuits."""
    try:
        circuits.account(
            (Attempted(r.endpoint, r.error_type, r.status_code) for r in chunk if r.endpoint),
            now=timezone.now(),
            threshold=strait_settings.CIRCUIT_FAILURE_THRESHOLD,
        )
    except Exception:
        # The results are recorded: a missed count only delays a circuit's opening.
        logger.exception("counting %s results against circuits failed", len(chunk))
