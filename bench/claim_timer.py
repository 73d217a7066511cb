"""A worker that also writes how long each of its claims took: ``bench_history``'s worker.

    python -m bench.claim_timer <claims.log> run_strait_worker [options]

The storage backend's ``claim`` is wrapped with a clock (the statement's round trip
as the worker sees it, the gate and start not included); each claim appends
``<unix time> <ms> <runs>`` to the log. Benchmark instrumentation only.
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

    from django_strait.storage import PostgresStorage

    log = open(log_path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    original = PostgresStorage.claim

    @functools.wraps(original)
    def timed(self, *args, **kwargs):
        t = time.perf_counter()
        runs = original(self, *args, **kwargs)
        log.write(f"{time.time():.3f} {(time.perf_counter() - t) * 1000:.3f} {len(runs)}\n")
        return runs

    PostgresStorage.claim = timed
    execute_from_command_line(["manage.py", *command])


if __name__ == "__main__":
    main()
