"""Map one attempt's outcome to the run's next transition: a pure function.

Oban's perform -> normalize -> record: executors say what happened
(:class:`~django_strait.outcome.Outcome`), this module says what it means for the
run under its retry policy, and the recorder writes it.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass

from django_strait.dispatch.failover import fails_over_at_once
from django_strait.outcome import Action, Kind, Outcome
from django_strait.retry import RetryPolicy, is_non_retryable, retry_delay_for
from django_strait.states import Transition

#: Error messages kept on a run or attempt (the full text can be long tracebacks).
ERROR_MAX_CHARS = 4000

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


def trim(text: str, limit: int = ERROR_MAX_CHARS) -> str:
    """Cut ``text`` to ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    return text[: limit - 20] + f"... [{len(text) - limit + 20} chars cut]"
