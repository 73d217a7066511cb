"""``run_strait_worker --burst``: drains runs held by limits, leaves (and names) what will not clear soon."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from django.utils import timezone

from django_strait import trigger_many
from django_strait.models import EndpointCircuit, Job, JobRun
from tests.conftest import Reply, await_workers, spawn_workers

pytestmark = pytest.mark.django_db(transaction=True)


def statuses() -> Counter:
    return Counter(JobRun.objects.values_list("status", flat=True))


@pytest.mark.slow
def test_burst__four_workers_drain_runs_held_by_a_concurrency_limit(http_server, worker_env):
    http_server.routes["/capped"] = lambda r: Reply(200, b"{}")
    Job.objects.create(name="capped", endpoint_url=http_server.url("/capped"), max_concurrency=3)
    trigger_many("capped", [{"i": i} for i in range(40)])

    outputs = await_workers(spawn_workers(worker_env, "--burst", "--batch-size", "10"))

    assert statuses() == {"completed": 40}, outputs
    assert all("burst done: nothing left queued" in out for out in outputs), outputs


@pytest.mark.slow
def test_burst__drains_runs_held_by_a_rate_window(http_server, worker_env):
    http_server.routes["/rated"] = lambda r: Reply(200, b"{}")
    Job.objects.create(
        name="rated", endpoint_url=http_server.url("/rated"),
        rate_limit_max=4, rate_limit_window_secs=1,
    )  # fmt: skip
    trigger_many("rated", [{"i": i} for i in range(10)])

    outputs = await_workers(spawn_workers(worker_env, "--burst", count=1))

    assert statuses() == {"completed": 10}, outputs


def test_burst__exits_leaving_runs_behind_an_open_circuit_and_says_so(http_server, worker_env):
    http_server.routes["/down"] = lambda r: Reply(200, b"{}")
    http_server.routes["/up"] = lambda r: Reply(200, b"{}")
    Job.objects.create(name="down", endpoint_url=http_server.url("/down"))
    Job.objects.create(name="up", endpoint_url=http_server.url("/up"))
    EndpointCircuit.objects.create(
        endpoint_url=http_server.url("/down"), state="open", failures=5, opened_at=timezone.now()
    )
    trigger_many("down", [{"i": i} for i in range(3)])
    trigger_many("up", [{"i": i} for i in range(2)])
    later = trigger_many("up", [{"later": True}], delay=dt.timedelta(hours=1))

    [output] = await_workers(spawn_workers(worker_env, "--burst", count=1), timeout=60)

    assert statuses() == {"queued": 4, "completed": 2}, output
    assert JobRun.objects.get(pk=later[0].pk).status == "queued"
    assert (
        "burst done: 4 runs left waiting: 3 held (circuit.open), "
        "1 not due yet (delay or run_at)" in output
    ), output
