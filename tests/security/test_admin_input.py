"""Hostile input to the admin: each refusal a form error shown again (200) or a 4xx naming the field.

Each case here answered 500 once (issue 41, "Every door guarded"): JSON 2,000
levels deep and lone surrogates in the job form's JSON fields and in the
trigger and replay payload forms, NUL in a list's filters, an empty
``non_retryable_errors``, a selection that is no id, an empty ``_to_field``.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from django_strait.admin.inputs import GuardedInput
from django_strait.models import Job, JobRun
from tests.integration.factories import make_job, make_run
from tests.integration.test_admin import job_form

pytestmark = pytest.mark.django_db

JSON_FIELDS = ["fallback_endpoint_urls", "headers", "retry_delays_secs", "non_retryable_errors",
               "webhook_events", "webhook_retry"]  # fmt: skip
DEEP = "[" * 2000 + "]" * 2000
DEEP_OBJECT = '{"a": ' * 2000 + "1" + "}" * 2000


def form_errors(response) -> dict[str, list[str]]:
    assert response.status_code == 200, response.status_code
    form = response.context.get("adminform")
    return (form.form if form is not None else response.context["form"]).errors


@pytest.mark.parametrize("field", JSON_FIELDS)
@pytest.mark.parametrize(
    ("text", "says"),
    [(DEEP, "at most 64 levels"), (DEEP_OBJECT, "at most 64 levels"),
     ('["\\ud800"]', "lone surrogate"), ('{"a": "\\u0000"}', "NUL"), ("[1e999]", "past the range"),
     ("[" + "9" * 5000 + "]", "past the range")],
)  # fmt: skip
def test_job_form__hostile_json_in_a_json_field_is_an_error_on_that_field(
    admin_client, field, text, says
):
    response = admin_client.post(reverse("admin:django_strait_job_add"), job_form(**{field: text}))

    errors = form_errors(response)
    assert list(errors) == [field]
    assert says in errors[field][0] and "allowed" in errors[field][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize("field", JSON_FIELDS)
def test_job_form__hostile_json_on_the_change_page_keeps_the_job(admin_client, field):
    job = make_job("sync-crm", non_retryable_errors=["fatal"])
    url = reverse("admin:django_strait_job_change", args=[job.pk])

    response = admin_client.post(url, job_form(**{field: '{"\\udfff": ' + DEEP + "}"}))

    assert list(form_errors(response)) == [field]
    assert Job.objects.get(pk=job.pk).non_retryable_errors == ["fatal"]


def test_job_form__the_hidden_initial_value_read_past_the_bounds_counts_as_changed(admin_client):
    job = make_job("sync-crm", webhook_events=["run.completed"])
    url = reverse("admin:django_strait_job_change", args=[job.pk])
    data = job_form(webhook_events='["run.completed"]', **{"initial-webhook_events": DEEP})

    response = admin_client.post(url, data)

    assert response.status_code == 302


@pytest.mark.parametrize("field", ["non_retryable_errors", "fallback_endpoint_urls", "headers"])
def test_job_form__an_empty_json_field_is_its_default(admin_client, field):
    response = admin_client.post(reverse("admin:django_strait_job_add"), job_form(**{field: ""}))

    assert response.status_code == 302, form_errors(response)
    assert getattr(Job.objects.get(name="sync-crm"), field) in ([], {})


@pytest.mark.parametrize(
    ("text", "says"),
    [(DEEP, "at most 64 levels"), ('{"to": "\\ud800"}', "lone surrogate"),
     ('{"to": "\\u0000"}', "NUL"), ("9" * 5000, "past the range")],
)  # fmt: skip
def test_trigger_form__a_hostile_payload_is_an_error_on_the_payload(admin_client, text, says):
    job = make_job("mailer")

    response = admin_client.post(
        reverse("admin:django_strait_job_trigger", args=[job.pk]), {"payload": text}
    )

    errors = form_errors(response)
    assert list(errors) == ["payload"] and says in errors["payload"][0]
    assert not JobRun.objects.exists()


def test_trigger_action__a_hostile_payload_is_an_error_on_the_payload(admin_client):
    job = make_job("mailer")
    data = {"action": "trigger_now", ACTION_CHECKBOX_NAME: [job.pk], "apply": "1",
            "payload": '["\\udfff"]'}  # fmt: skip

    response = admin_client.post(reverse("admin:django_strait_job_changelist"), data)

    assert "lone surrogate" in form_errors(response)["payload"][0]
    assert not JobRun.objects.exists()


@pytest.mark.parametrize("model", ["jobrun", "deadletter"])
@pytest.mark.parametrize("text", [DEEP_OBJECT, '["\\ud800"]'])
def test_replay_form__a_hostile_payload_is_an_error_and_the_run_stays(admin_client, model, text):
    run = make_run(status="dead_letter", payload={"n": 1})
    url = reverse(f"admin:django_strait_{model}_replay_payload", args=[run.pk])

    response = admin_client.post(url, {"payload": text})

    assert list(form_errors(response)) == ["payload"]
    stored = JobRun.objects.get(pk=run.pk)
    assert (stored.status, stored.payload, stored.replay_count) == ("dead_letter", {"n": 1}, 0)


@pytest.mark.parametrize(
    ("model", "query", "name"),
    [("jobrun", "queue=%00", "queue"), ("jobrun", "status__exact=a%00", "status__exact"),
     ("jobrun", "error_type=%00", "error_type"), ("deadletter", "queue=%00", "queue"),
     ("job", "queue__exact=%00", "queue__exact"), ("job", "q=%00", "q"),
     ("workflowrun", "status__exact=%00", "status__exact"), ("webhookdelivery", "event=%00", "event"),
     ("jobrun", "_facets=%00", "_facets"), ("apikey", "x%00=1", "x\\\\u0000")],
)  # fmt: skip
def test_changelist__nul_in_the_query_string_is_a_400_naming_the_parameter(
    admin_client, model, query, name
):
    response = admin_client.get(f"{reverse(f'admin:django_strait_{model}_changelist')}?{query}")

    assert response.status_code == 400
    text = response.content.decode()
    assert f"'{name}'" in text and "NUL" in text


@pytest.mark.parametrize(
    "url",
    [lambda run: reverse("admin:django_strait_overview") + "?window=%00",
     lambda run: reverse("admin:django_strait_jobrun_change", args=[run.pk]) + "?_changelist_filters=%00",
     lambda run: reverse("admin:django_strait_jobrun_replay_payload", args=[run.pk]) + "?a=%00"],
)  # fmt: skip
def test_every_admin_page__nul_in_the_query_string_is_a_400(admin_client, url):
    run = make_run(status="dead_letter")

    assert admin_client.get(url(run)).status_code == 400


@pytest.mark.parametrize(
    ("model", "query"),
    [("deadletter", "finished_at__gte=9999-12-31T23:59:59-23:59"),
     ("jobrun", "created_at__gte=2026-01-01T00:00:00%2B16:00"),
     ("jobrun", "created_at__lt=0001-01-01T00:00:00%2B01:00")],
)  # fmt: skip
def test_date_filter__a_time_no_column_holds_is_a_400_naming_it(admin_client, model, query):
    response = admin_client.get(f"{reverse(f'admin:django_strait_{model}_changelist')}?{query}")

    assert response.status_code == 400
    assert f"'{query.split('=')[0]}'" in response.content.decode()


def test_date_filter__a_time_in_range_still_filters(admin_client):
    url = reverse("admin:django_strait_jobrun_changelist")

    response = admin_client.get(f"{url}?created_at__gte=2026-01-01T00:00:00%2B15:00")

    assert response.status_code == 200


def test_change_page__an_empty_to_field_is_a_400(admin_client):
    job = make_job()

    response = admin_client.get(
        reverse("admin:django_strait_job_change", args=[job.pk]) + "?_to_field="
    )

    assert response.status_code == 400
    assert "_to_field" in response.content.decode()


@pytest.mark.parametrize("selected", ["NaN", "1e3", "9" * 30, "-"])
def test_action__a_selection_that_is_no_id_is_a_400_naming_it(admin_client, selected):
    run = make_run(status="queued")
    data = {"action": "cancel_selected", ACTION_CHECKBOX_NAME: [run.pk, selected], "index": 0}

    response = admin_client.post(reverse("admin:django_strait_jobrun_changelist"), data)

    assert response.status_code == 400
    assert ACTION_CHECKBOX_NAME in response.content.decode()
    assert JobRun.objects.get(pk=run.pk).status == "queued"


def test_every_model_admin_of_the_app__guards_its_input():
    mine = [a for m, a in admin.site._registry.items() if m._meta.app_label == "django_strait"]

    assert mine and all(isinstance(a, GuardedInput) for a in mine)


@pytest.mark.parametrize("up_to", ["9" * 5000, "9" * 30, "-1", "1e3", ""])
def test_replay_matching__a_confirmation_id_that_is_no_run_id_replays_nothing(admin_client, up_to):
    run = make_run(status="dead_letter")
    url = reverse("admin:django_strait_deadletter_replay_matching")

    response = admin_client.post(url, {"up_to_id": up_to})

    assert response.status_code == 302
    assert JobRun.objects.get(pk=run.pk).status == "dead_letter"
