"""tests.settings on a primary and its standby, reached by one multi-host connection.

For tests/e2e/test_failover_standby.py, which runs in processes of its own:
``FAILOVER_TEST_PORTS`` is "primary port,standby port" on 127.0.0.1. libpq
tries the hosts in order and keeps the one that takes writes
(``target_session_attrs``), so after a promotion a new connection finds the new
primary (docs/operations.md, "Failover").
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

# Its jobs.py: the handlers that note each attempt's start and end.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.failover"]  # noqa: F405

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "strait",
        "USER": "postgres",
        "HOST": "127.0.0.1,127.0.0.1",
        "PORT": os.environ["FAILOVER_TEST_PORTS"],
        # Workers keep their connections; a broken one is dropped after its error.
        "CONN_MAX_AGE": None,
        "OPTIONS": {"target_session_attrs": "read-write", "connect_timeout": 2},
    }
}
