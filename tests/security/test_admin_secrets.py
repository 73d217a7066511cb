"""A job's signing secret and header values are write-only: no page or answer shows them.

Finding 1 of the trust-boundaries issue: the job's change page showed
``signing_secret`` and every header value in full, to superusers and to staff
with only ``view_job``. Now the secret is a "set / replace / clear" field that
never renders the stored value, and header values are masked; a form posted
back as the browser rendered it keeps what it does not change.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.urls import reverse
from rest_framework.test import APIClient

from django_strait.api.auth import issue_key
from django_strait.models import Job

pytestmark = pytest.mark.django_db

SECRET = "whsec_9fQ2-canary-secret"
HEADERS = {"Authorization": "Bearer tok-canary-7731", "X-Tenant": "tenant-canary-0042"}
STORED = [SECRET, *HEADERS.values()]
MASK = "••••••"
JOBS = reverse("admin:django_strait_job_changelist")


@pytest.fixture
def job() -> Job:
    return Job.objects.create(
        name="hook",
        endpoint_url="https://hooks.example.invalid/x",
        signing_secret=SECRET,
        headers=HEADERS,
    )


def change_url(job: Job) -> str:
    return reverse("admin:django_strait_job_change", args=[job.pk])


def shows_nothing_stored(html: str) -> None:
    """Assert that no stored secret or header value appears in ``html``, in any escaping."""
    for value in STORED:
        for written in (value, json.dumps(value), value.replace("-", "&#45;")):
            assert written not in html, f"{value!r} is on the page"


@pytest.fixture
def viewer(client):
    """A staff user who may only view jobs."""
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(user)
    return client


class FormFields(HTMLParser):
    """What a browser posts back for the first form with ``id``: every field as rendered."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id, self.inside, self.data = form_id, False, {}
        self._textarea: str | None = None
        self._select: str | None = None
        self._first_option: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = {k: v if v is not None else "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside or not a.get("name") and tag != "option":
            return
        kind = a.get("type", "text")
        if tag == "input" and kind in ("checkbox", "radio"):
            if "checked" in a:
                self.data[a["name"]] = a.get("value", "on")
        elif tag == "input" and kind not in ("submit", "button", "file"):
            self.data[a["name"]] = a.get("value", "")
        elif tag == "textarea":
            self._textarea = a["name"]
            self.data[self._textarea] = ""
        elif tag == "select":
            self._select = a["name"]
        elif tag == "option" and self._select:
            self._first_option.setdefault(self._select, a.get("value", ""))
            if "selected" in a:
                self.data[self._select] = a.get("value", "")

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.data[self._textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "textarea" and self._textarea:
            # A browser drops the newline that starts a textarea's content.
            self.data[self._textarea] = self.data[self._textarea].removeprefix("\n")
            self._textarea = None
        elif tag == "select" and self._select:
            self.data.setdefault(self._select, self._first_option.get(self._select, ""))
            self._select = None


def post_back(client, job: Job, **changes):
    """Load the job's page, then post its form as rendered, with ``changes``."""
    page = client.get(change_url(job))
    assert page.status_code == 200
    fields = FormFields("job_form")
    fields.feed(page.content.decode())
    data = {**fields.data, **changes, "_save": "Save"}
    return client.post(change_url(job), {k: v for k, v in data.items() if v is not None})


def saved(response) -> Job:
    errors = response.context["adminform"].form.errors if response.context else None
    assert response.status_code == 302, errors
    return Job.objects.get(name="hook")


# Pages


def test_change_page__superuser_sees_no_secret_or_header_value(admin_client, job):
    html = admin_client.get(change_url(job)).content.decode()

    shows_nothing_stored(html)
    assert "Authorization" in html and "X-Tenant" in html
    assert MASK in html
    assert "A secret is set" in html


def test_change_page__view_only_staff_sees_no_secret_or_header_value(viewer, job):
    response = viewer.get(change_url(job))
    html = response.content.decode()

    assert response.status_code == 200
    assert 'name="_save"' not in html  # the read-only page
    shows_nothing_stored(html)
    assert "Authorization" in html and "X-Tenant" in html
    assert MASK in html
    assert "A secret is set" in html


def test_change_page__says_when_no_secret_is_set(admin_client, viewer, job):
    Job.objects.filter(pk=job.pk).update(signing_secret="")

    assert "No secret is set" in admin_client.get(change_url(job)).content.decode()
    assert "No secret is set" in viewer.get(change_url(job)).content.decode()


def test_job_list_and_search__show_and_match_no_secret_or_header_value(viewer, job):
    listed = viewer.get(JOBS)
    shows_nothing_stored(listed.content.decode())
    assert [j.name for j in listed.context["cl"].result_list] == ["hook"]

    # Search is no oracle for the secret: a value, or a piece of one, finds nothing.
    for probe in (SECRET, SECRET[:6], "tok-canary", "tenant-canary-0042"):
        found = viewer.get(JOBS, {"q": probe})
        assert list(found.context["cl"].result_list) == [], probe


def test_trigger_page__shows_no_secret_or_header_value(admin_client, job):
    page = admin_client.get(reverse("admin:django_strait_job_trigger", args=[job.pk]))

    assert page.status_code == 200
    shows_nothing_stored(page.content.decode())


# The secret: kept, replaced, cleared


def test_save__secret_left_empty__keeps_it(admin_client, job):
    assert saved(post_back(admin_client, job, description="edited")).signing_secret == SECRET


def test_save__a_typed_secret__replaces_it(admin_client, job):
    assert saved(post_back(admin_client, job, signing_secret="whsec_new")).signing_secret == (
        "whsec_new"
    )


def test_save__clear_box__removes_the_secret(admin_client, job):
    assert saved(post_back(admin_client, job, clear_signing_secret="on")).signing_secret == ""


def test_save__typed_secret_and_clear_box__is_an_error_on_the_field(admin_client, job):
    response = post_back(admin_client, job, signing_secret="whsec_new", clear_signing_secret="on")

    assert response.status_code == 200
    (message,) = response.context["adminform"].form.errors["signing_secret"]
    assert message == "Type a new secret or tick “Clear the secret”, not both."
    assert Job.objects.get(pk=job.pk).signing_secret == SECRET


def test_add_page__a_typed_secret__is_saved(admin_client):
    page = admin_client.get(reverse("admin:django_strait_job_add"))
    fields = FormFields("job_form")
    fields.feed(page.content.decode())
    data = {
        **fields.data, "name": "hook", "endpoint_url": "https://hooks.example.invalid/x",
        "signing_secret": SECRET, "headers": json.dumps(HEADERS), "_save": "Save",
    }  # fmt: skip

    response = admin_client.post(reverse("admin:django_strait_job_add"), data)

    job = saved(response)
    assert (job.signing_secret, job.headers) == (SECRET, HEADERS)


# Header values: masked, kept, replaced, removed


def headers_as_rendered(client, job: Job) -> dict[str, str]:
    fields = FormFields("job_form")
    fields.feed(client.get(change_url(job)).content.decode())
    return json.loads(fields.data["headers"])


def test_headers_field__renders_each_name_with_the_mask(admin_client, job):
    assert headers_as_rendered(admin_client, job) == {"Authorization": MASK, "X-Tenant": MASK}


def test_save__masked_headers_untouched__keep_their_values(admin_client, job):
    assert saved(post_back(admin_client, job, description="edited")).headers == HEADERS


def test_save__a_typed_value__replaces_only_that_header(admin_client, job):
    edited = json.dumps({"Authorization": MASK, "X-Tenant": "other"})

    assert saved(post_back(admin_client, job, headers=edited)).headers == {
        "Authorization": HEADERS["Authorization"], "X-Tenant": "other",
    }  # fmt: skip


def test_save__a_removed_line__drops_that_header_and_a_new_one_is_added(admin_client, job):
    edited = json.dumps({"X-Tenant": MASK, "X-New": "added"})

    assert saved(post_back(admin_client, job, headers=edited)).headers == {
        "X-Tenant": HEADERS["X-Tenant"], "X-New": "added",
    }  # fmt: skip


def test_save__the_mask_under_a_name_with_no_stored_value__is_an_error(admin_client, job):
    edited = json.dumps({"Authorization": MASK, "X-Renamed": MASK})

    response = post_back(admin_client, job, headers=edited)

    assert response.status_code == 200
    (message,) = response.context["adminform"].form.errors["headers"]
    assert message == (
        "header 'X-Renamed': no value is stored under this name to keep; "
        f"allowed: {MASK} only for a stored header, else type the value"
    )
    shows_nothing_stored(response.content.decode())
    assert Job.objects.get(pk=job.pk).headers == HEADERS


def test_save__form_shown_again_after_an_error__holds_no_stored_value(admin_client, job):
    response = post_back(admin_client, job, timeout_secs="not a number")

    assert response.status_code == 200
    assert "timeout_secs" in response.context["adminform"].form.errors
    shows_nothing_stored(response.content.decode())


# History: the change message names fields, never values


def test_history__names_the_changed_fields_without_their_values(admin_client, job):
    post_back(admin_client, job, description="untouched secret")
    edited = json.dumps({"Authorization": "Bearer new-canary-9", "X-Tenant": MASK})
    post_back(admin_client, job, signing_secret="whsec_new-canary-8", headers=edited)
    post_back(admin_client, job, clear_signing_secret="on")

    messages = [e.get_change_message() for e in LogEntry.objects.order_by("pk")]
    assert messages == [
        "Changed Description.",
        "Changed Headers and Signing secret.",
        "Changed Signing secret.",
    ]
    history = admin_client.get(reverse("admin:django_strait_job_history", args=[job.pk]))
    html = history.content.decode()
    for value in (*STORED, "Bearer new-canary-9", "whsec_new-canary-8"):
        assert value not in html
        assert all(value not in e.change_message for e in LogEntry.objects.all())


# The REST API: write-only on both fields


def test_api__jobs_list_and_detail__never_include_the_secret_or_header_values(job):
    cache.clear()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {issue_key('reader', ['jobs:read'])[1]}")

    for url in ("/api/strait/jobs/", "/api/strait/jobs/hook/"):
        response = client.get(url)
        assert response.status_code == 200
        body = response.content.decode()
        assert all(value not in body for value in STORED), url
        assert '"signing_secret"' not in body and '"headers"' not in body
        assert '"header_names":["Authorization","X-Tenant"]' in body.replace(" ", "")
