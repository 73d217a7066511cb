"""The admin's overview and the metrics read a real streaming standby, and say how far behind.

The test starts its own PostgreSQL pair (tests/pg_cluster.py): a primary and a
standby streaming from it. ``STRAIT["READ_DATABASE"]`` names the standby
(tests/replica_settings.py). With the standby's replay paused
(``pg_wal_replay_pause()``) while more runs are queued on the primary, the
overview shows the standby's older numbers and says how many seconds behind they
are; resumed, it catches up; stopped, the pages read the primary and say so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

from tests import pg_cluster
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.layout_free, pytest.mark.postgres]


def test_the_overview_and_the_metrics_read_the_standby_and_show_its_lag():
    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        pytest.skip("a PostgreSQL standby: runs on the PostgreSQL passes")
    if why := pg_cluster.why_not():
        pytest.skip(why)
    pair = pg_cluster.Pair()
    try:
        pair.start()
        _read_the_standby(pair)
    finally:
        pair.stop()


def _story(pair: pg_cluster.Pair, phase: str) -> dict:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.replica_settings",
        "REPLICA_TEST_PORTS": f"{pair.primary.port},{pair.standby.port}",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.e2e.replica_story", phase],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _read_the_standby(pair: pg_cluster.Pair) -> None:
    import psycopg

    with psycopg.connect(pair.primary.conninfo(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE strait")
    story = _story(pair, "paused")

    caught_up, behind, resumed = story["caught_up"], story["behind"], story["resumed"]
    assert caught_up["alias"] == "reader" and caught_up["depth"] == 3
    assert "Read off the replica <code>reader</code>, up to date" in caught_up["page"]
    assert 'strait_read_replica_up{replica="reader"} 1.0' in caught_up["metrics"]

    # Paused: the standby's numbers are those before the four new runs, and say so.
    assert behind["alias"] == "reader"
    assert behind["depth"] == 3
    assert behind["lag"] is not None and behind["lag"] >= 2.0, behind["lag"]
    assert f"<strong>{behind['lag']:.1f} s behind</strong>" in behind["page"] or (
        " s behind</strong>" in behind["page"]
    )
    assert any(
        line.startswith('strait_read_replica_lag_seconds{replica="reader"}')
        and float(line.rsplit(" ", 1)[1]) >= 2.0
        for line in behind["metrics"]
    ), behind["metrics"]

    assert resumed["depth"] == 7 and resumed["lag"] == 0.0

    # The standby stopped: the pages read the primary, and say why. (The primary's
    # commits stop waiting for it first, or the login's session would wait forever.)
    with psycopg.connect(pair.primary.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
        conn.execute("SELECT pg_reload_conf()")
    pair.standby.stop()
    fallback = _story(pair, "fallback")["fallback"]
    assert fallback["status"] == 200 and fallback["metrics_status"] == 200
    assert fallback["alias"] == "default" and fallback["depth"] == 7
    assert "The replica <code>reader</code> did not answer" in fallback["page"]
    assert 'strait_read_replica_up{replica="reader"} 0.0' in fallback["metrics"]
