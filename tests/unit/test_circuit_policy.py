"""The circuit breaker's pure policy: admission at claim, folding results at record."""

from __future__ import annotations

import datetime as dt

import pytest

from django_strait.rules.resilience.policy import (
    PROBE_MARGIN,
    PROBE_WAIT,
    Circuit,
    Result,
    Verdict,
    admit,
    after_results,
    classify,
    probe_lost,
    probing,
)

NOW = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
COOLDOWN = dt.timedelta(seconds=30)
TIMEOUT = dt.timedelta(seconds=10)
URL = "http://127.0.0.1:9/hook"
F, S, N = Result.FAILURE, Result.SUCCESS, Result.NEUTRAL


def opened(ago: float, failures: int = 5) -> Circuit:
    return Circuit(URL, "open", failures, opened_at=NOW - dt.timedelta(seconds=ago))


def fold(circuit: Circuit, *results: Result, threshold: int = 3) -> Circuit:
    return after_results(circuit, results, now=NOW, threshold=threshold)


@pytest.mark.parametrize(
    ("error_type", "status", "expected"),
    [
        ("http.503", 503, F),
        ("http.500", 500, F),
        ("http.408", 408, F),
        ("http.425", 425, F),
        ("http.429", 429, F),
        ("http.timeout", None, F),
        ("http.connect", None, F),
        ("http.404", 404, S),
        ("http.400", 400, S),
        ("", 200, S),
        ("ssrf.blocked", None, N),
        ("http.invalid_url", None, N),
        ("dispatch.internal", None, N),
    ],
)
def test_classify__counts_only_signs_of_an_unwell_endpoint(error_type, status, expected):
    assert classify(error_type, status) is expected


def test_classify__an_action_header_on_a_503_still_counts():
    # Strait-Action answers keep "http.<status>" as their error type.
    assert classify("http.503", 503) is F


def test_admit__closed_or_unknown_starts():
    for circuit in (None, Circuit(URL), Circuit(URL, failures=2)):
        assert admit(circuit, now=NOW, cooldown=COOLDOWN, timeout=TIMEOUT).verdict is Verdict.START


def test_admit__open_and_cooling_holds_until_the_cooldown_ends():
    circuit = opened(ago=10)
    admission = admit(circuit, now=NOW, cooldown=COOLDOWN, timeout=TIMEOUT)
    assert admission.verdict is Verdict.HOLD
    assert admission.until == circuit.opened_at + COOLDOWN
    assert URL in admission.reason and "no attempt spent" in admission.reason


def test_admit__open_and_cooled_may_probe():
    for ago in (30, 31, 3600):
        admission = admit(opened(ago), now=NOW, cooldown=COOLDOWN, timeout=TIMEOUT)
        assert admission.verdict is Verdict.PROBE


def test_admit__half_open_with_a_probe_in_flight_holds_briefly():
    circuit = probing(opened(ago=40), NOW - dt.timedelta(seconds=1))
    admission = admit(circuit, now=NOW, cooldown=COOLDOWN, timeout=TIMEOUT)
    assert (admission.verdict, admission.until) == (Verdict.HOLD, NOW + PROBE_WAIT)


def test_admit__half_open_with_a_lost_probe_may_probe_again():
    started = NOW - TIMEOUT - PROBE_MARGIN - dt.timedelta(seconds=1)
    circuit = probing(opened(ago=600), started)
    assert probe_lost(circuit, now=NOW, timeout=TIMEOUT)
    assert admit(circuit, now=NOW, cooldown=COOLDOWN, timeout=TIMEOUT).verdict is Verdict.PROBE


def test_probe_lost__not_within_timeout_plus_margin():
    circuit = probing(opened(ago=600), NOW - TIMEOUT - PROBE_MARGIN)
    assert not probe_lost(circuit, now=NOW, timeout=TIMEOUT)


def test_after_results__threshold_consecutive_failures_open_it():
    circuit = fold(Circuit(URL), F, F, F)
    assert (circuit.state, circuit.failures, circuit.opened_at) == ("open", 3, NOW)
    assert circuit.last_failure_at == NOW


def test_after_results__below_threshold_stays_closed_counting():
    circuit = fold(Circuit(URL), F, F)
    assert (circuit.state, circuit.failures, circuit.opened_at) == ("closed", 2, None)


def test_after_results__a_success_resets_the_count():
    assert fold(Circuit(URL), F, F, S, F, F) == Circuit(URL, failures=2, last_failure_at=NOW)


def test_after_results__neutral_results_change_nothing():
    circuit = Circuit(URL, failures=2, last_failure_at=NOW)
    assert fold(circuit, N, N) == circuit


def test_after_results__a_successful_probe_closes_it():
    circuit = fold(probing(opened(ago=40), NOW), S)
    assert (circuit.state, circuit.failures, circuit.opened_at, circuit.probe_started_at) == (
        "closed",
        0,
        None,
        None,
    )


def test_after_results__a_failed_probe_reopens_it_now():
    circuit = fold(probing(opened(ago=40, failures=5), NOW), F)
    assert (circuit.state, circuit.failures, circuit.opened_at) == ("open", 6, NOW)
    assert circuit.probe_started_at is None


def test_after_results__late_failures_keep_an_open_circuit_open_since_it_opened():
    circuit = opened(ago=5)
    after = fold(circuit, F, F)
    assert (after.state, after.opened_at, after.failures) == ("open", circuit.opened_at, 7)


def test_circuit__quiet_only_when_closed_without_failures():
    assert Circuit(URL).quiet
    assert not Circuit(URL, failures=1).quiet
    assert not opened(ago=1).quiet
