"""Testing your jobs: run the runs your code queues inside your own tests.

``drain()`` runs every due run to its end, with what those runs make due
(retries, workflow steps, runs they trigger), and delivers the webhooks they
owe; ``immediate()`` makes every ``trigger()`` run its job before it returns.
Both run a worker's own steps -- the claim and its gate, the executors, the
retry policy and the record (dead letters, the webhook outbox, workflows) --
on the calling thread, inside the test's transaction: they work in a Django
``TestCase`` and under pytest-django's ``db`` fixture alike
(``django_strait.worker.inline``). With several databases (``STRAIT["DATABASES"]``)
they run the runs of every alias. docs/testing.md shows them at work.

``StraitTestMixin`` gives a ``TestCase`` both; ``django_strait.testing.fixtures``
gives pytest the ``strait_drain`` and ``strait_immediate`` fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django_strait.database import aliases
from django_strait.services import triggering
from django_strait.worker.inline import Drained, InlineWorker

__all__ = ["Drained", "StraitTestMixin", "drain", "immediate"]


def drain(
    *, queues: Sequence[str] = (), skip_retry_delays: bool = True, webhooks: bool = True
) -> Drained:
    """Run every due run (of ``queues``; default all) until none is left; say what it did.

    ``skip_retry_delays`` (the default) makes a retry due at once, so a run is
    retried until it completes, fails or is dead-lettered by its policy; with
    False a retry waits its delay, as with a worker, and stays queued here. A run
    with a ``delay`` or ``run_at`` still to come, or held by a limit, a circuit, a
    budget or a paused job, stays queued. ``webhooks=False`` sends no webhook.
    """
    return drain_every(
        every_alias(queues=queues, skip_retry_delays=skip_retry_delays, webhooks=webhooks)
    )


@contextmanager
def immediate(*, skip_retry_delays: bool = True, webhooks: bool = True) -> Iterator[Drained]:
    """Within this block, each trigger drains before it returns (in the caller's transaction).

    ``trigger()``, ``trigger_many()`` and ``trigger_workflow()`` then return their
    runs already ended (read again from the database); what is due besides them
    runs too. Yields a ``Drained`` that counts everything run in the block.
    """
    ran = Drained()
    workers = every_alias(skip_retry_delays=skip_retry_delays, webhooks=webhooks)

    def run_now(made: Sequence[Any]) -> None:
        ran.add(drain_every(workers))
        for row in made:
            row.refresh_from_db()

    triggering.AFTER_TRIGGER.append(run_now)
    try:
        yield ran
    finally:
        triggering.AFTER_TRIGGER.remove(run_now)


#: Passes over the aliases before a drain gives up (runs that keep triggering each other).
MAX_PASSES = 100


def every_alias(**options: Any) -> list[InlineWorker]:
    """An inline worker for each alias of ``STRAIT["DATABASES"]`` (one on one database)."""
    return [InlineWorker(using=where, **options) for where in aliases()]


def drain_every(workers: Sequence[InlineWorker]) -> Drained:
    """Drain each alias's worker, again until a pass runs nothing: a run on one alias may
    trigger a run on another (several databases)."""
    if len(workers) == 1:
        return workers[0].drain()
    total = Drained()
    for _ in range(MAX_PASSES):
        ran = Drained()
        for worker in workers:
            ran.add(worker.drain())
        total.add(ran)
        if not ran.attempts:
            return total
    raise RuntimeError(f"runs were still due after {MAX_PASSES} passes over the databases")


class StraitTestMixin:
    """For a Django ``TestCase``: ``self.drain()``, and ``strait_immediate = True`` to run
    every trigger of the test at once (``self.strait_ran`` counts what ran)."""

    strait_immediate = False

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        if self.strait_immediate:
            self.strait_ran = self.enterContext(immediate())  # type: ignore[attr-defined]

    def drain(self, **options: Any) -> Drained:
        """Run every due run to its end; see :func:`django_strait.testing.drain`."""
        return drain(**options)
