"""Tables of functions registered in code by name: the only code a worker may call.

A job's ``handler`` and a retry policy's ``function`` are names looked up in one
of these tables (``handlers.handlers``, ``retry.functions.table``), never dotted
paths imported on demand: nothing a request, a form or a table row supplies can
make a process import or call anything else (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Longest registered name (the ``Job.handler`` and ``Job.retry_function`` columns).
NAME_MAX_LENGTH = 300


def dotted_path(fn: Callable[..., Any]) -> str:
    """Return ``module.qualname`` of ``fn``: the name it is registered under by default."""
    return f"{fn.__module__}.{fn.__qualname__}"


class CallableTable:
    """Functions by name, registered by decorators at import time."""

    def __init__(self, what: str, decorators: str) -> None:
        #: What the table holds ("handler"), and how to register one ("@job or @handler").
        self.what = what
        self.decorators = decorators
        self._by_name: dict[str, Callable[..., Any]] = {}

    def put(self, name: str, fn: Callable[..., Any]) -> None:
        """Register ``fn`` under ``name``; refuse a name another function holds."""
        if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX_LENGTH:
            raise ValueError(
                f"a {self.what} name is a non-empty string of at most {NAME_MAX_LENGTH} "
                f"characters, got {name!r}"
            )
        existing = self._by_name.get(name)
        if existing is not None and dotted_path(existing) != dotted_path(fn):
            raise ValueError(
                f"{self.what} name {name!r} is already registered by {dotted_path(existing)}; "
                f"choose another name= for {dotted_path(fn)}"
            )
        self._by_name[name] = fn

    def find(self, name: Any) -> Callable[..., Any] | None:
        """Return the function registered under ``name`` (None if there is none)."""
        return self._by_name.get(name) if isinstance(name, str) else None

    def names(self) -> list[str]:
        """Return every registered name, sorted."""
        return sorted(self._by_name)

    def unknown(self, name: Any) -> str:
        """Say that ``name`` is not registered here, and which names are."""
        known = self.names()
        shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
        listing = f"registered: {shown}" if known else "none is registered in this process"
        return (
            f"{name!r} is not a registered {self.what} ({listing}); "
            f"register it in code with {self.decorators}"
        )
