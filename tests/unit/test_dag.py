"""The workflow DAG rules, without a database: checks, walks and how a run settles."""

from __future__ import annotations

import pytest

from django_strait.rules import dag
from django_strait.rules.retry import BUILTIN, RetryPolicy, resolve, step_partial

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


# -- what a run's move means for its workflow run -------------------------------------


@pytest.mark.parametrize(
    ("run_status", "step"),
    [
        ("completed", "completed"), ("dead_letter", "failed"), ("failed", "failed"),
        ("discarded", "failed"), ("canceled", "canceled"), ("queued", "started"),
        ("executing", "started"), (None, "started"),
    ],
)  # fmt: skip
def test_step_status__a_run_that_ends_ends_its_step_else_the_step_stays_started(run_status, step):
    assert dag.step_status(run_status) == step


def test_stopped__cancels_waiting_steps_only():
    status = {"a": "completed", "b": "waiting", "c": "started", "d": "skipped"}

    assert dag.stopped(status) == {**status, "b": "canceled"}


def test_parents_left__counts_each_waiting_steps_parents_that_did_not_end_well():
    parents = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    status = {"a": "completed", "b": "failed", "c": "started", "d": "waiting"}

    assert dag.parents_left(parents, status, lenient=set()) == {"d": 2}
    assert dag.parents_left(parents, status, lenient={"b"}) == {"d": 1}


def test_released_and_counted_down__a_child_is_due_when_its_last_parents_end():
    children = {1: (3,), 2: (3, 4)}
    drop = dag.released(children, [1, 2])
    waiting = [(30, 3, 2), (40, 4, 2), (50, 5, 1)]  # (step run, step, parents_left)

    due, by_left = dag.counted_down(waiting, drop)

    assert drop == {3: 2, 4: 1}
    assert due == [(30, 3)] and by_left == {1: [40]}


def test_why_failed__names_the_first_blocking_step_and_how_its_run_ended():
    status = {"a": "completed", "c": "failed", "b": "canceled", "d": "skipped"}

    why = dag.why_failed(status, lenient=set(), ended={"c": "dead_letter (http.503)"})

    assert why == "step 'b' ended canceled"
    assert dag.why_failed(status, {"b"}, {"c": "dead_letter (http.503)"}) == (
        "step 'b' ended canceled"
    )
    assert dag.why_failed({"c": "failed"}, set(), {"c": "dead_letter (http.503)"}) == (
        "step 'c' ended dead_letter (http.503)"
    )
    assert dag.stalled_error(3600) == "no step progressed for 3600 s while steps wait"
