"""The REST API (Django REST framework): ``include("django_strait.api.urls")``."""
