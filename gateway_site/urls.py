from django.contrib import admin
from django.urls import URLResolver, include, path, re_path
from django.urls.resolvers import RoutePattern
from django.utils.translation import gettext_lazy as _
from django.views.generic import RedirectView

from inference.api import api
from licensing.signin import lti_views, sso_views

from .languages import set_language
from .middleware import api_not_found_view

admin.site.site_header = "Inference Gateway"
admin.site.site_title = _("Inference Gateway admin")

# The site's error pages for people, JSON for /v1 and /manage/v1 (gateway_site.errors).
handler400 = "gateway_site.errors.bad_request"
handler403 = "gateway_site.errors.permission_denied"
handler404 = "gateway_site.errors.page_not_found"
handler500 = "gateway_site.errors.server_error"


class LazyResolver(URLResolver):
    """A resolver whose module is imported when a request's path first reaches it (or a
    `reverse` first looks into it), not when the URLs are loaded (`lazy_include`)."""

    def check(self):
        # Django's URL checks, run before every manage.py command, would import the module
        # (2 s of the command's start); the module's patterns are checked by a test instead
        # (tests/ops/test_startup_imports.py), and the namespace check skips it
        # (gateway_site.checks.url_namespaces_unique).
        return []


def lazy_include(route: str, urlconf: str) -> URLResolver:
    """`path(route, include(urlconf))`, but the module is imported when a request's path first
    reaches it: SAML's and SCIM's modules import pysaml2 and scim2-models, 1.7 s of every
    worker's start (and of every manage.py command's) that /v1 never uses
    (docs/architecture.md, "Start-up")."""
    return LazyResolver(RoutePattern(route, is_endpoint=False), urlconf)


urlpatterns = [
    path("v1/", api.urls),
    re_path(r"^v1/", api_not_found_view),
    # Before admin.site.urls: the admin's login page with the single sign-on buttons, and the
    # account pages (my token, invitations).
    path("admin/login/", sso_views.admin_login, name="gateway-admin-login"),
    path("admin/", include("licensing.console.account")),
    path("admin/", admin.site.urls),
    path("sso/find/", sso_views.sso_find, name="sso-find"),
    path("sso/<int:provider_id>/login/", sso_views.sso_login, name="sso-login"),
    path("sso/<int:provider_id>/callback/", sso_views.sso_callback, name="sso-callback"),
    lazy_include("sso/<int:provider_id>/saml/", "licensing.signin.saml_urls"),
    path("lti/login/", lti_views.lti_login, name="lti-login"),
    path("lti/launch/", lti_views.lti_launch, name="lti-launch"),
    path("manage/v1/", include("licensing.manage_urls")),
    path("portal/", include("licensing.portal.urls")),
    # SCIM 2.0 provisioning by the institutions' identity providers (docs/scim.md).
    lazy_include("scim/v2/", "licensing.provisioning.urls"),
    path("language/", set_language, name="set_language"),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
