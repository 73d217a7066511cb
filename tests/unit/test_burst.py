"""When a drained ``--burst`` worker waits, and how it says what it leaves."""

from __future__ import annotations

import datetime as dt

from django_strait.storage.values import Waiting
from django_strait.worker.burst import HORIZON, verdict

NOW = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)


def test_verdict__nothing_queued__exits_saying_so():
    decision = verdict([], NOW)
    assert decision.wait is None
    assert decision.describe() == "nothing left queued"


def test_verdict__a_concurrency_hold__naps_at_most_a_second():
    waiting = [Waiting("limit.concurrency", True, 37, NOW + dt.timedelta(seconds=5))]
    assert verdict(waiting, NOW).wait == 1.0


def test_verdict__a_rate_hold_due_soon__naps_until_it_is_due():
    waiting = [Waiting("limit.rate", True, 3, NOW + dt.timedelta(milliseconds=250))]
    assert verdict(waiting, NOW).wait == 0.25


def test_verdict__a_rate_window_past_the_horizon__exits():
    waiting = [Waiting("limit.rate", True, 3, NOW + HORIZON + dt.timedelta(seconds=1))]
    decision = verdict(waiting, NOW)
    assert decision.wait is None
    assert decision.describe() == "3 runs left waiting: 3 held (limit.rate)"


def test_verdict__limit_holds_of_a_paused_job__exit():
    waiting = [Waiting("limit.concurrency", False, 2, NOW)]
    assert verdict(waiting, NOW).describe() == "2 runs left waiting: 2 of a paused job"


def test_verdict__what_does_not_clear__is_named_largest_group_first():
    waiting = [
        Waiting("http.503", True, 1, NOW + dt.timedelta(seconds=4)),
        Waiting("circuit.open", True, 8, NOW + dt.timedelta(seconds=30)),
        Waiting("budget.exhausted", True, 2, NOW + dt.timedelta(hours=9)),
        Waiting("", True, 1, NOW + dt.timedelta(hours=1)),
    ]
    decision = verdict(waiting, NOW)
    assert decision.wait is None
    assert decision.describe() == (
        "12 runs left waiting: 8 held (circuit.open), 2 held (budget.exhausted), "
        "1 not due yet (delay or run_at), 1 in a retry delay after http.503"
    )
