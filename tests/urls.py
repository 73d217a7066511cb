from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/strait/", include("django_strait.api.urls")),
    path("", include("django_strait.ojs.urls")),
]
