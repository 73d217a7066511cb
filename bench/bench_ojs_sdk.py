#!/usr/bin/env python
"""The real OJS Python SDK's worker draining no-op jobs, through each server of bench_ojs.py.

    python -m venv /tmp/ojs-sdk && /tmp/ojs-sdk/bin/pip install <ojs-python-sdk checkout> cryptography
    python bench/bench_ojs_sdk.py --sdk-python /tmp/ojs-sdk/bin/python [--n 2000] [--reps 1]
                                  [--concurrency 10] [--servers lean,gunicorn]

The SDK (openjobspec, github.com/openjobspec/ojs-python-sdk) is never part of this
repository: install it in a virtualenv of its own (it imports ``cryptography``
without declaring it). Each rep queues N runs of an external job, then runs one SDK
``Worker`` (this file under ``--sdk-python``, with ``--drain``) until its handler
has run N times and every ack is answered: jobs/s, the server's CPU per job
(heartbeats included) and the SDK process's own CPU per job. The SDK reads a body only in ``application/json``
(docs/ojs.md), so the servers answer in that type here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = "bench.external"


async def drain(url: str, key: str, n: int, concurrency: int) -> dict:
    """In the SDK's interpreter: one SDK worker handles ``n`` jobs; return jobs/s and
    the SDK process's own CPU per job (its HTTP client, event loop and job handling)."""
    import ojs  # the SDK: installed in --sdk-python's environment only

    worker = ojs.Worker(url, queues=["default"], concurrency=concurrency, poll_interval=0.05,
                        headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    done = 0

    @worker.register(JOB)
    async def noop(ctx):  # noqa: ANN001 (the SDK's context)
        nonlocal done
        done += 1

    started, cpu = time.perf_counter(), time.process_time()
    running = asyncio.create_task(worker.start())
    while done < n:
        await asyncio.sleep(0.005)
        if running.done():
            raise SystemExit(f"the SDK worker stopped after {done} jobs")
    while worker._active_jobs:  # the last acks
        await asyncio.sleep(0.002)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await worker.stop()
    await asyncio.wait_for(running, 30)
    return {"jobs_per_s": n / elapsed, "sdk_cpu_ms_per_job": cpu * 1000 / n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdk-python", help="the interpreter of a virtualenv with the SDK")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--servers", default="lean,gunicorn")
    ap.add_argument("--drain", nargs=2, metavar=("URL", "KEY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.drain:
        print(json.dumps(asyncio.run(drain(*args.drain, args.n, args.concurrency))))
        return
    os.environ["STRAIT_OJS_CONTENT_TYPE"] = "application/json"  # inherited by the servers
    sys.path.insert(0, str(ROOT))
    from bench.bench_ojs import (
        DEFAULT_DB,
        bench_key,
        enqueue_external,
        free_port,
        server_cpu,
        start_server,
    )
    from bench.bench_worker import clear, setup_django, stop

    setup_django(os.environ.get("DATABASE_URL", DEFAULT_DB))
    from django.db import connections

    key = bench_key()
    out: dict = {"n": args.n, "sdk_concurrency": args.concurrency}
    for kind in args.servers.split(","):
        port = free_port()
        server = start_server(port, kind)
        try:
            for _ in range(args.reps):
                clear()
                enqueue_external(args.n)
                connections.close_all()
                cpu = server_cpu(server)
                ran = subprocess.run(
                    [args.sdk_python, __file__, "--drain", f"http://127.0.0.1:{port}", key,
                     "--n", str(args.n), "--concurrency", str(args.concurrency)],
                    capture_output=True, text=True, timeout=1800,
                )  # fmt: skip
                cpu = server_cpu(server) - cpu
                drained = (
                    json.loads(ran.stdout) if ran.returncode == 0 else {"error": ran.stderr[-500:]}
                )
                out.setdefault(kind, []).append(
                    {**drained, "server_cpu_ms_per_job": cpu * 1000 / args.n}
                )
        finally:
            stop(server)
    out["load_average"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
