#!/usr/bin/env python
"""Fetch-ack throughput of external OJS workers over HTTP against the in-process drain.

    python bench/bench_ojs.py [--n 2000] [--reps 3] [--workers 8] [--count 1,10]
                              [--servers gunicorn,lean]

Each rep, in the same sitting:
  in_process       N no-op Python runs drained by ONE run_strait_worker process (as
                   bench_worker.py's drain_noop): steady runs/s
  <server>_count_C N runs of an external-worker job, worked by ``--workers`` threads of
                   this process speaking OJS over HTTP/1.1 keep-alive to the server on
                   127.0.0.1, each request with an API key (Bearer): each fetches up to
                   C jobs, then acks each one; runs/s from the first fetch to the last
                   ack, and the server's CPU ms per run (fetch and ack)
  <server>_batch   N jobs enqueued through POST /ojs/v1/jobs/batch, 1,000 a request, by
                   one client: jobs/s, and the server's CPU ms per job
The servers: ``gunicorn`` (2 processes x 8 threads, the DRF views) and ``lean`` (uvicorn,
one process, the fast door django_strait.ojs.asgi). Figures are medians over
``--reps``, printed as one JSON object with the load average at the end; ``ratio``
is an OJS median over the in-process median. The server's CPU is read from /proc
(the machine is shared: read CPU per run, not rates). The database is
``DATABASE_URL`` (default: PostgreSQL ``strait_bench_ojs`` on 127.0.0.1, created if
missing).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_worker import (  # noqa: E402 - the bench scripts run as files, not modules
    clear,
    cpu_seconds,
    drain,
    make_jobs,
    setup_django,
    stop,
)

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench_ojs"
SETTINGS = "bench.ojs_settings"
JOB = "bench.external"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The servers measured: the DRF views under gunicorn, and the fast door under uvicorn.
SERVERS = {
    "gunicorn": ("gunicorn 2 processes x 8 threads, the DRF views",
                 ["-m", "gunicorn", "django.core.wsgi:get_wsgi_application()", "--workers", "2",
                  "--threads", "8", "--worker-class", "gthread", "--log-level", "warning"]),
    "lean": ("uvicorn 1 process (httptools, uvloop), the fast door django_strait.ojs.asgi",
             ["-m", "uvicorn", "django_strait.ojs.asgi:application", "--workers", "1",
              "--http", "httptools", "--loop", "uvloop", "--no-access-log",
              "--log-level", "warning"]),
}  # fmt: skip


def start_server(port: int, kind: str = "gunicorn") -> subprocess.Popen:
    """The OJS binding on 127.0.0.1:``port`` under ``kind`` (SERVERS); wait until it answers."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), DJANGO_SETTINGS_MODULE=SETTINGS)
    _, args = SERVERS[kind]
    bind = (
        ["--bind", f"127.0.0.1:{port}"]
        if kind == "gunicorn"
        else ["--host", "127.0.0.1", "--port", str(port)]
    )
    proc = subprocess.Popen(
        [sys.executable, *args, *bind],
        cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=open(ROOT / "bench" / "ojs_server.log", "ab"),
    )  # fmt: skip
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/ojs/v1/health")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.2)
    stop(proc)
    raise RuntimeError("the OJS server did not answer within 60 s (bench/ojs_server.log)")


def server_cpu(proc: subprocess.Popen) -> float:
    """CPU seconds of the server's processes (the master and its workers)."""
    pids = [proc.pid]
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    return sum(cpu_seconds(pid) or 0.0 for pid in pids)


class Worker(threading.Thread):
    """One external worker: fetch up to ``count``, ack each, until told to stop."""

    def __init__(
        self, port: int, name: str, count: int, stop_event: threading.Event, key: str
    ) -> None:
        super().__init__(daemon=True)
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Content-Type": "application/openjobspec+json",
                        "Authorization": f"Bearer {key}"}  # fmt: skip
        self.name_, self.count, self.stop_event = name, count, stop_event
        self.acked = 0
        self.error: str | None = None

    def post(self, path: str, body: dict) -> dict:
        # Bytes: http.client then sends headers and body in one segment, and the
        # server never waits out a delayed ACK (Nagle) for the body.
        data = json.dumps(body).encode()
        self.conn.request("POST", path, data, self.headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{path}: {response.status} {data[:200]!r}")
        return json.loads(data)

    def run(self) -> None:
        fetch = {"queues": ["default"], "count": self.count, "worker_id": self.name_}
        try:
            while not self.stop_event.is_set():
                jobs = self.post("/ojs/v1/workers/fetch", fetch)["jobs"]
                if not jobs:
                    time.sleep(0.01)
                for job in jobs:
                    self.post("/ojs/v1/workers/ack", {"job_id": job["id"], "result": {"ok": True}})
                    self.acked += 1
        except Exception as exc:  # noqa: BLE001 (reported in the figures)
            self.error = repr(exc)


def enqueue_external(n: int) -> None:
    from django_strait.models import Execution, Job, JobRun
    from django_strait.ojs.ids import uuid7

    job, _ = Job.objects.update_or_create(
        name=JOB, defaults={"execution": Execution.EXTERNAL, "ojs": {"type": JOB}, "handler": ""}
    )
    runs = [
        JobRun(job=job, payload={"args": [i]}, ojs_id=uuid7(), retry_overrides={"preset": "ojs"})
        for i in range(n)
    ]
    JobRun.objects.bulk_create(runs, batch_size=5000)


def bench_key() -> str:
    """An API key for the harness's requests: each request pays for its authentication."""
    from django_strait.api.auth import issue_key

    return issue_key("bench-ojs", ["runs:write", "jobs:trigger"])[1]


def ojs_drain(
    port: int, server: subprocess.Popen, n: int, workers: int, count: int, key: str
) -> dict:
    from django.db import connections

    clear()
    enqueue_external(n)
    connections.close_all()
    stop_event = threading.Event()
    threads = [Worker(port, f"bench-{i}", count, stop_event, key) for i in range(workers)]
    cpu0, t0 = server_cpu(server), time.perf_counter()
    for t in threads:
        t.start()
    while sum(t.acked for t in threads) < n:
        if any(t.error for t in threads):
            stop_event.set()
            return {"error": next(t.error for t in threads if t.error)}
        if time.perf_counter() - t0 > 300:
            stop_event.set()
            return {"error": f"timeout: {sum(t.acked for t in threads)}/{n}"}
        time.sleep(0.01)
    elapsed, cpu = time.perf_counter() - t0, server_cpu(server) - cpu0
    stop_event.set()
    for t in threads:
        t.join(30)
    return {"runs_per_s": n / elapsed, "server_cpu_ms_per_run": cpu * 1000 / n}


def batch_enqueue(port: int, server: subprocess.Popen, n: int, key: str) -> dict:
    """``n`` jobs enqueued through ``POST /ojs/v1/jobs/batch``, 1,000 a request, one client."""
    from django.db import connections

    clear()
    connections.close_all()
    worker = Worker(port, "bench-batch", 1, threading.Event(), key)
    bodies = [
        {"jobs": [{"type": JOB, "args": [i, "x"]} for i in range(start, min(start + 1000, n))]}
        for start in range(0, n, 1000)
    ]
    cpu0, t0 = server_cpu(server), time.perf_counter()
    try:
        made = sum(len(worker.post("/ojs/v1/jobs/batch", body)["jobs"]) for body in bodies)
    except Exception as exc:  # noqa: BLE001 (reported in the figures)
        return {"error": repr(exc)}
    elapsed, cpu = time.perf_counter() - t0, server_cpu(server) - cpu0
    if made != n:
        return {"error": f"{made} of {n} jobs made"}
    return {"jobs_per_s": n / elapsed, "server_cpu_ms_per_job": cpu * 1000 / n}


def median_of(reps: list[dict], key: str) -> float | None:
    values = [r[key] for r in reps if r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--count", default="1,10", help="jobs per fetch, comma-separated")
    ap.add_argument("--servers", default="gunicorn,lean", help="of: " + ", ".join(SERVERS))
    ap.add_argument("--db", default=os.environ.get("DATABASE_URL", DEFAULT_DB))
    args = ap.parse_args()
    setup_django(args.db)  # bench.settings here; the server runs on bench.ojs_settings
    make_jobs(None)
    key = bench_key()
    counts = [int(c) for c in args.count.split(",")]
    kinds = args.servers.split(",")
    figures: dict[str, list[dict]] = {"in_process": []}
    for _ in range(args.reps):
        figures["in_process"].append(drain("bench-noop", args.n, 100, 100))
        for kind in kinds:
            port = free_port()
            server = start_server(port, kind)
            try:
                for c in counts:
                    one = ojs_drain(port, server, args.n, args.workers, c, key)
                    figures.setdefault(f"{kind}_count_{c}", []).append(one)
                one = batch_enqueue(port, server, args.n, key)
                figures.setdefault(f"{kind}_batch", []).append(one)
            finally:
                stop(server)
    out: dict = {"database": args.db.split(":")[0], "n": args.n, "reps": args.reps,
                 "ojs_workers": args.workers, "load_average": os.getloadavg(),
                 "servers": {k: SERVERS[k][0] for k in kinds}}  # fmt: skip
    base = median_of(figures["in_process"], "steady_runs_per_s")
    out["in_process_steady_runs_per_s"] = base
    for kind in kinds:
        for c in counts:
            reps = figures[f"{kind}_count_{c}"]
            rate = median_of(reps, "runs_per_s")
            out[f"{kind}_count_{c}_runs_per_s"] = rate
            out[f"{kind}_count_{c}_server_cpu_ms_per_run"] = median_of(
                reps, "server_cpu_ms_per_run"
            )
            out[f"{kind}_count_{c}_ratio"] = rate / base if rate and base else None
            if errors := [r["error"] for r in reps if "error" in r]:
                out[f"{kind}_count_{c}_errors"] = errors
        reps = figures[f"{kind}_batch"]
        out[f"{kind}_batch_jobs_per_s"] = median_of(reps, "jobs_per_s")
        out[f"{kind}_batch_server_cpu_ms_per_job"] = median_of(reps, "server_cpu_ms_per_job")
        if errors := [r["error"] for r in reps if "error" in r]:
            out[f"{kind}_batch_errors"] = errors
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
