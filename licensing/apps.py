from django.apps import AppConfig


class LicensingConfig(AppConfig):
    name = "licensing"
    verbose_name = "Licensing and ledger"

    def ready(self):
        from . import signals  # noqa: F401
        from .ledger.spool import register_gauges

        register_gauges()  # /metrics reads the spool's depths through core.metrics
