"""Every command line quoted in README.md and docs/ names a command and flags that exist.

A line such as ``manage.py run_strait_worker --queues emails`` in a page fails
for the reader who types it; here each quoted ``manage.py <command>`` (and each
bare ``run_strait_worker``, ``strait_replay``, ...) is read up to the end of its line or
code span, and each ``--flag`` on it is looked up in the command's own argparse
parser (its subcommands' too). Nothing is run: docs/commands.md's examples are
run by tests/integration/test_command_docs.py.
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Commands of other tools that a page names to compare or migrate from.
FOREIGN = {"db_worker", "procrastinate"}
#: Commands of the example project (not an installed app of the test settings).
EXAMPLE_COMMANDS = {"strait_demo": "example_project.demo.management.commands.strait_demo"}
_SPAN = re.compile(r"`([^`]+)`")
#: django-strait's own commands, which pages also quote without ``manage.py`` before them.
OURS = sorted(p.stem for p in (ROOT / "django_strait/management/commands").glob("[a-z]*.py"))
_COMMAND = re.compile(rf"(?:manage\.py\s+([a-z_]+)|(?<![\w.])({'|'.join(OURS)})(?![\w.]))")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class Quoted:
    page: str
    line: int
    command: str
    text: str

    @property
    def flags(self) -> list[str]:
        # A comment ("# every queue") or the next shell command ends what the command reads.
        text = re.split(r"\s#\s|&&|;", self.text)[0]
        return _FLAG.findall(text)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.command} {self.text.strip()}"


def quoted(path: Path) -> Iterator[Quoted]:
    """Each command quoted in ``path``'s code blocks and inline code spans."""
    in_block = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        for code in [line] if in_block else _SPAN.findall(line):
            yield from _commands(path.relative_to(ROOT).as_posix(), number, code)


def _commands(page: str, number: int, code: str) -> Iterator[Quoted]:
    matches = list(_COMMAND.finditer(code))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(code)
        command = match.group(1) or match.group(2)
        yield Quoted(page, number, command, code[match.end() : end])


def everything_quoted() -> list[Quoted]:
    return [q for page in PAGES for q in quoted(page)]


def parser_of(command: str) -> argparse.ArgumentParser:
    if command in EXAMPLE_COMMANDS:
        cmd = importlib.import_module(EXAMPLE_COMMANDS[command]).Command()
    else:
        cmd = load_command_class(get_commands()[command], command)
    return cmd.create_parser("manage.py", command)


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of its subcommands' parsers."""
    found: set[str] = set()
    for action in parser._actions:  # argparse lists its options nowhere public
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= options_of(sub)
    return found


def test_pages__quote_the_commands_this_test_reads():
    # The reader must find something: if the patterns broke, every page would "pass".
    commands = {q.command for q in everything_quoted()}
    assert {"run_strait_worker", "strait_replay", "strait_api_key", "migrate"} <= commands
    flags = {f for q in everything_quoted() for f in q.flags}
    assert {"--queue", "--burst", "--dry-run", "--scope"} <= flags


def test_every_quoted_command__exists():
    known = set(get_commands()) | set(EXAMPLE_COMMANDS) | FOREIGN
    unknown = [str(q) for q in everything_quoted() if q.command not in known]
    assert unknown == []


def test_every_quoted_flag__is_an_option_of_its_command():
    wrong = []
    options: dict[str, set[str]] = {}
    for q in everything_quoted():
        if q.command in FOREIGN or q.command not in set(get_commands()) | set(EXAMPLE_COMMANDS):
            continue
        if q.command not in options:
            options[q.command] = options_of(parser_of(q.command))
        wrong += [f"{q} ({flag})" for flag in q.flags if flag not in options[q.command]]
    assert wrong == []


@pytest.mark.parametrize(
    ("code", "flags"),
    [
        ("manage.py run_strait_worker --queues emails  # every queue", ["--queues"]),
        ("run_strait_worker --queue a --queue b && echo --nope", ["--queue", "--queue"]),
        ("manage.py strait_circuits [--reset URL | --reset-all]", ["--reset", "--reset-all"]),
    ],
)
def test_a_quoted_line__gives_the_flags_its_command_reads(code, flags):
    (found,) = _commands("page.md", 1, code)
    assert found.flags == flags
