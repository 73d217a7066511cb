"""STRAIT["DATABASE"] is honoured by every surface, not only by the worker.

With the tables in a second database ("jobs") and ``StraitRouter`` installed,
trigger(), the REST API, the admin, the worker and replay all read and write
there; "default" holds only the users and their API keys.
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
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_every_surface_uses_the_strait_database(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.routed_settings",
        "PYTHONPATH": str(ROOT),
        "STRAIT_TEST_DEFAULT_DB": str(tmp_path / "default.sqlite3"),
        "STRAIT_TEST_JOBS_DB": str(tmp_path / "jobs.sqlite3"),
    }
    env.pop("DATABASE_URL", None)
    for alias in ("default", "jobs"):
        django(env, "-m", "django", "migrate", "--database", alias, "--verbosity", "0")

    found = json.loads(django(env, "tests/e2e/routed_scenario.py").splitlines()[-1])

    assert (found["api_trigger"], found["admin_add"], found["replay"]) == (202, 302, 200)
    # Runs triggered from code, the API and of a job made in the admin completed; the
    # dead letter was replayed through the API.
    assert found["jobs_db_runs"] == ["completed", "completed", "completed", "queued"]
    assert "from-admin" in found["jobs_db_jobs"]
    assert found["default_has_run_table"] is False
    assert found["jobs_has_apikey_table"] is False
    assert found["default_api_keys"] == 1
