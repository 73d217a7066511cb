"""The admin's operating pages: trigger now, job stats, dead-letter replays, the overview, permissions."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_strait.admin import charts
from django_strait.admin.jobs import read_job_stats
from django_strait.admin.overview import read_overview
from django_strait.duties import registry
from django_strait.models import Job, JobRun, RunRollup, WorkerProcess
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:django_strait_job_changelist")
RUNS = reverse("admin:django_strait_jobrun_changelist")
DEAD_LETTERS = reverse("admin:django_strait_deadletter_changelist")
REPLAY_MATCHING = reverse("admin:django_strait_deadletter_replay_matching")
OVERVIEW = reverse("admin:django_strait_overview")


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def rollup(
    job: Job, status: str, count: int, minutes_ago: int = 0, now: dt.datetime | None = None
) -> RunRollup:
    """A rollup row ``minutes_ago`` minutes before ``now``; pass one ``now`` to rows that
    must not share a minute, or a minute boundary between two calls can put them in one."""
    now = now or timezone.now()
    minute = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=minutes_ago)
    return RunRollup.objects.create(minute=minute, job=job, status=status, count=count)


def trigger_action(client, jobs: list[Job], **form):
    data = {"action": "trigger_now", ACTION_CHECKBOX_NAME: [j.pk for j in jobs], "index": 0}
    return client.post(JOBS, {**data, **form})


# Jobs: stats from the rollups


def test_job_stats__success_rate_counts_finished_runs_not_retries():
    job = make_job()
    rollup(job, "completed", 8, minutes_ago=30)
    rollup(job, "dead_letter", 2, minutes_ago=20)
    rollup(job, "queued", 5, minutes_ago=20)  # retries: attempts, not finished runs
    rollup(job, "completed", 100, minutes_ago=25 * 60)  # outside the 24 h window
    stats = read_job_stats([job.pk], timezone.now())[job.pk]
    assert (stats.finished, stats.succeeded, stats.success_rate) == (10, 8, 0.8)
    # Two outcomes in the newest minute: the finished run is the one shown, not the retry.
    assert stats.last_status == "dead_letter"


def test_job_stats__last_outcome_of_runs_that_retried_then_completed_is_completed():
    job = make_job()
    rollup(job, "queued", 4, minutes_ago=3)
    rollup(job, "completed", 4, minutes_ago=3)  # each retried once, then completed
    rollup(job, "completed", 2, minutes_ago=1)
    assert read_job_stats([job.pk], timezone.now())[job.pk].last_status == "completed"
    rollup(job, "queued", 1, minutes_ago=0)  # a later attempt failed: now it is retrying
    assert read_job_stats([job.pk], timezone.now())[job.pk].last_status == "queued"


def test_job_list__shows_last_outcome_and_success_rate(admin_client):
    busy = make_job("busy-job")
    make_job("idle-job")
    rollup(busy, "completed", 3, minutes_ago=5)
    rollup(busy, "failed", 1, minutes_ago=1)
    response = admin_client.get(JOBS)
    rows = {job.name: job.strait_stats for job in response.context["cl"].result_list}
    assert rows["busy-job"].last_status == "failed"
    assert rows["idle-job"].success_rate is None
    body = response.content.decode()
    assert "75.0% of 4" in body


def test_job_list__query_count_does_not_grow_with_jobs(admin_client):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(JOBS).status_code == 200
        return len(captured)

    rollup(make_job(), "completed", 1)
    few = queries()
    for _ in range(10):
        rollup(make_job(), "completed", 1)
    assert queries() == few


# Jobs: trigger now


def test_trigger_action__shows_a_payload_form_first(admin_client):
    job = make_job("mailer")
    response = trigger_action(admin_client, [job])
    assert response.status_code == 200
    assert response.templates[0].name == "admin/django_strait/trigger_form.html"
    assert not JobRun.objects.exists()


def test_trigger_action__queues_one_run_per_job_with_the_payload(admin_client):
    jobs = [make_job("a-job"), make_job("b-job")]
    response = trigger_action(admin_client, jobs, apply="1", payload='{"order": 42}')
    assert response.status_code == 302
    runs = JobRun.objects.order_by("job__name")
    assert [(r.job.name, r.payload, r.status) for r in runs] == [
        ("a-job", {"order": 42}, "queued"),
        ("b-job", {"order": 42}, "queued"),
    ]
    a, b = runs
    assert messages_of(response)[0] == (
        f'Queued <a href="/admin/django_strait/jobrun/{a.pk}/change/">run {a.pk} of a-job</a>, '
        f'<a href="/admin/django_strait/jobrun/{b.pk}/change/">run {b.pk} of b-job</a>.'
    )


def test_trigger_action__bad_json_shows_on_the_form(admin_client):
    job = make_job()
    response = trigger_action(admin_client, [job], apply="1", payload='{"order": ')
    assert response.status_code == 200
    [error] = response.context["form"].errors["payload"]
    assert error.startswith("Not valid JSON: Expecting value at line 1")
    assert not JobRun.objects.exists()


def test_trigger_action__trigger_error_shows_on_its_field_and_nothing_is_queued(admin_client):
    jobs = [make_job(), make_job()]
    response = trigger_action(admin_client, jobs, apply="1", payload="{}", priority="500")
    assert response.status_code == 200
    assert "priority" in response.context["form"].errors
    response = trigger_action(admin_client, jobs, apply="1", payload="{}", delay="soon")
    assert response.status_code == 200
    assert "delay" in response.context["form"].errors
    assert not JobRun.objects.exists()


def test_trigger_action__payload_with_a_nul_character_is_a_form_error(admin_client):
    job = make_job()
    response = trigger_action(admin_client, [job], apply="1", payload='{"x": "a\\u0000b"}')
    assert response.status_code == 200
    assert response.context["form"].errors
    assert not JobRun.objects.exists()


def test_trigger_page__of_one_job_queues_a_run_with_the_idempotency_key(admin_client):
    job = make_job()
    url = reverse("admin:django_strait_job_trigger", args=[job.pk])
    assert admin_client.get(url).status_code == 200
    for _ in range(2):
        response = admin_client.post(url, {"payload": "[1, 2]", "idempotency_key": "k-1"})
        assert response.status_code == 302
    [run] = JobRun.objects.all()
    assert (run.payload, run.idempotency_key) == ([1, 2], "k-1")


def test_job_page__shows_trigger_now_only_with_the_permission(client):
    job = make_job()
    page = reverse("admin:django_strait_job_change", args=[job.pk])
    trigger_url = reverse("admin:django_strait_job_trigger", args=[job.pk])
    client.force_login(staff("editor", "view_job", "change_job"))
    assert trigger_url not in client.get(page).content.decode()
    client.force_login(staff("trigger", "view_job", "change_job", "trigger_job"))
    assert trigger_url in client.get(page).content.decode()


def test_trigger__forged_posts_without_the_permission_get_403_or_nothing(client):
    job = make_job()
    client.force_login(staff("editor", "view_job", "change_job"))
    url = reverse("admin:django_strait_job_trigger", args=[job.pk])
    assert client.post(url, {"payload": "{}"}).status_code == 403
    listing = client.get(JOBS)
    assert "trigger_now" not in listing.content.decode()
    # An action the user may not run is refused by the admin itself.
    trigger_action(client, [job], apply="1", payload="{}")
    assert not JobRun.objects.exists()


# Runs: date filter and replay with an edited payload


def test_run_list__filters_by_creation_date(admin_client):
    today = make_run()
    old = make_run()
    JobRun.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(days=40))
    # The filter's own "past 7 days" link gives an aware midnight.
    midnight = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    since = str(midnight - dt.timedelta(days=7))
    response = admin_client.get(RUNS, {"created_at__gte": since})
    assert {r.pk for r in response.context["cl"].result_list} == {today.pk}


def test_replay_with_payload__replays_with_the_new_payload_and_records_who(admin_client):
    run = make_run(status="dead_letter", payload={"amount": 10})
    url = reverse("admin:django_strait_jobrun_replay_payload", args=[run.pk])
    form = admin_client.get(url)
    assert json.loads(form.context["form"].initial["payload"]) == {"amount": 10}
    response = admin_client.post(url, {"payload": '{"amount": 11}'})
    assert response.status_code == 302
    replayed = JobRun.objects.get(pk=run.pk)
    assert (replayed.status, replayed.payload) == ("queued", {"amount": 11})
    assert replayed.replayed_by == "admin" and replayed.replayed_at is not None


def test_replay_with_payload__bad_json_and_wrong_status_show_on_the_form(admin_client):
    dead = make_run(status="dead_letter", payload={"a": 1})
    url = reverse("admin:django_strait_jobrun_replay_payload", args=[dead.pk])
    response = admin_client.post(url, {"payload": "{nope"})
    assert response.status_code == 200 and "payload" in response.context["form"].errors
    done = make_run(status="completed")
    url = reverse("admin:django_strait_jobrun_replay_payload", args=[done.pk])
    response = admin_client.post(url, {"payload": "{}"})
    assert response.status_code == 200
    [error] = response.context["form"].non_field_errors()
    assert "completed" in error
    assert JobRun.objects.get(pk=dead.pk).payload == {"a": 1}


# Dead letters: summary, replay all matching


def test_dead_letter_list__summarises_by_job_and_error_type(admin_client):
    billing = make_job("billing")
    for _ in range(3):
        make_run(billing, status="dead_letter", error_type="http.503")
    make_run(billing, status="dead_letter", error_type="http.404")
    make_run(make_job("mail"), status="dead_letter", error_type="python.KeyError")
    make_run(billing, status="failed", error_type="http.503")
    response = admin_client.get(DEAD_LETTERS)
    groups = [(g.job, g.error_type, g.count) for g in response.context["strait_groups"]]
    assert groups == [
        ("billing", "http.503", 3),
        ("billing", "http.404", 1),
        ("mail", "python.KeyError", 1),
    ]
    assert response.context["strait_group_count"] == 3


def test_replay_matching__confirmation_says_how_many_match_the_filter(admin_client):
    billing = make_job("billing")
    for _ in range(3):
        make_run(billing, status="dead_letter", error_type="http.503")
    make_run(billing, status="dead_letter", error_type="python.KeyError")
    listing = admin_client.get(DEAD_LETTERS, {"error_type": "http.*"})
    url = listing.context["strait_replay_matching_url"]
    assert url == f"{REPLAY_MATCHING}?error_type=http.%2A"
    page = admin_client.get(url)
    assert page.status_code == 200 and page.context["count"] == 3
    assert "Replay <strong>3</strong> dead letters?" in page.content.decode()
    assert set(JobRun.objects.values_list("status", flat=True)) == {"dead_letter"}


def test_replay_matching__replays_only_the_matching_ones_confirmed(admin_client):
    billing = make_job("billing")
    matching = [make_run(billing, status="dead_letter", error_type="http.503") for _ in range(3)]
    other = make_run(billing, status="dead_letter", error_type="python.KeyError")
    url = f"{REPLAY_MATCHING}?error_type=http.503"
    up_to = admin_client.get(url).context["up_to_id"]
    # Dead-lettered after the confirmation page: not part of what was confirmed.
    late = make_run(billing, status="dead_letter", error_type="http.503")
    response = admin_client.post(url, {"up_to_id": up_to})
    assert response.status_code == 302
    assert response["Location"] == f"{DEAD_LETTERS}?error_type=http.503"
    status = dict(JobRun.objects.values_list("pk", "status"))
    assert [status[r.pk] for r in matching] == ["queued"] * 3
    assert (status[other.pk], status[late.pk]) == ("dead_letter", "dead_letter")
    assert set(JobRun.objects.filter(status="queued").values_list("replayed_by", flat=True)) == {
        "admin"
    }
    assert messages_of(response) == ["Replayed 3 runs."]


def test_replay_matching__in_batches_across_more_than_one_batch(admin_client):
    job = make_job()
    JobRun.objects.bulk_create(
        JobRun(job=job, status="dead_letter", error_type="http.500", finished_at=timezone.now())
        for _ in range(1203)
    )
    page = admin_client.get(REPLAY_MATCHING)
    assert page.context["count"] == 1203
    admin_client.post(REPLAY_MATCHING, {"up_to_id": page.context["up_to_id"]})
    assert JobRun.objects.filter(status="queued", replay_count=1).count() == 1203


def test_replay_matching__post_without_confirmation_replays_nothing(admin_client):
    run = make_run(status="dead_letter")
    response = admin_client.post(REPLAY_MATCHING, {})
    assert response.status_code == 302
    assert JobRun.objects.get(pk=run.pk).status == "dead_letter"


def test_replay_matching__bad_filter_is_a_message_not_a_500(admin_client):
    make_run(status="dead_letter")
    response = admin_client.get(REPLAY_MATCHING, {"error_type": "http*"})
    assert response.status_code == 302
    assert messages_of(response)[0].startswith("Those filters are not valid")


# Permissions: viewing is not acting


VIEWER_PERMS = ("view_jobrun", "view_deadletter", "change_jobrun", "change_deadletter")


def test_dead_letters__viewer_without_action_permissions_sees_no_actions_or_buttons(client):
    run = make_run(status="dead_letter")
    client.force_login(staff("viewer", *VIEWER_PERMS))
    listing = client.get(DEAD_LETTERS)
    assert listing.status_code == 200
    body = listing.content.decode()
    assert "replay_selected" not in body and "discard_selected" not in body
    assert "strait-replay-matching" not in body
    page = client.get(reverse("admin:django_strait_deadletter_change", args=[run.pk]))
    assert page.context["strait_run_actions"] == []


@pytest.mark.parametrize(
    ("name", "args", "data"),
    [
        ("django_strait_deadletter_replay_matching", [], {"up_to_id": "999999"}),
        ("django_strait_jobrun_replay_payload", ["RUN"], {"payload": "{}"}),
        ("django_strait_jobrun_move", ["RUN", "replay"], {}),
        ("django_strait_jobrun_move", ["RUN", "discard"], {}),
        ("django_strait_deadletter_move", ["RUN", "replay"], {}),
    ],
)
def test_forged_post__without_the_action_permission_is_403(client, name, args, data):
    run = make_run(status="dead_letter")
    client.force_login(staff("viewer", *VIEWER_PERMS))
    url = reverse(f"admin:{name}", args=[run.pk if a == "RUN" else a for a in args])
    assert client.post(url, data).status_code == 403
    assert JobRun.objects.get(pk=run.pk).status == "dead_letter"


def test_forged_action_post__without_the_permission_moves_nothing(client):
    run = make_run(status="dead_letter")
    client.force_login(staff("viewer", *VIEWER_PERMS))
    for action in ("replay_selected", "discard_selected"):
        client.post(DEAD_LETTERS, {"action": action, ACTION_CHECKBOX_NAME: [run.pk], "index": 0})
    client.post(RUNS, {"action": "cancel_selected", ACTION_CHECKBOX_NAME: [run.pk], "index": 0})
    assert JobRun.objects.get(pk=run.pk).status == "dead_letter"


def test_each_permission__unlocks_only_its_own_action(client):
    run = make_run(status="dead_letter")
    client.force_login(staff("discarder", *VIEWER_PERMS, "discard_jobrun"))
    page = client.get(reverse("admin:django_strait_deadletter_change", args=[run.pk]))
    assert [b["label"] for b in page.context["strait_run_actions"]] == ["Discard"]
    replay = reverse("admin:django_strait_jobrun_move", args=[run.pk, "replay"])
    assert client.post(replay).status_code == 403
    discard = reverse("admin:django_strait_jobrun_move", args=[run.pk, "discard"])
    assert client.post(discard).status_code == 302
    assert JobRun.objects.get(pk=run.pk).status == "discarded"


def test_replayer__can_replay_all_matching(client):
    run = make_run(status="dead_letter")
    client.force_login(staff("replayer", *VIEWER_PERMS, "replay_jobrun"))
    assert "strait-replay-matching" in client.get(DEAD_LETTERS).content.decode()
    up_to = client.get(REPLAY_MATCHING).context["up_to_id"]
    client.post(REPLAY_MATCHING, {"up_to_id": up_to})
    assert JobRun.objects.get(pk=run.pk).replayed_by == "replayer"


# The overview


def test_overview__shows_throughput_queues_dead_letters_and_workers(admin_client):
    job = make_job("billing", queue="money")
    rollup(job, "completed", 7, minutes_ago=2)
    rollup(job, "dead_letter", 2, minutes_ago=2)
    rollup(job, "completed", 99, minutes_ago=90)  # outside the hour
    make_run(job, status="queued", available_at=timezone.now() - dt.timedelta(seconds=120))
    make_run(job, status="queued", available_at=timezone.now() + dt.timedelta(hours=1))
    make_run(job, status="dead_letter")
    registry.register("w-overview", queues=["money"], concurrency=4, using="default")

    response = admin_client.get(OVERVIEW)

    assert response.status_code == 200
    data = response.context["overview"]
    assert data.finished_in_window == 9
    assert len(data.throughput) == 60
    assert data.outcomes == ("completed", "dead_letter")
    [money] = [q for q in data.queues if q.queue == "money"]
    assert (money.depth, money.due) == (2, 1)
    assert money.lag_seconds >= 120
    assert data.dead_letters == (("billing", 1),)
    assert [w.worker_id for w in data.workers] == ["w-overview"]
    body = response.content.decode()
    assert body.count('class="strait-chart"') == 4
    assert "billing" in body and "w-overview" in body
    # No endpoint has answered and no project exists yet: the sections say so.
    assert "No endpoint has answered a run yet." in body and "No project has a budget." in body


def test_overview__stale_workers_are_not_alive():
    registry.register("w-stale", queues=[], concurrency=1, using="default")
    WorkerProcess.objects.update(last_seen_at=timezone.now() - dt.timedelta(hours=3))
    assert read_overview().workers_alive == 0


def test_overview__query_count_does_not_grow_with_runs(admin_client):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(OVERVIEW).status_code == 200
        return len(captured)

    job = make_job()
    now = timezone.now()
    make_run(job, status="dead_letter")
    rollup(job, "completed", 1, now=now)
    few = queries()
    for minutes_ago in range(1, 30):
        make_run(job, status="dead_letter")
        make_run(job, status="queued")
        rollup(job, "completed", 1, minutes_ago=minutes_ago, now=now)
    assert queries() == few


def test_overview__needs_the_view_permission(client):
    client.force_login(staff("nobody"))
    assert client.get(OVERVIEW).status_code == 403
    client.force_login(staff("viewer", "view_jobrun"))
    assert client.get(OVERVIEW).status_code == 200


def test_app_page__links_to_the_overview(admin_client):
    app = reverse("admin:app_list", args=["django_strait"])
    assert OVERVIEW in admin_client.get(app).content.decode()


def test_admin_index__links_to_the_overview_when_strait_is_listed_before_the_admin(
    admin_client, settings
):
    # App templates are searched in INSTALLED_APPS order: the index's link needs
    # django_strait before django.contrib.admin (docs/admin.md says so).
    apps = [a for a in settings.INSTALLED_APPS if a != "django_strait"]
    settings.INSTALLED_APPS = ["django_strait", *apps]
    assert OVERVIEW in admin_client.get(reverse("admin:index")).content.decode()


# Charts


def test_charts__labels_are_escaped():
    bars = charts.horizontal_bars([("<script>x</script>", 3)])
    assert "<script>" not in bars and "&lt;script&gt;" in bars
    stacked = charts.stacked_bars([charts.Column("<b>", {"completed": 2})], ["completed"])
    assert "<b>" not in stacked and "&lt;b&gt;" in stacked


def test_charts__bar_heights_are_proportional_to_counts():
    columns = [charts.Column("a", {"completed": 4}), charts.Column("b", {"completed": 2})]
    svg = str(charts.stacked_bars(columns, ["completed"], width=100, height=100))
    assert 'height="100.0"' in svg and 'height="50.0"' in svg


def test_charts__empty_data_says_so():
    assert "Nothing finished" in charts.stacked_bars([charts.Column("a", {})], ["completed"])
    assert "None." in charts.horizontal_bars([])
