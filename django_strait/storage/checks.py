"""The system check of ``STRAIT["STORAGE"]`` (``django_strait.E006``).

``conf`` checks that the setting names a short name or a class that imports; that
the class has every verb and flag of the Storage Protocol is this layer's to say,
and needs the models imported, which ``django_strait.checks`` must not.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from django_strait.checks import TAG
from django_strait.conf import SettingError, strait_settings
from django_strait.storage import backend_class

HINT = (
    "Name 'orm', 'postgresql', or a class with every method and flag of "
    "django_strait.storage.base.Storage (docs/architecture.md, 'A new storage backend')."
)


@checks.register(TAG)
def check_storage(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E006: the backend ``STRAIT["STORAGE"]`` names cannot serve ``STRAIT["DATABASE"]``."""
    if strait_settings.errors() or strait_settings.STORAGE is None:
        return []  # a bad value is E003/E004's; None is the database engine's own backend
    try:
        backend_class(strait_settings.DATABASE)
    except SettingError as exc:
        return [checks.Error(str(exc), hint=HINT, id="django_strait.E006")]
    return []
