"""Two worker processes racing for the same runs: each run executes exactly once."""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest

from django_strait import trigger_many
from django_strait.models import Job, JobRun, RunAttempt
from tests.conftest import ROOT, worker_command

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RUNS = 2000


def test_two_worker_processes__execute_every_run_exactly_once(http_server, worker_env):
    Job.objects.create(name="race", endpoint_url=http_server.url("/race"), timeout_secs=30)
    runs = trigger_many("race", [{"i": i} for i in range(RUNS)])

    workers = [
        subprocess.Popen(
            worker_command(
                "--burst", "--concurrency", "20", "--batch-size", "50", "--worker-id", f"racer-{n}"
            ),
            cwd=ROOT,
            env=worker_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in (1, 2)
    ]
    outputs = [w.communicate(timeout=240)[0] for w in workers]

    assert [w.returncode for w in workers] == [0, 0], outputs
    hits = http_server.run_ids()
    assert len(hits) == RUNS and set(hits.values()) == {1}, outputs  # each run dispatched once
    assert set(hits) == {r.pk for r in runs}
    assert Counter(JobRun.objects.values_list("status", flat=True)) == {"completed": RUNS}
    per_worker = Counter(RunAttempt.objects.values_list("worker", flat=True))
    assert RunAttempt.objects.count() == RUNS
    assert set(per_worker) <= {"racer-1", "racer-2"}
