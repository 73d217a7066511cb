"""The handlers a job may name: functions registered in code with ``@job`` or ``@handler``.

Only what the project registers in code can run (docs/security.md). A job's
``handler`` column names a function registered here, by its dotted path (or
the name given to ``@handler``). Nothing is ever imported from a name that a
request, a form or a table row supplied: a name that is not registered is
refused where it is written and fails as ``handler.unknown`` where it is run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_strait.rules.callables import CallableTable, dotted_path

#: Handler name (the function's dotted path, unless named) -> the function to call.
handlers = CallableTable("handler", "@job or @handler")

#: The error type of an attempt whose job names a handler this process has not registered.
UNKNOWN_HANDLER = "handler.unknown"


def handler(func: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Register a function (sync or ``async``) that jobs may name as their ``handler``.

    For a function several jobs share; ``@job`` registers its own function
    already. The name is the function's dotted path unless ``name`` is given.
    The function is returned unchanged.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        handlers.put(dotted_path(fn) if name is None else name, fn)
        return fn

    return register(func) if func is not None else register


def find_handler(name: Any) -> Callable[..., Any] | None:
    """Return the handler registered under ``name`` (None if there is none)."""
    return handlers.find(name)
