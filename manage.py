#!/usr/bin/env python
"""Run Django commands for the example project (``python manage.py strait_demo``)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run a Django management command with the example project's settings."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
