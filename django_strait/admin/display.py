"""How list cells read: coloured status badges, long values cut with the whole on hover, times.

Lists must fit a 1366 px laptop screen (issue 15): a cell shows what an operator
scans for and keeps the rest in its tooltip or on the detail page.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import Choices
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_strait.admin.charts import OTHER_COLOUR, STATUS_COLOURS

#: Run statuses that charts do not colour (they are not where an attempt leaves a run).
BADGE_COLOURS = {
    **STATUS_COLOURS,
    "dequeued": "#0277bd",
    "executing": "#1565c0",
    "waiting": "#78909c",
    "queued": "#8d6e00",
}


def label(choices: type[Choices], value: Any) -> str:
    """The label of a stored choice; the stored text itself when it is none of them (a row
    written around validation), so that showing it never fails."""
    try:
        return str(choices(value).label)
    except ValueError:
        return str(value)


def badge(text: str, colour: str | None = None) -> SafeString:
    """A status as a small coloured label (white on the status colour)."""
    return format_html(
        '<span class="strait-badge" style="background: {}; color: #fff; padding: 1px 6px; '
        'border-radius: 8px; white-space: nowrap">{}</span>',
        colour or BADGE_COLOURS.get(text, OTHER_COLOUR),
        text.replace("_", " "),
    )


#: A cut value's box: never wider than ``length`` average characters (0.55 em each
#: in the admin's sans-serif), whatever its letters, cut by the browser with "…"
#: (issue 39: a count of characters let wide letters push a list past 1366 px).
CUT_STYLE = (
    "display: inline-block; max-width: {:.1f}em; overflow: hidden; text-overflow: ellipsis; "
    "white-space: nowrap; vertical-align: bottom"
)
EM_PER_CHARACTER = 0.55
#: The same, over up to ``lines`` lines (free text such as an error), the last one cut.
CUT_LINES_STYLE = (
    "display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: {}; "
    "max-width: {:.1f}em; overflow: hidden; overflow-wrap: anywhere; white-space: normal"
)
#: The most of a cut value a page carries in its cell (the whole of it is in the title).
CUT_TEXT_MAX = 500


def cut(text: str | None, length: int = 40, *, lines: int = 1) -> SafeString | str:
    """A long value cut to about ``length`` characters with "…", the whole of it on hover.

    ``lines`` > 1 lets free text wrap over that many lines of ``length``, the last cut.
    """
    if not text:
        return "-"
    if len(text) <= length:
        return text
    width = length * EM_PER_CHARACTER
    style = CUT_STYLE.format(width) if lines == 1 else CUT_LINES_STYLE.format(lines, width)
    return format_html('<span title="{}" style="{}">{}</span>', text, style, text[:CUT_TEXT_MAX])


def moment(at: dt.datetime | None, now: dt.datetime | None = None) -> SafeString | str:
    """A time with seconds, short: ``14:02:09`` today, ``Nov 23 14:02:09`` before; full on hover."""
    if at is None:
        return "-"
    local = timezone.localtime(at)
    today = timezone.localtime(now or timezone.now()).date()
    shown = f"{local:%H:%M:%S}" if local.date() == today else f"{local:%b %d %H:%M:%S}"
    return format_html(
        '<span title="{}" style="white-space: nowrap">{}</span>',
        f"{local:%Y-%m-%d %H:%M:%S.%f}"[:-3] + f" {local:%Z}",
        shown,
    )


#: Seconds between reloads of a list that changes by itself (runs, circuits, workers).
REFRESH_SECONDS = 15


class AutoRefresh:
    """A model admin mixin: its list reloads every ``refresh_seconds``; the operator can pause it."""

    refresh_seconds = REFRESH_SECONDS

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None):
        context = {"strait_refresh_seconds": self.refresh_seconds, **(extra_context or {})}
        return super().changelist_view(request, context)  # type: ignore[misc]
