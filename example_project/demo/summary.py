"""Count how the demo's runs ended and print it as a table."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet

from django_strait.models import JobRun
from django_strait.rules.states import RunStatus

COLUMNS = ("runs", "completed", "retried", "dead-lettered", "failed", "other")
ERROR_CHARS = 90


@dataclass(frozen=True, slots=True)
class JobLine:
    """How one job's runs ended. ``retried`` counts runs that needed more than one attempt."""

    job: str
    kind: str
    runs: int
    completed: int
    retried: int
    dead_lettered: int
    failed: int

    @property
    def other(self) -> int:
        """Runs neither completed, dead-lettered nor failed (discarded, canceled, unfinished)."""
        return self.runs - self.completed - self.dead_lettered - self.failed


@dataclass(frozen=True, slots=True)
class DeadLetterExample:
    """One dead letter, as the summary shows it."""

    run_id: int
    job: str
    attempt: int
    error_type: str
    last_error: str


def job_lines(runs: QuerySet[JobRun], order: Iterable[str]) -> list[JobLine]:
    """Count ``runs`` per job, in the order of the job names in ``order``."""
    counts = {
        row["job__name"]: row
        for row in runs.values("job__name", "job__endpoint_url").annotate(
            runs=Count("id"),
            completed=Count("id", filter=Q(status=RunStatus.COMPLETED)),
            retried=Count("id", filter=Q(attempt__gt=1)),
            dead_lettered=Count("id", filter=Q(status=RunStatus.DEAD_LETTER)),
            failed=Count("id", filter=Q(status=RunStatus.FAILED)),
        )
    }
    return [_line(counts[name]) for name in order if name in counts]


def _line(row: dict) -> JobLine:
    return JobLine(
        job=row["job__name"],
        kind="http" if row["job__endpoint_url"] else "python",
        runs=row["runs"],
        completed=row["completed"],
        retried=row["retried"],
        dead_lettered=row["dead_lettered"],
        failed=row["failed"],
    )


def dead_letter_examples(runs: QuerySet[JobRun], limit: int = 3) -> list[DeadLetterExample]:
    """Pick up to ``limit`` dead letters from ``runs``, a different error type each if possible."""
    letters = list(runs.filter(status=RunStatus.DEAD_LETTER).select_related("job").order_by("id"))
    firsts: dict[str, JobRun] = {}
    for letter in letters:
        firsts.setdefault(letter.error_type, letter)
    picked = [*firsts.values(), *(r for r in letters if r not in firsts.values())][:limit]
    return [
        DeadLetterExample(r.pk, r.job.name, r.attempt, r.error_type, r.last_error) for r in picked
    ]


def render_table(lines: list[JobLine]) -> str:
    """Return the per-job table, one row per job and a header."""
    width = max([len("job"), *(len(line.job) for line in lines)])
    head = f"{'job':<{width}}  {'kind':<6}" + "".join(f"  {c}" for c in COLUMNS)
    rows = [head, "-" * len(head)]
    for line in lines:
        values = (line.runs, line.completed, line.retried, line.dead_lettered, line.failed)
        cells = "".join(
            f"  {v:>{len(c)}}" for c, v in zip(COLUMNS, (*values, line.other), strict=True)
        )
        rows.append(f"{line.job:<{width}}  {line.kind:<6}{cells}")
    return "\n".join(rows)


def render_examples(examples: list[DeadLetterExample]) -> str:
    """Return the example dead letters, two lines each."""
    if not examples:
        return "No dead letters this time."
    rows = []
    for ex in examples:
        error = " ".join(ex.last_error.split())
        if len(error) > ERROR_CHARS:
            error = error[: ERROR_CHARS - 3] + "..."
        attempts = f"{ex.attempt} attempt" + ("" if ex.attempt == 1 else "s")
        rows.append(f"  run {ex.run_id} ({ex.job}, {attempts}): {ex.error_type}")
        rows.append(f"      {error}")
    return "\n".join(rows)
