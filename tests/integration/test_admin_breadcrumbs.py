"""Strait's own admin pages write their breadcrumbs in the running Django's markup.

Django 6.1's admin writes ``<ol class="breadcrumbs">`` of ``<li>`` and styles only
that; 5.2 and 6.0 write ``<div class="breadcrumbs">``. Each custom page is held
against Django's own page of the same admin (the users list): same element, and
the trail a reader expects.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from django_strait.models import EndpointHealth
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db


def breadcrumbs(html: str) -> tuple[str, list[str]]:
    """The breadcrumbs' element (``ol`` or ``div``) and the text of each crumb."""
    nav = html.split('aria-label="Breadcrumbs"', 1)[1]
    found = re.search(r'<(ol|div) class="breadcrumbs">(.*?)</\1>', nav, re.S)
    assert found, nav[:500]
    tag, inner = found.groups()
    if tag == "ol":
        crumbs = re.findall(r"<li[^>]*>(.*?)</li>", inner, re.S)
    else:
        crumbs = inner.split("&rsaquo;")
    return tag, [re.sub(r"<[^>]+>", "", c).strip() for c in crumbs]


@pytest.fixture
def django_markup(admin_client) -> str:
    return breadcrumbs(admin_client.get("/admin/auth/user/").content.decode())[0]


def pages() -> dict[str, tuple[str, list[str]]]:
    job = make_job("billing")
    run = make_run(job, status="dead_letter", error_type="http.503")
    EndpointHealth.objects.create(endpoint_url="https://api.example.com/hook")
    return {
        "overview": (
            reverse("admin:django_strait_overview"),
            ["Home", "Strait jobs", "Strait overview"],
        ),
        "job charts": (
            reverse("admin:django_strait_job_stats", args=[job.pk]),
            ["Home", "Strait jobs", "Overview", "Job billing: the last hour"],
        ),
        "endpoint charts": (
            reverse("admin:django_strait_endpoint_stats") + "?url=https://api.example.com/hook",
            ["Home", "Strait jobs", "Overview"],
        ),
        "trigger now": (
            reverse("admin:django_strait_job_trigger", args=[job.pk]),
            ["Home", "Strait jobs", "Jobs", "Trigger now"],
        ),
        "replay all matching": (
            reverse("admin:django_strait_deadletter_replay_matching") + "?error_type=http.503",
            ["Home", "Strait jobs", "Dead letters", "Replay all matching dead letters"],
        ),
        "replay with a payload": (
            reverse("admin:django_strait_jobrun_replay_payload", args=[run.pk]),
            ["Home", "Strait jobs", "Job runs", str(run), "Replay with an edited payload"],
        ),
    }


def test_every_custom_page__writes_djangos_breadcrumb_markup_and_its_trail(
    admin_client, django_markup
):
    for name, (url, trail) in pages().items():
        response = admin_client.get(url)
        assert response.status_code == 200, (name, url)
        tag, crumbs = breadcrumbs(response.content.decode())
        assert tag == django_markup, name
        assert crumbs[: len(trail)] == trail, (name, crumbs)


def test_the_markup__is_the_list_from_django_6_1():
    import django

    from django_strait.templatetags.strait_admin import BREADCRUMBS_AS_LIST

    assert BREADCRUMBS_AS_LIST == (django.VERSION >= (6, 1))
