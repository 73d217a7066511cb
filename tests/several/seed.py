"""Queue the several-databases scenario's runs, each through a door of its own, and say where
they landed: ``python -m tests.several.seed N1 N2`` (DJANGO_SETTINGS_MODULE=tests.several_settings).

N1 runs of "several-one" (queue "one", on jobs1) and N2 of "several-two" (queue
"two", on jobs2) by ``trigger_many()``; one more of each by ``trigger()``, one
by the REST API; and the two transaction cases: a ``trigger()`` of jobs2's job
inside a transaction on jobs1 that rolls back (the run stays: it was committed
on its own alias), and one inside a transaction on jobs2 that rolls back (gone).
Prints one JSON line.
"""

from __future__ import annotations

import json
import sys

import django

django.setup()

from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402

from django_strait import trigger, trigger_many  # noqa: E402
from django_strait.api.auth import issue_key  # noqa: E402
from django_strait.models import JobRun  # noqa: E402


class Rollback(Exception):
    pass


def rolled_back(alias: str) -> int:
    """Trigger "several-two" inside a transaction on ``alias`` that rolls back; its run's id."""
    try:
        with transaction.atomic(using=alias):
            run = trigger("several-two", {"inside": alias})
            raise Rollback
    except Rollback:
        return run.pk


def main(one: int, two: int) -> dict:
    trigger_many("several-one", [{"n": n} for n in range(one)])
    trigger_many("several-two", [{"n": n} for n in range(two)])
    trigger("several-one", {"door": "trigger"})
    trigger("several-two", {"door": "trigger"})
    _, key = issue_key("several", ["*"])
    api = Client(HTTP_AUTHORIZATION=f"Api-Key {key}")
    answer = api.post("/api/strait/jobs/several-two/trigger/", {"payload": {"door": "api"}},
                      content_type="application/json")  # fmt: skip
    other = rolled_back("jobs1")
    same = rolled_back("jobs2")
    try:
        trigger("several-one", {}, queue="two")
        wrong_queue = ""
    except Exception as exc:  # the queue lives on jobs2, the job on jobs1
        wrong_queue = str(exc)
    return {
        "api": answer.status_code,
        "other_alias_kept": JobRun.objects.using("jobs2").filter(pk=other).exists(),
        "same_alias_rolled_back": not JobRun.objects.using("jobs2").filter(pk=same).exists(),
        "wrong_queue": wrong_queue,
        "expected": {"jobs1": one + 1, "jobs2": two + 1 + 1 + 1},
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
