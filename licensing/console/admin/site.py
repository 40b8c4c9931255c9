"""The admin site: Django's own (its URLs, permissions, templates and translations), with the
dashboard (licensing.console.dashboard) above the app list on its front page. Installed as the
default site by gateway_site.apps.GatewayAdminConfig, so `django.contrib.admin.site` is this."""

from __future__ import annotations

from django.contrib import admin

from ..dashboard import dashboard_context


class GatewayAdminSite(admin.AdminSite):
    index_template = "admin/licensing/index.html"

    def index(self, request, extra_context=None):
        return super().index(request, {**dashboard_context(request), **(extra_context or {})})
