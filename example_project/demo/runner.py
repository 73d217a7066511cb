"""What ``manage.py strait_demo`` does, step by step."""

from __future__ import annotations

import datetime as dt
import io
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.core.management import call_command
from django.db import connection
from django.db.models import Min, QuerySet
from django.utils import timezone

from django_strait.models import JobRun, WorkflowRun, WorkflowStepRun
from django_strait.rules.states import RunStatus
from example_project.demo import seeding, summary, workflow
from example_project.demo.server import LocalServer

#: The demo gives up waiting for its runs after this long (they stay queued).
DRAIN_TIME_CAP_SECS = 60.0
UNFINISHED = (RunStatus.QUEUED, RunStatus.DEQUEUED, RunStatus.EXECUTING)


def manage_py() -> str:
    """How to run ``manage.py`` again: with the Python that runs the demo, as typed.

    The README's command runs the demo with ``.venv/bin/python``: a hint that says
    ``python`` would reach another Python, without Django, on most machines.
    """
    python = Path(sys.executable)
    try:
        python = python.relative_to(Path.cwd())
    except ValueError:
        pass  # outside the current directory: the whole path
    return f"{python} manage.py"


def admin_hint() -> str:
    """The demo's closing hint: open the dead letters in the admin."""
    manage = manage_py()
    return (
        f"{manage} createsuperuser && {manage} runserver, "
        "then open http://127.0.0.1:8000/admin/django_strait/deadletter/"
    )


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What the user asked of the demo."""

    runs: int
    seed: int
    worker: bool
    verbosity: int = 1


class Demo:
    """Seed the demo jobs, trigger runs, drain them with the worker, and report."""

    def __init__(self, options: DemoOptions, write: Callable[[str], None]) -> None:
        self.options = options
        self.write = write

    def run(self) -> None:
        """Run the whole demo."""
        self.write("Migrating the database...")
        call_command("migrate", interactive=False, verbosity=0)
        if not self.options.worker:
            self._queue_only()
            return
        with LocalServer() as server:
            self.write(f"Serving the demo endpoints on {server.base_url}")
            seeding.seed_jobs(server.base_url, self.options.seed)
            ids = self._trigger()
            finished = self._drain(_runs_between(ids))
            # After the runs, not among them: its runs would change the order in which
            # the flaky endpoint's seeded answers fall, and so the story a seed tells.
            wr = self._start_workflow()
            self._drain(_step_runs(wr), what="workflow step run")
        # The server is gone: point the HTTP jobs at runserver, so that replaying
        # a dead letter from the admin later reaches the same endpoints.
        seeding.point_http_jobs(seeding.RUNSERVER_URL, self.options.seed)
        self._report(_runs_between(ids), finished, wr)

    def _queue_only(self) -> None:
        seeding.seed_jobs(seeding.RUNSERVER_URL, self.options.seed)
        ids = self._trigger()
        self._start_workflow()
        self.write(
            f"Queued {len(ids)} runs and stopped there (--no-worker). To process them, run\n"
            f"  {manage_py()} runserver     (serves the HTTP jobs' endpoints)\n"
            f"  {manage_py()} run_strait_worker"
        )

    def _trigger(self) -> list[int]:
        rng = random.Random(self.options.seed)
        ids = seeding.trigger_runs(self.options.runs, rng)
        jobs = len(seeding.DEMO_JOBS)
        self.write(
            f"Triggered {self.options.runs} runs of each of {jobs} jobs "
            f"(seed {self.options.seed}; --seed {self.options.seed} repeats this demo)"
        )
        return ids

    def _start_workflow(self) -> WorkflowRun:
        with _quiet_worker(self.options.verbosity):
            wr = workflow.start(order=self.options.seed)
        self.write(
            f"Started workflow run {wr.pk} of {workflow.NAME!r}: {len(workflow.STEPS)} steps, "
            "a fan-in, a step with its own retry policy"
        )
        return wr

    def _report_workflow(self, wr: WorkflowRun) -> None:
        wr.refresh_from_db()
        self.write("")
        self.write(workflow.render(wr, workflow.step_lines(wr)))
        self.write(
            f"  (its DAG: /admin/django_strait/workflowrun/{wr.pk}/change/ once runserver is up)"
        )

    def _drain(self, runs: QuerySet[JobRun], what: str = "run") -> bool:
        self.write(
            f"Running the worker (run_strait_worker --burst) until every {what} has ended..."
        )
        started = time.monotonic()
        deadline = started + DRAIN_TIME_CAP_SECS
        with _quiet_worker(self.options.verbosity):
            while True:
                self._burst(runs)
                pending = runs.filter(status__in=UNFINISHED)
                if not pending.exists():
                    self.write(f"All {what}s ended in {time.monotonic() - started:.1f} s.")
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(_until_next_due(pending, deadline))

    def _burst(self, runs: QuerySet[JobRun]) -> None:
        started = _database_now()
        out = None if self.options.verbosity >= 2 else io.StringIO()
        worker_id = f"strait-demo-{os.getpid()}"
        call_command("run_strait_worker", "--burst", "--worker-id", worker_id, stdout=out)
        # A burst claims every run that was due when it started; one still queued
        # and due since then means the worker was stopped early. The worker takes
        # Ctrl-C itself (a graceful stop), so this is how the demo learns of it.
        if runs.filter(status=RunStatus.QUEUED, available_at__lt=started).exists():
            raise KeyboardInterrupt

    def _report(self, runs: QuerySet[JobRun], finished: bool, wr: WorkflowRun) -> None:
        if not finished:
            left = runs.filter(status__in=UNFINISHED).count()
            self.write(
                f"Stopped waiting after {DRAIN_TIME_CAP_SECS:.0f} s with {left} runs unfinished; "
                f"`{manage_py()} run_strait_worker` will finish them."
            )
        self.write("")
        self.write(summary.render_table(summary.job_lines(runs, seeding.DEMO_JOBS)))
        self.write("")
        self.write(
            "Some dead letters (replay them from the admin or with manage.py strait_replay):"
        )
        self.write(summary.render_examples(summary.dead_letter_examples(runs)))
        self._report_workflow(wr)
        self.write("")
        self.write(f"Next: {admin_hint()}")


def _runs_between(ids: list[int]) -> QuerySet[JobRun]:
    # Only this demo's runs: an earlier demo's runs in the same database do not count.
    return JobRun.objects.filter(pk__range=(min(ids), max(ids)), job__name__in=seeding.DEMO_JOBS)


def _step_runs(wr: WorkflowRun) -> QuerySet[JobRun]:
    # Evaluated afresh on each check: a step's run appears when its parents finish,
    # in the transaction that records the last of them, so no moment has none left.
    steps = WorkflowStepRun.objects.filter(workflow_run=wr, run__isnull=False)
    return JobRun.objects.filter(pk__in=steps.values("run_id"))


def _database_now() -> dt.datetime:
    """Return the time by the clock the claim compares ``available_at`` with."""
    # PostgreSQL claims with its own now(); on other databases the worker uses ours.
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def _until_next_due(pending: QuerySet[JobRun], deadline: float) -> float:
    """Return how long to sleep before the next retry is due (bounded by ``deadline``)."""
    next_due = pending.filter(status=RunStatus.QUEUED).aggregate(at=Min("available_at"))["at"]
    wait = 0.05 if next_due is None else (next_due - timezone.now()) / dt.timedelta(seconds=1)
    return min(max(wait, 0.05), max(deadline - time.monotonic(), 0.0))


#: Loggers the demo silences while it drains: the worker's, and Django's log of
#: every 4xx/5xx the demo endpoints answer (they fail on purpose).
NOISY_LOGGERS = ("django_strait", "django.request", "django.server")


@contextmanager
def _quiet_worker(verbosity: int) -> Iterator[None]:
    # The summary is the demo's output; per-run log lines would bury it. -v 2 shows them.
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    before = [logger.level for logger in loggers]
    if verbosity < 2:
        for logger in loggers:
            logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, before, strict=True):
            logger.setLevel(level)
