"""A run's story on a time axis: its attempts, the waits between them and why, its holds.

``build`` is pure (values in, a ``Timeline`` out, ``now`` given); ``draw`` turns
it into inline SVG and ``table`` into rows with times to the millisecond. Holds
come from ``RunHold`` periods; the ``short_circuited`` attempt rows that older
development versions wrote for each hold are folded into periods the same way,
so a run held for minutes shows one band, not a row per cooldown.

Why a run waited between two attempts is read from what the first one left:
an answer of 429 or 503 may have carried ``Retry-After`` (honoured, but not
stored), anything else waited out the retry policy's backoff.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from django_strait.admin.charts import LEVEL_COLOURS, OTHER_COLOUR

#: Attempt bars by outcome.
OUTCOME_COLOURS = {
    "succeeded": LEVEL_COLOURS["healthy"],
    "failed": LEVEL_COLOURS["unhealthy"],
    "timed_out": "#ad1457",
    "system_failed": "#ef6c00",
    "oom": "#6a1b9a",
}
#: Hold bands by the first part of their reason.
HOLD_COLOURS = {
    "circuit": "#8d6e63",
    "health": "#ff7043",
    "limit": "#5c6bc0",
    "budget": "#00897b",
    # Left for a worker that has the job's handler (a rolling deploy).
    "handler": "#7cb342",
}
WAIT_COLOUR = "#90a4ae"
SHORT_CIRCUITED = "short_circuited"
#: Answers whose ``Retry-After`` the worker honours (docs/retry.md).
RETRY_AFTER_STATUSES = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class Span:
    """One thing on the axis: an attempt, a hold period or a wait."""

    kind: str  # "attempt", "hold" or "wait"
    start: dt.datetime
    end: dt.datetime
    #: What it was: the attempt's outcome, the hold's or the wait's reason.
    label: str
    number: int = 0
    endpoint: str = ""
    status_code: int | None = None
    error_type: str = ""
    error: str = ""
    #: Holds: how many claims held the run in this period.
    times: int = 1
    worker: str = ""

    @property
    def duration(self) -> dt.timedelta:
        return max(self.end - self.start, dt.timedelta(0))

    @property
    def colour(self) -> str:
        if self.kind == "attempt":
            return OUTCOME_COLOURS.get(self.label, OTHER_COLOUR)
        if self.kind == "hold":
            return HOLD_COLOURS.get(self.label.split(".")[0], OTHER_COLOUR)
        return WAIT_COLOUR


@dataclass(frozen=True, slots=True)
class Timeline:
    """A run's spans, oldest first, and the axis they are drawn on."""

    start: dt.datetime
    end: dt.datetime
    spans: tuple[Span, ...] = field(default_factory=tuple)

    def of(self, kind: str) -> list[Span]:
        """Return the spans of one kind, oldest first."""
        return [s for s in self.spans if s.kind == kind]


def build(run: Any, attempts: Iterable[Any], holds: Iterable[Any], *, now: dt.datetime) -> Timeline:
    """Lay out a run's attempts, hold periods and waits on one axis.

    ``run`` has ``created_at``, ``finished_at``, ``status`` and ``available_at``;
    ``attempts`` are ``RunAttempt`` rows, ``holds`` ``RunHold`` rows (any order).
    """
    rows = sorted(attempts, key=lambda a: (a.started_at or run.created_at, a.number, a.pk))
    real = [_attempt(a) for a in rows if a.outcome != SHORT_CIRCUITED]
    legacy = [a for a in rows if a.outcome == SHORT_CIRCUITED]
    end = run.finished_at or now
    periods = [_period(h) for h in holds] + _fold_short_circuits(legacy)
    bands = [_band(p, real, end) for p in sorted(periods, key=lambda p: p[0])]
    spans = sorted([*real, *bands, *_waits(run, real, end)], key=lambda s: (s.start, s.kind))
    last = max([end, *(s.end for s in spans)])
    return Timeline(min([run.created_at, *(s.start for s in spans)]), last, tuple(spans))


def _attempt(a: Any) -> Span:
    start = a.started_at
    finish = a.finished_at or start + dt.timedelta(milliseconds=a.duration_ms)
    return Span(
        "attempt", start, finish, a.outcome, a.number, a.endpoint, a.status_code,
        a.error_type, a.error, worker=a.worker,
    )  # fmt: skip


#: A hold period before it is placed: start, last hold, until, reason, error, endpoint, times.
Period = tuple[dt.datetime, dt.datetime, dt.datetime, str, str, str, int, int]


def _period(h: Any) -> Period:
    return (h.started_at, h.last_held_at, h.until, h.reason, h.error, h.endpoint, h.times,
            h.after_attempt)  # fmt: skip


def _fold_short_circuits(rows: Sequence[Any]) -> list[Period]:
    """One period per run of consecutive short-circuited rows with one error type and number."""
    periods: list[Period] = []
    for a in rows:
        at = a.started_at
        last = periods[-1] if periods else None
        if last is not None and (last[3], last[7]) == (a.error_type, a.number):
            periods[-1] = (last[0], at, at, last[3], a.error, a.endpoint, last[6] + 1, a.number)
        else:
            periods.append((at, at, at, a.error_type, a.error, a.endpoint, 1, a.number))
    return periods


def _band(p: Period, attempts: Sequence[Span], end: dt.datetime) -> Span:
    """A hold lasts from its first hold until the run's next attempt (or its end, or until)."""
    start, last_held, until, reason, error, endpoint, times, after = p
    following = [a.start for a in attempts if a.start >= start]
    stop = following[0] if following else max(last_held, min(until, end))
    return Span("hold", start, stop, reason, after, endpoint, None, reason, error, times)


def _waits(run: Any, attempts: Sequence[Span], end: dt.datetime) -> list[Span]:
    """The gaps: before the first attempt, between attempts (why), after the last while queued."""
    waits = []
    first = attempts[0].start if attempts else end
    if first > run.created_at:
        waits.append(Span("wait", run.created_at, first, "queued until claimed"))
    for before, after in zip(attempts, attempts[1:], strict=False):
        if after.start > before.end:
            waits.append(Span("wait", before.end, after.start, wait_reason(before),
                              before.number))  # fmt: skip
    if attempts and run.status == "queued" and end > attempts[-1].end:
        waits.append(Span("wait", attempts[-1].end, end, wait_reason(attempts[-1]),
                          attempts[-1].number))  # fmt: skip
    return waits


def wait_reason(attempt: Span) -> str:
    """Why a run waited after ``attempt``: Retry-After where the answer may have sent it, else backoff."""
    if attempt.status_code in RETRY_AFTER_STATUSES:
        return f"retry delay after {attempt.status_code} (Retry-After when sent, else backoff)"
    if attempt.label == "oom":
        return "retried at the next memory preset"
    cause = attempt.error_type or attempt.label
    return f"backoff after {cause}" if cause else "backoff"


# -- drawing -----------------------------------------------------------------------------

WIDTH = 1000
LEFT = 80
ROW = 26
TICKS = 6


def draw(timeline: Timeline) -> SafeString:
    """Draw the timeline: attempts, holds and waits in three lanes over a time axis."""
    total = max((timeline.end - timeline.start).total_seconds(), 0.001)
    scale = (WIDTH - LEFT - 10) / total

    def x(at: dt.datetime) -> float:
        return LEFT + (at - timeline.start).total_seconds() * scale

    lanes = (("attempts", "attempt"), ("holds", "hold"), ("waits", "wait"))
    shapes = []
    for row, (title, kind) in enumerate(lanes):
        y = 8 + row * ROW
        shapes.append(format_html('<text x="0" y="{}" font-size="12">{}</text>', y + 13, title))
        for s in timeline.of(kind):
            shapes.append(_bar(s, x(s.start), max(x(s.end) - x(s.start), 3), y, kind))
    height = 8 + len(lanes) * ROW
    axis = _axis(timeline, height, x)
    return format_html(
        '<svg class="strait-timeline" role="img" viewBox="0 0 {} {}" width="100%" '
        'style="max-width: {}px"><title>run timeline from {} to {}</title>{}{}</svg>',
        WIDTH, height + 30, WIDTH, stamp(timeline.start), stamp(timeline.end),
        mark_safe("".join(shapes)), axis,
    )  # fmt: skip


def _bar(s: Span, x: float, w: float, y: int, kind: str) -> SafeString:
    h, top = (18, y) if kind != "wait" else (4, y + 7)
    return format_html(
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}" data-kind="{}">'
        "<title>{}</title></rect>",
        f"{x:.1f}", top, f"{w:.1f}", h, s.colour, kind, describe(s),
    )  # fmt: skip


def _axis(timeline: Timeline, y: int, x: Any) -> SafeString:
    step = (timeline.end - timeline.start) / TICKS
    ticks = [timeline.start + step * i for i in range(TICKS + 1)]
    marks = format_html_join(
        "",
        '<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#999"></line>'
        '<text x="{0}" y="{3}" font-size="11" text-anchor="{5}">{4}</text>',
        (
            (f"{x(t):.1f}", y, y + 5, y + 18, clock(t, step), "end" if i == TICKS else "middle")
            for i, t in enumerate(ticks)
        ),
    )
    return format_html(
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999"></line>{}',
        LEFT, y, WIDTH - 10, y, marks,
    )  # fmt: skip


def describe(s: Span) -> str:
    """One line about a span, for its tooltip and the table."""
    took = duration_text(s.duration)
    if s.kind == "attempt":
        code = f" {s.status_code}" if s.status_code else ""
        error = f" {s.error_type}" if s.error_type else ""
        return f"attempt {s.number}: {s.label}{code}{error} in {took} at {s.endpoint or 'handler'}"
    if s.kind == "hold":
        return f"held ({s.label}) {s.times} time(s) for {took}: {s.error}"
    return f"waited {took}: {s.label}"


def stamp(at: dt.datetime) -> str:
    """A time to the millisecond, in UTC: ``2026-11-24 11:22:15.123``."""
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def clock(at: dt.datetime, step: dt.timedelta) -> str:
    """An axis label: milliseconds when the ticks are closer than a second."""
    text = at.astimezone(dt.UTC).strftime("%H:%M:%S.%f")
    return text[:-3] if step < dt.timedelta(seconds=1) else text[:8]


def duration_text(span: dt.timedelta) -> str:
    """``412 ms``, ``3.2 s``, ``4 min 10 s``, ``2 h 5 min``."""
    ms = span.total_seconds() * 1000
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    return f"{minutes // 60} h {minutes % 60} min"


LEGEND = (
    *((f"attempt {name}", colour) for name, colour in OUTCOME_COLOURS.items()),
    *((f"held: {name}", colour) for name, colour in HOLD_COLOURS.items()),
    ("waiting", WAIT_COLOUR),
)


def legend() -> SafeString:
    """The colours of the timeline, named."""
    return format_html_join(
        " ",
        '<span class="strait-legend"><span style="background: {}">&nbsp;&nbsp;</span> {}</span>',
        ((colour, name) for name, colour in LEGEND),
    )


def rows(timeline: Timeline) -> list[dict[str, Any]]:
    """The spans as table rows, oldest first: what, when (ms), how long, what happened, where."""
    return [
        {
            "kind": s.kind,
            "what": _what(s),
            "colour": s.colour,
            "started": stamp(s.start),
            "lasted": duration_text(s.duration),
            "said": _said(s),
            "full": describe(s),
            "endpoint": s.endpoint,
        }
        for s in timeline.spans
    ]


def _what(s: Span) -> str:
    if s.kind == "attempt":
        return f"attempt {s.number}"
    return "hold" if s.kind == "hold" else "wait"


def _said(s: Span) -> str:
    if s.kind == "attempt":
        parts = [s.label, str(s.status_code or ""), s.error_type, s.error[:200]]
        return " ".join(p for p in parts if p)
    if s.kind == "hold":
        return f"{s.label}, held {s.times} time(s): {s.error[:200]}"
    return s.label
