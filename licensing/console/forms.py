"""Admin forms for licensing.

LicenseType's policy and guardrails are validated by `LicenseType.clean()`; ModelForm runs it
and puts its errors on the `policy` / `guardrails` fields, so a bad document is never saved.
"""

from __future__ import annotations

import re

from django import forms
from django.utils.translation import gettext_lazy as _

from catalog.forms import AdminModelFormMixin, formfield_callback
from catalog.selectors import policy_choices, service_providers
from core.text import SURROGATE, json_holds

from ..models import ApiKey, Institution, JwtIssuer, License, LicenseType
from .policy_form import PolicyForm

_NUL = re.compile("\x00")

SUPPORTED_BUDGET_UNITS = ("micro_credits",)
# Micro-credits per currency unit: at most a trillion (one micro-credit is then worth 10**-12 of
# a unit); anything larger is a typo, and 2**64 would not fit the column.
MAX_CREDITS_PER_UNIT = 10**12


class InstitutionForm(forms.ModelForm):
    """The display currency (three capitals) and rate, checked before anything is saved."""

    class Meta:
        model = Institution
        fields = (
            "name",
            "terms_of_use",
            "portal_key_limit",
            "currency",
            "micro_credits_per_currency_unit",
        )

    def clean_currency(self):
        currency = (self.cleaned_data.get("currency") or "").strip()
        if currency and not (len(currency) == 3 and currency.isascii() and currency.isupper()):
            raise forms.ValidationError("Three capital letters (ISO 4217), e.g. EUR.")
        return currency

    def clean_micro_credits_per_currency_unit(self):
        rate = self.cleaned_data.get("micro_credits_per_currency_unit")
        if rate is not None and not 1 <= rate <= MAX_CREDITS_PER_UNIT:
            raise forms.ValidationError(
                f"Between 1 and {MAX_CREDITS_PER_UNIT:,} micro-credits per unit "
                "(empty = the gateway's rate)."
            )
        return rate


def _storable_document(document, name: str):
    """PostgreSQL's jsonb cannot store NUL (\\u0000) nor a lone surrogate (\\ud800: not
    Unicode; SQLite would keep it, so both databases refuse it here): a form error, not a 500
    on save."""
    if json_holds(document, _NUL):
        raise forms.ValidationError(f"The {name} may not contain NUL characters (\\u0000).")
    if json_holds(document, SURROGATE):
        raise forms.ValidationError(
            f"The {name} may not contain lone surrogates (\\ud800 to \\udfff)."
        )
    return document


class LicenseTypeForm(AdminModelFormMixin, forms.ModelForm):
    """The policy is edited through the policy form (`self.policy_form`, rendered by the change
    page) and the JSON view (the `policy` field) together: the form's changed fields are written
    onto the JSON document, so rules only the JSON view shows are kept. A post without the policy
    form (a script posting JSON only) saves the JSON as it is."""

    class Meta:
        model = LicenseType
        fields = ("name", "institution", "active", "policy", "guardrails")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.policy_form = PolicyForm(
            self.data if self.is_bound else None,
            document=self.instance.policy,
            models=policy_choices(),
            providers=service_providers(),
            disabled="policy" not in self.fields,
        )

    def clean_policy(self):
        return _storable_document(self.cleaned_data.get("policy"), "policy")

    def clean_guardrails(self):
        return _storable_document(self.cleaned_data.get("guardrails"), "guardrails")

    def clean(self):
        cleaned = super().clean()
        if "policy" not in self.fields or not self.policy_form.submitted:
            return cleaned
        if not self.policy_form.is_valid():
            self.add_error(None, "The policy form has errors: see the marked fields below.")
        elif "policy" in self.cleaned_data:
            self.cleaned_data["policy"] = self.policy_form.apply(self.cleaned_data["policy"])
        return self.cleaned_data


class LicenseForm(AdminModelFormMixin, forms.ModelForm):
    class Meta:
        model = License
        fields = (
            "name",
            "institution",
            "license_type",
            "active",
            "budget_unit",
            "budget_strategy",
            "budget_period",
            "budget_limit",
        )

    def clean_budget_limit(self):
        limit = self.cleaned_data.get("budget_limit")
        if limit is not None and limit < 0:
            raise forms.ValidationError("The limit must be >= 0 (empty = unlimited).")
        return limit

    def clean_budget_unit(self):
        unit = self.cleaned_data.get("budget_unit")
        if unit not in SUPPORTED_BUDGET_UNITS:
            raise forms.ValidationError(f"Supported units: {', '.join(SUPPORTED_BUDGET_UNITS)}.")
        return unit

    def clean(self):
        cleaned = super().clean()
        institution = cleaned.get("institution")
        license_type = cleaned.get("license_type")
        if (
            institution is not None
            and license_type is not None
            and license_type.institution_id is not None
            and license_type.institution_id != institution.pk
        ):
            self.add_error("license_type", "This license type belongs to another institution.")
        return cleaned


class ApiKeyForm(forms.ModelForm):
    """Prefix and digest are not model-editable: the add view creates them through
    `licensing.access.credentials.api_key_create`. A key's kind and course are chosen when it is
    made (a front-end key: docs/open-webui.md)."""

    class Meta:
        model = ApiKey
        fields = ("license", "kind", "course", "name", "active", "expires_at")
        labels = {"course": _("Course")}
        help_texts = {
            "course": _(
                "Optional: the key acts only within this course of the license (a front-end "
                "key: for the course's members only)."
            )
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "kind" in self.fields:
            self.fields["kind"].required = False  # left out: an ordinary key, as before

    def clean_kind(self):
        return self.cleaned_data.get("kind") or ApiKey.Kind.STANDARD

    def clean(self):
        cleaned = super().clean() or {}
        license, course = cleaned.get("license"), cleaned.get("course")
        if license is not None and course is not None and course.license_id != license.pk:
            self.add_error("course", _("The course is not on this license."))
        return cleaned


class JwtIssuerForm(AdminModelFormMixin, forms.ModelForm):
    secret_fields = ("hs256_secret",)

    clear_hs256_secret = forms.BooleanField(required=False, label="Clear the stored HS256 secret")

    class Meta:
        model = JwtIssuer
        formfield_callback = formfield_callback
        fields = (
            "issuer",
            "audience",
            "institution",
            "license",
            "active",
            "algorithms",
            "jwks_url",
            "public_keys",
            "hs256_secret",
            "course_claim",
        )
        labels = {"hs256_secret": "HS256 secret", "jwks_url": "JWKS URL"}

    def clean(self):
        cleaned = super().clean()
        institution = cleaned.get("institution")
        license = cleaned.get("license")
        if institution is not None and license is not None:
            if license.institution_id != institution.pk:
                self.add_error("license", "This license belongs to another institution.")
        return cleaned
