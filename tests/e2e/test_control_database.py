"""Circuits and endpoint health have one home over several databases: the control database.

tests/several/control_scenario.py (three SQLite files: "default", "jobs1" the
control database, "jobs2"): an HTTP job on jobs2 fails against a local endpoint
until its circuit opens. The circuit and the health score are on jobs1 only, and
a run of another job, on jobs1, that calls the same endpoint is held by that
circuit: one circuit for the fleet, not one per database. Then, with the
control database's file moved away, a worker serving jobs2 completes a plain
function's run and holds an HTTP run, spending no attempt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.layout_free]


def django(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_circuit_opened_by_one_database_holds_the_runs_of_another(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.several_sqlite_settings",
        "PYTHONPATH": str(ROOT),
        "SEVERAL_TEST_DIR": str(tmp_path),
    }
    env.pop("DATABASE_URL", None)
    for alias in ("default", "jobs1", "jobs2"):
        django(env, "-m", "django", "migrate", "--database", alias, "--verbosity", "0")

    found = json.loads(django(env, "tests/several/control_scenario.py").splitlines()[-1])

    if found["task"] is not None:  # the django.tasks backend writes to the task's alias
        assert found["task"] == {"jobs1": [], "jobs2": [["two", "completed"]]}
    assert found["circuits"] == {"jobs1": ["open"], "jobs2": []}
    assert found["health"] == {"jobs1": 1, "jobs2": 0}
    assert found["routed_circuits"] == 1  # the admin's and the API's queries find it
    assert found["two_runs"] == ["dead_letter", "dead_letter"]
    assert found["one_runs"] == [["queued", "circuit.open"]]
    # While the control database is away: runs that need no endpoint decision go on;
    # an HTTP run waits (held, no attempt spent) until it is back.
    assert found["control_away"] == {
        "plain": "completed",
        "http": ["queued", "worker.claim_failed", 0],
    }
