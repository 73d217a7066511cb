#!/usr/bin/env python
"""What one run costs a database server, and what a worker holds: the inputs of the N-database model.

    python bench/bench_scale_model.py [--n 20000] [--reps 3] [--kinds noop,http]

Starts a PostgreSQL server of its own (``pg_config --bindir``, as the ``postgres``
user, on a free port of 127.0.0.1, in a temporary directory; tests/pg_cluster.py),
so that no other client's work is counted, and runs ``bench/bench_worker.py``'s
drains against it (``drain_noop``: N no-op Python runs; ``drain_http``: N HTTP runs
against its fast endpoint on 127.0.0.1), one worker process at
``--concurrency 100``. While each drain runs it reads, every 0.1 s:

- the CPU time of every process of that server (the postmaster and its children:
  the worker's backends, the WAL writer, the checkpointer...), from /proc, so the
  server's CPU per run is its CPU over the drain divided by the runs;
- ``pg_stat_activity``'s client backends but bench_worker.py's own (the one that
  counts completed runs): how many connections the worker holds.

Then ``--trigger-clients`` threads of one process call ``trigger()`` for 5 s, each
run committed alone, and again with the session skipping the NOTIFY trigger
(``session_replication_role = replica``): a transaction that NOTIFYs takes a lock
shared by the whole server at its commit, so those commits go one at a time.

Prints one JSON object: per kind, the medians over ``--reps`` of the drain's
runs/s, the worker's CPU per run (from bench_worker.py), the server's CPU per run
and the worker's connections; and the server's settings that matter
(``synchronous_commit``, ``fsync``, ``shared_buffers``). docs/operations.md,
"A model of N databases", turns these into databases and workers for a target.
The server stops by its pid at the end, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import pg_cluster  # noqa: E402
from tests.process_helpers import free_port  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


class Watch(threading.Thread):
    """Samples the server's processes' CPU and the client backends until stopped."""

    def __init__(self, server: pg_cluster.Server) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.last: dict[int, float] = {}
        self.first: dict[int, float] = {}
        self.connections: list[int] = []
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.server.conninfo("strait_bench"), autocommit=True) as conn:
            mine = conn.info.backend_pid
            while not self.done.is_set():
                for pid in self.server.processes():
                    cpu = cpu_of(pid)
                    if cpu is not None:
                        self.first.setdefault(pid, cpu)
                        self.last[pid] = cpu
                (count,) = conn.execute(
                    # bench_worker.py's own connection counts the completed runs: not the worker's.
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                    " AND datname = 'strait_bench' AND pid <> %s"
                    " AND query NOT LIKE 'SELECT count(*) FROM django_strait_jobrun%%'"
                    " AND query NOT LIKE '%%trigger_many%%'",
                    (mine,),
                ).fetchone()
                self.connections.append(count)
                time.sleep(0.1)

    def server_cpu(self) -> float:
        # A process that started after the first sample counts from 0 (its whole life).
        return sum(cpu - self.first.get(pid, 0.0) for pid, cpu in self.last.items())


def drain(server: pg_cluster.Server, kind: str, n: int) -> dict:
    db = f"postgres://postgres@127.0.0.1:{server.port}/strait_bench"
    watch = Watch(server)
    cmd = [sys.executable, str(ROOT / "bench" / "bench_worker.py"), "--db", db,
           "--only", f"drain_{kind}", "--n", str(n), "--reps", "1"]  # fmt: skip
    # The queueing before the drain is this bench's too: start counting once it is done.
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    watch.start()
    out, _ = proc.communicate(timeout=900)
    watch.done.set()
    watch.join()
    figures = json.loads(out)
    steady = figures[f"drain_{kind}_steady_runs_per_s"]["median"]
    worker_cpu = figures[f"drain_{kind}_worker_cpu_ms_per_run"]["median"]
    return {
        "runs_per_s": steady,
        "worker_cpu_ms_per_run": worker_cpu,
        # Over the whole drain (queueing N runs with trigger_many included: a run is
        # inserted once, as in production).
        "server_cpu_ms_per_run": watch.server_cpu() * 1000 / n,
        "worker_connections_max": max(watch.connections, default=0),
    }


#: trigger() one run at a time, each committed alone, from ``clients`` threads of one
#: process for ``seconds``; with ``quiet``, the session skips the NOTIFY trigger
#: (``session_replication_role = replica``): what that trigger's commit-time lock costs.
TRIGGERS = """
import os, sys, threading, time
import django
django.setup()
from django.db import connection
from django_strait import trigger
clients, seconds, quiet = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "quiet"
counts = [0] * clients
start = threading.Barrier(clients + 1)
def client(i):
    if quiet:
        with connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = replica")
    trigger("bench-noop", {})
    start.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        trigger("bench-noop", {"i": counts[i]})
        counts[i] += 1
    connection.close()
threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
for t in threads: t.start()
start.wait()
for t in threads: t.join()
print(sum(counts) / seconds)
"""


def triggers(server: pg_cluster.Server, clients: int, seconds: float, quiet: bool) -> float:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="bench.settings", PYTHONPATH=str(ROOT),
               DATABASE_URL=f"postgres://postgres@127.0.0.1:{server.port}/strait_bench")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", TRIGGERS, str(clients), str(seconds), "quiet" if quiet else "notify"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds + 120, check=True,
    )  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kinds", default="noop,http")
    ap.add_argument("--trigger-clients", type=int, default=8,
                    help="threads calling trigger() at once (0: skip); also without NOTIFY")  # fmt: skip
    args = ap.parse_args()
    if why := pg_cluster.why_not():
        sys.exit(f"cannot start a PostgreSQL server: {why}")
    root = Path(tempfile.mkdtemp(prefix="strait-scale-"))
    if os.geteuid() == 0:
        import shutil

        shutil.chown(root, pg_cluster.SERVER_USER)
    server = pg_cluster.Server("model", root / "model", free_port())
    try:
        server.tool("initdb", "-D", str(server.data), "-U", "postgres", "--auth=trust",
                    "-E", "UTF8", "--no-instructions")  # fmt: skip
        server.configure(listen_addresses="127.0.0.1", port=server.port,
                         unix_socket_directories=str(root), max_connections=100)  # fmt: skip
        server.start()
        import psycopg

        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE strait_bench")
            settings = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]
                for name in ("synchronous_commit", "fsync", "shared_buffers", "server_version")
            }
        drain(server, "noop", 2000)  # migrate, and warm the server's caches
        out: dict = {"n": args.n, "reps": args.reps, "server": settings}
        for kind in filter(None, args.kinds.split(",")):
            reps = [drain(server, kind, args.n) for _ in range(args.reps)]
            out[kind] = {key: statistics.median(r[key] for r in reps) for key in reps[0]} | {
                "reps": reps
            }
        if args.trigger_clients:
            for quiet in (False, True):
                rates = [
                    triggers(server, args.trigger_clients, 5.0, quiet) for _ in range(args.reps)
                ]
                out["triggers_without_notify" if quiet else "triggers"] = {
                    "clients": args.trigger_clients,
                    "per_s": statistics.median(rates),
                    "reps": rates,
                }
        out["load_average"] = os.getloadavg()
        print(json.dumps(out, indent=2))
    finally:
        server.stop()
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
