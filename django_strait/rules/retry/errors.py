"""The one error a bad retry policy or duration raises."""

from __future__ import annotations

from typing import Any


class PolicyError(ValueError):
    """A policy field or duration that is not allowed: names the field, the value and the rule.

    ``field`` is the dict-form name (``retry.initial_delay``,
    ``STRAIT.DEFAULT_RETRY.jitter``, ``STRAIT_POLL_INTERVAL``); ``column`` is the
    ``Job`` column when the value came from a job row, else ``None``.
    """

    def __init__(
        self,
        field: str,
        value: Any,
        allowed: str,
        *,
        column: str | None = None,
        problem: str | None = None,
    ) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        self.column = column
        self.problem = problem or f"{value!r} is not allowed"
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"{self.field} (Job.{self.column})" if self.column else self.field
        return f"{where}: {self.problem}; must be {self.allowed}"

    def with_field(self, field: str, *, column: str | None = None) -> PolicyError:
        """Return a copy of this error that names another field (and column)."""
        return type(self)(
            field, self.value, self.allowed, column=column or self.column, problem=self.problem
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments do not survive the default Exception pickling,
        # and errors may cross process boundaries (worker pools).
        return _rebuild, (
            type(self),
            self.field,
            self.value,
            self.allowed,
            self.column,
            self.problem,
        )


def _rebuild(cls: type[PolicyError], field, value, allowed, column, problem) -> PolicyError:
    return cls(field, value, allowed, column=column, problem=problem)
