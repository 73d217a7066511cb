"""A child process of the worker's pool: set Django up once, then run handlers one at a time.

Started by ``pool`` as ``python -m django_strait.worker.process.child PARENT_PID
COMMANDS_FD RESULTS_FD LIFELINE_FD``: a fresh interpreter (spawned, not forked),
so it shares no database connection, lock or thread with the worker.

It never outlives the worker: on Linux the kernel sends it SIGKILL when the
worker dies (``PR_SET_PDEATHSIG``, however the worker died, kill -9 included),
and on every system a thread waits on the lifeline pipe, whose other end only
the worker holds: when the worker is gone, the read returns and the child exits.

Nothing a run starts outlives the run: the child adopts the processes its handlers
orphan (a child subreaper, Linux), the worker kills the child with everything below
it (``tree``), and after each run the child kills what the handler left running.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import logging
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import django
from django.db import connections

# None of these reads settings or models at import: the child imports them before setup.
from django_strait.dispatch.python import RunContext, call_sync, settle
from django_strait.rules.handlers import UNKNOWN_HANDLER, find_handler, handlers
from django_strait.rules.outcome import failure
from django_strait.worker.process import tree, wire

logger = logging.getLogger(__name__)

#: prctl(2) option: the signal this process gets when its parent dies.
PR_SET_PDEATHSIG = 1
#: The child's exit status when the worker is gone.
EXIT_ORPHANED = 70
#: How long the child waits for what it killed after a run to exit, to reap it.
REAP_TIMEOUT = 2.0


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGKILL when the worker dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the lifeline still stops it
    if os.getppid() != parent_pid:  # the worker died before prctl took effect
        os._exit(EXIT_ORPHANED)


def watch_lifeline(fd: int) -> None:
    """Exit as soon as the worker's end of the lifeline closes (the worker is gone)."""

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="strait-lifeline", daemon=True).start()


def set_up(init: dict[str, Any]) -> None:
    """Set Django up as the worker has it, on the worker's databases."""
    if init.get("settings"):
        os.environ["DJANGO_SETTINGS_MODULE"] = init["settings"]
    django.setup()
    # The worker's database names, which a test runner may have changed after start.
    for alias, name in init.get("databases", {}).items():
        if alias in connections:
            connections[alias].settings_dict["NAME"] = name


def execute(message: dict[str, Any], max_result_bytes: int) -> dict[str, Any]:
    """Run one handler for one attempt and return its outcome on the wire."""
    handler = find_handler(message["handler"])
    if handler is None:
        outcome = failure(UNKNOWN_HANDLER, handlers.unknown(message["handler"]), retryable=False)
        return wire.outcome_to_wire(outcome)
    context = RunContext(
        run_id=message["run_id"],
        attempt=message["attempt"],
        job=message["job"],
        payload=message["payload"],
        parents=(message.get("workflow") or {}).get("parents", {}),
        workflow=message.get("workflow"),
    )
    try:
        outcome = call_sync(handler, message["payload"], context, max_result_bytes=max_result_bytes)
        if inspect.isawaitable(outcome):
            outcome = asyncio.run(settle(outcome, max_result_bytes=max_result_bytes))
        if outcome.error_type == "python.MemoryError":
            outcome = wire.oom(f"the handler ran out of memory: {outcome.error}")
        return wire.outcome_to_wire(outcome)
    except MemoryError:
        return wire.outcome_to_wire(wire.oom("the child ran out of memory"))


def end_of_run(run_id: int) -> None:
    """Kill and reap the processes a run left running: none outlives its run.

    Nothing tracks them once the handler has returned (no timeout, no memory watch,
    no cancel), and an orphan of this child's would be init's at its exit.
    """
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return  # no child at all, so nothing below either: the usual case, one call
    killed = tree.kill_descendants(os.getpid())
    if killed:
        logger.warning(
            "run %s left processes running after its handler returned: killed %s",
            run_id, sorted(killed), extra={"run_id": run_id},
        )  # fmt: skip
    deadline = time.monotonic() + REAP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.005)


def serve(commands: Connection, results: Connection) -> None:
    """Answer run messages until told to stop or the worker's end closes."""
    init = wire.loads(commands.recv_bytes())
    set_up(init)
    max_result_bytes = int(init.get("max_result_bytes", 65536))
    results.send_bytes(wire.dumps({"ready": os.getpid()}))
    while True:
        try:
            message = wire.loads(commands.recv_bytes())
        except EOFError:
            return
        if message.get("stop"):
            return
        outcome = execute(message, max_result_bytes)
        end_of_run(message["run_id"])
        results.send_bytes(wire.dumps(outcome))


def main(argv: list[str]) -> None:
    """The child's entry point."""
    parent_pid, commands_fd, results_fd, lifeline_fd = (int(a) for a in argv)
    die_with_parent(parent_pid)
    watch_lifeline(lifeline_fd)
    tree.become_subreaper()
    # The worker stops its children itself, after draining: a Ctrl-C in the terminal or a
    # service manager's SIGTERM to the whole group must not kill a run midway.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    serve(Connection(commands_fd, writable=False), Connection(results_fd, readable=False))


if __name__ == "__main__":
    main(sys.argv[1:])
