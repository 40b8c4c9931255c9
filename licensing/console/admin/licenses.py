"""Institutions, license types (the policy editor: its docs and its try-a-request view) and
licenses (their budget and usage at a glance, their keys inline)."""

from datetime import datetime

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count
from django.http import Http404, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from catalog.forms import FORMFIELD_OVERRIDES
from catalog.registry import service_label
from core.languages import grouped
from core.zones import zone_or_utc

from ...access.changes import audit_row_change, stored_snapshot
from ...access.scoping import scope_of
from ...models import ApiKey, Institution, License, LicenseType, Transaction
from ...rules.policy import SERVICES
from ..docs_page import rendered
from ..forms import InstitutionForm, LicenseForm, LicenseTypeForm
from ..money import with_money
from ..policy_try import try_request
from ..usage import licenses_usage
from .base import KeepLedgerIntactMixin, ScopedAdminMixin

POLICY_DOCS = settings.BASE_DIR / "docs" / "policy.md"


def _local(instant: datetime, license: License) -> str:
    """A license window's bound in its institution's time zone, where its days begin."""
    at = instant.astimezone(zone_or_utc(license.institution.timezone))
    return at.strftime("%Y-%m-%d %H:%M %Z")


class AuditedSaveMixin:
    """Policy, budget and money-rate changes land in the audit log with before and after."""

    def save_model(self, request, obj, form, change):
        before = stored_snapshot(obj) if change else None
        super().save_model(request, obj, form, change)  # type: ignore[misc]
        audit_row_change(obj, before, request=request)


@admin.register(Institution)
class InstitutionAdmin(AuditedSaveMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = InstitutionForm
    list_display = (
        "name",
        "timezone",
        "license_count",
        "license_type_count",
        "issuer_count",
        "created_at",
    )
    search_fields = ("name",)
    date_hierarchy = "created_at"

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                _licenses=Count("licenses", distinct=True),
                _types=Count("license_types", distinct=True),
                _issuers=Count("jwt_issuers", distinct=True),
            )
            .order_by("name")  # GROUP BY drops Meta.ordering
        )

    # An institution admin sets their institution's time zone, language, terms and key limit;
    # its name and money rate stay the operator's.
    OPERATOR_FIELDS = ("name", "currency", "micro_credits_per_currency_unit")

    def get_readonly_fields(self, request, obj=None):
        readonly = super().get_readonly_fields(request, obj)
        if scope_of(request.user).superuser:
            return readonly
        return (*readonly, *self.OPERATOR_FIELDS)

    @admin.display(description=_("licenses"), ordering="_licenses")
    def license_count(self, obj):
        return obj._licenses

    @admin.display(description=_("license types"), ordering="_types")
    def license_type_count(self, obj):
        return obj._types

    @admin.display(description=_("JWT issuers"), ordering="_issuers")
    def issuer_count(self, obj):
        return obj._issuers


@admin.register(LicenseType)
class LicenseTypeAdmin(AuditedSaveMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = LicenseTypeForm
    formfield_overrides = FORMFIELD_OVERRIDES
    list_display = ("name", "institution", "active", "services", "license_count", "updated_at")
    list_filter = ("active", "institution")
    list_select_related = ("institution",)
    search_fields = ("name", "institution__name")
    autocomplete_fields = ("institution",)
    readonly_fields = ("updated_at",)
    # The policy form is rendered by the change form template between these two (its fields are
    # not the model's); the JSON view stays, folded, for the rules the form does not cover.
    fieldsets = (
        (None, {"fields": ("name", "institution", "active", "guardrails", "updated_at")}),
        (
            _("Policy as JSON"),
            {
                "classes": ("collapse",),
                "fields": ("policy",),
                "description": _(
                    "The whole policy document. Rules the form above does not cover "
                    "(patterns, excluded values, fair-use limits, data residency, ...) are edited "
                    "here; saving the form keeps them. Fields changed in the form are written onto "
                    "this document."
                ),
            },
        ),
    )
    change_form_template = "admin/licensing/licensetype/change_form.html"

    def get_fieldsets(self, request, obj=None):
        if obj is not None:
            return self.fieldsets
        # Adding: the age-group presets (docs/presets.md) beside the name.
        (title, options), *rest = self.fieldsets
        return ((title, {**options, "fields": ("preset", *options["fields"])}), *rest)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_licenses=Count("licenses")).order_by("name")

    def get_urls(self):
        view = self.admin_site.admin_view(require_POST(self.try_request_view))
        docs = self.admin_site.admin_view(self.policy_docs_view)
        return [
            path("policy-docs/", docs, name="licensing_policy_docs"),
            path("<path:object_id>/try/", view, name="licensing_licensetype_try"),
            *super().get_urls(),
        ]

    def policy_docs_view(self, request):
        """docs/policy.md rendered, for the link in the policy's help."""
        if not self.has_view_permission(request):
            raise Http404("Not found")
        context = {
            **self.admin_site.each_context(request),
            "title": _("Policy documents: the reference"),
            # markdown-it escapes raw HTML (docs_page): the HTML is its own.
            "body": mark_safe(rendered(POLICY_DOCS)),
        }
        return TemplateResponse(request, "admin/licensing/licensetype/policy_docs.html", context)

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "policy" and field is not None:
            field.help_text = format_html(
                gettext(
                    "The policy document: which services, providers and parameter values are "
                    "allowed. Format, rule keys, the exact 403 messages and examples: "
                    '<a href="{}" target="_blank">the policy reference</a>. Rules must name '
                    "parameters of the service's request (unknown names are refused)."
                ),
                reverse("admin:licensing_policy_docs"),
            )
        return field

    def try_request_view(self, request, object_id):
        """The "try a request" panel: the policy as saved, a service and a body."""
        obj = self.get_object(request, object_id)
        if obj is None or not self.has_view_permission(request, obj):
            raise Http404("No license type with this id")
        service = request.POST.get("service", "")
        if service not in SERVICES:
            return JsonResponse(
                {"outcome": "invalid", "message": _("Choose a service")}, status=400
            )
        return JsonResponse(try_request(obj.policy, service, request.POST.get("body", "")))

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        form = context["adminform"].form
        context["policy_form"] = getattr(form, "policy_form", None)
        if obj is not None:
            context["try_services"] = [(s, service_label(s)) for s in SERVICES]
            context["try_url"] = reverse("admin:licensing_licensetype_try", args=[obj.pk])
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description=_("enabled services"))
    def services(self, obj):
        policy = obj.policy
        if not isinstance(policy, dict) or not isinstance(policy.get("services"), dict):
            return gettext("(invalid document)")
        order = {name: i for i, name in enumerate(SERVICES)}
        names = sorted(policy["services"], key=lambda s: (order.get(s, len(order)), s))
        return ", ".join(service_label(s) for s in names) or gettext("(none)")

    @admin.display(description=_("licenses"), ordering="_licenses")
    def license_count(self, obj):
        return obj._licenses


class ApiKeyInline(admin.TabularInline):
    """The license's keys, listed read-only; keys are created from the API key admin."""

    model = ApiKey
    fields = ("prefix", "kind", "name", "active", "expires_at", "last_used_at", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("license")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        return scope_of(request.user).allows(ApiKey, "view")


class UsageChangeList(ChangeList):
    """Reads the current window's usage of a page of licenses in one query."""

    def get_results(self, request):
        super().get_results(request)
        usage = licenses_usage(list(self.result_list))
        for obj in self.result_list:
            obj._usage = usage[obj.pk]


@admin.register(License)
class LicenseAdmin(AuditedSaveMixin, KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = LicenseForm
    deactivate_hint = _(
        "Deactivate it instead: untick “active” on its page and save. Its keys and its users' "
        "requests are refused from then on; its ledger, wallets and budget alerts stay."
    )
    list_display = (
        "name",
        "institution",
        "license_type",
        "active",
        "budget_limit_display",
        "spent_display",
        "remaining_display",
        "resets_display",
    )
    list_filter = ("active", "budget_period", "budget_strategy", "institution", "license_type")
    list_select_related = ("institution", "license_type")
    search_fields = ("name", "institution__name", "license_type__name")
    autocomplete_fields = ("institution", "license_type")
    readonly_fields = (
        "created_at",
        "updated_at",
        "spent_display",
        "remaining_display",
        "window_display",
        "resets_display",
        "transactions_link",
    )
    inlines = (ApiKeyInline,)

    def get_fieldsets(self, request, obj=None):
        budget = [
            "budget_unit",
            "budget_strategy",
            "budget_period",
            "budget_limit",
            "alert_threshold_percent",
        ]
        fieldsets = [
            (None, {"fields": ["name", "institution", "license_type", "active"]}),
            (_("Budget"), {"fields": budget}),
        ]
        if obj is not None:
            usage = [
                "spent_display",
                "remaining_display",
                "window_display",
                "resets_display",
                "transactions_link",
            ]
            fieldsets.append((_("Usage in the current window"), {"fields": usage}))
            fieldsets.append((_("Dates"), {"fields": ["created_at", "updated_at"]}))
        return fieldsets

    def get_changelist(self, request, **kwargs):
        return UsageChangeList

    def ledger_rows(self, obj):
        return Transaction.objects.filter(license=obj)

    def _usage(self, obj):
        usage = getattr(obj, "_usage", None)
        if usage is None:
            usage = obj._usage = licenses_usage([obj])[obj.pk]
        return usage

    @admin.display(description=_("limit"), ordering="budget_limit")
    def budget_limit_display(self, obj):
        limit = with_money(obj.budget_limit, obj.institution)
        if obj.budget_limit is not None:
            limit = f"{limit} {obj.get_budget_period_display().lower()}"
            if obj.budget_strategy == License.Strategy.PER_USER:
                limit += " " + _("per holder")
        return limit

    @admin.display(description=_("spent"))
    def spent_display(self, obj):
        usage = self._usage(obj)
        spent = with_money(usage.spent, obj.institution)
        if not usage.pooled and usage.holders:
            return _("%(spent)s; %(holders)s holders, highest %(highest)s") % {
                "spent": spent,
                "holders": usage.holders,
                "highest": grouped(usage.highest),
            }
        return spent

    @admin.display(description=_("remaining"))
    def remaining_display(self, obj):
        usage = self._usage(obj)
        text = with_money(usage.remaining, obj.institution)
        if usage.remaining is not None and not usage.pooled:
            return _("%(remaining)s (least-left holder)") % {"remaining": text}
        return text

    @admin.display(description=_("window"))
    def window_display(self, obj):
        usage = self._usage(obj)
        if usage.window_start is None:
            return _("lifetime (never resets)")
        return _("%(period)s from %(start)s") % {
            "period": _(usage.period),
            "start": _local(usage.window_start, obj),
        }

    @admin.display(description=_("resets"))
    def resets_display(self, obj):
        usage = self._usage(obj)
        if usage.resets_at is None:
            return gettext("never")
        return format_html(
            '<span style="white-space: nowrap">{}</span>', _local(usage.resets_at, obj)
        )

    @admin.display(description=_("ledger"))
    def transactions_link(self, obj):
        transactions = reverse("admin:licensing_transaction_changelist")
        wallets = reverse("admin:licensing_wallet_changelist")
        return format_html(
            '<a href="{}?license={}">{}</a> · <a href="{}?license__id__exact={}">{}</a>',
            transactions,
            obj.pk,
            gettext("transactions"),
            wallets,
            obj.pk,
            gettext("wallets"),
        )
