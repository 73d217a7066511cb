"""Django's own task API on Strait: ``TASKS = {"default": {"BACKEND": "django_strait.tasks.StraitBackend"}}``.

Needs Django >= 6.0 (``django.tasks``) or, on Django 5.2, the ``django-tasks``
backport (``pip install 'django-strait[tasks]'``). See docs/django-tasks.md.
"""

from __future__ import annotations

from django_strait.tasks.backend import StraitBackend

__all__ = ["StraitBackend"]
