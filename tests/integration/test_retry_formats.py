"""OJS and Zizq policies and the presets are accepted wherever a policy is (docs/retry.md)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.test import override_settings
from rest_framework.test import APIClient

from django_strait.conf import strait_settings
from django_strait.models import JobRun
from django_strait.rules.retry import resolve
from django_strait.services import registry
from django_strait.services.triggering import TriggerError, trigger
from tests.integration.factories import make_job

pytestmark = pytest.mark.django_db

OJS = {"max_attempts": 0, "initial_interval": "PT1S", "max_interval": "PT5M", "jitter": True}
ZIZQ = {"retry_limit": 4, "backoff_base": 2000, "backoff_exponent": 3, "backoff_jitter": 500}


def test_trigger__stores_an_ojs_policy_in_strait_fields():
    job = make_job("ojs-job")
    run = trigger(job.name, {}, retry=OJS)
    assert run.retry_overrides == {
        "max_attempts": 1,
        "initial_delay": 1.0,
        "max_delay": 300.0,
        "jitter": 0.5,
    }
    policy = resolve(job, None, run.retry_overrides, defaults=strait_settings.DEFAULT_RETRY)
    assert (policy.max_attempts, policy.jitter) == (1, 0.5)


def test_trigger__accepts_a_zizq_policy_and_a_preset():
    job = make_job("zizq-job")
    run = trigger(job.name, {}, retry=ZIZQ)
    policy = resolve(job, None, run.retry_overrides, defaults=strait_settings.DEFAULT_RETRY)
    assert (policy.strategy, policy.max_attempts, policy.initial_delay) == ("zizq", 5, 2.0)
    assert (policy.jitter_window, policy.min_delay) == (0.5, 2.0)
    run = trigger(job.name, {}, retry={"preset": "zzz"})
    assert run.retry_overrides["initial_delay"] == 15.0


def test_trigger__mixing_formats_is_a_trigger_error_naming_both_keys():
    job = make_job("mixed-job")
    with pytest.raises(TriggerError) as info:
        trigger(job.name, {}, retry={"initial_delay": 1, "initial_interval": "PT1S"})
    assert "'initial_delay'" in str(info.value) and "'initial_interval'" in str(info.value)
    assert not JobRun.objects.exists()


def test_job_decorator__keeps_a_zizq_preset_in_the_jobs_columns():
    spec = registry.spec_of(
        lambda payload: None, name="zizq-decorated", queue=None, priority=None,
        max_attempts=None, retry={"preset": "zizq"}, timeout=None, description=None,
    )  # fmt: skip
    assert spec.columns["retry_strategy"] == "zizq"
    assert spec.columns["max_attempts"] == 26
    assert spec.columns["retry_jitter_window_secs"] == 30.0
    assert "min_delay" not in spec.columns


def test_job_decorator__takes_an_ojs_policy():
    spec = registry.spec_of(
        lambda payload: None, name="ojs-decorated", queue=None, priority=None,
        max_attempts=None, retry=OJS, timeout=None, description=None,
    )  # fmt: skip
    assert spec.columns["max_attempts"] == 1
    assert spec.columns["retry_max_delay_secs"] == 300.0


def test_settings__default_retry_may_be_a_preset_or_ojs():
    with override_settings(STRAIT={"DEFAULT_RETRY": {"preset": "ojs"}}):
        assert strait_settings.DEFAULT_RETRY.on_exhaustion == "discard"
    with override_settings(STRAIT={"DEFAULT_RETRY": ZIZQ}):
        assert strait_settings.DEFAULT_RETRY.strategy == "zizq"


def test_rest_trigger__accepts_ojs_and_refuses_a_mix():
    cache.clear()
    user = User.objects.create_user("caller")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["trigger_job", "view_jobrun"])
    )
    client = APIClient()
    client.force_login(user)
    job = make_job("rest-ojs")
    url = f"/api/strait/jobs/{job.name}/trigger/"
    ok = client.post(url, {"payload": {}, "retry": OJS}, format="json")
    assert ok.status_code == 202, ok.content
    assert JobRun.objects.get().retry_overrides["max_attempts"] == 1
    bad = client.post(
        url, {"payload": {}, "retry": {"retry_limit": 2, "max_attempts": 3}}, format="json"
    )
    assert bad.status_code == 400
    assert "retry_limit" in bad.content.decode() and "max_attempts" in bad.content.decode()
