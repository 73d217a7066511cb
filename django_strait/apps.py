from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate


class StraitConfig(AppConfig):
    name = "django_strait"
    label = "django_strait"
    verbose_name = "Strait jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        # Imported for what they register: the system checks, the model signal receivers.
        from django_strait import checks  # noqa: F401
        from django_strait.ojs import receivers as ojs_receivers  # noqa: F401
        from django_strait.services import receivers  # noqa: F401
        from django_strait.storage import checks as storage_checks  # noqa: F401
        from django_strait.storage.ids import after_migrate

        # Each alias's ids in a range of their own, so an id says where its row lives.
        post_migrate.connect(after_migrate, sender=self, dispatch_uid="django_strait.number_ids")

        # Like admin.py for the admin: every installed app's jobs.py is imported, so
        # workers and web processes know the same @job handlers.
        autodiscover_modules("jobs")
        if _uses_strait_tasks(getattr(settings, "TASKS", None)):
            # Django's @task functions live in tasks.py by convention; a worker must
            # import them to run them (only registered code runs).
            autodiscover_modules("tasks")


def _uses_strait_tasks(tasks: object) -> bool:
    """Tell whether a ``TASKS`` setting names ``StraitBackend`` for some alias."""
    if not isinstance(tasks, dict):
        return False
    return any(
        isinstance(cfg, dict) and cfg.get("BACKEND") == "django_strait.tasks.StraitBackend"
        for cfg in tasks.values()
    )
