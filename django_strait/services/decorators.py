"""``@job``: register a Python function as a job, callable as before and triggerable.

Importable anywhere, also before Django's app registry is ready (an app's
``__init__.py``): declaring a job only checks its options and registers the
function; its ``Job`` row is written later (:mod:`django_strait.services.syncing`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import django_strait
from django_strait.rules.handlers import handlers
from django_strait.services import registry
from django_strait.services.registry import JobSpec, ScheduleSpec

if TYPE_CHECKING:
    from django_strait.models import JobRun


class Handler:
    """A registered job function: call it like the function, or trigger it."""

    def __init__(self, func: Callable[..., Any], spec: JobSpec) -> None:
        functools.update_wrapper(self, func)
        self.func = func
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    # Through the package's lazy names: triggering needs the models, which a module
    # declaring a job may be imported before.
    def trigger(self, payload: Any = None, **options: Any) -> JobRun:
        """Queue a run of this job; options as for ``django_strait.trigger``."""
        return django_strait.trigger(self.spec.name, payload, **options)

    def trigger_many(self, payloads: Any, **options: Any) -> list[JobRun]:
        """Queue one run per payload in one statement."""
        return django_strait.trigger_many(self.spec.name, payloads, **options)

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
    execution: str | None = None,
    preset: str | None = None,
    schedule: str | None = None,
    timezone: str | None = None,
    schedule_missed: str | None = None,
    schedule_overlap: str | None = None,
) -> Any:
    """Register a Python function (sync or ``async``) as a job and its handler.

    ``execution="process"`` runs each attempt in a child process of the worker's
    pool, under the memory limit of ``preset`` (a ``STRAIT["PRESETS"]`` name).
    ``schedule`` (cron, in ``timezone``, UTC by default) runs it on a schedule
    that code owns (docs/schedules.md).
    """
    declared = ScheduleSpec(schedule, timezone, schedule_missed, schedule_overlap)

    def register(fn: Callable[..., Any]) -> Handler:
        spec = registry.spec_of(
            fn, name=name, queue=queue, priority=priority, max_attempts=max_attempts,
            retry=retry, timeout=timeout, description=description, execution=execution,
            preset=preset, schedule=declared,
        )  # fmt: skip
        wrapped = Handler(fn, spec)
        registry.register(wrapped)
        handlers.put(spec.path, fn)
        return wrapped

    return register(func) if func is not None else register
