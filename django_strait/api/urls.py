"""Mount with ``path("api/strait/", include("django_strait.api.urls"))``."""

from __future__ import annotations

from django.urls import path

from django_strait.api import views

app_name = "django_strait_api"

urlpatterns = [
    # Any string, not a slug: a name that cannot exist still gets a JSON 404 naming it.
    path("jobs/<str:name>/trigger/", views.TriggerView.as_view(), name="trigger"),
    path("runs/<int:pk>/", views.RunView.as_view(), name="run"),
]
