"""Django's task API on StraitBackend: enqueue in a view's transaction, a real worker, results.

Skipped when neither ``django.tasks`` (Django >= 6.0) nor the ``django-tasks``
backport is importable. The cases follow what Django's own backend tests and
django-tasks' database backend tests check (ids, statuses, errors, priorities,
queues, run_after, context, JSON return values, unknown ids); those suites are
not shipped in Django's wheel nor in the django-tasks 0.12 sdist, so they are
written here against the public API, not copied.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core import checks
from django.db import connection, connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_strait import trigger
from django_strait.models import Job, JobRun

if not settings.HAS_TASK_FRAMEWORK:
    pytest.skip(
        "needs Django's task framework: Django >= 6.0, or django-tasks on Django 5.2",
        allow_module_level=True,
    )

from django_strait.tasks import StraitBackend
from django_strait.tasks.framework import (
    FRAMEWORK,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)
from tests.conftest import ROOT, worker_command
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def run_of(result) -> JobRun:
    return JobRun.objects.get(pk=int(result.id))


# Enqueue


def test_enqueue__in_a_view_transaction_makes_a_run_that_workers_see_at_commit(burst):
    with transaction.atomic():
        result = tasks.add.enqueue(2, 3)
        assert result.status == TaskResultStatus.READY
        assert result.id == str(run_of(result).pk)
    assert burst().succeeded == 1

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.is_finished and result.attempts == 1
    assert result.worker_ids == ["test-worker"]
    assert result.errors == []
    assert result.started_at and result.finished_at and result.last_attempted_at
    assert result.backend == "default"


def test_enqueue__result_reads_back_equal_and_times_in_order(burst):
    result = tasks.add.enqueue(1, b=3)
    assert (result.args, result.kwargs, result.task) == ([1], {"b": 3}, tasks.add)
    assert result.started_at is None and result.finished_at is None
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018
    assert task_backends["default"].get_result(result.id) == result
    burst()
    result.refresh()
    assert result.enqueued_at <= result.started_at <= result.finished_at


@pytest.mark.postgres
def test_enqueue__other_connections_see_the_run_only_at_commit():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite locks the table for the transaction")

    def visible() -> int:
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM django_strait_jobrun")
                return cursor.fetchone()[0]
        finally:
            other.close()

    with transaction.atomic():
        tasks.add.enqueue(1, 1)
        assert visible() == 0
    assert visible() == 1


def test_enqueue__a_rolled_back_transaction_leaves_no_run():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1, 1)
        raise RuntimeError("the view failed")
    assert not JobRun.objects.exists()


def test_enqueue__the_task_is_a_job_like_any_other():
    result = tasks.add.enqueue(1, 2)
    run = run_of(result)
    assert run.job.name == "tests-testapp-tasks-add"
    assert run.job.handler == "tests.testapp.tasks.add"
    assert run.payload == {"args": [1, 2], "kwargs": {}}
    assert Job.objects.filter(name="tests-testapp-tasks-add").count() == 1


def test_enqueue__sends_task_enqueued():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((sender, task_result.id))

    task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 2)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(StraitBackend, result.id)]


def test_enqueue__get_result_by_id_on_the_task_and_the_backend(burst):
    result = tasks.add.enqueue(4, 4)
    burst()
    assert tasks.add.get_result(result.id).return_value == 8
    assert task_backends["default"].get_result(result.id).status == TaskResultStatus.SUCCESSFUL


def test_aenqueue__and_aget_result(burst):
    # async_to_sync: the database work runs back on this thread and its connection.
    result = async_to_sync(tasks.add.aenqueue)(5, 6)
    burst()
    got = async_to_sync(tasks.add.aget_result)(result.id)
    assert (got.status, got.return_value) == (TaskResultStatus.SUCCESSFUL, 11)


def test_enqueue__an_async_task_runs_on_the_worker_loop(burst):
    result = tasks.async_add.enqueue(20, 22)
    burst()
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_enqueue__kwargs_reach_the_task(burst):
    result = tasks.add.enqueue(a="x", b="y")
    burst()
    result.refresh()
    assert result.return_value == "xy"
    assert result.kwargs == {"a": "x", "b": "y"}


@pytest.mark.slow
def test_enqueue__a_worker_process_learns_the_tasks_from_tasks_py(worker_env):
    # Another process: nothing registered here reaches it; it imports tests/testapp/tasks.py.
    result = tasks.add.enqueue(40, 2)
    done = subprocess.run(
        worker_command("--burst", "--worker-id", "tasks-proc"),
        cwd=ROOT,
        env=worker_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert result.worker_ids == ["tasks-proc"]


# Failures


def test_failure__reports_failed_with_the_class_path_and_traceback(burst):
    result = tasks.fail.enqueue()
    burst()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.is_finished and result.attempts == 1
    [error] = result.errors
    assert error.exception_class_path == "tests.testapp.tasks.TaskBoom"
    assert error.exception_class is tasks.TaskBoom
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert 'raise TaskBoom("the task failed on purpose")' in error.traceback
    assert error.traceback.rstrip().endswith(
        "tests.testapp.tasks.TaskBoom: the task failed on purpose"
    )
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_failure__the_workers_log_line_says_the_tasks_error_in_one_whole_line(burst, caplog):
    result = tasks.fail.enqueue()
    with caplog.at_level("INFO", logger="django_strait.worker.recorder"):
        burst()
    [line] = [r.getMessage() for r in caplog.records if getattr(r, "run_id", 0) == int(result.id)]
    assert "\n" not in line
    assert "tests.testapp.tasks.TaskBoom: the task failed on purpose -> dead_letter" in line


@pytest.mark.parametrize("name", ["exits", "async_exits"])
def test_failure__a_task_raising_system_exit_is_recorded_as_system_exit(burst, name):
    # As django-tasks' database backend records it; the worker goes on working.
    result = getattr(tasks, name).enqueue()
    after = tasks.add.enqueue(1, 1)
    burst()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "builtins.SystemExit"
    assert error.exception_class is SystemExit
    assert "raise SystemExit(" in error.traceback
    after.refresh()
    assert after.return_value == 2


def test_failure__each_attempt_adds_an_error_and_a_worker(burst):
    result = tasks.fail_twice.enqueue()  # the "retrying" backend: 2 attempts, 1 s apart
    burst()
    result.refresh()
    assert result.status == TaskResultStatus.READY  # waiting for its retry
    assert (result.attempts, len(result.errors)) == (1, 1)
    JobRun.objects.filter(pk=int(result.id)).update(available_at=timezone.now())
    burst()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 2 and len(result.errors) == 2
    assert run_of(result).status == "dead_letter"
    assert {e.exception_class_path for e in result.errors} == {"tests.testapp.tasks.TaskBoom"}


def test_failure__a_non_json_return_value_fails_with_type_error_unretried(burst):
    result = tasks.returns_a_set.enqueue()
    burst()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert error.exception_class is TypeError
    assert run_of(result).result is None  # never stored as text


def test_result__a_tuple_is_json_as_django_normalises_it(burst):
    result = tasks.returns_a_tuple.enqueue()
    burst()
    result.refresh()
    assert result.return_value == [1, "two"]


def test_failure__a_canceled_run_reads_failed():
    result = tasks.add.enqueue(1, 1)
    JobRun.objects.filter(pk=int(result.id)).update(status="canceled")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED


def test_running__an_executing_run_reads_running_with_started_at():
    result = tasks.add.enqueue(1, 1)
    now = timezone.now()
    JobRun.objects.filter(pk=int(result.id)).update(
        status="executing", attempt=1, started_at=now, claimed_by="w-9"
    )
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING
    assert result.started_at == now and result.worker_ids == ["w-9"]
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018


# Options


def test_run_after__is_not_run_before_it_is_due(burst):
    later = timezone.now() + dt.timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 1)
    assert run_of(result).available_at == later
    burst()
    result.refresh()
    assert result.status == TaskResultStatus.READY
    JobRun.objects.filter(pk=int(result.id)).update(available_at=timezone.now())
    burst()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_priority__higher_runs_first(burst):
    low = tasks.label.using(priority=-100).enqueue("low")
    high = tasks.label.using(priority=100).enqueue("high")
    mid = tasks.label.enqueue("mid")
    assert [run_of(r).priority for r in (low, high, mid)] == [-100, 100, 0]
    burst(concurrency=1, batch_size=1)
    for result in (low, high, mid):
        result.refresh()
    started = {r.return_value: run_of(r).started_at for r in (low, high, mid)}
    assert started["high"] < started["mid"] < started["low"]


def test_queue_name__is_the_runs_queue(burst):
    result = tasks.send_email.enqueue("a@example.com")
    assert run_of(result).queue == "emails"
    burst(queues=["default"])
    result.refresh()
    assert result.status == TaskResultStatus.READY
    burst(queues=["emails"])
    result.refresh()
    assert result.return_value == {"sent": "a@example.com"}


def test_queue_name__outside_the_backends_queues_is_refused():
    with pytest.raises(InvalidTask, match="nightly"):
        tasks.add.using(queue_name="nightly")


def test_takes_context__gets_the_attempt_and_its_result_id(burst):
    result = tasks.with_context.enqueue(7)
    burst()
    result.refresh()
    assert result.return_value == {"attempt": 1, "id": result.id, "x": 7}


def test_takes_context__async(burst):
    result = tasks.async_with_context.enqueue()
    burst()
    result.refresh()
    assert result.return_value == 1


# Ids


@pytest.mark.parametrize(
    "result_id",
    ["", "abc", "-1", "0", "1.5", " 1", "١", str(2**64), "999999999", "1" * 5000, None, 7],
)
def test_get_result__malformed_or_unknown_ids_do_not_exist(result_id):
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)


def test_get_result__a_run_that_is_not_a_task_does_not_exist():
    run = trigger("test-noop", {})
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(run.pk))


# Configuration


def test_backend__supports_what_it_honours():
    backend = task_backends["default"]
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


def test_checks__a_backend_as_configured_here_has_no_problem():
    assert list(task_backends["default"].check()) == []


@pytest.mark.parametrize(
    ("params", "check_id"),
    [
        ({"QUEUES": [""]}, "django_strait.E102"),
        ({"QUEUES": "emails"}, "django_strait.E102"),
        ({"QUEUES": ["x" * 101]}, "django_strait.E102"),
        ({"OPTIONS": {"RETRIES": 3}}, "django_strait.E103"),
        ({"OPTIONS": {"RETRY": {"max_attempts": -1}}}, "django_strait.E104"),
        (
            {"OPTIONS": {"RETRY": {"initial_delay": 1, "initial_interval": "PT1S"}}},
            "django_strait.E104",
        ),
    ],
)
def test_checks__name_a_misconfigured_backend(params, check_id):
    backend = StraitBackend("broken", {"BACKEND": "django_strait.tasks.StraitBackend", **params})
    assert [m.id for m in backend.check()] == [check_id]


def test_enqueue__a_bad_retry_option_refuses_the_run_naming_it():
    backend = StraitBackend("bad", {"OPTIONS": {"RETRY": {"max_attempts": -1}}})
    backend.validate_task(tasks.add)  # at import time: left to the check (E104)
    with pytest.raises(InvalidTask, match=r"TASKS\['bad'\]\['OPTIONS'\]\['RETRY'\]"):
        backend.enqueue(tasks.add, [1, 2], {})
    assert not JobRun.objects.exists()


@pytest.mark.slow
def test_manage_py_check__reports_a_bad_retry_option_as_e104_not_a_crash(tmp_path, worker_env):
    # tests/testapp/tasks.py is imported at start-up (its @task validates against the
    # backend): the bad option must reach the check, not stop the import.
    (tmp_path / "bad_retry_settings.py").write_text(
        "from tests.settings import *\n"
        f"FRAMEWORK = {FRAMEWORK!r}\n"
        "TASKS['default']['OPTIONS'] = {'RETRY': {'max_attempts': -1}}\n"
        # On Django 5.2 the backport's app registers the task checks (docs/django-tasks.md).
        "if FRAMEWORK == 'django_tasks':\n"
        "    INSTALLED_APPS = [*INSTALLED_APPS, 'django_tasks']\n"
    )
    env = {**worker_env, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    env["DJANGO_SETTINGS_MODULE"] = "bad_retry_settings"
    done = subprocess.run(
        [sys.executable, "-m", "django", "check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "django_strait.E104" in done.stderr and "max_attempts" in done.stderr
    assert "Traceback" not in done.stderr


def test_checks__strait_must_be_installed():
    backend = StraitBackend("x", {})
    with override_settings(INSTALLED_APPS=["django.contrib.contenttypes"]):
        found = list(backend.check())
    assert [m.id for m in found] == ["django_strait.E101"]
    assert all(isinstance(m, checks.Error) for m in found)
