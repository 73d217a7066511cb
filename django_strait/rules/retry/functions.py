"""``@retry_function``: delay functions that policies with strategy ``function`` may name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_strait.rules.callables import CallableTable, dotted_path

#: Retry function name (its dotted path, unless named) -> ``f(retry_number, policy)``.
table = CallableTable("retry function", "@retry_function")


def retry_function(func: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Register ``f(retry_number, policy) -> seconds`` for policies with strategy ``function``.

    Policies name it by its dotted path unless ``name`` is given. The function
    is returned unchanged.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        table.put(dotted_path(fn) if name is None else name, fn)
        return fn

    return register(func) if func is not None else register
