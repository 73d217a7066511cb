"""Every shell example of docs/commands.md runs as written and answers as the page shows."""

from __future__ import annotations

import datetime as dt
import re
import shlex
from dataclasses import dataclass
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_strait.models import EndpointCircuit, JobRun
from tests.conftest import ROOT
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = ROOT / "docs" / "commands.md"
#: The key prefix the page shows; the test uses the prefix it really gets.
SHOWN_PREFIX = "JBpMBokML5Ma"


@dataclass(frozen=True)
class Example:
    line: str
    #: The first line the page shows it printing ("" when the page shows none).
    says: str


def examples() -> list[Example]:
    """The ``python manage.py`` lines of the page's sh and console blocks, but synopses."""
    found, in_block, lines = [], False, PAGE.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("```"):
            in_block = line in ("```sh", "```console") and not in_block
            continue
        command = line.removeprefix("$ ")
        if in_block and command.startswith("python manage.py ") and not is_synopsis(command):
            after = lines[i + 1] if i + 1 < len(lines) else ""
            says = after.removeprefix("# ") if not after.startswith(("python", "$", "`")) else ""
            found.append(Example(command, says.strip()))
    return found


def is_synopsis(command: str) -> bool:
    """``[--burst]``, ``NAME``, ``PREFIX``: a form to fill, not a command to run."""
    return "[" in command or bool(re.search(r"\b[A-Z]{3,}\b", command.replace(SHOWN_PREFIX, "")))


def setting_of_the_page() -> None:
    """The jobs, runs and circuits the examples name."""
    make_job(name="send-invoice")
    billing = make_job(name="billing")
    for pk in (812, 815, 990):
        make_run(billing, status="dead_letter", error_type="http.503", pk=pk)
    mail = make_job(name="mail")
    ended = [
        (billing, "canceled"),
        (billing, "completed"),
        (billing, "completed"),
        (mail, "discarded"),
    ]
    old = [make_run(job, status=status).pk for job, status in ended]
    JobRun.objects.filter(pk__in=old).update(finished_at=timezone.now() - dt.timedelta(days=40))
    now = timezone.now()
    EndpointCircuit.objects.create(
        endpoint_url="https://api.example.com/hook", state="open", failures=5, opened_at=now
    )
    EndpointCircuit.objects.create(endpoint_url="https://billing.example.com/charge", failures=2)


def run(line: str) -> str:
    out = StringIO()
    args = shlex.split(line)[2:]  # past "python manage.py"
    call_command(*args, stdout=out, stderr=out)
    return out.getvalue()


def test_commands_page__has_examples_of_every_command():
    commands = {e.line.split()[2] for e in examples()}
    assert {"strait_sync", "strait_replay", "strait_prune", "strait_circuits",
            "strait_api_key"} <= commands  # fmt: skip


def test_commands_page__every_example_runs_and_says_what_the_page_shows():
    setting_of_the_page()
    prefix = SHOWN_PREFIX
    for example in examples():
        line = example.line.replace(SHOWN_PREFIX, prefix)
        output = run(line)
        if "strait_api_key create" in line:
            prefix = re.search(r"\(([A-Za-z0-9]+)\)", output).group(1)
        expected = example.says.replace(SHOWN_PREFIX, prefix)
        first_words = " ".join(expected.split()[:2])
        assert first_words in " ".join(output.split()), (line, expected, output)
