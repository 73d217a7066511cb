"""The example project end to end: ``strait_demo`` and a long-running worker, as subprocesses."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.layout_free]

DEMO_JOBS = (
    "send-welcome-email",
    "resize-image",
    "charge-card",
    "sync-crm",
    "partner-webhook",
    "legacy-callback",
)
TERMINAL = {"completed", "failed", "dead_letter", "discarded", "canceled"}
#: The jobs of the demo's workflow (order-fulfilment), one run of each per demo.
WORKFLOW_JOBS = ("check-order", "reserve-stock", "take-payment", "ship-order")


def summary_table(output: str) -> dict[str, dict[str, int]]:
    """Parse the demo's per-job table: job -> column -> count."""
    columns = ("runs", "completed", "retried", "dead-lettered", "failed", "other")
    table = {}
    for line in output.splitlines():
        cells = line.split()
        if len(cells) == 8 and cells[0] in DEMO_JOBS:
            table[cells[0]] = dict(zip(columns, map(int, cells[2:]), strict=True))
    return table


def counted(runs: list[dict]) -> dict[str, int]:
    """Count runs the way the demo's table does."""
    statuses = Counter(r["status"] for r in runs)
    return {
        "runs": len(runs),
        "completed": statuses["completed"],
        "retried": sum(r["attempt"] > 1 for r in runs),
        "dead-lettered": statuses["dead_letter"],
        "failed": statuses["failed"],
        "other": len(runs) - statuses["completed"] - statuses["dead_letter"] - statuses["failed"],
    }


def by_job(runs: list[dict]) -> dict[str, list[dict]]:
    grouped = defaultdict(list)
    for run in runs:
        grouped[run["job"]].append(run)
    return grouped


def expected_charge(payload: dict) -> tuple[str, int, str]:
    """(status, attempts, error type) that charge-card's payload plans for its run."""
    if payload["expired"]:
        return "failed", 1, ""
    if payload["declines"] >= 3:  # charge-card has 3 attempts
        return "dead_letter", 3, "card.declined"
    return "completed", payload["declines"] + 1, ""


def assert_runs_end_as_designed(jobs: dict[str, list[dict]]) -> None:
    for run in jobs["send-welcome-email"]:
        assert (run["status"], run["attempt"]) == ("completed", 1)
        assert run["result"]["sent_to"] == run["payload"]["to"]
    for run in jobs["resize-image"]:
        assert (run["status"], run["attempt"]) == ("completed", 1)
        assert run["result"]["image"] == run["payload"]["image"]
    for run in jobs["charge-card"]:
        status, attempts, error_type = expected_charge(run["payload"])
        assert (run["status"], run["attempt"]) == (status, attempts), run
        if error_type:
            assert run["error_type"] == error_type
    for run in jobs["sync-crm"]:
        assert (run["status"], run["attempt"], run["error_type"]) == (
            "dead_letter",
            3,
            "python.CrmUnavailable",
        )
    for run in jobs["partner-webhook"]:
        assert run["status"] in {"completed", "dead_letter"}, run
        if run["status"] == "dead_letter":
            assert (run["attempt"], run["error_type"]) == (4, "http.503")
    for run in jobs["legacy-callback"]:
        assert (run["status"], run["attempt"], run["error_type"]) == ("dead_letter", 1, "http.404")


def assert_workflow_ran_as_designed(example_project, jobs: dict[str, list[dict]], output: str):
    """One workflow run completed; its charge step took the 3 attempts of its own policy."""
    [wr] = example_project.rows("SELECT status FROM django_strait_workflowrun")
    assert wr["status"] == "completed"
    assert [(r["status"], r["attempt"]) for r in jobs["take-payment"]] == [("completed", 3)]
    for name in ("check-order", "reserve-stock", "ship-order"):
        assert [(r["status"], r["attempt"]) for r in jobs[name]] == [("completed", 1)]
    assert jobs["ship-order"][0]["result"] == {"shipped": 3, "paid": 120}
    # The two waits follow the step's policy (linear from 1 s), not the job's 30 s.
    [charge] = [line.split() for line in output.splitlines() if line.strip().startswith("charge ")]
    assert charge[:4] == ["charge", "take-payment", "completed", "3"]
    waits = [float(charge[4]), float(charge[6])]
    assert 1.0 <= waits[0] < 5 and 2.0 <= waits[1] < 6, charge


def test_strait_demo__runs_end_as_designed_and_summary_matches_database(example_project):
    output = example_project.manage("strait_demo", "--runs", "5", "--seed", "1")

    runs = example_project.runs()
    jobs = by_job(runs)
    assert sorted(jobs) == sorted(DEMO_JOBS + WORKFLOW_JOBS)
    assert all(len(jobs[name]) == 5 for name in DEMO_JOBS)
    assert_runs_end_as_designed(jobs)
    assert summary_table(output) == {name: counted(jobs[name]) for name in DEMO_JOBS}
    assert_workflow_ran_as_designed(example_project, jobs, output)
    dead_types = {r["error_type"] for r in runs if r["status"] == "dead_letter"}
    examples = [line for line in output.splitlines() if line.strip().startswith("run ")]
    assert len(examples) == 3
    assert all(line.rsplit(": ", 1)[1] in dead_types for line in examples)
    assert "admin/django_strait/deadletter/" in output
    # The closing hint names the Python that ran the demo, as the README does
    # (.venv/bin/python, from the repository), or its whole path when it lives elsewhere.
    python = Path(sys.executable)
    shown = python.relative_to(REPO_ROOT) if python.is_relative_to(REPO_ROOT) else python
    manage = f"{shown} manage.py"
    assert f"Next: {manage} createsuperuser && {manage} runserver" in output


def test_strait_demo__second_run_adds_runs_without_duplicating_jobs(example_project):
    example_project.manage("strait_demo", "--runs", "2", "--seed", "7")
    output = example_project.manage("strait_demo", "--runs", "3", "--seed", "7")

    jobs = example_project.rows("SELECT name, endpoint_url FROM django_strait_job")
    assert sorted(j["name"] for j in jobs) == sorted(DEMO_JOBS + WORKFLOW_JOBS)
    runs = example_project.runs()
    assert len([r for r in runs if r["job"] in DEMO_JOBS]) == 5 * len(DEMO_JOBS)
    assert len([r for r in runs if r["job"] in WORKFLOW_JOBS]) == 2 * len(WORKFLOW_JOBS)
    assert all(r["status"] in TERMINAL for r in runs)
    # The summary counts this invocation's runs only.
    assert {row["runs"] for row in summary_table(output).values()} == {3}
    # After the demo, the HTTP jobs point at runserver, where replays can reach them.
    http = {j["name"]: j["endpoint_url"] for j in jobs if j["endpoint_url"]}
    assert http["legacy-callback"] == "http://127.0.0.1:8000/demo/gone/"


def test_strait_demo__no_worker_only_queues(example_project):
    output = example_project.manage("strait_demo", "--runs", "2", "--no-worker")

    runs = example_project.runs()
    # And the workflow's root step, queued when the workflow run started.
    assert Counter(r["status"] for r in runs) == {"queued": 2 * len(DEMO_JOBS) + 1}
    assert "run_strait_worker" in output


def test_strait_demo__bad_runs_is_refused_naming_the_option(example_project):
    done = example_project.run("strait_demo", "--runs", "0")
    assert done.returncode != 0
    assert "--runs" in done.stderr and "from 1 to" in done.stderr


def some_run_completed(project) -> bool:
    try:
        return any(r["status"] == "completed" for r in project.runs())
    except sqlite3.OperationalError:  # not migrated yet
        return False


def test_strait_demo__ctrl_c_stops_the_worker_gracefully_and_exits_1(example_project, wait_until):
    demo = example_project.start(
        "strait_demo", "--runs", "300", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(
            lambda: some_run_completed(example_project), timeout=60, why=lambda: "none completed"
        )
        demo.send_signal(signal.SIGINT)
        _, stderr = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()

    assert demo.returncode == 1, stderr
    assert "interrupted" in stderr
    statuses = Counter(r["status"] for r in example_project.runs())
    # The worker let its runs in flight finish and put the claimed ones back.
    assert statuses["dequeued"] == statuses["executing"] == 0, statuses
    assert statuses["queued"] > 0, statuses


TRIGGER_SCRIPT = """
from django_strait import trigger_many
fast = {"initial_delay": "100ms", "max_delay": "500ms", "min_delay": "100ms"}
trigger_many("send-welcome-email", [{"to": f"u{i}@example.com"} for i in range(5)])
trigger_many("resize-image", [{"image": f"p{i}.jpg"} for i in range(5)])
trigger_many("charge-card", [{"amount": 10, "declines": 1, "expired": False}] * 3, retry=fast)
trigger_many("sync-crm", [{"contact": "c"}] * 2, max_attempts=2, retry=fast)
"""


def test_worker__long_running_process_drains_triggered_runs_and_exits_0_on_sigterm(
    example_project, wait_until, tmp_path
):
    example_project.manage("migrate", "--verbosity", "0")
    log = (tmp_path / "worker.log").open("w+")
    worker = example_project.start(
        "run_strait_worker", "--concurrency", "4", stdout=log, stderr=subprocess.STDOUT
    )
    try:
        example_project.manage("shell", "-c", TRIGGER_SCRIPT)
        wait_until(
            lambda: all(r["status"] in TERMINAL for r in example_project.runs()),
            timeout=60,
            why=lambda: (
                f"{Counter(r['status'] for r in example_project.runs())}; "
                f"worker alive: {worker.poll() is None}"
            ),
        )
        assert worker.poll() is None, "the worker must keep running without --burst"
        worker.send_signal(signal.SIGTERM)
        exit_code = worker.wait(timeout=40)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        log.seek(0)
        worker_log = log.read()
        log.close()

    assert exit_code == 0, worker_log
    jobs = by_job(example_project.runs())
    assert len(jobs["send-welcome-email"]) == 5
    assert all(r["status"] == "completed" for r in jobs["send-welcome-email"])
    assert all(r["status"] == "completed" for r in jobs["resize-image"])
    assert [(r["status"], r["attempt"]) for r in jobs["charge-card"]] == [("completed", 2)] * 3
    assert [(r["status"], r["attempt"]) for r in jobs["sync-crm"]] == [("dead_letter", 2)] * 2
