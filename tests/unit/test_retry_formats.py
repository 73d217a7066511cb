"""Policies written in OJS's and Zizq's fields, and the presets, give those systems' delays.

Where each expected table comes from:

- OJS: the Open Job Spec retry specification, ``spec/ojs-retry.md`` in
  github.com/openjobspec/spec (version 1.0.0-rc.1): §3.3 (exponential table),
  §5.3 (jitter bands), §8 (default policy), §12.3 ("payment.charge", polynomial
  table) and §12.5 ("export.check_status", constant polling). The tables are
  restated here as numbers, not copied text.
- Zizq: ``compute_backoff`` in github.com/zizq-labs/zizq's store
  (``delay_ms = attempts^exponent + base_ms + rand(0..1) * jitter_ms * (attempts + 1)``,
  with its own test ``compute_backoff_zero_jitter_is_deterministic``: exponent 2,
  base 100 ms -> 101, 104, 109 ms), and its defaults B = 15 s, E = 4, J = 30 s,
  25 retries (issue 14 and docs/retry.md).
- zzz: base 15 s, maximum 3600 s (issue 14); the other fields are Strait's defaults.
"""

from __future__ import annotations

import random

import pytest

from django_strait.rules.retry import BUILTIN, PolicyError, compute_delay, merge, validate_partial

NO_JITTER = random.Random(0)


def delays(raw, retries, *, seed=0):
    policy = merge(BUILTIN, raw)
    rng = random.Random(seed)
    return [compute_delay(policy, n, rng=rng) for n in range(1, retries + 1)]


# --- OJS --------------------------------------------------------------------------------


def test_ojs__exponential_table_of_section_3_3():
    raw = {"initial_interval": "PT1S", "backoff_coefficient": 2.0, "max_interval": "PT5M"}
    raw["jitter"] = False
    assert delays(raw, 10) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]


def test_ojs__payment_example_gives_its_polynomial_table():
    # §12.3's JSON names no strategy, but its table is polynomial (15 s * n^4): OJS
    # infers the strategy, which Strait cannot; `backoff_strategy` (OJS §3) says it.
    payment = {
        "max_attempts": 25,
        "initial_interval": "PT15S",
        "backoff_coefficient": 4.0,
        "max_interval": "PT1H",
        "jitter": False,
        "non_retryable_errors": ["payment.card_stolen", "payment.card_expired", "validation.*"],
        "on_exhaustion": "dead_letter",
        "backoff_strategy": "polynomial",
    }
    assert delays(payment, 5) == [15, 240, 1215, 3600, 3600]
    policy = merge(BUILTIN, payment)
    assert policy.max_attempts == 25
    assert policy.on_exhaustion == "dead_letter"
    assert policy.non_retryable_errors == (
        "payment.card_stolen",
        "payment.card_expired",
        "validation.*",
    )


def test_ojs__payment_example_as_written_is_exponential():
    payment = {
        "max_attempts": 25,
        "initial_interval": "PT15S",
        "backoff_coefficient": 4.0,
        "max_interval": "PT1H",
        "jitter": False,
    }
    assert delays(payment, 5) == [15, 60, 240, 960, 3600]


def test_ojs__polling_example_is_constant_ten_seconds():
    polling = {
        "max_attempts": 60,
        "initial_interval": "PT10S",
        "backoff_coefficient": 1.0,
        "max_interval": "PT10S",
        "jitter": False,
        "non_retryable_errors": [],
        "on_exhaustion": "dead_letter",
    }
    assert delays(polling, 59) == [10] * 59
    assert merge(BUILTIN, polling).max_attempts == 60


@pytest.mark.parametrize("seed", range(20))
def test_ojs__jitter_true_stays_in_the_bands_of_section_5_3(seed):
    # §5.3 leaves max_interval at OJS's default, PT5M; Strait's own default is an hour.
    raw = {"initial_interval": "PT10S", "backoff_coefficient": 2.0, "jitter": True}
    raw["max_interval"] = "PT5M"
    bands = [(5, 15), (10, 30), (20, 60), (40, 120), (80, 240), (150, 300)]
    for delay, (low, high) in zip(delays(raw, 6, seed=seed), bands, strict=True):
        assert low <= delay <= high
        assert delay < high or high == 300  # half-open, except at the cap (§5.3)


def test_ojs__jitter_true_spreads_over_the_whole_band():
    raw = {"initial_interval": "PT10S", "jitter": True}
    seen = [delays(raw, 1, seed=seed)[0] for seed in range(400)]
    assert min(seen) < 5.5 and max(seen) > 14.5


def test_ojs__max_attempts_zero_is_one_attempt():
    raw = {"max_attempts": 0, "initial_interval": "PT1S", "max_interval": "PT5M", "jitter": True}
    assert merge(BUILTIN, raw).max_attempts == 1


def test_ojs__max_attempts_zero_alone_is_refused_naming_ojs():
    with pytest.raises(PolicyError, match="OJS") as info:
        validate_partial({"max_attempts": 0})
    assert info.value.field == "retry.max_attempts"


def test_ojs__milliseconds_fields():
    raw = {"initial_interval_ms": 1500, "max_interval_ms": 4000, "jitter": False}
    assert delays(raw, 3) == [1.5, 3, 4]


def test_ojs__seconds_as_numbers_are_accepted():
    assert delays({"initial_interval": 2, "jitter": False}, 2) == [2, 4]


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"initial_interval": "one second", "jitter": True}, "retry.initial_interval", "PT5M"),
        ({"max_interval": "PT0S"}, "retry.max_interval", "> 0"),
        ({"initial_interval_ms": -1}, "retry.initial_interval_ms", "milliseconds"),
        ({"backoff_strategy": "fibonacci"}, "retry.backoff_strategy", "none, linear"),
        ({"initial_interval": "PT1S", "jitter": "yes"}, "retry.jitter", "true or false"),
    ],
)
def test_ojs__bad_values_name_the_field_written(raw, field, words):
    with pytest.raises(PolicyError, match=words) as info:
        validate_partial(raw)
    assert info.value.field == field


# --- Zizq -------------------------------------------------------------------------------


def test_zizq__its_own_deterministic_test():
    raw = {"backoff_base": 100, "backoff_exponent": 2.0, "backoff_jitter": 0}
    assert delays(raw, 3) == pytest.approx([0.101, 0.104, 0.109])


def test_zizq__defaults_without_jitter():
    raw = {"retry_limit": 25, "backoff_base": 15_000, "backoff_exponent": 4, "backoff_jitter": 0}
    got = delays(raw, 25)
    assert got == pytest.approx([15 + n**4 / 1000 for n in range(1, 26)])
    assert got[0] == pytest.approx(15.001) and got[-1] == pytest.approx(405.625)
    assert merge(BUILTIN, raw).max_attempts == 26


@pytest.mark.parametrize("seed", range(10))
def test_zizq__defaults_with_jitter_stay_in_band(seed):
    raw = {"backoff_base": 15_000, "backoff_exponent": 4, "backoff_jitter": 30_000}
    for n, delay in enumerate(delays(raw, 25, seed=seed), start=1):
        low = 15 + n**4 / 1000
        assert low <= delay < low + 30 * (n + 1)


def test_zizq__jitter_scales_with_retries_plus_one():
    raw = {"backoff_base": 15_000, "backoff_exponent": 4, "backoff_jitter": 30_000}
    policy = merge(BUILTIN, raw)
    # U(0, J) is one draw; with rng.uniform -> J * 0.5 the spread is (n + 1) * 15 s.
    half = random.Random()
    half.uniform = lambda a, b: (a + b) / 2
    assert compute_delay(policy, 3, rng=half) == pytest.approx(15 + 0.081 + 4 * 15)


def test_zizq__retry_limit_counts_retries():
    assert merge(BUILTIN, {"retry_limit": 0}).max_attempts == 1
    assert merge(BUILTIN, {"retry_limit": 4}).max_attempts == 5


def test_zizq__durations_with_units_are_accepted():
    raw = {"backoff_base": "2s", "backoff_exponent": 1, "backoff_jitter": "0s"}
    assert delays(raw, 2) == pytest.approx([2.001, 2.002])


def test_zizq__formula_fields_go_together():
    with pytest.raises(PolicyError, match="together or not at all") as info:
        validate_partial({"backoff_base": 1000, "backoff_exponent": 4})
    assert info.value.field == "retry.backoff_jitter"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"retry_limit": -1}, "retry.retry_limit"),
        ({"retry_limit": 2.5}, "retry.retry_limit"),
        ({"backoff_base": -5, "backoff_exponent": 4, "backoff_jitter": 0}, "retry.backoff_base"),
        (
            {"backoff_base": 5, "backoff_exponent": 0.5, "backoff_jitter": 0},
            "retry.backoff_exponent",
        ),
    ],
)
def test_zizq__bad_values_name_the_field_written(raw, field):
    with pytest.raises(PolicyError) as info:
        validate_partial(raw)
    assert info.value.field == field


# --- mixing formats ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "first", "second"),
    [
        ({"initial_delay": 1, "initial_interval": "PT1S"}, "initial_delay", "initial_interval"),
        ({"strategy": "linear", "jitter": True}, "strategy", "jitter"),
        ({"retry_limit": 3, "max_interval": "PT5M"}, "retry_limit", "max_interval"),
        ({"retry_limit": 3, "max_attempts": 4}, "retry_limit", "max_attempts"),
        ({"delays": [1], "retry_limit": 2}, "delays", "retry_limit"),
    ],
)
def test_mixing_formats__is_refused_naming_both_keys(raw, first, second):
    with pytest.raises(PolicyError) as info:
        validate_partial(raw)
    assert f"'{first}'" in str(info.value) and f"'{second}'" in str(info.value)


def test_min_delay__goes_with_any_format():
    raw = {"initial_interval": "PT0.2S", "jitter": False, "min_delay": "100ms"}
    assert delays(raw, 2) == pytest.approx([0.2, 0.4])


# --- presets ----------------------------------------------------------------------------


def test_preset_ojs__is_the_spec_default_policy():
    policy = merge(BUILTIN, {"preset": "ojs"})
    assert (policy.max_attempts, policy.initial_delay, policy.max_delay) == (3, 1, 300)
    assert (policy.backoff_coefficient, policy.jitter, policy.on_exhaustion) == (
        2,
        0.5,
        "discard",
    )


def test_preset_ojs__with_ojs_overrides():
    policy = merge(BUILTIN, {"preset": "ojs", "max_attempts": 0, "jitter": False})
    assert (policy.max_attempts, policy.jitter) == (1, 0)


def test_preset_zizq__is_zizq_defaults():
    policy = merge(BUILTIN, {"preset": "zizq"})
    assert policy.max_attempts == 26
    assert (policy.strategy, policy.initial_delay, policy.backoff_coefficient) == ("zizq", 15, 4)
    assert (policy.jitter_window, policy.jitter) == (30, 0)
    rng = random.Random(7)
    for n in range(1, 26):
        low = 15 + n**4 / 1000
        assert low <= compute_delay(policy, n, rng=rng) < low + 30 * (n + 1)


def test_preset_zizq__with_a_retry_limit():
    assert merge(BUILTIN, {"preset": "zizq", "retry_limit": 5}).max_attempts == 6


def test_preset_zzz__base_15s_max_3600s():
    raw = {"preset": "zzz", "jitter": 0}
    assert delays(raw, 10) == [15, 30, 60, 120, 240, 480, 960, 1920, 3600, 3600]


def test_preset__unknown_name_lists_the_presets():
    with pytest.raises(PolicyError, match="ojs, zizq, zzz") as info:
        validate_partial({"preset": "sidekiq"})
    assert info.value.field == "retry.preset"


def test_strait_fields__are_unchanged():
    assert delays({"strategy": "linear", "initial_delay": "2s", "jitter": 0}, 3) == [2, 4, 6]
