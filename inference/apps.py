from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference API"

    def ready(self):
        from .policy_params import register_policy_parameters

        register_policy_parameters()
