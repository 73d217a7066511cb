from __future__ import annotations

from django.apps import AppConfig


class StraitConfig(AppConfig):
    name = "django_strait"
    label = "django_strait"
    verbose_name = "Strait jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        # Imported for what they register: the system checks, the model signal receivers.
        from django_strait import checks, receivers  # noqa: F401

        # Like admin.py for the admin: every installed app's jobs.py is imported, so
        # workers and web processes know the same @job handlers.
        autodiscover_modules("jobs")
