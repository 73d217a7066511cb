"""The admin: run and dead-letter lists, run pages, and actions through transitions."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_strait.models import Job, JobRun
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:django_strait_jobrun_changelist")
DEAD_LETTERS = reverse("admin:django_strait_deadletter_changelist")
JOBS = reverse("admin:django_strait_job_changelist")


def listed(response) -> set[int]:
    assert response.status_code == 200
    return {run.pk for run in response.context["cl"].result_list}


def post_action(client, url: str, action: str, runs: list[JobRun]):
    data = {"action": action, ACTION_CHECKBOX_NAME: [r.pk for r in runs], "index": 0}
    return client.post(url, data)


def message_texts(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def fresh(run: JobRun) -> JobRun:
    return JobRun.objects.get(pk=run.pk)


# Lists


def test_run_list__renders_runs_of_every_status(admin_client):
    runs = [make_run(status=s) for s in ("queued", "executing", "completed", "dead_letter")]
    assert listed(admin_client.get(RUNS)) == {r.pk for r in runs}


def test_run_list__filters_by_status_job_queue_and_error_type(admin_client):
    billing = make_job("billing", queue="money")
    mail = make_job("mail")
    dead_503 = make_run(billing, status="dead_letter", error_type="http.503")
    dead_404 = make_run(billing, status="dead_letter", error_type="http.404")
    failed_py = make_run(mail, status="failed", error_type="python.ValueError")
    queued = make_run(mail, status="queued")

    assert listed(admin_client.get(RUNS, {"status__exact": "dead_letter"})) == {
        dead_503.pk, dead_404.pk,
    }  # fmt: skip
    assert listed(admin_client.get(RUNS, {"job__id__exact": mail.pk})) == {failed_py.pk, queued.pk}
    assert listed(admin_client.get(RUNS, {"queue": "money"})) == {dead_503.pk, dead_404.pk}
    assert listed(admin_client.get(RUNS, {"error_type": "http.503"})) == {dead_503.pk}
    assert listed(admin_client.get(RUNS, {"error_type": "http.*"})) == {dead_503.pk, dead_404.pk}


def test_run_list__offers_seen_error_types_and_their_prefixes(admin_client):
    make_run(status="dead_letter", error_type="auth.token.expired")
    response = admin_client.get(RUNS)
    [error_filter] = [f for f in response.context["cl"].filter_specs if f.title == "error type"]
    offered = {value for value, _label in error_filter.lookup_choices}
    assert offered == {"auth.*", "auth.token.*", "auth.token.expired"}


def test_run_list__bad_error_type_pattern_is_a_redirect_not_a_500(admin_client):
    response = admin_client.get(RUNS, {"error_type": "http*"})
    assert response.status_code == 302
    assert "e=1" in response["Location"]


def test_run_list__searches_by_id_and_by_idempotency_key(admin_client):
    job = make_job()
    by_key = make_run(job, idempotency_key="order-77")
    other = make_run(job, idempotency_key="order-78")
    assert listed(admin_client.get(RUNS, {"q": "order-77"})) == {by_key.pk}
    assert listed(admin_client.get(RUNS, {"q": str(other.pk)})) == {other.pk}
    assert listed(admin_client.get(RUNS, {"q": "order"})) == set()


def test_run_list__query_count_does_not_grow_with_rows(admin_client):
    job = make_job()
    make_run(job, status="dead_letter")

    def queries_for_list() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(RUNS).status_code == 200
        return len(captured)

    few = queries_for_list()
    for _ in range(30):
        make_run(job, status="dead_letter", attempts=3)
    assert queries_for_list() == few


def test_dead_letter_list__shows_only_dead_letters_with_their_error(admin_client):
    dead = make_run(status="dead_letter", error_type="http.503", error="upstream down")
    make_run(status="failed")
    make_run(status="completed")
    response = admin_client.get(DEAD_LETTERS)
    assert listed(response) == {dead.pk}
    assert "upstream down" in response.content.decode()


def test_dead_letter_list__filters_by_error_type_prefix(admin_client):
    http = make_run(status="dead_letter", error_type="http.timeout")
    make_run(status="dead_letter", error_type="python.KeyError")
    assert listed(admin_client.get(DEAD_LETTERS, {"error_type": "http.*"})) == {http.pk}


# A run's page


def test_run_page__shows_attempts_read_only_and_the_allowed_buttons(admin_client):
    payload = {"note": "<script>alert(1)</script>"}
    run = make_run(status="dead_letter", attempts=3, error_type="http.503", payload=payload)
    response = admin_client.get(reverse("admin:django_strait_jobrun_change", args=[run.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert len(response.context["inline_admin_formsets"][0].formset.forms) == 3
    assert "http.503 on attempt 3" in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<script>alert(1)" not in body
    labels = [b["label"] for b in response.context["strait_run_actions"]]
    assert labels == ["Replay", "Discard", "Replay with edited payload"]
    assert 'name="_save"' not in body


def test_run_page__completed_run_offers_no_transition(admin_client):
    run = make_run(status="completed")
    response = admin_client.get(reverse("admin:django_strait_jobrun_change", args=[run.pk]))
    assert response.context["strait_run_actions"] == []


def test_run_page__replay_button_replays_and_returns_to_the_run(admin_client):
    run = make_run(status="dead_letter", attempts=3)
    url = reverse("admin:django_strait_deadletter_move", args=[run.pk, "replay"])
    response = admin_client.post(url)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:django_strait_jobrun_change", args=[run.pk])
    assert fresh(run).status == "queued"
    assert message_texts(response) == ["Replayed 1 run."]


def test_run_page__button_refuses_get(admin_client):
    run = make_run(status="dead_letter")
    url = reverse("admin:django_strait_jobrun_move", args=[run.pk, "replay"])
    assert admin_client.get(url).status_code == 405
    assert fresh(run).status == "dead_letter"


def test_run_page__button_needs_the_replay_permission(client):
    # change_jobrun is not enough: acting on runs has permissions of its own.
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_jobrun", "change_jobrun"])
    )
    client.force_login(viewer)
    run = make_run(status="dead_letter")
    page = client.get(reverse("admin:django_strait_jobrun_change", args=[run.pk]))
    assert page.status_code == 200
    assert page.context["strait_run_actions"] == []
    url = reverse("admin:django_strait_jobrun_move", args=[run.pk, "replay"])
    assert client.post(url).status_code == 403
    assert fresh(run).status == "dead_letter"


def test_run_admin__cannot_add_or_delete_runs(admin_client):
    run = make_run(status="dead_letter")
    assert admin_client.get(reverse("admin:django_strait_jobrun_add")).status_code == 403
    delete = reverse("admin:django_strait_jobrun_delete", args=[run.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert JobRun.objects.filter(pk=run.pk).exists()


# Actions


def test_replay_action__queues_the_dead_letter_by_the_admin_with_a_fresh_budget(admin_client):
    run = make_run(status="dead_letter", attempts=3, error_type="http.503")
    response = post_action(admin_client, DEAD_LETTERS, "replay_selected", [run])
    assert response.status_code == 302
    replayed = fresh(run)
    assert replayed.status == "queued"
    assert replayed.replayed_by == "admin"
    assert replayed.replay_count == 1
    assert replayed.attempt == 3
    assert replayed.attempts_before_replay == replayed.attempt
    assert replayed.attempts_left_in_budget == 0
    assert message_texts(response) == ["Replayed 1 run."]


def test_replay_action__reports_refused_runs_instead_of_failing(admin_client):
    dead = make_run(status="dead_letter")
    done = make_run(status="completed")
    queued = make_run(status="queued")
    response = post_action(admin_client, RUNS, "replay_selected", [dead, done, queued])
    assert response.status_code == 302
    [text] = message_texts(response)
    assert text.startswith("Replayed 1 run. 2 runs refused (1 completed, 1 queued): replay")
    assert (fresh(dead).status, fresh(done).status) == ("queued", "completed")


def test_cancel_action__cancels_queued_flags_executing_and_refuses_finished(admin_client):
    queued = make_run(status="queued")
    executing = make_run(status="executing")
    done = make_run(status="completed")
    response = post_action(admin_client, RUNS, "cancel_selected", [queued, executing, done])
    assert fresh(queued).status == "canceled"
    assert fresh(executing).status == "executing"
    assert fresh(executing).cancel_requested is True
    assert fresh(done).status == "completed"
    [text] = message_texts(response)
    assert "Canceled 1 run." in text
    assert "1 run executing: canceled when the current attempt returns." in text
    assert "1 run refused (1 completed)" in text


def test_discard_action__discards_dead_letters_and_refuses_completed(admin_client):
    dead = make_run(status="dead_letter")
    done = make_run(status="completed")
    response = post_action(admin_client, RUNS, "discard_selected", [dead, done])
    assert fresh(dead).status == "discarded"
    assert fresh(done).status == "completed"
    [text] = message_texts(response)
    assert text.startswith("Discarded 1 run. 1 run refused (1 completed): discard")


def test_discard_action__when_nothing_moves_the_message_is_an_error(admin_client):
    done = make_run(status="completed")
    response = post_action(admin_client, RUNS, "discard_selected", [done])
    [message] = list(get_messages(response.wsgi_request))
    assert message.level_tag == "error"


# Jobs


def test_job_list__renders(admin_client):
    make_job("nightly-report", queue="reports")
    response = admin_client.get(JOBS)
    assert response.status_code == 200
    assert "nightly-report" in response.content.decode()


def job_form(**overrides) -> dict[str, object]:
    data = {
        "name": "sync-crm", "description": "", "enabled": "on", "queue": "default",
        "priority": 0, "endpoint_url": "", "fallback_endpoint_urls": "[]", "http_method": "POST",
        "headers": "{}", "signing_secret": "", "handler": "tests.testapp.jobs.noop",
        "timeout_secs": 30, "max_attempts": "", "retry_strategy": "",
        "retry_initial_delay_secs": "", "retry_backoff_coefficient": "",
        "retry_max_delay_secs": "", "retry_delays_secs": "null", "retry_jitter": "",
        "retry_function": "", "non_retryable_errors": "[]", "on_exhaustion": "",
        "schedule": "", "timezone": "UTC", "schedule_missed": "run_once",
        "schedule_overlap": "allow", "retention_days": "", "max_concurrency": "",
        "rate_limit_max": "", "rate_limit_window_secs": "",
    }  # fmt: skip
    data.update(overrides)
    return data


def test_job_admin__adds_a_valid_job(admin_client):
    response = admin_client.post(reverse("admin:django_strait_job_add"), job_form(max_attempts=5))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Job.objects.get(name="sync-crm").max_attempts == 5


def test_job_admin__clean_errors_show_on_the_form(admin_client):
    data = job_form(endpoint_url="http://127.0.0.1:9/hook", retry_jitter="7")
    response = admin_client.post(reverse("admin:django_strait_job_add"), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "endpoint_url" in errors
    assert "handler" in errors
    assert "retry_jitter" in errors
    assert not Job.objects.filter(name="sync-crm").exists()


def test_job_admin__half_a_rate_limit_shows_on_the_form(admin_client):
    data = job_form(max_concurrency="3", rate_limit_max="5")
    response = admin_client.post(reverse("admin:django_strait_job_add"), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["rate_limit_window_secs"]


def test_job_admin__a_bad_schedule_shows_on_the_form(admin_client):
    data = job_form(schedule="every tuesday", timezone="Mars/Olympus")
    response = admin_client.post(reverse("admin:django_strait_job_add"), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "schedule" in errors and "timezone" in errors


def test_job_admin__pause_and_resume_actions(admin_client):
    job = make_job(enabled=True)
    admin_client.post(JOBS, {"action": "pause_selected", ACTION_CHECKBOX_NAME: [job.pk]})
    assert Job.objects.get(pk=job.pk).enabled is False
    admin_client.post(JOBS, {"action": "resume_selected", ACTION_CHECKBOX_NAME: [job.pk]})
    assert Job.objects.get(pk=job.pk).enabled is True


def test_job_admin__a_job_with_runs_cannot_be_deleted(admin_client):
    job = make_job()
    make_run(job)
    delete = reverse("admin:django_strait_job_delete", args=[job.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


def test_worker_list__shows_registered_workers_and_who_is_alive(admin_client):
    import datetime as dt

    from django.utils import timezone

    from django_strait.duties import registry
    from django_strait.models import WorkerProcess

    registry.register("w-alive", queues=["emails"], concurrency=8, using="default")
    registry.register("w-gone", queues=[], concurrency=4, using="default")
    WorkerProcess.objects.filter(worker_id="w-gone").update(
        last_seen_at=timezone.now() - dt.timedelta(hours=2)
    )

    page = admin_client.get("/admin/django_strait/workerprocess/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "w-alive" in text and "w-gone" in text and "emails" in text and "every queue" in text
    assert text.count('alt="True"') == 1 and text.count('alt="False"') == 1


def test_admin_home__heads_the_overview_link_apart_from_the_apps_models(admin_client):
    html = admin_client.get(reverse("admin:index")).content.decode()
    captions = [c.strip() for c in re.findall(r"<caption>(.*?)</caption>", html, re.S)]
    headings = [re.sub(r"<[^>]+>", "", c).strip() for c in captions]
    assert headings.count("Strait jobs") == 1, headings  # the app's own section
    assert "Strait overview" in headings


def test_dead_letter_job_filter__offers_only_jobs_that_have_dead_letters(admin_client):
    quiet, failing, flaky = make_job("quiet-job"), make_job("failing-job"), make_job("flaky-job")
    make_run(quiet, status="completed")
    make_run(failing, status="dead_letter", error_type="http.503")
    make_run(flaky, status="dead_letter", error_type="python.KeyError")

    response = admin_client.get(reverse("admin:django_strait_deadletter_changelist"))

    [job_filter] = [f for f in response.context["cl"].filter_specs if f.title == "job"]
    offered = [c["display"] for c in job_filter.choices(response.context["cl"])]
    assert offered == ["All", "failing-job", "flaky-job"]
