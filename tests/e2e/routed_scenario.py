"""Use every surface with STRAIT["DATABASE"] = "jobs"; print where the rows went, as JSON.

Run by tests/e2e/test_routed_database.py with DJANGO_SETTINGS_MODULE=tests.routed_settings,
after ``migrate`` on both databases.
"""

from __future__ import annotations

import json

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402
from django.test import Client  # noqa: E402

from django_strait import trigger  # noqa: E402
from django_strait.api.auth import issue_key  # noqa: E402
from django_strait.models import ApiKey, Job, JobRun  # noqa: E402


def tables(alias: str) -> set[str]:
    return set(connections[alias].introspection.table_names())


def main() -> dict:
    trigger("test-noop", {"from": "python"})
    _, key = issue_key("routed", ["*"])
    api = Client(HTTP_AUTHORIZATION=f"Api-Key {key}")
    answer = api.post("/api/strait/jobs/test-noop/trigger/", {"payload": {"from": "api"}},
                      content_type="application/json")  # fmt: skip
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="pw"))
    added = admin.post("/admin/django_strait/job/add/", {
        "name": "from-admin", "queue": "default", "priority": 0, "enabled": "on",
        "fallback_endpoint_urls": "[]", "http_method": "POST", "headers": "{}",
        "handler": "tests.testapp.jobs.noop", "timeout_secs": 30, "retry_delays_secs": "null",
        "non_retryable_errors": "[]", "timezone": "UTC", "schedule_missed": "run_once",
        "schedule_overlap": "allow",
    })  # fmt: skip
    trigger("from-admin", {"from": "admin job"})
    trigger("test-actions", {"action": "dead_letter"})
    call_command("run_strait_worker", burst=True, worker_id="routed", verbosity=0)
    dead = JobRun.objects.get(status="dead_letter")
    replay = api.post(f"/api/strait/runs/{dead.pk}/replay/", content_type="application/json")
    return {
        "api_trigger": answer.status_code,
        "admin_add": added.status_code,
        "replay": replay.status_code,
        "jobs_db_runs": list(
            JobRun.objects.using("jobs").order_by("pk").values_list("status", flat=True)
        ),
        "jobs_db_jobs": sorted(Job.objects.using("jobs").values_list("name", flat=True)),
        "default_has_run_table": JobRun._meta.db_table in tables("default"),
        "jobs_has_apikey_table": ApiKey._meta.db_table in tables("jobs"),
        "default_api_keys": ApiKey.objects.using("default").count(),
    }


print(json.dumps(main()))
