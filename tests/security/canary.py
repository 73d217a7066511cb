"""A module that must never be imported by name from input: it leaves a mark if it is.

Tests name its functions in handler and retry-function fields; they are not
registered, so no process may import this module because of them. Importing it
writes ``STRAIT_CANARY_FILE`` (when set) and sets ``IMPORTED``.
"""

import os

IMPORTED = True

if os.environ.get("STRAIT_CANARY_FILE"):
    with open(os.environ["STRAIT_CANARY_FILE"], "a") as mark:
        mark.write(f"imported in pid {os.getpid()}\n")


def run(payload):
    return "the canary ran"


def delay(retry_number, policy):
    return 0.001
