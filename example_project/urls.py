"""URLs of the example project: the admin, Strait's REST API and the demo endpoints."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/strait/", include("django_strait.api.urls")),
    path("demo/", include("example_project.demo.urls")),
]
