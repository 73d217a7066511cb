"""The worker's pool of warm child processes, driven from its event loop.

Each process run takes a child (idle, or spawned if fewer than ``size`` exist),
sends it the run over a pipe, and watches it every ``WATCH_INTERVAL``: its
resident memory against the run's preset, the run's deadline, and whether the
worker was told to stop the run (canceled, or no longer its own). Whichever
trips first kills the child with SIGKILL; the outcome says which
(``system.oom``, ``python.timeout``, ``python.canceled``). A child that dies on
its own of SIGKILL counts as out of memory too (the kernel's OOM killer).

Children are spawned (a fresh ``python -m``), not forked from the worker: the
worker has threads and open database connections, and a forked child would
inherit both (docs/process-execution.md has the measurements). A child is
replaced after ``max_runs`` runs, after its memory grew past what it started
with by more than ``RETIRE_GROWTH``, and after it was killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

from django_strait.rules.outcome import Outcome, failure
from django_strait.rules.presets import show_bytes
from django_strait.worker.process import tree, wire

logger = logging.getLogger(__name__)

#: How often a running child's memory, deadline and stop flag are checked.
WATCH_INTERVAL = 0.05
#: How long a new child may take to import Django and the project.
START_TIMEOUT = 60.0
#: How long a child told to stop may take to exit before it is killed.
STOP_TIMEOUT = 5.0
#: A child whose resident memory grew this much past its start is replaced after the run:
#: memory a handler freed is often not returned to the system, and would count
#: against the next run's preset.
RETIRE_GROWTH = 64 * 2**20

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True, slots=True)
class Task:
    """One attempt to run in a child."""

    run_id: int
    attempt: int
    job: str
    handler: str
    payload: Any
    workflow: Mapping[str, Any] | None
    preset: str
    limit_bytes: int
    timeout: float

    def message(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "attempt": self.attempt,
            "job": self.job,
            "handler": self.handler,
            "payload": self.payload,
            "workflow": self.workflow,
        }


class ChildStartError(Exception):
    """A child process did not come up."""


def resident_bytes(pid: int) -> int | None:
    """Return a process's resident memory in bytes (None where /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


class Child:
    """One child process and its pipes."""

    def __init__(
        self, proc: subprocess.Popen, commands: Connection, results: Connection, lifeline: int
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.commands = commands
        self.results = results
        self._lifeline = lifeline
        self.runs = 0
        self.started_rss = 0
        self.killed = False

    @property
    def alive(self) -> bool:
        return not self.killed and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the child and every process below it: any process its handler started,
        also one in a session of its own (``tree``).

        SIGKILL, since a handler may ignore every other signal. The child leads a
        process group of its own (it was started in a new session): the group is
        killed too, which is all there is where /proc is not.
        """
        self.killed = True
        if self.proc.poll() is not None:
            return  # reaped: its pid may be another process's now
        tree.kill_tree(self.pid)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def receive(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[dict[str, Any] | None]:
        """Return a future of the child's next message (None: the pipe closed, it died)."""
        future: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        fd = self.results.fileno()

        def readable() -> None:
            loop.remove_reader(fd)
            try:
                message: dict[str, Any] | None = wire.loads(self.results.recv_bytes())
            except (EOFError, OSError, ValueError):
                message = None
            if not future.done():
                future.set_result(message)

        loop.add_reader(fd, readable)
        future.add_done_callback(lambda _: loop.remove_reader(fd))
        return future

    async def reaped(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """Wait for the child to exit (killing it past ``timeout``); return its exit code."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.kill()
                deadline = time.monotonic() + timeout
            await asyncio.sleep(0.005)
        self.close()
        return self.proc.returncode

    def close(self) -> None:
        """Close the worker's ends of the pipes (the lifeline last: it tells the child to go)."""
        for conn in (self.commands, self.results):
            with contextlib.suppress(OSError):
                conn.close()
        if self._lifeline >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lifeline)
            self._lifeline = -1


class ProcessPool:
    """Up to ``size`` warm children running process runs, one run each at a time."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        size: int,
        max_runs: int,
        max_result_bytes: int,
        settings_module: str,
        databases: Mapping[str, str],
    ) -> None:
        self.size = size
        self.max_runs = max_runs
        self._loop = loop
        self._init = {
            "settings": settings_module,
            "databases": dict(databases),
            "max_result_bytes": max_result_bytes,
        }
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Child] = []
        self._children: set[Child] = set()
        #: Run id -> the child running it.
        self.busy: dict[int, Child] = {}
        #: Run id -> why it must stop (set by ``stop_run``; read by the watch).
        self._stop: dict[int, str] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._warming: asyncio.Task[None] | None = None
        self.spawned = 0

    @property
    def pids(self) -> list[int]:
        """The pids of every child alive."""
        return [c.pid for c in self._children]

    # -- runs -----------------------------------------------------------------------

    async def run(self, task: Task) -> Outcome:
        """Run ``task`` in a child and return its outcome (never raises for the run's sake)."""
        async with self._slots:
            if task.run_id in self._stop:
                return _stopped(self._stop.pop(task.run_id))
            try:
                child = await self._take()
            except ChildStartError as exc:
                return failure("system.process_start", str(exc))
            self.busy[task.run_id] = child
            try:
                return await self._execute(child, task)
            finally:
                del self.busy[task.run_id]
                self._stop.pop(task.run_id, None)
                self._give_back(child)

    def stop_run(self, run_id: int, why: str) -> None:
        """Stop a run now: kill its child if it runs, else refuse it when its turn comes."""
        self._stop[run_id] = why
        child = self.busy.get(run_id)
        if child is not None:
            child.kill()

    async def _execute(self, child: Child, task: Task) -> Outcome:
        began = time.monotonic()
        reply = child.receive(self._loop)
        try:
            child.commands.send_bytes(wire.dumps(task.message()))
        except (OSError, ValueError) as exc:
            reply.cancel()
            child.kill()
            await child.reaped()
            return failure("system.process_died", f"the child could not take the run: {exc}")
        verdict: Outcome | None = None
        peak = 0
        while not reply.done():
            await asyncio.wait((reply,), timeout=WATCH_INTERVAL)
            if reply.done():
                break
            rss = resident_bytes(child.pid) or 0
            peak = max(peak, rss)
            verdict = self._verdict(task, rss, time.monotonic() - began)
            if verdict is not None:
                child.kill()
                break
        try:
            message = await asyncio.wait_for(reply, STOP_TIMEOUT)
        except TimeoutError:  # a grandchild holds the pipe open: the child is gone anyway
            message = None
        if message is not None and "kind" in message:
            return wire.outcome_from_wire(message)  # it answered before the kill landed
        returncode = await child.reaped()
        # The attempt's duration is the child's time with the run (not the wait for a child).
        spent = {"duration_ms": int((time.monotonic() - began) * 1000)}
        if verdict is not None:
            return replace(verdict, **spent)
        if task.run_id in self._stop:
            return replace(_stopped(self._stop[task.run_id]), **spent)
        outcome = replace(wire.died(returncode), **spent)
        logger.warning(
            "the child of run %s (pid %s) died: %s (peak resident memory %s)",
            task.run_id, child.pid, outcome.error, show_bytes(peak),
            extra={"run_id": task.run_id, "job": task.job, "attempt": task.attempt},
        )  # fmt: skip
        return outcome

    def _verdict(self, task: Task, rss: int, elapsed: float) -> Outcome | None:
        """Return why the child must be killed now, or None."""
        if task.run_id in self._stop:
            return _stopped(self._stop[task.run_id])
        if elapsed >= task.timeout:
            return failure(
                "python.timeout",
                f"the handler ran past the job's timeout of {task.timeout:g}s; "
                "its child process was killed",
                attempt_outcome="timed_out",
            )
        if rss > task.limit_bytes:
            return wire.oom(
                f"the child process used {show_bytes(rss)}, over preset {task.preset}'s "
                f"{show_bytes(task.limit_bytes)}; it was killed"
            )
        return None

    # -- children -------------------------------------------------------------------

    def start_warming(self) -> None:
        """Start the children in the background; runs that need one meanwhile wait for it."""
        self._warming = self._loop.create_task(self.warm())

    async def warm(self) -> None:
        """Start children until ``size`` are alive (at start-up, when process jobs exist).

        All at once: each spends its start-up importing Django, in parallel.
        """
        missing = self.size - len(self._children)
        started = await asyncio.gather(
            *(self._spawn() for _ in range(missing)), return_exceptions=True
        )
        for child in started:
            if isinstance(child, Child):
                self._idle.append(child)
            else:
                logger.error("starting a child process failed: %s", child)

    async def _take(self) -> Child:
        if self._warming is not None and not self._warming.done():
            await asyncio.shield(self._warming)
        while self._idle:
            child = self._idle.pop()
            if child.alive:
                return child
            self._forget(child)
            await child.reaped()
        return await self._spawn()

    def _give_back(self, child: Child) -> None:
        if not child.alive:  # killed (or died) after it answered: reap it, close its pipes
            self._forget(child)
            self._reap_later(child)
            return
        child.runs += 1
        grown = (resident_bytes(child.pid) or 0) - child.started_rss
        if child.runs >= self.max_runs or grown > RETIRE_GROWTH:
            self._retire(child)
        else:
            self._idle.append(child)

    def _retire(self, child: Child) -> None:
        self._forget(child)
        with contextlib.suppress(OSError, ValueError):
            child.commands.send_bytes(wire.dumps({"stop": True}))
        self._reap_later(child)

    def _reap_later(self, child: Child) -> None:
        task = self._loop.create_task(child.reaped())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def _forget(self, child: Child) -> None:
        self._children.discard(child)
        with contextlib.suppress(ValueError):
            self._idle.remove(child)

    async def _spawn(self) -> Child:
        """Start a child and wait until it has set Django up (it must be on the loop's thread:
        Linux ties the child's parent-death signal to the thread that started it)."""
        commands_r, commands_w = os.pipe()
        results_r, results_w = os.pipe()
        lifeline_r, lifeline_w = os.pipe()
        theirs = (commands_r, results_w, lifeline_r)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "django_strait.worker.process.child", str(os.getpid()),
                 *(str(fd) for fd in theirs)],
                pass_fds=theirs, env=_child_env(), stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            for fd in (*theirs, commands_w, results_r, lifeline_w):
                os.close(fd)
            raise ChildStartError(f"the child process could not start: {exc}") from exc
        finally:
            for fd in theirs:
                with contextlib.suppress(OSError):
                    os.close(fd)
        child = Child(
            proc, Connection(commands_w, readable=False), Connection(results_r, writable=False),
            lifeline_w,
        )  # fmt: skip
        self._children.add(child)
        self.spawned += 1
        await self._handshake(child)
        return child

    async def _handshake(self, child: Child) -> None:
        ready = child.receive(self._loop)
        child.commands.send_bytes(wire.dumps(self._init))
        try:
            message = await asyncio.wait_for(ready, START_TIMEOUT)
        except TimeoutError:
            message = None
        if not message or "ready" not in message:
            self._forget(child)
            child.kill()
            code = await child.reaped()
            raise ChildStartError(
                f"the child process (pid {child.pid}) did not start (exit status {code}); "
                "its output above says why"
            )
        child.started_rss = resident_bytes(child.pid) or 0

    async def close(self) -> None:
        """Stop every child: idle ones are told to exit, busy ones killed; wait for all."""
        if self._warming is not None:
            await asyncio.gather(self._warming, return_exceptions=True)
        for child in list(self._children):
            if child in self._idle:
                self._retire(child)
            else:
                child.kill()
                self._forget(child)
                self._reap_later(child)
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)


def _stopped(why: str) -> Outcome:
    return failure("python.canceled", f"{why}; its child process was killed", retryable=False)


def _child_env() -> dict[str, str]:
    # The worker's own import path: the child imports the same project and handlers.
    env = dict(os.environ)
    path = [p or os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env
