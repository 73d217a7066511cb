"""``manage.py strait_sync``: write every ``@job`` handler's ``Job`` row now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from django_strait.services import syncing


class Command(BaseCommand):
    help = (
        "Create or update the Job row of every @job handler (otherwise done on its first "
        "trigger), so that the admin and the API see them."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        jobs = syncing.sync_all()
        if not jobs:
            self.stdout.write("No @job handlers are registered (is the app's jobs.py imported?).")
            return
        for job in jobs:
            self.stdout.write(f"Synced job {job.name} -> {job.handler}")
        self.stdout.write(self.style.SUCCESS(f"{len(jobs)} job(s) synced."))
