"""The licensing admin.

- API keys are created through `licensing.credentials.api_key_create`; the full key is shown
  once (a success message after saving). Prefix and digest are never editable.
- JWT issuers' HS256 secrets are write-only (see `catalog.forms.AdminModelFormMixin`).
- Keys, end users and issuers the ledger points at cannot be deleted (deactivate instead);
  end users are otherwise view-only; wallets and the ledger (transactions) are read-only.
"""

from django.contrib import admin, messages
from django.db.models import Count

from catalog.forms import FORMFIELD_OVERRIDES
from gateway_site.localcache import clear_all

from .credentials import api_key_create
from .forms import ApiKeyForm, JwtIssuerForm, LicenseForm, LicenseTypeForm
from .models import (
    ApiKey,
    EndUser,
    Institution,
    JwtIssuer,
    License,
    LicenseType,
    Transaction,
    Wallet,
)


class ReadOnlyAdminMixin:
    """View only: no add, no change (fields shown read-only), no delete."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class KeepLedgerIntactMixin:
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
class InstitutionAdmin(admin.ModelAdmin):
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
class LicenseTypeAdmin(admin.ModelAdmin):
    form = LicenseTypeForm
    formfield_overrides = FORMFIELD_OVERRIDES
    list_display = ("name", "institution", "active", "services", "license_count", "updated_at")
    list_filter = ("active", "institution")
    list_select_related = ("institution",)
    search_fields = ("name", "institution__name")
    autocomplete_fields = ("institution",)
    readonly_fields = ("updated_at",)
    fields = ("name", "institution", "active", "policy", "guardrails", "updated_at")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_licenses=Count("licenses"))

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
    fields = ("prefix", "name", "active", "expires_at", "created_at")
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


@admin.register(License)
class LicenseAdmin(admin.ModelAdmin):
    form = LicenseForm
    list_display = (
        "name",
        "institution",
        "license_type",
        "active",
        "budget_strategy",
        "budget_period",
        "budget_limit_display",
        "budget_unit",
        "created_at",
    )
    list_filter = ("active", "budget_period", "budget_strategy", "institution", "license_type")
    list_select_related = ("institution", "license_type")
    search_fields = ("name", "institution__name", "license_type__name")
    autocomplete_fields = ("institution", "license_type")
    readonly_fields = ("created_at", "updated_at")
    inlines = (ApiKeyInline,)
    fieldsets = (
        (None, {"fields": ("name", "institution", "license_type", "active")}),
        ("Budget", {"fields": ("budget_unit", "budget_strategy", "budget_period", "budget_limit")}),
        ("Dates", {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description="budget limit", ordering="budget_limit")
    def budget_limit_display(self, obj):
        return "unlimited" if obj.budget_limit is None else f"{obj.budget_limit:,}"


@admin.register(ApiKey)
class ApiKeyAdmin(KeepLedgerIntactMixin, admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ("key_prefix", "license", "name", "active", "expires_at", "created_at")
    list_filter = ("active", "license__institution", "license")
    list_select_related = ("license",)
    search_fields = ("prefix", "name", "license__name")
    autocomplete_fields = ("license",)
    date_hierarchy = "created_at"
    actions = ("activate", "deactivate")

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("license", "name", "active", "expires_at")
        return ("key_prefix", "license", "name", "active", "expires_at", "created_at", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("key_prefix", "license", "created_at", "updated_at")

    def ledger_rows(self, obj):
        return Transaction.objects.filter(api_key=obj)

    @admin.display(description="key", ordering="prefix")
    def key_prefix(self, obj):
        return f"{obj.prefix}…" if obj.prefix else "-"

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
class JwtIssuerAdmin(KeepLedgerIntactMixin, admin.ModelAdmin):
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
class EndUserAdmin(KeepLedgerIntactMixin, admin.ModelAdmin):
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


@admin.register(Wallet)
class WalletAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "license",
        "holder",
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

    @admin.display(description="spent", ordering="spent")
    def spent_display(self, obj):
        return f"{obj.spent:,}"

    @admin.display(description="license limit")
    def limit_display(self, obj):
        limit = obj.license.budget_limit
        return "unlimited" if limit is None else f"{limit:,}"


@admin.register(Transaction)
class TransactionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The ledger: rows are never added, changed or deleted here."""

    list_display = (
        "created_at",
        "license",
        "service",
        "requested_model",
        "billed_model",
        "provider",
        "status_code",
        "credits",
        "request_id",
    )
    list_filter = ("service", "provider", "status_code", "license")
    list_select_related = ("license",)
    search_fields = ("=request_id", "requested_model", "billed_model")
    date_hierarchy = "created_at"
    show_full_result_count = False  # the ledger grows large: skip the unfiltered COUNT(*)
    fieldsets = (
        (None, {"fields": ("created_at", "request_id", "status_code", "latency_ms")}),
        ("Caller", {"fields": ("license", "api_key", "end_user", "wallet")}),
        (
            "Request",
            {"fields": ("service", "requested_model", "billed_model", "provider", "connection")},
        ),
        (
            "Usage and charge",
            {
                "fields": (
                    "prompt_tokens",
                    "completion_tokens",
                    "total_tokens",
                    "images",
                    "megapixels",
                    "credits",
                )
            },
        ),
        ("Metadata", {"fields": ("metadata",)}),
    )
