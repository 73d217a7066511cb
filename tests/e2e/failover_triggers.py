"""Trigger runs of "failover-step" at a steady rate through a failover; note each one acknowledged.

Run by tests/e2e/test_failover_standby.py with DJANGO_SETTINGS_MODULE=tests.failover_settings:
``python -m tests.e2e.failover_triggers RATE ACKED STOP``. Each ``trigger()`` that
returned appends its run id to the file ACKED at once; a trigger that raised
(the primary is gone, no server takes writes yet) is not acknowledged, and the
next one is tried on a new connection. Ends when the file STOP exists, printing
one JSON line: how many were acknowledged and how many raised.
``python -m tests.e2e.failover_triggers ghosts N`` triggers N runs of "failover-ghost".
"""

from __future__ import annotations

import json
import os
import sys
import time

import django

django.setup()

from django.db import connection  # noqa: E402

from django_strait import trigger  # noqa: E402


def main(rate: float, acked_path: str, stop_path: str) -> dict:
    acked = refused = 0
    started = time.monotonic()
    with open(acked_path, "a", buffering=1) as out:
        while not os.path.exists(stop_path):
            try:
                run = trigger("failover-step", {"n": acked + refused})
            except Exception as exc:
                refused += 1
                if refused == 1 or refused % 50 == 0:
                    print(f"trigger raised ({refused}): {type(exc).__name__}: {exc}".strip()[:300])
                connection.close()  # the next trigger connects again: to whichever takes writes
                time.sleep(0.02)
                continue
            out.write(f"{run.pk} {time.time():.6f}\n")
            acked += 1
            # Steady: the next trigger at its slot; slots missed while refused are not made up.
            ahead = started + (acked + refused) / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            elif ahead < -1:
                started = time.monotonic() - (acked + refused) / rate
    return {"acked": acked, "refused": refused}


def ghosts(count: int) -> dict:
    """Trigger ``count`` runs of "failover-ghost" (for the worker that dies with the primary)."""
    return {"ghosts": [trigger("failover-ghost", {}).pk for _ in range(count)]}


if __name__ == "__main__":
    if sys.argv[1] == "ghosts":
        print(json.dumps(ghosts(int(sys.argv[2]))), flush=True)
    else:
        print(json.dumps(main(float(sys.argv[1]), sys.argv[2], sys.argv[3])), flush=True)
