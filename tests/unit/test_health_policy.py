"""Endpoint health as pure functions: summaries of a batch, levels and scaled concurrency."""

from __future__ import annotations

import datetime as dt

import pytest

from django_strait.rules.resilience.health import (
    Answer,
    Health,
    admit,
    concurrency_share,
    effective_concurrency,
    summarize,
)
from django_strait.rules.resilience.policy import Verdict

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
COOLDOWN = dt.timedelta(seconds=30)


def answer(url="http://a/", *, ok=True, error_type="", status=200, ms=10, timeout=10.0):
    return Answer(url, ok, error_type, status, ms, timeout)


def test_summarize__one_sample_per_endpoint_sorted_by_url():
    samples = summarize(
        [
            answer("http://b/"),
            answer("http://a/"),
            answer("http://b/", ok=False, error_type="http.500", status=500),
        ],
        alpha=0.1,
    )

    assert [s.endpoint_url for s in samples] == ["http://a/", "http://b/"]
    b = samples[1]
    assert (b.count, b.success, b.failure) == (2, 0.5, 0.5)
    assert b.keep == pytest.approx(0.81)


def test_summarize__a_404_is_neither_success_nor_failure():
    [s] = summarize([answer(ok=False, error_type="http.404", status=404)], alpha=0.1)

    assert (s.success, s.failure) == (0.0, 0.0)


def test_summarize__refused_before_sending_is_left_out():
    assert summarize([answer(ok=False, error_type="ssrf.blocked", status=None)], alpha=0.1) == []


def test_summarize__timeouts_and_connection_errors_are_failures():
    [s] = summarize(
        [
            answer(ok=False, error_type="http.timeout", status=None),
            answer(ok=False, error_type="http.connect", status=None),
        ],
        alpha=0.1,
    )

    assert s.failure == 1.0


def test_summarize__p95_is_the_nearest_rank_and_timeout_in_ms():
    [s] = summarize([answer(ms=ms, timeout=2.5) for ms in range(1, 101)], alpha=0.1)

    assert (s.p95_ms, s.timeout_ms) == (95.0, 2500.0)


@pytest.mark.parametrize(
    ("score", "share"),
    [
        (None, 1.0),
        (100.0, 1.0),
        (60.5, 1.0),
        (60.0, 1.0),
        (45.0, 0.625),
        (30.0, 0.25),
        (10.0, 0.25),
    ],
)
def test_concurrency_share__linear_from_full_at_60_to_a_quarter_at_30(score, share):
    assert concurrency_share(score) == pytest.approx(share)


def test_effective_concurrency__never_below_one():
    assert effective_concurrency(8, 30.0) == 2
    assert effective_concurrency(8, 45.0) == 5
    assert effective_concurrency(1, 30.0) == 1


def test_admit__healthy_or_degraded_starts():
    assert admit(None, now=NOW, cooldown=COOLDOWN, may_probe=True).verdict is Verdict.START
    degraded = Health("http://a/", 45.0, "degraded")
    assert admit(degraded, now=NOW, cooldown=COOLDOWN, may_probe=False).verdict is Verdict.START


def test_admit__unhealthy_probes_once_per_cooldown():
    never = Health("http://a/", 20.0, "unhealthy")
    assert admit(never, now=NOW, cooldown=COOLDOWN, may_probe=True).verdict is Verdict.PROBE

    recent = Health("http://a/", 20.0, "unhealthy", probe_started_at=NOW - dt.timedelta(seconds=5))
    held = admit(recent, now=NOW, cooldown=COOLDOWN, may_probe=True)
    assert (held.verdict, held.until, held.error_type) == (
        Verdict.HOLD,
        NOW + dt.timedelta(seconds=25),
        "health.unhealthy",
    )
    assert "score 20" in held.reason

    waiting = admit(never, now=NOW, cooldown=COOLDOWN, may_probe=False)
    assert waiting.verdict is Verdict.HOLD


def test_fold__a_rate_decaying_through_many_batches_reaches_zero_never_a_subnormal():
    from django_strait.rules.resilience.health import NEGLIGIBLE, fold

    rate, keep = 0.5, 0.9**100
    for _ in range(200):
        rate = fold(rate, 0.0, keep)
        assert rate == 0.0 or rate >= NEGLIGIBLE
    assert rate == 0.0
