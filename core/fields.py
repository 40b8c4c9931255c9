"""A model field for secrets: encrypted on save, `Sealed` (never plain text) when loaded."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core import validators
from django.db import models

from .crypto import Sealed, encrypt


class EncryptedTextField(models.TextField):
    """Stores a Fernet token (see core.crypto); an empty value stays empty (nothing stored).

    Assign plain text to set it; a value read back is `Sealed` and saves unchanged.
    `max_length` limits the plain text (the column is `text`: tokens are longer)."""

    description = "An encrypted secret"

    def __init__(self, *args, max_length: int | None = None, **kwargs):
        self.plain_max_length = max_length
        super().__init__(*args, **kwargs)
        if max_length is not None:
            self.validators.append(validators.MaxLengthValidator(max_length))

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        if self.plain_max_length is not None:
            kwargs["max_length"] = self.plain_max_length
        return name, path, args, kwargs

    def from_db_value(self, value, expression, connection):
        if not value:
            return value
        return Sealed(value)

    def to_python(self, value):
        if isinstance(value, Sealed) or value is None:
            return value
        return str(value)

    def run_validators(self, value):
        if isinstance(value, Sealed):  # validated when it was set
            return
        super().run_validators(value)

    def get_prep_value(self, value):
        if isinstance(value, Sealed):
            return value.token
        if value is None or value == "":
            return value
        return encrypt(str(value))

    def value_to_string(self, obj):
        value = self.value_from_object(obj)
        return value.token if isinstance(value, Sealed) else self.get_prep_value(value)

    def formfield(self, **kwargs):
        defaults: dict[str, Any] = {
            "form_class": forms.CharField,
            "max_length": self.plain_max_length,
        }
        defaults.update(kwargs)
        # models.Field, not TextField: a one-line input, not a textarea.
        return models.Field.formfield(self, **defaults)
