"""Settings for bench/: the database from DATABASE_URL, nothing else installed."""

from __future__ import annotations

import environ

env = environ.Env()

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": env.db_url("DATABASE_URL")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "transaction_mode": "IMMEDIATE"}
    )
# "bench" so that bench/jobs.py (its registered no-op handler) is imported like any app's jobs.py.
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_strait", "bench"]
STRAIT = {"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8"]}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
