"""The workflow DAG rules, without a database: checks, walks and how a run settles."""

from __future__ import annotations

import pytest

from django_strait import dag
from django_strait.retry import BUILTIN, RetryPolicy, resolve, step_partial

DIAMOND = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}


def test_check__accepts_a_diamond():
    dag.check(list(DIAMOND.items()))


def test_check__refuses_a_cycle_naming_its_steps():
    with pytest.raises(dag.DagError) as err:
        dag.check([("a", ["c"]), ("b", ["a"]), ("c", ["b"])])
    assert err.value.field == "depends_on"
    assert "cycle" in str(err.value) and "a -> c -> b -> a" in str(err.value)


def test_check__refuses_an_unknown_dependency_naming_the_step():
    with pytest.raises(dag.DagError) as err:
        dag.check([("a", []), ("b", ["zz"])])
    assert (err.value.step, err.value.field) == ("b", "depends_on")
    assert "'zz'" in str(err.value)


def test_check__refuses_a_duplicate_name():
    with pytest.raises(dag.DagError) as err:
        dag.check([("a", []), ("a", [])])
    assert (err.value.step, err.value.field) == ("a", "name")


def test_check__refuses_a_step_that_depends_on_itself():
    with pytest.raises(dag.DagError) as err:
        dag.check([("a", ["a"])])
    assert err.value.step == "a"


def test_descendants__are_transitive():
    assert dag.descendants(DIAMOND, ["a"]) == {"b", "c", "d"}
    assert dag.descendants(DIAMOND, ["b"]) == {"d"}


def test_settle__starts_the_roots_of_a_new_run():
    status = dict.fromkeys(DIAMOND, dag.WAITING)
    new, wf = dag.settle(DIAMOND, status, set())
    assert new == {**status, "a": dag.STARTED} and wf == "running"


def test_settle__fan_in_waits_for_every_parent():
    status = {"a": dag.COMPLETED, "b": dag.COMPLETED, "c": dag.STARTED, "d": dag.WAITING}
    assert dag.settle(DIAMOND, status, set())[0]["d"] == dag.WAITING
    status["c"] = dag.COMPLETED
    assert dag.settle(DIAMOND, status, set())[0]["d"] == dag.STARTED


def test_settle__a_failure_skips_its_dependents_and_fails_the_workflow():
    status = {"a": dag.COMPLETED, "b": dag.FAILED, "c": dag.STARTED, "d": dag.WAITING}
    new, wf = dag.settle(DIAMOND, status, set())
    assert new["d"] == dag.SKIPPED and new["c"] == dag.STARTED and wf == "failed"


def test_settle__continue_on_failure_lets_children_run():
    status = {"a": dag.COMPLETED, "b": dag.FAILED, "c": dag.COMPLETED, "d": dag.WAITING}
    new, wf = dag.settle(DIAMOND, status, {"b"})
    assert new["d"] == dag.STARTED and wf == "running"


def test_settle__a_replayed_step_unskips_its_dependents():
    status = {"a": dag.COMPLETED, "b": dag.STARTED, "c": dag.COMPLETED, "d": dag.SKIPPED}
    new, wf = dag.settle(DIAMOND, status, set())
    assert new["d"] == dag.WAITING and wf == "running"


def test_settle__completes_when_every_step_completed():
    status = dict.fromkeys(DIAMOND, dag.COMPLETED)
    assert dag.settle(DIAMOND, status, set())[1] == "completed"


class _Job:
    max_attempts = 1
    retry_strategy = "exponential"
    retry_initial_delay_secs = 10.0
    retry_max_delay_secs = 100.0


def test_policy__merges_job_then_step_then_run():
    step = step_partial(
        {"retry_backoff": "linear", "retry_initial_delay_secs": 2, "max_attempts": 3}
    )
    policy = resolve(_Job(), step=step, defaults=BUILTIN)
    assert isinstance(policy, RetryPolicy)
    assert (policy.strategy, policy.initial_delay, policy.max_attempts) == ("linear", 2.0, 3)
    assert policy.max_delay == 100.0  # the job's, the step does not say
    run = resolve(_Job(), 5, {"initial_delay": 7}, step=step, defaults=BUILTIN)
    assert (run.strategy, run.initial_delay, run.max_attempts) == ("linear", 7.0, 5)


def test_step_partial__names_the_steps_field():
    with pytest.raises(ValueError, match="step.retry_backoff"):
        step_partial({"retry_backoff": "sideways"})
