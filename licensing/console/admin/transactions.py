"""The ledger (transactions), read-only: the review page (filters, totals, CSV export), the
live feed and the usage page hang off its URLs."""

from typing import cast

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseBadRequest
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.languages import grouped

from ...access.scoping import scope_of
from ...ledger.record import detail_fieldsets
from ...models import Transaction
from .. import review_admin
from ..money import institution_rate
from ..people import end_user_person
from ..review import csv_response, export_filename, iso_utc, scoped_ledger
from .base import ReadOnlyAdminMixin, ScopedAdminMixin, _time_heading


@admin.register(Transaction)
class TransactionAdmin(ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    """The ledger: rows are never added, changed or deleted here. The list is the review page:
    the filter bar, totals and CSV export of licensing.console.review_admin."""

    list_display = (
        "time",
        "license_name",
        "holder",
        "service",
        "model_name",
        "served_by",
        "attempts_display",
        "status",
        "credits_display",
        "tokens",
        "reason",
        "request",
    )
    list_display_links = ("time",)
    list_select_related = ("license", "api_key", "end_user")
    sortable_by = ("time", "credits_display")
    date_hierarchy = "created_at"
    actions = None
    list_per_page = 50
    show_full_result_count = False  # the ledger grows large: skip the unfiltered COUNT(*)
    change_list_template = "admin/licensing/transaction/change_list.html"
    fieldsets = detail_fieldsets()

    @property
    def media(self):
        return super().media + review_admin.admin_widget_media()

    def get_queryset(self, request):
        # Scoped like every licensing admin, by license ids instead of a join (see scoped_ledger).
        return scoped_ledger(admin.ModelAdmin.get_queryset(self, request), scope_of(request.user))

    def get_urls(self):
        from .. import live, usage_views

        view = self.admin_site.admin_view
        own = [
            path("export/", view(self.export_view), name="licensing_transaction_export"),
            path(
                "choices/<str:field>/",
                view(self.choices_view),
                name="licensing_transaction_choices",
            ),
        ]
        return [
            *own,
            *usage_views.admin_urls(self),
            *live.admin_urls(self),
            *super().get_urls(),
        ]

    def get_changelist(self, request, **kwargs):
        if getattr(request, "_ledger_export", False):
            return review_admin.ExportChangeList
        return review_admin.ReviewChangeList

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        paginator = super().get_paginator(
            request, queryset, per_page, orphans, allow_empty_first_page
        )
        count = getattr(request, "_ledger_row_count", None)
        if count is not None:
            paginator.count = count  # known from the totals query: no second COUNT
        return paginator

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", {})  # a TemplateResponse's
        cl = context.get("cl")
        if cl is not None and hasattr(cl, "review"):
            context.update(cl.review_context(request))
            if cl.review.errors:
                response.status_code = 400
        return response

    def export_view(self, request):
        """The filtered rows as CSV, streamed (the list's filters, drill-down and ordering)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        request._ledger_export = True
        try:
            # ExportChangeList (get_changelist above)
            cl = cast(review_admin.ReviewChangeList, self.get_changelist_instance(request))
        except IncorrectLookupParameters as error:
            return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")
        if cl.review.errors:
            return review_admin.export_errors(cl.review)
        return csv_response(request, cl.queryset, export_filename())

    def choices_view(self, request, field):
        if not self.has_view_permission(request):
            raise PermissionDenied
        return review_admin.choices_json(request, field)

    @admin.display(description=_time_heading(_("time")), ordering="created_at")
    def time(self, obj):
        at = timezone.localtime(obj.created_at)
        return format_html(
            '<span title="{}">{}</span>', iso_utc(obj.created_at), at.strftime("%Y-%m-%d %H:%M")
        )

    @admin.display(description=_("license"))
    def license_name(self, obj):
        return _truncated(obj.license.name, 18)

    @admin.display(description=_("holder"))
    def holder(self, obj):
        """The person (name or e-mail, the subject only when nothing else is known) and the
        key; each in full in the tooltip."""
        person = getattr(obj, "_person", None)
        if person is None and obj.end_user_id is not None:
            person = end_user_person(obj.end_user).label()
        key = ""
        if obj.api_key_id is not None:
            key = gettext("API key %(name)s") % {
                "name": obj.api_key.name or f"{obj.api_key.prefix}…"
            }
        if person:
            return format_html(
                '<span title="{}">{}</span>',
                " · ".join(filter(None, (person, key))),
                _cut(person, 22),
            )
        if key:
            return format_html('<span title="{}">{}…</span>', key, obj.api_key.prefix)
        return "-"

    @admin.display(description=_("model"))
    def model_name(self, obj):
        shown = obj.billed_model or obj.requested_model
        title = _("requested %(model)s") % {"model": obj.requested_model}
        if obj.billed_model and obj.billed_model != obj.requested_model:
            title += ", " + _("billed %(model)s") % {"model": obj.billed_model}
        if len(shown) > 20:
            shown = shown[:19] + "…"
        return format_html('<span title="{}">{}</span>', title, shown)

    @admin.display(description=_("status"))
    def status(self, obj):
        return format_html(
            '<span class="outcome outcome-{}" title="{}">{} {}</span>',
            obj.outcome,
            obj.get_outcome_display(),
            obj.status_code,
            obj.outcome.replace("_", " "),
        )

    @admin.display(description=_("provider"))
    def served_by(self, obj):
        """The provider and the connection that answered (or was tried last)."""
        if not obj.provider:
            return "-"
        if not obj.connection:
            return obj.provider
        return f"{obj.provider}/{obj.connection}"

    @admin.display(description=_("attempts"))
    def attempts_display(self, obj):
        if obj.attempts <= 1:
            return str(obj.attempts)
        return format_html(
            '<span class="failed-over" title="{}">{} ↻</span>',
            gettext("failed over: %(why)s") % {"why": obj.failovers or "-"},
            obj.attempts,
        )

    @admin.display(description=_("credits"), ordering="credits")
    def credits_display(self, obj):
        return grouped(obj.credits)

    @admin.display(description=_("cost"))
    def cost(self, obj):
        return institution_rate(obj.license.institution).format(obj.credits)

    @admin.display(description=_("tokens"))
    def tokens(self, obj):
        parts = [] if obj.total_tokens is None else [grouped(obj.total_tokens)]
        if obj.images:
            parts.append(gettext("%(n)s img") % {"n": obj.images})
        return " · ".join(parts) or "-"

    @admin.display(description=_("reason"))
    def reason(self, obj):
        if not (obj.error_code or obj.error_message):
            return ""
        full = ": ".join(part for part in (obj.error_code, obj.error_message) if part)
        return _truncated(full, 26)

    @admin.display(description=_("request id"))
    def request(self, obj):
        answer = gettext("answer %(id)s") % {"id": obj.upstream_id} if obj.upstream_id else ""
        title = obj.request_id + (f" · {answer}" if answer else "")
        return format_html('<code title="{}">{}</code>', title, obj.request_id[:8])


def _cut(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"


def _truncated(text: str, length: int):
    if len(text) <= length:
        return text
    return format_html('<span title="{}">{}…</span>', text, text[: length - 1])
