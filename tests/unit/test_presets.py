"""Memory presets: sizes, the chain, where a run starts, what an OOM leads to (docs/process-execution.md)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import checks
from django.test import override_settings

from django_strait.rules.presets import DEFAULT_PRESETS, parse_chain, parse_size
from django_strait.rules.retry import PolicyError
from django_strait.rules.states import Transition
from django_strait.worker.outcomes import after_oom

pytestmark = pytest.mark.usefixtures("clean_strait_env")

CHAIN = parse_chain({"micro": "256MB", "small-1x": "512MB", "large": "1GB"})
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("text", "size"),
    [("256MB", 256 * 2**20), ("1GB", 2**30), ("1.5GiB", 3 * 2**29), ("64m", 64 * 2**20),
     (2**30, 2**30)],
)  # fmt: skip
def test_parse_size__reads_binary_units(text, size):
    assert parse_size(text, "f") == size


@pytest.mark.parametrize("bad", ["lots", "-1MB", "1MB", "5PB", True, None, 1.5])
def test_parse_size__refuses_what_is_not_a_size_in_range_naming_the_field(bad):
    with pytest.raises(PolicyError, match=r"^STRAIT\.PRESETS\.micro: "):
        parse_size(bad, "STRAIT.PRESETS.micro")


def test_parse_chain__the_default_is_designs_chain():
    chain = parse_chain(DEFAULT_PRESETS)
    assert chain.names == ("micro", "small-1x", "small-2x", "medium", "large-1x", "large-2x")
    assert chain.get("medium").limit_bytes == 2 * 2**30


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({}, "STRAIT.PRESETS: "),
        ([("micro", "256MB")], "STRAIT.PRESETS: "),
        ({"Big One": "1GB"}, "STRAIT.PRESETS key: 'Big One'"),
        ({"a": "1GB", "b": "512MB"}, "STRAIT.PRESETS.b: '512MB' is not allowed; must be more than"),
        ({"a": "huge"}, "STRAIT.PRESETS.a: 'huge'"),
    ],
)
def test_parse_chain__refuses_a_bad_chain_naming_the_entry(value, fragment):
    with pytest.raises(PolicyError) as caught:
        parse_chain(value)
    assert str(caught.value).startswith(fragment), str(caught.value)


@pytest.mark.parametrize(
    ("job", "run", "recommended", "start"),
    [
        ("", "", None, "micro"),
        ("small-1x", "", None, "small-1x"),
        ("micro", "", "large", "large"),
        ("large", "", "small-1x", "large"),  # a recommendation never lowers
        ("micro", "small-1x", "large", "small-1x"),  # a retried run keeps its own
        ("gone", "gone", "gone", "micro"),  # names the settings no longer have
    ],
)
def test_chain_start__the_runs_own_else_the_larger_of_job_and_recommendation(
    job, run, recommended, start
):
    assert CHAIN.start(job, run, recommended) == start


def test_after_oom__retries_now_at_the_next_preset_then_dead_letters_at_the_last():
    decision, following = after_oom("micro", CHAIN, NOW)
    assert (decision.transition, decision.available_at, following) == (
        Transition.RETRY,
        NOW,
        "small-1x",
    )
    decision, following = after_oom("large", CHAIN, NOW)
    assert (decision.transition, following) == (Transition.DEAD_LETTER, None)


@override_settings(STRAIT={"PRESETS": {"micro": "256MB", "tiny": "128MB"}})
def test_check__a_shrinking_chain_is_reported_naming_the_preset():
    (message,) = checks.run_checks(tags=["django_strait"])
    assert message.id == "django_strait.E003"
    assert message.msg.startswith("STRAIT.PRESETS.tiny: '128MB' is not allowed")


@override_settings(STRAIT={"PROCESS_MAX_RUNS": 0})
def test_check__process_max_runs_must_be_positive():
    (message,) = checks.run_checks(tags=["django_strait"])
    assert message.msg.startswith("STRAIT.PROCESS_MAX_RUNS: 0")


def test_presets_from_the_environment_are_json(setenv):
    setenv("STRAIT_PRESETS", '{"s": "100MB", "m": "200MB"}')
    from django_strait.conf import strait_settings

    assert strait_settings.PRESETS.names == ("s", "m")


@pytest.mark.parametrize(
    ("returncode", "error_type", "fragment"),
    [
        (-9, "system.oom", "SIGKILL"),
        (137, "system.oom", "SIGKILL"),
        (-11, "system.process_died", "SIGSEGV"),
        (-100, "system.process_died", "signal 100"),
        (3, "system.process_died", "exited with status 3"),
    ],
)
def test_died__a_sigkill_the_worker_did_not_send_counts_as_out_of_memory(
    returncode, error_type, fragment
):
    from django_strait.worker.process.wire import died

    outcome = died(returncode)
    assert outcome.error_type == error_type and fragment in outcome.error
    assert outcome.attempt_outcome == ("oom" if error_type == "system.oom" else "failed")
