"""One worker process's own metrics, served on its own port (``--metrics-port``)."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from django_strait.rules.presets import OOM_OUTCOME
from django_strait.signals import workflow_completed, workflow_failed

if TYPE_CHECKING:
    from django_strait.storage.values import Record, Recorded
    from django_strait.transitions.sending import Sent

logger = logging.getLogger(__name__)

#: A probe path's answer: its HTTP status and one line of text.
Probe = Callable[[], tuple[int, str]]


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per scrape or probe, none of them keeping the process alive."""

    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        """Log nothing per request: probes come every few seconds."""


#: Seconds from a run's end to its webhook's delivery: from at once to a day of retries.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400)
#: Attempt durations in seconds: from a fast handler up to long HTTP calls.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class WorkerMetrics:
    """Counters and histograms of what this worker did, on a registry of its own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.runs_finished = Counter(
            "strait_worker_runs_finished",
            "Attempts recorded, by job and the status the run moved to.",
            ["job", "status"],
            registry=self.registry,
        )
        self.attempt_duration = Histogram(
            "strait_worker_attempt_duration_seconds",
            "How long attempts took, by job and attempt outcome.",
            ["job", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.claimed = Counter(
            "strait_worker_claimed", "Runs this worker claimed.", registry=self.registry
        )
        self.lost = Counter(
            "strait_worker_results_lost",
            "Results not recorded: the run was canceled, replayed or reaped meanwhile.",
            registry=self.registry,
        )
        self.workflow_runs_finished = Counter(
            "strait_worker_workflow_runs_finished",
            "Workflow runs that reached a final status in this process, by workflow and status "
            "(completed, failed; a cancel is a person's, counted where it is asked).",
            ["workflow", "status"],
            registry=self.registry,
        )
        self.webhooks = Counter(
            "strait_worker_webhook_deliveries",
            "Webhook delivery attempts, by event and outcome (delivered, retrying, failed).",
            ["event", "outcome"],
            registry=self.registry,
        )
        self.webhook_lag = Histogram(
            "strait_worker_webhook_lag_seconds",
            "From the transition that owed a webhook to its delivery, by event.",
            ["event"],
            buckets=LAG_BUCKETS,
            registry=self.registry,
        )
        self.oom_kills = Counter(
            "strait_worker_oom_kills",
            "Process attempts killed for memory (outcome oom), by job and the preset they ran at.",
            ["job", "preset"],
            registry=self.registry,
        )
        self.processes = Gauge(
            "strait_worker_processes",
            "Child processes alive in this worker's pool (process jobs).",
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "strait_worker_in_flight", "Runs this worker is executing.", registry=self.registry
        )
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def observe_claimed(self, n: int) -> None:
        """Count ``n`` runs claimed."""
        if n:
            self.claimed.inc(n)

    def observe_recorded(
        self,
        records: Sequence[Record],
        recorded: Recorded,
        job_names: Mapping[int, str] | None = None,
    ) -> None:
        """Count the recorded attempts: each moved run by status, each duration by outcome.

        ``job_names`` maps run id to job name; a run it lacks is labelled ``job=""``.
        """
        names = job_names or {}
        for rec in records:
            status = recorded.moved.get(rec.run_id)
            if status is None:
                continue
            job = names.get(rec.run_id, "")
            self.runs_finished.labels(job, status).inc()
            self.attempt_duration.labels(job, rec.outcome).observe(rec.duration_ms / 1000)
            if rec.outcome == OOM_OUTCOME:
                self.oom_kills.labels(job, rec.preset).inc()
        if recorded.lost:
            self.lost.inc(len(recorded.lost))

    def observe_webhooks(self, sent: Sequence[Sent]) -> None:
        """Count delivery attempts by outcome; time each delivery from its transition."""
        for s in sent:
            settled = s.settled
            outcome = "retrying" if settled.status == "pending" else settled.status
            self.webhooks.labels(s.due.event, outcome).inc()
            if settled.delivered_at is not None:
                lag = (settled.delivered_at - s.due.created_at).total_seconds()
                self.webhook_lag.labels(s.due.event).observe(max(lag, 0.0))

    def observe_workflow(self, *, workflow: str, status: str, **signal: Any) -> None:
        """Count a workflow run that reached ``status`` (a receiver of the workflow signals)."""
        self.workflow_runs_finished.labels(workflow, status).inc()

    def watch_workflows(self) -> None:
        """Count workflow runs that complete or fail in this process (the record's, the reaper's)."""
        for signal in (workflow_completed, workflow_failed):
            signal.connect(self.observe_workflow, dispatch_uid=self._uid)

    @property
    def _uid(self) -> str:
        return f"strait-worker-metrics-{id(self)}"

    def watch_in_flight(self, count: Callable[[], int]) -> None:
        """Report ``count()`` as the in-flight gauge, called at each scrape."""
        self.in_flight.set_function(count)

    def watch_processes(self, count: Callable[[], int]) -> None:
        """Report ``count()`` as the pool's gauge of child processes, called at each scrape."""
        self.processes.set_function(count)

    def serve(
        self, port: int, addr: str = "127.0.0.1", probes: Mapping[str, Probe] | None = None
    ) -> int:
        """Serve these metrics over HTTP on a daemon thread; return the bound port.

        ``probes``: more paths (``/livez``), each answered by a function giving its
        HTTP status and a line of text; every other path serves the metrics.
        """
        metrics = make_wsgi_app(self.registry)
        routes = dict(probes or {})

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            probe = routes.get(environ.get("PATH_INFO", ""))
            if probe is None:
                return metrics(environ, start_response)
            status, text = probe()
            body = f"{text}\n".encode()
            headers = [("Content-Type", "text/plain; charset=utf-8"),
                       ("Content-Length", str(len(body)))]  # fmt: skip
            start_response(f"{status} {HTTPStatus(status).phrase}", headers)
            return [body]

        server_class = _Server6 if ":" in addr else _Server
        self._server = make_server(addr, port, app, server_class, handler_class=_Quiet)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        bound = self._server.server_address[1]
        host = f"[{addr}]" if ":" in addr else addr
        logger.info("worker metrics at http://%s:%s/metrics%s", host, bound,
                    "".join(f", {path}" for path in routes))  # fmt: skip
        return bound

    def close(self) -> None:
        """Stop serving and counting (a no-op when ``serve`` was never called)."""
        for signal in (workflow_completed, workflow_failed):
            signal.disconnect(dispatch_uid=self._uid)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
