"""The signed-in staff member's own pages beside the admin: "My API token" (create or rotate
their management token, shown once) and the invitation link where a new colleague sets a
password (Django's password-reset views and the admin's templates for them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path, reverse_lazy
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise  # str or a lazy translation

from ..access.tokens import (
    NO_TOKEN,
    management_token_exists,
    management_token_rotate,
    may_hold_token,
)


def my_token_view(request):
    """GET: whether a token exists; POST: a new one (the old one stops working), shown once."""
    if not may_hold_token(request.user):
        raise PermissionDenied(NO_TOKEN)
    token = None
    if request.method == "POST":
        token = management_token_rotate(user=request.user, request=request)
    context = {
        **admin.site.each_context(request),
        "title": _("My API token"),
        "token": token,
        "has_token": token is not None or management_token_exists(request.user),
    }
    response = TemplateResponse(request, "admin/licensing/my_token.html", context)
    response["Cache-Control"] = "no-store"
    return response


class _AdminLook:
    """The admin's header and title on the invitation pages (Django's own templates)."""

    title: StrOrPromise = ""

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)  # type: ignore[misc]
        site = admin.site
        return {
            **context,
            "site_header": site.site_header,
            "site_title": site.site_title,
            "title": self.title or context.get("title", ""),
        }


class InvitationView(_AdminLook, auth_views.PasswordResetConfirmView):
    """Where an invited colleague sets their password (the link shown to the admin)."""

    title = _("Set your password")
    success_url = reverse_lazy("password_reset_complete")


class InvitationDoneView(_AdminLook, auth_views.PasswordResetCompleteView):
    title = _("Your password is set")


urlpatterns = [
    path("my-token/", admin.site.admin_view(my_token_view), name="licensing_my_token"),
    path("invitation/<uidb64>/<token>/", InvitationView.as_view(), name="password_reset_confirm"),
    path("invitation/done/", InvitationDoneView.as_view(), name="password_reset_complete"),
]
