"""The jobs this process declares in code (``@job``, ``@task``), by job name.

Pure: declaring a job checks its options and remembers it, and touches no
model, so ``@job`` works in any module, also one imported before Django's app
registry is ready (an app's ``__init__.py``). Writing the ``Job`` rows is
:mod:`django_strait.services.syncing`'s: on a job's first trigger in a process, at a
worker's start for scheduled jobs, and with ``manage.py strait_sync``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.text import slugify

from django_strait.rules.callables import dotted_path
from django_strait.rules.cron import (
    MissedTicks,
    Overlap,
    ScheduleError,
    check_schedule,
    check_timezone,
)
from django_strait.rules.execution import Execution
from django_strait.rules.presets import NAME_MAX_LENGTH
from django_strait.rules.retry import JOB_COLUMNS, PolicyError, validate_partial

#: Job name -> what declared it (a ``decorators.Handler``: its ``spec`` and function).
_registry: dict[str, Any] = {}

#: The columns a declared schedule owns: code that declares one owns all four.
SCHEDULE_COLUMNS = ("schedule", "timezone", "schedule_missed", "schedule_overlap")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What ``@job(...)`` declared about a handler."""

    name: str
    path: str
    #: Job column -> value, only for what the decorator named.
    columns: Mapping[str, Any] = field(default_factory=dict)

    @property
    def schedule(self) -> str:
        """The cron schedule code declares ("" when code declares none)."""
        return self.columns.get("schedule", "")


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What ``@job(schedule=..., timezone=..., ...)`` declares."""

    schedule: str | None = None
    timezone: str | None = None
    missed: str | None = None
    overlap: str | None = None


def register(entry: Any) -> None:
    """Register a ``@job`` function under its job name; refuse a name another one holds."""
    spec = entry.spec
    existing = _registry.get(spec.name)
    if existing is not None and existing.spec.path != spec.path:
        raise ValueError(
            f"job name {spec.name!r} is already registered by {existing.spec.path}; "
            f"choose another name= for {spec.path}"
        )
    _registry[spec.name] = entry


def spec_of(
    fn: Callable[..., Any],
    *,
    name: str | None,
    queue: str | None,
    priority: int | None,
    max_attempts: int | None,
    retry: Mapping[str, Any] | None,
    timeout: float | None,
    description: str | None,
    execution: str | None = None,
    preset: str | None = None,
    schedule: ScheduleSpec | None = None,
) -> JobSpec:
    """Return what ``@job(...)`` declares about ``fn``, its options checked."""
    columns = _columns(queue, priority, max_attempts, retry, timeout, description)
    columns.update(_execution_columns(execution, preset))
    columns.update(schedule_columns(schedule or ScheduleSpec()))
    return JobSpec(
        name=name or slugify(fn.__name__.replace("_", "-")),
        path=dotted_path(fn),
        columns=columns,
    )


def schedule_columns(declared: ScheduleSpec) -> dict[str, Any]:
    """Check ``@job(schedule=, timezone=, schedule_missed=, schedule_overlap=)``.

    A declared schedule brings its time zone and policies with it, defaults
    included (UTC, run once on recovery, overlap allowed): code that owns a
    schedule owns when and how it fires, and the admin shows all four read-only.
    """
    if declared.schedule is None:
        others = [n for n, v in zip(SCHEDULE_COLUMNS[1:], _rest(declared), strict=True) if v]
        if others:
            raise ValueError(f"@job({others[0]}=...) needs schedule=: it applies to a schedule")
        return {}
    try:
        schedule = check_schedule(declared.schedule)
        timezone = declared.timezone or "UTC"
        check_timezone(timezone)
    except ScheduleError as exc:
        raise ValueError(f"@job({exc.field}=...): {exc.message}") from None
    return {
        "schedule": schedule,
        "timezone": timezone,
        "schedule_missed": _choice("schedule_missed", declared.missed, MissedTicks),
        "schedule_overlap": _choice("schedule_overlap", declared.overlap, Overlap),
    }


def _rest(declared: ScheduleSpec) -> tuple[Any, ...]:
    return (declared.timezone, declared.missed, declared.overlap)


def _choice(name: str, value: str | None, choices: Any) -> str:
    if value is None:
        return choices.values[0]
    if value not in choices.values:
        allowed = " or ".join(repr(v) for v in choices.values)
        raise ValueError(f"@job({name}={value!r}): must be {allowed}")
    return value


def _execution_columns(execution: str | None, preset: str | None) -> dict[str, Any]:
    """Check ``@job(execution=, preset=)``; the preset's name is checked against the
    settings when the row is written (settings may not be ready at import time)."""
    columns: dict[str, Any] = {}
    if execution is not None:
        # External jobs are worked outside the project: a @job handler is never one.
        in_project = [v for v in Execution.values if v != Execution.EXTERNAL]
        if execution not in in_project:
            allowed = " or ".join(repr(v) for v in in_project)
            raise ValueError(f"@job(execution={execution!r}): must be {allowed}")
        columns["execution"] = execution
    if preset is not None:
        if not isinstance(preset, str) or not preset or len(preset) > NAME_MAX_LENGTH:
            raise ValueError(
                f"@job(preset={preset!r}): must be the name of a STRAIT['PRESETS'] entry"
            )
        if execution != Execution.PROCESS:
            raise ValueError(f"@job(preset={preset!r}) needs execution='process'")
        columns["preset"] = preset
    return columns


def _columns(queue, priority, max_attempts, retry, timeout, description) -> dict[str, Any]:
    columns: dict[str, Any] = {}
    for column, value in (
        ("queue", queue),
        ("priority", priority),
        ("max_attempts", max_attempts),
        ("timeout_secs", timeout),
        ("description", description),
    ):
        if value is not None:
            columns[column] = value
    for key, value in validate_partial(retry or {}, prefix="retry").items():
        if key == "min_delay" and "min_delay" not in (retry or {}):
            continue  # Zizq's base read as a floor too: a job keeps the settings' floor
        if key not in JOB_COLUMNS:
            # These are settings / run-override fields with no Job column.
            raise PolicyError(
                f"retry.{key}",
                value,
                "set in STRAIT['DEFAULT_RETRY'] or per trigger (retry={...}), "
                f"since a job has no column for it; job fields: {', '.join(JOB_COLUMNS)}",
                problem="is not a job-level field",
            )
        columns[JOB_COLUMNS[key]] = list(value) if isinstance(value, tuple) else value
    return columns


def get(name: str) -> Any:
    """Return the handler registered under ``name``, if any."""
    return _registry.get(name)


def registered() -> dict[str, Any]:
    """Return every registered handler by job name."""
    return dict(_registry)


def declared_columns(name: str) -> Mapping[str, Any]:
    """Return the ``Job`` columns code declares for the job ``name`` (empty if none)."""
    entry = _registry.get(name)
    if entry is None:
        return {}
    return {"handler": entry.spec.path, **entry.spec.columns}


def code_owned(name: str, values: Mapping[str, Any]) -> dict[str, str]:
    """Return field -> why it is refused, for each of ``values`` that code declares otherwise.

    What a job's declaration names, code owns: a change made elsewhere would be
    written over at the next sync, so the admin shows those fields read-only and
    the API refuses to change them.
    """
    entry = _registry.get(name)
    declared = declared_columns(name)
    return {
        field: (
            f"declared in code by {entry.spec.path} as {declared[field]!r}; "
            "change it there (code wins at each sync)"
        )
        for field, value in values.items()
        if field in declared and value != declared[field]
    }
