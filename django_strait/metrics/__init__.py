"""Prometheus metrics: an opt-in view over the database, and a worker's own counters.

``metrics_view`` (mounted with ``include("django_strait.metrics.urls")``) reports
gauges read from the database at scrape time; ``WorkerMetrics`` counts what one
worker process does and serves it on its own port (``run_strait_worker
--metrics-port``). See docs/observability.md.
"""

from __future__ import annotations

from django_strait.metrics.database import DatabaseCollector
from django_strait.metrics.view import metrics_view
from django_strait.worker.metrics import WorkerMetrics

__all__ = ["DatabaseCollector", "WorkerMetrics", "metrics_view"]
