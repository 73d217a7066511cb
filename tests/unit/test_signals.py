"""The signal senders against real Record values, without a database."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from django_strait import signals
from django_strait.models import Job, JobRun
from django_strait.rules.states import Transition
from django_strait.storage import Claimed, Record, Recorded
from django_strait.transitions import sending

T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
LATER = T0 + dt.timedelta(seconds=30)


def record(run_id: int = 7, transition: Transition = Transition.COMPLETE, **fields) -> Record:
    values = {
        "run_id": run_id,
        "attempt": 2,
        "transition": transition,
        "started_at": T0,
        "finished_at": T0 + dt.timedelta(milliseconds=120),
        "duration_ms": 120,
        "outcome": "succeeded" if transition is Transition.COMPLETE else "failed",
        **fields,
    }
    return Record(**values)


@pytest.mark.parametrize(
    ("transition", "status", "signal"),
    [
        (Transition.COMPLETE, "completed", signals.run_succeeded),
        (Transition.RETRY, "queued", signals.run_failed),
        (Transition.FAIL, "failed", signals.run_failed_permanently),
        (Transition.DEAD_LETTER, "dead_letter", signals.run_dead_lettered),
        (Transition.DISCARD, "discarded", signals.run_discarded),
    ],
)
def test_send_recorded__sends_the_signal_of_the_status_the_run_moved_to(
    listen, transition, status, signal
):
    got = listen(signal)
    others = [listen(s) for s in signals.SIGNAL_FOR_STATUS.values() if s is not signal]
    rec = record(transition=transition, error="boom", error_type="python.ValueError")

    sending.send_recorded([rec], Recorded(moved={7: status}), {7: "mail"})

    assert got.calls == [
        {
            "sender": JobRun,
            "run_id": 7,
            "job": "mail",
            "attempt": 2,
            "status": status,
            "duration_ms": 120,
            "error": "boom",
            "error_type": "python.ValueError",
            "outcome": rec.outcome,
            "endpoint": "",
            "status_code": None,
            "available_at": None,
        }
    ]
    assert all(o.calls == [] for o in others)


def test_send_recorded__a_retry_says_when_it_is_due(listen):
    got = listen(signals.run_failed)
    rec = record(transition=Transition.RETRY, available_at=LATER, error_type="http.503")

    sending.send_recorded([rec], Recorded(moved={7: "queued"}), {7: "hook"})

    assert got.calls[0]["available_at"] == LATER
    assert got.calls[0]["error_type"] == "http.503"


def test_send_recorded__a_run_canceled_meanwhile_sends_run_canceled_not_its_records(listen):
    canceled, failed = listen(signals.run_canceled), listen(signals.run_failed)
    rec = record(transition=Transition.RETRY, available_at=LATER)

    sending.send_recorded([rec], Recorded(moved={7: "canceled"}), {7: "hook"})

    assert [c["status"] for c in canceled.calls] == ["canceled"]
    assert canceled.calls[0]["available_at"] is None
    assert failed.calls == []


def test_send_recorded__lost_runs_send_nothing(listen):
    got = listen(signals.run_succeeded)

    sending.send_recorded(
        [record(1), record(2)], Recorded(moved={2: "completed"}, lost=[1]), {1: "a", 2: "b"}
    )

    assert [(c["run_id"], c["job"]) for c in got.calls] == [(2, "b")]


def test_send_recorded__looks_nothing_up_when_nobody_listens():
    # No job names given: a lookup would need the database, which this test
    # may not touch (pytest-django raises), so passing proves none was made.
    sending.send_recorded([record()], Recorded(moved={7: "completed"}))
    sending.send_started([Claimed(7, 1, {}, 1, 0, None, None)])


def test_send_recorded__a_raising_receiver_neither_raises_nor_stops_the_others(listen, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    signals.run_succeeded.connect(broken, weak=False)
    try:
        after = listen(signals.run_succeeded)
        with caplog.at_level(logging.ERROR, logger="django.dispatch"):
            sending.send_recorded([record()], Recorded(moved={7: "completed"}), {7: "x"})
    finally:
        signals.run_succeeded.disconnect(broken)

    assert len(after.calls) == 1
    assert "receiver bug" in caplog.text


def test_send_started__sends_each_started_run_as_executing(listen):
    got = listen(signals.run_started)
    runs = [Claimed(3, 1, {}, 1, 0, None, None), Claimed(4, 1, {}, 2, 1, None, None)]

    sending.send_started(runs, {3: "a", 4: "b"})

    assert [(c["run_id"], c["job"], c["attempt"], c["status"]) for c in got.calls] == [
        (3, "a", 1, "executing"),
        (4, "b", 2, "executing"),
    ]
    assert got.calls[0]["duration_ms"] is None and got.calls[0]["error"] == ""


def test_send_changed__sends_canceled_and_discarded_but_not_a_replay(listen):
    canceled, discarded, failed = (
        listen(signals.run_canceled),
        listen(signals.run_discarded),
        listen(signals.run_failed),
    )
    job = Job(name="report")
    runs = [
        JobRun(pk=1, job=job, status="canceled", attempt=0),
        JobRun(pk=2, job=job, status="discarded", attempt=3, error_type="http.503"),
        JobRun(pk=3, job=job, status="queued", attempt=3),
    ]

    sending.send_changed(runs)

    assert [(c["run_id"], c["job"]) for c in canceled.calls] == [(1, "report")]
    assert [(c["run_id"], c["error_type"]) for c in discarded.calls] == [(2, "http.503")]
    assert failed.calls == []
