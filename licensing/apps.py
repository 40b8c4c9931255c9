from django.apps import AppConfig


class LicensingConfig(AppConfig):
    name = "licensing"
    verbose_name = "Licensing and ledger"

    def ready(self):
        from . import signals  # noqa: F401
        from .courses.rules import overlay_problems
        from .models.courses import register_overlay_check

        # Course.clean's overlay check is a rule of the courses wing, above the models.
        register_overlay_check(overlay_problems)
