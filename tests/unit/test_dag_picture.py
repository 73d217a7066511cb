"""The workflow picture without a database: the layered layout and the escaped SVG."""

from __future__ import annotations

from django_strait.admin.dagpicture import Box, columns, draw, layout

DIAMOND = [("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])]


def test_columns__are_the_longest_path_from_a_root():
    steps = [("a", []), ("b", ["a"]), ("c", ["b"]), ("d", ["a", "c"]), ("e", [])]
    assert columns(steps) == {"a": 0, "b": 1, "c": 2, "d": 3, "e": 0}


def test_layout__rows_follow_definition_order_within_a_column():
    assert layout(DIAMOND) == {"a": (0, 0), "b": (1, 0), "c": (1, 1), "d": (2, 0)}


def test_layout__a_fan_out_and_fan_in_is_three_columns():
    wide = [("root", [])] + [(f"s{i}", ["root"]) for i in range(1000)]
    wide.append(("join", [f"s{i}" for i in range(1000)]))
    places = layout(wide)
    assert places["root"] == (0, 0)
    assert places["s999"] == (1, 999)
    assert places["join"] == (2, 0)


def test_columns__a_long_chain_needs_no_recursion():
    chain = [("s0", [])] + [(f"s{i}", [f"s{i - 1}"]) for i in range(1, 5000)]
    assert columns(chain)["s4999"] == 4999


def test_columns__unknown_parents_and_cycles_do_not_break_the_drawing():
    assert columns([("a", ["ghost"]), ("b", ["c"]), ("c", ["b"])]) == {"a": 0, "b": 0, "c": 0}


def test_draw__one_box_per_step_one_arrow_per_dependency_links_where_there_is_a_run():
    boxes = [
        Box("a", [], "completed", "attempt 1", url="/admin/run/1/"),
        Box("b", ["a"], "started", "attempt 2", url="/admin/run/2/"),
        Box("c", ["a"], "failed", url="/admin/run/3/"),
        Box("d", ["b", "c"], "skipped"),
    ]
    svg = str(draw(boxes))
    assert svg.count('class="strait-step"') == 4
    assert svg.count("<line") == 4
    assert svg.count("<a href=") == 3
    assert 'data-step="d" data-status="skipped"' in svg
    assert 'fill="#c62828"' in svg  # the failed step in its colour


def test_draw__escapes_names():
    svg = str(draw([Box("<script>x</script>", [], "waiting")]))
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg
