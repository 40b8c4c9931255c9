"""The policy as a form: services on/off, an allowed-models checklist per service, providers, and
limits for the common parameters, editing the same policy document as the JSON view
(docs/policy.md, "The policy form").

The form edits a document in place: `apply(document)` writes only the fields a person changed
(Django's `changed_data`, against the document the form was built from) onto a copy of the
document, so every rule the form does not know, and every rule edited in the JSON view at the same
time, is kept as it is.

A `ceiling` (a course's license type policy; None for a license type: anything valid) limits what
is offered: services and choices outside it are not shown, each limit shows the ceiling's value
beside it, and a document that would widen it is refused with `overlay_widenings`' reasons.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from catalog.registry import POLICY_SERVICES

from ..rules.overlay import overlay_widenings
from ..rules.policy import PolicyDocumentError, validate_policy_document

# JSON numbers past this lose precision in browsers and other JSON readers.
MAX_WHOLE = 2**53


@dataclass(frozen=True)
class Limit:
    param: str  # the rule's parameter
    key: str  # its rule key: "min" or "max"
    label: str
    whole: bool = True  # whole numbers; otherwise decimals (temperature)
    low: float = 0
    high: float = MAX_WHOLE


_TEMPERATURE = (
    Limit("temperature", "min", "Temperature at least", whole=False, high=2),
    Limit("temperature", "max", "Temperature at most", whole=False, high=2),
)
LIMITS: dict[str, tuple[Limit, ...]] = {
    "chat_completions": (Limit("max_tokens", "max", "Max tokens per answer"), *_TEMPERATURE),
    "responses": (Limit("max_output_tokens", "max", "Max tokens per answer"), *_TEMPERATURE),
    "image_generation": (Limit("n", "max", "Images per request (n) at most", low=1),),
    "web_search": (Limit("num_results", "max", "Results per search at most", low=1),),
}
# Parameters the form offers as a checklist of values: (param, label, values).
VALUE_LISTS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "image_generation": (
        (
            "size",
            "Image sizes allowed",
            (
                "256x256",
                "512x512",
                "1024x1024",
                "1536x1024",
                "1024x1536",
                "1792x1024",
                "1024x1792",
                "auto",
            ),
        ),
    ),
}


def _services(document: Any) -> dict:
    services = document.get("services") if isinstance(document, dict) else None
    return services if isinstance(services, dict) else {}


def _rule(document: Any, service: str, param: str) -> dict:
    config = _services(document).get(service)
    params = config.get("params") if isinstance(config, dict) else None
    rule = params.get(param) if isinstance(params, dict) else None
    return rule if isinstance(rule, dict) else {}


def _number(value: float, whole: bool) -> int | float:
    """Whole numbers are written as JSON integers (1, not 1.0)."""
    if whole or float(value).is_integer():
        return int(value)
    return float(value)


class PolicyForm(forms.Form):
    """Edits a policy document (a license type's) or an overlay under a `ceiling` (a course's).

    `models` and `providers` map each policy service to the model ids and provider slugs the
    catalog offers for it (catalog.selectors.policy_choices and service_providers)."""

    shown = forms.CharField(widget=forms.HiddenInput, initial="1", required=False)

    def __init__(
        self,
        data=None,
        *,
        document: Any,
        models: dict[str, list[str]],
        providers: dict[str, list[str]],
        ceiling: dict | None = None,
        ceiling_name: str = "the license type",
        disabled: bool = False,
        prefix: str = "policyform",
    ):
        self.document = document
        self.ceiling = ceiling
        self.ceiling_name = ceiling_name  # whose rules the ceiling is, in the help texts
        self.sections: list[dict] = []
        super().__init__(data, prefix=prefix, initial={"shown": "1"})
        for service in POLICY_SERVICES:
            if ceiling is not None and service not in _services(ceiling):
                continue  # the license type does not enable it: nothing to offer
            self.sections.append(self._add_service(service, models, providers))
        if disabled:
            for field in self.fields.values():
                field.disabled = True

    @property
    def submitted(self) -> bool:
        """A post that carried the form (a JSON-only post, e.g. a script's, leaves it out)."""
        return self.is_bound and self.data.get(self.add_prefix("shown")) == "1"

    def _ceiling_rule(self, service: str, param: str) -> dict:
        return _rule(self.ceiling, service, param) if self.ceiling is not None else {}

    def _add_service(self, service: str, models: dict, providers: dict) -> dict:
        config = _services(self.document).get(service)
        enabled = service in _services(self.document)
        config = config if isinstance(config, dict) else {}
        section: dict[str, Any] = {"service": service, "fields": []}

        def add(name: str, field: forms.Field, initial: Any) -> None:
            key = f"{service}__{name}"
            field.initial = initial
            self.fields[key] = field
            section["fields"].append(key)

        add("enabled", forms.BooleanField(required=False, label="Enabled"), enabled)

        offered = list(models.get(service, ()))
        ceiling_models = self._ceiling_rule(service, "model").get("allowed")
        if ceiling_models is not None:
            offered = [m for m in offered if m in ceiling_models]
        current = _rule(self.document, service, "model").get("allowed") or []
        current = [m for m in current if isinstance(m, str)]
        choices = [(m, m) for m in offered] + [
            (m, f"{m} (not in the catalog)") for m in current if m not in offered
        ]
        if choices:  # search and fetch have no models to choose (their entries are unlisted)
            add(
                "models",
                forms.MultipleChoiceField(
                    required=False,
                    choices=choices,
                    widget=forms.CheckboxSelectMultiple,
                    label="Allowed models",
                    help_text="None ticked: every model"
                    + (f" {self.ceiling_name} allows" if self.ceiling is not None else "")
                    + ".",
                ),
                current,
            )

        slugs = list(providers.get(service, ()))
        ceiling_config = _services(self.ceiling).get(service) if self.ceiling else None
        ceiling_providers = (
            ceiling_config.get("providers") if isinstance(ceiling_config, dict) else None
        )
        if ceiling_providers is not None:
            slugs = [s for s in slugs if s in ceiling_providers]
        current_providers = config.get("providers")
        current_providers = (
            [p for p in current_providers if isinstance(p, str)]
            if isinstance(current_providers, list)
            else []
        )
        add(
            "providers",
            forms.MultipleChoiceField(
                required=False,
                choices=[(s, s) for s in slugs]
                + [(s, f"{s} (unknown)") for s in current_providers if s not in slugs],
                widget=forms.CheckboxSelectMultiple,
                label="Providers",
                help_text="None ticked: every provider"
                + (f" {self.ceiling_name} allows" if self.ceiling is not None else "")
                + ".",
            ),
            current_providers,
        )

        for limit in LIMITS.get(service, ()):
            value = _rule(self.document, service, limit.param).get(limit.key)
            current_number = (
                value if isinstance(value, int | float) and not isinstance(value, bool) else None
            )
            low, high = limit.low, limit.high
            whole = limit.whole
            if current_number is not None:
                # A value written in the JSON view may lie outside the form's usual range (or be
                # a decimal): shown as it is, and saving the page unchanged keeps it.
                low, high = min(low, current_number), max(high, current_number)
                whole = whole and isinstance(current_number, int)
            ceiling_value = self._ceiling_rule(service, limit.param).get(limit.key)
            help_text = f"Rule: params.{limit.param}.{limit.key}. Empty: no limit"
            if ceiling_value is not None:
                whose = self.ceiling_name.removeprefix("the ")
                whose = whose[:1].upper() + whose[1:]
                help_text = f"{whose}: {ceiling_value}. Empty: {self.ceiling_name}'s"
                if limit.key == "max":
                    high = min(high, ceiling_value)
                else:
                    low = max(low, ceiling_value)
            field: forms.Field
            if whole:
                field = forms.IntegerField(min_value=math.ceil(low), max_value=math.floor(high))
            else:
                field = forms.FloatField(min_value=low, max_value=high)
            field.required = False
            field.label, field.help_text = limit.label, help_text + "."
            add(f"{limit.param}__{limit.key}", field, value)

        for param, label, values in VALUE_LISTS.get(service, ()):
            ceiling_values = self._ceiling_rule(service, param).get("allowed")
            offered_values = [v for v in values if ceiling_values is None or v in ceiling_values]
            current_values = [
                v
                for v in _rule(self.document, service, param).get("allowed") or []
                if isinstance(v, str)
            ]
            add(
                f"{param}__allowed",
                forms.MultipleChoiceField(
                    required=False,
                    choices=[(v, v) for v in offered_values]
                    + [(v, v) for v in current_values if v not in offered_values],
                    widget=forms.CheckboxSelectMultiple,
                    label=label,
                    help_text=f"Rule: params.{param}.allowed. None ticked: any.",
                ),
                current_values,
            )
        section["bound"] = [self[name] for name in section["fields"]]
        return section

    def clean(self):
        cleaned = super().clean() or {}
        for service in LIMITS:
            low = cleaned.get(f"{service}__temperature__min")
            high = cleaned.get(f"{service}__temperature__max")
            if low is not None and high is not None and low > high:
                self.add_error(f"{service}__temperature__min", "The minimum is above the maximum.")
        return cleaned

    def apply(self, document: Any) -> dict:
        """The document with the fields a person changed written onto it (a copy)."""
        result = copy.deepcopy(document) if isinstance(document, dict) else {"version": 1}
        services = result.setdefault("services", {})
        if not isinstance(services, dict):
            services = result["services"] = {}
        changed = set(self.changed_data)
        for section in self.sections:
            service = section["service"]
            name = f"{service}__enabled"
            if name in changed:
                if self.cleaned_data[name]:
                    if not isinstance(services.get(service), dict):
                        services[service] = {}
                else:
                    services.pop(service, None)
            if service not in services:
                continue
            for name in section["fields"]:
                if name not in changed or name.endswith("__enabled"):
                    continue
                if services[service] is None:  # `null` enables a service: kept until written
                    services[service] = {}
                config = services[service]
                value = self.cleaned_data[name]
                what = name.removeprefix(f"{service}__")
                if what == "providers":
                    if value:
                        config["providers"] = list(value)
                    else:
                        config.pop("providers", None)
                    continue
                param, key = ("model", "allowed") if what == "models" else what.split("__")
                if isinstance(value, list):
                    value = list(value) or None
                elif value is not None:
                    # (FloatField is a subclass of IntegerField)
                    value = _number(
                        value, whole=not isinstance(self.fields[name], forms.FloatField)
                    )
                _set_rule(config, param, key, value)
        return result

    def widenings(self, document: dict) -> list[str]:
        if self.ceiling is None:
            return []
        try:
            return overlay_widenings(self.ceiling, document)
        except PolicyDocumentError as exc:
            return [str(exc)]

    def check_ceiling(self, document: dict) -> None:
        """ValidationError with one message per widening of the ceiling."""
        reasons = self.widenings(document)
        if reasons:
            raise ValidationError(reasons)

    def document_for(self, document: Any) -> dict:
        """For a page that saves the result itself (a course's overlay): `apply`, then the
        document's own check and the ceiling's; ValidationError with the reasons."""
        result = self.apply(document)
        try:
            validate_policy_document(result)
        except PolicyDocumentError as exc:
            raise ValidationError(str(exc)) from exc
        self.check_ceiling(result)
        return result


def _set_rule(config: dict, param: str, key: str, value: Any) -> None:
    params = config.get("params")
    if not isinstance(params, dict):
        params = config["params"] = {}
    rule = params.get(param)
    if not isinstance(rule, dict):
        rule = params[param] = {}
    if value is None:
        rule.pop(key, None)
    else:
        rule[key] = value
    if not rule:
        params.pop(param)
    if not params:
        config.pop("params")
