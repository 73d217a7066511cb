"""Testing your jobs: run the runs your code queues inside your own tests.

``drain()`` runs every due run to its end, with what those runs make due
(retries, workflow steps, runs they trigger), and delivers the webhooks they
owe; ``immediate()`` makes every ``trigger()`` run its job before it returns.
Both run a worker's own steps -- the claim and its gate, the executors, the
retry policy and the record (dead letters, the webhook outbox, workflows) --
on the calling thread, inside the test's transaction: they work in a Django
``TestCase`` and under pytest-django's ``db`` fixture alike
(``django_strait.worker.inline``). docs/testing.md shows them at work.

``StraitTestMixin`` gives a ``TestCase`` both; ``django_strait.testing.fixtures``
gives pytest the ``strait_drain`` and ``strait_immediate`` fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

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
    return InlineWorker(
        queues=queues, skip_retry_delays=skip_retry_delays, webhooks=webhooks
    ).drain()


@contextmanager
def immediate(*, skip_retry_delays: bool = True, webhooks: bool = True) -> Iterator[Drained]:
    """Within this block, each trigger drains before it returns (in the caller's transaction).

    ``trigger()``, ``trigger_many()`` and ``trigger_workflow()`` then return their
    runs already ended (read again from the database); what is due besides them
    runs too. Yields a ``Drained`` that counts everything run in the block.
    """
    ran = Drained()
    worker = InlineWorker(skip_retry_delays=skip_retry_delays, webhooks=webhooks)

    def run_now(made: Sequence[Any]) -> None:
        ran.add(worker.drain())
        for row in made:
            row.refresh_from_db()

    triggering.AFTER_TRIGGER.append(run_now)
    try:
        yield ran
    finally:
        triggering.AFTER_TRIGGER.remove(run_now)


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
