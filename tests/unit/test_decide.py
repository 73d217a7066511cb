"""decide(): an attempt's outcome under a policy -> the run's next transition."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from django_strait.decisions import decide, trim
from django_strait.outcome import Action, action, failure, success
from django_strait.retry import BUILTIN, merge
from django_strait.states import Transition

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
