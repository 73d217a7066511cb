"""The base of the admin's inlines: rows shown inside another object's page, never edited there."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from django_strait.admin.aliases import InlineOnRowsAlias
from django_strait.admin.unreadable import ReadsInlineRowsAside


class HistoryInline(InlineOnRowsAlias, ReadsInlineRowsAside, admin.TabularInline):
    """Read-only rows (attempts, deliveries, steps) on the page of what they belong to.

    Shown to whoever may see that page: the page has already checked its own
    permission, so the inline does not ask for one of its model's.
    """

    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return True
