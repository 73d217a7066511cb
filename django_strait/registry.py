"""``@job``: Python handlers registered in code, kept in sync with ``Job`` rows.

A decorated function stays callable as before and gains ``.trigger()`` and
``.trigger_many()``. Its ``Job`` row (same name) is created on the first trigger
in a process and by ``manage.py strait_sync``; the options the decorator names
are written to the row each time (code wins for what code declares), the others
stay as the admin left them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.module_loading import import_string
from django.utils.text import slugify

_registry: dict[str, Handler] = {}
_synced: set[str] = set()


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What ``@job(...)`` declared about a handler."""

    name: str
    path: str
    #: Job column -> value, only for what the decorator named.
    columns: Mapping[str, Any] = field(default_factory=dict)


class Handler:
    """A registered job handler: call it like the function, or trigger it."""

    def __init__(self, func: Callable[..., Any], spec: JobSpec) -> None:
        functools.update_wrapper(self, func)
        self.func = func
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def trigger(self, payload: Any = None, **options: Any):
        """Queue a run of this job; options as for ``django_strait.trigger``."""
        from django_strait.triggering import trigger

        return trigger(self.spec.name, payload, **options)

    def trigger_many(self, payloads, **options: Any):
        """Queue one run per payload in one statement."""
        from django_strait.triggering import trigger_many

        return trigger_many(self.spec.name, payloads, **options)

    def __repr__(self) -> str:
        return f"<strait job {self.spec.name!r} -> {self.spec.path}>"


def job(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    retry: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    description: str | None = None,
) -> Any:
    """Register a Python function (sync or ``async``) as a job handler."""

    def register(fn: Callable[..., Any]) -> Handler:
        spec = JobSpec(
            name=name or slugify(fn.__name__.replace("_", "-")),
            path=f"{fn.__module__}.{fn.__qualname__}",
            columns=_columns(queue, priority, max_attempts, retry, timeout, description),
        )
        existing = _registry.get(spec.name)
        if existing is not None and existing.spec.path != spec.path:
            raise ValueError(
                f"job name {spec.name!r} is already registered by {existing.spec.path}; "
                f"choose another name= for {spec.path}"
            )
        handler = Handler(fn, spec)
        _registry[spec.name] = handler
        return handler

    return register(func) if func is not None else register


def _columns(queue, priority, max_attempts, retry, timeout, description) -> dict[str, Any]:
    from django_strait.retry import JOB_COLUMNS, PolicyError, validate_partial

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


def get(name: str) -> Handler | None:
    """Return the handler registered under ``name``, if any."""
    return _registry.get(name)


def registered() -> dict[str, Handler]:
    """Return every registered handler by job name."""
    return dict(_registry)


def resolve_callable(path: str) -> Callable[..., Any]:
    """Import a handler by dotted path, unwrapping ``@job``."""
    obj = import_string(path)
    return obj.func if isinstance(obj, Handler) else obj


def sync(handler: Handler):
    """Create or update the ``Job`` row for ``handler``; return it."""
    from django_strait.models import Job

    spec = handler.spec
    wanted = {"handler": spec.path, "endpoint_url": "", **spec.columns}
    row, created = Job.objects.get_or_create(name=spec.name, defaults=wanted)
    changed = [k for k, v in wanted.items() if getattr(row, k) != v]
    if not created and changed:
        for k in changed:
            setattr(row, k, wanted[k])
        row.save(update_fields=[*changed, "updated_at"])
    _synced.add(spec.name)
    return row


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
    from django_strait.models import Job

    handler = _registry.get(name)
    if handler is None:
        return None
    if name not in _synced:
        return sync(handler)
    return Job.objects.filter(name=name).first() or sync(handler)
