"""What a worker's log line shows of an attempt's error: one whole line, cut with an ellipsis."""

from __future__ import annotations

import pytest

from django_strait.worker.recorder import LOG_ERROR_CHARS, first_line


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        ("ValueError: bad", "ValueError: bad"),
        (
            "app.tasks.Boom: failed\n\nTraceback (most recent call last):\n  File",
            "app.tasks.Boom: failed",
        ),
        ("", ""),
        ("x" * LOG_ERROR_CHARS, "x" * LOG_ERROR_CHARS),
        ("x" * (LOG_ERROR_CHARS + 1), "x" * (LOG_ERROR_CHARS - 1) + "…"),
    ],
)
def test_first_line__of_an_error(error, shown):
    assert first_line(error) == shown
