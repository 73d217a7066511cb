"""Charts for the admin overview, drawn server-side as inline SVG (no JavaScript).

Each function takes plain values and returns safe markup: labels are escaped,
numbers are formatted here, so a job or queue name cannot inject markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from django_strait.states import RunStatus

#: Colours by the status an attempt moved its run to (greens good, reds bad).
STATUS_COLOURS: Mapping[str, str] = {
    RunStatus.COMPLETED: "#2e7d32",
    RunStatus.QUEUED: "#f9a825",  # a retry: the attempt failed, the run will try again
    RunStatus.FAILED: "#c62828",
    RunStatus.DEAD_LETTER: "#6a1b9a",
    RunStatus.DISCARDED: "#757575",
    RunStatus.CANCELED: "#90a4ae",
    RunStatus.SYSTEM_FAILED: "#ef6c00",
}
OTHER_COLOUR = "#455a64"


@dataclass(frozen=True, slots=True)
class Column:
    """One bar of a stacked bar chart: a label and counts by series."""

    label: str
    counts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def colour(series: str) -> str:
    """Return the colour a series is drawn in."""
    return STATUS_COLOURS.get(series, OTHER_COLOUR)


def stacked_bars(
    columns: Sequence[Column], series: Sequence[str], *, width: int = 720, height: int = 160
) -> SafeString:
    """Draw one stacked bar per column, series in the given order, bottom up."""
    top = max((c.total for c in columns), default=0)
    if not columns or top == 0:
        return _empty(width, height, "Nothing finished in this window.")
    step = width / len(columns)
    bars = [_stack(i * step, step, column, series, top, height) for i, column in enumerate(columns)]
    return format_html(
        '<svg class="strait-chart" role="img" width="{}" height="{}" viewBox="0 0 {} {}">'
        '<title>up to {} per column</title>{}'
        '<text x="0" y="10" font-size="10">{}</text></svg>',
        width, height + 2, width, height + 2, top, mark_safe("".join(bars)), top,
    )  # fmt: skip


def _stack(x: float, step: float, column: Column, series: Sequence[str], top: int, height: int):
    y = float(height)
    rects = []
    for name in series:
        count = column.counts.get(name, 0)
        if not count:
            continue
        h = height * count / top
        y -= h
        rects.append(
            format_html(
                '<rect x="{}" y="{}" width="{}" height="{}" fill="{}">'
                "<title>{}: {} {}</title></rect>",
                _f(x + 1),
                _f(y),
                _f(max(step - 2, 1)),
                _f(h),
                colour(name),
                column.label,
                count,
                name,
            )  # fmt: skip
        )
    return "".join(rects)


def horizontal_bars(
    rows: Sequence[tuple[str, float]], *, unit: str = "", width: int = 480, bar: int = 18
) -> SafeString:
    """Draw one labelled horizontal bar per (label, value) row."""
    top = max((value for _, value in rows), default=0)
    if not rows:
        return _empty(width, bar * 2, "None.")
    label_width = 180
    scale = (width - label_width - 60) / top if top else 0
    lines = format_html_join(
        "",
        '<text x="0" y="{}" font-size="12">{}</text>'
        '<rect x="{}" y="{}" width="{}" height="{}" fill="#447e9b"></rect>'
        '<text x="{}" y="{}" font-size="12">{}{}</text>',
        (
            (
                i * bar + bar - 5,
                label[:28],
                label_width,
                i * bar + 2,
                _f(value * scale),
                bar - 4,
                _f(label_width + value * scale + 4),
                i * bar + bar - 5,
                _number(value),
                unit,
            )  # fmt: skip
            for i, (label, value) in enumerate(rows)
        ),
    )
    height = bar * len(rows)
    return format_html(
        '<svg class="strait-chart" role="img" width="{}" height="{}" viewBox="0 0 {} {}">{}</svg>',
        width, height, width, height, lines,
    )  # fmt: skip


def legend(series: Sequence[str]) -> SafeString:
    """Return a legend: a coloured square and the name of each series."""
    return format_html_join(
        " ",
        '<span class="strait-legend"><span style="background: {}">&nbsp;&nbsp;</span> {}</span>',
        ((colour(name), name) for name in series),
    )


def _f(value: float) -> str:
    # format_html escapes its arguments to text first, so numbers are formatted here.
    return f"{value:.1f}"


def _number(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or float(value).is_integer() else f"{value:.1f}"


def _empty(width: int, height: int, text: str) -> SafeString:
    return format_html(
        '<svg class="strait-chart" role="img" width="{}" height="{}">'
        '<text x="8" y="{}" font-size="12" fill="#777">{}</text></svg>',
        width, height, height // 2, text,
    )  # fmt: skip


#: Sparkline and level colours, by health level.
LEVEL_COLOURS: Mapping[str, str] = {
    "healthy": "#2e7d32",
    "degraded": "#f9a825",
    "unhealthy": "#c62828",
}


def sparkline(
    scores: Sequence[float], *, level: str = "", width: int = 120, height: int = 24
) -> SafeString:
    """Draw health scores (0-100, oldest first) as a line, in the colour of ``level``."""
    if not scores:
        return format_html(
            '<svg class="strait-sparkline" role="img" width="{}" height="{}">'
            '<text x="0" y="{}" font-size="10" fill="#777">no samples yet</text></svg>',
            width, height, height // 2 + 4,
        )  # fmt: skip
    step = width / max(len(scores) - 1, 1)
    points = " ".join(
        f"{_f(i * step)},{_f(height - 1 - (height - 2) * _clamp(s) / 100)}"
        for i, s in enumerate(scores)
    )
    return format_html(
        '<svg class="strait-sparkline" role="img" width="{}" height="{}" viewBox="0 0 {} {}">'
        "<title>score over the last {} minute(s): {} to {}, now {}</title>"
        '<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"></polyline></svg>',
        width, height, width, height, len(scores), _number(min(scores)), _number(max(scores)),
        _number(scores[-1]), points, LEVEL_COLOURS.get(level, OTHER_COLOUR),
    )  # fmt: skip


def _clamp(score: float) -> float:
    return min(max(score, 0.0), 100.0)


@dataclass(frozen=True, slots=True)
class BudgetDay:
    """A project's day in figures: what is spent, what is reserved, of which budget."""

    spent: Decimal
    reserved: Decimal
    budget: Decimal
    soft_limit_ratio: float

    @property
    def committed(self) -> Decimal:
        return self.spent + self.reserved

    @property
    def used(self) -> float:
        """Committed as a share of the budget (1.0 with no budget: nothing more fits)."""
        return float(self.committed / self.budget) if self.budget > 0 else 1.0

    @property
    def state(self) -> str:
        """``ok``, ``soft`` (past the soft limit) or ``exhausted``, as the worker decides."""
        if self.committed >= self.budget:
            return "exhausted"
        if self.committed >= self.budget * Decimal(str(self.soft_limit_ratio)):
            return "soft"
        return "ok"


#: Budget bar colours by state: spent is drawn solid, reserved lighter.
BUDGET_COLOURS: Mapping[str, tuple[str, str]] = {
    "ok": ("#2e7d32", "#a5d6a7"),
    "soft": ("#ef6c00", "#ffcc80"),
    "exhausted": ("#c62828", "#ef9a9a"),
}


def budget_bar(day: BudgetDay, *, width: int = 160, height: int = 14) -> SafeString:
    """Draw spent (solid) and reserved (lighter) against the budget, a tick at the soft limit.

    The bar's length is the budget, or what is committed when an endpoint reported
    more than was reserved; its colour is the day's state.
    """
    solid, light = BUDGET_COLOURS[day.state]
    base = max(day.budget, day.committed)
    scale = width / float(base) if base > 0 else 0.0
    soft_x = float(day.budget) * min(max(day.soft_limit_ratio, 0.0), 1.0) * scale
    return format_html(
        '<svg class="strait-budget-bar" role="img" width="{}" height="{}" viewBox="0 0 {} {}"'
        ' data-state="{}"><title>{} spent + {} reserved of {} ({}%)</title>'
        '<rect x="0" y="0" width="{}" height="{}" fill="#eceff1"></rect>'
        '<rect x="0" y="0" width="{}" height="{}" fill="{}"></rect>'
        '<rect x="{}" y="0" width="{}" height="{}" fill="{}"></rect>'
        '<line x1="{}" y1="0" x2="{}" y2="{}" stroke="#455a64" stroke-dasharray="2,2"></line>'
        "</svg>",
        width, height, width, height, day.state, amount(day.spent), amount(day.reserved),
        amount(day.budget), f"{day.used * 100:.0f}", width, height,
        _f(float(day.spent) * scale), height, solid,
        _f(float(day.spent) * scale), _f(float(day.reserved) * scale), height, light,
        _f(soft_x), _f(soft_x), height,
    )  # fmt: skip


def amount(value: Decimal) -> str:
    """Return a cost without trailing zeros, and with two decimals at least (12.50, 0.0025)."""
    text = f"{value.normalize():f}"
    whole, _, fraction = text.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"
