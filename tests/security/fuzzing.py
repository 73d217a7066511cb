"""What the OJS and admin fuzzers share: a tally of every request sent, and its 5xx with their causes.

A fuzz test sends its whole corpus and then fails once, listing each 5xx with the
exception behind it, rather than stopping at the first: one run shows every cause.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.core.signals import got_request_exception

#: 5xx shown in a failure's message, each with its exception (the rest are counted).
SHOWN = 12


@dataclass
class Tally:
    """The requests one fuzz test sent, by operation, and the 5xx among them."""

    sent: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    _exceptions: list[BaseException] = field(default_factory=list)

    def record(self, operation: str, method: str, url: str, body: Any, status: int) -> None:
        """Note one request and its answer's status (with the exception, if it was a 5xx)."""
        self.sent[operation] += 1
        cause = self._exceptions.pop() if self._exceptions else None
        self._exceptions.clear()
        if status < 500:
            return
        shown = repr(body)[:300] if body is not None else ""
        where = "".join(traceback.format_exception(cause)[-3:]) if cause else "(no exception)\n"
        self.failures.append(f"{status} {method} {url[:300]} {shown}\n{where}")

    def report(self) -> str:
        """Return the count of requests and 5xx, then the first 5xx with their causes."""
        lines = [f"{len(self.failures)} 5xx in {self.total} requests"]
        lines += self.failures[:SHOWN]
        return "\n".join(lines)

    @property
    def total(self) -> int:
        return sum(self.sent.values())


@contextmanager
def tallied() -> Iterator[Tally]:
    """A tally that also hears the exception behind each 500 (Django's signal)."""
    tally = Tally()

    def heard(sender: Any, request: Any = None, **kwargs: Any) -> None:
        exc = sys.exc_info()[1]
        if exc is not None:
            tally._exceptions.append(exc)

    got_request_exception.connect(heard, weak=False)
    # Each refusal is logged with its 200,000-character path or body; the tally keeps the 5xx.
    quiet = [logging.getLogger(name) for name in ("django.request", "django.security")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL)
    try:
        yield tally
    finally:
        got_request_exception.disconnect(heard)
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
