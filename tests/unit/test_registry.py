"""The registry of code that may run: @handler and @job names, looked up, never imported."""

from __future__ import annotations

import sys

import pytest

from django_strait import handler, job
from django_strait.rules.handlers import find_handler, handlers


@handler
def shared_resize(payload):
    return "resized"


@handler(name="thumbnails")
def named_thumbnails(payload):
    return "thumbs"


def test_handler__registers_a_function_under_its_dotted_path_unchanged():
    assert find_handler(f"{__name__}.shared_resize") is shared_resize
    assert shared_resize({}) == "resized"


def test_handler__registers_under_the_name_given():
    assert find_handler("thumbnails") is named_thumbnails
    assert find_handler(f"{__name__}.named_thumbnails") is None


def test_job__registers_its_function_as_a_handler_too():
    @job(name="registry-test-job")
    def local_job(payload):
        return 1

    found = find_handler(
        f"{__name__}.test_job__registers_its_function_as_a_handler_too.<locals>.local_job"
    )
    assert found is local_job.func


def test_handler__refuses_a_name_another_function_holds():
    def other(payload):
        return None

    with pytest.raises(ValueError, match="already registered by .*shared_resize"):
        handler(other, name=f"{__name__}.shared_resize")


@pytest.mark.parametrize("name", ["", "  ", "x" * 301, 42])
def test_handler__refuses_a_bad_name(name):
    with pytest.raises(ValueError, match="non-empty string of at most 300"):
        handler(shared_resize, name=name)


@pytest.mark.parametrize("name", ["os.system", "tests.security.canary.run", None, 7, ""])
def test_find_handler__finds_nothing_for_names_never_registered(name):
    sys.modules.pop("tests.security.canary", None)
    assert find_handler(name) is None
    assert "tests.security.canary" not in sys.modules


def test_unknown__lists_what_is_registered_and_how_to_register():
    message = handlers.unknown("os.system")
    assert message.startswith("'os.system' is not a registered handler (registered: ")
    # The first 20 names, sorted (the suite registers more, e.g. tests/testapp/tasks.py).
    assert handlers.names()[0] in message
    assert message.endswith("register it in code with @job or @handler")


# Schedules declared in code


def _declare(**options):
    from django_strait.services.registry import ScheduleSpec, spec_of

    return spec_of(
        _declare, name="x", queue=None, priority=None, max_attempts=None, retry=None,
        timeout=None, description=None, schedule=ScheduleSpec(**options),
    ).columns  # fmt: skip


def test_a_declared_schedule__brings_its_time_zone_and_policies_with_their_defaults():
    assert _declare(schedule="@daily") == {
        "schedule": "@daily", "timezone": "UTC", "schedule_missed": "run_once",
        "schedule_overlap": "allow",
    }  # fmt: skip
    assert _declare(schedule=" 0 9 * * 1-5 ", timezone="Europe/Paris", missed="skip") == {
        "schedule": "0 9 * * 1-5", "timezone": "Europe/Paris", "schedule_missed": "skip",
        "schedule_overlap": "allow",
    }  # fmt: skip
    assert _declare() == {}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"schedule": "every day"}, r"@job\(schedule=\.\.\.\): 'every day' is not a cron"),
        ({"schedule": "0 0 30 2 *"}, r"never fires"),
        ({"schedule": "@daily", "timezone": "Mars/Olympus"}, r"@job\(timezone=\.\.\.\)"),
        ({"timezone": "Europe/Paris"}, r"@job\(timezone=\.\.\.\) needs schedule="),
        (
            {"schedule": "@daily", "overlap": "never"},
            r"schedule_overlap='never'.*'allow' or 'skip'",
        ),
    ],
)
def test_a_bad_declared_schedule__is_refused_at_import_naming_the_option(options, message):
    with pytest.raises(ValueError, match=message):
        _declare(**options)
