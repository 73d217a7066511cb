from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"

    def ready(self) -> None:
        from tests.testapp import jobs  # noqa: F401  (registers the @job handlers)
