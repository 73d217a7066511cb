"""The ``storage`` fixture: each backend that this database runs, and helpers to drive it.

By default the suite runs on the project's backends this database can run: the
ORM's everywhere, PostgreSQL's on PostgreSQL. ``STRAIT_CONFORMANCE_BACKEND`` names
one class by its dotted path (``STRAIT_CONFORMANCE_BACKEND=mypkg.storage.MyStorage
pytest tests/conformance``): the suite runs against that class alone, and the tests
that compare or instrument the project's own two (they take no ``storage``) are
skipped, saying so (docs/architecture.md, "A new storage backend").
"""

from __future__ import annotations

import datetime as dt
import os
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone
from django.utils.module_loading import import_string

from django_strait.rules.resilience import limits
from django_strait.storage import Claimed, Hold, OrmStorage, PostgresStorage, Rescued, Storage
from django_strait.transitions.reaper import rescue_found
from django_strait.transitions.worker import claim_and_start
from tests.conformance.rows import DatabaseRows, Rows

ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
#: The dotted path of the one backend to run the suite against (empty: the project's).
NAMED = os.environ.get("STRAIT_CONFORMANCE_BACKEND", "").strip()


def backends() -> dict[str, type]:
    """The backends the suite runs against, by test id."""
    if NAMED:
        try:
            return {NAMED: import_string(NAMED)}
        except ImportError as exc:
            raise pytest.UsageError(f"STRAIT_CONFORMANCE_BACKEND={NAMED!r}: {exc}") from exc
    if ON_POSTGRES:
        return {"orm": OrmStorage, "postgres": PostgresStorage}
    return {"orm": OrmStorage}


BACKENDS = backends()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "storage" in metafunc.fixturenames:
        metafunc.parametrize("storage", list(BACKENDS), indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With a backend named, skip the tests that are about the project's own two, and,
    for a backend that keeps runs outside the tables, those that read the tables."""
    if not NAMED:
        return
    mine = pytest.mark.skip(reason=f"about the project's own backends, not {NAMED}")
    elsewhere = pytest.mark.skip(
        reason=f"needs a database: reads or writes the tables itself; {NAMED} keeps runs elsewhere"
    )
    for item in items:
        if "tests/conformance/" not in item.nodeid:
            continue
        if "storage" not in item.fixturenames:
            item.add_marker(mine)
        elif keeps_runs_elsewhere() and item.get_closest_marker("needs_database"):
            item.add_marker(elsewhere)


def keeps_runs_elsewhere() -> bool:
    """Whether the backend under test gives its own rows (``conformance_rows``), not the tables'."""
    return any(hasattr(cls, "conformance_rows") for cls in BACKENDS.values())


@pytest.fixture
def storage(request: pytest.FixtureRequest) -> Storage:
    return BACKENDS[request.param](connection.alias)


@pytest.fixture
def rows(storage: Storage) -> Rows:
    """How this test makes and reads the rows of ``storage`` (tests/conformance/rows.py)."""
    own = getattr(storage, "conformance_rows", None)
    return own() if own else DatabaseRows()


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
