from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class GatewaySiteConfig(AppConfig):
    """The site itself as an app: its system checks and operator commands."""

    name = "gateway_site"
    verbose_name = "Gateway site"

    def ready(self):
        from . import checks  # noqa: F401


class GatewayAdminConfig(AdminConfig):
    """Django's admin with the gateway's site (its front page's dashboard,
    licensing.console.admin.site): installed in place of "django.contrib.admin"."""

    default_site = "licensing.console.admin.site.GatewayAdminSite"
