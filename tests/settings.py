"""Settings for the test suite: PostgreSQL when DATABASE_URL names one, else SQLite."""

from __future__ import annotations

import importlib.util
import os
import tempfile

import environ

env = environ.Env()

BASE_DIR = os.path.dirname(os.path.abspath(__file__))
SECRET_KEY = "tests-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# An empty DATABASE_URL counts as unset.
DATABASES = {
    "default": env.db_url_config(
        os.environ.get("DATABASE_URL") or f"sqlite:///{os.path.join(BASE_DIR, 'test-db.sqlite3')}"
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Workers in other processes share the file: wait for the write lock, and take
    # it at BEGIN so a read never has to be upgraded (which SQLite cannot wait for).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "transaction_mode": "IMMEDIATE"}
    )
    # A file (not :memory:) so worker subprocesses can open it; one per test
    # process so that simultaneous test runs never share it.
    DATABASES["default"]["TEST"] = {
        "NAME": os.path.join(tempfile.gettempdir(), f"strait-test-{os.getpid()}.sqlite3")
    }
    # The same backend, whose flush keeps the content types and permissions and whose
    # commits do not wait for the disk (tests/db/sqlite3/base.py).
    DATABASES["default"]["ENGINE"] = "tests.db.sqlite3"

else:
    # One test database per test process, so that simultaneous runs never drop
    # each other's (pytest-django destroys it at the end).
    DATABASES["default"]["TEST"] = {"NAME": f"test_strait_{os.getpid()}"}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # The same backend, whose flush after a transaction=True test deletes rather
        # than truncates 120-odd relations, and keeps the content types and permissions
        # (tests/db/postgresql/base.py).
        DATABASES["default"]["ENGINE"] = "tests.db.postgresql"

# A second database of django-strait's own, for the tests of several aliases in this
# process (the ``two_aliases`` fixture of tests/conftest.py puts queue "two" there).
# Migrated like "default"; outside the fixture nothing is placed on it.
DATABASES["jobs2"] = {**DATABASES["default"]}
if DATABASES["jobs2"]["ENGINE"].endswith("sqlite3"):
    DATABASES["jobs2"]["TEST"] = {
        "NAME": os.path.join(tempfile.gettempdir(), f"strait-test-jobs2-{os.getpid()}.sqlite3")
    }
else:
    DATABASES["jobs2"]["TEST"] = {"NAME": f"test_strait_jobs2_{os.getpid()}"}

# A second connection to the same database, as a read replica would be: for the
# tests of STRAIT["READ_DATABASE"] (tests/integration/test_read_replica.py). Never
# created or migrated: a test mirror of "default".
DATABASES["reader"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}

INSTALLED_APPS = [
    # First, so its admin home-page template (the Overview link) wins over the admin's.
    "django_strait",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "rest_framework",
    "rest_framework.authtoken",
    "tests.testapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"
# The live server serves MEDIA_ROOT at MEDIA_URL before the project; left empty, it
# looks every path up as a file first (a NUL or a long name there answers 500).
MEDIA_URL = "/media/"

# Tests log users in often; the production hasher's 1M iterations only slow them.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

STRAIT = {
    "ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8", "::1/128"],
    # Small presets, so that process tests allocate past them quickly (a child starts
    # at about 60MB resident with Django and the test app loaded).
    "PRESETS": {"micro": "160MB", "small-1x": "320MB", "small-2x": "480MB"},
}

#: Django's task framework, when this Django has it (6.0+) or the backport is installed:
#: tests/integration/test_django_tasks.py runs tests/testapp/tasks.py on Strait.
HAS_TASK_FRAMEWORK = bool(
    importlib.util.find_spec("django_tasks")
    or (importlib.util.find_spec("django") and importlib.util.find_spec("django.tasks"))
)
if HAS_TASK_FRAMEWORK:
    TASKS = {
        "default": {
            "BACKEND": "django_strait.tasks.StraitBackend",
            "QUEUES": ["default", "emails"],
            # One attempt unless a test asks for more: a failing task fails at once.
            "OPTIONS": {"RETRY": {"max_attempts": 1}},
        },
        "retrying": {
            "BACKEND": "django_strait.tasks.StraitBackend",
            "OPTIONS": {"RETRY": {"max_attempts": 2, "initial_delay": "1s", "jitter": 0}},
        },
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
