"""A worker's health probes (``/livez``, ``/readyz``) and metrics at ``STRAIT["METRICS_BIND"]``.

What an orchestrator asks a worker process started with ``--metrics-port``:
alive while its loop turns, ready while it claims, not ready once SIGTERM
makes it drain. Bound to ``::1`` here, to see that the setting decides where it
listens (and that 127.0.0.1 then has nothing on that port).
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from django_strait import trigger
from django_strait.models import Job, JobRun
from tests.conftest import ROOT, Reply, worker_command

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def probe(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode().strip()


def wait_for(check, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"still waiting for {what}")


def test_probes__ready_while_claiming_not_ready_while_draining_at_the_bind_address(
    http_server, worker_env
):
    started, release = threading.Event(), threading.Event()

    def slow(_request):
        started.set()
        release.wait(30)
        return Reply(200, b"{}")

    http_server.routes["/slow"] = slow
    Job.objects.create(name="slow", endpoint_url=http_server.url("/slow"), timeout_secs=30)
    env = {**worker_env, "STRAIT_METRICS_BIND": "::1"}
    lines: list[str] = []
    worker = subprocess.Popen(
        worker_command("--worker-id", "probed", "--metrics-port", "0"),
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    reader = threading.Thread(target=lambda: lines.extend(worker.stdout), daemon=True)
    reader.start()
    try:
        port = wait_for(
            lambda: next((m.group(1) for m in map(_served, list(lines)) if m), None),
            "the metrics line in the worker's log",
        )
        base = f"http://[::1]:{port}"
        wait_for(lambda: probe(f"{base}/readyz")[0] == 200, "/readyz to answer 200")
        assert probe(f"{base}/livez") == (200, "alive")
        assert probe(f"{base}/readyz") == (200, "ready")
        assert "strait_worker_claimed_total" in probe(f"{base}/metrics")[1]
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5)

        run = trigger("slow", {})
        assert started.wait(30), "the worker did not start the run"
        worker.send_signal(signal.SIGTERM)
        status, why = wait_for(
            lambda: (found := probe(f"{base}/readyz"))[0] == 503 and found, "/readyz to say 503"
        )
        assert why.startswith("stopping") and probe(f"{base}/livez")[0] == 200
        release.set()
        assert worker.wait(60) == 0
    finally:
        release.set()
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)
        reader.join(10)
        worker.stdout.close()
    assert JobRun.objects.get(pk=run.pk).status == "completed"


def _served(line: str) -> re.Match | None:
    return re.search(r"worker metrics at http://\[::1\]:(\d+)/metrics, /livez, /readyz", line)
