"""Charts for the admin overview, drawn server-side as inline SVG (no JavaScript).

Each function takes plain values and returns safe markup: labels are escaped,
numbers are formatted here, so a job or queue name cannot inject markup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from django_strait.rules.states import RunStatus

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


# -- time series with axes (overview and drill-down pages) ------------------------------


@dataclass(frozen=True, slots=True)
class Series:
    """One named line (or stacked layer) of a time chart: a value per minute, None for none."""

    name: str
    values: Sequence[float | None]
    colour: str = OTHER_COLOUR


#: Room around a time chart's plot for its axis labels.
PLOT_LEFT, PLOT_BOTTOM, PLOT_TOP, PLOT_RIGHT = 56, 22, 10, 10
#: Y-axis ticks a chart aims for, and the minutes between x-axis labels.
Y_TICKS, X_LABEL_EVERY = 5, 10


def nice_top(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at or above ``value`` (1 for nothing)."""
    if value <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    return next(m * scale for m in (1, 2, 2.5, 5, 10) if m * scale >= value)


def time_chart(
    labels: Sequence[str],
    series: Sequence[Series],
    *,
    stacked: bool = False,
    unit: str = "",
    top: float | None = None,
    width: int = 900,
    height: int = 200,
    empty: str = "Nothing in this window.",
) -> SafeString:
    """Draw series over time (one label per minute): y ticks, time labels, lines or stacked bars."""
    if not labels or not any(v for s in series for v in s.values if v):
        return _empty(width, 60, empty)
    sums = [sum(s.values[i] or 0 for s in series) for i in range(len(labels))]
    highest = max(sums) if stacked else max(v or 0 for s in series for v in s.values)
    top = top or nice_top(highest)
    plot_w, plot_h = width - PLOT_LEFT - PLOT_RIGHT, height - PLOT_TOP - PLOT_BOTTOM
    step = plot_w / len(labels)

    def y(value: float) -> float:
        return PLOT_TOP + plot_h * (1 - min(value, top) / top)

    marks = stacked_layers(series, step, y) if stacked else lines(series, step, y)
    return format_html(
        '<svg class="strait-chart strait-time-chart" role="img" viewBox="0 0 {} {}" '
        'width="100%" style="max-width: {}px">{}{}{}</svg>',
        width, height, width, _y_axis(top, unit, y, width), _x_axis(labels, step, height),
        mark_safe(marks),
    )  # fmt: skip


def lines(series: Sequence[Series], step: float, y) -> str:
    """One polyline per series; a minute with no value breaks the line."""
    drawn = []
    for s in series:
        runs: list[list[str]] = [[]]
        for i, v in enumerate(s.values):
            if v is None:
                runs.append([])
            else:
                runs[-1].append(f"{_f(PLOT_LEFT + (i + 0.5) * step)},{_f(y(v))}")
        for points in filter(None, runs):
            drawn.append(
                format_html(
                    '<polyline points="{}" fill="none" stroke="{}" stroke-width="2" '
                    'data-series="{}"><title>{}</title></polyline>',
                    " ".join(points),
                    s.colour,
                    s.name,
                    s.name,
                )  # fmt: skip
            )
            if len(points) == 1:  # a lone minute: a dot, or it would not show
                x, at = points[0].split(",")
                drawn.append(
                    format_html(
                        '<circle cx="{}" cy="{}" r="3" fill="{}"></circle>', x, at, s.colour
                    )
                )
    return "".join(drawn)


def stacked_layers(series: Sequence[Series], step: float, y) -> str:
    """One bar per minute, each series a layer, in the given order from the bottom up."""
    rects = []
    for i in range(len(series[0].values) if series else 0):
        base = 0.0
        for s in series:
            v = s.values[i] or 0
            if not v:
                continue
            rects.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}" data-series="{}">'
                    "<title>{}: {}</title></rect>",
                    _f(PLOT_LEFT + i * step + 1),
                    _f(y(base + v)),
                    _f(max(step - 2, 1)),
                    _f(y(base) - y(base + v)),
                    s.colour,
                    s.name,
                    s.name,
                    _number(v),
                )  # fmt: skip
            )
            base += v
    return "".join(rects)


def _y_axis(top: float, unit: str, y, width: int) -> SafeString:
    ticks = [top * i / Y_TICKS for i in range(Y_TICKS + 1)]
    return format_html_join(
        "",
        '<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="{3}"></line>'
        '<text x="{4}" y="{5}" font-size="11" text-anchor="end">{6}{7}</text>',
        (
            (
                PLOT_LEFT,
                _f(y(t)),
                width - PLOT_RIGHT,
                "#999" if t == 0 else "#e0e0e0",
                PLOT_LEFT - 4,
                _f(y(t) + 4),
                _number(t),
                unit,
            )  # fmt: skip
            for t in ticks
        ),
    )


def _x_axis(labels: Sequence[str], step: float, height: int) -> SafeString:
    every = X_LABEL_EVERY if len(labels) > X_LABEL_EVERY * 2 else 1
    shown = [(i, label) for i, label in enumerate(labels) if i % every == 0 or i == len(labels) - 1]
    return format_html_join(
        "",
        '<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text>',
        ((_f(PLOT_LEFT + (i + 0.5) * step), height - 6, label) for i, label in shown),
    )


def series_legend(series: Sequence[Series]) -> SafeString:
    """A legend for a time chart: a coloured square and the name of each series."""
    return format_html_join(
        " ",
        '<span class="strait-legend"><span style="background: {}">&nbsp;&nbsp;</span> {}</span>',
        ((s.colour, s.name) for s in series),
    )
