"""No run-side write outside storage (issue 37: storage is the only door).

Every change to runs, attempts, holds, workflow runs, step runs, webhook deliveries,
circuits, endpoint health, the budgets' ledger and rate admissions goes through a
named verb of the Storage Protocol (docs/architecture.md, "Where the decision
lives"). This reads every module outside ``storage/`` and ``migrations/`` and finds
ORM writes (``.update(``, ``.delete(``, ``.create(``, ...) on those models, and raw
SQL that writes their tables. Definitions (jobs, workflows, their steps, projects,
API keys) are not run-side and may be written where they are edited.

What "on those models" means is found as a reader would: a write whose receiver
starts from a run-side model, or from a variable, a function's result or an
admin's ``queryset``/``obj`` that does (followed through assignments and through
the package's functions that mention the models).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.apps import apps

PACKAGE = Path(__file__).resolve().parents[2] / "django_strait"
#: Where run-side rows may be written: storage, and the migrations that make the tables.
DOORS = ("storage", "migrations")
RUN_SIDE = frozenset(
    {
        "JobRun",
        "DeadLetter",
        "RunAttempt",
        "RunHold",
        "WorkflowRun",
        "WorkflowStepRun",
        "WebhookDelivery",
        "EndpointCircuit",
        "EndpointHealth",
        "BudgetLedger",
        "JobRateAdmission",
    }
)
WRITES = frozenset(
    {
        "update",
        "delete",
        "create",
        "bulk_create",
        "bulk_update",
        "save",
        "get_or_create",
        "update_or_create",
    }
)
#: Writes found outside storage that cannot move yet, each with its reason ("file:line" is
#: not kept: the module and the receiver's text). Empty: every write is behind a verb.
NOT_YET: dict[tuple[str, str], str] = {}


def mentions_run_side(node: ast.AST, tainted: set[str]) -> bool:
    return any(
        (isinstance(n, ast.Name) and (n.id in RUN_SIDE or n.id in tainted))
        or (isinstance(n, ast.Attribute) and n.attr in RUN_SIDE)
        for n in ast.walk(node)
    )


def run_side_functions(trees: list[ast.Module]) -> set[str]:
    """The package's functions whose bodies mention a run-side model, or call one that does."""
    bodies = {
        f.name: f
        for tree in trees
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    found: set[str] = set()
    while True:
        more = {name for name, f in bodies.items() if name not in found and _calls(f, found)}
        if not more:
            return found
        found |= more


def _calls(function: ast.AST, found: set[str]) -> bool:
    for n in ast.walk(function):
        if isinstance(n, ast.Name) and n.id in RUN_SIDE:
            return True
        if isinstance(n, ast.Call) and _called_name(n) in found:
            return True
    return False


def _called_name(call: ast.Call) -> str | None:
    """A plain call's function name (a method's name says nothing of what it returns)."""
    return call.func.id if isinstance(call.func, ast.Name) else None


def writes_in(tree: ast.Module, functions: set[str]) -> list[tuple[int, str]]:
    """The run-side ORM writes in ``tree``: (line, the receiver's text)."""
    found = []
    for scope, tainted in _scopes(tree, functions):
        for n in ast.walk(scope):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
                continue
            if n.func.attr not in WRITES:
                continue
            receiver = n.func.value
            if _starts_run_side(receiver, tainted, functions):
                found.append((n.lineno, ast.unparse(receiver)))
    return sorted(set(found))


def _starts_run_side(node: ast.AST, tainted: set[str], functions: set[str]) -> bool:
    """Whether a chain of calls, attributes and subscripts starts from run-side rows: a
    run-side model or a name holding its rows (``JobRun`` in ``JobRun.objects.filter()``),
    or a call of a function that returns them (``prunable`` in ``prunable(...).only()``).
    The arguments (a subquery of runs filtering another model) do not count."""
    called = False
    while isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
        called = isinstance(node, ast.Call)
        node = node.func if called else node.value
    if not isinstance(node, ast.Name):
        return False
    return node.id in RUN_SIDE or node.id in tainted or (called and node.id in functions)


def _scopes(tree: ast.Module, functions: set[str]):
    """Each function with the names in it that hold run-side rows."""
    admins = {
        id(f)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        and any(mentions_run_side(d, set()) for d in [*cls.decorator_list, *_model_of(cls)])
        for f in cls.body
        if isinstance(f, ast.FunctionDef)
    }
    for f in ast.walk(tree):
        if not isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        tainted = {"queryset", "obj"} if id(f) in admins else set()
        # A parameter typed as run-side rows (``runs: QuerySet[JobRun]``, ``run: "JobRun"``).
        every = [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]
        tainted |= {
            a.arg
            for a in every
            if a.annotation is not None
            and (
                mentions_run_side(a.annotation, set())
                or any(m in ast.unparse(a.annotation) for m in RUN_SIDE)
            )
        }
        changed = True
        while changed:
            changed = False
            for n in ast.walk(f):
                if isinstance(n, ast.Assign | ast.AnnAssign | ast.For | ast.comprehension):
                    value = n.iter if isinstance(n, ast.For | ast.comprehension) else n.value
                    if value is not None and _starts_run_side(value, tainted, functions):
                        targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                        for t in targets:
                            for name in ast.walk(t):
                                if isinstance(name, ast.Name) and name.id not in tainted:
                                    tainted.add(name.id)
                                    changed = True
        yield f, tainted


def _model_of(cls: ast.ClassDef) -> list[ast.AST]:
    """An admin's (or inline's) ``model = ...``."""
    return [
        n.value
        for n in cls.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "model" for t in n.targets)
    ]


def raw_writes_in(text: str, tables: set[str]) -> list[str]:
    """The raw SQL in ``text`` that writes a run-side table, or a table named only when the
    statement is built (``f"UPDATE {table} ..."``): outside storage, which table that is
    cannot be told, so it counts."""
    names = "|".join(re.escape(t) for t in sorted(tables))
    pattern = (
        rf"""(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE)\s+["'`]?({names}|\{{[^}}]*\}})(?=\W)"""
    )
    return re.findall(pattern, text, flags=re.IGNORECASE)


def run_side_tables() -> set[str]:
    return {
        m._meta.db_table
        for m in apps.get_app_config("django_strait").get_models()
        if m.__name__ in RUN_SIDE
    }


def outside_storage() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if not set(p.relative_to(PACKAGE).parts[:1]) & set(DOORS)
    )


def test_one_door__no_run_side_orm_write_outside_storage():
    paths = outside_storage()
    trees = [ast.parse(p.read_text(), filename=str(p)) for p in paths]
    functions = run_side_functions(trees)
    found = {
        (str(p.relative_to(PACKAGE)), receiver): line
        for p, tree in zip(paths, trees, strict=True)
        for line, receiver in writes_in(tree, functions)
    }
    assert set(found) <= set(NOT_YET), {k: v for k, v in found.items() if k not in NOT_YET}


def test_one_door__no_raw_sql_writing_run_side_tables_outside_storage():
    tables = run_side_tables()
    found = {
        str(p.relative_to(PACKAGE)): w
        for p in outside_storage()
        if (w := raw_writes_in(p.read_text(), tables))
    }
    assert found == {}


PLANTED = """
from django.contrib import admin
from django_strait.models import Job, JobRun, WebhookDelivery


def finished(using):
    return JobRun.objects.using(using).filter(status="completed")


def prune(using):
    gone = finished(using).only("pk")
    gone.delete()


def touch(pk):
    JobRun.objects.filter(pk=pk).update(priority=1)
    Job.objects.filter(pk=pk).update(enabled=False)
    for run in finished("default"):
        run.save()


def hand_written(runs: "QuerySet[JobRun]"):
    runs.bulk_update([], ["priority"])


@admin.register(WebhookDelivery)
class DeliveryAdmin(admin.ModelAdmin):
    def retry(self, request, queryset):
        queryset.update(status="pending")
"""


def test_one_door__the_check_finds_planted_writes():
    tree = ast.parse(PLANTED)
    found = [receiver for _, receiver in writes_in(tree, run_side_functions([tree]))]
    assert found == ["gone", "JobRun.objects.filter(pk=pk)", "run", "runs", "queryset"]


@pytest.mark.parametrize(
    ("sql", "written"),
    [
        ('DELETE FROM "strait_jobrun" WHERE id = 1', ["strait_jobrun"]),
        ("update strait_jobrun set priority = 1", ["strait_jobrun"]),
        ("SELECT * FROM strait_jobrun", []),
        ('f"UPDATE {table} SET ojs = %s"', ["{table}"]),
    ],
)
def test_one_door__the_check_finds_planted_raw_sql(sql, written):
    assert raw_writes_in(sql, {"strait_jobrun"}) == written
