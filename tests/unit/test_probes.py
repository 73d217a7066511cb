"""What a worker's health probes answer, from the stamps it leaves (pure, with ``now``)."""

from __future__ import annotations

from django_strait.worker.probes import LIVE_WITHIN, Probes


def probes(**stamps) -> Probes:
    found = Probes(heartbeat_interval=60)
    for name, value in stamps.items():
        setattr(found, name, value)
    return found


def test_live__while_the_loop_turns():
    assert probes(loop_at=100.0).live(100.0 + LIVE_WITHIN).ok
    late = probes(loop_at=100.0).live(100.0 + LIVE_WITHIN + 1)
    assert (late.ok, late.status, late.why) == (
        False,
        503,
        "the event loop has not turned for 31 s",
    )
    assert not probes().live(0.0).ok


def test_ready__once_started_with_the_database_answering():
    waiting = probes(loop_at=10.0).ready(10.0)
    assert (waiting.ok, waiting.why) == (False, "starting: waiting for the database")
    ready = probes(loop_at=10.0, started=True, database_at=5.0).ready(10.0)
    assert (ready.ok, ready.status, ready.why) == (True, 200, "ready")


def test_ready__not_while_stopping_nor_when_the_database_is_quiet_for_two_heartbeats():
    stopping = probes(loop_at=10.0, started=True, database_at=5.0, stopping=True).ready(10.0)
    assert (stopping.ok, stopping.why.split(":")[0]) == (False, "stopping")
    quiet = probes(loop_at=200.0, started=True, database_at=49.0).ready(200.0)
    assert (quiet.ok, quiet.why) == (False, "the database has not answered a heartbeat for 151 s")
    assert probes(loop_at=200.0, started=True, database_at=50.0).ready(200.0).ok


def test_ready__not_when_not_alive():
    stuck = probes(loop_at=0.0, started=True, database_at=100.0).ready(100.0)
    assert not stuck.ok and "event loop" in stuck.why
