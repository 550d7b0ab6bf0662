"""Admin helpers for large, append-only tables: a read-only ``ModelAdmin`` and a capped count.

* :class:`ReadOnlyAdminMixin`: nobody adds, changes or deletes rows through the admin; the view
  permission shows them, and custom actions check their own permissions.
* :class:`CappedCountPaginator`: the change list counts at most ``cap`` rows, so a page of a
  table with millions of rows never runs a full ``COUNT(*)``. The app's ``pagination.html``
  template shows "10000+" when capped (``admin/idempotency/pagination.html``; payments includes
  it).
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.utils.functional import cached_property

__all__ = ["CappedCountPaginator", "ReadOnlyAdminMixin"]


class ReadOnlyAdminMixin:
    """Refuse add, change and delete in a ``ModelAdmin`` or an inline (view only).

    Put it before ``admin.ModelAdmin`` / ``admin.TabularInline`` in the bases. With no change
    permission Django renders every field of the change page read-only; list the computed ones
    in ``readonly_fields`` as usual (``flatten_fieldsets(fieldsets)`` lists them all once).
    """

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class CappedCountPaginator(Paginator):
    """A paginator that counts at most ``cap`` rows (then ``capped`` is true).

    ``SELECT COUNT(*) FROM (SELECT ... LIMIT cap + 1)``: its cost is bounded whatever the size
    of the table, and pages past ``cap / per_page`` are not offered (no deep ``OFFSET`` either).
    The pagination template shows "10000+" when capped.
    """

    cap = 10_000
    capped = False

    @cached_property
    def count(self) -> int:
        """Rows of the list, at most ``cap`` (sets ``capped`` when there are more)."""
        object_list = self.object_list
        if hasattr(object_list, "select_related") and hasattr(object_list, "order_by"):
            counted = object_list.select_related(None).order_by()[: self.cap + 1].count()
        else:
            counted = len(object_list)
        self.capped = counted > self.cap
        return min(counted, self.cap)
