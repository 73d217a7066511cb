"""The transition table is the one source of the state diagram the docs show."""

from __future__ import annotations

import re
from pathlib import Path

from django_strait.rules.states import REPLAYABLE, TERMINAL, RunStatus, Transition, allowed, diagram

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def test_concepts__shows_the_diagram_of_the_transition_table():
    # On failure, paste the output of django_strait.rules.states.diagram() into docs/concepts.md.
    block = re.search(r"```mermaid\n(stateDiagram-v2\n.*?)\n```", CONCEPTS.read_text(), re.DOTALL)
    assert block is not None and block.group(1) == diagram()


def test_diagram__draws_every_transition_from_every_status_it_allows():
    edges = set(re.findall(r"    (\w+) --> (\w+): (\w+) ", diagram()))
    expected = {(s, t.target, t.label) for t in Transition for s in t.sources}
    assert edges == expected


def test_terminal_statuses__only_replay_or_drop_leave_them():
    for transition in Transition:
        for status in transition.sources & TERMINAL:
            assert transition in (Transition.REPLAY, Transition.DROP), (transition, status)


def test_allowed__follows_the_table():
    assert allowed(Transition.REPLAY, RunStatus.DEAD_LETTER)
    assert not allowed(Transition.REPLAY, RunStatus.COMPLETED)
    assert Transition.REPLAY.sources == REPLAYABLE


def test_queries__name_only_statuses_of_the_table():
    # The SQL names statuses as literals; each must be one of RunStatus's.
    sql = (
        Path(__file__).resolve().parents[2] / "django_strait/storage/postgres/queries.sql"
    ).read_text()
    named = set(re.findall(r"status = '(\w+)'", sql)) | set(re.findall(r"THEN '(\w+)'", sql))
    assert named and named <= {s.value for s in RunStatus}
