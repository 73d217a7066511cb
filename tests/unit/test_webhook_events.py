"""Webhook events, their body and headers, and the delivery policy: pure, no database."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from django_strait.dispatch import events
from django_strait.dispatch.signing import verify
from django_strait.rules.retry import PolicyError


def notice(**fields) -> events.Notice:
    values = {
        "event": "run.completed", "delivery_id": "d-1", "run_id": 7, "job": "send-email",
        "status": "completed", "attempt": 2, "result": {"ok": True}, "error_type": "",
        "error": "", "finished_at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    }  # fmt: skip
    return events.Notice(**{**values, **fields})


def test_body__has_exactly_the_documented_keys():
    body = json.loads(notice().body())

    assert body == {
        "event": "run.completed", "delivery_id": "d-1", "run_id": 7, "job": "send-email",
        "status": "completed", "attempt": 2, "result": {"ok": True}, "error_type": "",
        "error": "", "finished_at": "2026-01-02T03:04:05+00:00",
    }  # fmt: skip


def test_body__of_a_workflow_event_names_the_workflow():
    body = json.loads(notice(event="workflow.failed", job=None, workflow="orders").body())

    assert (body["event"], body["job"], body["workflow"]) == ("workflow.failed", None, "orders")


def test_headers__sign_the_body_in_the_dispatch_scheme():
    body = notice().body()

    headers = notice().headers(body, "s3cret", now=1_700_000_000)

    assert headers["Strait-Event"] == "run.completed" and headers["Strait-Delivery-Id"] == "d-1"
    assert verify("s3cret", body, headers["Strait-Signature"], now=1_700_000_000)
    assert not verify("other", body, headers["Strait-Signature"], now=1_700_000_000)
    assert "Strait-Signature" not in notice().headers(body, "", now=1_700_000_000)


def test_event_for_each_terminal_status():
    assert events.RUN_EVENT_FOR_STATUS == {
        "completed": "run.completed", "failed": "run.failed", "dead_letter": "run.dead_lettered",
        "discarded": "run.discarded", "canceled": "run.canceled",
    }  # fmt: skip
    assert events.all_run_events() == list(events.RUN_EVENTS)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("run.completed", "A list of events among: run.completed"),
        ([1], "A list of events"),
        (["run.completed", "nope"], "Unknown event 'nope'; allowed: run.completed"),
        (["run.failed", "run.failed"], "at most once"),
    ],
)
def test_events_problem__names_what_is_allowed(value, says):
    assert says in events.events_problem(value, events.RUN_EVENTS)


def test_events_problem__accepts_any_subset_even_none():
    assert events.events_problem([], events.RUN_EVENTS) is None
    assert events.events_problem(["run.canceled"], events.RUN_EVENTS) is None


def test_policy__defaults_to_exponential_10_attempts_capped_at_an_hour():
    policy = events.policy(None)

    assert (policy.strategy, policy.max_attempts, policy.max_delay) == ("exponential", 10, 3600)


def test_policy__a_partial_overrides_only_what_it_names():
    policy = events.policy({"max_attempts": 3, "initial_delay": "5s"})

    assert (policy.max_attempts, policy.initial_delay, policy.max_delay) == (3, 5.0, 3600)


def test_policy__an_error_names_the_webhook_retry_field():
    with pytest.raises(PolicyError, match=r"webhook_retry\.max_attempts"):
        events.policy({"max_attempts": 0})
    with pytest.raises(PolicyError, match="webhook_retry"):
        events.policy(["not", "an", "object"])
