"""The ``storage`` fixture: each backend that this database runs, and helpers to drive it."""

from __future__ import annotations

import datetime as dt
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from django_strait.resilience import limits
from django_strait.storage import Claimed, Hold, OrmStorage, PostgresStorage, Rescued, Storage
from django_strait.transitions.reaper import rescue_found
from django_strait.transitions.worker import claim_and_start

ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
BACKENDS = {"orm": OrmStorage, "postgres": PostgresStorage}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "storage" in metafunc.fixturenames:
        names = ["orm", "postgres"] if ON_POSTGRES else ["orm"]
        metafunc.parametrize("storage", names, indirect=True)


@pytest.fixture
def storage(request: pytest.FixtureRequest) -> Storage:
    return BACKENDS[request.param](connection.alias)


def needs_postgres(reason: str) -> None:
    if not ON_POSTGRES:
        pytest.skip(f"needs PostgreSQL: {reason}")


def claim(storage: Storage, worker: str = "w1", limit: int = 50, **options: Any) -> list[Claimed]:
    """Claim without starting, in a claim transaction of its own."""
    with storage.claim_transaction():
        return storage.claim(
            worker,
            queues=options.get("queues", ()),
            limit=limit,
            now=timezone.now(),
            floors=options.get("floors"),
        )


def start(storage: Storage, worker: str = "w1", limit: int = 50, gate=None) -> list[Claimed]:
    """Claim and start as a worker does (through the transition, with a gate if given)."""
    return claim_and_start(worker, limit=limit, gate=gate, storage=storage)


def limit_gate(storage: Storage, scores: dict[int, float] | None = None) -> Callable:
    """A gate that applies only the jobs' concurrency and rate limits."""

    def gate(claimed: list[Claimed], now: dt.datetime) -> list[Hold]:
        pending = [limits.Pending(r.id, r.job_id, (scores or {}).get(r.job_id)) for r in claimed]
        held = storage.enforce_limits(pending, now=now)
        return [Hold(h.run_id, h.until, h.error_type, h.reason) for h in held]

    return gate


def in_threads(count: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` in ``count`` threads started together; return results; re-raise the first error."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(10)
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return results


def most_in_any_window(times: Sequence[dt.datetime], window: float) -> int:
    """The most of ``times`` inside any span of ``window`` seconds (ending at one of them)."""
    span = dt.timedelta(seconds=window)
    ordered = sorted(times)
    return max((sum(1 for t in ordered if end - span < t <= end) for end in ordered), default=0)


def rescue(storage: Storage, **options: Any) -> tuple[int, list[Rescued]]:
    """Find the stale runs, decide and rescue them, as the reaper does, in a transaction."""
    return rescue_found(
        timezone.now(),
        stale_after=options.pop("stale_after", 60),
        waiting_stale_after=options.pop("waiting_stale_after", 3600),
        limit=options.pop("limit", 50),
        rng=random.Random(0),
        storage=storage,
        **options,
    )
