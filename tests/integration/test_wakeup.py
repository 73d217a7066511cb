"""LISTEN/NOTIFY: an idle worker starts a new run without waiting for its poll."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

import pytest
from django.db import connection
from django.utils import timezone

from django_strait import transitions, trigger
from django_strait.models import JobRun
from django_strait.storage.wakeup import CHANNEL

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def idle_worker():
    """A worker in a thread that would poll only once an hour."""
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite workers poll")
    from django_strait.management.commands.run_strait_worker import build_config
    from django_strait.worker.engine import Worker

    config = replace(build_config({"worker_id": "idle"}), poll_interval=3600.0, duties=False)
    worker = Worker(config)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    # Wait until it is idle (its first empty claim is behind it and it listens).
    time.sleep(1.0)
    yield worker
    worker.stop()
    thread.join(30)
    assert not thread.is_alive()
    # Its listener thread ends on its own a little later: the next test's worker must
    # not share the process with it (it would drop that worker's paused-queue copy).
    from django_strait.storage import queues as queue_states

    _await(lambda: "default" not in queue_states._listened, "the listener's end")


def wait_for(pk: int, status: str, timeout: float = 30.0) -> JobRun:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = JobRun.objects.get(pk=pk)
        if run.status == status:
            return run
        time.sleep(0.02)
    raise AssertionError(f"run {pk} is {run.status}, not {status}, after {timeout}s")


def test_trigger__wakes_an_idle_worker_that_would_otherwise_poll_in_an_hour(idle_worker):
    run = trigger("test-noop", {})

    assert wait_for(run.pk, "completed").attempt == 1


def test_trigger_many__wakes_an_idle_worker_too(idle_worker):
    from django_strait import trigger_many

    runs = trigger_many("test-noop", [{}, {}])

    for run in runs:
        wait_for(run.pk, "completed")


def test_replay__wakes_an_idle_worker(idle_worker):
    run = trigger("test-actions", {"action": "dead_letter"})
    wait_for(run.pk, "dead_letter")

    transitions.replay(run.pk, by="tester")

    deadline = time.monotonic() + 30
    while JobRun.objects.get(pk=run.pk).attempt < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    again = JobRun.objects.get(pk=run.pk)
    assert (again.attempt, again.replayed_by) == (2, "tester")


def test_run_queued_late_in_a_long_transaction__is_notified():
    # Due by the application's clock at its INSERT, but after its transaction began
    # (PostgreSQL's now()): as a workflow's next steps, queued by their parent's record.
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite workers poll")
    import psycopg
    from django.db import transaction

    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        with transaction.atomic():
            JobRun.objects.exists()  # the transaction has begun: now() is fixed
            time.sleep(0.2)
            trigger("test-noop", {})
        notes = list(listener.notifies(timeout=5.0, stop_after=1))
    assert [n.payload for n in notes] == ["default"]


def test_workflow__each_level_wakes_an_idle_worker(idle_worker):
    from django_strait import define_workflow, trigger_workflow
    from django_strait.models import WorkflowRun

    define_workflow(
        "chain",
        steps=[
            {"name": "a", "job": "wf-step"},
            {"name": "b", "job": "wf-step", "depends_on": ["a"]},
            {"name": "c", "job": "wf-step", "depends_on": ["b"]},
        ],
    )
    time.sleep(2)  # past the wake-up its listener gives when it connects
    wr = trigger_workflow("chain", {})
    deadline = time.monotonic() + 10  # b and c would otherwise wait for an hour's poll
    while WorkflowRun.objects.get(pk=wr.pk).status == "running":
        assert time.monotonic() < deadline, "a step waited for the poll"
        time.sleep(0.02)
    assert WorkflowRun.objects.get(pk=wr.pk).status == "completed"


def test_listen_false__the_worker_polls_and_never_listens(caplog, settings):
    from django_strait.management.commands.run_strait_worker import build_config
    from django_strait.worker.engine import Worker

    settings.STRAIT = {**settings.STRAIT, "LISTEN": False}
    config = build_config({"worker_id": "poller", "burst": True})
    run = trigger("test-noop", {})
    with caplog.at_level(logging.INFO, logger="django_strait"):
        Worker(config).run()

    assert config.listen_alias is None
    assert JobRun.objects.get(pk=run.pk).status == "completed"
    assert "polling for new runs every 1.0s" in caplog.text
    assert "listening" not in caplog.text


def test_resume_from_another_process__drops_the_paused_copy_and_wakes(idle_worker):
    """A queue resumed elsewhere: its NOTIFY drops this process's copy of the paused
    queues (kept an hour here) and wakes the idle worker, which claims the run at once."""
    from django.db import transaction

    from django_strait.models import QueueState
    from django_strait.storage import queues as queue_states
    from django_strait.storage.wakeup import QUEUE_STATE_CHANNEL

    queue_states.set_paused("default", "held", True, timezone.now())
    run = trigger("test-noop", {}, queue="held")
    time.sleep(1.5)  # woken by the trigger, the worker left the paused queue alone
    assert JobRun.objects.get(pk=run.pk).status == "queued"
    queue_states._cache["default"] = (time.monotonic() + 3600, frozenset({"held"}), frozenset())
    with transaction.atomic():  # as another process resumes it: no local forget()
        QueueState.objects.filter(name="held").update(paused_at=None)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [QUEUE_STATE_CHANNEL, "held"])

    assert wait_for(run.pk, "completed", timeout=10).attempt == 1


def test_while_its_listen_holds__the_paused_copy_is_kept_until_a_notify_drops_it(
    idle_worker, monkeypatch
):
    """An idle worker woken for one run claims it without reading the paused queues
    first: while its LISTEN holds, a pause or resume NOTIFYs it, so its copy is kept
    past CACHE_SECS; once the LISTEN is lost, the copy is dropped and read again."""
    from django_strait.models import QueueState
    from django_strait.storage import queues as queue_states

    _await(lambda: "default" in queue_states._listened, "the worker's LISTEN")
    forgets = []
    forget = queue_states.forget
    monkeypatch.setattr(queue_states, "forget", lambda: (forgets.append(1), forget()))
    queue_states.set_paused("default", "held", True, timezone.now())
    # The pause's own NOTIFY reaches the listener thread when it will: on a loaded
    # machine after the read below, dropping the copy this test means to see kept.
    # Two drops: set_paused's own, then the listener's on hearing it.
    _await(lambda: len(forgets) >= 2, "the pause's NOTIFY heard")
    assert queue_states.paused("default") == {"held"}
    QueueState.objects.filter(name="held").update(paused_at=None)  # no NOTIFY: not heard
    time.sleep(queue_states.CACHE_SECS + 0.5)
    assert queue_states.paused("default") == {"held"}  # kept: no read a second

    queue_states.listened("default", False)  # as a lost LISTEN says
    assert queue_states.paused("default") == frozenset()


def _await(done, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.01)
