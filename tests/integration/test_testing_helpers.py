"""``django_strait.testing``: a project's own tests run their jobs, as docs/testing.md shows.

Written the way a project writes them: a Django ``TestCase`` with the mixin
(its rows in the test's transaction, which no worker thread could see), and
pytest functions with the fixtures under pytest-django's plain ``db``. What
they check is what the real worker does: attempts and retries by the job's
policy, dead letters, signed webhooks to a real receiver, HTTP endpoints,
workflows.
"""

from __future__ import annotations

import pytest
from django.test import TestCase

from django_strait import define_workflow, job, trigger, trigger_many, trigger_workflow
from django_strait.dispatch.signing import verify
from django_strait.models import DeadLetter, Job, JobRun, RunAttempt, WebhookDelivery
from django_strait.testing import StraitTestMixin, drain
from tests.conftest import LocalServer, Reply

pytest_plugins = ["django_strait.testing.fixtures"]


@job(name="testing-flaky", max_attempts=4, retry={"initial_delay": "30s", "jitter": 0})
def flaky(payload, context):
    """Fails until its attempt ``payload["succeed_on"]``."""
    if context.attempt < payload["succeed_on"]:
        raise ConnectionError(f"attempt {context.attempt} failed")
    return {"attempt": context.attempt, "job_count": Job.objects.count()}


@job(name="testing-async")
async def reads_async(payload):
    from asgiref.sync import sync_to_async

    return {"runs": await sync_to_async(JobRun.objects.filter(job__name="testing-async").count)()}


@job(name="testing-fan-out")
def fan_out(payload):
    runs = trigger_many("testing-flaky", [{"succeed_on": 1}] * payload["n"])
    return {"triggered": [r.pk for r in runs]}


def attempts_of(run: JobRun) -> list[tuple[int, str]]:
    return list(
        RunAttempt.objects.filter(run_id=run.pk).order_by("number").values_list("number", "outcome")
    )


class DrainInATestCase(StraitTestMixin, TestCase):
    """Rows in the TestCase's transaction: the drain runs on its connection."""

    def setUp(self) -> None:
        super().setUp()
        self.server = LocalServer()
        self.server.thread.start()
        self.addCleanup(self.server.httpd.server_close)
        self.addCleanup(self.server.httpd.shutdown)

    def test_a_flaky_job__is_retried_by_its_policy_until_it_completes(self):
        run = trigger("testing-flaky", {"succeed_on": 3})

        drained = self.drain()

        run.refresh_from_db()
        self.assertEqual((run.status, run.attempt), ("completed", 3))
        self.assertEqual(run.result["attempt"], 3)
        self.assertEqual(attempts_of(run), [(1, "failed"), (2, "failed"), (3, "succeeded")])
        self.assertEqual((drained.attempts, drained.retried, drained.completed), (3, 2, 1))

    def test_attempts_used_up__dead_letter_the_run(self):
        run = trigger("testing-flaky", {"succeed_on": 99})

        drained = self.drain()

        run.refresh_from_db()
        self.assertEqual(
            (run.status, run.attempt, run.error_type), ("dead_letter", 4, "python.ConnectionError")
        )
        self.assertTrue(DeadLetter.objects.filter(pk=run.pk).exists())
        self.assertEqual(drained.dead_lettered, 1)

    def test_retry_delays_kept__leave_the_retry_queued_for_later(self):
        run = trigger("testing-flaky", {"succeed_on": 2})

        drained = self.drain(skip_retry_delays=False)

        run.refresh_from_db()
        self.assertEqual((run.status, run.attempt, drained.retried), ("queued", 1, 1))
        self.assertGreater((run.available_at - run.updated_at).total_seconds(), 29)

    def test_an_http_job_and_its_signed_webhook__reach_real_listeners(self):
        self.server.routes["/work"] = lambda r: Reply(200, b'{"charged": 12}')
        self.server.routes["/hook"] = lambda r: Reply(204, b"")
        Job.objects.create(
            name="testing-http", endpoint_url=self.server.url("/work"),
            webhook_url=self.server.url("/hook"), signing_secret="s3cret",
        )  # fmt: skip
        run = trigger("testing-http", {"order": 7})

        drained = self.drain()

        run.refresh_from_db()
        self.assertEqual((run.status, run.result), ("completed", {"charged": 12}))
        [work] = [r for r in self.server.requests if r.path == "/work"]
        self.assertEqual(work.json["payload"], {"order": 7})
        [hook] = [r for r in self.server.requests if r.path == "/hook"]
        self.assertTrue(verify("s3cret", hook.body, hook.headers["Strait-Signature"]))
        self.assertEqual(
            (hook.json["event"], hook.json["result"]), ("run.completed", {"charged": 12})
        )
        delivery = WebhookDelivery.objects.get(run=run)
        self.assertEqual((delivery.status, drained.webhooks), ("delivered", 1))

    def test_what_a_job_triggers__runs_in_the_same_drain(self):
        run = trigger("testing-fan-out", {"n": 3})

        drained = self.drain()

        run.refresh_from_db()
        children = JobRun.objects.filter(pk__in=run.result["triggered"])
        self.assertEqual(sorted(c.status for c in children), ["completed"] * 3)
        self.assertEqual(drained.completed, 4)

    def test_an_async_job__reads_the_tests_rows(self):
        run = trigger("testing-async", {})
        self.drain()
        run.refresh_from_db()
        self.assertEqual((run.status, run.result), ("completed", {"runs": 1}))

    def test_queues__limit_what_is_drained(self):
        here = trigger("testing-flaky", {"succeed_on": 1}, queue="here")
        there = trigger("testing-flaky", {"succeed_on": 1}, queue="there")

        self.drain(queues=["here"])

        here.refresh_from_db(), there.refresh_from_db()
        self.assertEqual((here.status, there.status), ("completed", "queued"))


class ImmediateInATestCase(StraitTestMixin, TestCase):
    strait_immediate = True

    def test_trigger__returns_the_run_ended(self):
        run = trigger("testing-flaky", {"succeed_on": 2})
        self.assertEqual((run.status, run.attempt), ("completed", 2))
        self.assertEqual(self.strait_ran.attempts, 2)

    def test_a_workflow__runs_its_steps_before_trigger_workflow_returns(self):
        define_workflow(
            "testing-order",
            steps=[
                {"name": "check", "job": "wf-step"},
                {"name": "ship", "job": "wf-step", "depends_on": ["check"]},
            ],
        )
        wr = trigger_workflow("testing-order", {"order": 7})
        self.assertEqual(wr.status, "completed")


# pytest, with pytest-django's plain (transaction-wrapped) db fixture


def test_the_drain_fixture__runs_a_flaky_job_to_completion(db, strait_drain):
    run = trigger("testing-flaky", {"succeed_on": 2})
    assert strait_drain().completed == 1
    run.refresh_from_db()
    assert (run.status, run.attempt) == ("completed", 2)


def test_the_immediate_fixture__ends_each_run_before_trigger_returns(db, strait_immediate):
    run = trigger("testing-flaky", {"succeed_on": 99})
    assert (run.status, run.attempt) == ("dead_letter", 4)
    assert strait_immediate.dead_lettered == 1


def test_immediate__ends_when_the_block_does(db):
    from django_strait.testing import immediate

    with immediate():
        inside = trigger("testing-flaky", {"succeed_on": 1})
    after = trigger("testing-flaky", {"succeed_on": 1})
    assert (inside.status, after.status) == ("completed", "queued")
    assert drain().completed == 1


@pytest.mark.django_db(transaction=True)
def test_the_drain__works_on_committed_rows_too(strait_drain):
    run = trigger("testing-flaky", {"succeed_on": 1})
    strait_drain()
    run.refresh_from_db()
    assert run.status == "completed"
