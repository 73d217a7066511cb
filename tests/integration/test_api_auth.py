"""The REST API's API keys, scopes, throttles and body limit, and the strait_api_key command."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import re
import shlex

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from django_strait.api.auth import ScopeError, check_scopes, issue_key
from django_strait.models import ApiKey, JobRun
from tests.conftest import ROOT
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

STRAIT = {"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8", "::1/128"]}


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()


def key_client(*scopes: str, **options) -> tuple[APIClient, ApiKey]:
    row, key = issue_key("test key", scopes, **options)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client, row


def error_of(response) -> dict:
    return response.json()["error"]


# Keys


def test_issue_key__stores_only_the_sha256_and_finds_by_prefix():
    row, key = issue_key("billing", ["jobs:trigger"])
    prefix, _, secret = key.partition(".")
    assert row.prefix == prefix and len(secret) >= 40
    assert row.hashed_key == hashlib.sha256(key.encode()).hexdigest()
    assert key not in str(ApiKey.objects.values().get())


def test_check_scopes__unknown_scope_is_refused_naming_it():
    with pytest.raises(ScopeError, match=r"unknown scope 'jobs:delete'; allowed: jobs:read"):
        check_scopes(["jobs:read", "jobs:delete"])
    with pytest.raises(ScopeError, match="at least one"):
        check_scopes([])


def test_api_key__with_the_scope_is_allowed():
    client, _ = key_client("runs:read")
    run = make_run()
    response = client.get(f"/api/strait/runs/{run.pk}/")
    assert response.status_code == 200
    assert response.json()["id"] == run.pk


def test_api_key__without_the_scope_is_a_403_naming_it():
    client, _ = key_client("runs:read")
    job = make_job("nightly")
    response = client.post(f"/api/strait/jobs/{job.name}/trigger/", {}, format="json")
    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"
    assert "jobs:trigger" in error_of(response)["message"]
    assert not JobRun.objects.exists()


def test_api_key__star_allows_every_scope():
    client, _ = key_client("*")
    job = make_job("nightly")
    assert (
        client.post(f"/api/strait/jobs/{job.name}/trigger/", {}, format="json").status_code == 202
    )
    assert client.get("/api/strait/dead-letters/").status_code == 200
    assert client.post(f"/api/strait/jobs/{job.name}/pause/").status_code == 200


def test_api_key__ignores_the_creators_model_permissions():
    admin = User.objects.create_superuser("root")
    client, _ = key_client("runs:read", created_by=admin)
    response = client.get("/api/strait/jobs/")
    assert response.status_code == 403


@pytest.mark.parametrize(
    "header",
    [
        "Api-Key nothing-like-a-key",
        "Api-Key abcdefghijkl.wrong-secret",
        "Api-Key",
        "Api-Key a b",
    ],
)
def test_api_key__that_is_not_valid_is_a_401(header):
    issue_key("real", ["*"])
    response = APIClient().get("/api/strait/runs/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert error_of(response)["code"] == "authentication_failed"


def test_api_key__right_prefix_wrong_secret_is_a_401():
    row, key = issue_key("real", ["*"])
    forged = f"{row.prefix}.{'x' * 43}"
    response = APIClient().get("/api/strait/runs/", HTTP_AUTHORIZATION=f"Api-Key {forged}")
    assert response.status_code == 401


def test_api_key__revoked_is_a_401_saying_so():
    client, row = key_client("*")
    call_command("strait_api_key", "revoke", row.prefix, stdout=io.StringIO())
    response = client.get("/api/strait/runs/")
    assert response.status_code == 401
    assert error_of(response)["message"] == "this API key is revoked"


def test_api_key__expired_is_a_401_saying_so():
    client, _ = key_client("*", expires_at=timezone.now() - dt.timedelta(seconds=1))
    response = client.get("/api/strait/runs/")
    assert response.status_code == 401
    assert error_of(response)["message"] == "this API key is expired"


def test_api_key__last_used_at_is_written_at_most_once_a_minute():
    client, row = key_client("runs:read")
    client.get("/api/strait/runs/")
    first = ApiKey.objects.get().last_used_at
    assert first is not None
    client.get("/api/strait/runs/")
    assert ApiKey.objects.get().last_used_at == first
    ApiKey.objects.update(last_used_at=first - dt.timedelta(minutes=2))
    client.get("/api/strait/runs/")
    assert ApiKey.objects.get().last_used_at > first


def test_api_key__replays_are_recorded_under_the_keys_name():
    client, _ = key_client("dlq:replay")
    run = make_run(status="dead_letter")
    assert client.post(f"/api/strait/dead-letters/{run.pk}/replay/").status_code == 200
    assert JobRun.objects.get().replayed_by == "api-key:test key"


def test_no_credentials__is_a_401_on_every_endpoint():
    for path in ["jobs/", "runs/", "dead-letters/", "jobs/x/", "runs/1/"]:
        response = APIClient().get(f"/api/strait/{path}")
        assert response.status_code == 401, path
        assert error_of(response)["code"] == "not_authenticated"


# Django permissions for users


def test_user_permissions__head_needs_the_get_permission():
    user = User.objects.create_user("nobody")
    client = APIClient()
    client.force_login(user)
    assert client.head("/api/strait/runs/").status_code == 403


# Throttles


@override_settings(STRAIT={**STRAIT, "API_THROTTLE_RATE": "3/minute"})
def test_throttle__over_the_global_rate_is_a_429_with_retry_after():
    client, _ = key_client("runs:read")
    codes = [client.get("/api/strait/runs/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    response = client.get("/api/strait/runs/")
    assert error_of(response)["code"] == "throttled"
    assert 1 <= int(response["Retry-After"]) <= 60


@override_settings(STRAIT={**STRAIT, "API_THROTTLE_RATE": "3/minute"})
def test_throttle__counts_each_client_apart():
    first, _ = key_client("runs:read")
    second, _ = key_client("runs:read")
    for _ in range(3):
        first.get("/api/strait/runs/")
    assert first.get("/api/strait/runs/").status_code == 429
    assert second.get("/api/strait/runs/").status_code == 200


@override_settings(STRAIT={**STRAIT, "API_TRIGGER_THROTTLE_RATE": "2/minute"})
def test_throttle__trigger_has_its_own_stricter_rate():
    client, _ = key_client("jobs:trigger", "runs:read")
    job = make_job("nightly")
    url = f"/api/strait/jobs/{job.name}/trigger/"
    codes = [client.post(url, {}, format="json").status_code for _ in range(3)]
    assert codes == [202, 202, 429]
    assert JobRun.objects.count() == 2
    assert client.get("/api/strait/runs/").status_code == 200  # other endpoints still answer


@override_settings(STRAIT={**STRAIT, "API_THROTTLE_RATE": None, "API_TRIGGER_THROTTLE_RATE": None})
def test_throttle__none_turns_it_off():
    client, _ = key_client("runs:read")
    assert {client.get("/api/strait/runs/").status_code for _ in range(30)} == {200}


# Body size


@override_settings(STRAIT={**STRAIT, "API_MAX_PAYLOAD_BYTES": 100})
def test_body_over_the_limit__is_a_413_naming_the_setting():
    client, _ = key_client("jobs:trigger")
    job = make_job("nightly")
    response = client.post(
        f"/api/strait/jobs/{job.name}/trigger/", {"payload": "x" * 200}, format="json"
    )
    assert response.status_code == 413
    assert error_of(response)["code"] == "payload_too_large"
    assert "API_MAX_PAYLOAD_BYTES" in error_of(response)["message"]
    assert not JobRun.objects.exists()


@override_settings(STRAIT={**STRAIT, "API_MAX_PAYLOAD_BYTES": 100})
def test_body_over_the_limit__without_content_length_is_a_413():
    from django_strait.api.errors import PayloadTooLarge
    from django_strait.api.parsers import LimitedJSONParser

    with pytest.raises(PayloadTooLarge):
        LimitedJSONParser().parse(io.BytesIO(b'{"payload": "' + b"x" * 200 + b'"}'))
    assert LimitedJSONParser().parse(io.BytesIO(b'{"payload": 1}')) == {"payload": 1}


# The command


def test_command__create_prints_the_key_once_and_it_works():
    out = io.StringIO()
    call_command("strait_api_key", "create", "ci", "--scope", "runs:read", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    row = ApiKey.objects.get()
    assert (row.name, row.scopes, row.expires_at) == ("ci", ["runs:read"], None)
    response = APIClient().get("/api/strait/runs/", HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert response.status_code == 200


def test_command__create_with_expiry_and_several_scopes():
    call_command(
        "strait_api_key", "create", "ops", "--scope", "dlq:read", "--scope", "dlq:replay",
        "--expires-in", "30d", stdout=io.StringIO(),
    )  # fmt: skip
    row = ApiKey.objects.get()
    assert row.scopes == ["dlq:read", "dlq:replay"]
    assert row.expires_at > timezone.now() + dt.timedelta(days=29)


def test_command__create_limits_a_key_to_queues():
    out = io.StringIO()
    call_command(
        "strait_api_key", "create", "billing", "--scope", "runs:write", "--queue", "billing",
        "--queue", "billing-slow", "--queue", "billing", stdout=out,
    )  # fmt: skip
    assert ApiKey.objects.get().queues == ["billing", "billing-slow"]
    assert "on billing, billing-slow." in out.getvalue()
    listed = io.StringIO()
    call_command("strait_api_key", "list", stdout=listed)
    assert "queues: billing, billing-slow" in listed.getvalue()


@pytest.mark.parametrize("name", ["", "q" * 101, "tab\there", "nul\x00"])
def test_command__a_queue_name_that_is_none_is_refused_naming_what_is_allowed(name):
    with pytest.raises(CommandError, match="allowed: printable text of 1 to 100 characters"):
        call_command("strait_api_key", "create", "x", "--scope", "runs:read", "--queue", name)
    assert not ApiKey.objects.exists()


def test_issue_key__refuses_more_than_100_queues():
    with pytest.raises(ScopeError, match="101 queues; a key may be limited to at most 100"):
        issue_key("x", ["runs:read"], queues=[f"q{i}" for i in range(101)])


def test_command__unknown_scope_is_refused_naming_the_allowed_ones():
    with pytest.raises(CommandError, match="'jobs:delete' is not a scope; allowed: jobs:read"):
        call_command("strait_api_key", "create", "x", "--scope", "jobs:delete")
    assert not ApiKey.objects.exists()


def test_command__list_shows_state_without_the_key():
    _, key = issue_key("ci", ["*"])
    revoked, _ = issue_key("old", ["runs:read"])
    call_command("strait_api_key", "revoke", revoked.prefix, stdout=io.StringIO())
    out = io.StringIO()
    call_command("strait_api_key", "list", stdout=out)
    text = out.getvalue()
    assert "ci  [*]  all queues  active  last used: never" in text
    assert "old  [runs:read]  all queues  revoked" in text
    assert key not in text


def test_issue_key__prefixes_are_letters_and_digits_so_commands_can_take_them():
    import re

    prefixes = [issue_key(f"k{i}", ["runs:read"])[0].prefix for i in range(200)]

    assert all(re.fullmatch(r"[A-Za-z0-9]+", p) for p in prefixes)


def test_command__revoke_unknown_prefix_is_an_error():
    with pytest.raises(CommandError, match="no API key has the prefix 'nope'"):
        call_command("strait_api_key", "revoke", "nope")


# The admin


def test_admin__creating_a_key_shows_it_once_and_stores_its_hash(client):
    client.force_login(User.objects.create_superuser("root"))
    response = client.post(
        "/admin/django_strait/apikey/add/",
        {"name": "from admin", "scopes": ["runs:read", "dlq:read"], "expires_at": ""},
        follow=True,
    )
    assert response.status_code == 200
    row = ApiKey.objects.get()
    shown = [str(m) for m in response.context["messages"] if "shown once" in str(m)]
    key = shown[0].rsplit(" ", 1)[-1]
    assert row.hashed_key == hashlib.sha256(key.encode()).hexdigest()
    assert row.created_by.username == "root"
    assert (
        APIClient().get("/api/strait/runs/", HTTP_AUTHORIZATION=f"Api-Key {key}").status_code == 200
    )


def test_admin__a_key_limited_to_queues_one_per_line(client):
    client.force_login(User.objects.create_superuser("root"))
    response = client.post(
        "/admin/django_strait/apikey/add/",
        {"name": "billing", "scopes": ["runs:write"], "queues": "billing\r\n\r\n email \n"},
    )
    assert response.status_code == 302
    assert ApiKey.objects.get().queues == ["billing", "email"]
    listed = client.get("/admin/django_strait/apikey/").content.decode()
    assert "billing, email" in listed


@pytest.mark.parametrize("queues", ["q" * 101, "bell\x07", "\n".join(f"q{i}" for i in range(101))])
def test_admin__queues_past_their_bounds_are_a_form_error(client, queues):
    client.force_login(User.objects.create_superuser("root"))
    response = client.post(
        "/admin/django_strait/apikey/add/", {"name": "x", "scopes": ["runs:read"], "queues": queues}
    )
    assert response.status_code == 200
    assert "queues" in response.context["adminform"].form.errors
    assert not ApiKey.objects.exists()


def test_admin__unknown_scope_is_a_form_error(client):
    client.force_login(User.objects.create_superuser("root"))
    response = client.post(
        "/admin/django_strait/apikey/add/", {"name": "x", "scopes": ["jobs:delete"]}
    )
    assert response.status_code == 200
    assert "jobs:delete is not one of the available choices" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_admin__revoke_action_revokes(client):
    client.force_login(User.objects.create_superuser("root"))
    row, _ = issue_key("ci", ["*"])
    client.post(
        "/admin/django_strait/apikey/",
        {"action": "revoke_selected", "_selected_action": [row.pk]},
    )
    assert ApiKey.objects.get().revoked_at is not None


def test_user_without_permission__gets_403_naming_it():
    user = User.objects.create_user("viewer")
    user.user_permissions.add(Permission.objects.get(codename="view_jobrun"))
    client = APIClient()
    client.force_login(user)
    assert client.get("/api/strait/runs/").status_code == 200
    response = client.get("/api/strait/dead-letters/")
    assert response.status_code == 403
    assert "django_strait.view_deadletter" in error_of(response)["message"]


def test_readme__the_key_it_creates_triggers_a_job_and_reads_the_run_back():
    # The README's tour: create a key with its command line, trigger over HTTP, then
    # read the run back with the same key (GET runs/<id>/ needs runs:read).
    readme = (ROOT / "README.md").read_text()
    line = re.search(r"`python manage\.py (strait_api_key create [^`]+)`", readme).group(1)
    out = io.StringIO()
    call_command(*shlex.split(line), stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    job = make_job("send-welcome-email")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")

    answer = client.post(
        f"/api/strait/jobs/{job.name}/trigger/", {"payload": {"user_id": 42}}, format="json"
    )
    assert answer.status_code == 202, answer.content
    read = client.get(f"/api/strait/runs/{answer.json()['id']}/")
    assert read.status_code == 200, read.content
