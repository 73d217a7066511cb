"""Handlers the tests trigger (importable by worker subprocesses too)."""

from __future__ import annotations

import asyncio
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
