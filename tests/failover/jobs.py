"""The jobs of tests/e2e/test_failover_standby.py (tests/failover_settings.py installs this app): each attempt notes its start and end.

Every attempt appends a "start" and an "end" line (run id, attempt, worker pid,
wall-clock time) to a file of its worker process in ``FAILOVER_TEST_NOTES``,
outside the database that fails over: the test reads them to find a run that
executed twice at once, or twice one after the other.
"""

from __future__ import annotations

import os
import time

from django_strait import job

#: An attempt of a "ghost" run the first time: far longer than the test; its worker is killed.
GHOST_FIRST_ATTEMPT_SECS = 120.0


def note(run_id: int, attempt: int, what: str) -> None:
    """Append one line (one write on an O_APPEND file: the threads' lines never mix)."""
    path = os.path.join(os.environ["FAILOVER_TEST_NOTES"], f"{os.getpid()}.log")
    line = f"{run_id} {attempt} {os.getpid()} {what} {time.time():.6f}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@job(name="failover-step", max_attempts=10, retry={"initial_delay": "1s", "jitter": 0})
def step(payload, context):
    note(context.run_id, context.attempt, "start")
    time.sleep(payload.get("secs", 0.02))
    note(context.run_id, context.attempt, "end")


@job(name="failover-ghost", queue="ghost", max_attempts=10, retry={"initial_delay": "0s"})
def ghost(payload, context):
    """Held by a worker that dies with the primary: the reaper on the new primary rescues it."""
    note(context.run_id, context.attempt, "start")
    time.sleep(GHOST_FIRST_ATTEMPT_SECS if context.attempt == 1 else 0.02)
    note(context.run_id, context.attempt, "end")
