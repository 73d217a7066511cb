"""The shape of a workflow: steps and what each depends on, checked and walked without a database."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


class DagError(ValueError):
    """A workflow's steps do not form a DAG; ``step`` and ``field`` name where."""

    def __init__(self, step: str, field: str, message: str) -> None:
        super().__init__(f"step {step!r}: {field}: {message}")
        self.step = step
        self.field = field
        self.message = message


def check(graph: Sequence[tuple[str, Sequence[str]]]) -> None:
    """Raise DagError unless ``(name, depends_on)`` pairs have unique names, known parents, no cycle."""
    names: set[str] = set()
    for name, _ in graph:
        if name in names:
            raise DagError(name, "name", "is used by two steps; step names must be unique")
        names.add(name)
    for name, parents in graph:
        _check_parents(name, parents, names)
    cycle = find_cycle(dict(graph))
    if cycle:
        path = " -> ".join([*cycle, cycle[0]])
        raise DagError(cycle[0], "depends_on", f"forms a cycle: {path}")


def _check_parents(name: str, parents: Sequence[str], names: set[str]) -> None:
    for parent in parents:
        if parent == name:
            raise DagError(name, "depends_on", "a step cannot depend on itself")
        if parent not in names:
            known = ", ".join(sorted(names))
            raise DagError(name, "depends_on", f"unknown step {parent!r}; steps: {known}")
    if len(set(parents)) != len(parents):
        raise DagError(name, "depends_on", "names a step twice")


def find_cycle(parents: Mapping[str, Sequence[str]]) -> list[str]:
    """Return the steps of one cycle in dependency order, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(parents):
        path = _walk(start, parents, state, [])
        if path:
            return path
    return []


def _walk(name: str, parents: Mapping[str, Sequence[str]], state: dict, path: list) -> list[str]:
    if state.get(name) == 2:
        return []
    if state.get(name) == 1:
        return path[path.index(name) :]
    state[name] = 1
    path.append(name)
    for parent in parents.get(name, ()):
        found = _walk(parent, parents, state, path)
        if found:
            return found
    path.pop()
    state[name] = 2
    return []


def children(parents: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Invert ``parents``: each step's direct dependents."""
    out: dict[str, list[str]] = {name: [] for name in parents}
    for name, deps in parents.items():
        for parent in deps:
            out[parent].append(name)
    return out


def descendants(parents: Mapping[str, Sequence[str]], roots: Iterable[str]) -> set[str]:
    """Every step that depends, directly or not, on one of ``roots`` (the roots left out)."""
    below = children(parents)
    seen: set[str] = set()
    todo = [child for root in roots for child in below.get(root, ())]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(below.get(name, ()))
    return seen


def due(parents: Mapping[str, Sequence[str]], finished: set[str], waiting: set[str]) -> list[str]:
    """The waiting steps whose parents have all finished, in name order."""
    return sorted(n for n in waiting if all(p in finished for p in parents.get(n, ())))


#: Step statuses as strings (``models.StepRunStatus`` holds the same values).
WAITING, STARTED, COMPLETED, FAILED, SKIPPED, CANCELED = (
    "waiting", "started", "completed", "failed", "skipped", "canceled",
)  # fmt: skip


def ended_well(status: str, lenient: bool) -> bool:
    """Whether a step in ``status`` lets its dependents start: completed, or failed leniently."""
    return status == COMPLETED or (status == FAILED and lenient)


def blocking(status: Mapping[str, str], lenient: set[str]) -> set[str]:
    """The steps that stop their dependents: failed without continue_on_failure, or canceled."""
    return {n for n, s in status.items() if s == CANCELED or (s == FAILED and n not in lenient)}


def settle(
    parents: Mapping[str, Sequence[str]], status: Mapping[str, str], lenient: set[str]
) -> tuple[dict[str, str], str]:
    """Return each step's status after the DAG moves on, and the workflow run's status.

    Dependents of a blocking step are skipped; skipped steps whose blocker is gone
    (a replay) wait again; a waiting step whose parents all completed (or failed
    with ``continue_on_failure``: ``lenient``) is started. The workflow is failed
    while a step blocks, completed when every step completed or failed leniently.
    """
    stop = blocking(status, lenient)
    below = descendants(parents, stop)
    new = dict(status)
    for name, s in status.items():
        if s == WAITING and name in below:
            new[name] = SKIPPED
        elif s == SKIPPED and name not in below:
            new[name] = WAITING
    done = {n for n, s in new.items() if ended_well(s, n in lenient)}
    for name in due(parents, done, {n for n, s in new.items() if s == WAITING}):
        new[name] = STARTED
    if stop:
        return new, "failed"
    return new, "completed" if len(done) == len(new) else "running"


# -- what a run's move means for its workflow run (storage applies these) ------------

#: A step's status for each status its run can end in (the run's other statuses: started).
STEP_STATUS_OF_RUN = {
    "completed": COMPLETED,
    "failed": FAILED,
    "dead_letter": FAILED,
    "discarded": FAILED,
    "canceled": CANCELED,
}
#: Workflow run statuses the DAG still moves in (a failed one resumes on replay).
MOVING = ("running", "failed")
#: The error type of a workflow run failed because a step blocks it.
STEP_FAILED_ERROR = "workflow.step_failed"
#: The error type of a workflow run failed because nothing progressed while steps wait.
STALLED_ERROR = "workflow.stalled"
#: The error type of a workflow run failed because a row it needs cannot be read.
INVALID_ERROR = "workflow.invalid"


def step_status(run_status: str | None) -> str:
    """The status of a started step whose run is in ``run_status``."""
    return STEP_STATUS_OF_RUN.get(run_status, STARTED)


def stopped(status: Mapping[str, str]) -> dict[str, str]:
    """Each step's status once its workflow run stopped moving: a waiting step is canceled."""
    return {name: CANCELED if s == WAITING else s for name, s in status.items()}


def parents_left(
    parents: Mapping[str, Sequence[str]], status: Mapping[str, str], lenient: set[str]
) -> dict[str, int]:
    """Each waiting step's parents that have not ended well (what ``parents_left`` holds)."""
    done = {n for n, s in status.items() if ended_well(s, n in lenient)}
    return {
        name: sum(1 for p in parents[name] if p not in done)
        for name, s in status.items()
        if s == WAITING
    }


def released(children: Mapping[int, Sequence[int]], ended: Iterable[int]) -> dict[int, int]:
    """How many of its parents among the steps ``ended`` (ended well) each child loses."""
    drop: dict[int, int] = {}
    for step in ended:
        for child in children[step]:
            drop[child] = drop.get(child, 0) + 1
    return drop


def counted_down(
    waiting: Iterable[tuple[int, int, int]], drop: Mapping[int, int]
) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
    """Split waiting step runs (id, step, parents_left) that ``drop`` concerns into those
    now due (id, step), and the others by their new ``parents_left``."""
    due: list[tuple[int, int]] = []
    by_left: dict[int, list[int]] = {}
    for pk, step, left in waiting:
        if step not in drop:
            continue
        left -= drop[step]
        if left <= 0:
            due.append((pk, step))
        else:
            by_left.setdefault(left, []).append(pk)
    return due, by_left


def why_failed(status: Mapping[str, str], lenient: set[str], ended: Mapping[str, str]) -> str:
    """Why a workflow run failed: the first blocking step by name, and how it ended
    (``ended``: a step's run's status and error type, as "dead_letter (ValueError)")."""
    name = sorted(blocking(status, lenient))[0]
    return f"step {name!r} ended {ended.get(name) or status[name]}"


def stalled_error(stale_after: float) -> str:
    """Why a workflow run stalled."""
    return f"no step progressed for {stale_after:g} s while steps wait"
