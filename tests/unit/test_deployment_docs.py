"""docs/deployment.md: its systemd unit verifies, and its stop timeouts outlast SHUTDOWN_TIMEOUT."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from django_strait.conf import KEYS
from tests.conftest import ROOT

PAGE = (ROOT / "docs" / "deployment.md").read_text()
UNIT = re.search(r"```ini\n(.*?)```", PAGE, re.S).group(1)
SHUTDOWN_TIMEOUT = KEYS["SHUTDOWN_TIMEOUT"].default


def directive(name: str) -> str:
    return re.search(rf"(?m)^{name}=(.*)$", UNIT).group(1).strip()


def test_the_unit__stops_with_sigterm_and_waits_past_the_shutdown_timeout():
    assert directive("KillSignal") == "SIGTERM"
    assert float(directive("TimeoutStopSec")) > SHUTDOWN_TIMEOUT
    assert directive("ExecStart").endswith("manage.py run_strait_worker --worker-id %H-%i")


def test_the_containers__wait_past_the_shutdown_timeout_before_sigkill():
    grace = re.search(r"stop_grace_period: (\d+)s", PAGE).group(1)
    k8s = re.search(r"terminationGracePeriodSeconds: (\d+)", PAGE).group(1)
    assert int(grace) > SHUTDOWN_TIMEOUT and int(k8s) > SHUTDOWN_TIMEOUT
    assert "STOPSIGNAL SIGTERM" in PAGE and "stop_signal: SIGTERM" in PAGE


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
def test_the_unit__passes_systemd_analyze_verify(tmp_path):
    # The page's paths, pointed at a project and a Python that exist here.
    unit = UNIT.replace("/srv/shop/.venv/bin/python", sys.executable).replace(
        "/srv/shop", str(tmp_path)
    )
    path = tmp_path / "strait-worker@.service"
    path.write_text(unit)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
