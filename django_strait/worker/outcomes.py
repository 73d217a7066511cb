"""What an attempt's outcome means for its run: the record the completer writes.

Oban's perform -> normalize -> record: the executor said what happened
(``Outcome``), :mod:`~django_strait.transitions.decisions` says what it means under the run's
retry policy, and :func:`to_record` puts both into the ``Record`` of the attempt.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from decimal import Decimal

from django_strait.conf import strait_settings
from django_strait.models import AttemptOutcome
from django_strait.rules.outcome import Outcome
from django_strait.rules.presets import OOM_OUTCOME
from django_strait.storage.values import ZERO, Claimed, Record
from django_strait.transitions import decisions
from django_strait.transitions.decisions import Decision, after_oom, trim
from django_strait.worker.catalog import Catalog, JobInfo


def to_record(
    run: Claimed,
    info: JobInfo,
    outcome: Outcome,
    *,
    begun: float,
    now: dt.datetime,
    catalog: Catalog,
    rng: random.Random,
) -> Record:
    """Return the record of ``run``'s attempt that gave ``outcome`` (it began at ``begun``)."""
    if outcome.attempt_outcome == OOM_OUTCOME and run.preset:
        decision, moved_to = after_oom(run.preset, strait_settings.PRESETS, now)
    else:
        decision, moved_to = _decide(run, info, outcome, now, catalog, rng), None
    return Record(
        run_id=run.id,
        attempt=run.attempt,
        transition=decision.transition,
        started_at=run.started_at or now,
        finished_at=now,
        duration_ms=outcome.duration_ms or int((time.monotonic() - begun) * 1000),
        outcome=outcome.attempt_outcome,
        available_at=decision.available_at,
        result=outcome.result if outcome.succeeded else None,
        error=trim(outcome.error),
        error_type=outcome.error_type,
        endpoint=outcome.endpoint,
        status_code=outcome.status_code,
        response_excerpt=trim(outcome.response_excerpt, 1000),
        job=info.name,
        job_id=run.job_id,
        project_id=info.row.project_id,
        reserved_cost=run.reserved_cost,
        cost=attempt_cost(run, info, outcome),
        step_run_id=run.step_run_id,
        step=run.step,
        preset=run.preset,
        run_preset=moved_to or run.preset,
        free_attempt=moved_to is not None,
        recommend=(moved_to or run.preset) if outcome.attempt_outcome == OOM_OUTCOME else "",
    )


def _decide(
    run: Claimed,
    info: JobInfo,
    outcome: Outcome,
    now: dt.datetime,
    catalog: Catalog,
    rng: random.Random,
) -> Decision:
    def rule() -> Decision:
        return decisions.after_attempt(
            outcome,
            budget_used=run.budget_used,
            policy=catalog.policy(info, run.max_attempts, run.retry_overrides),
            now=now,
            rng=rng,
            endpoints=info.endpoints,
        )

    return decisions.safely(rule, now=now, run_id=run.id, job=info.name, attempt=run.attempt)


def attempt_cost(run: Claimed, info: JobInfo, outcome: Outcome) -> Decimal | None:
    """What an attempt of a budgeted job cost: the endpoint's word, else the estimate.

    A call that never reached its endpoint (refused, no connection) costs nothing.
    """
    if run.reserved_cost is None:
        return None
    if outcome.cost is not None:
        return outcome.cost
    reached = (
        not info.row.endpoint_url
        or outcome.status_code is not None
        or outcome.attempt_outcome == AttemptOutcome.TIMED_OUT
    )
    return info.row.estimated_cost if reached else ZERO
