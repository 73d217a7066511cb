"""``uvicorn django_strait.ojs.asgi:application``: the OJS fast door in front of the project.

Sets Django up (``DJANGO_SETTINGS_MODULE``), then serves the OJS worker endpoints
through :class:`django_strait.ojs.lean.LeanOjs` and every other request through the
project's Django ASGI application (docs/ojs.md, "The fast door").
"""

from django.core.asgi import get_asgi_application

django_application = get_asgi_application()

from django_strait.ojs.lean import LeanOjs  # noqa: E402 - after Django is set up

application = LeanOjs(django_application)
