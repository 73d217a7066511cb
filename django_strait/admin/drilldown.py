"""One job's or one endpoint's last hour: success rate, latency, attempts per run, per minute.

Linked from the overview, the job list and the endpoint health list. Like the
overview, every series comes from a rollup, a sample table or the last hour of
attempts (``admin.series``), never from a scan of run history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from django_strait import database
from django_strait.admin import charts, display, endpoints, series
from django_strait.admin.aliases import alias_for_key
from django_strait.admin.charts import Series
from django_strait.admin.overview import percentile_series
from django_strait.models import EndpointCircuit, EndpointHealth, HealthSample, Job
from django_strait.storage.rows import read, readable_instants

SUCCESS_COLOUR, RATIO_COLOUR, HEALTH_COLOUR = "#2e7d32", "#6a1b9a", "#447e9b"


@dataclass(frozen=True, slots=True)
class Panel:
    """One chart of a drill-down page, with what it shows."""

    slug: str
    title: str
    about: str
    chart: SafeString
    legend: SafeString


def job_stats_view(request: HttpRequest, site: AdminSite, job_id: int) -> HttpResponse:
    """The charts of one job."""
    _may_view(request)
    # Several databases: the job's (its id says which), read through that alias's reader.
    using = alias_for_key(job_id)
    job = get_object_or_404(Job.objects.using(using).only("pk", "name"), pk=job_id)
    where = database.reading(using)
    minutes = series.minutes_of(timezone.now())
    labels = series.labels(minutes)
    outcomes = series.outcome_counts(minutes, where.alias, job_id=job.pk)
    counts = series.RunCounts.of(minutes, outcomes)
    latency = series.latency(minutes, where.alias, job_id=job.pk)
    seen = sorted({s for by_status in outcomes.values() for s in by_status})
    stacked = [Series(s, [outcomes[m].get(s, 0) for m in minutes], charts.colour(s)) for s in seen]
    panels = [
        _success(labels, counts.success_rate(), "runs that finished each minute and completed"),
        _latency(labels, latency),
        _per_run(labels, counts.attempts_per_run(), "attempts ended per run finished"),
        Panel("outcomes", "Outcomes per minute", "where each attempt left its run",
              charts.time_chart(labels, stacked, stacked=True), charts.series_legend(stacked)),
    ]  # fmt: skip
    on = {"database": using} if database.placed() else {}
    links = [
        ("the job", reverse("admin:django_strait_job_change", args=[job.pk])),
        ("its runs",
         _filtered("admin:django_strait_jobrun_changelist", job__id__exact=job.pk, **on)),
        ("its dead letters",
         _filtered("admin:django_strait_deadletter_changelist", job__id__exact=job.pk, **on)),
    ]  # fmt: skip
    return _page(request, site, where, f"Job {job.name}: the last hour", panels, links, [
        ("finished in the hour", sum(counts.finished)),
        ("completed", sum(counts.completed)),
        ("attempts", sum(counts.attempts)),
    ])  # fmt: skip


def endpoint_stats_view(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """The charts of one endpoint URL (``?url=``)."""
    _may_view(request)
    url = request.GET.get("url", "")
    # What the page shows of the health row; one that cannot be read shows as unknown.
    shown = ("level", "score", "success_rate", "failure_rate")
    found = read(EndpointHealth.objects.filter(endpoint_url=url).only(*shown), stand_ins=True)
    health = found.rows[0] if found.rows else None
    if health is None and not EndpointCircuit.objects.filter(endpoint_url=url).exists():
        raise Http404("no endpoint with that URL has answered a run")
    # Its health samples: on the control database. Its attempts: on every alias, summed.
    where = database.reading(database.control_alias() if database.placed() else None)
    minutes = series.minutes_of(timezone.now())
    labels = series.labels(minutes)
    latency = _endpoint_latency(minutes, url, where)
    scores = dict(
        HealthSample.objects.using(where.alias)
        .filter(readable_instants("at"), endpoint_url=url, at__gte=minutes[0])
        .values_list("at", "score")
    )
    score = [Series("health score", [scores.get(m) for m in minutes], HEALTH_COLOUR)]
    panels = [
        _success(labels, latency.success_rate(), "attempts sent each minute that succeeded"),
        _latency(labels, latency),
        _per_run(labels, latency.attempts_per_run(), "attempts sent per run, each minute"),
        Panel("health", "Health score", "sampled once a minute; below 30 its runs are held",
              charts.time_chart(labels, score, top=100, empty="No samples yet."),
              charts.series_legend(score)),
    ]  # fmt: skip
    links = [
        ("endpoint health", _filtered("admin:django_strait_endpointhealth_changelist", q=url)),
        ("its circuit", _filtered("admin:django_strait_endpointcircuit_changelist", q=url)),
    ]
    level = (
        endpoints.show_level(health.level, health.score, health.success_rate, health.failure_rate)
        if health
        else "-"
    )
    return _page(request, site, where, f"Endpoint {url}: the last hour", panels, links, [
        ("health", level),
        ("attempts in the hour", sum(latency.attempts)),
        ("succeeded", sum(latency.succeeded)),
    ])  # fmt: skip


def _endpoint_latency(minutes: list, url: str, control: database.Reading) -> series.Latency:
    """The endpoint's attempts per minute: of the one database, or summed over every alias
    (p50 and p95 then the slowest alias's each minute)."""
    if not database.placed():
        return series.latency(minutes, control.alias, endpoint=url)
    readers = [database.reading(name).alias for name in database.aliases()]
    return series.slowest([series.latency(minutes, using, endpoint=url) for using in readers])


def _success(labels: list[str], values: list[float | None], about: str) -> Panel:
    line = [Series("success rate", values, SUCCESS_COLOUR)]
    return Panel("success", "Success rate per minute", f"percent of {about}",
                 charts.time_chart(labels, line, unit="%", top=100), charts.series_legend(line))  # fmt: skip


def _latency(labels: list[str], latency: series.Latency) -> Panel:
    lines = percentile_series(latency)
    return Panel("latency", "Latency per minute", "p50 and p95 of the attempts' durations",
                 charts.time_chart(labels, lines, unit=" ms"), charts.series_legend(lines))  # fmt: skip


def _per_run(labels: list[str], values: list[float | None], about: str) -> Panel:
    line = [Series("attempts per run", values, RATIO_COLOUR)]
    return Panel("attempts", "Attempts per run", about,
                 charts.time_chart(labels, line), charts.series_legend(line))  # fmt: skip


def _filtered(name: str, **params: Any) -> str:
    return f"{reverse(name)}?{urlencode(params)}"


def _may_view(request: HttpRequest) -> None:
    if not request.user.has_perm("django_strait.view_jobrun"):
        raise PermissionDenied


def _page(request, site, where, title, panels, links, summary) -> HttpResponse:
    context = {
        **site.each_context(request),
        "reading": where,
        "title": title,
        "app_config": apps.get_app_config("django_strait"),
        "panels": panels,
        "links": links,
        "summary": summary,
        "refresh_seconds": display.REFRESH_SECONDS,
    }
    return TemplateResponse(request, "admin/django_strait/stats.html", context)
