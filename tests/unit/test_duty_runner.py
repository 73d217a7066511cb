"""The duty runner logs a duty's round only when the round did something."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass, field

from django_strait.duties.base import DutyResult
from django_strait.worker.duty_runner import DutyRunner


@dataclass
class Rounds:
    """A duty that returns the given results, one per round, then stops the runner."""

    results: list[DutyResult]
    name: str = "scheduler"
    interval: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def run_once(self, now: dt.datetime) -> DutyResult:
        result = self.results.pop(0)
        if not self.results:
            self.done.set()
        return result


async def run_rounds(duty: Rounds) -> None:
    async def call(fn, *args):
        return fn(*args)

    task = asyncio.create_task(DutyRunner([duty], call).run())
    await duty.done.wait()
    task.cancel()


def test_run__logs_only_the_rounds_that_did_something(caplog):
    idle = DutyResult("scheduler", True, {"fired": 0, "jobs": 3}, looked_at=("jobs",))
    fired = DutyResult("scheduler", True, {"fired": 1, "jobs": 3}, looked_at=("jobs",))
    not_led = DutyResult("scheduler", False)
    duty = Rounds([idle, not_led, idle, fired, idle])

    with caplog.at_level(logging.INFO, logger="django_strait.worker.duty_runner"):
        asyncio.run(run_rounds(duty))

    assert [r.getMessage() for r in caplog.records] == ["scheduler: {'fired': 1, 'jobs': 3}"]
