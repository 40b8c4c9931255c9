"""The audit log (licensing.access.audit writes it): read-only, superusers see every event and an
institution admin its institution's; filters by action, date and actor; the filtered events as
CSV (like the ledger's export; /manage/v1/audit serves the same)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseBadRequest
from django.urls import path
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ...access.scoping import scope_of
from ...models import AuditEvent
from ..audit_log import AUDIT_CSV_COLUMNS, detail_summary
from ..review import csv_response
from .base import (
    ReadOnlyAdminMixin,
    RefuseNulParamsMixin,
    ScopedAdminMixin,
    _short_time,
    _time_heading,
    has_nul,
)


class ActorFilter(admin.AllValuesFieldListFilter):
    """The actors' names; the events that have none (a command's, the system's) are offered in
    words: a link without text has no name for a screen reader (WCAG 2.4.4)."""

    def choices(self, changelist):
        for choice in super().choices(changelist):
            if choice["display"] == "":
                choice = {**choice, "display": _("(no name)")}
            yield choice


@admin.register(AuditEvent)
class AuditEventAdmin(RefuseNulParamsMixin, ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    list_display = ("time", "actor_name", "action", "target", "what", "institution", "ip")
    # The actors offered are those of the events the user may see (get_queryset is scoped).
    list_filter = (
        "action",
        ("created_at", admin.DateFieldListFilter),
        ("actor_name", ActorFilter),
    )
    list_select_related = ("institution",)
    search_fields = ("actor_name", "target")
    date_hierarchy = "created_at"
    actions = None
    change_list_template = "admin/licensing/auditevent/change_list.html"
    fields = (
        "created_at",
        "action",
        "actor_name",
        "actor",
        "institution",
        "target",
        "detail",
        "ip",
        "user_agent",
    )

    def get_list_filter(self, request):
        filters = list(self.list_filter)
        if scope_of(request.user).superuser:
            filters.append("institution")  # one institution: nothing to filter
        return filters

    def get_list_display(self, request):
        shown = list(super().get_list_display(request))
        if not scope_of(request.user).superuser:
            shown.remove("institution")
        return shown

    def get_urls(self):
        export = self.admin_site.admin_view(self.export_view)
        return [path("export/", export, name="licensing_auditevent_export"), *super().get_urls()]

    def export_view(self, request):
        """The filtered events as CSV (the list's filters and search)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if has_nul(request.GET):
            return HttpResponseBadRequest("A parameter holds a NUL character.")
        try:
            cl = self.get_changelist_instance(request)
        except IncorrectLookupParameters as error:
            return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")
        stamp = f"{datetime.now(UTC):%Y%m%d-%H%M%S}"
        return csv_response(
            request, cl.queryset, f"audit-{stamp}.csv", columns=AUDIT_CSV_COLUMNS, computed={}
        )

    @admin.display(description=_time_heading(_("time")), ordering="created_at")
    def time(self, obj):
        return _short_time(obj.created_at)

    @admin.display(description=_("what"))
    def what(self, obj):
        summary = detail_summary(obj.detail)
        return format_html('<span title="{}">{}</span>', summary, summary[:120])
