"""Two aliases on two PostgreSQL servers, one worker process: placement, and one server stopped.

tests/several/scenario.py does the work (bench/bench_several_databases.py runs it
with a 60 s stop). Shown: every door (``trigger_many()``, ``trigger()``, the REST
API) wrote each job's runs to its queue's alias and nowhere else; one
``run_strait_worker`` drained both; with the second server stopped for 20 s, the
first alias kept draining at >= 80 % of its rate before the stop; the second's
runs resumed within 10 s of its return; every run completed (0 lost), and the
worker was never restarted. Runs executed again are only the stopped alias's (the
claims a crashed lone server forgot).
"""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from tests import pg_cluster
from tests.several import scenario

pytestmark = [pytest.mark.slow, pytest.mark.layout_free, pytest.mark.postgres]

STOP_SECS = 20.0
ONE, TWO = 16_000, 5_000


def test_one_worker_serves_two_databases_and_a_stopped_one_holds_back_only_its_queues(tmp_path):
    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        pytest.skip("two PostgreSQL servers: runs on the PostgreSQL passes")
    if why := pg_cluster.why_not():
        pytest.skip(why)
    found = scenario.run(STOP_SECS, ONE, TWO, tmp_path)
    print("several databases:", json.dumps(found))

    seeded = found["seeded"]
    assert seeded["api"] == 202
    # A trigger inside a transaction on another alias is committed on its own; one on
    # the job's alias rolls back with the caller's transaction.
    assert seeded["other_alias_kept"] is True
    assert seeded["same_alias_rolled_back"] is True
    assert "'two' lives on database 'jobs2'" in seeded["wrong_queue"]
    # Placement: each job's row and runs on its queue's alias only.
    assert found["placement"]["jobs1"] == {
        "runs": [["several-one", "one", ONE + 1]],
        "jobs": ["several-one"],
    }
    assert found["placement"]["jobs2"] == {
        "runs": [["several-two", "two", TWO + 3]],
        "jobs": ["several-two"],
    }
    # Both drained, then the first kept its pace while the second was away.
    before = found["kept_runs_per_s_before"]
    assert before > 0 and found["stopped_runs_per_s_before"] > 0
    assert found["kept_runs_per_s_stopped"] >= 0.8 * before, found
    assert found["stopped_resumed_after_s"] <= 10, found
    # 0 lost, one process all along.
    assert found["completed"] == seeded["expected"]
    # A lone server stopped by a crash forgets its last claims (the claim does not wait
    # for the WAL flush: docs/operations.md, "Failover"): their runs ran again after its
    # return, at-least-once. Only the stopped alias's: the other lost nothing.
    assert all(line.startswith("two ") for line in found["executed_again"]), found
    assert found["worker_kept_running"] is True
    assert found["worker_exit"] == 0, (tmp_path / "worker.log").read_text()[-3000:]
