"""The read replica's story, in a process on tests.replica_settings; prints what it saw as JSON.

``python -m tests.e2e.replica_story paused``: migrate the primary, queue runs,
read the overview and the metrics off the standby while it is caught up, while
its replay is paused (more runs queued on the primary meanwhile), and after it
resumes. ``python -m tests.e2e.replica_story fallback``: the same reads once the
test has stopped the standby. For tests/e2e/test_read_replica_standby.py.
"""

from __future__ import annotations

import json
import sys
import time

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from django_strait import database, trigger  # noqa: E402
from django_strait.admin.overview import read_overview  # noqa: E402
from django_strait.models import Job  # noqa: E402

JOB = "replica-story"


def seen(client: Client) -> dict:
    """What a user sees now: the overview's words, its queue depth, the metrics' replica gauges."""
    where = database.reading()
    page = client.get(reverse("admin:django_strait_overview"))
    metrics = client.get("/metrics/")
    depth = {q.queue: q.depth for q in read_overview(using=where.alias).queues}
    return {
        "alias": where.alias,
        "lag": where.lag_seconds,
        "problem": where.problem,
        "status": page.status_code,
        "page": page.content.decode(),
        "depth": depth.get("default", 0),
        "metrics_status": metrics.status_code,
        "metrics": [line for line in metrics.content.decode().splitlines() if "replica" in line],
    }


def until(client: Client, check, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        now = seen(client)
        if check(now) or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def standby(sql: str) -> None:
    with connections["reader"].cursor() as cursor:
        cursor.execute(sql)


def paused(client: Client) -> dict:
    Job.objects.create(name=JOB, handler="tests.testapp.jobs.noop")
    for i in range(3):
        trigger(JOB, {"i": i})
    caught_up = until(client, lambda s: s["depth"] == 3 and s["lag"] == 0.0)
    standby("SELECT pg_wal_replay_pause()")
    for i in range(4):
        trigger(JOB, {"i": 3 + i})
    time.sleep(2.5)
    behind = seen(client)
    standby("SELECT pg_wal_replay_resume()")
    resumed = until(client, lambda s: s["depth"] == 7 and s["lag"] == 0.0)
    return {"caught_up": caught_up, "behind": behind, "resumed": resumed}


def main() -> None:
    phase = sys.argv[1]
    if phase == "paused":
        call_command("migrate", verbosity=0)
        User.objects.create_superuser("ops", "ops@example.invalid", "x")
    client = Client()
    client.force_login(User.objects.get(username="ops"))
    story = paused(client) if phase == "paused" else {"fallback": seen(client)}
    print(json.dumps(story))


if __name__ == "__main__":
    main()
