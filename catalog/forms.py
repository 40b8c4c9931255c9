"""Admin forms for the catalog, and two helpers the licensing admin shares.

- `PrettyJSONField` / `FORMFIELD_OVERRIDES`: JSON columns edited as indented text.
- `AdminModelFormMixin`: an emptied optional JSON field saves the model default (`{}` / `[]`)
  instead of a JSON null; secret columns (`secret_fields`) are write-only: a password-style
  input that never renders the stored value, blank keeps it, a `clear_<name>` checkbox
  removes it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django import forms
from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.utils.translation import gettext_lazy as _

from core.text import SURROGATE

from .connection_options import OPTION_KEYS, RESPONSES_API, STREAM_USAGE, option_errors
from .models import Connection, Model


class PrettyJSONField(forms.JSONField):
    """A JSON form field that shows the document indented, for editing as text."""

    def prepare_value(self, value):
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        text = json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)
        if SURROGATE.search(text):
            # A refused document holding a lone surrogate ("\ud800" typed in the JSON): shown
            # escaped as typed, since the page itself must be UTF-8.
            text = json.dumps(value, ensure_ascii=True, indent=2, cls=self.encoder)
        return text


FORMFIELD_OVERRIDES: dict[type[models.Field], dict[str, Any]] = {
    # Django 6 defaults to https; say so now (and silence the transition warning).
    models.URLField: {"assume_scheme": "https"},
    models.JSONField: {
        "form_class": PrettyJSONField,
        "widget": forms.Textarea(
            attrs={
                "rows": 10,
                "cols": 90,
                "class": "vLargeTextField",
                "spellcheck": "false",
                "style": "font-family: monospace",
            }
        ),
    },
}


def formfield_callback(db_field, **kwargs):
    """For ModelForm Meta: URL fields assume https (the admin applies FORMFIELD_OVERRIDES)."""
    if isinstance(db_field, models.URLField):
        kwargs.setdefault("assume_scheme", "https")
    return db_field.formfield(**kwargs)


if TYPE_CHECKING:  # what the mixin is mixed into, for mypy; a plain mixin at run time
    _ModelForm = forms.ModelForm
else:
    _ModelForm = object


class AdminModelFormMixin(_ModelForm):
    """Mix into a ModelForm (before `forms.ModelForm`)."""

    secret_fields: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in self.secret_fields:
            field = self.fields.get(name)
            if field is None:
                continue
            field.required = False
            field.widget = forms.PasswordInput(
                render_value=False, attrs={"autocomplete": "new-password", "class": "vTextField"}
            )
            # The stored value never reaches the form's initial data (nor the HTML); a blank
            # submission is then "unchanged" for the change message.
            self.initial[name] = ""
            stored = bool(self.instance.pk and getattr(self.instance, name, ""))
            state = _("A value is stored (not shown).") if stored else _("Nothing stored.")
            keep = _("Leave blank to keep the stored value.")
            field.help_text = f"{state} {keep}"

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean returns (typed Optional in the stubs)
        for name in self.secret_fields:
            if name not in self.fields or name not in cleaned:
                continue
            new_value = cleaned.get(name) or ""
            clear = cleaned.get(f"clear_{name}", False)
            if new_value and clear:
                self.add_error(f"clear_{name}", _("Enter a new value or clear it, not both."))
            elif clear:
                cleaned[name] = ""
            elif not new_value:
                cleaned[name] = getattr(self.instance, name, "") or ""
        for name, value in list(cleaned.items()):
            if value is not None:
                continue
            try:
                model_field = self._meta.model._meta.get_field(name)
            except FieldDoesNotExist:  # a form-only field (clear_<name>)
                continue
            if isinstance(model_field, models.JSONField) and not model_field.null:
                cleaned[name] = model_field.get_default()
        return cleaned


class CatalogModelForm(AdminModelFormMixin, forms.ModelForm):
    class Meta:
        model = Model
        fields = (
            "model_id",
            "owned_by",
            "listed",
            "supported_features",
            "input_modality",
            "output_modality",
            "cost",
            "options",
        )


def _blank_or(choices: tuple[str, ...], default: str) -> list[tuple[str, str]]:
    return [("", f"(default: {default})")] + [(c, c) for c in choices]


# The kind options (Connection.options) as form fields: name -> the kind that takes it.
OPTION_FIELDS = {key: kind for kind, keys in OPTION_KEYS.items() for key in keys}


class ConnectionForm(AdminModelFormMixin, forms.ModelForm):
    secret_fields = ("api_key", "aws_secret_access_key")

    clear_api_key = forms.BooleanField(required=False, label=_("Clear the stored API key"))
    clear_aws_secret_access_key = forms.BooleanField(
        required=False, label=_("Clear the stored AWS secret access key")
    )
    # Connection.options, per kind (catalog/connection_options.py checks the values).
    api_version = forms.CharField(
        required=False,
        max_length=40,
        label=_("API version"),
        help_text=_(
            "Azure OpenAI: the api-version of the classic deployment paths (e.g. "
            "2024-10-21). Empty: the v1 API path."
        ),
    )
    deployments = forms.CharField(
        required=False,
        label=_("Deployment map"),
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "style": "font-family: monospace"}),
        help_text=_(
            "Azure OpenAI: one MODEL=DEPLOYMENT per line, for a catalog model whose "
            "deployment is not named as its row's upstream id."
        ),
    )
    responses_api = forms.ChoiceField(
        required=False,
        label=_("Responses API"),
        choices=_blank_or(RESPONSES_API, "chat"),
        help_text=_(
            "OpenAI-compatible server: /v1/responses translated to chat completions "
            "(chat) or the server's own Responses API (native)."
        ),
    )
    stream_usage = forms.ChoiceField(
        required=False,
        label=_("Stream usage"),
        choices=_blank_or(STREAM_USAGE, "ask"),
        help_text=_(
            "OpenAI-compatible server: ask for usage on streams (ask), or not, for a "
            "server that always reports it and refuses stream_options (always: Mistral's API)."
        ),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        options = self.instance.options or {}
        for name in OPTION_FIELDS:
            value = options.get(name)
            if name == "deployments" and isinstance(value, dict):
                value = "\n".join(f"{model}={dep}" for model, dep in sorted(value.items()))
            self.initial.setdefault(name, value or "")

    def clean_deployments(self) -> dict[str, str]:
        mapping: dict[str, str] = {}
        for line in (self.cleaned_data.get("deployments") or "").splitlines():
            if not line.strip():
                continue
            model, sep, deployment = line.partition("=")
            if not sep or not model.strip() or not deployment.strip():
                raise forms.ValidationError(f"One MODEL=DEPLOYMENT per line, not {line[:60]!r}")
            mapping[model.strip()] = deployment.strip()
        return mapping

    def clean(self):
        cleaned = super().clean()
        provider = cleaned.get("provider")
        if provider is None:
            return cleaned
        options: dict = {}
        for name, kind in OPTION_FIELDS.items():
            value = cleaned.get(name)
            if not value:
                continue
            if provider.kind != kind:
                self.add_error(name, f"Only for a {kind} connection (this one is {provider.kind})")
                continue
            errors = option_errors(kind, {name: value})
            if errors:
                self.add_error(name, errors)
            else:
                options[name] = value
        if not self.errors:
            self.instance.options = options
        return cleaned

    class Meta:
        model = Connection
        formfield_callback = formfield_callback
        fields = (
            "provider",
            "name",
            "base_url",
            "timeout",
            "weight",
            "tags",
            "active",
            "api_key",
            "region",
            "aws_access_key_id",
            "aws_secret_access_key",
        )
        labels = {
            "api_key": _("API key"),
            "aws_access_key_id": _("AWS access key id"),
            "aws_secret_access_key": _("AWS secret access key"),
        }
