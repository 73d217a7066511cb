"""The OJS binding's pure parts: job ids, the state mapping, the envelope checks."""

from __future__ import annotations

import datetime as dt

import pytest

from django_strait.ojs import errors, inputs
from django_strait.ojs.ids import is_uuid7, uuid7
from django_strait.ojs.states import OJS_STATES, STATES, ojs_state
from django_strait.rules.states import RunStatus

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(seconds=5)


def test_uuid7__is_version_7_in_time_order():
    ids = [uuid7(now_ms=ms) for ms in (1, 2, 3)]
    assert all(u.version == 7 and is_uuid7(str(u)) for u in ids)
    assert sorted(str(u) for u in ids) == [str(u) for u in ids]


@pytest.mark.parametrize(
    "text", ["550e8400-e29b-41d4-a716-446655440000", "019461A8-1A2B-7C3D-8E4F-5A6B7C8D9E0F", "", 7]
)
def test_is_uuid7__refuses_other_versions_uppercase_and_non_strings(text):
    assert not is_uuid7(text)


def test_states__every_status_reads_as_an_ojs_state():
    assert set(STATES) | {RunStatus.QUEUED} == set(RunStatus)
    assert set(STATES.values()) <= set(OJS_STATES)


@pytest.mark.parametrize(
    ("due", "attempts", "state"),
    [
        (NOW, 0, "available"),
        (LATER, 0, "scheduled"),
        (LATER, 1, "retryable"),
        (NOW, 1, "available"),
    ],
)
def test_ojs_state__splits_queued_by_time_and_attempts(due, attempts, state):
    assert ojs_state(RunStatus.QUEUED, due=due, attempts=attempts, now=NOW) == state


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"args": []}, "type"),
        ({"type": "Email.Send", "args": []}, "type"),
        ({"type": "email.send"}, "args"),
        ({"type": "email.send", "args": {}}, "args"),
        ({"type": "email.send", "args": [], "options": {"queue": "My Queue"}}, "options.queue"),
        ({"type": "email.send", "args": [], "options": {"priority": 101}}, "options.priority"),
        ({"type": "email.send", "args": [], "id": "not-a-uuid"}, "id"),
    ],
)
def test_job_request__names_the_field_at_fault(body, field):
    with pytest.raises(errors.OjsError) as caught:
        inputs.job_request(body)
    assert caught.value.status == 400
    assert caught.value.details["field"] == field


def test_when__reads_relative_and_absolute_times():
    assert inputs.when("+PT2S", "t", NOW) == NOW + dt.timedelta(seconds=2)
    assert inputs.when("2099-12-31T23:59:59Z", "t", NOW).year == 2099
    with pytest.raises(errors.OjsError):
        inputs.when("2099-12-31T23:59:59", "t", NOW)  # no offset
