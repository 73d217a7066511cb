"""URLs for the metrics view: ``path("metrics/", include("django_strait.metrics.urls"))``."""

from __future__ import annotations

from django.urls import path

from django_strait.metrics.view import metrics_view

app_name = "strait_metrics"

urlpatterns = [path("", metrics_view, name="metrics")]
