"""What happens to a run next: the one home of the retry and dead-letter decision.

Oban's perform -> normalize -> record: executors say what happened
(:class:`~django_strait.rules.outcome.Outcome`), this module says what it means for the
run under its retry policy, and storage applies it. Every path that ends an
attempt decides here: the worker (:func:`after_attempt`; :func:`after_oom` for a
process killed for memory), the reaper for a run whose worker was lost
(:func:`after_lost`), an external worker's nack (:func:`after_nack`) and a
webhook delivery's answer (:func:`after_delivery`).
A run's policy is resolved one way (:func:`run_policy`), with one fallback for a
stored policy that cannot be read. Storage never imports this module: it is
handed decisions already made (docs/architecture.md).

``decide`` and the ``after_*`` rules are pure: their inputs and ``now`` in, a
:class:`Decision` out. Only :func:`run_policy` reads a setting
(``STRAIT["DEFAULT_RETRY"]``); it and :func:`safely` log what they fall back from.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django_strait.conf import strait_settings
from django_strait.dispatch.failover import fails_over_at_once
from django_strait.rules.bounds import ERROR_MAX_CHARS, trim
from django_strait.rules.outcome import LOST_ERROR_TYPE, Action, Kind, Outcome, failure
from django_strait.rules.presets import Chain
from django_strait.rules.retry import (
    PolicyError,
    RetryPolicy,
    is_non_retryable,
    resolve,
    retry_delay_for,
)
from django_strait.rules.states import Transition

__all__ = [
    "ERROR_MAX_CHARS",
    "FALLBACK_RETRY_SECONDS",
    "LOST_ERROR_TYPE",
    "Decision",
    "after_attempt",
    "after_delivery",
    "after_lost",
    "after_nack",
    "after_oom",
    "decide",
    "run_policy",
    "safely",
    "trim",
]

logger = logging.getLogger(__name__)

#: Retry decision used when deciding itself failed (a bug, not the run's fault).
FALLBACK_RETRY_SECONDS = 60.0

_EXHAUSTED = {"dead_letter": Transition.DEAD_LETTER, "discard": Transition.DISCARD}
_ACTIONS = {
    Action.DISCARD: Transition.DISCARD,
    Action.DEAD_LETTER: Transition.DEAD_LETTER,
    Action.FAIL: Transition.FAIL,
}


@dataclass(frozen=True, slots=True)
class Decision:
    """The run's next transition and, for a retry, when it becomes due."""

    transition: Transition
    available_at: dt.datetime | None = None
    delay: float | None = None


def decide(
    outcome: Outcome,
    *,
    budget_used: int,
    policy: RetryPolicy,
    now: dt.datetime,
    rng: random.Random,
    endpoints: tuple[str, ...] = (),
) -> Decision:
    """Return what happens to a run whose attempt number ``budget_used`` gave ``outcome``.

    ``endpoints``: an HTTP job's endpoints, primary first; a failed call that
    should fail over at once (``dispatch.failover``) is retried now, on the next one.
    """
    if outcome.kind is Kind.SUCCEEDED:
        return Decision(Transition.COMPLETE)
    if outcome.kind is Kind.ACTION and outcome.action in _ACTIONS:
        return Decision(_ACTIONS[outcome.action])
    retryable = outcome.kind is not Kind.NON_RETRYABLE and not (
        outcome.kind is Kind.RETRYABLE
        and is_non_retryable(outcome.error_type, policy.non_retryable_errors)
    )
    if budget_used >= policy.max_attempts:
        return Decision(_EXHAUSTED[policy.on_exhaustion])
    if fails_over_at_once(outcome, endpoints, non_retryable=not retryable):
        return Decision(Transition.RETRY, now, 0.0)
    if not retryable:
        return Decision(_EXHAUSTED[policy.on_exhaustion])
    delay = retry_delay_for(policy, budget_used, requested=outcome.retry_after, rng=rng)
    return Decision(Transition.RETRY, now + dt.timedelta(seconds=delay), delay)


# -- one rule per way an attempt ends ---------------------------------------------------


def after_attempt(
    outcome: Outcome,
    *,
    budget_used: int,
    policy: RetryPolicy,
    now: dt.datetime,
    rng: random.Random,
    endpoints: tuple[str, ...] = (),
) -> Decision:
    """A worker's attempt returned ``outcome``: the rule itself (:func:`decide`)."""
    return decide(
        outcome, budget_used=budget_used, policy=policy, now=now, rng=rng, endpoints=endpoints
    )


def after_lost(
    *,
    budget_used: int,
    cancel_requested: bool,
    past_deadline: bool,
    policy: RetryPolicy,
    now: dt.datetime,
    rng: random.Random,
) -> Decision:
    """A run's worker was lost (the reaper): its lost attempt counts.

    Cancel was asked while the attempt ran: the attempt has now ended, so the run
    is canceled, as it would have been when the attempt returned. Otherwise the
    same rule as an attempt that failed on a worker: a lost worker is a retryable
    error (unless the policy lists ``worker.lost`` as non-retryable). An external
    worker's run whose visibility deadline passed (``past_deadline``) is due again
    at once.
    """
    if cancel_requested:
        return Decision(Transition.CANCEL)
    lost = failure(LOST_ERROR_TYPE, "worker lost", attempt_outcome="system_failed")
    decision = decide(lost, budget_used=budget_used, policy=policy, now=now, rng=rng)
    if past_deadline and decision.transition is Transition.RETRY:
        return Decision(Transition.RETRY, now, 0.0)
    return decision


def after_nack(
    *,
    error_type: str,
    message: str,
    retryable: bool,
    requeue: bool,
    budget_used: int,
    policy: RetryPolicy,
    now: dt.datetime,
    rng: random.Random,
) -> Decision:
    """An external worker failed its attempt (OJS nack); ``requeue`` asks for the run again now,
    which its policy grants while attempts are left."""
    if requeue and budget_used < policy.max_attempts:
        return Decision(Transition.RETRY, now, 0.0)
    outcome = failure(error_type, message, retryable=retryable)
    return decide(outcome, budget_used=budget_used, policy=policy, now=now, rng=rng)


def after_oom(preset: str, chain: Chain, now: dt.datetime) -> tuple[Decision, str | None]:
    """An attempt at ``preset`` was killed for memory (docs/process-execution.md): retry now at
    the next preset (the attempt spends no budget), or dead_letter at the last; and the next."""
    following = chain.after(preset)
    if following is None:
        return Decision(Transition.DEAD_LETTER), None
    return Decision(Transition.RETRY, now, 0.0), following


def after_delivery(
    outcome: Outcome, *, attempt: int, policy: RetryPolicy, now: dt.datetime, rng: random.Random
) -> Decision:
    """A webhook delivery's ``attempt`` got ``outcome``: COMPLETE (delivered), RETRY with its
    due time, or an end (failed), under the delivery policy (``dispatch.events.policy``)."""
    return decide(outcome, budget_used=attempt, policy=policy, now=now, rng=rng)


def safely(
    rule: Callable[[], Decision], *, now: dt.datetime, run_id: int, **context: Any
) -> Decision:
    """Return ``rule()``; if deciding raises (a bug, not the run's fault), retry the run in a
    minute, logged: an attempt's end is never lost to a failed decision."""
    try:
        return rule()
    except Exception:
        logger.exception(
            "deciding run %s failed; retrying it later", run_id,
            extra={"run_id": run_id, **context},
        )  # fmt: skip
        later = now + dt.timedelta(seconds=FALLBACK_RETRY_SECONDS)
        return Decision(Transition.RETRY, later, FALLBACK_RETRY_SECONDS)


# -- a run's policy ----------------------------------------------------------------------


def run_policy(
    job: Any,
    max_attempts: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    job_policy: RetryPolicy | None = None,
    run_id: int | None = None,
) -> RetryPolicy:
    """Return a run's retry policy: ``STRAIT["DEFAULT_RETRY"]`` < its job < the run's
    ``max_attempts`` and retry overrides.

    ``job`` is the job row (None when it cannot be read: the defaults). A stored
    policy that is not valid (written around validation) must not keep a run
    stuck: invalid run overrides give the job's policy (``job_policy`` if the
    caller has it resolved), an invalid job the defaults; each is logged.
    """
    defaults = strait_settings.DEFAULT_RETRY
    if job is None:
        return defaults
    if max_attempts is not None or overrides:
        try:
            return resolve(job, max_attempts, overrides, defaults=defaults)
        except PolicyError as exc:
            logger.error(
                "%s of job %s has an invalid retry override (%s); using the job's policy",
                "a run" if run_id is None else f"run {run_id}", getattr(job, "name", "?"), exc,
                extra={"run_id": run_id},
            )  # fmt: skip
    if job_policy is not None:
        return job_policy
    try:
        return resolve(job, defaults=defaults)
    except PolicyError as exc:
        logger.error(
            "job %s has an invalid retry policy (%s); using the defaults",
            getattr(job, "name", "?"), exc,
        )  # fmt: skip
        return defaults
