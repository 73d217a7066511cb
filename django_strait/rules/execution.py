"""Where a job's runs execute: a choice of the job, known before any model is.

A pure module (Django's choices, no model): ``@job(execution=...)`` checks its
value at import time, which may come before the app registry is ready.
"""

from __future__ import annotations

from django.db import models


class Execution(models.TextChoices):
    """Where a Python job's handler runs (docs/process-execution.md)."""

    #: On the worker's threads (or its event loop, for ``async def``): the default.
    THREAD = "thread", "Worker thread"
    #: In a child process of the worker's pool, under its preset's memory limit.
    PROCESS = "process", "Child process (memory preset, hard timeout)"
    #: By workers outside the project, over the OJS HTTP protocol (docs/ojs.md): the
    #: project's own workers never claim these runs.
    EXTERNAL = "external", "External worker (OJS)"
