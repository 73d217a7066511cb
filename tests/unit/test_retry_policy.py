"""The retry policy: formulas, floor/cap/jitter, validation, merge layers, error matching."""

from __future__ import annotations

import datetime as dt
import logging
import math
import pickle
import random

import pytest
from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from django_strait.conf import strait_settings
from django_strait.models import Job
from django_strait.models.job import RetryStrategy
from django_strait.rules.retry import (
    BUILTIN,
    FIELDS,
    STRATEGIES,
    PolicyError,
    RetryPolicy,
    check_registered,
    clamp,
    collect_errors,
    compute_delay,
    is_non_retryable,
    job_partial,
    merge,
    raw_delay,
    resolve,
    retry_delay_for,
    validate_partial,
)
from django_strait.rules.retry.functions import retry_function

hypothesis_settings = settings(database=None, deadline=None, max_examples=300)
FUNC = "tests.unit.test_retry_policy"


# Retry functions the "function" strategy finds by their registered names (dotted paths).
@retry_function
def square_delay(n, policy):
    return n * n


@retry_function
def negative_delay(n, policy):
    return -5


@retry_function
def none_delay(n, policy):
    return None


@retry_function
def nan_delay(n, policy):
    return math.nan


@retry_function
def inf_delay(n, policy):
    return math.inf


@retry_function
def bool_delay(n, policy):
    return True


@retry_function
def timedelta_delay(n, policy):
    return dt.timedelta(seconds=7)


@retry_function
def failing_delay(n, policy):
    raise RuntimeError("no delay for you")


def unregistered_delay(n, policy):
    return 5


recorded_calls: list = []


@retry_function
def recording_delay(n, policy):
    recorded_calls.append((n, policy))
    return 2


@pytest.fixture(autouse=True)
def _fresh_settings():
    strait_settings.reload()
    yield
    strait_settings.reload()


def policy(**fields) -> RetryPolicy:
    return merge(BUILTIN, fields)


def delays(p: RetryPolicy, numbers, seed=0) -> list[float]:
    rng = random.Random(seed)
    return [compute_delay(p, n, rng=rng) for n in numbers]


# --- defaults -----------------------------------------------------------------


def test_builtin__matches_design_defaults():
    assert BUILTIN == RetryPolicy(
        max_attempts=3,
        strategy="exponential",
        initial_delay=1.0,
        backoff_coefficient=2.0,
        max_delay=3600.0,
        min_delay=1.0,
        delays=(),
        jitter=0.2,
        jitter_window=30.0,
        function=None,
        non_retryable_errors=(),
        on_exhaustion="dead_letter",
    )


def test_fields__are_the_dict_form_keys():
    assert FIELDS == (
        "max_attempts",
        "strategy",
        "initial_delay",
        "backoff_coefficient",
        "max_delay",
        "min_delay",
        "delays",
        "jitter",
        "jitter_window",
        "function",
        "non_retryable_errors",
        "on_exhaustion",
    )


def test_strategies__match_the_job_model_choices():
    assert set(STRATEGIES) == set(RetryStrategy.values)


def test_as_dict__round_trips_through_merge():
    p = policy(strategy="custom", delays=[1, 5], non_retryable_errors=["auth.*"])
    assert p.as_dict()["delays"] == [1.0, 5.0]
    assert merge(BUILTIN, p.as_dict()) == p


# --- formulas (jitter off, floor low so the raw value shows) ----------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"strategy": "exponential", "initial_delay": 1, "backoff_coefficient": 2},
            [1, 2, 4, 8, 16],
        ),
        (
            {"strategy": "exponential", "initial_delay": 3, "backoff_coefficient": 1.5},
            [3, 4.5, 6.75],
        ),
        ({"strategy": "linear", "initial_delay": "2s"}, [2, 4, 6, 8]),
        ({"strategy": "fixed", "initial_delay": "5s"}, [5, 5, 5]),
        ({"strategy": "polynomial", "initial_delay": 1, "backoff_coefficient": 2}, [1, 4, 9, 16]),
        ({"strategy": "polynomial", "initial_delay": 2, "backoff_coefficient": 3}, [2, 16, 54]),
        ({"strategy": "custom", "delays": [1, "5s", "PT30S"]}, [1, 5, 30, 30, 30]),
        (
            {
                "strategy": "power",
                "initial_delay": 15,
                "backoff_coefficient": 4,
                "jitter_window": 0,
            },
            [16, 31, 96, 271],
        ),
        ({"strategy": "function", "function": f"{FUNC}.square_delay"}, [1, 4, 9, 16]),
    ],
)
def test_compute_delay__follows_the_strategy_formula(fields, expected):
    p = policy(jitter=0, min_delay="1ms", **fields)
    assert delays(p, range(1, len(expected) + 1)) == pytest.approx(expected)


def test_compute_delay__default_policy_doubles_from_one_second():
    assert delays(policy(jitter=0), range(1, 6)) == [1, 2, 4, 8, 16]


def test_compute_delay__power_adds_spread_scaled_by_retry_number():
    p = policy(strategy="power", initial_delay=15, backoff_coefficient=4, jitter=0, max_delay="2d")
    for n in range(1, 20):
        d = compute_delay(p, n, rng=random.Random(n))
        assert 15 + n**4 <= d <= 15 + n**4 + n * 30


def test_compute_delay__power_spread_varies_with_the_random_source():
    p = policy(strategy="power", jitter=0)
    seen = {compute_delay(p, 3, rng=random.Random(seed)) for seed in range(20)}
    assert len(seen) > 1


def test_compute_delay__caps_at_max_delay():
    p = policy(jitter=0, max_delay="1m")
    assert delays(p, [6, 7, 100]) == [32, 60, 60]


def test_compute_delay__floors_at_min_delay():
    p = policy(jitter=0, initial_delay=0, min_delay="2s")
    assert delays(p, [1, 5]) == [2, 2]
    p = policy(strategy="custom", delays=[0, 0.1], jitter=0, min_delay="500ms")
    assert delays(p, [1, 2]) == [0.5, 0.5]


def test_compute_delay__jitter_stays_within_twenty_percent():
    p = policy(strategy="fixed", initial_delay="100s")
    got = delays(p, [1] * 500)
    assert all(80 <= d <= 120 for d in got)
    assert len(set(got)) > 100  # jitter actually varies


def test_compute_delay__jitter_is_clamped_again():
    p = policy(strategy="fixed", initial_delay="1h", jitter=0.5)
    assert all(d <= 3600 for d in delays(p, [1] * 200))
    p = policy(strategy="fixed", initial_delay="1s", jitter=0.5)
    assert all(d >= 1 for d in delays(p, [1] * 200))


def test_compute_delay__same_seed_gives_same_delays():
    p = policy(strategy="power")
    assert delays(p, range(1, 50), seed=7) == delays(p, range(1, 50), seed=7)


@pytest.mark.parametrize("strategy", ["exponential", "polynomial", "power", "linear"])
@pytest.mark.parametrize("n", [10_000, 10**6, 10**30, 10**400])
def test_compute_delay__huge_retry_number_caps_without_overflow(strategy, n):
    p = policy(strategy=strategy, backoff_coefficient=50, jitter=0)
    assert compute_delay(p, n, rng=random.Random(0)) == 3600


def test_compute_delay__zero_initial_delay_with_overflowing_factor_is_floored():
    p = policy(initial_delay=0, backoff_coefficient=10, jitter=0)
    assert compute_delay(p, 10_000, rng=random.Random(0)) == 1.0


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_compute_delay__rejects_retry_numbers_below_one(n):
    with pytest.raises(ValueError, match="retry_number"):
        compute_delay(BUILTIN, n, rng=random.Random(0))


# --- the function strategy's odd return values -------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("negative_delay", 1.0),  # clamped up to min_delay
        ("inf_delay", 3600.0),  # clamped down to max_delay
        ("timedelta_delay", 7.0),
    ],
)
def test_function_strategy__clamps_numbers_it_returns(name, expected):
    p = policy(strategy="function", function=f"{FUNC}.{name}", jitter=0)
    assert compute_delay(p, 3, rng=random.Random(0)) == expected


@pytest.mark.parametrize("name", ["none_delay", "nan_delay", "bool_delay", "failing_delay"])
def test_function_strategy__falls_back_to_exponential_on_a_bad_result(name, caplog):
    p = policy(strategy="function", function=f"{FUNC}.{name}", jitter=0, initial_delay=3)
    with caplog.at_level(logging.WARNING, logger="django_strait.rules.retry.delays"):
        assert compute_delay(p, 3, rng=random.Random(0)) == 12  # 3 * 2^(3-1)
    assert f"{FUNC}.{name}" in caplog.text
    assert "exponential" in caplog.text


def test_function_strategy__receives_the_retry_number_and_policy():
    recorded_calls.clear()
    p = policy(strategy="function", function=f"{FUNC}.recording_delay", jitter=0)
    assert compute_delay(p, 4, rng=random.Random(0)) == 2
    assert recorded_calls == [(4, p)]


# --- retry_delay_for ------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "expected"),
    [(30, 30), (30.5, 30.5), (0, 1), (-4, 1), (10**6, 3600), (math.inf, 3600)],
)
def test_retry_delay_for__uses_the_requested_delay_within_bounds_without_jitter(
    requested, expected
):
    assert retry_delay_for(BUILTIN, 1, requested=requested, rng=random.Random(0)) == expected


@pytest.mark.parametrize("requested", [None, math.nan, "30s", True])
def test_retry_delay_for__computes_when_nothing_usable_was_requested(requested):
    got = retry_delay_for(BUILTIN, 4, requested=requested, rng=random.Random(3))
    assert got == compute_delay(BUILTIN, 4, rng=random.Random(3))


# --- non-retryable matching --------------------------------------------------------


@pytest.mark.parametrize(
    ("error_type", "patterns", "expected"),
    [
        ("auth.expired", ["auth.*"], True),
        ("auth.token.bad", ["auth.*"], True),
        ("auth", ["auth.*"], False),
        ("external.auth.x", ["auth.*"], False),
        ("authz.denied", ["auth.*"], False),
        ("http.404", ["http.404"], True),
        ("http.4044", ["http.404"], False),
        ("http.404", ["http.4"], False),
        ("http.404", [], False),
        ("billing.declined", ["http.404", "billing.*"], True),
    ],
)
def test_is_non_retryable__matches_exact_or_dotted_prefix(error_type, patterns, expected):
    assert is_non_retryable(error_type, patterns) is expected


# --- validation -----------------------------------------------------------------


def test_validate_partial__normalises_values():
    got = validate_partial(
        {
            "max_attempts": 5,
            "strategy": " Linear ",
            "initial_delay": "500ms",
            "max_delay": "PT5M",
            "min_delay": "2d",
            "delays": ["1s", 2, "PT1M"],
            "jitter": 0,
            "jitter_window": "10s",
            "function": f"{FUNC}.square_delay",
            "non_retryable_errors": ["auth.*", "http.404"],
            "on_exhaustion": "discard",
        }
    )
    assert got == {
        "max_attempts": 5,
        "strategy": "linear",
        "initial_delay": 0.5,
        "max_delay": 300.0,
        "min_delay": 172800.0,
        "delays": (1.0, 2.0, 60.0),
        "jitter": 0.0,
        "jitter_window": 10.0,
        "function": f"{FUNC}.square_delay",
        "non_retryable_errors": ("auth.*", "http.404"),
        "on_exhaustion": "discard",
    }


def test_validate_partial__none_means_inherit():
    assert validate_partial({"max_attempts": None, "strategy": None}) == {}


def test_policy_error__reads_as_field_value_rule():
    with pytest.raises(PolicyError) as caught:
        validate_partial({"backoff_coefficient": 0.5})
    assert (
        str(caught.value)
        == "retry.backoff_coefficient: 0.5 is not allowed; must be a number from 1 to 100"
    )
    assert (caught.value.field, caught.value.value, caught.value.allowed) == (
        "retry.backoff_coefficient",
        0.5,
        "a number from 1 to 100",
    )


def test_policy_error__pickles_with_its_column():
    err = PolicyError("retry.jitter", 2, "a number", column="retry_jitter")
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.field, copy.column, str(copy)) == (err.field, err.column, str(err))


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        ({"backoff_coefficient": 0.5}, "retry.backoff_coefficient", "from 1 to 100"),
        ({"backoff_coefficient": 101}, "retry.backoff_coefficient", "from 1 to 100"),
        ({"backoff_coefficient": math.inf}, "retry.backoff_coefficient", "from 1 to 100"),
        ({"backoff_coefficient": 10**400}, "retry.backoff_coefficient", "from 1 to 100"),
        ({"backoff_coefficient": "2"}, "retry.backoff_coefficient", "from 1 to 100"),
        ({"delays": [1] * 101}, "retry.delays", "at most 100 durations"),
        ({"non_retryable_errors": ["a"] * 101}, "retry.non_retryable_errors", "at most 100"),
        ({"non_retryable_errors": ["a" * 201]}, "retry.non_retryable_errors[0]", "at most 200"),
        ({"strategy": "custom", "delays": []}, "retry.delays", "non-empty"),
        ({"strategy": "fibonacci"}, "retry.strategy", "exponential, linear, fixed"),
        ({"strategy": 3}, "retry.strategy", "one of"),
        ({"initial_delay": -1}, "retry.initial_delay", "negative"),
        ({"initial_delay": "soon"}, "retry.initial_delay", "500ms"),
        ({"max_delay": 0}, "retry.max_delay", "> 0"),
        ({"min_delay": "0s"}, "retry.min_delay", "> 0"),
        ({"max_attempts": 0}, "retry.max_attempts", "integer from 1"),
        ({"max_attempts": 2.0}, "retry.max_attempts", "integer from 1"),
        ({"max_attempts": True}, "retry.max_attempts", "integer from 1"),
        ({"max_attempts": 2**31}, "retry.max_attempts", "integer from 1"),
        ({"jitter": 1.5}, "retry.jitter", "from 0 to 1"),
        ({"jitter": -0.1}, "retry.jitter", "from 0 to 1"),
        ({"jitter": math.nan}, "retry.jitter", "from 0 to 1"),
        ({"jitter_window": "-1s"}, "retry.jitter_window", "negative"),
        ({"delays": "1s,2s"}, "retry.delays", "durations, each"),
        ({"delays": [1, -2]}, "retry.delays[1]", "negative"),
        ({"function": ""}, "retry.function", "@retry_function"),
        ({"function": "x" * 301}, "retry.function", "@retry_function"),
        ({"function": 42}, "retry.function", "@retry_function"),
        ({"non_retryable_errors": "auth.*"}, "retry.non_retryable_errors", "error types of"),
        ({"non_retryable_errors": ["auth*"]}, "retry.non_retryable_errors[0]", "'.*'"),
        ({"non_retryable_errors": ["ok", "*"]}, "retry.non_retryable_errors[1]", "'.*'"),
        ({"non_retryable_errors": ["a.*.b"]}, "retry.non_retryable_errors[0]", "'.*'"),
        ({"non_retryable_errors": [".*"]}, "retry.non_retryable_errors[0]", "'.*'"),
        ({"non_retryable_errors": [""]}, "retry.non_retryable_errors[0]", "'.*'"),
        ({"non_retryable_errors": ["has space"]}, "retry.non_retryable_errors[0]", "'.*'"),
        ({"non_retryable_errors": [404]}, "retry.non_retryable_errors[0]", "'.*'"),
        ({"on_exhaustion": "fail"}, "retry.on_exhaustion", "dead_letter, discard"),
    ],
)
def test_validate_partial__rejects_with_the_field_named(raw, field, fragment):
    with pytest.raises(PolicyError) as caught:
        validate_partial(raw)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert fragment in str(caught.value)


def test_validate_partial__rejects_unknown_keys_listing_the_allowed_ones():
    with pytest.raises(PolicyError) as caught:
        validate_partial({"max_attempt": 3}, prefix="STRAIT.DEFAULT_RETRY")
    err = caught.value
    assert err.field == "STRAIT.DEFAULT_RETRY.max_attempt"
    assert "unknown field 'max_attempt'" in str(err)
    assert all(name in err.allowed for name in FIELDS)


def test_validate_partial__rejects_a_non_mapping():
    with pytest.raises(PolicyError) as caught:
        validate_partial(["max_attempts", 3])
    assert caught.value.field == "retry"
    assert "object" in str(caught.value)


def test_collect_errors__reports_every_bad_field():
    errors = collect_errors({"jitter": 3, "strategy": "nope", "bogus": 1, "max_attempts": 2})
    assert sorted(e.field for e in errors) == ["retry.bogus", "retry.jitter", "retry.strategy"]
    assert collect_errors({"max_attempts": 2}) == []
    assert [e.field for e in collect_errors({"strategy": "custom"})] == ["retry.delays"]


# --- merge --------------------------------------------------------------------


def test_merge__later_partials_win_field_by_field():
    got = merge(
        BUILTIN,
        {"max_attempts": 5, "initial_delay": "2s", "jitter": 0.1},
        None,
        {},
        {"initial_delay": "3s"},
    )
    assert (got.max_attempts, got.initial_delay, got.jitter, got.strategy) == (
        5,
        3.0,
        0.1,
        "exponential",
    )


def test_merge__checks_the_whole_policy():
    with pytest.raises(PolicyError, match=r"retry\.delays: .*non-empty"):
        merge(BUILTIN, {"strategy": "custom"})
    with pytest.raises(PolicyError, match=r"retry\.function: .*strategy is 'function'"):
        merge(BUILTIN, {"strategy": "function"})
    # Delays from a lower layer satisfy a custom strategy chosen higher up.
    assert merge(BUILTIN, {"delays": [1, 2]}, {"strategy": "custom"}).delays == (1.0, 2.0)


def test_merge__names_the_bound_that_broke_min_below_max():
    with pytest.raises(PolicyError) as caught:
        merge(BUILTIN, {"min_delay": "2h"})
    assert caught.value.field == "retry.min_delay"
    assert "<= max_delay (3600 s)" in str(caught.value)
    with pytest.raises(PolicyError) as caught:
        merge(BUILTIN, {"min_delay": "10s"}, {"max_delay": "5s"}, prefix="run")
    assert caught.value.field == "run.max_delay"
    assert ">= min_delay (10 s)" in str(caught.value)


# --- job columns and resolve --------------------------------------------------------


def test_job_partial__reads_set_columns_and_inherits_empty_ones():
    job = Job(
        name="j",
        max_attempts=7,
        retry_strategy="custom",
        retry_delays_secs=[1, 10],
        retry_jitter=0.0,
        retry_initial_delay_secs=None,
        retry_function="",
        non_retryable_errors=[],
    )
    assert job_partial(job) == {
        "max_attempts": 7,
        "strategy": "custom",
        "delays": (1.0, 10.0),
        "jitter": 0.0,
    }
    assert job_partial(Job(name="bare")) == {}


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("retry_jitter", 2.0, "retry.jitter"),
        ("retry_backoff_coefficient", 0.5, "retry.backoff_coefficient"),
        ("max_attempts", 0, "retry.max_attempts"),
        ("retry_strategy", "soon", "retry.strategy"),
        ("retry_delays_secs", [1, -1], "retry.delays[1]"),
        ("retry_max_delay_secs", -3.0, "retry.max_delay"),
        ("retry_function", "x" * 301, "retry.function"),
        ("non_retryable_errors", ["x*"], "retry.non_retryable_errors[0]"),
        ("on_exhaustion", "explode", "retry.on_exhaustion"),
    ],
)
def test_job_partial__names_the_column(column, value, field):
    with pytest.raises(PolicyError) as caught:
        job_partial(Job(name="j", **{column: value}))
    assert caught.value.column == column
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field} (Job.{column}): ")


def test_job_partial__custom_strategy_with_explicit_empty_delays_list_inherits_delays():
    # An empty JSON list in the column means "not set", like null.
    assert job_partial(Job(name="j", retry_strategy="custom", retry_delays_secs=[])) == {
        "strategy": "custom"
    }


@override_settings(
    STRAIT={"DEFAULT_RETRY": {"max_attempts": 4, "initial_delay": "5s", "jitter": 0}}
)
def test_resolve__layers_settings_job_step_and_run():
    job = Job(name="j", max_attempts=6, retry_strategy="linear", retry_max_delay_secs=600.0)
    assert resolve(job, defaults=strait_settings.DEFAULT_RETRY) == merge(
        BUILTIN,
        {
            "max_attempts": 6,
            "initial_delay": 5,
            "jitter": 0,
            "strategy": "linear",
            "max_delay": 600,
        },
    )
    got = resolve(
        job, 9, {"max_attempts": 2, "initial_delay": "1s"}, step={"strategy": "fixed"},
        defaults=strait_settings.DEFAULT_RETRY,
    )  # fmt: skip
    assert (got.max_attempts, got.initial_delay, got.strategy, got.max_delay, got.jitter) == (
        9,  # run_max_attempts beats the run's retry override
        1.0,
        "fixed",
        600.0,
        0.0,
    )
    run_wins = resolve(
        job, None, {"strategy": "exponential"}, step={"strategy": "fixed"},
        defaults=strait_settings.DEFAULT_RETRY,
    )  # fmt: skip
    assert run_wins.strategy == "exponential"


def test_resolve__without_job_uses_the_default():
    assert resolve(None, defaults=strait_settings.DEFAULT_RETRY) == BUILTIN


def test_resolve__rejects_a_bad_run_max_attempts():
    with pytest.raises(PolicyError) as caught:
        resolve(Job(name="j"), 0, defaults=BUILTIN)
    assert caught.value.field == "max_attempts"


def test_resolve__rejects_a_bad_run_override():
    with pytest.raises(PolicyError) as caught:
        resolve(Job(name="j"), None, {"jitter": 9}, defaults=BUILTIN)
    assert caught.value.field == "retry.jitter"


# --- properties ---------------------------------------------------------------

durations = st.floats(min_value=0, max_value=10**5, allow_nan=False)


ANY_STRATEGY = st.sampled_from(STRATEGIES)


@st.composite
def valid_policies(draw, strategy=ANY_STRATEGY):
    chosen = draw(strategy)
    min_delay = draw(st.floats(min_value=0.001, max_value=100))
    fields = {
        "strategy": chosen,
        "initial_delay": draw(durations),
        "backoff_coefficient": draw(st.floats(min_value=1, max_value=100)),
        "min_delay": min_delay,
        "max_delay": draw(st.floats(min_value=min_delay, max_value=10**6)),
        "delays": draw(st.lists(durations, min_size=1, max_size=6)),
        "jitter": draw(st.floats(min_value=0, max_value=1)),
        "jitter_window": draw(st.floats(min_value=0, max_value=600)),
        "function": f"{FUNC}.{draw(st.sampled_from(['square_delay', 'negative_delay', 'inf_delay']))}",
    }
    return merge(BUILTIN, fields)


retry_numbers = st.integers(min_value=1, max_value=10_000)
seeds = st.integers(min_value=0, max_value=2**32)


@hypothesis_settings
@given(valid_policies(), retry_numbers, seeds)
def test_property__delay_lies_within_floor_and_cap(p, n, seed):
    d = compute_delay(p, n, rng=random.Random(seed))
    assert p.min_delay <= d <= p.max_delay


@hypothesis_settings
@given(valid_policies(), retry_numbers, seeds)
def test_property__delay_lies_within_jitter_bounds_of_the_clamped_raw_delay(p, n, seed):
    # raw_delay consumes the random source first, so the same seed reproduces it.
    base = clamp(p, raw_delay(p, n, rng=random.Random(seed)))
    d = compute_delay(p, n, rng=random.Random(seed))
    low = clamp(p, base * (1 - p.jitter))
    high = clamp(p, base * (1 + p.jitter))
    assert low * (1 - 1e-12) <= d <= high * (1 + 1e-12)


@hypothesis_settings
@given(valid_policies(strategy=st.just("custom")), st.integers(min_value=1, max_value=10_000))
def test_property__custom_repeats_its_last_delay(p, n):
    expected = p.delays[min(n, len(p.delays)) - 1]
    assert raw_delay(p, n, rng=random.Random(0)) == expected
    if n >= len(p.delays):
        assert raw_delay(p, n, rng=random.Random(0)) == p.delays[-1]


@hypothesis_settings
@given(
    valid_policies(strategy=st.sampled_from(["exponential", "linear", "polynomial", "fixed"])),
    st.integers(min_value=1, max_value=9_999),
)
def test_property__deterministic_strategies_never_shrink(p, n):
    rng = random.Random(0)
    assert raw_delay(p, n, rng=rng) <= raw_delay(p, n + 1, rng=rng)


simple_partials = st.fixed_dictionaries(
    {},
    optional={
        "max_attempts": st.integers(min_value=1, max_value=50),
        "strategy": st.sampled_from(["exponential", "linear", "fixed", "polynomial", "power"]),
        "initial_delay": durations,
        "backoff_coefficient": st.floats(min_value=1, max_value=10),
        "min_delay": st.floats(min_value=0.001, max_value=10),
        "max_delay": st.floats(min_value=10, max_value=10**5),
        "delays": st.lists(durations, max_size=3),
        "jitter": st.floats(min_value=0, max_value=1),
        "jitter_window": durations,
        "non_retryable_errors": st.lists(st.sampled_from(["auth.*", "http.404", "x.y"])),
        "on_exhaustion": st.sampled_from(["dead_letter", "discard"]),
    },
)


@hypothesis_settings
@given(simple_partials, simple_partials, simple_partials)
def test_property__merge_takes_each_field_from_the_latest_layer_that_sets_it(a, b, c):
    merged = merge(BUILTIN, a, b, c)
    for name in FIELDS:
        layers = [layer for layer in (c, b, a) if name in layer]
        expected = layers[0][name] if layers else getattr(BUILTIN, name)
        if isinstance(expected, list):
            expected = tuple(expected)
        assert getattr(merged, name) == expected


# --- registered retry functions -------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["os.system", "subprocess.getoutput", f"{FUNC}.unregistered_delay", "no_such_module_x.f"],
)
def test_check_registered__refuses_a_function_not_registered_in_code(name):
    with pytest.raises(PolicyError) as caught:
        check_registered(validate_partial({"strategy": "function", "function": name}))
    assert caught.value.field == "retry.function"
    assert "not a registered retry function" in str(caught.value)
    assert f"{FUNC}.square_delay" in str(caught.value)  # says which are


def test_check_registered__accepts_a_registered_function():
    check_registered(validate_partial({"strategy": "function", "function": f"{FUNC}.square_delay"}))


def test_function_strategy__never_imports_a_stored_name(caplog):
    # A policy stored before a rename (or written around validation) names a module
    # nobody registered: it is not imported, and the exponential formula applies.
    import sys

    p = policy(strategy="function", function="tests.unit.never_imported_module.f", jitter=0)
    with caplog.at_level(logging.WARNING, logger="django_strait.rules.retry.delays"):
        assert compute_delay(p, 2, rng=random.Random(0)) == 2.0  # 1 * 2^(2-1)
    assert "tests.unit.never_imported_module" not in sys.modules
    assert "not a registered retry function" in caplog.text


def test_retry_function__refuses_a_name_another_function_holds():
    with pytest.raises(ValueError, match="already registered"):
        retry_function(unregistered_delay, name=f"{FUNC}.square_delay")
