"""Colleagues: an institution admin creates, re-roles, deactivates and re-activates the staff of
its own institution (licensing.access.colleagues decides what is allowed and audits it; this
page only asks first, for a friendly form error). A new colleague gets no password: the
invitation link (Django's password-reset token) is shown once to the admin and e-mailed to the
colleague when they have an address."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ...access.colleagues import (
    ASSIGNABLE_ROLES,
    MANAGED_BY_IDP,
    colleague_create,
    colleague_update,
    colleagues_of,
    invitation_path,
    invitation_send,
    may_manage_colleagues,
)
from ...access.scoping import scope_of
from ...models import AdminProfile, Colleague, Institution
from .base import RefuseNulParamsMixin, _short_time

# E-mail backends that never hand a message to anyone: where each one leaves it instead.
UNSENT_MAIL = {
    "django.core.mail.backends.console.EmailBackend": _(
        "this gateway writes e-mail to its log (EMAIL_BACKEND is the console backend)"
    ),
    "django.core.mail.backends.filebased.EmailBackend": _(
        "this gateway writes e-mail to files in EMAIL_FILE_PATH (the file backend)"
    ),
    "django.core.mail.backends.locmem.EmailBackend": _(
        "this gateway keeps e-mail in memory (the test backend)"
    ),
    "django.core.mail.backends.dummy.EmailBackend": _(
        "this gateway drops e-mail (the dummy backend)"
    ),
}


def mail_goes_nowhere() -> str | None:
    """Where e-mail stays when EMAIL_BACKEND sends none (None: it is sent)."""
    where = UNSENT_MAIL.get(settings.EMAIL_BACKEND)
    return None if where is None else str(where)


class ColleagueForm(forms.ModelForm):
    """Only these fields exist: a forged `is_superuser`, `groups` or `user_permissions` in the
    POST is not read at all."""

    role = forms.ChoiceField(choices=[(r.value, r.label.split(":")[0]) for r in ASSIGNABLE_ROLES])

    class Meta:
        model = Colleague
        fields = ("username", "email", "is_active")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        profile = AdminProfile.objects.filter(user_id=self.instance.pk).first()
        if profile is not None and "role" in self.fields:
            self.fields["role"].initial = profile.role
        if "email" in self.fields:
            self.fields["email"].help_text = _("The invitation link goes here")


class SuperuserColleagueForm(ColleagueForm):
    institution = forms.ModelChoiceField(queryset=Institution.objects.order_by("name"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        profile = AdminProfile.objects.filter(user_id=self.instance.pk).first()
        if profile is not None:
            self.fields["institution"].initial = profile.institution_id
            self.fields["institution"].disabled = True  # a colleague stays in their institution


@admin.register(Colleague)
class ColleagueAdmin(RefuseNulParamsMixin, admin.ModelAdmin):
    list_display = ("username", "email", "role", "institution", "active", "last_login_display")
    list_filter = ("is_active", "gateway_profile__role")
    search_fields = ("username", "email")
    list_select_related = ("gateway_profile__institution",)
    ordering = ("username",)
    actions = ("new_invitation",)

    # --- who may --------------------------------------------------------------------------

    def _may(self, request) -> bool:
        return may_manage_colleagues(scope_of(request.user))

    def has_module_permission(self, request):
        return self._may(request)

    def has_view_permission(self, request, obj=None):
        return self._may(request)

    def has_add_permission(self, request):
        return self._may(request)

    def has_change_permission(self, request, obj=None):
        return self._may(request)

    def has_delete_permission(self, request, obj=None):
        return False  # deactivate instead: the audit log and the ledger keep pointing at them

    def get_queryset(self, request):
        return Colleague.objects.filter(
            pk__in=colleagues_of(scope_of(request.user)).values("pk")
        ).select_related("gateway_profile__institution")

    def _get_obj_does_not_exist_redirect(self, request, opts, object_id):
        raise Http404("No colleague with this id")

    # --- the form -------------------------------------------------------------------------

    def _profile(self, obj) -> AdminProfile | None:
        return getattr(obj, "gateway_profile", None) if obj is not None else None

    def _role_locked(self, request, obj) -> bool:
        profile = self._profile(obj)
        if profile is None:
            return False
        own = obj.pk == request.user.pk and not request.user.is_superuser
        return profile.managed_by_idp or own or profile.role not in ASSIGNABLE_ROLES

    def get_fields(self, request, obj=None):
        superuser = scope_of(request.user).superuser
        if obj is None:
            return ["username", "email", "role", *(["institution"] if superuser else [])]
        role = "role_shown" if self._role_locked(request, obj) else "role"
        active = "is_active" if obj.pk != request.user.pk else "active_shown"
        fields = ["username", "email", role, active, "last_login_display"]
        return fields + (["institution_shown"] if superuser else [])

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return (
            "username",
            "role_shown",
            "active_shown",
            "last_login_display",
            "institution_shown",
        )

    def get_form(self, request, obj=None, change=False, **kwargs):
        base = SuperuserColleagueForm if scope_of(request.user).superuser else ColleagueForm
        # A declared field stays in the form unless removed: a locked role is not in the POST.
        dropped = {"role": None} if obj is not None and self._role_locked(request, obj) else {}
        kwargs["form"] = type("ColleagueChangeForm", (base,), dropped) if dropped else base
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request, obj, form, change):
        data: dict[str, Any] = form.cleaned_data
        try:
            if change:
                colleague_update(
                    actor=request.user,
                    user=obj,
                    role=data.get("role"),
                    active=data.get("is_active"),
                    email=data.get("email"),
                    request=request,
                )
                obj.refresh_from_db()
                return
            user = colleague_create(
                actor=request.user,
                username=data["username"],
                email=data.get("email", ""),
                role=data["role"],
                institution=data.get("institution"),
                request=request,
            )
        except ValidationError as exc:
            raise PermissionDenied("; ".join(exc.messages)) from exc
        # The admin goes on with `obj` (log entry, redirect): make it the created row.
        for field in Colleague._meta.concrete_fields:
            setattr(obj, field.attname, getattr(user, field.attname))
        obj._state.adding = False
        obj._state.db = user._state.db
        self._tell_invitation(request, user)

    def _tell_invitation(self, request, user) -> None:
        link = request.build_absolute_uri(invitation_path(user))
        sent = invitation_send(user=user, link=link, inviter=request.user)
        said = gettext(
            "%(user)s sets their password with this link: %(link)s — it is shown once here."
        ) % {"user": user.get_username(), "link": link}
        nowhere = mail_goes_nowhere()
        if sent and nowhere is None:
            said += " " + gettext("It was e-mailed to %(email)s.") % {"email": user.email}
        elif sent:
            said += " " + gettext(
                "It was not e-mailed to %(email)s: %(where)s. Pass the link on yourself, or "
                "set up sending mail (EMAIL_BACKEND, docs/configuration.md)."
            ) % {"email": user.email, "where": nowhere}
        messages.success(request, said)

    @admin.action(description=_("New invitation link (not signed in yet)"), permissions=["change"])
    def new_invitation(self, request, queryset):
        # Only for colleagues who never signed in: a link sets a password, and one admin must
        # not take over another's account with it.
        invited = queryset.exclude(pk=request.user.pk).filter(last_login__isnull=True)
        for user in invited[:20]:
            self._tell_invitation(request, user)
        skipped = queryset.count() - min(invited.count(), 20)
        if skipped:
            messages.warning(
                request,
                _(
                    "%(skipped)s selected colleague(s) got no link: they have signed in already "
                    "(they reset their own password) or there were more than 20."
                )
                % {"skipped": skipped},
            )

    # --- the columns ----------------------------------------------------------------------

    @admin.display(description=_("role"), ordering="gateway_profile__role")
    def role(self, obj):
        profile = self._profile(obj)
        if profile is None:
            return "-"
        label = profile.get_role_display().split(":")[0]
        return f"{label} ({_(MANAGED_BY_IDP)})" if profile.managed_by_idp else label

    @admin.display(description=_("role"))
    def role_shown(self, obj):
        profile = self._profile(obj)
        if profile is not None and not profile.managed_by_idp:
            return _("%(role)s (your own role: another admin changes it)") % {
                "role": self.role(obj)
            }
        return self.role(obj)

    @admin.display(description=_("active"))
    def active_shown(self, obj):
        return _("yes (you cannot deactivate yourself)") if obj.is_active else _("no")

    @admin.display(description=_("active"), boolean=True, ordering="is_active")
    def active(self, obj):
        return obj.is_active

    @admin.display(description=_("institution"), ordering="gateway_profile__institution__name")
    def institution(self, obj):
        profile = self._profile(obj)
        return profile.institution.name if profile else "-"

    @admin.display(description=_("institution"))
    def institution_shown(self, obj):
        return self.institution(obj)

    @admin.display(description=_("last sign-in"), ordering="last_login")
    def last_login_display(self, obj):
        if obj.last_login is None:
            return format_html("<em>{}</em>", _("never (invited)"))
        return _short_time(obj.last_login)

    def get_list_display(self, request):
        shown = list(super().get_list_display(request))
        if not scope_of(request.user).superuser:
            shown.remove("institution")  # one institution: nothing to tell apart
        return shown
