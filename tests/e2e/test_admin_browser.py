"""The admin in a real browser: headless Chromium driven by Selenium against a live server.

Log in, open the dead letters, replay all matching through the confirmation
page, open the overview; open endpoint health and the projects' budgets; a workflow run's
DAG; every Strait list and page at 1366 px with long names, none scrolling sideways.
CI runs it on Django 5.2 and on the latest Django 6. Screenshots go to a temporary
directory, or to ``STRAIT_SCREENSHOT_DIR`` when set (``docs/screenshots`` regenerates
the docs'), in a folder per Django version (``django-6.1``).
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import django
import django.contrib.admin
import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from django_strait.duties import registry
from django_strait.models import (
    BudgetLedger,
    EndpointCircuit,
    EndpointHealth,
    HealthSample,
    Job,
    JobRun,
    Project,
    RunRollup,
)
from django_strait.rules.resilience.budgets import today
from tests.conftest import Reply, run_worker
from tests.integration.factories import make_job, make_run

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: The machine's network is closed: these keep Chromium from reaching out at all.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1366,768",
)
PASSWORD = "browser-test-password"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.layout_free,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="Chromium is not installed: apt-get install chromium chromium-driver "
        "(.ci/run does it) for /usr/bin/chromium and /usr/bin/chromedriver",
    ),
]


@pytest.fixture
def browser(tmp_path: Path, monkeypatch) -> Iterator:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Selenium Manager must not look for drivers or browsers online: both are given.
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


@pytest.fixture
def admin_static(settings) -> None:
    # Without django.contrib.staticfiles the live server serves STATIC_ROOT: point it
    # at the admin's own files so that pages render styled.
    settings.STATIC_ROOT = str(Path(django.contrib.admin.__file__).parent / "static")


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go: a folder per Django version, the admin looks different in each."""
    version = f"django-{django.VERSION[0]}.{django.VERSION[1]}"
    target = Path(os.environ.get("STRAIT_SCREENSHOT_DIR") or tmp_path / "screenshots") / version
    target.mkdir(parents=True, exist_ok=True)
    return target


def seed() -> list[JobRun]:
    """Jobs, a few dead letters in two groups, throughput for the chart, a live worker."""
    billing = make_job("billing-webhook", queue="money", endpoint_url="http://127.0.0.1:9/hook")
    mail = make_job("send-welcome-mail", queue="mail")
    dead = [make_run(billing, status="dead_letter", error_type="http.503") for _ in range(3)]
    dead.append(make_run(mail, status="dead_letter", error_type="python.KeyError"))
    make_run(mail, status="queued", available_at=timezone.now() - dt.timedelta(seconds=40))
    make_run(billing, status="completed", attempts=2)
    now = timezone.now().replace(second=0, microsecond=0)
    for minute in range(60):
        at = now - dt.timedelta(minutes=minute)
        RunRollup.objects.create(minute=at, job=billing, status="completed", count=20 + minute % 7)
        if minute % 5 == 0:
            RunRollup.objects.create(minute=at, job=billing, status="queued", count=3)
        if minute % 12 == 0:
            RunRollup.objects.create(minute=at, job=mail, status="dead_letter", count=1)
    registry.register("worker-a", queues=["money", "mail"], concurrency=8, using="default")
    seed_protection()
    return dead


#: (path, success rate, failure rate, p95 ms, circuit state or None, score an hour ago -> now)
ENDPOINTS = [
    ("/hook", 0.99, 0.01, 180.0, "closed", (96, 98)),
    ("/crm/sync", 0.45, 0.4, 15000.0, "closed", (90, 50)),
    ("/payments", 0.05, 0.95, 29000.0, "open", (85, 4)),
    ("/search", 0.97, 0.0, 2400.0, None, (70, 95)),
]


def seed_protection() -> None:
    """Endpoints at each health level with an hour of history, a circuit open; three budgets."""
    now = timezone.now().replace(second=0, microsecond=0)
    for path, success, failure, p95, state, (start, end) in ENDPOINTS:
        url = f"http://127.0.0.1:9{path}"
        EndpointHealth.objects.create(
            endpoint_url=url, success_rate=success, failure_rate=failure, latency_p95_ms=p95,
            samples=1200,
        )  # fmt: skip
        if state:
            failures = 7 if state == "open" else 0
            EndpointCircuit.objects.create(endpoint_url=url, state=state, failures=failures)
        HealthSample.objects.bulk_create(
            HealthSample(
                endpoint_url=url,
                at=now - dt.timedelta(minutes=59 - m),
                score=start + (end - start) * m / 59 + 3 * math.sin(m / 4),
            )
            for m in range(60)
        )
    for name, budget, spent, reserved in [
        ("marketing", "50", "18.40", "2.10"),
        ("support-bot", "20", "15.75", "1.25"),
        ("research", "10", "9.90", "0.10"),
    ]:
        project = Project.objects.create(name=name, daily_budget=Decimal(budget))
        BudgetLedger.objects.create(
            project=project, day=today(), spent=Decimal(spent), reserved=Decimal(reserved)
        )
        BudgetLedger.objects.create(
            project=project, day=today() - dt.timedelta(days=1), spent=Decimal(budget) / 2
        )


def log_in(browser, base: str) -> None:
    from selenium.webdriver.common.by import By

    User.objects.create_superuser("operator", "operator@example.invalid", PASSWORD)
    browser.get(f"{base}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("operator")
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    assert browser.find_element(By.ID, "user-tools").text.upper().startswith("WELCOME")


def test_admin_browser__log_in_bulk_replay_dead_letters_and_open_the_overview(
    browser, live_server, admin_static, shots
):
    from selenium.webdriver.common.by import By

    dead = seed()
    base = live_server.url
    log_in(browser, base)

    browser.get(f"{base}/admin/django_strait/deadletter/?error_type=http.503")
    groups = browser.find_element(By.ID, "strait-dead-letter-groups").text
    assert "billing-webhook" in groups and "python.KeyError" in groups
    browser.get(f"{base}/admin/django_strait/deadletter/")
    browser.save_screenshot(str(shots / "dead-letters.png"))

    browser.get(f"{base}/admin/django_strait/deadletter/?error_type=http.503")
    browser.find_element(By.ID, "strait-replay-matching").click()
    assert "Replay 3 dead letters?" in browser.find_element(By.ID, "strait-replay-count").text
    browser.save_screenshot(str(shots / "replay-confirmation.png"))
    browser.find_element(By.ID, "strait-confirm-replay").click()

    assert "Replayed 3 runs." in browser.find_element(By.CSS_SELECTOR, "ul.messagelist").text
    statuses = dict(JobRun.objects.filter(pk__in=[r.pk for r in dead]).values_list("pk", "status"))
    assert sorted(statuses.values()) == ["dead_letter", "queued", "queued", "queued"]
    assert set(JobRun.objects.filter(status="queued", replay_count=1).values_list(
        "replayed_by", flat=True
    )) == {"operator"}  # fmt: skip

    browser.get(f"{base}/admin/")
    browser.find_element(
        By.CSS_SELECTOR, "#content-main a.section[href$='/django_strait/']"
    ).click()
    browser.find_element(By.PARTIAL_LINK_TEXT, "Overview").click()
    assert browser.find_elements(By.CSS_SELECTOR, "svg.strait-chart rect")
    assert "worker-a" in browser.find_element(By.ID, "strait-workers").text
    browser.save_screenshot(str(shots / "overview.png"))

    browser.get(f"{base}/admin/django_strait/job/")
    browser.find_element(By.ID, "toggle-nav-sidebar").click()  # room for every column
    for name, path in [
        ("jobs", "/admin/django_strait/job/"),
        ("trigger-now", f"/admin/django_strait/job/{dead[0].job_id}/trigger/"),
        ("run", f"/admin/django_strait/jobrun/{dead[-1].pk}/change/"),
    ]:
        browser.get(base + path)
        assert "Server Error" not in browser.title
        browser.save_screenshot(str(shots / f"{name}.png"))


def test_admin_browser__endpoint_health_and_budgets(browser, live_server, admin_static, shots):
    from selenium.webdriver.common.by import By

    seed_protection()
    base = live_server.url
    log_in(browser, base)

    browser.get(f"{base}/admin/django_strait/endpointhealth/")
    browser.find_element(By.ID, "toggle-nav-sidebar").click()  # room for every column
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert rows[0].text.startswith("http://127.0.0.1:9/payments")  # the least healthy first
    assert "unhealthy" in rows[0].text and "Open" in rows[0].text
    assert "degraded" in rows[1].text
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.strait-sparkline polyline")) == 4
    browser.save_screenshot(str(shots / "health.png"))

    browser.get(f"{base}/admin/django_strait/project/")
    bars = browser.find_elements(By.CSS_SELECTOR, "svg.strait-budget-bar")
    assert [b.get_attribute("data-state") for b in bars] == ["ok", "exhausted", "soft"]  # by name
    assert "18.40" in browser.find_element(By.ID, "result_list").text
    browser.save_screenshot(str(shots / "budgets.png"))

    browser.find_element(By.LINK_TEXT, "support-bot").click()
    ledger = browser.find_element(By.CSS_SELECTOR, "table.strait-ledger").text
    assert "15.75" in ledger and "10.00" in ledger  # today's spend, and yesterday's
    browser.get(f"{base}/admin/django_strait/job/overview/")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#strait-endpoint-health polyline")) == 4
    assert "support-bot" in browser.find_element(By.ID, "strait-budgets").text


def test_admin_browser__a_workflow_runs_dag(browser, live_server, admin_static, shots, burst):
    from selenium.webdriver.common.by import By

    from django_strait import define_workflow, trigger_workflow

    define_workflow(
        "order-fulfilment",
        steps=[
            {"name": "check", "job": "wf-step"},
            {"name": "reserve", "job": "wf-step", "depends_on": ["check"]},
            {"name": "charge", "job": "wf-fail", "depends_on": ["check"]},
            {"name": "ship", "job": "wf-step", "depends_on": ["reserve", "charge"]},
        ],
    )
    wr = trigger_workflow("order-fulfilment", {"order": 7})
    burst()
    base = live_server.url
    log_in(browser, base)

    browser.get(f"{base}/admin/django_strait/workflowrun/{wr.pk}/change/")
    boxes = browser.find_elements(By.CSS_SELECTOR, "svg.strait-dag g.strait-step")
    assert {b.get_attribute("data-step"): b.get_attribute("data-status") for b in boxes} == {
        "check": "completed", "reserve": "completed", "charge": "failed", "ship": "skipped",
    }  # fmt: skip
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.strait-dag line")) == 4
    tools = browser.find_element(By.CSS_SELECTOR, ".object-tools").text
    assert "Replay failed step" in tools and "Cancel" in tools
    browser.find_element(By.ID, "toggle-nav-sidebar").click()
    picture = browser.find_element(By.CSS_SELECTOR, "svg.strait-dag")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", picture)
    browser.save_screenshot(str(shots / "workflow.png"))


#: Each list an operator opens, by the name of its screenshot.
LISTS = {
    "list-runs": "/admin/django_strait/jobrun/",
    "list-dead-letters": "/admin/django_strait/deadletter/",
    "list-jobs": "/admin/django_strait/job/",
    "list-health": "/admin/django_strait/endpointhealth/",
    "list-circuits": "/admin/django_strait/endpointcircuit/",
    "list-workers": "/admin/django_strait/workerprocess/",
}


def widths(browser, selector: str) -> tuple[float, int, int, int]:
    """The table's right edge, the page's scroll width, the viewport's width without its
    scrollbar, and how far the box around the table scrolls sideways, in CSS pixels.

    Django's lists sit in a box that scrolls sideways (``.results``): a table wider than
    the room it is given scrolls there, not the page. Fitting means neither scrolls.
    """
    return browser.execute_script(
        "const t = document.querySelector(arguments[0]);"
        "if (!t) return [0, 0, 0, 0];"
        "const box = t.closest('.results') || t.parentElement;"
        "return [t.getBoundingClientRect().right, document.documentElement.scrollWidth,"
        " document.documentElement.clientWidth, box.scrollWidth - box.clientWidth];",
        selector,
    )


def test_admin_browser__every_list_fits_1366_px_and_the_run_timeline(
    browser, live_server, admin_static, shots, http_server
):
    from selenium.webdriver.common.by import By

    from tests.integration.stories import retried_held_completed

    seed()
    story = retried_held_completed(http_server, pause=0.4)
    make_run(story.job, status="dead_letter", error_type="http.404",
             error="Not Found: the partner has no /orders/1001/confirm route " * 5)  # fmt: skip
    base = live_server.url
    log_in(browser, base)
    browser.set_window_size(1366, 768)
    assert browser.execute_script("return window.innerWidth") <= 1366

    for name, path in LISTS.items():
        browser.get(base + path)
        assert "Server Error" not in browser.title, path
        table_right, page_width, viewport, scrolls = widths(browser, "#result_list")
        assert table_right, f"{path} shows no table"
        assert table_right <= viewport and page_width <= viewport, (path, table_right, page_width)
        assert scrolls <= 0, f"{path}: its table scrolls {scrolls} px sideways"
        assert browser.find_elements(By.CSS_SELECTOR, "#nav-sidebar")  # with the sidebar open
        browser.save_screenshot(str(shots / f"{name}.png"))

    browser.get(f"{base}/admin/django_strait/jobrun/{story.pk}/change/")
    title = browser.find_element(By.CSS_SELECTOR, "#content h1, #content h2").text
    assert title == f"run {story.pk} of partner-webhook (completed)"
    spans = browser.find_elements(By.CSS_SELECTOR, "svg.strait-timeline rect")
    kinds = [s.get_attribute("data-kind") for s in spans]
    assert kinds.count("attempt") == 3 and kinds.count("hold") == 1
    table_right, page_width, viewport, scrolls = widths(browser, "#attempts-group table")
    assert table_right <= viewport and page_width <= viewport, (table_right, page_width)
    assert scrolls <= 0, f"the attempts scroll {scrolls} px sideways"
    picture = browser.find_element(By.CSS_SELECTOR, "svg.strait-timeline")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'})", picture)
    browser.save_screenshot(str(shots / "run-timeline.png"))

    billing = Job.objects.get(name="billing-webhook")  # an hour of rollups from seed()
    browser.get(f"{base}/admin/django_strait/job/{billing.pk}/stats/")
    assert "Job billing-webhook: the last hour" in browser.title
    for section in ("success", "latency", "attempts", "outcomes"):
        assert browser.find_elements(By.CSS_SELECTOR, f"#strait-{section} svg.strait-time-chart")
    assert browser.find_elements(By.CSS_SELECTOR, "#strait-success polyline")
    browser.save_screenshot(str(shots / "job-charts.png"))

    # Auto-refresh: paused on one page, paused on the next, until resumed.
    browser.get(base + LISTS["list-runs"])
    toggle = browser.find_element(By.ID, "strait-refresh")
    assert toggle.text.startswith("PAUSE AUTO-REFRESH") or toggle.text.startswith("Pause")
    toggle.click()
    browser.get(base + LISTS["list-circuits"])
    assert browser.find_element(By.ID, "strait-refresh").get_attribute("data-paused") == "1"
    browser.find_element(By.ID, "strait-refresh").click()
    assert browser.find_element(By.ID, "strait-refresh").get_attribute("data-paused") == "0"


#: Names and addresses as long as a real project's: each cut to fit, the whole on hover.
LONG_JOB = "partner-order-confirmation-webhook-for-the-european-marketplace"
LONG_PATH = "/v2/partners/eu-central/orders/confirmations/webhooks/receive-and-acknowledge"

#: Where an element pokes past the viewport, or a box scrolls sideways: each as
#: [what, by how many px]. Elements the viewport never shows (display none) have no box.
OFFENDERS = """
const vw = document.documentElement.clientWidth, found = [];
const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
  + (el.className && typeof el.className === 'string'
     ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
if (document.documentElement.scrollWidth > vw)
  found.push(['the page', document.documentElement.scrollWidth - vw]);
for (const el of document.querySelectorAll('#container *')) {
  const box = el.getBoundingClientRect();
  if (!box.width || el.closest('#nav-sidebar')) continue;
  const style = getComputedStyle(el);
  if (box.right > vw + 0.5) found.push([name(el) + ' ends past the viewport', box.right - vw]);
  if (['auto', 'scroll'].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1)
    found.push([name(el) + ' scrolls sideways', el.scrollWidth - el.clientWidth]);
}
if (found.length) for (const th of document.querySelectorAll('#result_list thead th, .inline-group thead th'))
  found.push(['col ' + th.className, Math.round(th.getBoundingClientRect().width)]);
return found.slice(0, 30);
"""


def seed_long_names(server) -> dict[str, str]:
    """A job with a long name and a webhook to a long URL, runs of it, a workflow with a
    webhook, endpoints with long URLs: the pages the issue found too wide."""
    from django_strait import define_workflow, trigger, trigger_workflow

    server.routes[LONG_PATH] = lambda r: Reply(200, b'{"received": true, "queued_as": 8812}')
    hook = server.url(LONG_PATH)
    job = make_job(LONG_JOB, queue="partner-confirmations-eu", webhook_url=hook)
    done = trigger(job.name, {"order": 1001})
    make_run(job, status="dead_letter", error_type="http.503.partner-gateway-unavailable",
             error="Service Unavailable: " + "upstream partner gateway timed out; " * 6)  # fmt: skip
    define_workflow(
        "order-fulfilment-with-partner-confirmation",
        steps=[{"name": "confirm-the-order-with-the-partner-marketplace", "job": "wf-step"}],
        webhook_url=hook,
    )
    wr = trigger_workflow("order-fulfilment-with-partner-confirmation", {"order": 7})
    run_worker()
    for n in range(3):
        url = f"https://partner-api-{n}.eu-central-1.example.com{LONG_PATH}"
        EndpointHealth.objects.create(endpoint_url=url, success_rate=0.5, samples=40)
        EndpointCircuit.objects.create(endpoint_url=url, state="open", failures=7)
    return {"run": str(done.pk), "workflow_run": str(wr.pk), "job": str(job.pk)}


def every_page(ids: dict[str, str]) -> dict[str, str]:
    """Every list of the app, a page of each model that has rows, and the custom pages."""
    from django.contrib import admin
    from django.urls import reverse

    pages = {
        "home": reverse("admin:index"),
        "app": reverse("admin:app_list", args=["django_strait"]),
    }
    for model in admin.site._registry:  # the admin's registry has no public listing
        if model._meta.app_label != "django_strait":
            continue
        name = model._meta.model_name
        pages[f"list {name}"] = reverse(f"admin:django_strait_{name}_changelist")
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            pages[f"page {name}"] = reverse(f"admin:django_strait_{name}_change", args=[first.pk])
    run, wr, job = ids["run"], ids["workflow_run"], ids["job"]
    pages.update({
        "run with webhooks": reverse("admin:django_strait_jobrun_change", args=[run]),
        "workflow run with webhooks": reverse("admin:django_strait_workflowrun_change", args=[wr]),
        "overview": reverse("admin:django_strait_overview"),
        "job charts": reverse("admin:django_strait_job_stats", args=[job]),
        "trigger now": reverse("admin:django_strait_job_trigger", args=[job]),
        "replay all matching": reverse("admin:django_strait_deadletter_replay_matching"),
        "replay with a payload": reverse("admin:django_strait_jobrun_replay_payload", args=[run]),
    })  # fmt: skip
    return pages


#: The pages of that test kept as pictures (the rest are checked, not pictured).
PICTURED = {
    "home": "home.png",
    "list webhookdelivery": "list-webhook-deliveries.png",
    "list workflowrun": "list-workflow-runs.png",
    "run with webhooks": "run-webhooks.png",
    "workflow run with webhooks": "workflow-run-webhooks.png",
}


def test_admin_browser__no_list_or_page_scrolls_sideways_at_1366_px(
    browser, live_server, admin_static, shots, http_server
):
    from selenium.webdriver.common.by import By

    seed()
    ids = seed_long_names(http_server)
    base = live_server.url
    log_in(browser, base)
    browser.set_window_size(1366, 768)

    wide = {}
    for name, path in every_page(ids).items():
        browser.get(base + path)
        assert "Server Error" not in browser.title, path
        assert browser.find_elements(By.CSS_SELECTOR, "#nav-sidebar") or name in ("home", "app")
        offenders = browser.execute_script(OFFENDERS)
        if offenders:
            wide[name] = offenders
        if name in PICTURED:
            section = browser.find_elements(By.ID, "webhook_deliveries-group")
            if section:
                browser.execute_script("arguments[0].scrollIntoView({block: 'end'})", section[0])
            browser.save_screenshot(str(shots / PICTURED[name]))
    assert wide == {}, "\n".join(f"{k}: {v}" for k, v in wide.items())

    # Long values are cut, with the whole of them on hover.
    browser.get(f"{base}/admin/django_strait/jobrun/")
    cell = browser.find_element(By.CSS_SELECTOR, f"#result_list [title='{LONG_JOB}']")
    assert cell.text.endswith("…") or cell.value_of_css_property("text-overflow") == "ellipsis"
