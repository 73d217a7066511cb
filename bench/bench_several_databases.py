#!/usr/bin/env python
"""One worker process over two PostgreSQL servers; one server stopped for a while.

    python bench/bench_several_databases.py [--stop 60] [--one 30000] [--two 6000]
                                            [--stop-alias jobs2|jobs1]

Starts two PostgreSQL servers of its own (``pg_config --bindir``, as the
``postgres`` user, on free ports of 127.0.0.1; tests/pg_cluster.py), one alias on
each (tests/several_settings.py: queue "one" on jobs1, queue "two" on jobs2),
queues ``--one`` and ``--two`` runs that wait 20 ms each, and drains them with one
``run_strait_worker`` (``--concurrency 10``: at most 500 runs/s per alias). After
8 s of both draining, the second server is stopped (SIGQUIT: an immediate
shutdown, a crash for the runs) for ``--stop`` seconds and started again.
``--stop-alias jobs1`` stops the first server instead: the control database
(circuits, endpoint health) and "default" with it; give ``--two`` the backlog
that must outlast the stop then, and ``--one`` the small one.

Prints one JSON object (tests/several/scenario.py says each figure): the kept
alias's completions per second over the 5 s before the stop and over the stop,
the seconds from the stopped alias's return to its first completion, the runs
completed on each alias against those queued (0 lost), and the runs executed
again. The kept alias's backlog must outlast 8 s + ``--stop`` of draining.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import pg_cluster  # noqa: E402
from tests.several import scenario  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stop", type=float, default=60.0, help="seconds the server is stopped")
    parser.add_argument("--one", type=int, default=30_000, help="runs queued on jobs1")
    parser.add_argument("--two", type=int, default=6_000, help="runs queued on jobs2")
    parser.add_argument("--stop-alias", choices=["jobs2", "jobs1"], default="jobs2",
                        help="the alias whose server is stopped")  # fmt: skip
    args = parser.parse_args()
    if why := pg_cluster.why_not():
        sys.exit(f"cannot start PostgreSQL servers: {why}")
    with tempfile.TemporaryDirectory(prefix="strait-several-") as logs:
        found = scenario.run(args.stop, args.one, args.two, Path(logs), stop=args.stop_alias)
    found["kept_share"] = round(
        found["kept_runs_per_s_stopped"] / found["kept_runs_per_s_before"], 3
    )
    found["executed_again"] = len(found["executed_again"])
    print(json.dumps(found))


if __name__ == "__main__":
    main()
