"""Fixtures for the settings tests: a clean STRAIT_* environment, set per test."""

from __future__ import annotations

import os

import pytest

from django_strait.conf import strait_settings


@pytest.fixture
def clean_strait_env(monkeypatch):
    """No STRAIT_* variables from the calling shell; settings re-read around the test."""
    for name in list(os.environ):
        if name.startswith("STRAIT_"):
            monkeypatch.delenv(name)
    strait_settings.reload()
    yield
    strait_settings.reload()


@pytest.fixture
def setenv(monkeypatch):
    """Set one environment variable and re-read the settings."""

    def set_and_reload(name: str, value: str) -> None:
        monkeypatch.setenv(name, value)
        strait_settings.reload()

    return set_and_reload
