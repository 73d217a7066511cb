"""The demo endpoints, mounted under ``/demo/``."""

from __future__ import annotations

from django.urls import path

from example_project.demo import views

app_name = "demo"

urlpatterns = [
    path("flaky/", views.flaky, name="flaky"),
    path("gone/", views.gone, name="gone"),
]
