"""tests.settings over three SQLite files: "default", and django-strait's tables on "jobs1"
and "jobs2" (queue "two" there), circuits and health on the control database, "jobs1".

For tests/e2e/test_control_database.py, which runs in processes of its own:
``SEVERAL_TEST_DIR`` is the directory of the three files.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.several"]  # noqa: F405
if HAS_TASK_FRAMEWORK:  # noqa: F405
    TASKS = {**TASKS, "default": {**TASKS["default"], "QUEUES": ["default", "emails", "two"]}}  # noqa: F405

_SQLITE = {"OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"}}
_DIR = os.environ["SEVERAL_TEST_DIR"]
DATABASES = {
    name: {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(_DIR, f"{name}.sqlite3"),
        **_SQLITE,
    }  # fmt: skip
    for name in ("default", "jobs1", "jobs2")
}
DATABASE_ROUTERS = ["django_strait.database.StraitRouter"]
STRAIT = {
    **STRAIT,  # noqa: F405
    "DATABASES": ["jobs1", "jobs2"],
    "QUEUE_DATABASES": {"two": "jobs2"},
    "CIRCUIT_FAILURE_THRESHOLD": 2,
    "CIRCUIT_COOLDOWN": "1h",
}
