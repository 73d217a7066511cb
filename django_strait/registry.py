"""The ``@job`` functions of this process and their ``Job`` rows, kept in sync.

A ``@job`` function's row (same name) is created on the first trigger in a
process and by ``manage.py strait_sync``; the options the decorator names are
written to the row each time (code wins for what code declares), the others
stay as the admin left them. The decorator itself is ``django_strait.decorators.job``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.text import slugify

from django_strait.callables import dotted_path
from django_strait.conf import strait_settings
from django_strait.models import Execution, Job
from django_strait.presets import NAME_MAX_LENGTH
from django_strait.retry import JOB_COLUMNS, PolicyError, check_registered, validate_partial

#: Job name -> what registered it (a ``decorators.Handler``: its ``spec`` and function).
_registry: dict[str, Any] = {}
_synced: set[str] = set()


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What ``@job(...)`` declared about a handler."""

    name: str
    path: str
    #: Job column -> value, only for what the decorator named.
    columns: Mapping[str, Any] = field(default_factory=dict)


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
) -> JobSpec:
    """Return what ``@job(...)`` declares about ``fn``, its options checked."""
    columns = _columns(queue, priority, max_attempts, retry, timeout, description)
    columns.update(_execution_columns(execution, preset))
    return JobSpec(
        name=name or slugify(fn.__name__.replace("_", "-")),
        path=dotted_path(fn),
        columns=columns,
    )


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
            # DESIGN §3: these are settings / run-override fields with no Job column.
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


def sync(entry: Any) -> Job:
    """Create or update the ``Job`` row of a ``@job`` function; return it."""
    spec = entry.spec
    check_registered({"function": spec.columns.get("retry_function")}, prefix="@job.retry")
    wanted = {"handler": spec.path, "endpoint_url": "", **spec.columns}
    _check_preset(spec)
    row, created = Job.objects.get_or_create(name=spec.name, defaults=wanted)
    changed = [k for k, v in wanted.items() if getattr(row, k) != v]
    if not created and changed:
        for k in changed:
            setattr(row, k, wanted[k])
        row.save(update_fields=[*changed, "updated_at"])
    _synced.add(spec.name)
    return row


def _check_preset(spec: JobSpec) -> None:
    preset = spec.columns.get("preset")
    names = strait_settings.PRESETS.names
    if preset and preset not in names:
        raise ValueError(
            f"@job(preset={preset!r}) on {spec.path}: not a preset; allowed: {', '.join(names)}"
        )


def sync_all() -> list:
    """Sync every registered handler's ``Job`` row (``manage.py strait_sync``)."""
    return [sync(h) for h in _registry.values()]


def is_synced_or_plain(name: str) -> bool:
    """Tell whether ``name`` needs no sync before a trigger (synced here, or no @job)."""
    return name in _synced or name not in _registry


def synced_row(name: str):
    """Return the ``Job`` row for a ``@job`` handler, synced once per process.

    The row is synced again whenever it is missing (deleted in the admin, or a
    test database flushed), so a registered handler can always be triggered.
    """
    entry = _registry.get(name)
    if entry is None:
        return None
    if name not in _synced:
        return sync(entry)
    return Job.objects.filter(name=name).first() or sync(entry)
