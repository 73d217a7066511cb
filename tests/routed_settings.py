"""tests.settings with django-strait's tables in a second database, "jobs" (SQLite files).

For tests/e2e/test_routed_database.py, which runs in processes of its own:
``STRAIT_TEST_DEFAULT_DB`` and ``STRAIT_TEST_JOBS_DB`` name the two files.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

_SQLITE = {"OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"}}
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["STRAIT_TEST_DEFAULT_DB"],
        **_SQLITE,
    },
    "jobs": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["STRAIT_TEST_JOBS_DB"],
        **_SQLITE,
    },
}
DATABASE_ROUTERS = ["django_strait.database.StraitRouter"]
STRAIT = {**STRAIT, "DATABASE": "jobs"}  # noqa: F405
