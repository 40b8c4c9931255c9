"""The licensing admin.

- API keys are created through `licensing.credentials.api_key_create`; the full key is shown
  once (a success message after saving). Prefix and digest are never editable.
- JWT issuers' HS256 secrets are write-only (see `catalog.forms.AdminModelFormMixin`).
- Keys, end users and issuers the ledger points at cannot be deleted (deactivate instead);
  end users are otherwise view-only; wallets and the ledger (transactions) are read-only.
"""

from collections.abc import Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from catalog.admin import register_catalog_viewer
from catalog.forms import FORMFIELD_OVERRIDES
from gateway_site.localcache import clear_all

from . import review_admin
from .credentials import api_key_create
from .forms import ApiKeyForm, JwtIssuerForm, LicenseForm, LicenseTypeForm
from .ledger.record import detail_fieldsets
from .models import (
    AdminProfile,
    ApiKey,
    BudgetAlert,
    EndUser,
    Institution,
    JwtIssuer,
    License,
    LicenseType,
    Transaction,
    Wallet,
)
from .policy import SERVICES
from .policy_try import try_request
from .review import csv_response, export_filename, iso_utc, scoped_ledger
from .scoping import institution_id_of, owns, scope_of, scoped
from .usage import holder_names, licenses_usage

register_catalog_viewer(lambda user: scope_of(user).is_institution_admin)
POLICY_DOCS = settings.BASE_DIR / "docs" / "policy.md"


def _credits(value) -> str:
    return "unlimited" if value is None else f"{value:,}"


def _short_time(value):
    """A compact UTC time that keeps list columns narrow (the admin's own format wraps)."""
    if value is None:
        return "-"
    text = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    return format_html('<span style="white-space: nowrap">{} UTC</span>', text)


class ScopedRelatedFilter(admin.RelatedFieldListFilter):
    """A relation filter that offers only the related rows the user may see."""

    def field_choices(self, field, request, model_admin):
        related = field.related_model
        queryset = scoped(related._default_manager.all(), scope_of(request.user))
        return [(obj.pk, str(obj)) for obj in queryset]


if TYPE_CHECKING:  # what the mixin is mixed into, for mypy; a plain mixin at run time
    _ModelAdmin = admin.ModelAdmin
else:
    _ModelAdmin = object


class ScopedAdminMixin(_ModelAdmin):
    """Institution scoping (see licensing.scoping) for every licensing admin: the rows, the
    foreign-key choices, the relation filters, the permissions by role; an object outside
    the scope is a 404 on every object URL (change, delete, history)."""

    def get_queryset(self, request):
        return scoped(super().get_queryset(request), scope_of(request.user))

    def _may(self, request, action, obj=None) -> bool:
        scope = scope_of(request.user)
        if not scope.allows(self.model, action):
            return False
        if obj is None or scope.superuser:
            return True
        if action == "view":
            return institution_id_of(obj) in (scope.institution_id, None)
        return owns(scope, obj)

    def has_module_permission(self, request):
        return self._may(request, "view")

    def has_view_permission(self, request, obj=None):
        return self._may(request, "view", obj)

    def has_add_permission(self, request, *args):
        return self._may(request, "add")

    def has_change_permission(self, request, obj=None):
        return self._may(request, "change", obj)

    def has_delete_permission(self, request, obj=None):
        return self._may(request, "delete", obj)

    def _get_obj_does_not_exist_redirect(self, request, opts, object_id):
        raise Http404(f"No {opts.verbose_name} with this id")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        scope = scope_of(request.user)
        related = db_field.related_model
        if not scope.superuser and "queryset" not in kwargs:
            kwargs["queryset"] = scoped(related._default_manager.all(), scope)
            if related is Institution:
                kwargs["required"] = True  # never a shared row from an institution admin
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_changeform_initial_data(self, request):
        initial: dict[str, Any] = super().get_changeform_initial_data(request)
        scope = scope_of(request.user)
        field_names = {f.name for f in self.model._meta.get_fields()}
        if scope.institution_id is not None and "institution" in field_names:
            initial.setdefault("institution", scope.institution_id)
        return initial

    def get_list_filter(self, request):
        filters = []
        superuser = scope_of(request.user).superuser
        specs: Sequence[Any] = super().get_list_filter(request)
        for spec in specs:
            name = spec if isinstance(spec, str) else spec[0]
            if not superuser and name.split("__")[-1] == "institution":
                continue  # one institution: nothing to filter
            field = _relation(self.model, name)
            filters.append((name, ScopedRelatedFilter) if field is not None else spec)
        return filters


def _relation(model, lookup: str):
    """The relation field a list_filter path ends on, else None."""
    field = None
    for part in lookup.split("__"):
        try:
            field = model._meta.get_field(part)
        except Exception:
            return None
        if not field.is_relation:
            return None
        model = field.related_model
    return field


class ReadOnlyAdminMixin(_ModelAdmin):
    """View only: no add, no change (fields shown read-only), no delete."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class KeepLedgerIntactMixin(_ModelAdmin):
    """Deleting a key, an end user or an issuer would null the ledger's references to it
    (SET_NULL): refuse once ledger rows point at it (deactivate instead). No bulk delete, so
    every delete goes through this per-object check."""

    def ledger_rows(self, obj):
        raise NotImplementedError

    def has_delete_permission(self, request, obj=None):
        if obj is not None and self.ledger_rows(obj).exists():
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


@admin.register(Institution)
class InstitutionAdmin(ScopedAdminMixin, admin.ModelAdmin):
    list_display = ("name", "license_count", "license_type_count", "issuer_count", "created_at")
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

    @admin.display(description="licenses", ordering="_licenses")
    def license_count(self, obj):
        return obj._licenses

    @admin.display(description="license types", ordering="_types")
    def license_type_count(self, obj):
        return obj._types

    @admin.display(description="JWT issuers", ordering="_issuers")
    def issuer_count(self, obj):
        return obj._issuers


@admin.register(LicenseType)
class LicenseTypeAdmin(ScopedAdminMixin, admin.ModelAdmin):
    form = LicenseTypeForm
    formfield_overrides = FORMFIELD_OVERRIDES
    list_display = ("name", "institution", "active", "services", "license_count", "updated_at")
    list_filter = ("active", "institution")
    list_select_related = ("institution",)
    search_fields = ("name", "institution__name")
    autocomplete_fields = ("institution",)
    readonly_fields = ("updated_at",)
    fields = ("name", "institution", "active", "policy", "guardrails", "updated_at")
    change_form_template = "admin/licensing/licensetype/change_form.html"

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
        """docs/policy.md, for the link in the policy field's help."""
        if not self.has_view_permission(request):
            raise Http404("Not found")
        return HttpResponse(
            POLICY_DOCS.read_text(encoding="utf-8"), content_type="text/plain; charset=utf-8"
        )

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "policy" and field is not None:
            field.help_text = format_html(
                "The policy document: which services, providers and parameter values are "
                "allowed. Format, rule keys, the exact 403 messages and examples: "
                '<a href="{}" target="_blank">docs/policy.md</a>. Rules must name parameters '
                "of the service's request (unknown names are refused).",
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
            return JsonResponse({"outcome": "invalid", "message": "Choose a service"}, status=400)
        return JsonResponse(try_request(obj.policy, service, request.POST.get("body", "")))

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["try_services"] = SERVICES
            context["try_url"] = reverse("admin:licensing_licensetype_try", args=[obj.pk])
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="enabled services")
    def services(self, obj):
        policy = obj.policy
        if not isinstance(policy, dict) or not isinstance(policy.get("services"), dict):
            return "(invalid document)"
        return ", ".join(sorted(policy["services"])) or "(none)"

    @admin.display(description="licenses", ordering="_licenses")
    def license_count(self, obj):
        return obj._licenses


class ApiKeyInline(admin.TabularInline):
    """The license's keys, listed read-only; keys are created from the API key admin."""

    model = ApiKey
    fields = ("prefix", "name", "active", "expires_at", "last_used_at", "created_at")
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
class LicenseAdmin(ScopedAdminMixin, admin.ModelAdmin):
    form = LicenseForm
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
            ("Budget", {"fields": budget}),
        ]
        if obj is not None:
            usage = [
                "spent_display",
                "remaining_display",
                "window_display",
                "resets_display",
                "transactions_link",
            ]
            fieldsets.append(("Usage in the current window", {"fields": usage}))
            fieldsets.append(("Dates", {"fields": ["created_at", "updated_at"]}))
        return fieldsets

    def get_changelist(self, request, **kwargs):
        return UsageChangeList

    def _usage(self, obj):
        usage = getattr(obj, "_usage", None)
        if usage is None:
            usage = obj._usage = licenses_usage([obj])[obj.pk]
        return usage

    @admin.display(description="limit", ordering="budget_limit")
    def budget_limit_display(self, obj):
        limit = _credits(obj.budget_limit)
        if obj.budget_limit is not None:
            limit = f"{limit} {obj.get_budget_period_display().lower()}"
            if obj.budget_strategy == License.Strategy.PER_USER:
                limit += " per holder"
        return limit

    @admin.display(description="spent")
    def spent_display(self, obj):
        usage = self._usage(obj)
        if not usage.pooled and usage.holders:
            return f"{usage.spent:,} ({usage.holders} holders, highest {usage.highest:,})"
        return f"{usage.spent:,}"

    @admin.display(description="remaining")
    def remaining_display(self, obj):
        usage = self._usage(obj)
        text = _credits(usage.remaining)
        if usage.remaining is not None and not usage.pooled:
            return f"{text} (least-left holder)"
        return text

    @admin.display(description="window")
    def window_display(self, obj):
        usage = self._usage(obj)
        if usage.window_start is None:
            return "lifetime (never resets)"
        return f"{usage.period} from {usage.window_start:%Y-%m-%d %H:%M} UTC"

    @admin.display(description="resets")
    def resets_display(self, obj):
        usage = self._usage(obj)
        if usage.resets_at is None:
            return "never"
        return format_html(
            '<span style="white-space: nowrap">{}</span>',
            usage.resets_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        )

    @admin.display(description="ledger")
    def transactions_link(self, obj):
        transactions = reverse("admin:licensing_transaction_changelist")
        wallets = reverse("admin:licensing_wallet_changelist")
        return format_html(
            '<a href="{}?license={}">transactions</a> · '
            '<a href="{}?license__id__exact={}">wallets</a>',
            transactions,
            obj.pk,
            wallets,
            obj.pk,
        )


@admin.register(ApiKey)
class ApiKeyAdmin(KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = ApiKeyForm
    list_display = (
        "key_prefix",
        "license",
        "name",
        "active",
        "expires",
        "last_used",
        "created",
    )
    list_filter = ("active", "license__institution", "license")
    list_select_related = ("license",)
    search_fields = ("prefix", "name", "license__name")
    autocomplete_fields = ("license",)
    date_hierarchy = "created_at"
    actions = ("activate", "deactivate")

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("license", "name", "active", "expires_at")
        return (
            "key_prefix",
            "license",
            "name",
            "active",
            "expires_at",
            "last_used_at",
            "created_at",
            "updated_at",
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("key_prefix", "license", "last_used_at", "created_at", "updated_at")

    def ledger_rows(self, obj):
        return Transaction.objects.filter(api_key=obj)

    @admin.display(description="key", ordering="prefix")
    def key_prefix(self, obj):
        return f"{obj.prefix}…" if obj.prefix else "-"

    @admin.display(description="expires", ordering="expires_at")
    def expires(self, obj):
        return _short_time(obj.expires_at)

    @admin.display(description="last used", ordering="last_used_at")
    def last_used(self, obj):
        return _short_time(obj.last_used_at)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj):
        return _short_time(obj.created_at)

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        row, key = api_key_create(license=obj.license, name=obj.name, expires_at=obj.expires_at)
        if not obj.active:
            row.active = False
            row.save(update_fields=["active", "updated_at"])
        # The admin goes on with `obj` (log entry, redirect): make it the created row.
        for field in ApiKey._meta.concrete_fields:
            setattr(obj, field.attname, getattr(row, field.attname))
        obj._state.adding = False
        obj._state.db = row._state.db
        messages.success(
            request,
            f"The new API key is {key} — copy it now: it is not stored and will not be "
            "shown again.",
        )

    def _set_active(self, request, queryset, active: bool):
        updated = queryset.update(active=active)
        clear_all()  # update() sends no post_save: drop the API's cached keys here
        state = "activated" if active else "deactivated"
        self.message_user(request, f"{updated} API key(s) {state}.", messages.SUCCESS)

    @admin.action(description="Activate selected API keys", permissions=["change"])
    def activate(self, request, queryset):
        self._set_active(request, queryset, True)

    @admin.action(description="Deactivate selected API keys", permissions=["change"])
    def deactivate(self, request, queryset):
        self._set_active(request, queryset, False)


@admin.register(JwtIssuer)
class JwtIssuerAdmin(KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = JwtIssuerForm
    formfield_overrides = FORMFIELD_OVERRIDES
    list_display = (
        "issuer",
        "institution",
        "license",
        "audience",
        "algorithm_list",
        "key_source",
        "active",
        "updated_at",
    )
    list_filter = ("active", "institution")
    list_select_related = ("institution", "license")
    search_fields = ("issuer", "audience", "institution__name", "license__name")
    autocomplete_fields = ("institution", "license")
    readonly_fields = ("updated_at",)

    def get_fieldsets(self, request, obj=None):
        secret = ["hs256_secret"] + (["clear_hs256_secret"] if obj else [])
        return [
            (
                None,
                {
                    "fields": ["issuer", "audience", "institution", "license", "active"]
                    + (["updated_at"] if obj else [])
                },
            ),
            ("Verification", {"fields": ["algorithms", "jwks_url", "public_keys", *secret]}),
        ]

    def ledger_rows(self, obj):
        return Transaction.objects.filter(end_user__issuer=obj)

    @admin.display(description="algorithms")
    def algorithm_list(self, obj):
        algs = obj.algorithms
        return ", ".join(str(a) for a in algs) if isinstance(algs, list) else str(algs)

    @admin.display(description="keys from")
    def key_source(self, obj):
        sources = []
        if obj.jwks_url:
            sources.append("JWKS")
        if obj.public_keys:
            sources.append("PEM")
        if obj.hs256_secret:
            sources.append("HS256 secret")
        return ", ".join(sources) or "-"


@admin.register(EndUser)
class EndUserAdmin(KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    """Created by a user's first valid token: view only (delete while it has no ledger rows)."""

    list_display = ("subject", "issuer", "license", "created_at")
    list_filter = ("issuer", "license")
    list_select_related = ("issuer", "license")
    search_fields = ("subject", "issuer__issuer", "license__name")
    date_hierarchy = "created_at"

    def ledger_rows(self, obj):
        return Transaction.objects.filter(end_user=obj)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class HolderNameChangeList(ChangeList):
    """Names the holders of a page of wallets in two queries."""

    def get_results(self, request):
        super().get_results(request)
        names = holder_names([obj.holder for obj in self.result_list])
        for obj in self.result_list:
            obj._holder_name = names.get(obj.holder, obj.holder)


@admin.register(Wallet)
class WalletAdmin(ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    list_display = (
        "license",
        "holder_name",
        "period",
        "window_start",
        "unit",
        "spent_display",
        "limit_display",
        "updated_at",
    )
    list_filter = ("period", "unit", "license")
    list_select_related = ("license",)
    search_fields = ("holder", "license__name")
    date_hierarchy = "window_start"

    readonly_fields = ("holder_name",)

    def get_changelist(self, request, **kwargs):
        return HolderNameChangeList

    @admin.display(description="holder", ordering="holder")
    def holder_name(self, obj):
        name = getattr(obj, "_holder_name", None)
        if name is None:
            name = holder_names([obj.holder]).get(obj.holder, obj.holder)
        return name

    @admin.display(description="spent", ordering="spent")
    def spent_display(self, obj):
        return f"{obj.spent:,}"

    @admin.display(description="license limit")
    def limit_display(self, obj):
        limit = obj.license.budget_limit
        return "unlimited" if limit is None else f"{limit:,}"


@admin.register(Transaction)
class TransactionAdmin(ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    """The ledger: rows are never added, changed or deleted here. The list is the review page:
    the filter bar, totals and CSV export of licensing.review_admin."""

    list_display = (
        "time",
        "license_name",
        "holder",
        "service",
        "model_name",
        "provider",
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
        from . import live, usage_views

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

    @admin.display(description="time (UTC)", ordering="created_at")
    def time(self, obj):
        at = obj.created_at.astimezone(UTC)
        return format_html(
            '<span title="{}">{}</span>', iso_utc(obj.created_at), at.strftime("%Y-%m-%d %H:%M")
        )

    @admin.display(description="license")
    def license_name(self, obj):
        return _truncated(obj.license.name, 18)

    @admin.display(description="holder")
    def holder(self, obj):
        if obj.api_key_id is not None:
            return format_html(
                '<span title="API key {}">{}…</span>', obj.api_key.name, obj.api_key.prefix
            )
        if obj.end_user_id is not None:
            return _truncated(obj.end_user.subject, 14)
        return "-"

    @admin.display(description="model")
    def model_name(self, obj):
        shown = obj.billed_model or obj.requested_model
        title = f"requested {obj.requested_model}"
        if obj.billed_model and obj.billed_model != obj.requested_model:
            title += f", billed {obj.billed_model}"
        if len(shown) > 20:
            shown = shown[:19] + "…"
        return format_html('<span title="{}">{}</span>', title, shown)

    @admin.display(description="status")
    def status(self, obj):
        return format_html(
            '<span class="outcome outcome-{}" title="{}">{} {}</span>',
            obj.outcome,
            obj.get_outcome_display(),
            obj.status_code,
            obj.outcome.replace("_", " "),
        )

    @admin.display(description="credits", ordering="credits")
    def credits_display(self, obj):
        return f"{obj.credits:,}"

    @admin.display(description="tokens")
    def tokens(self, obj):
        parts = [] if obj.total_tokens is None else [f"{obj.total_tokens:,}"]
        if obj.images:
            parts.append(f"{obj.images} img")
        return " · ".join(parts) or "-"

    @admin.display(description="reason")
    def reason(self, obj):
        if not (obj.error_code or obj.error_message):
            return ""
        full = ": ".join(part for part in (obj.error_code, obj.error_message) if part)
        return _truncated(full, 26)

    @admin.display(description="request id")
    def request(self, obj):
        title = obj.request_id + (f" · answer {obj.upstream_id}" if obj.upstream_id else "")
        return format_html('<code title="{}">{}</code>', title, obj.request_id[:8])


def _truncated(text: str, length: int):
    if len(text) <= length:
        return text
    return format_html('<span title="{}">{}…</span>', text, text[: length - 1])


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    """One row per license and window whose alert threshold was crossed."""

    list_display = ("license", "window_start", "holder", "spent", "threshold", "limit", "sent_at")
    list_filter = ("license",)
    list_select_related = ("license",)
    search_fields = ("license__name",)
    date_hierarchy = "created_at"


# --- users and their institution role (superusers only) ---------------------------------------


class SuperuserOnlyMixin:
    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    has_add_permission = has_change_permission = has_delete_permission = has_view_permission


class AdminProfileInline(admin.StackedInline):
    model = AdminProfile
    can_delete = True
    extra = 0
    max_num = 1
    autocomplete_fields = ("institution",)
    verbose_name = "institution and role"
    verbose_name_plural = "institution and role (leave empty for a superuser)"


@admin.register(AdminProfile)
class AdminProfileAdmin(SuperuserOnlyMixin, admin.ModelAdmin):
    list_display = ("user", "institution", "role")
    list_filter = ("role", "institution")
    list_select_related = ("user", "institution")
    search_fields = ("user__username", "institution__name")
    autocomplete_fields = ("institution", "user")


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class GatewayUserAdmin(SuperuserOnlyMixin, UserAdmin):
    """Superusers tie a staff user to an institution and a role here (or with
    `manage.py create_institution_admin`); only superusers manage users."""

    inlines = (AdminProfileInline,)
    list_display = (
        "username",
        "email",
        "is_staff",
        "is_superuser",
        "institution",
        "role",
        "is_active",
    )
    list_select_related = ("gateway_profile__institution",)

    @admin.display(description="institution", ordering="gateway_profile__institution__name")
    def institution(self, obj):
        profile = getattr(obj, "gateway_profile", None)
        return profile.institution if profile else "-"

    @admin.display(description="role", ordering="gateway_profile__role")
    def role(self, obj):
        profile = getattr(obj, "gateway_profile", None)
        return profile.get_role_display().split(":")[0] if profile else "-"
