"""Settings of the example project, read from the environment (django-environ).

Defaults suit a first run on a laptop: SQLite in ``db.sqlite3`` at the project
root, DEBUG on, an insecure secret key. Set ``DATABASE_URL``
(``postgres://user@host:5432/name``), ``DEBUG=false`` and ``SECRET_KEY`` for
anything else, in the environment or in a ``.env`` file at the project root
(the environment wins).
"""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    environ.Env.read_env(BASE_DIR / ".env")

DEBUG = env.bool("DEBUG", default=True)
SECRET_KEY = env.str("SECRET_KEY", default="django-insecure-example-project-only")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])

DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Several worker processes may share the file: wait up to 30 s for the write
    # lock, and take it at BEGIN so that a read never needs upgrading to a write
    # (an upgrade SQLite cannot wait for; it fails with "database is locked").
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "transaction_mode": "IMMEDIATE"}
    )

INSTALLED_APPS = [
    # First, so its admin home-page template (the Overview link) wins over the admin's.
    "django_strait",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "example_project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

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

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

STRAIT = {
    # The demo's HTTP jobs call this project's own endpoints on 127.0.0.1: loopback
    # is listed among the private networks HTTP jobs may reach (docs/settings.md).
    # A deployment that calls only public endpoints leaves this out.
    "ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8", "::1/128"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        # The worker's start, stop and stats lines are logged at INFO. Django's own
        # loggers keep Django's default handlers (not propagated twice).
        "django_strait": {
            "handlers": ["console"],
            "level": env.str("LOG_LEVEL", default="INFO"),
            "propagate": False,
        },
    },
}
