from django.apps import AppConfig


class GatewaySiteConfig(AppConfig):
    """The site itself as an app: its system checks and operator commands."""

    name = "gateway_site"
    verbose_name = "Gateway site"

    def ready(self):
        from . import checks  # noqa: F401
