"""Finding the child processes of a worker's process pool (they name their worker's pid)."""

from __future__ import annotations

import os

CHILD_MODULE = "django_strait.worker.process.child"


def strait_children(worker_pid: int) -> list[int]:
    """Return the pids of live pool children started by ``worker_pid``, even once re-parented.

    A child's command line is ``python -m django_strait.worker.process.child <worker pid> ...``.
    """
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state == b"Z":
            continue  # exited; only its parent's wait() is missing
        if CHILD_MODULE.encode() in argv:
            i = argv.index(CHILD_MODULE.encode())
            if argv[i + 1 : i + 2] == [str(worker_pid).encode()]:
                found.append(int(entry))
    return found
