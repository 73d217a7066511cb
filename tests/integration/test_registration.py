"""Declaring jobs in code: in any module, also one imported before the app registry is ready."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from django_strait import trigger
from django_strait.models import JobRun
from tests.conftest import ROOT, worker_command

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: An installed app whose __init__.py declares a job, a shared handler and a retry
#: function: Django imports it while populating the app registry, before any model.
EARLY_APP = """
from django_strait import handler, job, retry_function


@retry_function(name="early-delay")
def early_delay(retry_number, policy):
    return 0.5


@handler(name="early-shared")
def shared(payload):
    return {"shared": True}


@job(name="early-job", retry={"strategy": "function", "function": "early-delay"})
def early_job(payload):
    return {"early": payload["n"]}
"""


def test_job_handler_and_retry_function__in_an_apps_init_py_register_and_run(tmp_path, worker_env):
    (tmp_path / "early_app").mkdir()
    (tmp_path / "early_app" / "__init__.py").write_text(textwrap.dedent(EARLY_APP))
    (tmp_path / "early_settings.py").write_text(
        "from tests.settings import *\nINSTALLED_APPS = [*INSTALLED_APPS, 'early_app']\n"
    )
    env = {**worker_env, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    env["DJANGO_SETTINGS_MODULE"] = "early_settings"

    synced = subprocess.run(
        [sys.executable, "-m", "django", "strait_sync"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert synced.returncode == 0, synced.stderr
    assert "Synced job early-job -> early_app.early_job" in synced.stdout

    run = trigger("early-job", {"n": 7})
    worked = subprocess.run(
        worker_command("--burst"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert worked.returncode == 0, worked.stderr
    run = JobRun.objects.get(pk=run.pk)
    assert (run.status, run.result) == ("completed", {"early": 7})
