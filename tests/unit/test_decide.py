"""decide(): an attempt's outcome under a policy -> the run's next transition."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from django_strait.conf import strait_settings
from django_strait.rules.outcome import Action, action, failure, success
from django_strait.rules.retry import BUILTIN, JOB_COLUMNS, merge
from django_strait.rules.states import Transition
from django_strait.transitions.decisions import (
    FALLBACK_RETRY_SECONDS,
    Decision,
    after_delivery,
    after_lost,
    after_nack,
    decide,
    run_policy,
    safely,
    trim,
)

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
POLICY = merge(BUILTIN, {"jitter": 0, "initial_delay": 10, "max_attempts": 3})


def run_decide(outcome, budget_used=1, policy=POLICY):
    return decide(outcome, budget_used=budget_used, policy=policy, now=NOW, rng=random.Random(1))


def test_decide__success_completes():
    assert run_decide(success("x")).transition is Transition.COMPLETE


def test_decide__retryable_failure_retries_after_the_policy_delay():
    d = run_decide(failure("http.503", "busy"), budget_used=2)

    assert d.transition is Transition.RETRY
    assert d.available_at == NOW + dt.timedelta(seconds=20)  # 10 * 2^(2-1)


def test_decide__retry_after_replaces_the_policy_delay():
    d = run_decide(failure("http.429", "slow down", retry_after=42.0))

    assert d.available_at == NOW + dt.timedelta(seconds=42)


def test_decide__exhausted_budget_dead_letters():
    assert run_decide(failure("http.503", "x"), budget_used=3).transition is Transition.DEAD_LETTER


def test_decide__exhausted_budget_discards_when_the_policy_says_so():
    policy = merge(POLICY, {"on_exhaustion": "discard"})

    assert (
        run_decide(failure("x", "y"), budget_used=3, policy=policy).transition is Transition.DISCARD
    )


def test_decide__non_retryable_outcome_skips_the_remaining_budget():
    d = run_decide(failure("http.404", "gone", retryable=False), budget_used=1)

    assert d.transition is Transition.DEAD_LETTER


def test_decide__policy_non_retryable_errors_match_by_prefix():
    policy = merge(POLICY, {"non_retryable_errors": ["auth.*"]})

    assert (
        run_decide(failure("auth.expired", "x"), policy=policy).transition is Transition.DEAD_LETTER
    )
    assert run_decide(failure("auth", "x"), policy=policy).transition is Transition.RETRY


@pytest.mark.parametrize(
    ("act", "transition"),
    [
        (Action.DISCARD, Transition.DISCARD),
        (Action.DEAD_LETTER, Transition.DEAD_LETTER),
        (Action.FAIL, Transition.FAIL),
    ],
)
def test_decide__handler_actions_win_over_the_budget(act, transition):
    assert run_decide(action(act), budget_used=1).transition is transition


def test_decide__retry_action_still_respects_the_budget():
    assert run_decide(action(Action.RETRY), budget_used=1).transition is Transition.RETRY
    assert run_decide(action(Action.RETRY), budget_used=3).transition is Transition.DEAD_LETTER


def test_trim__keeps_short_text_and_marks_cut_text():
    assert trim("short", 100) == "short"
    cut = trim("x" * 500, 100)
    assert len(cut) <= 100 and cut.endswith("chars cut]")


# -- the other ends of an attempt, and a run's policy --------------------------------------


def lost(budget_used=1, *, cancel_requested=False, past_deadline=False, policy=POLICY):
    return after_lost(
        budget_used=budget_used, cancel_requested=cancel_requested, past_deadline=past_deadline,
        policy=policy, now=NOW, rng=random.Random(1),
    )  # fmt: skip


def test_after_lost__retries_on_the_policy_then_dead_letters_when_spent():
    assert lost(1) == Decision(Transition.RETRY, NOW + dt.timedelta(seconds=10), 10.0)
    assert lost(3).transition is Transition.DEAD_LETTER


def test_after_lost__cancels_a_run_whose_cancel_was_asked_whatever_its_budget():
    assert lost(3, cancel_requested=True) == Decision(Transition.CANCEL)


def test_after_lost__an_external_run_past_its_deadline_is_due_at_once():
    assert lost(1, past_deadline=True) == Decision(Transition.RETRY, NOW, 0.0)
    assert lost(3, past_deadline=True).transition is Transition.DEAD_LETTER


def test_after_lost__a_policy_listing_worker_lost_as_non_retryable_ends_the_run():
    policy = merge(POLICY, {"non_retryable_errors": ["worker.*"]})

    assert lost(1, policy=policy).transition is Transition.DEAD_LETTER


def nack(budget_used=1, *, requeue=False, retryable=True):
    return after_nack(
        error_type="ojs.error", message="no", retryable=retryable, requeue=requeue,
        budget_used=budget_used, policy=POLICY, now=NOW, rng=random.Random(1),
    )  # fmt: skip


def test_after_nack__requeue_is_now_while_attempts_are_left():
    assert nack(2, requeue=True) == Decision(Transition.RETRY, NOW, 0.0)
    assert nack(3, requeue=True).transition is Transition.DEAD_LETTER


def test_after_nack__without_requeue_the_policy_decides():
    assert nack(1).available_at == NOW + dt.timedelta(seconds=10)
    assert nack(1, retryable=False).transition is Transition.DEAD_LETTER


def test_after_delivery__is_the_rule_under_the_delivery_policy():
    answer = after_delivery(
        failure("http.500", "x"), attempt=3, policy=POLICY, now=NOW, rng=random.Random(1)
    )

    assert answer.transition is Transition.DEAD_LETTER


def test_safely__a_rule_that_raises_retries_the_run_in_a_minute(caplog):
    def broken() -> Decision:
        raise ZeroDivisionError("a bug")

    decided = safely(broken, now=NOW, run_id=7)

    assert decided == Decision(
        Transition.RETRY, NOW + dt.timedelta(seconds=FALLBACK_RETRY_SECONDS), FALLBACK_RETRY_SECONDS
    )
    assert "deciding run 7 failed" in caplog.text


class Row:
    """A job row's policy columns, as ``retry.job_partial`` reads them (empty: inherit)."""

    name = "j"

    def __init__(self, **columns):
        for column in JOB_COLUMNS.values():
            setattr(self, column, columns.get(column))


def test_run_policy__merges_defaults_job_and_the_runs_own(clean_strait_env):
    job = Row(max_attempts=5)

    assert run_policy(job).max_attempts == 5
    assert run_policy(job, 9).max_attempts == 9
    assert run_policy(job, None, {"max_attempts": 2}).max_attempts == 2
    assert run_policy(None, 9) == strait_settings.DEFAULT_RETRY


def test_run_policy__an_invalid_override_gives_the_jobs_policy(clean_strait_env, caplog):
    job = Row(max_attempts=5)

    assert run_policy(job, None, {"initial_delay": "soon"}, run_id=3).max_attempts == 5
    assert run_policy(job, 0).max_attempts == 5
    assert "run 3 of job j has an invalid retry override" in caplog.text


def test_run_policy__an_invalid_job_gives_the_defaults(clean_strait_env, caplog):
    job = Row(max_attempts=0)

    assert run_policy(job, None, {"initial_delay": "soon"}) == strait_settings.DEFAULT_RETRY
    assert "job j has an invalid retry policy" in caplog.text
