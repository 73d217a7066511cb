"""The demo's jobs and the runs it triggers.

Every random choice comes from one ``random.Random(seed)``, so a seed tells the
same story again on a fresh database.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django_strait import trigger_many
from django_strait.models import Job
from django_strait.services import syncing

#: Short delays so that the demo's retries happen within seconds, not minutes.
DEMO_RETRY = {"initial_delay": "200ms", "max_delay": "1s", "min_delay": "100ms"}

#: Where ``runserver`` serves the demo endpoints (the HTTP jobs point here after the demo).
RUNSERVER_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True, slots=True)
class HttpJob:
    """An HTTP job the demo defines as a ``Job`` row (as the admin or API would)."""

    name: str
    path: str
    max_attempts: int
    description: str

    def url(self, base_url: str, seed: int) -> str:
        """Return the endpoint URL on ``base_url``."""
        return base_url + self.path.format(seed=seed)


HTTP_JOBS = (
    HttpJob(
        name="partner-webhook",
        path="/demo/flaky/?fail_rate=0.4&seed={seed}",
        max_attempts=4,
        description="Notify a partner's webhook, which answers 503 40% of the time.",
    ),
    HttpJob(
        name="legacy-callback",
        path="/demo/gone/",
        max_attempts=3,
        description="Call an endpoint that was removed: 404, not retried.",
    ),
)

PYTHON_JOBS = ("send-welcome-email", "resize-image", "charge-card", "sync-crm")
DEMO_JOBS = (*PYTHON_JOBS, *(j.name for j in HTTP_JOBS))


def seed_jobs(base_url: str, seed: int) -> None:
    """Create or update the demo's ``Job`` rows, HTTP jobs pointing at ``base_url``."""
    syncing.sync_all()
    point_http_jobs(base_url, seed)
    # A worker skips disabled jobs; the demo's runs must all run, even if a job
    # was paused in the admin since the last demo.
    Job.objects.filter(name__in=DEMO_JOBS, enabled=False).update(enabled=True)


def point_http_jobs(base_url: str, seed: int) -> None:
    """Point the demo's HTTP jobs at the demo endpoints served on ``base_url``."""
    for spec in HTTP_JOBS:
        row = Job.objects.filter(name=spec.name).first() or Job(name=spec.name)
        row.endpoint_url = spec.url(base_url, seed)
        row.handler = ""
        row.max_attempts = spec.max_attempts
        row.timeout_secs = 5.0
        row.description = spec.description
        row.full_clean()
        row.save()


def trigger_runs(runs: int, rng: random.Random) -> list[int]:
    """Trigger ``runs`` runs of every demo job with short retry delays; return their ids."""
    ids: list[int] = []
    for name in DEMO_JOBS:
        payloads = [PAYLOADS[name](i, rng) for i in range(1, runs + 1)]
        ids += [run.pk for run in trigger_many(name, payloads, retry=DEMO_RETRY)]
    return ids


def _charge(i: int, rng: random.Random) -> dict[str, Any]:
    # Declined 0-3 times: 3 declines use up charge-card's 3 attempts (dead letter).
    declines = rng.choices([0, 1, 2, 3], weights=[50, 25, 10, 15])[0]
    return {
        "amount": rng.randint(5, 500),
        "card": f"**** {rng.randint(1000, 9999)}",
        "declines": declines,
        "expired": rng.random() < 0.1,
    }


PAYLOADS: dict[str, Callable[[int, random.Random], dict[str, Any]]] = {
    "send-welcome-email": lambda i, rng: {"to": f"user{i}@example.com"},
    "resize-image": lambda i, rng: {"image": f"photo-{i}.jpg", "width": rng.choice([640, 2048])},
    "charge-card": _charge,
    "sync-crm": lambda i, rng: {"contact": f"contact-{i}"},
    "partner-webhook": lambda i, rng: {"event": "order.paid", "order": i},
    "legacy-callback": lambda i, rng: {"event": "order.shipped", "order": i},
}
