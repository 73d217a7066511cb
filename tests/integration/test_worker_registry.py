"""Who is alive: register, touch and unregister worker rows in the real database."""

from __future__ import annotations

import datetime as dt
import os
import socket

import pytest
from django.utils import timezone

from django_strait.duties import registry
from django_strait.models import WorkerProcess

pytestmark = pytest.mark.django_db


def test_register__records_host_pid_queues_and_concurrency():
    before = timezone.now()

    registry.register("w-1", queues=["emails", "default"], concurrency=8)

    row = WorkerProcess.objects.get(worker_id="w-1")
    assert (row.host, row.pid) == (socket.gethostname(), os.getpid())
    assert (row.queues, row.concurrency, row.in_flight) == (["emails", "default"], 8, 0)
    assert row.started_at == row.last_seen_at >= before


def test_register__same_id_again_takes_the_row_over():
    long_ago = timezone.now() - dt.timedelta(days=1)
    WorkerProcess.objects.create(
        worker_id="w-1",
        host="old-host",
        pid=1,
        concurrency=1,
        started_at=long_ago,
        last_seen_at=long_ago,
        in_flight=3,
    )

    registry.register("w-1", queues=[], concurrency=4)

    (row,) = WorkerProcess.objects.all()
    assert (row.host, row.concurrency, row.in_flight, row.queues) == (
        socket.gethostname(),
        4,
        0,
        [],
    )
    assert row.started_at > long_ago


def test_touch__moves_last_seen_and_sets_in_flight():
    registry.register("w-1", queues=[], concurrency=4)
    long_ago = timezone.now() - dt.timedelta(hours=1)
    WorkerProcess.objects.filter(worker_id="w-1").update(last_seen_at=long_ago)

    assert registry.touch("w-1", in_flight=3) is True

    row = WorkerProcess.objects.get(worker_id="w-1")
    assert row.last_seen_at > long_ago
    assert row.in_flight == 3
    assert row.started_at < row.last_seen_at


def test_touch__forgotten_worker_returns_false_and_creates_nothing():
    assert registry.touch("w-gone", in_flight=1) is False
    assert not WorkerProcess.objects.exists()


def test_touch__leaves_other_workers_alone():
    registry.register("w-1", queues=[], concurrency=4)
    registry.register("w-2", queues=[], concurrency=4)

    registry.touch("w-1", in_flight=2)

    assert WorkerProcess.objects.get(worker_id="w-2").in_flight == 0


def test_unregister__deletes_only_its_own_row():
    registry.register("w-1", queues=[], concurrency=4)
    registry.register("w-2", queues=[], concurrency=4)

    registry.unregister("w-1")

    assert list(WorkerProcess.objects.values_list("worker_id", flat=True)) == ["w-2"]


def test_unregister__unknown_worker_is_a_no_op():
    registry.unregister("w-never")

    assert not WorkerProcess.objects.exists()
