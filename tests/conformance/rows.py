"""How a conformance test makes and reads rows, whatever keeps them.

A backend over django-strait's tables uses ``DatabaseRows`` (the factories and
the models). A backend that keeps runs elsewhere gives its own object of the same
shape from ``conformance_rows()`` (``tests/unit/memory.py``): then only the tests
that go through ``rows`` run on it, and those marked ``needs_database`` (they
read or write the tables themselves) are skipped.
"""

from __future__ import annotations

from typing import Any, Protocol

from django_strait.models import Job, JobRun, RunAttempt
from tests.integration.factories import make_job, make_run


class Rows(Protocol):
    def job(self, **values: Any) -> int:
        """Make a job (``enabled``, ``queue``, ``max_attempts``, ...); return its id."""

    def run(self, job: int | None = None, **values: Any) -> int:
        """Make a run of ``job`` (a new job if None), due now unless ``available_at`` says."""

    def value(self, run_id: int, name: str) -> Any:
        """One column of a run, as stored now."""

    def update(self, run_id: int, **values: Any) -> None:
        """Write columns of a run behind the backend's back (as time or another process would)."""

    def attempts(self, run_id: int) -> list[str]:
        """The outcomes of a run's attempt rows, in number order."""


class DatabaseRows:
    """Rows in django-strait's tables, through the models."""

    def job(self, **values: Any) -> int:
        return make_job(**values).pk

    def run(self, job: int | None = None, **values: Any) -> int:
        return make_run(make_job() if job is None else Job.objects.get(pk=job), **values).pk

    def value(self, run_id: int, name: str) -> Any:
        return JobRun.objects.values_list(name, flat=True).get(pk=run_id)

    def update(self, run_id: int, **values: Any) -> None:
        JobRun.objects.filter(pk=run_id).update(**values)

    def attempts(self, run_id: int) -> list[str]:
        rows = RunAttempt.objects.filter(run_id=run_id).order_by("number")
        return list(rows.values_list("outcome", flat=True))
