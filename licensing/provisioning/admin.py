"""SCIM in the admin (docs/scim.md), scoped to the admin's institution: tokens (listed by
prefix, never the secret; made here and shown once, as API keys are; revoked by an action) and
the users and groups the identity system pushed (read-only: /scim/v2/ changes them)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Prefetch
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from ..console.admin.base import (
    ReadOnlyAdminMixin,
    RefuseNulParamsMixin,
    ScopedAdminMixin,
    _short_time,
    name_model,
)
from ..models import EndUser, ScimGroup, ScimToken, ScimUser


def _scim():
    """The wing's services and selectors, imported on first use: they import scim2-models, which
    a worker's start does not need (docs/architecture.md, "Start-up"; the admin is imported by
    every process)."""
    from . import selectors, services

    return selectors, services


name_model(ScimToken, _("SCIM token"), _("SCIM tokens"))
name_model(ScimUser, _("SCIM user"), _("SCIM users"))
name_model(ScimGroup, _("SCIM group"), _("SCIM groups"))


class ScimTokenForm(forms.ModelForm):
    rotate = forms.BooleanField(
        required=False,
        label=_("Replace the active token"),
        help_text=_(
            "The institution has one token at a time. Tick this to revoke the one it has now: "
            "the identity system stops reaching the gateway until it has the new one."
        ),
    )

    class Meta:
        model = ScimToken
        fields = ("institution",)
        help_texts = {
            "institution": _("The school whose identity system (Entra ID, Okta, ...) will use it.")
        }

    def clean(self):
        cleaned = super().clean() or {}
        institution = cleaned.get("institution")
        has_one = ScimToken.objects.filter(institution=institution, active=True).exists()
        if institution is not None and has_one and not cleaned.get("rotate"):
            self.add_error(
                "rotate",
                _("This institution has an active token: tick “Replace the active token”."),
            )
        return cleaned


@admin.register(ScimToken)
class ScimTokenAdmin(RefuseNulParamsMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = ScimTokenForm
    list_display = ("token_prefix", "institution", "active", "last_used", "created", "revoked")
    list_filter = ("active", "institution")
    list_select_related = ("institution",)
    search_fields = ("prefix",)
    search_help_text = _("The first characters of a token.")
    actions = ("revoke",)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("institution", "rotate")
        return ("token_prefix", "institution", "active", "last_used_at", "created_at", "revoked_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.get_fields(request, obj)

    def has_delete_permission(self, request, obj=None):
        return False  # revoked, never deleted: the audit log names it

    @admin.display(description=_("token"), ordering="prefix")
    def token_prefix(self, obj):
        return f"{obj.prefix}…"

    @admin.display(description=_("last used"), ordering="last_used_at")
    def last_used(self, obj):
        return _short_time(obj.last_used_at)

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj):
        return _short_time(obj.created_at)

    @admin.display(description=_("revoked"), ordering="revoked_at")
    def revoked(self, obj):
        return _short_time(obj.revoked_at)

    def save_model(self, request, obj, form, change):
        if change:
            return  # nothing on a token's page is editable
        selectors, services = _scim()
        token = services.do_create_scim_token(
            institution=obj.institution,
            rotate=form.cleaned_data.get("rotate", False),
            actor="",
            request=request,
        )
        row = ScimToken.objects.get(digest=selectors.token_digest(token))
        # The admin goes on with `obj` (log entry, redirect): make it the created row.
        for field in ScimToken._meta.concrete_fields:
            setattr(obj, field.attname, getattr(row, field.attname))
        obj._state.adding = False
        obj._state.db = row._state.db
        messages.success(
            request,
            _(
                "The new SCIM token is %(token)s — copy it now into the identity system's "
                "provisioning settings: it is not stored and will not be shown again."
            )
            % {"token": token},
        )

    @admin.action(description=_("Revoke selected SCIM tokens"), permissions=["change"])
    def revoke(self, request, queryset):
        count = _scim()[1].do_revoke_scim_tokens(tokens=queryset, actor="", request=request)
        self.message_user(
            request, _("%(n)s SCIM token(s) revoked.") % {"n": count}, messages.SUCCESS
        )


def _person_link(user, institution_id: int):
    """The gateway's person behind a SCIM user: a link to their end user page in the
    institution (the wallet, the keys, the ledger) once they have one."""
    name = user.get_full_name() or user.email or user.username
    end_user = next(
        (e for e in user.end_users.all() if e.license.institution_id == institution_id), None
    )
    if end_user is None:
        return _("%(name)s (no use of the gateway yet)") % {"name": name}
    url = reverse("admin:licensing_enduser_change", args=[end_user.pk])
    return format_html('<a href="{}">{}</a>', url, name)


@admin.register(ScimUser)
class ScimUserAdmin(RefuseNulParamsMixin, ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    list_display = ("user_name", "display_name", "external_id", "active", "gateway_user", "updated")
    list_filter = ("active", "institution")
    search_fields = ("user_name", "external_id", "resource__displayName")
    search_help_text = _("Part of a user name, an external id or a display name.")
    fields = (
        "user_name",
        "display_name",
        "email",
        "external_id",
        "active",
        "gateway_user",
        "group_names",
        "institution",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        ends = EndUser.objects.select_related("license").order_by("pk")
        return (
            super()
            .get_queryset(request)
            .select_related("user", "institution")
            .prefetch_related(Prefetch("user__end_users", queryset=ends), "groups")
        )

    @admin.display(description=_("person in the gateway"))
    def gateway_user(self, obj):
        return _person_link(obj.user, obj.institution_id)

    @admin.display(description=_("display name"))
    def display_name(self, obj):
        return _scim()[0].member_display(obj)

    @admin.display(description=_("e-mail"))
    def email(self, obj):
        return obj.user.email or "-"

    @admin.display(description=_("groups"))
    def group_names(self, obj):
        return ", ".join(sorted(group.display_name for group in obj.groups.all())) or "-"

    @admin.display(description=_("updated"), ordering="updated_at")
    def updated(self, obj):
        return _short_time(obj.updated_at)


@admin.register(ScimGroup)
class ScimGroupAdmin(RefuseNulParamsMixin, ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    list_display = ("display_name", "external_id", "member_count", "updated")
    list_filter = ("institution",)
    search_fields = ("display_name", "external_id")
    search_help_text = _("Part of a group's name or external id.")
    fields = (
        "display_name",
        "external_id",
        "member_list",
        "institution",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        members = ScimUser.objects.order_by("user_name")
        return (
            super()
            .get_queryset(request)
            .select_related("institution")
            .prefetch_related(Prefetch("members", queryset=members))
        )

    @admin.display(description=_("members"))
    def member_count(self, obj):
        return len(obj.members.all())

    @admin.display(description=_("members"))
    def member_list(self, obj):
        rows = [
            (reverse("admin:licensing_scimuser_change", args=[m.pk]), _scim()[0].member_display(m))
            for m in obj.members.all()
        ]
        return format_html_join(", ", '<a href="{}">{}</a>', rows) or "-"

    @admin.display(description=_("updated"), ordering="updated_at")
    def updated(self, obj):
        return _short_time(obj.updated_at)
