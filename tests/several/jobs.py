"""The jobs of tests/e2e/test_several_databases.py: one on a queue of each alias.

Each waits a little, as a run waiting on I/O does: the drain rate of one alias is
its concurrency over that wait, not the CPU the two aliases share, so what the
stop of the other alias changes in it is what the test measures.
"""

from __future__ import annotations

import os
import time

from django_strait import job

#: Seconds each run waits.
WAIT = 0.02


def note(queue: str, context) -> None:
    """Append "queue run attempt" to this process's file in SEVERAL_TEST_NOTES (run ids
    repeat across aliases): the scenario finds the runs that executed more than once."""
    notes = os.environ.get("SEVERAL_TEST_NOTES")
    if notes:
        line = f"{queue} {context.run_id} {context.attempt}\n".encode()
        fd = os.open(
            os.path.join(notes, f"{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
        )
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


@job(name="several-one", queue="one")
def one(payload, context):
    note("one", context)
    time.sleep(WAIT)


@job(name="several-two", queue="two")
def two(payload, context):
    note("two", context)
    time.sleep(WAIT)
