"""Single sign-on in the admin (docs/sso.md, docs/saml.md): identity providers (superusers only;
OpenID Connect's client secret write-only, encrypted at rest, saved through licensing.signin.sso
like the configure_sso command; SAML 2.0's metadata checked and saved through
licensing.signin.saml like configure_saml, the protocol chosen on the add page) and SSO
identities (read-only: made at sign-in)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator
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

if TYPE_CHECKING:
    from .saml import CheckedSource


def _saml():
    """licensing.signin.saml, imported on first use: it imports pysaml2, which a worker's start
    does not need (the admin is imported by every process; docs/architecture.md, "Start-up")."""
    from . import saml

    return saml


GROUP_FIELDS = ("admin_groups", "reviewer_groups", "teacher_groups", "student_groups")

# Django's own plurals would read "identity provider (SSO)s" and "sso identitys".
name_model(IdentityProvider, _("identity provider (SSO)"), _("identity providers (SSO)"))
name_model(SsoIdentity, _("SSO identity"), _("SSO identities"))


def _mapping_lists_clean(form, cleaned: dict) -> None:
    """The group lists and the e-mail domains as the services store them, each refusal on its
    field (a function of the form, not a method: the steps are tested on a stand-in form)."""
    for name in GROUP_FIELDS:
        try:
            cleaned[name] = validate_groups(cleaned.get(name), name.replace("_", " "))
        except ValidationError as exc:
            form.add_error(name, exc)
    try:
        cleaned["email_domains"] = validate_domains(cleaned.get("email_domains") or "")
    except ValidationError as exc:
        form.add_error("email_domains", exc)


class MappingChecks(AdminModelFormMixin, forms.ModelForm):
    """The base of both protocols' forms: the checks of the options they share (groups, e-mail
    domains, the student license, the access rules), each refusal on its own field."""

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


class IdentityProviderForm(MappingChecks):
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
        _mapping_lists_clean(self, cleaned)


# SamlSource's fields as the SAML form names them (a refusal is shown on its field).
SOURCE_FIELDS = {
    "metadata_url": "saml_metadata_url",
    "metadata_xml": "saml_metadata_xml",
    "entity_id": "issuer",
    "federation_cert": "saml_federation_cert",
}


class SamlProviderForm(MappingChecks):
    """A SAML 2.0 provider: its metadata checked by saml_source_checked (the command's check)
    in clean(), so that a refused URL or document is an error on its field and nothing is
    saved; the admin then stores what was checked. The SP's key pair is never a field."""

    class Meta:
        model = IdentityProvider
        fields = (
            "institution",
            "saml_metadata_url",
            "saml_metadata_xml",
            "issuer",
            "saml_federation_cert",
            "groups_claim",
            *GROUP_FIELDS,
            "student_license",
            "access_rules",
            "email_domains",
            "sso_only",
            "active",
        )
        labels = {
            "saml_metadata_url": _("IdP metadata URL"),
            "saml_metadata_xml": _("IdP metadata XML"),
            "issuer": _("IdP entity id"),
            "saml_federation_cert": _("Federation signing certificate"),
        }
        help_texts = {
            **{name: _('A JSON list of attribute values, e.g. ["staff"]') for name in GROUP_FIELDS},
            "saml_metadata_url": _(
                "Fetched through the outbound guard and refreshed every 6 hours (https://...)."
            ),
            "saml_metadata_xml": _("Or: the metadata document pasted here (one of the two)."),
            "issuer": _(
                "The IdP's entityID. Needed when the metadata describes several IdPs (a "
                "federation's); blank: the one the metadata describes."
            ),
            "saml_federation_cert": _(
                "PEM certificate that signs the federation's metadata (DFN-AAI, eduGAIN): "
                "checked at each fetch. Blank: the metadata is not signature-checked."
            ),
            "groups_claim": _(
                "The name the groups (memberOf, eduPersonEntitlement, eduPersonAffiliation) "
                "go by in the rules."
            ),
        }

    checked: CheckedSource | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["issuer"].required = False
        self.fields["saml_metadata_url"].required = False
        self.fields["saml_metadata_xml"].required = False
        # What configure_saml reads of a file at most (the model's TextField has no limit).
        self.fields["saml_metadata_xml"].validators.append(MaxLengthValidator(_saml().MAX_METADATA))

    def clean(self):
        cleaned = super().clean()
        _mapping_lists_clean(self, cleaned)
        self._clean_license(cleaned)
        self._clean_rules(cleaned)
        self._clean_source(cleaned)
        return cleaned

    def _clean_source(self, cleaned: dict) -> None:
        if any(name in self.errors for name in SOURCE_FIELDS.values()):
            return  # a field already refused (too long, a NUL): nothing to fetch
        source = _saml().SamlSource(
            metadata_url=cleaned.get("saml_metadata_url") or "",
            metadata_xml=cleaned.get("saml_metadata_xml") or "",
            entity_id=cleaned.get("issuer") or "",
            federation_cert=cleaned.get("saml_federation_cert") or "",
        )
        try:
            self.checked = _saml().saml_source_checked(source)
        except ValidationError as exc:
            for key, errors in exc.error_dict.items():
                self.add_error(SOURCE_FIELDS[key], errors)
            return
        cleaned["issuer"] = self.checked.entity_id  # so the issuer's uniqueness is checked


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
    readonly_fields = (
        "redirect_uri",
        "saml_sp_metadata_url",
        "saml_acs_url",
        "rules_table",
        "created_at",
        "updated_at",
    )
    change_form_template = "admin/licensing/identityprovider/change_form.html"
    autocomplete_fields = ("institution", "student_license")

    @staticmethod
    def _is_saml(request, obj) -> bool:
        """A SAML provider's page, or the add page with SAML 2.0 chosen (`?protocol=saml`)."""
        if obj is not None:
            return obj.protocol == IdentityProvider.Protocol.SAML
        return request.GET.get("protocol") == IdentityProvider.Protocol.SAML

    def get_form(self, request, obj=None, change=False, **kwargs):
        if self._is_saml(request, obj):
            kwargs["form"] = SamlProviderForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request, obj=None):
        if self._is_saml(request, obj):
            return self._saml_fieldsets(obj)
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

    def _saml_fieldsets(self, obj):
        source = ["saml_metadata_url", "saml_metadata_xml", "issuer", "saml_federation_cert"]
        return [
            (None, {"fields": ["institution"]}),
            (_("The IdP's metadata"), {"fields": source}),
            (_("Roles from the groups"), {"fields": ["groups_claim", *GROUP_FIELDS]}),
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
            (_("Sign-in"), {"fields": ["student_license", "email_domains", "sso_only", "active"]}),
            *(
                [(_("Give these to the IdP"), {"fields": ["saml_sp_metadata_url", "saml_acs_url"]})]
                if obj
                else []
            ),
        ]

    def get_readonly_fields(self, request, obj=None):
        # One provider per institution: moving it would be a new provider (a new redirect URI).
        return (*self.readonly_fields, *(("institution",) if obj else ()))

    @admin.display(description=_("redirect URI (register it at the IdP)"))
    def redirect_uri(self, obj):
        return redirect_uri_of(obj.pk) if obj.pk else "-"

    @admin.display(description=_("SP metadata URL (the SP's entity id)"))
    def saml_sp_metadata_url(self, obj):
        return _saml().sp_entity_id(obj.pk) if obj.pk else "-"

    @admin.display(description=_("assertion consumer service (HTTP-POST)"))
    def saml_acs_url(self, obj):
        return _saml().acs_url_of(obj.pk) if obj.pk else "-"

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
        if add:
            context["protocol_choices"] = IdentityProvider.Protocol.choices
            saml = self._is_saml(request, None)
            context["protocol_chosen"] = IdentityProvider.Protocol.SAML if saml else "oidc"
        return super().render_change_form(request, context, add, change, form_url, obj)

    def response_add(self, request, obj, post_url_continue=None):
        return self._add_another_keeps_protocol(request, obj, super().response_add(request, obj))

    def response_change(self, request, obj):
        return self._add_another_keeps_protocol(request, obj, super().response_change(request, obj))

    def _add_another_keeps_protocol(self, request, obj, response):
        """ "Save and add another" on a SAML provider's page opens the SAML add page (the admin's
        redirect goes to the add page's bare path; from the add page it keeps the query)."""
        saml = obj.protocol == IdentityProvider.Protocol.SAML
        location = response.get("Location", "")
        if "_addanother" in request.POST and saml and "protocol=saml" not in location:
            response["Location"] = location + ("&" if "?" in location else "?") + "protocol=saml"
        return response

    def save_model(self, request, obj, form, change):
        if isinstance(form, SamlProviderForm):
            saved = self._saml_save(request, obj, form)
        else:
            saved = self._oidc_save(request, obj, form)
        obj.pk = saved.pk
        obj.refresh_from_db()

    def _saml_save(self, request, obj, form: SamlProviderForm) -> IdentityProvider:
        """What the form checked, stored by the command's service (one set of checks)."""
        data = form.cleaned_data
        assert form.checked is not None  # a valid SamlProviderForm has checked its source
        mapping = {name: data.get(name) for name in (*GROUP_FIELDS, "student_license")}
        return _saml().saml_provider_configure(
            institution=data.get("institution") or obj.institution,
            source=form.checked.source,
            checked=form.checked,
            mapping={
                **mapping,
                "groups_claim": data.get("groups_claim") or "groups",
                "access_rules": data.get("access_rules"),
                "sso_only": bool(data.get("sso_only")),
                "email_domains": data.get("email_domains"),
                "active": bool(data.get("active")),
            },
            request=request,
        )

    def _oidc_save(self, request, obj, form) -> IdentityProvider:
        data = form.cleaned_data
        env = data.get("client_secret_env") or ""
        secret = data.get("client_secret")
        if isinstance(secret, Sealed) or not secret:
            secret = None  # the stored one is kept
        return identity_provider_configure(
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

    def _superuser(self, request) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_module_permission(self, request):
        return self._superuser(request)

    def has_view_permission(self, request, obj=None):
        return self._superuser(request)

    def has_add_permission(self, request):
        return self._superuser(request)

    def has_change_permission(self, request, obj=None):
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
