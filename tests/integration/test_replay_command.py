"""``manage.py strait_replay`` and ``strait_sync``."""

from __future__ import annotations

import getpass
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_strait.models import Job, JobRun
from django_strait.services import registry, replaying
from tests.conftest import ROOT
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db


def replay(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("strait_replay", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def statuses(*runs: JobRun) -> list[str]:
    return [JobRun.objects.get(pk=r.pk).status for r in runs]


def test_replay__by_ids_positional_and_flag():
    a, b, c = (make_run(status="dead_letter") for _ in range(3))
    out, _ = replay(str(a.pk), "--id", str(b.pk), "--by", "ops")
    assert statuses(a, b, c) == ["queued", "queued", "dead_letter"]
    assert "Replayed 2 of 2 selected run(s) (by ops)." in out
    assert JobRun.objects.get(pk=a.pk).replayed_by == "ops"


def test_replay__by_job_selects_only_that_jobs_dead_letters():
    billing, mail = make_job("billing"), make_job("mail")
    wanted = make_run(billing, status="dead_letter")
    failed = make_run(billing, status="failed")
    other = make_run(mail, status="dead_letter")
    replay("--job", "billing")
    assert statuses(wanted, failed, other) == ["queued", "failed", "dead_letter"]


def test_replay__by_exact_error_type_and_by_prefix():
    unavailable = make_run(status="dead_letter", error_type="http.503")
    timeout = make_run(status="dead_letter", error_type="http.timeout")
    python = make_run(status="dead_letter", error_type="python.KeyError")
    near_miss = make_run(status="dead_letter", error_type="https.x")

    replay("--error-type", "http.503")
    assert statuses(unavailable, timeout) == ["queued", "dead_letter"]
    replay("--error-type", "http.*")
    assert statuses(timeout, python, near_miss) == ["queued", "dead_letter", "dead_letter"]


def test_replay__status_option_replaces_the_dead_letter_default():
    dead = make_run(status="dead_letter")
    failed = make_run(status="failed")
    discarded = make_run(status="discarded")
    replay("--all", "--status", "failed", "--status", "discarded")
    assert statuses(dead, failed, discarded) == ["dead_letter", "queued", "queued"]


def test_replay__dry_run_changes_nothing_and_names_the_runs():
    runs = [make_run(status="dead_letter", error_type="http.503", attempts=2) for _ in range(3)]
    out, _ = replay("--error-type", "http.503", "--dry-run")
    ids = ", ".join(str(r.pk) for r in runs)
    assert f"Would replay 3 run(s): {ids}" in out
    assert "nothing changed" in out
    assert statuses(*runs) == ["dead_letter"] * 3
    assert all(r.replay_count == 0 for r in JobRun.objects.all())


def test_replay__dry_run_lists_only_the_first_ids():
    runs = [make_run(status="dead_letter") for _ in range(replaying.SHOWN_IDS + 2)]
    out, _ = replay("--all", "--dry-run")
    assert f"Would replay {len(runs)} run(s): " in out
    assert out.splitlines()[0].endswith(f"{runs[replaying.SHOWN_IDS - 1].pk}, ...")


def test_replay__resets_the_attempt_budget_and_defaults_by_to_the_os_user():
    run = make_run(status="dead_letter", attempts=3)
    replay(str(run.pk))
    replayed = JobRun.objects.get(pk=run.pk)
    assert replayed.attempts_before_replay == replayed.attempt == 3
    assert replayed.replayed_by == getpass.getuser()


def test_replay__explicit_ids_not_selected_are_reported():
    done = make_run(status="completed")
    _, err = replay(str(done.pk))
    assert f"Run {done.pk} not selected: is completed." in err
    assert statuses(done) == ["completed"]


def test_replay__ids_that_do_not_exist_are_an_error_naming_them_and_nothing_moves():
    dead = make_run(status="dead_letter")
    with pytest.raises(CommandError, match="no run has the id 999998, 999999; nothing was done"):
        replay(str(dead.pk), "999998", "--id", "999999")
    assert statuses(dead) == ["dead_letter"]


# A subprocess opens the database itself: on SQLite, the test's own transaction would
# hold the write lock its start-up checks wait for (Django 6 takes it there).
@pytest.mark.django_db(transaction=True)
def test_replay__exits_non_zero_from_a_shell_for_a_missing_id(worker_env):
    completed = subprocess.run(
        [sys.executable, "-m", "django", "strait_replay", "999999"],
        cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 1
    assert "no run has the id 999999" in completed.stderr


def test_replay__without_any_criterion_asks_for_all():
    dead = make_run(status="dead_letter")
    with pytest.raises(CommandError, match="--all"):
        replay()
    assert statuses(dead) == ["dead_letter"]


def test_replay__unknown_job_is_an_error_naming_it_and_the_jobs_there_are():
    make_job(name="charge-card")
    with pytest.raises(
        CommandError,
        match="--job: no job named 'nope'; allowed: the name of a job \\(charge-card\\)",
    ):
        replay("--job", "nope", "--job", "charge-card")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--status", "completed"], "cannot be replayed; allowed: dead_letter, discarded"),
        (["--error-type", "http*"], "not an error type pattern"),
        (["--id", "x"], "'x' is not a run id"),
        (["0"], "'0' is not a run id"),
    ],
)
def test_replay__bad_arguments_are_refused_by_the_parser(args, fragment):
    with pytest.raises(CommandError, match=fragment):
        replay(*args)


def test_replay_selection__refuses_a_status_that_cannot_be_replayed():
    with pytest.raises(replaying.SelectionError) as caught:
        replaying.ReplaySelection(statuses=("queued",))
    assert caught.value.field == "status"


def test_sync__writes_every_registered_handler_job():
    out = StringIO()
    call_command("strait_sync", stdout=out)
    names = set(registry.registered())
    assert names <= set(Job.objects.values_list("name", flat=True))
    assert "Synced job test-noop -> tests.testapp.jobs.noop" in out.getvalue()
    assert f"{len(names)} job(s) synced." in out.getvalue()
