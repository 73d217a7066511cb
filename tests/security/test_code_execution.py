"""Only code the project registered runs: no surface can name a function to import and call.

Finding 1 of the trust-boundaries issue: a ``jobs:write`` key could create a job
whose handler was ``subprocess.getoutput`` and run shell commands on the
workers; a ``jobs:trigger`` key could do the same through a retry policy's
``function``; so could an admin user with only ``add_job``. Handlers and retry
functions are now names looked up among the functions registered in code.
"""

from __future__ import annotations

import sys

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.db import connection
from django.urls import reverse

from django_strait import trigger
from django_strait.api.auth import issue_key
from django_strait.models import Job, JobRun
from tests.security.live import call, run_burst_worker

pytestmark = pytest.mark.django_db(transaction=True)

CANARY = "tests.security.canary"
STRAIT = {"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8"], "API_THROTTLE_RATE": None}


@pytest.fixture(autouse=True)
def unthrottled(settings):
    settings.STRAIT = STRAIT
    cache.clear()
    sys.modules.pop(CANARY, None)


@pytest.fixture
def api(live_server) -> str:
    return f"{live_server.url}/api/strait"


def key_with(*scopes: str) -> str:
    return issue_key("attacker", scopes)[1]


@pytest.mark.parametrize("handler", ["subprocess.getoutput", "os.system", f"{CANARY}.run"])
def test_api__a_jobs_write_key_cannot_name_an_unregistered_handler(api, handler):
    answer = call(
        f"{api}/jobs/", "POST", {"name": "x", "handler": handler}, key=key_with("jobs:write")
    )

    assert answer.status == 400
    assert "handler" in answer.error["details"]
    assert "is not a registered handler" in answer.error["details"]["handler"][0]
    assert not Job.objects.filter(name="x").exists()
    assert CANARY not in sys.modules  # the web process did not import it to find out


def test_api__a_jobs_write_key_may_name_a_registered_handler(api):
    body = {"name": "x", "handler": "tests.testapp.jobs.noop"}
    answer = call(f"{api}/jobs/", "POST", body, key=key_with("jobs:write"))
    assert answer.status == 201, answer.body


@pytest.mark.parametrize("function", ["os.system", f"{CANARY}.delay"])
def test_api__a_jobs_trigger_key_cannot_name_an_unregistered_retry_function(api, function):
    retry = {"strategy": "function", "function": function}
    answer = call(
        f"{api}/jobs/test-boom/trigger/", "POST", {"payload": "id", "retry": retry},
        key=key_with("jobs:trigger"),
    )  # fmt: skip

    assert answer.status == 400
    assert list(answer.error["details"]) == ["retry.function"]
    assert "is not a registered retry function" in answer.error["message"]
    assert not JobRun.objects.exists()
    assert CANARY not in sys.modules


def test_api__a_job_cannot_name_an_unregistered_retry_function(api):
    body = {
        "name": "x", "handler": "tests.testapp.jobs.noop",
        "retry_strategy": "function", "retry_function": "os.system",
    }  # fmt: skip
    answer = call(f"{api}/jobs/", "POST", body, key=key_with("jobs:write"))
    assert answer.status == 400
    assert "is not a registered retry function" in answer.error["details"]["retry_function"][0]


def test_admin__a_user_with_only_add_job_cannot_name_an_unregistered_handler(client):
    user = User.objects.create_user("clerk", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="add_job"))
    client.force_login(user)
    form = {
        "name": "x", "queue": "default", "priority": 0, "enabled": "on",
        "fallback_endpoint_urls": "[]", "http_method": "POST", "headers": "{}",
        "handler": "subprocess.getoutput", "timeout_secs": 30, "retry_delays_secs": "null",
        "non_retryable_errors": "[]", "timezone": "UTC", "schedule_missed": "run_once",
        "schedule_overlap": "allow",
    }  # fmt: skip

    response = client.post(reverse("admin:django_strait_job_add"), form)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "is not a registered handler" in errors["handler"][0]
    assert not Job.objects.filter(name="x").exists()


@pytest.fixture
def canary_file(tmp_path, worker_env):
    path = tmp_path / "canary"
    worker_env["STRAIT_CANARY_FILE"] = str(path)
    return path


def test_worker__a_row_naming_an_unregistered_handler_runs_nothing(worker_env, canary_file):
    # A row written around every surface (raw SQL): the worker looks the name up only.
    Job.objects.create(name="x", handler="tests.testapp.jobs.noop")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} SET handler = %s WHERE name = 'x'", [f"{CANARY}.run"]
        )
    run = trigger("x", "id")
    worker_env["STRAIT_UNKNOWN_HANDLER_GRACE"] = "0"  # no other worker may know it

    _, output = run_burst_worker(worker_env)

    run.refresh_from_db()
    assert (run.status, run.error_type, run.attempt, run.result) == (
        "dead_letter", "handler.unknown", 1, None,
    ), output  # fmt: skip
    assert not canary_file.exists(), canary_file.read_text()


def test_worker__a_row_naming_an_unregistered_retry_function_retries_without_it(
    worker_env, canary_file
):
    Job.objects.create(name="x", handler="tests.testapp.jobs.boom", max_attempts=2)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} SET retry_strategy = 'function', retry_function = %s "
            "WHERE name = 'x'",
            [f"{CANARY}.delay"],
        )
    run = trigger("x", {})

    _, output = run_burst_worker(worker_env)

    run.refresh_from_db()
    assert (run.status, run.error_type, run.attempt) == ("queued", "python.ValueError", 1), output
    assert run.available_at > run.attempts.get().finished_at
    assert not canary_file.exists(), canary_file.read_text()
    assert "is not a registered retry function" in output
