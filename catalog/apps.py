from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CatalogConfig(AppConfig):
    name = "catalog"
    verbose_name = _("Model catalog")

    def ready(self):
        from core.languages import translate_derived_names

        from . import signals  # noqa: F401

        translate_derived_names(self)
