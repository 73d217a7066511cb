"""Handlers the tests trigger (importable by worker subprocesses too)."""

from __future__ import annotations

import asyncio
import os
import time

from django_strait import DeadLetter, Discard, Error, Fail, Retry, job


@job(name="test-noop")
def noop(payload):
    return None


@job(name="test-echo")
def echo(payload, context):
    return {"payload": payload, "attempt": context.attempt, "run_id": context.run_id}


@job(name="test-async-echo")
async def async_echo(payload):
    await asyncio.sleep(0)
    return {"async": True, "payload": payload}


@job(name="test-boom", max_attempts=2, retry={"initial_delay": "1s", "jitter": 0})
def boom(payload):
    raise ValueError("boom")


@job(name="test-actions", max_attempts=5, retry={"jitter": 0})
def actions(payload):
    kind = payload.get("action")
    if kind == "retry":
        raise Retry("asked", delay=payload.get("delay"))
    if kind == "discard":
        raise Discard("dropped")
    if kind == "dead_letter":
        raise DeadLetter("straight to the DLQ")
    if kind == "fail":
        raise Fail("permanent")
    if kind == "error":
        raise Error("typed", type=payload["type"])
    return "ok"


@job(name="test-nul")
def nul(payload):
    return {"nul": chr(0)}  # a result PostgreSQL's jsonb refuses


@job(name="test-heartbeat")
def beating(payload, context):
    from django_strait.models import JobRun

    before = JobRun.objects.get(pk=context.run_id).heartbeat_at
    time.sleep(0.01)
    context.heartbeat()
    after = JobRun.objects.get(pk=context.run_id).heartbeat_at
    return {"moved": after > before}


@job(name="test-slow-async", timeout=0.2)
async def slow_async(payload):
    await asyncio.sleep(30)


@job(name="test-count", max_attempts=3, retry={"initial_delay": "1s", "jitter": 0})
def count(payload, context):
    """Notes each execution: appends its run id to the file ``payload["file"]`` names."""
    with open(payload["file"], "a") as f:
        f.write(f"{context.run_id}\n")  # one write under PIPE_BUF: whole lines, any process


@job(name="test-block-first-attempt", timeout=120, retry={"initial_delay": "1s", "jitter": 0})
def block_first_attempt(payload, context):
    # The kill test kills the worker while attempt 1 blocks; attempt 2 answers at once.
    if context.attempt == 1:
        time.sleep(payload.get("block_secs", 60))
    return {"attempt": context.attempt}


@job(name="wf-step")
def workflow_step(payload, context):
    """A workflow step: says which step it is and what its parents returned."""
    return {"step": context.workflow["step"], "parents": dict(context.parents)}


@job(name="wf-step-later", queue="later")
def workflow_step_later(payload, context):
    """A workflow step on a queue of its own (a worker may leave it alone)."""
    return {"step": context.workflow["step"], "parents": dict(context.parents)}


@job(name="wf-fail")
def workflow_fail(payload):
    raise Fail("this step fails")


@job(name="wf-flaky", max_attempts=1, retry={"jitter": 0, "initial_delay": "30s"})
def workflow_flaky(payload):
    raise ValueError("flaky")


@job(name="wf-fail-unless")
def workflow_fail_unless(payload):
    """Fails until the payload (as replayed) says ``ok``."""
    if not payload.get("ok"):
        raise Fail("not ok yet")
    return "ok"


# Process execution (tests/e2e/test_process_execution.py; presets in tests/settings.py).


@job(name="test-process-echo", execution="process", max_attempts=1, timeout=30)
def process_echo(payload, context):
    """Says which process ran it, so a test can tell a child from the worker."""
    return {"pid": os.getpid(), "payload": payload, "attempt": context.attempt}


@job(name="test-process-alloc", execution="process", preset="micro", max_attempts=1, timeout=60)
def process_alloc(payload):
    """Holds ``mb`` megabytes (touched, so resident) for ``hold`` seconds."""
    hog = b"x" * (payload["mb"] * 2**20)
    time.sleep(payload.get("hold", 1.0))
    return {"held_mb": len(hog) // 2**20, "pid": os.getpid()}


@job(name="test-process-spin", execution="process", max_attempts=1, timeout=2)
def process_spin(payload):
    """Never returns: only a kill stops it."""
    while True:
        pass


@job(name="test-process-cpu", execution="process", max_attempts=1, timeout=60)
def process_cpu(payload):
    """About ``ms`` milliseconds of pure-Python work (the bench's CPU-bound handler too)."""
    return cpu_work(payload.get("ms", 5))


@job(name="test-thread-cpu", max_attempts=1, timeout=60)
def thread_cpu(payload):
    """The same work on the worker's threads."""
    return cpu_work(payload.get("ms", 5))


def cpu_work(ms: float) -> int:
    deadline = time.perf_counter() + ms / 1000
    n = 0
    while time.perf_counter() < deadline:
        n += sum(i * i for i in range(200))
    return n


@job(name="test-process-memory-error", execution="process", max_attempts=1, timeout=30)
def process_memory_error(payload):
    """Fails as an allocation past a limit does (RLIMIT_AS, or a C library) would."""
    raise MemoryError("cannot allocate 8 GB")


@job(name="test-process-async", execution="process", max_attempts=1, timeout=30)
async def process_async(payload, context):
    await asyncio.sleep(0)
    return {"async": True, "pid": os.getpid(), "attempt": context.attempt}


@job(name="test-process-grandchild", execution="process", max_attempts=1, timeout=2)
def process_grandchild(payload):
    """Starts a process of its own, writes its pid to ``pidfile``, then never returns."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(payload["pidfile"], "w") as f:
        f.write(str(proc.pid))
    while True:
        time.sleep(0.1)


@job(name="test-process-escapes", execution="process", max_attempts=1, timeout=3)
def process_escapes(payload, context):
    """Starts two processes that leave its process group and would outlive it: one in a
    session of its own, and one orphaned into a session of its own (its parent exits at
    once, as a daemon's does). Writes their pids to ``pidfile`` + ``.<attempt>``, then
    holds ``mb`` megabytes until killed, or returns with ``leave`` set."""
    import subprocess
    import sys

    own = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    target = f"{payload['pidfile']}.{context.attempt}"
    orphan = f"{target}.orphan"
    daemon = f"setsid sh -c 'echo $$ > {orphan}.tmp; mv {orphan}.tmp {orphan}; exec sleep 120'"
    subprocess.run(["sh", "-c", f"{daemon} </dev/null >/dev/null 2>&1 &"], check=True)
    while not os.path.exists(orphan):
        time.sleep(0.01)
    with open(f"{target}.tmp", "w") as f:
        f.write(f"{own.pid} {open(orphan).read().strip()}")
    os.replace(f"{target}.tmp", target)
    if payload.get("leave"):
        return "left them running"
    hog = b"x" * (payload.get("mb", 0) * 2**20)
    while hog is not None:
        time.sleep(0.1)
