"""Admin forms for licensing.

LicenseType's policy and guardrails are validated by `LicenseType.clean()`; ModelForm runs it
and puts its errors on the `policy` / `guardrails` fields, so a bad document is never saved.
"""

from __future__ import annotations

import re

from django import forms
from django.conf import settings
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from catalog.forms import AdminModelFormMixin, formfield_callback
from catalog.selectors import policy_choices, service_providers
from core.languages import grouped
from core.text import SURROGATE, json_holds

from ..models import ApiKey, Institution, JwtIssuer, License, LicenseType
from .policy_form import PolicyForm

_NUL = re.compile("\x00")

SUPPORTED_BUDGET_UNITS = ("micro_credits",)
# Micro-credits per currency unit: at most a trillion (one micro-credit is then worth 10**-12 of
# a unit); anything larger is a typo, and 2**64 would not fit the column.
MAX_CREDITS_PER_UNIT = 10**12


def _language_choices() -> list[tuple[str, str]]:
    return [("", gettext("The gateway's default")), *settings.LANGUAGES]


class InstitutionForm(forms.ModelForm):
    """The display currency (three capitals) and rate, checked before anything is saved."""

    # A language of settings.LANGUAGES (docs/languages.md): not `choices` on the model, so
    # that a new catalogue needs no migration.
    language = forms.ChoiceField(
        choices=_language_choices,
        required=False,
        label=_("language"),
        help_text=_("Default language of the institution's pages, e.g. de; empty = the gateway's"),
    )

    class Meta:
        model = Institution
        fields = (
            "name",
            "terms_of_use",
            "portal_key_limit",
            "currency",
            "micro_credits_per_currency_unit",
            "language",
        )

    def clean_currency(self):
        currency = (self.cleaned_data.get("currency") or "").strip()
        if currency and not (len(currency) == 3 and currency.isascii() and currency.isupper()):
            raise forms.ValidationError(_("Three capital letters (ISO 4217), e.g. EUR."))
        return currency

    def clean_micro_credits_per_currency_unit(self):
        rate = self.cleaned_data.get("micro_credits_per_currency_unit")
        if rate is not None and not 1 <= rate <= MAX_CREDITS_PER_UNIT:
            raise forms.ValidationError(
                _("Between 1 and %(max)s micro-credits per unit (empty = the gateway's rate).")
                % {"max": grouped(MAX_CREDITS_PER_UNIT)}
            )
        return rate


def _storable_document(document, name: str):
    """PostgreSQL's jsonb cannot store NUL (\\u0000) nor a lone surrogate (\\ud800: not
    Unicode; SQLite would keep it, so both databases refuse it here): a form error, not a 500
    on save."""
    if json_holds(document, _NUL):
        raise forms.ValidationError(
            _("The %(name)s may not contain NUL characters (\\u0000).") % {"name": _(name)}
        )
    if json_holds(document, SURROGATE):
        raise forms.ValidationError(
            _("The %(name)s may not contain lone surrogates (\\ud800 to \\udfff).")
            % {"name": _(name)}
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
            self.add_error(None, _("The policy form has errors: see the marked fields below."))
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
            raise forms.ValidationError(_("The limit must be >= 0 (empty = unlimited)."))
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
            self.add_error("license_type", _("This license type belongs to another institution."))
        return cleaned


class ApiKeyForm(forms.ModelForm):
    """Prefix and digest are not model-editable: the add view creates them through
    `licensing.access.credentials.api_key_create`."""

    class Meta:
        model = ApiKey
        fields = ("license", "name", "active", "expires_at")


class JwtIssuerForm(AdminModelFormMixin, forms.ModelForm):
    secret_fields = ("hs256_secret",)

    clear_hs256_secret = forms.BooleanField(
        required=False, label=_("Clear the stored HS256 secret")
    )

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
                self.add_error("license", _("This license belongs to another institution."))
        return cleaned
