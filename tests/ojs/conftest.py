"""A live django-strait OJS server on 127.0.0.1 with its duties running, for the OJS tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest
from django.db import connections
from django.utils import timezone

from django_strait.duties.reaper import Reaper
from django_strait.duties.scheduler import Scheduler
from tests.ojs.lean_server import serving_lean

#: How often the duties thread runs the reaper (visibility timeouts of a few seconds).
REAPER_EVERY = 0.2


@dataclass
class Duties:
    """The reaper and the scheduler, in a thread, as a worker's duty runner would run them."""

    stop: threading.Event
    thread: threading.Thread
    errors: list[BaseException]


def _run_duties(stop: threading.Event, errors: list[BaseException]) -> None:
    reaper = Reaper.from_settings(interval=REAPER_EVERY)
    scheduler = Scheduler.from_settings()
    try:
        while not stop.wait(REAPER_EVERY):
            now = timezone.now()
            reaper.run_once(now)
            scheduler.run_once(now)
    except BaseException as exc:  # noqa: BLE001 (reported by the fixture, in the test)
        errors.append(exc)
    finally:
        connections.close_all()


@pytest.fixture
def ojs_settings(settings):
    """The OJS binding open (no API key) with test directives, as the conformance suite needs.

    The visibility timeout is the default (30 minutes, the worker protocol's): the cron
    overlap case holds a fetched job 130 s without a heartbeat and expects it still active.
    """
    settings.STRAIT = {**settings.STRAIT, "OJS_REQUIRE_AUTH": False, "OJS_TEST_DIRECTIVES": True}
    return settings


@pytest.fixture
def ojs_server(live_server, ojs_settings) -> Iterator[str]:
    """The live server's base URL on 127.0.0.1, with the reaper and scheduler running."""
    stop, errors = threading.Event(), []
    thread = threading.Thread(target=_run_duties, args=(stop, errors), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{urlsplit(live_server.url).port}"
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the duties thread did not stop"
    assert not errors, f"a duty failed: {errors[0]!r}"


@pytest.fixture
def lean_server(ojs_settings, transactional_db) -> Iterator[str]:
    """The OJS fast door under uvicorn on 127.0.0.1 (``lean_server.serving_lean``), with
    the reaper and scheduler running."""
    stop, errors = threading.Event(), []
    duties = threading.Thread(target=_run_duties, args=(stop, errors), daemon=True)
    duties.start()
    try:
        with serving_lean() as base:
            yield base
    finally:
        stop.set()
        duties.join(timeout=30)
    assert not duties.is_alive(), "the duties thread did not stop"
    assert not errors, f"a duty failed: {errors[0]!r}"
