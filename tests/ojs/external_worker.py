"""A small OJS worker in plain Python HTTP, speaking the protocol as the SDKs do.

    python -m tests.ojs.external_worker --url http://127.0.0.1:PORT --worker-id W
        [--queue Q ...] [--key API_KEY] [--visibility-ms 3000] [--once]

It fetches one job at a time, heartbeats it every second while it works, and
ends it by what its first argument asks: ``{"action": "ok", "value": V}`` acks
with ``{"doubled": 2V}``, ``{"action": "fail"}`` nacks (retryable), and
``{"action": "hang"}`` works for ever (until the process is killed). It prints
one JSON line per job it ends, for the test to read. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
from typing import Any


class Client:
    """The OJS worker endpoints over urllib, with the SDKs' headers."""

    def __init__(self, url: str, key: str | None) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Content-Type": "application/openjobspec+json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers=self.headers, method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")


def beat(client: Client, worker: str, job_id: str, vis: int, stop: threading.Event) -> None:
    """Heartbeat ``job_id`` every second until ``stop`` (the JS/Go SDKs' shape)."""
    while not stop.wait(1.0):
        client.post(
            "/ojs/v1/workers/heartbeat",
            {
                "worker_id": worker,
                "active_jobs": 1,
                "active_job_ids": [job_id],
                "visibility_timeout_ms": vis,
            },  # fmt: skip
        )


def work(client: Client, worker: str, job: dict[str, Any], vis: int) -> dict[str, Any]:
    """Do one job and end it; return what was sent."""
    stop = threading.Event()
    threading.Thread(target=beat, args=(client, worker, job["id"], vis, stop), daemon=True).start()
    arg = (job.get("args") or [{}])[0]
    try:
        if arg.get("action") == "hang":
            while True:
                time.sleep(3600)
        time.sleep(float(arg.get("work_secs", 0)))
        # Whose reservation this ends: the worker that fetched it, at the attempt it fetched.
        holder = {"job_id": job["id"], "worker_id": worker, "attempt": job["attempt"]}
        if arg.get("action") == "fail":
            error = {"code": "handler_error", "message": "asked to fail", "retryable": True}
            return client.post("/ojs/v1/workers/nack", {**holder, "error": error})
        result = {"doubled": 2 * arg.get("value", 0)}
        return client.post("/ojs/v1/workers/ack", {**holder, "result": result})
    finally:
        stop.set()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--worker-id", required=True)
    ap.add_argument("--queue", action="append", default=[])
    ap.add_argument("--key")
    ap.add_argument("--visibility-ms", type=int, default=3000)
    args = ap.parse_args(argv)
    client = Client(args.url, args.key)
    queues = args.queue or ["default"]
    while True:
        fetched = client.post(
            "/ojs/v1/workers/fetch",
            {
                "queues": queues,
                "count": 1,
                "worker_id": args.worker_id,
                "visibility_timeout_ms": args.visibility_ms,
            },  # fmt: skip
        )
        for job in fetched.get("jobs", []):
            print(json.dumps({"fetched": job["id"], "attempt": job["attempt"]}), flush=True)
            ended = work(client, args.worker_id, job, args.visibility_ms)
            print(json.dumps({"ended": job["id"], "state": ended.get("state")}), flush=True)
        if not fetched.get("jobs"):
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
