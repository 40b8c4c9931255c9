"""Single sign-on in the admin (docs/sso.md): identity providers (superusers only; the client
secret write-only, encrypted at rest; saved through licensing.signin.sso, like the
configure_sso command) and SSO identities (read-only: made at sign-in)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import Http404, JsonResponse
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from catalog.forms import FORMFIELD_OVERRIDES, AdminModelFormMixin
from core.crypto import Sealed

from ..console.admin.base import name_model
from ..models import IdentityProvider, SsoIdentity
from .access_rules import rules_table_html, try_rules, validate_rules
from .sso import (
    identity_provider_configure,
    redirect_uri_of,
    validate_domains,
    validate_groups,
    validate_issuer,
)

GROUP_FIELDS = ("admin_groups", "reviewer_groups", "teacher_groups", "student_groups")

# Django's own plurals would read "identity provider (SSO)s" and "sso identitys".
name_model(IdentityProvider, _("identity provider (SSO)"), _("identity providers (SSO)"))
name_model(SsoIdentity, _("SSO identity"), _("SSO identities"))


class IdentityProviderForm(AdminModelFormMixin, forms.ModelForm):
    secret_fields = ("client_secret",)

    clear_client_secret = forms.BooleanField(required=False, label=_("Clear the stored secret"))

    class Meta:
        model = IdentityProvider
        fields = (
            "institution",
            "issuer",
            "client_id",
            "client_secret",
            "client_secret_env",
            "groups_claim",
            *GROUP_FIELDS,
            "student_license",
            "access_rules",
            "email_domains",
            "sso_only",
            "active",
        )
        help_texts = {
            name: _('A JSON list of group names, e.g. ["staff-admins"]') for name in GROUP_FIELDS
        }

    def clean(self):
        cleaned = super().clean()
        self._clean_lists(cleaned)
        self._clean_license(cleaned)
        self._clean_rules(cleaned)
        if not cleaned.get("client_secret") and not cleaned.get("client_secret_env"):
            self.add_error(
                "client_secret", _("Enter the client secret or its environment variable.")
            )
        return cleaned

    def _clean_lists(self, cleaned: dict) -> None:
        """The issuer, the group lists and the e-mail domains as the services store them;
        each refusal on its own field."""
        try:
            if cleaned.get("issuer"):
                cleaned["issuer"] = validate_issuer(cleaned["issuer"])
        except ValidationError as exc:
            self.add_error("issuer", exc)
        for name in GROUP_FIELDS:
            try:
                cleaned[name] = validate_groups(cleaned.get(name), name.replace("_", " "))
            except ValidationError as exc:
                self.add_error(name, exc)
        try:
            cleaned["email_domains"] = validate_domains(cleaned.get("email_domains") or "")
        except ValidationError as exc:
            self.add_error("email_domains", exc)

    def _clean_rules(self, cleaned: dict) -> None:
        """Group mappings, when any is set, are the rules (the model writes them); else the
        rules as written, checked and scoped to the institution."""
        if any(cleaned.get(name) for name in GROUP_FIELDS):
            cleaned["access_rules"] = None
            return
        institution = cleaned.get("institution") or getattr(self.instance, "institution", None)
        if institution is None:
            return
        try:
            cleaned["access_rules"] = validate_rules(
                cleaned.get("access_rules") or [], institution_id=institution.pk
            )
        except ValidationError as exc:
            self.add_error("access_rules", exc)

    def _clean_license(self, cleaned: dict) -> None:
        """The student license is the institution's, and student groups need one."""
        institution = cleaned.get("institution")
        if institution is None and self.instance.pk:
            institution = self.instance.institution  # read-only once saved
        license = cleaned.get("student_license")
        if institution is not None and license is not None:
            if license.institution_id != institution.pk:
                self.add_error("student_license", _("This license belongs to another institution."))
        if cleaned.get("student_groups") and license is None:
            self.add_error("student_license", _("Student groups need a student license."))


@admin.register(IdentityProvider)
class IdentityProviderAdmin(admin.ModelAdmin):
    """Superusers only: an issuer decides who gets which role in its institution."""

    form = IdentityProviderForm
    formfield_overrides = FORMFIELD_OVERRIDES
    list_display = (
        "institution",
        "protocol",
        "issuer",
        "client_id",
        "sso_only",
        "active",
        "updated_at",
    )
    list_filter = ("protocol", "active", "sso_only")
    list_select_related = ("institution",)
    search_fields = ("institution__name", "issuer", "client_id", "email_domains")
    readonly_fields = ("redirect_uri", "rules_table", "created_at", "updated_at")
    change_form_template = "admin/licensing/identityprovider/change_form.html"
    autocomplete_fields = ("institution", "student_license")

    def get_fieldsets(self, request, obj=None):
        secret = ["client_secret"] + (["clear_client_secret"] if obj else [])
        return [
            (
                None,
                {"fields": ["institution", "issuer", "client_id", *secret, "client_secret_env"]},
            ),
            (_("Roles from the groups claim"), {"fields": ["groups_claim", *GROUP_FIELDS]}),
            (
                _("Access rules"),
                {
                    "fields": ["access_rules", *(["rules_table"] if obj else [])],
                    "description": _(
                        "First match wins (docs/access-rules.md). While a group field above is "
                        "set, the rules are the groups mapping's; clear them to write your own."
                    ),
                },
            ),
            ("Sign-in", {"fields": ["student_license", "email_domains", "sso_only", "active"]}),
            *([(_("Registered at the IdP"), {"fields": ["redirect_uri"]})] if obj else []),
        ]

    def get_readonly_fields(self, request, obj=None):
        # One provider per institution: moving it would be a new provider (a new redirect URI).
        return (*self.readonly_fields, *(("institution",) if obj else ()))

    @admin.display(description=_("redirect URI (register it at the IdP)"))
    def redirect_uri(self, obj):
        return redirect_uri_of(obj.pk) if obj.pk else "-"

    @admin.display(description=_("the rules, in order"))
    def rules_table(self, obj):
        return rules_table_html(obj.access_rules)

    def get_urls(self):
        view = self.admin_site.admin_view(require_POST(self.try_rules_view))
        return [
            path("<path:object_id>/try-rules/", view, name="licensing_identityprovider_try"),
            *super().get_urls(),
        ]

    def try_rules_view(self, request, object_id):
        obj = self.get_object(request, object_id)
        if obj is None or not self.has_view_permission(request, obj):
            raise Http404("No identity provider with this id")
        return JsonResponse(try_rules(obj.access_rules, request.POST.get("attributes", "")))

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["try_rules_url"] = reverse(
                "admin:licensing_identityprovider_try", args=[obj.pk]
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        env = data.get("client_secret_env") or ""
        secret = data.get("client_secret")
        if isinstance(secret, Sealed) or not secret:
            secret = None  # the stored one is kept
        saved = identity_provider_configure(
            institution=data.get("institution") or obj.institution,
            issuer=data["issuer"],
            client_id=data["client_id"],
            client_secret=None if env else secret,
            client_secret_env=env or None,
            groups_claim=data.get("groups_claim") or "groups",
            admin_groups=data.get("admin_groups"),
            reviewer_groups=data.get("reviewer_groups"),
            teacher_groups=data.get("teacher_groups"),
            student_groups=data.get("student_groups"),
            student_license=data.get("student_license"),
            access_rules=data.get("access_rules"),
            sso_only=bool(data.get("sso_only")),
            email_domains=data.get("email_domains"),
            active=bool(data.get("active")),
            request=request,
        )
        obj.pk = saved.pk
        obj.refresh_from_db()

    def _superuser(self, request) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_module_permission(self, request):
        return self._superuser(request)

    def has_view_permission(self, request, obj=None):
        return self._superuser(request)

    def has_add_permission(self, request):
        return self._superuser(request)

    def has_change_permission(self, request, obj=None):
        # A SAML provider is configured with `manage.py configure_saml` (docs/saml.md) until
        # the form knows its fields: shown here, never saved through the OpenID Connect form.
        if obj is not None and obj.protocol == IdentityProvider.Protocol.SAML:
            return False
        return self._superuser(request)

    def has_delete_permission(self, request, obj=None):
        return self._superuser(request)


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    """Who signed in through which provider: made at sign-in, view only (superusers)."""

    list_display = ("subject", "provider", "user", "email", "last_sign_in")
    list_filter = ("provider",)
    list_select_related = ("provider__institution", "user")
    search_fields = ("subject", "email", "user__username", "provider__institution__name")
    readonly_fields = ("provider", "subject", "user", "email", "groups", "last_sign_in")

    def has_module_permission(self, request):
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request, obj=None):
        return bool(request.user.is_active and request.user.is_superuser)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
