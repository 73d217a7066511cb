"""Budgets have one home over several databases: the control database.

tests/several/budget_scenario.py, on three SQLite files ("default", "jobs1" the
control database, "jobs2") and on two PostgreSQL servers ("jobs1" on the first,
"jobs2" on the second): a project whose day admits 5 runs has runs queued on
each database; a worker of jobs1 spends 2, one of jobs2 the 3 left (not 5 of its
own), and one serving both starts no more: 5 in all, not 5 on each. The project
and its ledger are on jobs1 only. A reservation whose claim rolled back is given
back by jobs2's reaper, and one whose attempt was made but never settled is
spent; neither is touched while it may still belong to a claim in progress.
A deleted project is cleared from the jobs of both databases.
With the control database away (its file moved aside, or its server stopped), a
budgeted run on jobs2 waits (no attempt spent) while a plain one completes.
"""

from __future__ import annotations

import json
import os

import pytest
from django.conf import settings

from tests import pg_cluster
from tests.conftest import ROOT
from tests.e2e.test_control_database import django
from tests.several.scenario import _sql

pytestmark = [pytest.mark.slow, pytest.mark.layout_free]

ADMITS, EACH = 5, 6


def scenario(env: dict[str, str], *args: str) -> dict:
    return json.loads(django(env, "tests/several/budget_scenario.py", *args).splitlines()[-1])


def check(found: dict, away: dict) -> None:
    drain = found["drain"]
    assert drain["project_on"] == {"jobs1": 1, "jobs2": 0}
    assert drain["routed_projects"] == ["shared"]  # the admin's and the API's queries find it
    runs = drain["runs"]
    # One budget for the fleet: 5 spent in all, 2 on jobs1 then 3 on jobs2 (one budget
    # per database would have let jobs2 spend 5, and jobs1 5 more).
    waiting = "queued:budget.exhausted"
    assert runs["jobs1"] == ["completed:"] * 2 + [waiting] * (EACH - 2), runs
    assert runs["jobs2"] == ["completed:"] * 3 + [waiting] * (EACH + 2 - 3), runs
    assert drain["ledgers"] == {"jobs1": [["0", str(ADMITS)]], "jobs2": []}
    assert drain["reservations_left"] == 0

    reaped = found["reaped"]
    assert reaped["freed"] == {"jobs1": EACH - 2, "jobs2": EACH - 1}  # a raised budget frees both
    assert reaped["reserved_before"] == [["5", str(ADMITS)]]
    assert reaped["closed_young"] == 0  # its claim might still commit: not yet
    assert reaped["closed"] == 2
    # The rolled-back claim's 2 given back; the unsettled attempt's 3 spent.
    assert reaped["after"] == [["0", str(ADMITS + 3)]]
    assert reaped["reservations_left"] == 0

    assert found["deleted"] == {"jobs1": [None], "jobs2": [None]}
    assert away == {"plain": "completed", "budgeted": ["queued", "worker.claim_failed", 0]}


def test_one_budget_over_two_databases__sqlite(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.several_sqlite_settings",
        "PYTHONPATH": str(ROOT),
        "SEVERAL_TEST_DIR": str(tmp_path),
    }
    env.pop("DATABASE_URL", None)
    for alias in ("default", "jobs1", "jobs2"):
        django(env, "-m", "django", "migrate", "--database", alias, "--verbosity", "0")

    found = scenario(env)
    control = tmp_path / "jobs1.sqlite3"
    control.rename(tmp_path / "jobs1.away")  # queries there fail: no such table
    try:
        runs = found["away_runs"]
        away = scenario(env, "away", str(runs["plain"]), str(runs["budgeted"]))
    finally:
        (tmp_path / "jobs1.away").replace(control)

    check(found, away)


@pytest.mark.postgres
def test_one_budget_over_two_databases__postgres():
    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        pytest.skip("two PostgreSQL servers: runs on the PostgreSQL passes")
    if why := pg_cluster.why_not():
        pytest.skip(why)
    servers = pg_cluster.Servers(2)
    try:
        servers.start()
        first, second = servers.servers
        _sql(first, "CREATE DATABASE app", "CREATE DATABASE strait1")
        _sql(second, "CREATE DATABASE strait2")
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.several_settings",
            "SEVERAL_TEST_PORTS": f"{first.port},{second.port}",
            "PYTHONPATH": str(ROOT),
        }
        env.pop("DATABASE_URL", None)
        for alias in ("default", "jobs1", "jobs2"):
            django(env, "-m", "django", "migrate", "--database", alias, "--verbosity", "0")

        found = scenario(env)
        first.stop()  # the control database (and "default") away
        runs = found["away_runs"]
        away = scenario(env, "away", str(runs["plain"]), str(runs["budgeted"]))
    finally:
        servers.stop()

    check(found, away)
