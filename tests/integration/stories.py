"""Runs with a story, made by a real worker against a real endpoint on 127.0.0.1.

Shared by the timeline tests and the browser test (whose screenshot the docs show).
"""

from __future__ import annotations

import datetime as dt
import itertools
import time

from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from django_strait import trigger
from django_strait.models import EndpointCircuit, Job, JobRun
from tests.conftest import LocalServer, Reply, run_worker

#: Failures that open the story's circuit, and the cooldown it then waits.
THRESHOLD = 2
COOLDOWN = 60.0
#: Claims that find the circuit open before its cooldown is moved past.
HELD_CLAIMS = 3


def retried_held_completed(server: LocalServer, *, pause: float = 0.0) -> JobRun:
    """Run 'partner-webhook' once: two 503s (a retry), held by the open circuit, then 200.

    ``pause`` seconds between steps make the story's times readable in a picture.
    """
    calls = itertools.count(1)
    server.routes["/partner"] = lambda r: Reply(503, b"busy") if next(calls) <= 2 else Reply()
    Job.objects.create(
        name="partner-webhook", endpoint_url=server.url("/partner"), max_attempts=5,
        retry_strategy="fixed", retry_initial_delay_secs=1, retry_jitter=0,
    )  # fmt: skip
    strait = {
        **getattr(settings, "STRAIT", {}),
        "CIRCUIT_FAILURE_THRESHOLD": THRESHOLD,
        "CIRCUIT_COOLDOWN": f"{COOLDOWN:g}s",
    }
    with override_settings(STRAIT=strait):
        run = trigger("partner-webhook", {"order": 1001})
        for _ in range(THRESHOLD):  # 503, retried; 503 again: the circuit opens
            _step(run, pause)
        for _ in range(HELD_CLAIMS):  # claimed, held: the circuit is open
            _step(run, pause)
        EndpointCircuit.objects.filter(endpoint_url=server.url("/partner")).update(
            opened_at=timezone.now() - dt.timedelta(seconds=COOLDOWN + 1)
        )
        _step(run, pause)  # the probe: 200, completed
    run.refresh_from_db()
    return run


def _step(run: JobRun, pause: float) -> None:
    time.sleep(pause)
    JobRun.objects.filter(pk=run.pk, status="queued").update(available_at=timezone.now())
    run_worker()
