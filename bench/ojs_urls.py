"""The OJS binding alone, for bench/bench_ojs.py."""

from django.urls import include, path

urlpatterns = [path("", include("django_strait.ojs.urls"))]
