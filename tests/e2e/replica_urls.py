"""tests.urls and the metrics view: the pages tests/e2e/replica_story.py reads."""

from django.urls import include, path

from tests.urls import urlpatterns as _pages

urlpatterns = [*_pages, path("metrics/", include("django_strait.metrics.urls"))]
