"""The duty runner: each periodic duty's ``run_once`` every its interval, on the duty thread."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from django.utils import timezone

from django_strait.duties.base import Duty

logger = logging.getLogger(__name__)


class DutyRunner:
    """Runs duties (reaper, scheduler, pruner, health sampler) as they fall due."""

    def __init__(self, duties: Sequence[Duty], call: Callable[..., Awaitable[Any]]) -> None:
        self.duties = list(duties)
        self._call = call

    async def run(self) -> None:
        """Run each duty every its interval until cancelled; a failed round is tried next time."""
        due = dict.fromkeys((d.name for d in self.duties), 0.0)
        while self.duties:
            for duty in self.duties:
                if time.monotonic() < due[duty.name]:
                    continue
                try:
                    result = await self._call(duty.run_once, timezone.now())
                    if result.happened:
                        logger.info("%s: %s", duty.name, result.counts)
                except Exception:
                    logger.exception("duty %s failed; trying again next round", duty.name)
                due[duty.name] = time.monotonic() + duty.interval
            await asyncio.sleep(max(0.05, min(due.values()) - time.monotonic()))
