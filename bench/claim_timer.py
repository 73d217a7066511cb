"""A worker that also writes how long each of its claims took: ``bench_history``'s worker.

    python -m bench.claim_timer <claims.log> run_strait_worker [options]
    python -m bench.claim_timer <claims.log> procrastinate worker [options]

For django-strait the storage backend's ``claim`` is wrapped with a clock (the
statement's round trip as the worker sees it, the gate and start not included); for
procrastinate its job manager's ``fetch_job`` (the worker's one call per job: the
connector's round trip of ``procrastinate_fetch_job_v2``, and the row made a ``Job``).
Each call appends ``<unix time> <ms> <runs>`` to the log (procrastinate fetches one
job or none). Benchmark instrumentation only.
"""

from __future__ import annotations

import functools
import sys
import time

import django


def main() -> None:
    log_path, *command = sys.argv[1:]
    django.setup()
    from django.core.management import execute_from_command_line

    log = open(log_path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    if command[0] == "procrastinate":
        _time_procrastinate_fetch(log)
    else:
        _time_strait_claim(log)
    execute_from_command_line(["manage.py", *command])


def _time_strait_claim(log) -> None:
    from django_strait.storage import PostgresStorage

    original = PostgresStorage.claim

    @functools.wraps(original)
    def timed(self, *args, **kwargs):
        t = time.perf_counter()
        runs = original(self, *args, **kwargs)
        _write(log, t, len(runs))
        return runs

    PostgresStorage.claim = timed


def _time_procrastinate_fetch(log) -> None:
    from procrastinate.manager import JobManager

    original = JobManager.fetch_job

    @functools.wraps(original)
    async def timed(self, *args, **kwargs):
        t = time.perf_counter()
        job = await original(self, *args, **kwargs)
        _write(log, t, 0 if job is None else 1)
        return job

    JobManager.fetch_job = timed


def _write(log, started: float, runs: int) -> None:
    log.write(f"{time.time():.3f} {(time.perf_counter() - started) * 1000:.3f} {runs}\n")


if __name__ == "__main__":
    main()
