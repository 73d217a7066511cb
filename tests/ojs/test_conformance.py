"""The OJS conformance suite's cases (levels 0-4, the dead-letter, admin-API and progress extensions) against a live server.

Each JSON case under tests/ojs/suite runs as one test, on a fresh database,
through tests/ojs/runner.py: real HTTP to 127.0.0.1, the reaper and the
scheduler running beside the server as a worker would run them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ojs.runner import SUITE, Runner, cases

pytestmark = pytest.mark.django_db(transaction=True)

LEVELS = (
    "level-0-core",
    "level-1-reliable",
    "level-2-scheduled",
    "level-3-workflows",
    "level-4-advanced",
    "ext-dead-letter",
    "ext-admin-api",
    "ext-progress",
)
#: Cases that wait for a cron minute to pass (65 s and more): marked slow.
SLOW = {"cron-fires-on-schedule", "cron-overlap-prevention"}
#: Cases that no server can pass as written at the suite's commit (tests/ojs/suite/README.md).
DEFECTS = {
    # Expects error types (ConnectionTimeout, ...) that its nacks never send (code only).
    "level-1-reliable/retry/retry-error-history-tracked": "expects error types no nack sends",
}


def _param(path: Path):
    name = str(path.relative_to(SUITE).with_suffix(""))
    marks = [pytest.mark.slow] if path.stem in SLOW else []
    if name in DEFECTS:
        marks.append(pytest.mark.xfail(reason=f"suite defect: {DEFECTS[name]}", strict=True))
    return pytest.param(path, id=str(path.relative_to(SUITE).with_suffix("")), marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in cases(*LEVELS)])
def test_conformance_case(path: Path, ojs_server: str) -> None:
    case = json.loads(path.read_text())
    outcome = Runner(ojs_server).run(case)
    assert not outcome.failures, f"{case['test_id']} {case['name']}:\n" + "\n".join(
        outcome.failures
    )


#: The levels whose cases the fast door serves most of (enqueue, fetch, ack, nack, heartbeat;
#: level 4: unique enqueues, paused and rate-limited fetches); a workflow's steps are fetched
#: and acked through it too (the rest goes to Django).
LEAN_LEVELS = (
    "level-0-core", "level-1-reliable", "level-3-workflows", "level-4-advanced", "ext-progress",
)  # fmt: skip


@pytest.mark.parametrize("path", [_param(p) for p in cases(*LEAN_LEVELS)])
def test_conformance_case__through_the_fast_door(path: Path, lean_server: str) -> None:
    case = json.loads(path.read_text())
    outcome = Runner(lean_server).run(case)
    assert not outcome.failures, f"{case['test_id']} {case['name']}:\n" + "\n".join(
        outcome.failures
    )
