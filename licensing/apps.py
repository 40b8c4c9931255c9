from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class LicensingConfig(AppConfig):
    name = "licensing"
    verbose_name = _("Licensing and ledger")

    def ready(self):
        from core.languages import translate_derived_names

        from . import signals  # noqa: F401
        from .courses.rules import overlay_problems
        from .ledger.spool import register_gauges
        from .models.courses import register_overlay_check

        # Course.clean's overlay check is a rule of the courses wing, above the models.
        register_overlay_check(overlay_problems)
        register_gauges()  # /metrics reads the spool's depths through core.metrics
        translate_derived_names(self)
