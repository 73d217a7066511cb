"""Template tags of django-strait's own admin pages."""

from __future__ import annotations

from typing import Any

import django
from django import template

register = template.Library()

#: Django 6.1's admin writes breadcrumbs as a list, ``<ol class="breadcrumbs">`` of
#: ``<li>``, and styles only that; Django 5.2 and 6.0 write ``<div class="breadcrumbs">``
#: with links between "›". Strait's pages write what the running Django writes.
BREADCRUMBS_AS_LIST = django.VERSION >= (6, 1)


@register.inclusion_tag("admin/django_strait/breadcrumbs.html")
def strait_breadcrumbs(*trail: Any) -> dict[str, Any]:
    """Breadcrumbs in the running Django admin's markup: ``label url ... label``.

    Labels and URLs alternate; the last label, without a URL, is the page itself.
    """
    *pairs, current = trail
    links = list(zip(pairs[::2], pairs[1::2], strict=True))
    return {"as_list": BREADCRUMBS_AS_LIST, "links": links, "current": current}
