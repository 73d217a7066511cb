"""A workflow run's DAG as inline SVG: a layered layout (pure) and its drawing (no JavaScript).

Columns are the longest path from a root, so every arrow points right; within
a column, steps keep their definition order. Labels are escaped by
``format_html``, so a step name cannot inject markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_strait.admin.charts import OTHER_COLOUR
from django_strait.models import StepRunStatus

#: Colours by step run status, in the overview charts' palette.
STEP_COLOURS: Mapping[str, str] = {
    StepRunStatus.WAITING: "#b0bec5",
    StepRunStatus.STARTED: "#1976d2",
    StepRunStatus.COMPLETED: "#2e7d32",
    StepRunStatus.FAILED: "#c62828",
    StepRunStatus.SKIPPED: "#757575",
    StepRunStatus.CANCELED: "#90a4ae",
}

BOX_WIDTH, BOX_HEIGHT = 150, 44
GAP_X, GAP_Y, MARGIN = 50, 14, 8
#: Characters of a step name shown in its box; the whole name is the box's tooltip.
NAME_CHARS = 20


def columns(steps: Sequence[tuple[str, Sequence[str]]]) -> dict[str, int]:
    """Return each step's column: the number of steps on the longest path from a root to it.

    Iterative (Kahn's order), so a chain of thousands of steps needs no recursion.
    A parent that is not a step is ignored; steps left in a cycle (a row written
    past ``define_workflow``) are put in column 0 rather than refused.
    """
    names = {name for name, _ in steps}
    parents = {name: [p for p in deps if p in names and p != name] for name, deps in steps}
    children: dict[str, list[str]] = {name: [] for name in names}
    for name, deps in parents.items():
        for parent in deps:
            children[parent].append(name)
    missing = {name: len(deps) for name, deps in parents.items()}
    column = dict.fromkeys(names, 0)
    ready = [name for name, _ in steps if not missing[name]]
    while ready:
        parent = ready.pop()
        for child in children[parent]:
            column[child] = max(column[child], column[parent] + 1)
            missing[child] -= 1
            if not missing[child]:
                ready.append(child)
    return column


def layout(steps: Sequence[tuple[str, Sequence[str]]]) -> dict[str, tuple[int, int]]:
    """Return each step's ``(column, row)``; rows count down a column in definition order."""
    column = columns(steps)
    used: dict[int, int] = {}
    places: dict[str, tuple[int, int]] = {}
    for name, _ in steps:
        row = used.get(column[name], 0)
        places[name] = (column[name], row)
        used[column[name]] = row + 1
    return places


@dataclass(frozen=True, slots=True)
class Box:
    """One step as drawn: its name, parents, status, detail line and link (if it has a run)."""

    name: str
    depends_on: Sequence[str]
    status: str
    detail: str = ""
    url: str | None = None


def draw(boxes: Sequence[Box]) -> SafeString:
    """Draw the steps as boxes in their status colour, arrows from each parent to its child."""
    places = layout([(b.name, b.depends_on) for b in boxes])
    width = _x(max((c for c, _ in places.values()), default=0) + 1) - GAP_X + MARGIN
    height = _y(max((r for _, r in places.values()), default=0) + 1) - GAP_Y + MARGIN
    arrows = format_html_join(
        "", "{}", ((_arrow(places[p], places[b.name]),) for b in boxes for p in _known(b, places))
    )
    drawn = format_html_join("", "{}", ((_box(b, *places[b.name]),) for b in boxes))
    return format_html(
        '<svg class="strait-dag" role="img" width="{}" height="{}" viewBox="0 0 {} {}" '
        'font-family="sans-serif"><title>{} steps</title><defs>'
        '<marker id="strait-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#546e7a"></path>'
        "</marker></defs>{}{}</svg>",
        width, height, width, height, len(boxes), arrows, drawn,
    )  # fmt: skip


def _known(box: Box, places: Mapping[str, tuple[int, int]]) -> list[str]:
    return [p for p in box.depends_on if p in places and p != box.name]


def _x(column: int) -> int:
    return MARGIN + column * (BOX_WIDTH + GAP_X)


def _y(row: int) -> int:
    return MARGIN + row * (BOX_HEIGHT + GAP_Y)


def _arrow(parent: tuple[int, int], child: tuple[int, int]) -> SafeString:
    return format_html(
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#546e7a" stroke-width="1.2" '
        'marker-end="url(#strait-arrow)"></line>',
        _x(parent[0]) + BOX_WIDTH, _y(parent[1]) + BOX_HEIGHT // 2,
        _x(child[0]) - 1, _y(child[1]) + BOX_HEIGHT // 2,
    )  # fmt: skip


def _box(box: Box, column: int, row: int) -> SafeString:
    x, y = _x(column), _y(row)
    name = box.name if len(box.name) <= NAME_CHARS else f"{box.name[: NAME_CHARS - 1]}…"
    shape = format_html(
        '<g class="strait-step" data-step="{}" data-status="{}"><title>{}: {}{}</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="4" fill="{}"></rect>'
        '<text x="{}" y="{}" font-size="12" fill="#fff" font-weight="bold">{}</text>'
        '<text x="{}" y="{}" font-size="10" fill="#fff">{}</text></g>',
        box.name, box.status, box.name, box.status, f" ({box.detail})" if box.detail else "",
        x, y, BOX_WIDTH, BOX_HEIGHT, STEP_COLOURS.get(box.status, OTHER_COLOUR),
        x + 6, y + 17, name,
        x + 6, y + 34, f"{box.status}, {box.detail}" if box.detail else box.status,
    )  # fmt: skip
    if box.url is None:
        return shape
    return format_html('<a href="{}">{}</a>', box.url, shape)
