"""Code registered to run: ``@job`` and ``@handler`` handlers, ``@retry_function`` delays.

Only what the project registers in code can run (DESIGN §14). A job's
``handler`` column names a function registered here, by its dotted path; a
retry policy's ``function`` names one registered with ``@retry_function``.
Nothing is ever imported from a name that a request, a form or a table row
supplied: a name that is not registered is refused where it is written and
fails as ``handler.unknown`` where it is run.

``@job`` functions stay callable as before and gain ``.trigger()`` and
``.trigger_many()``. Their ``Job`` row (same name) is created on the first
trigger in a process and by ``manage.py strait_sync``; the options the
decorator names are written to the row each time (code wins for what code
declares), the others stay as the admin left them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.text import slugify

from django_strait.callables import CallableTable, dotted_path

_registry: dict[str, Handler] = {}
_synced: set[str] = set()
#: Handler name (the function's dotted path, unless named) -> the function to call.
handlers = CallableTable("handler", "@job or @handler")

#: The error type of an attempt whose job names a handler this process has not registered.
UNKNOWN_HANDLER = "handler.unknown"


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
            path=dotted_path(fn),
            columns=_columns(queue, priority, max_attempts, retry, timeout, description),
        )
        existing = _registry.get(spec.name)
        if existing is not None and existing.spec.path != spec.path:
            raise ValueError(
                f"job name {spec.name!r} is already registered by {existing.spec.path}; "
                f"choose another name= for {spec.path}"
            )
        wrapped = Handler(fn, spec)
        _registry[spec.name] = wrapped
        handlers.put(spec.path, fn)
        return wrapped

    return register(func) if func is not None else register


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


def sync(entry: Handler):
    """Create or update the ``Job`` row of a ``@job`` function; return it."""
    from django_strait.models import Job
    from django_strait.retry import check_registered

    spec = entry.spec
    check_registered({"function": spec.columns.get("retry_function")}, prefix="@job.retry")
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

    entry = _registry.get(name)
    if entry is None:
        return None
    if name not in _synced:
        return sync(entry)
    return Job.objects.filter(name=name).first() or sync(entry)
