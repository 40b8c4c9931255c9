from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "catalog"
    verbose_name = "Model catalog"

    def ready(self):
        from core.languages import translate_derived_names

        from . import signals  # noqa: F401

        translate_derived_names(self)
