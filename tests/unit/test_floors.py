"""Claim floors: the index ranges a worker's claim reads, and how its claims move them."""

from __future__ import annotations

import datetime as dt

import pytest

from django_strait.rules import bounds
from django_strait.storage.floors import BOTTOM, ClaimFloors, Segment

NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)
LOW, HIGH = bounds.PRIORITY


def at(seconds_ago: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=seconds_ago)


def test_segments__without_floors_are_the_whole_index():
    floors = ClaimFloors(rescan=5)

    assert floors.segments(clock=0.0) == [Segment(LOW, HIGH, *BOTTOM)]


def test_segments__cover_every_priority_once_high_to_low_each_known_one_from_its_floor():
    floors = ClaimFloors(rescan=5)
    floors.segments(clock=0.0)
    floors.floors = {0: (at(3), 7), 5: (at(2), 9), HIGH: (at(1), 11)}

    segments = floors.segments(clock=1.0)

    assert segments == [
        Segment(HIGH, HIGH, at(1), 11),
        Segment(6, HIGH - 1, *BOTTOM),
        Segment(5, 5, at(2), 9),
        Segment(1, 4, *BOTTOM),
        Segment(0, 0, at(3), 7),
        Segment(LOW, -1, *BOTTOM),
    ]


def test_learn__a_short_claim_puts_every_floor_at_now_less_the_lag():
    floors = ClaimFloors(rescan=5, lag=1.0)
    floors.segments(clock=0.0)
    floors.floors = {3: (at(60), 1)}

    floors.learn([(5, (at(30), 40)), (0, (at(20), 41))], limit=10, now=NOW)

    assert floors.floors == {5: (at(1), 0), 3: (at(1), 0), 0: (at(1), 0)}


def test_learn__a_full_claim_floors_its_last_priority_at_its_last_run_and_those_above_at_the_lag():
    floors = ClaimFloors(rescan=5, lag=1.0)
    floors.segments(clock=0.0)
    floors.floors = {-2: (at(90), 1)}

    floors.learn([(5, (at(30), 40)), (0, (at(20), 41)), (0, (at(10), 42))], limit=3, now=NOW)

    # Below priority 0 the claim never looked: -2 keeps its floor.
    assert floors.floors == {5: (at(1), 0), 0: (at(10), 42), -2: (at(90), 1)}


def test_learn__a_floor_never_passes_now_less_the_lag():
    floors = ClaimFloors(rescan=5, lag=2.0)
    floors.segments(clock=0.0)

    floors.learn([(0, (at(0.5), 40))], limit=1, now=NOW)

    assert floors.floors == {0: (at(2), 0)}


def test_segments__forget_the_floors_every_rescan_seconds():
    floors = ClaimFloors(rescan=5)
    floors.segments(clock=100.0)
    floors.learn([(0, (at(10), 1))], limit=1, now=NOW)

    assert floors.segments(clock=104.9)[1] == Segment(0, 0, at(10), 1)
    assert floors.segments(clock=105.0) == [Segment(LOW, HIGH, *BOTTOM)]


@pytest.mark.parametrize(("rescan", "lag"), [(0, 1.0), (-1, 1.0), (5, -0.1)])
def test_floors__refuse_a_rescan_or_lag_out_of_bounds(rescan, lag):
    with pytest.raises(ValueError, match="rescan|lag"):
        ClaimFloors(rescan=rescan, lag=lag)
