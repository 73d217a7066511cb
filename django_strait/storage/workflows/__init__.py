"""Workflows (on every backend): the DAG moves on in the transaction that moved a step's run.

Storage applies here what ``dag`` decides: which step runs start, which are
skipped, where the workflow run stands, what its failure says. It locks,
reads and writes; it sends no signal: each function returns what changed
(:class:`Advanced`), and ``transitions.workflows`` announces it. The backends
call these with their own way of writing statements (``storage.orm.workflows``,
``storage.postgres.workflows``) and offer them as ``Storage`` verbs.

- ``moving``: every path that changes a step's run (the worker's record, cancel,
  discard, replay, the reaper's rescue) moves its workflow runs on, the short
  way (``forward``: steps that simply ended well, a few statements however wide
  the DAG) or the long way (``settling``: every step run read, ``dag.settle``).
- ``lifecycle``: a run's beginning, its cancel, its failure when it stalled.
- ``graph``: the definition as the DAG needs it, cached; a started step's members.

Nothing polls; a child's JobRun is inserted in the same transaction as its
last parent's result. tests/conformance/test_workflows.py checks, for random
DAGs and batchings, that both ways agree with ``dag.settle``.
"""

from django_strait.storage.workflows.changes import Advanced, Change, Move
from django_strait.storage.workflows.graph import members
from django_strait.storage.workflows.lifecycle import begin, cancel, fail_stalled
from django_strait.storage.workflows.moving import (
    advance,
    advance_recorded,
    advance_workflow_runs,
)
from django_strait.storage.workflows.sql import Db, Ids, Statements

__all__ = [
    "Advanced",
    "Change",
    "Db",
    "Ids",
    "Move",
    "Statements",
    "advance",
    "advance_recorded",
    "advance_workflow_runs",
    "begin",
    "cancel",
    "fail_stalled",
    "members",
]
