"""The REST API of workflows: trigger, list and read workflow runs, cancel; hostile input."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from rest_framework.test import APIClient

from django_strait import define_workflow, trigger_workflow
from django_strait.api.auth import issue_key
from django_strait.models import JobRun, WorkflowRun

pytestmark = pytest.mark.django_db

DIAMOND = [
    {"name": "a", "job": "wf-step"},
    {"name": "b", "job": "wf-step", "depends_on": ["a"]},
    {"name": "c", "job": "wf-step", "depends_on": ["a"]},
    {"name": "d", "job": "wf-step", "depends_on": ["b", "c"], "max_attempts": 4},
]
BASE = "/api/strait"


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()


@pytest.fixture
def diamond():
    return define_workflow("diamond", steps=DIAMOND)


def user_with(*codenames: str) -> User:
    user = User.objects.create_user("caller")
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def api() -> APIClient:
    client = APIClient()
    client.force_login(user_with("trigger_job", "view_workflowrun", "cancel_jobrun"))
    return client


def keyed(*scopes: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {issue_key('k', scopes)[1]}")
    return client


def trigger(client: APIClient, name: str, body, **headers):
    return client.post(f"{BASE}/workflows/{name}/trigger/", body, format="json", headers=headers)


def assert_error(response, status: int, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    if field is not None:
        assert field in error["details"], error
    return error


# Trigger


def test_trigger__starts_a_workflow_run_and_answers_202(api, diamond):
    response = trigger(api, "diamond", {"payload": {"order": 7}})
    assert response.status_code == 202
    wr = WorkflowRun.objects.get()
    assert response.json() == {
        "id": wr.pk, "workflow": "diamond", "status": "running", "idempotency_key": None,
        "created_at": response.json()["created_at"], "idempotency_hit": False,
    }  # fmt: skip
    assert response["Location"] == f"{BASE}/workflow-runs/{wr.pk}/"
    assert wr.payload == {"order": 7}
    assert JobRun.objects.count() == 1  # the root only


def test_trigger__a_repeated_idempotency_key_answers_200_with_the_first_run(api, diamond):
    first = trigger(api, "diamond", {"idempotency_key": "order-7"})
    again = trigger(api, "diamond", {}, **{"Idempotency-Key": "order-7"})
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["idempotency_hit"] is True
    assert WorkflowRun.objects.count() == 1


def test_trigger__an_unknown_workflow_is_a_404_naming_it(api, diamond):
    error = assert_error(trigger(api, "nope", {}), 404)
    assert error["code"] == "unknown_workflow"
    assert "'nope'" in error["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"colour": "red"}, "colour"),
        ({"delay": 5}, "delay"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": 7}, "idempotency_key"),
        ({"idempotency_key": "k" * 256}, "idempotency_key"),
        ({"payload": {"note": "a\u0000b"}}, "payload"),
        ([1, 2], "body"),
        ("text", "body"),
    ],
)
def test_trigger__a_bad_field_is_a_400_naming_it(api, diamond, body, field):
    assert_error(trigger(api, "diamond", body), 400, field)
    assert not WorkflowRun.objects.exists()


def test_trigger__header_and_body_keys_that_differ_are_a_400(api, diamond):
    response = trigger(api, "diamond", {"idempotency_key": "a"}, **{"Idempotency-Key": "b"})
    assert_error(response, 400, "idempotency_key")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"payload": "\\ud800"}',  # a lone surrogate
        b'{"payload": ' + b"[" * 2000 + b"]" * 2000 + b"}",  # past the depth limit
        b'{"payload": 1e999}',
        b'{"payload": ' + b"9" * 5000 + b"}",
        b'{"payload": NaN}',
        b"\xff\xfe",
    ],
    ids=["surrogate", "deep", "1e999", "huge-int", "nan", "not-utf8"],
)
def test_trigger__hostile_json_is_a_400_in_the_error_shape(api, diamond, raw):
    response = api.post(f"{BASE}/workflows/diamond/trigger/", raw, content_type="application/json")
    assert_error(response, 400)
    assert not WorkflowRun.objects.exists()


def test_trigger__a_nul_in_the_name_is_a_404(api, diamond):
    error = assert_error(trigger(api, "dia%00mond", {}), 404)
    assert error["message"] == "no workflow named 'dia\\x00mond'"


def test_trigger__needs_the_trigger_scope(diamond):
    assert_error(trigger(keyed("runs:read", "runs:write"), "diamond", {}), 403)
    assert trigger(keyed("jobs:trigger"), "diamond", {}).status_code == 202


def test_trigger__without_credentials_is_a_401(diamond):
    assert_error(trigger(APIClient(), "diamond", {}), 401)


def test_trigger__is_throttled_like_a_job_trigger(api, diamond, settings):
    settings.STRAIT = {"API_TRIGGER_THROTTLE_RATE": "2/minute"}
    codes = [trigger(api, "diamond", {}).status_code for _ in range(3)]
    assert codes == [202, 202, 429]


# Read


def test_read__a_workflow_run_with_its_steps(api, diamond):
    wr = trigger_workflow("diamond", {"order": 7})
    root = wr.step_runs.get(step__name="a").run
    body = api.get(f"{BASE}/workflow-runs/{wr.pk}/").json()
    assert (body["id"], body["workflow"], body["status"]) == (wr.pk, "diamond", "running")
    assert body["payload"] == {"order": 7}
    assert body["steps"][0] == {
        "step": "a", "status": "started", "job": "wf-step", "depends_on": [],
        "run_id": root.pk, "run_status": "queued", "attempt": 0, "error_type": "",
    }  # fmt: skip
    assert body["steps"][3] == {
        "step": "d", "status": "waiting", "job": "wf-step", "depends_on": ["b", "c"],
        "run_id": None, "run_status": None, "attempt": None, "error_type": "",
    }  # fmt: skip


def test_read__queries_do_not_grow_with_steps(api, django_assert_max_num_queries):
    wide = [{"name": "root", "job": "wf-step"}] + [
        {"name": f"s{i}", "job": "wf-step", "depends_on": ["root"]} for i in range(30)
    ]
    define_workflow("wide", steps=wide)
    wr = trigger_workflow("wide")
    with django_assert_max_num_queries(8):
        assert len(api.get(f"{BASE}/workflow-runs/{wr.pk}/").json()["steps"]) == 31


def test_read__an_unknown_or_huge_id_is_a_404(api):
    assert_error(api.get(f"{BASE}/workflow-runs/12345/"), 404)
    assert_error(api.get(f"{BASE}/workflow-runs/{10**30}/"), 404)
    assert_error(api.get(f"{BASE}/workflow-runs/-1/"), 404)


def test_list__newest_first_filtered_by_status_and_paged(api, diamond):
    runs = [trigger_workflow("diamond") for _ in range(3)]
    api_cancel = api.post(f"{BASE}/workflow-runs/{runs[0].pk}/cancel/")
    assert api_cancel.status_code == 200
    body = api.get(f"{BASE}/workflow-runs/", {"limit": 1}).json()
    assert [r["id"] for r in body["results"]] == [runs[2].pk]
    second = api.get(body["next"]).json()
    assert [r["id"] for r in second["results"]] == [runs[1].pk]
    canceled = api.get(f"{BASE}/workflow-runs/", {"status": "canceled"}).json()
    assert [r["id"] for r in canceled["results"]] == [runs[0].pk]
    both = api.get(f"{BASE}/workflow-runs/", {"status": "running,canceled"}).json()
    assert len(both["results"]) == 3
    assert len(api.get(f"{BASE}/workflow-runs/", {"workflow": "diamond"}).json()["results"]) == 3


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "queued"}, "status"),
        ({"status": ","}, "status"),
        ({"colour": "red"}, "colour"),
        ({"workflow": "no-such-flow"}, "workflow"),
        ({"workflow": " , "}, "workflow"),
        ({"limit": str(10**30)}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"limit": "١٠"}, "limit"),
        ({"cursor": "bm90IGEgY3Vyc29y"}, "cursor"),
        ({"status": "run\u0000ning"}, "status"),
    ],
)
def test_list__a_bad_parameter_is_a_400_naming_it(api, params, field):
    assert_error(api.get(f"{BASE}/workflow-runs/", params), 400, field)


def test_read__needs_the_read_scope(diamond):
    wr = trigger_workflow("diamond")
    assert_error(keyed("jobs:trigger").get(f"{BASE}/workflow-runs/{wr.pk}/"), 403)
    assert keyed("runs:read").get(f"{BASE}/workflow-runs/{wr.pk}/").status_code == 200
    assert keyed("runs:read").get(f"{BASE}/workflow-runs/").status_code == 200


# Cancel


def test_cancel__cancels_the_workflow_run_and_its_started_steps(api, diamond):
    wr = trigger_workflow("diamond")
    response = api.post(f"{BASE}/workflow-runs/{wr.pk}/cancel/")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "canceled"
    assert {s["step"]: s["status"] for s in body["steps"]} == dict.fromkeys("abcd", "canceled")
    assert JobRun.objects.get().status == "canceled"


def test_cancel__a_finished_workflow_run_is_a_409(api, diamond):
    wr = trigger_workflow("diamond")
    assert api.post(f"{BASE}/workflow-runs/{wr.pk}/cancel/").status_code == 200
    assert_error(api.post(f"{BASE}/workflow-runs/{wr.pk}/cancel/"), 409)


def test_cancel__needs_the_runs_write_scope(diamond):
    wr = trigger_workflow("diamond")
    assert_error(keyed("runs:read").post(f"{BASE}/workflow-runs/{wr.pk}/cancel/"), 403)
    assert keyed("runs:write").post(f"{BASE}/workflow-runs/{wr.pk}/cancel/").status_code == 200


def test_cancel__an_unknown_id_is_a_404(api):
    assert_error(api.post(f"{BASE}/workflow-runs/{2**63}/cancel/"), 404)
