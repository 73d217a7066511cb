"""tests.settings on a primary ("default") and its streaming standby ("reader").

For tests/e2e/test_read_replica_standby.py, which runs in processes of its own:
``REPLICA_TEST_PORTS`` is "primary port,standby port" on 127.0.0.1, and
``STRAIT["READ_DATABASE"]`` names the standby, as a project that reads its
dashboards off a hot standby does (docs/operations.md, "Reads off the primary").
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

_PRIMARY, _STANDBY = os.environ["REPLICA_TEST_PORTS"].split(",")
_SERVER = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": "strait",
    "USER": "postgres",
    "HOST": "127.0.0.1",
    "OPTIONS": {"connect_timeout": 2},
}
DATABASES = {
    "default": {**_SERVER, "PORT": _PRIMARY},
    "reader": {**_SERVER, "PORT": _STANDBY},
}
STRAIT = {**STRAIT, "READ_DATABASE": "reader"}  # noqa: F405
ROOT_URLCONF = "tests.e2e.replica_urls"
