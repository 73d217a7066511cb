"""Settings for bench/bench_admin.py: bench.settings plus the admin, and its URLconf."""

from __future__ import annotations

from bench.settings import *  # noqa: F403

ALLOWED_HOSTS = ["testserver", "127.0.0.1"]
INSTALLED_APPS = [
    # First, as in a project: its admin home-page template (the Overview link) wins.
    "django_strait",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Persistent, as in production: a page's time is its queries, not a new connection.
DATABASES["default"]["CONN_MAX_AGE"] = None  # noqa: F405
ROOT_URLCONF = "bench.admin_urls"
