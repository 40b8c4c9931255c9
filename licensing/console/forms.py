"""Admin forms for licensing.

LicenseType's policy and guardrails are validated by `LicenseType.clean()`; ModelForm runs it
and puts its errors on the `policy` / `guardrails` fields, so a bad document is never saved.
"""

from __future__ import annotations

import copy
import re
from typing import cast

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from catalog.forms import AdminModelFormMixin, formfield_callback
from catalog.selectors import connected_catalog, policy_choices, service_providers
from core.languages import grouped
from core.text import SURROGATE, json_holds
from core.zones import is_zone, zone_choices

from ..models import ApiKey, Institution, JwtIssuer, License, LicenseType
from ..rules.presets import PRESETS, preset_choices
from .money import MoneyFormMixin, Rate, currencies_of, institution_rate, single_rate
from .policy_form import PolicyForm

_NUL = re.compile("\x00")

SUPPORTED_BUDGET_UNITS = ("micro_credits",)
MONEY_OF_INSTITUTION = _(
    "In the currency of the institution chosen above (shown beside the field once chosen)."
)
# Micro-credits per currency unit: at most a trillion (one micro-credit is then worth 10**-12 of
# a unit); anything larger is a typo, and 2**64 would not fit the column.
MAX_CREDITS_PER_UNIT = 10**12


class ZoneInput(forms.TextInput):
    """A text field with the time zones as its suggestions (an HTML datalist): the browser
    filters them as one types ("berlin" finds Europe/Berlin), the common ones come first."""

    template_name = "licensing/widgets/datalist.html"

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        widget = context["widget"]
        widget["attrs"]["list"] = f"{widget['attrs'].get('id') or name}-choices"
        widget["attrs"].setdefault("autocomplete", "off")
        widget["options"] = zone_choices()
        return context


class InstitutionForm(forms.ModelForm):
    """The display currency (three capitals) and rate, the time zone (an IANA name this host
    knows) and the default language (one of settings.LANGUAGES), checked before anything is
    saved. The `configure_institution` command validates through it too."""

    # A language of settings.LANGUAGES (docs/languages.md): not `choices` on the model, so
    # that a new catalogue needs no migration.
    language = forms.ChoiceField(required=False, label=_("Language"))

    class Meta:
        model = Institution
        fields = (
            "name",
            "terms_of_use",
            "portal_key_limit",
            "currency",
            "micro_credits_per_currency_unit",
            "timezone",
            "language",
            "ledger_identity_days",
            "audit_log_days",
        )
        widgets = {"timezone": ZoneInput(attrs={"size": 30, "spellcheck": "false"})}
        labels = {"timezone": _("Time zone")}
        help_texts = {
            "timezone": _(
                "Type to search, e.g. Berlin: Europe/Berlin. The institution's day, week and "
                "month (its licenses' and courses' budgets reset at its midnight), its course "
                "windows and the times its pages show are in this zone. Changing it starts the "
                "current day, week or month's budgets afresh."
            ),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        default = dict(settings.LANGUAGES).get(settings.LANGUAGE_CODE, settings.LANGUAGE_CODE)
        language = cast(forms.ChoiceField, self.fields["language"])
        language.choices = [
            ("", _("The gateway's default (%(language)s)") % {"language": default}),
            *settings.LANGUAGES,
        ]
        language.help_text = _(
            "The language of its pages for a person whose browser asks for none the gateway "
            "speaks and who has chosen none."
        )

    def clean_timezone(self):
        name = (self.cleaned_data.get("timezone") or "").strip()
        if not is_zone(name):
            raise forms.ValidationError(
                _("Not a time zone this gateway knows: choose one of the list, e.g. Europe/Berlin.")
            )
        return name

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

    preset = forms.ChoiceField(
        required=False,
        label=_("Start from a preset"),
        help_text=_(
            "Fills the policy and the guardrails for an age group (docs/presets.md): a starting "
            "point your school adapts, not legal advice. Chosen, it replaces the policy below."
        ),
    )

    class Meta:
        model = LicenseType
        fields = ("name", "institution", "active", "policy", "guardrails")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        preset = cast(forms.ChoiceField, self.fields["preset"])
        preset.choices = [("", _("No preset")), *preset_choices()]
        self.policy_form = PolicyForm(
            self.data if self.is_bound else None,
            document=self.instance.policy,
            models=policy_choices(),
            providers=service_providers(),
            connected=connected_catalog(),
            disabled="policy" not in self.fields,
        )

    def clean_policy(self):
        return _storable_document(self.cleaned_data.get("policy"), "policy")

    def clean_guardrails(self):
        return _storable_document(self.cleaned_data.get("guardrails"), "guardrails")

    def clean(self):
        cleaned = super().clean()
        preset = PRESETS.get(cleaned.get("preset") or "")
        if preset is not None and self.instance.pk is None:
            # A new type from a preset: its document whole (the form's fields show the default).
            cleaned["policy"] = copy.deepcopy(preset.policy)
            cleaned["guardrails"] = copy.deepcopy(preset.guardrails)
            return cleaned
        if "policy" not in self.fields or not self.policy_form.submitted:
            return cleaned
        if not self.policy_form.is_valid():
            self.add_error(None, _("The policy form has errors: see the marked fields below."))
        elif "policy" in self.cleaned_data:
            policy = self.policy_form.apply(self.cleaned_data["policy"])
            self.cleaned_data["policy"] = policy
            try:
                self.policy_form.check_split(policy)
            except forms.ValidationError as exc:
                self.add_error(None, exc)
        return self.cleaned_data


class LicenseForm(MoneyFormMixin, AdminModelFormMixin, forms.ModelForm):
    """The budget limit is entered and shown in the institution's currency (MoneyFormMixin)."""

    money_fields = ("budget_limit",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.institution_id:
            shown: Rate | None = institution_rate(self.instance.institution)
        else:  # a new license: the institution offered, if there is one only
            choices = getattr(self.fields.get("institution"), "queryset", None)
            shown = single_rate(choices, "pk")
        if shown is None:
            chooser = ("id_institution", currencies_of(choices, "pk"))
            self.setup_money(None, MONEY_OF_INSTITUTION, chooser)
        else:
            self.setup_money(shown)

    def money_rate(self) -> Rate | None:
        institution = self.cleaned_data.get("institution")
        if institution is None and self.instance.institution_id:
            institution = self.instance.institution
        return institution_rate(institution) if institution is not None else None

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
            raise forms.ValidationError(_("The limit must be 0 or more (empty = unlimited)."))
        return limit

    def clean_budget_unit(self):
        unit = self.cleaned_data.get("budget_unit")
        if unit not in SUPPORTED_BUDGET_UNITS:
            raise forms.ValidationError(f"Supported units: {', '.join(SUPPORTED_BUDGET_UNITS)}.")
        return unit

    def clean(self):
        cleaned = super().clean()
        self.clean_money()
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
    `licensing.access.credentials.api_key_create`. The end user (optional, chosen by name and
    e-mail) must be on the key's license. A key's kind and course are chosen when it is made (a
    front-end key: docs/open-webui.md; it names its people per request, never one end user)."""

    class Meta:
        model = ApiKey
        fields = ("license", "end_user", "kind", "course", "name", "active", "expires_at")
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
        license, end_user = cleaned.get("license"), cleaned.get("end_user")
        course = cleaned.get("course")
        if license is not None and end_user is not None and end_user.license_id != license.pk:
            self.add_error(
                "end_user",
                _("This end user is on the license “%(license)s”, not on this key's.")
                % {"license": end_user.license.name},
            )
        if license is not None and course is not None and course.license_id != license.pk:
            self.add_error("course", _("The course is not on this license."))
        if end_user is not None and cleaned.get("kind") == ApiKey.Kind.FRONT_END:
            self.add_error(
                "end_user",
                _(
                    "A front-end key acts for the people its requests name: leave the end "
                    "user empty."
                ),
            )
        return cleaned


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
