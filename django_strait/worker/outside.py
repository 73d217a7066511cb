"""What a worker shows and hears outside its loop: metrics and probes, and new-run wake-ups."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django_strait.storage import backend
from django_strait.storage.wakeup import Listener
from django_strait.worker.config import WorkerConfig
from django_strait.worker.metrics import WorkerMetrics
from django_strait.worker.probes import Answer, Probes

logger = logging.getLogger(__name__)


def serve_metrics(
    cfg: WorkerConfig,
    probes: Probes,
    *,
    in_flight: Callable[[], int],
    children: Callable[[], int],
) -> tuple[WorkerMetrics | None, int | None]:
    """Serve the worker's metrics, /livez and /readyz on ``cfg.metrics_port``; return them
    and the port bound (None, None: not served)."""
    if cfg.metrics_port is None:
        return None, None
    metrics = WorkerMetrics()
    metrics.watch_in_flight(in_flight)
    metrics.watch_processes(children)
    metrics.watch_workflows()
    port = metrics.serve(
        cfg.metrics_port,
        cfg.metrics_bind,
        probes={
            "/livez": lambda: _answered(probes.live(time.monotonic())),
            "/readyz": lambda: _answered(probes.ready(time.monotonic())),
        },
    )
    return metrics, port


def listen(cfg: WorkerConfig, wake: Callable[[], None]) -> Listener | None:
    """Call ``wake`` (from the listener's thread) when runs are queued, where the database
    can tell (else the producer polls: None)."""
    if cfg.listen_alias is None or not backend(cfg.listen_alias).can_listen:
        logger.info("polling for new runs every %ss", cfg.poll_interval)
        return None
    listener = Listener(cfg.listen_alias, cfg.queues, wake)
    listener.start()
    return listener


def _answered(answer: Answer) -> tuple[int, str]:
    return answer.status, answer.why
