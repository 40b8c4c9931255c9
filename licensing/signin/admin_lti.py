"""LTI 1.3 platforms (docs/lti.md): registered by the institution's admins (or superusers, or
`manage.py configure_lti`), with the two URLs to paste into the LMS; the identities and the
launch rows a launch leaves behind, view only. Scoped to the institution like every page."""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import Http404, JsonResponse
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from ..access.audit import audit_event_record
from ..console.admin.base import ReadOnlyAdminMixin, ScopedAdminMixin, name_model
from ..console.forms import MONEY_OF_INSTITUTION
from ..console.money import (
    MoneyFormMixin,
    Rate,
    currencies_of,
    institution_rate,
    single_rate,
    with_money,
)
from ..models import AuditEvent, LtiIdentity, LtiLaunchState, LtiPlatform
from .access_rules import rules_table_html, try_rules
from .lti import lti_attributes, lti_urls, validate_lti_rules

# Django's own plural would read "LTI launchs".
name_model(LtiLaunchState, _("LTI launch"), _("LTI launches"))
name_model(LtiPlatform, _("LTI platform"), _("LTI platforms"))
name_model(LtiIdentity, _("LTI identity"), _("LTI identities"))


class LtiPlatformForm(MoneyFormMixin, forms.ModelForm):
    """The default allowance of the courses a launch creates is entered and shown in the
    institution's currency, like a course's own (MoneyFormMixin)."""

    money_fields = ("allowance",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "allowance" in self.fields:  # the model's help names the stored unit
            self.fields["allowance"].help_text = _(
                "Default allowance per student of the courses a launch creates; empty = none"
            )
        choices = getattr(self.fields.get("institution"), "queryset", None)
        if self.instance.institution_id:
            shown: Rate | None = institution_rate(self.instance.institution)
        else:  # a new platform: the institution offered, if there is one only
            shown = single_rate(choices, "pk")
        if shown is None:
            chooser = ("id_institution", currencies_of(choices, "pk"))
            self.setup_money(None, MONEY_OF_INSTITUTION, chooser)
        else:
            self.setup_money(shown)

    def money_rate(self) -> Rate | None:
        institution = self.cleaned_data.get("institution")
        if institution is None and self.instance.institution_id:
            institution = self.instance.institution
        return institution_rate(institution) if institution is not None else None

    def clean(self):
        cleaned = super().clean() or self.cleaned_data
        self.clean_money()
        institution = cleaned.get("institution") or getattr(self.instance, "institution", None)
        if institution is not None:
            try:
                cleaned["access_rules"] = validate_lti_rules(
                    cleaned.get("access_rules") or [], institution_id=institution.pk
                )
            except ValidationError as exc:
                self.add_error("access_rules", exc)
        return cleaned

    class Meta:
        model = LtiPlatform
        fields = (  # the admin's `fields` below decide the order shown
            "institution", "issuer", "client_id", "deployment_ids", "jwks_url", "auth_login_url",
            "license", "allowance", "allowance_period", "access_rules", "active",
        )  # fmt: skip


@admin.register(LtiPlatform)
class LtiPlatformAdmin(ScopedAdminMixin, admin.ModelAdmin):
    form = LtiPlatformForm
    list_display = (
        "issuer", "client_id", "institution", "license", "allowance_display", "active"
    )  # fmt: skip
    list_filter = ("institution", "active")
    list_select_related = ("institution", "license")
    search_fields = ("issuer", "client_id", "institution__name")
    readonly_fields = ("tool_urls", "rules_table", "created_at", "updated_at")
    change_form_template = "admin/licensing/identityprovider/change_form.html"
    fields = (
        "institution",
        "issuer",
        "client_id",
        "deployment_ids",
        "jwks_url",
        "auth_login_url",
        "license",
        "allowance",
        "allowance_period",
        "access_rules",
        "rules_table",
        "active",
        "tool_urls",
        "created_at",
        "updated_at",
    )

    @admin.display(description=_("default allowance"), ordering="allowance")
    def allowance_display(self, obj):
        return with_money(obj.allowance, obj.institution)

    @admin.display(description=_("paste into the LMS"))
    def tool_urls(self, obj):
        login_url, launch_url = lti_urls()
        return f"login_url: {login_url}  launch_url: {launch_url}"

    @admin.display(description=_("the rules, in order"))
    def rules_table(self, obj):
        if not obj.access_rules:
            return _("No rules: roles from the LTI roles claim (instructor, learner).")
        return rules_table_html(obj.access_rules)

    def get_urls(self):
        view = self.admin_site.admin_view(require_POST(self.try_rules_view))
        return [
            path("<path:object_id>/try-rules/", view, name="licensing_ltiplatform_try"),
            *super().get_urls(),
        ]

    def try_rules_view(self, request, object_id):
        obj = self.get_object(request, object_id)
        if obj is None or not self.has_view_permission(request, obj):
            raise Http404("No LTI platform with this id")
        answer = try_rules(
            obj.access_rules, request.POST.get("attributes", ""), attributes_of=lti_attributes
        )
        return JsonResponse(answer)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.access_rules:
            context["try_rules_url"] = reverse("admin:licensing_ltiplatform_try", args=[obj.pk])
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit_event_record(
            action=AuditEvent.Action.SSO_CONFIGURED,
            request=request,
            institution=obj.institution_id,
            target=f"lti_platform:{obj.pk}",
            detail={
                "method": "lti",
                "created": not change,
                "issuer": obj.issuer,
                "client_id": obj.client_id,
                "deployment_ids": obj.deployment_ids,
                "license": obj.license_id,
                "access_rules": obj.access_rules,
            },
        )


@admin.register(LtiIdentity)
class LtiIdentityAdmin(ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    list_display = ("subject", "platform", "user", "name", "email", "last_launch")
    list_filter = ("platform",)
    list_select_related = ("platform", "user")
    search_fields = ("subject", "name", "email", "user__username")


@admin.register(LtiLaunchState)
class LtiLaunchStateAdmin(ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    list_display = ("platform", "created_at", "used_at")
    list_filter = ("platform",)
    list_select_related = ("platform",)
    exclude = ("state", "nonce")  # never shown: a pending state could be finished by a reader

    def has_module_permission(self, request):
        return False  # listed for the audit trail and the scoping tests, not in the menu
