"""A task's exception as an attempt error, and back as Django's TaskError parts."""

from __future__ import annotations

import pytest
from django.conf import settings

from django_strait.apps import _uses_strait_tasks
from django_strait.transitions.decisions import ERROR_MAX_CHARS

if not settings.HAS_TASK_FRAMEWORK:
    pytest.skip(
        "needs Django's task framework (Django 6, or django-tasks)", allow_module_level=True
    )

from django_strait.tasks.calls import error_message, split_error  # noqa: E402


class PaymentDeclined(Exception):
    pass


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_error_message__round_trips_the_class_path_and_traceback():
    message = error_message(raised(PaymentDeclined("card 4242")))
    path, tb = split_error(message)
    assert path == f"{__name__}.PaymentDeclined"
    assert tb.startswith("Traceback (most recent call last):")
    assert tb.rstrip().endswith("PaymentDeclined: card 4242")


def test_error_message__a_builtin_is_named_under_builtins():
    path, _ = split_error(error_message(raised(ValueError("x"))))
    assert path == "builtins.ValueError"


def test_error_message__a_long_traceback_keeps_its_end_within_the_error_limit():
    message = error_message(raised(PaymentDeclined("y" * 10_000)))
    assert len(message) <= ERROR_MAX_CHARS
    _, tb = split_error(message)
    assert tb.startswith("…") and tb.rstrip().endswith("y" * 50)


@pytest.mark.parametrize(
    "error", ["", "ValueError: boom", "python.timeout: ran past", "no separator here"]
)
def test_split_error__other_errors_are_not_read_as_task_errors(error):
    assert split_error(error) is None


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        (None, False),
        ({}, False),
        ({"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}, False),
        ({"x": {"BACKEND": "django_strait.tasks.StraitBackend"}}, True),
        ({"x": "not a dict"}, False),
    ],
)
def test_apps__autodiscovers_tasks_only_when_a_strait_backend_is_configured(tasks, expected):
    assert _uses_strait_tasks(tasks) is expected
