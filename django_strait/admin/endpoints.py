"""What the admin shows of an endpoint URL wherever it appears: its circuit, its health, its history.

Lists annotate each row with its endpoint's circuit state and health (one
subquery each on the unique ``endpoint_url``, so a page of any length stays one
query), and read the sparklines of a page's endpoints in one query. Over several
databases, a list of rows off the control database (where circuits and health
live) reads them there for the page's rows instead (:func:`read_protection`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db.models import CharField, FloatField, OuterRef, Subquery, Value
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from django_strait.admin import charts, display
from django_strait.models import CircuitState, EndpointCircuit, EndpointHealth, HealthSample
from django_strait.models.health import health_subqueries
from django_strait.storage.rows import readable_instants

#: How far back a sparkline looks (the sampler writes one score a minute).
SPARKLINE_WINDOW = dt.timedelta(minutes=60)

#: Names of the annotations below, so that lists can sort by them.
CIRCUIT_STATE = "strait_circuit_state"
HEALTH_SCORE = "strait_health_score"
HEALTH_LEVEL = "strait_health_level"
HEALTH_SUCCESS = "strait_health_success"
HEALTH_FAILURE = "strait_health_failure"

#: From this share of answers that were neither 2xx nor failures (so 4xx), a level that is
#: not unhealthy needs a word: the endpoint answers, but refuses.
MOSTLY_REFUSED_FROM = 0.5

CIRCUIT_COLOURS = {
    CircuitState.CLOSED: "#2e7d32",
    CircuitState.HALF_OPEN: "#ef6c00",
    CircuitState.OPEN: "#c62828",
}


def circuit_annotation(url_field: str = "endpoint_url") -> dict[str, Subquery]:
    """Return ``annotate()`` keywords for the circuit state of each row's URL."""
    rows = EndpointCircuit.objects.filter(endpoint_url=OuterRef(url_field))
    return {CIRCUIT_STATE: Subquery(rows.values("state")[:1])}


def health_annotation(url_field: str = "endpoint_url") -> dict[str, Subquery]:
    """Return ``annotate()`` keywords for the health score and level of each row's URL."""
    score, level = health_subqueries(url_field)
    rows = EndpointHealth.objects.filter(endpoint_url=OuterRef(url_field))
    success = Subquery(rows.values("success_rate")[:1])
    failure = Subquery(rows.values("failure_rate")[:1])
    return {HEALTH_SCORE: score, HEALTH_LEVEL: level, HEALTH_SUCCESS: success,
            HEALTH_FAILURE: failure}  # fmt: skip


def unread_annotation() -> dict[str, Value]:
    """The annotations above, empty: for rows whose database does not hold circuits and
    health (several databases); :func:`read_protection` fills them in for a page."""
    text, number = CharField(), FloatField()
    return {
        CIRCUIT_STATE: Value(None, output_field=text),
        HEALTH_SCORE: Value(None, output_field=number),
        HEALTH_LEVEL: Value(None, output_field=text),
        HEALTH_SUCCESS: Value(None, output_field=number),
        HEALTH_FAILURE: Value(None, output_field=number),
    }


def read_protection(rows: Iterable[object], using: str, url_field: str = "endpoint_url") -> None:
    """Set the annotations above on ``rows`` from the circuits and health on ``using``
    (the control database's reader): two queries for a page of any length."""
    rows = list(rows)
    urls = {url for row in rows if (url := getattr(row, url_field, None))}
    if not urls:
        return
    health = {
        url: (score, level, success, failure)
        for url, score, level, success, failure in EndpointHealth.objects.using(using)
        .filter(endpoint_url__in=urls)
        .values_list("endpoint_url", "score", "level", "success_rate", "failure_rate")
    }
    circuits = dict(
        EndpointCircuit.objects.using(using)
        .filter(endpoint_url__in=urls)
        .values_list("endpoint_url", "state")
    )
    for row in rows:
        url = getattr(row, url_field, None)
        score, level, success, failure = health.get(url, (None, None, None, None))
        setattr(row, HEALTH_SCORE, score)
        setattr(row, HEALTH_LEVEL, level)
        setattr(row, HEALTH_SUCCESS, success)
        setattr(row, HEALTH_FAILURE, failure)
        setattr(row, CIRCUIT_STATE, circuits.get(url))


def refused_note(level: str | None, success_rate: float | None, failure_rate: float | None) -> str:
    """Why an endpoint that rarely succeeds can still read healthy, or "" when it needs no word."""
    if not level or success_rate is None or failure_rate is None or level == "unhealthy":
        return ""
    if 1 - success_rate - failure_rate < MOSTLY_REFUSED_FROM:
        return ""
    return (
        f"only {success_rate:.0%} of its answers were 2xx, yet it is {level}: the rest were "
        "4xx (such as 404), which are the request's fault, not the endpoint's, so they do "
        "not lower its health. Check the job's URL and its runs' errors."
    )


def show_level(
    level: str | None,
    score: float | None = None,
    success_rate: float | None = None,
    failure_rate: float | None = None,
) -> SafeString | str:
    """Return a level (and its score) in the level's colour; "-" when unscored.

    With the rates given, a level that is not unhealthy over mostly 4xx answers
    says so ("healthy (69), mostly 4xx (?)"), the reason in its tooltip.
    """
    if not level:
        return "-"
    colour = charts.LEVEL_COLOURS.get(level, charts.OTHER_COLOUR)
    text = level if score is None else f"{level} ({score:.0f})"
    note = refused_note(level, success_rate, failure_rate)
    if note:
        return format_html(
            '<span class="strait-level strait-level-{}" style="color: {}" title="{}">{}, '
            '<span class="strait-refused" style="color: #c62828">mostly 4xx (?)</span></span>',
            level, colour, note, text,
        )  # fmt: skip
    return format_html(
        '<span class="strait-level strait-level-{}" style="color: {}">{}</span>',
        level, colour, text,
    )  # fmt: skip


def show_circuit(url: str, state: str | None) -> SafeString | str:
    """Return a circuit state linked to its row on the circuits page ("-" when none)."""
    if not state:
        return "-"
    link = reverse("admin:django_strait_endpointcircuit_changelist")
    return format_html(
        '<a class="strait-circuit strait-circuit-{}" href="{}?{}" style="color: {}">{}</a>',
        state, link, urlencode({"endpoint_url__exact": url}),
        CIRCUIT_COLOURS.get(state, charts.OTHER_COLOUR), display.label(CircuitState, state),
    )  # fmt: skip


def read_sparklines(
    urls: Iterable[str], now: dt.datetime, using: str | None = None
) -> dict[str, list[float]]:
    """Return the scores of each URL over the sparkline window, oldest first: one query."""
    rows = (
        HealthSample.objects.using(using)
        .filter(readable_instants("at"), endpoint_url__in=set(urls), at__gt=now - SPARKLINE_WINDOW)
        .order_by("endpoint_url", "at")
        .values_list("endpoint_url", "score")
    )
    found: dict[str, list[float]] = {}
    for url, score in rows:
        found.setdefault(url, []).append(score)
    return found
