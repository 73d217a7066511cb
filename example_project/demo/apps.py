from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo app. Its ``jobs.py`` is imported by django-strait at startup, like admin.py."""

    name = "example_project.demo"
    label = "demo"
    verbose_name = "django-strait demo"
