"""Circuits and endpoint health of the whole fleet on the control database.

``python tests/several/control_scenario.py`` (DJANGO_SETTINGS_MODULE=
tests.several_sqlite_settings), run by tests/e2e/test_control_database.py:
an HTTP job made outside code on queue "two" (jobs2) calls a local endpoint
that answers 500, and so does one on jobs1; one burst worker serving both
aliases drains them. Prints one JSON line: where the circuit and the health
rows are, and what the runs of jobs2 became.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402

from django_strait import trigger  # noqa: E402
from django_strait.models import EndpointCircuit, EndpointHealth, Job, JobRun  # noqa: E402


class Failing(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main() -> dict:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/fail"
    Job.objects.using("jobs2").create(
        name="http-two", endpoint_url=url, queue="two", max_attempts=1
    )
    Job.objects.using("jobs1").create(name="http-one", endpoint_url=url, max_attempts=1)
    for n in range(2):
        trigger("http-two", {"n": n})
    task_run = None
    if settings.HAS_TASK_FRAMEWORK:  # Django's @task on queue "two": its job lives on jobs2
        from tests.several.task_on_two import on_two

        task_run = int(on_two.enqueue().id)
    call_command("run_strait_worker", burst=True, worker_id="first", verbosity=0)
    # The circuit opened on what jobs2's runs did: jobs1's run is held by it.
    trigger("http-one", {"after": True})
    call_command("run_strait_worker", burst=True, worker_id="second", verbosity=0)
    found = {
        "task": None if task_run is None else {
            a: list(JobRun.objects.using(a).filter(pk=task_run, job__name__endswith="on_two")
                    .values_list("queue", "status"))
            for a in ("jobs1", "jobs2")
        },
        "circuits": {a: list(EndpointCircuit.objects.using(a).values_list("state", flat=True))
                     for a in ("jobs1", "jobs2")},
        "health": {a: EndpointHealth.objects.using(a).count() for a in ("jobs1", "jobs2")},
        "routed_circuits": EndpointCircuit.objects.count(),
        "two_runs": sorted(JobRun.objects.using("jobs2").filter(job__name="http-two")
                           .values_list("status", flat=True)),
        "one_runs": [
            [r.status, r.error_type]
            for r in JobRun.objects.using("jobs1").all()
        ],
    }  # fmt: skip
    # The control database away (its file moved aside: queries there fail): a plain
    # function's run on jobs2 completes; an HTTP run there waits, no attempt spent.
    control = connections["jobs1"].settings_dict["NAME"]
    connections.close_all()
    os.rename(control, control + ".away")
    Job.objects.using("jobs2").create(name="plain-two", handler="tests.testapp.jobs.noop",
                                      queue="two")  # fmt: skip
    plain = trigger("plain-two", {})
    held = trigger("http-two", {"away": True})
    call_command("run_strait_worker", burst=True, worker_id="away", databases=["jobs2"],
                 verbosity=0)  # fmt: skip
    server.shutdown()
    runs = JobRun.objects.using("jobs2")
    found["control_away"] = {
        "plain": runs.get(pk=plain.pk).status,
        "http": [runs.get(pk=held.pk).status, runs.get(pk=held.pk).error_type,
                 runs.get(pk=held.pk).attempt],
    }  # fmt: skip
    return found


if __name__ == "__main__":
    print(json.dumps(main()))
