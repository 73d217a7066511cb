"""``{% strait_result_list cl %}``: the admin's list of results, a row that cannot be shown
shown as its id and what cannot be read (django_strait.admin.unreadable)."""

from __future__ import annotations

from typing import Any

from django import template
from django.contrib.admin.templatetags import admin_list
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import format_html

from django_strait.admin.unreadable import problems_of, say_problems
from django_strait.storage.rows import problem_of

register = template.Library()


@register.inclusion_tag("admin/change_list_results.html")
def strait_result_list(cl: Any) -> dict[str, Any]:
    """Django's ``result_list``, rendering row by row so that one row cannot fail the page."""
    headers = list(admin_list.result_headers(cl))
    return {
        "cl": cl,
        "result_hidden_fields": list(admin_list.result_hidden_fields(cl)),
        "result_headers": headers,
        "num_sorted_fields": sum(1 for h in headers if h["sortable"] and h["sorted"]),
        "results": [_row(cl, row, len(headers)) for row in cl.result_list],
    }


def _row(cl: Any, row: Any, columns: int) -> admin_list.ResultList:
    problems = problems_of(row)
    if not problems:
        try:
            return admin_list.ResultList(None, list(admin_list.items_for_result(cl, row, None)))
        except Exception as exc:
            why = f"a column cannot be shown: {problem_of(exc)}"
    else:
        why = say_problems(problems)
    return admin_list.ResultList(None, _unreadable_cells(cl, row, columns, why))


def _unreadable_cells(cl: Any, row: Any, columns: int, why: str) -> list[str]:
    cells = []
    if "action_checkbox" in cl.list_display:
        cells.append(
            format_html(
                '<td class="action-checkbox"><input type="checkbox" name="_selected_action" '
                'value="{}" class="action-select" aria-label="Select this object"></td>',
                row.pk,
            )
        )
    meta = cl.model._meta
    url = reverse(
        f"admin:{meta.app_label}_{meta.model_name}_change",
        args=(quote(row.pk),),
        current_app=cl.model_admin.admin_site.name,
    )
    cells.append(format_html('<th><a href="{}">{}</a></th>', url, row.pk))
    cells.append(
        format_html(
            '<td colspan="{}" class="strait-unreadable" style="color: #ba2121">'
            "cannot be shown: {}</td>",
            max(columns - len(cells), 1),
            why,
        )
    )
    return cells
