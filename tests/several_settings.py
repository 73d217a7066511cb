"""tests.settings over two PostgreSQL servers: queue "two" on the second, the rest on the first.

For tests/e2e/test_several_databases.py and bench/bench_several_databases.py,
which run in processes of their own: ``SEVERAL_TEST_PORTS`` is "port1,port2" on
127.0.0.1. "default" (users, API keys) and "jobs1" are databases of the first
server, "jobs2" of the second.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.several"]  # noqa: F405

_PORT1, _PORT2 = os.environ["SEVERAL_TEST_PORTS"].split(",")


def _server(name: str, port: str) -> dict:
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": port,
        "CONN_MAX_AGE": None,
        "OPTIONS": {"connect_timeout": 2},
    }


DATABASES = {
    "default": _server("app", _PORT1),
    "jobs1": _server("strait1", _PORT1),
    "jobs2": _server("strait2", _PORT2),
}
DATABASE_ROUTERS = ["django_strait.database.StraitRouter"]
STRAIT = {
    **STRAIT,  # noqa: F405
    "DATABASES": ["jobs1", "jobs2"],
    "QUEUE_DATABASES": {"two": "jobs2"},
}
