"""The policy as a form: the models of the text services and of every service at once, services
on/off, an allowed-models checklist per service, providers, and limits for the common parameters,
editing the same policy document as the JSON view (docs/policy.md, "The policy form").

Services are shown by their names in words (catalog.registry); models and providers a connection
serves now are offered first, the rest folded under them and marked (`connected`, from
catalog.selectors.connected_catalog). A document whose chat and responses would allow different
models is not saved until the person confirms it (`check_split`).

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
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext, gettext_noop
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise  # str or a lazy translation

from catalog.registry import POLICY_SERVICES, SERVICE_BY_NAME, TEXT_SERVICES
from catalog.selectors import Connected
from core.errors import PolicyDenied

from ..rules.keys import RULES, Max, Min
from ..rules.overlay import effective_policy, overlay_widenings
from ..rules.policy import Policy, PolicyDocumentError, compile_policy, validate_policy_document
from ..rules.scopes import NOTHING_PASSES, SCOPES, text_split

# JSON numbers past this lose precision in browsers and other JSON readers.
MAX_WHOLE = 2**53


# What a field writes that is no parameter's rule key (`PolicyForm.targets`).
_ENABLED = ("", "enabled")
_PROVIDERS = ("", "providers")
_SCOPE = "models"  # (_SCOPE, scope): the document's `models.<scope>.allowed`
# The `models` rules the form edits, each with its label and help.
SCOPE_FIELDS = (
    (
        "text",
        _("Models for chat and responses"),
        _(
            "Rule: models.text.allowed, one list for both text services, so that a model "
            "refused in chat is refused through responses too."
        ),
    ),
    (
        "all",
        _("Models for every service"),
        _("Rule: models.all.allowed: the only models any service may use."),
    ),
)
# The rule keys the form writes, from the policy's one table of rule keys.
ALLOWED = RULES["allowed"]
MIN, MAX = cast(Min, RULES["min"]), cast(Max, RULES["max"])


@dataclass(frozen=True)
class Limit:
    param: str  # the rule's parameter
    key: Min | Max  # its rule key
    label: StrOrPromise  # translated where it is shown
    whole: bool = True  # whole numbers; otherwise decimals (temperature)
    low: float = 0
    high: float = MAX_WHOLE

    @property
    def name(self) -> str:
        """The form field's name within its service."""
        return f"{self.param}__{self.key.name}"

    @property
    def target(self) -> tuple[str, str]:
        return self.param, self.key.name


_TEMPERATURE = (
    Limit("temperature", MIN, _("Temperature at least"), whole=False, high=2),
    Limit("temperature", MAX, _("Temperature at most"), whole=False, high=2),
)
LIMITS: dict[str, tuple[Limit, ...]] = {
    "chat_completions": (Limit("max_tokens", MAX, _("Max tokens per answer")), *_TEMPERATURE),
    "responses": (Limit("max_output_tokens", MAX, _("Max tokens per answer")), *_TEMPERATURE),
    "image_generation": (Limit("n", MAX, _("Images per request (n) at most"), low=1),),
    "web_search": (Limit("num_results", MAX, _("Results per search at most"), low=1),),
}
# The help text of a checklist left empty: every model or provider (that the ceiling allows).
EVERY = {"model": _("None ticked: every model."), "provider": _("None ticked: every provider.")}
EVERY_WITHIN = {
    "model": _("None ticked: every model %(ceiling)s allows."),
    "provider": _("None ticked: every provider %(ceiling)s allows."),
}
# The ceilings' names, translated where they are shown (ceiling_name).
CEILING_NAMES = (
    gettext_noop("the license type"),
    gettext_noop("license type"),
    gettext_noop("the course"),
    gettext_noop("course"),
)
# Parameters the form offers as a checklist of their `allowed` values: (param, label, values).
VALUE_LISTS: dict[str, tuple[tuple[str, StrOrPromise, tuple[str, ...]], ...]] = {
    "image_generation": (
        (
            "size",
            _("Image sizes allowed"),
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


def _providers(config: Any) -> Any:
    return config.get("providers") if isinstance(config, dict) else None


def _limit_range(limit: Limit, value: Any) -> tuple[float, float, bool]:
    """The field's range and whether it takes whole numbers only: the limit's own, widened to
    a value written in the JSON view outside it (or a decimal), so that it is shown as it is and
    saving the page unchanged keeps it."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return limit.low, limit.high, limit.whole
    whole = limit.whole and isinstance(value, int)
    return min(limit.low, value), max(limit.high, value), whole


def _number(value: float, whole: bool) -> int | float:
    """Whole numbers are written as JSON integers (1, not 1.0)."""
    if whole or float(value).is_integer():
        return int(value)
    return float(value)


class PolicyForm(forms.Form):
    """Edits a policy document (a license type's) or an overlay under a `ceiling` (a course's).

    `models` and `providers` map each policy service to the model ids and provider slugs the
    catalog offers for it (catalog.selectors.policy_choices and service_providers); `connected`
    says which of them a connection serves now (None: all of them)."""

    shown = forms.CharField(widget=forms.HiddenInput, initial="1", required=False)
    confirm_split = forms.BooleanField(
        required=False,
        label=_("Save anyway: chat and responses may use different models"),
    )

    def __init__(
        self,
        data=None,
        *,
        document: Any,
        models: dict[str, list[str]],
        providers: dict[str, list[str]],
        connected: Connected | None = None,
        ceiling: dict | None = None,
        ceiling_name: str = "the license type",
        disabled: bool = False,
        prefix: str = "policyform",
    ):
        self.document = document
        self.ceiling = ceiling
        self.ceiling_name = ceiling_name  # whose rules the ceiling is, in the help texts
        self.connected = connected
        self.ceiling_policy = _compiled(ceiling)
        self.sections: list[dict] = []
        self.targets: dict[str, tuple[str, str]] = {}  # field name -> (param, rule key)
        self.split_warning = ""  # set by check_split when it refuses
        super().__init__(data, prefix=prefix, initial={"shown": "1"})
        self.scope_section = self._add_scopes(models)
        for service in POLICY_SERVICES:
            if ceiling is not None and service not in _services(ceiling):
                continue  # the license type does not enable it: nothing to offer
            self.sections.append(self._add_service(service, models, providers))
        self.split_notice = _split_words(self._in_force(document))
        if disabled:
            for field in self.fields.values():
                field.disabled = True

    @property
    def submitted(self) -> bool:
        """A post that carried the form (a JSON-only post, e.g. a script's, leaves it out)."""
        return self.is_bound and self.data.get(self.add_prefix("shown")) == "1"

    def _ceiling_rule(self, service: str, param: str) -> dict:
        return _rule(self.ceiling, service, param) if self.ceiling is not None else {}

    def _add(self, section: dict, key: str, field: forms.Field, initial: Any, target) -> None:
        field.initial = initial
        self.fields[key] = field
        self.targets[key] = target
        section["fields"].append(key)

    def _add_scopes(self, models: dict) -> dict:
        """The `models` rules: one checklist per scope, of the models its services offer."""
        section: dict[str, Any] = {"fields": []}
        for scope, label, help_text in SCOPE_FIELDS:
            offered = sorted({m for s in SCOPES[scope] for m in self._offered_models(s, models)})
            if not offered:
                continue
            current = [
                m for m in _scope_rule(self.document, scope).get(ALLOWED.name) or [] if _str(m)
            ]
            choices = self._marked(offered, current, self._served_anywhere(SCOPES[scope]))
            field = self._checklist(label, choices, f"{help_text} {self._every('model')}")
            self._more(field, offered, self._served_anywhere(SCOPES[scope]))
            self._add(section, f"models__{scope}", field, current, (_SCOPE, scope))
        section["bound"] = [self[name] for name in section["fields"]]
        return section

    def _add_service(self, service: str, models: dict, providers: dict) -> dict:
        """The service's section: its fields, each named `<service>__<what>`, and for each the
        rule key it writes (`self.targets`, read by `apply`)."""
        spec = SERVICE_BY_NAME[service]
        section: dict[str, Any] = {"service": service, "label": spec.label, "fields": []}

        def add(name: str, field: forms.Field, initial: Any, target: tuple[str, str]) -> None:
            self._add(section, f"{service}__{name}", field, initial, target)

        enabled = service in _services(self.document)
        add("enabled", forms.BooleanField(required=False, label=spec.label), enabled, _ENABLED)
        field, current = self._model_field(service, models)
        if field is not None:  # search and fetch have no models to choose
            add("models", field, current, ("model", ALLOWED.name))
        field, current = self._provider_field(service, providers)
        add("providers", field, current, _PROVIDERS)
        for limit in LIMITS.get(service, ()):
            value = _rule(self.document, service, limit.param).get(limit.key.name)
            add(limit.name, self._limit_field(service, limit, value), value, limit.target)
        for param, label, values in VALUE_LISTS.get(service, ()):
            choices, current = self._value_choices(service, param, values)
            help_text = gettext("Rule: params.%(param)s.%(key)s. None ticked: any.") % {
                "param": param,
                "key": ALLOWED.name,
            }
            add(
                f"{param}__{ALLOWED.name}",
                self._checklist(label, choices, help_text),
                current,
                (param, ALLOWED.name),
            )
        section["bound"] = [self[name] for name in section["fields"]]
        return section

    def _every(self, what: str) -> str:
        """The help text of a checklist left empty."""
        if self.ceiling is None:
            return EVERY[what] % {}
        return EVERY_WITHIN[what] % {"ceiling": gettext(self.ceiling_name)}

    @staticmethod
    def _checklist(label: StrOrPromise, choices: list, help_text: str) -> forms.MultipleChoiceField:
        field = forms.MultipleChoiceField(
            required=False,
            choices=choices,
            widget=forms.CheckboxSelectMultiple,
            label=label,
            help_text=help_text,
        )
        field.more = frozenset()  # type: ignore[attr-defined]  # see _more
        return field

    @staticmethod
    def _more(field: forms.Field, offered: list[str], served: frozenset[str] | None) -> None:
        """The choices no connection serves now (`field.more`): the template folds them."""
        field.more = frozenset() if served is None else frozenset(offered) - served  # type: ignore[attr-defined]

    @staticmethod
    def _marked(offered: list[str], current: list[str], served: frozenset[str] | None) -> list:
        """Each offered value, marked when no connection serves it; then the document's values
        the catalog does not offer, kept and marked."""
        # Outside the f-strings, where makemessages finds them.
        unserved, unknown = gettext("no connection"), gettext("not in the catalog")
        choices = [
            (m, m if served is None or m in served else f"{m} ({unserved})") for m in offered
        ]
        return choices + [(m, f"{m} ({unknown})") for m in current if m not in offered]

    def _served_anywhere(self, services) -> frozenset[str] | None:
        if self.connected is None:
            return None
        return frozenset().union(*(self.connected.models.get(s, frozenset()) for s in services))

    def _offered_models(self, service: str, models: dict) -> list[str]:
        """The catalog's models for the service that the ceiling admits, if it enables it."""
        if self.ceiling is not None and service not in _services(self.ceiling):
            return []
        return [m for m in models.get(service, ()) if self._ceiling_admits(service, m)]

    def _ceiling_admits(self, service: str, model: str) -> bool:
        """Whether the ceiling's policy would let a request for the model through (every
        model rule in force for the service, `models` rules included)."""
        if self.ceiling_policy is None:
            return True
        try:
            self.ceiling_policy.check_request(service, {"model": model})
        except PolicyDenied:
            return False
        return True

    def _model_field(self, service: str, models: dict) -> tuple[forms.Field | None, list[str]]:
        choices, current = self._model_choices(service, models)
        if not choices:
            return None, current
        help_text = gettext("Rule: params.model.allowed, for this service only.")
        help_text += " " + self._every("model")
        field = self._checklist(_("Allowed models"), choices, help_text)
        served = self.connected.models.get(service) if self.connected is not None else None
        self._more(field, [value for value, _label in choices], served)
        return field, current

    def _model_choices(self, service: str, models: dict) -> tuple[list, list[str]]:
        """The catalog's models within the ceiling, and the document's allowed models (kept,
        marked, when the catalog no longer offers them)."""
        offered = self._offered_models(service, models)
        current = [m for m in _rule(self.document, service, "model").get(ALLOWED.name) or []]
        current = [m for m in current if _str(m)]
        served = self.connected.models.get(service) if self.connected is not None else None
        return self._marked(offered, current, served), current

    def _provider_field(self, service: str, providers: dict) -> tuple[forms.Field, list[str]]:
        choices, current = self._provider_choices(service, providers)
        field = self._checklist(_("Providers"), choices, self._every("provider"))
        connected = self.connected.providers if self.connected is not None else None
        self._more(field, [value for value, _label in choices], connected)
        return field, current

    def _provider_choices(self, service: str, providers: dict) -> tuple[list, list[str]]:
        """The catalog's providers within the ceiling, and the document's (kept, marked, when
        the catalog does not know them); each with its kind in words."""
        slugs = list(providers.get(service, ()))
        ceiling_providers = _providers(
            _services(self.ceiling).get(service) if self.ceiling else None
        )
        if ceiling_providers is not None:
            slugs = [s for s in slugs if s in ceiling_providers]
        current = _providers(_services(self.document).get(service))
        current = [p for p in current if _str(p)] if isinstance(current, list) else []
        unknown = gettext("unknown")
        choices = [(s, self._provider_label(s)) for s in slugs] + [
            (s, f"{s} ({unknown})") for s in current if s not in slugs
        ]
        return choices, current

    def _provider_label(self, slug: str) -> str:
        if self.connected is None:
            return slug
        kind = self.connected.provider_labels.get(slug, "")
        label = f"{slug}: {gettext(kind) if kind else ''}".rstrip(": ")
        if slug not in self.connected.providers:
            label += " (" + gettext("not connected") + ")"
        return label

    def _value_choices(
        self, service: str, param: str, values: tuple[str, ...]
    ) -> tuple[list, list[str]]:
        ceiling_values = self._ceiling_rule(service, param).get(ALLOWED.name)
        offered = [v for v in values if ceiling_values is None or v in ceiling_values]
        current = [
            v
            for v in _rule(self.document, service, param).get(ALLOWED.name) or []
            if isinstance(v, str)
        ]
        return [(v, v) for v in offered] + [(v, v) for v in current if v not in offered], current

    def _limit_field(self, service: str, limit: Limit, value: Any) -> forms.Field:
        """A number field for one bound, its range narrowed by the ceiling's value."""
        low, high, whole = _limit_range(limit, value)
        help_text = gettext("Rule: params.%(param)s.%(key)s. Empty: no limit") % {
            "param": limit.param,
            "key": limit.key.name,
        }
        ceiling_value = self._ceiling_rule(service, limit.param).get(limit.key.name)
        if ceiling_value is not None:
            whose = gettext(self.ceiling_name.removeprefix("the "))
            whose = whose[:1].upper() + whose[1:]
            help_text = gettext("%(whose)s: %(value)s. Empty: %(ceiling)s's") % {
                "whose": whose,
                "value": ceiling_value,
                "ceiling": gettext(self.ceiling_name),
            }
            # The narrower of the form's bound and the ceiling's, as an overlay's would be.
            if limit.key.side == "high":
                high = limit.key.intersect(ceiling_value, high)
            else:
                low = limit.key.intersect(ceiling_value, low)
        field: forms.Field
        if whole:
            field = forms.IntegerField(min_value=math.ceil(low), max_value=math.floor(high))
        else:
            field = forms.FloatField(min_value=low, max_value=high)
        field.required = False
        field.label, field.help_text = limit.label, help_text + "."
        return field

    def clean(self):
        cleaned = super().clean() or {}
        for service in LIMITS:
            low = cleaned.get(f"{service}__temperature__min")
            high = cleaned.get(f"{service}__temperature__max")
            if low is not None and high is not None and MAX.contradicts({"min": low, "max": high}):
                self.add_error(
                    f"{service}__temperature__min", _("The minimum is above the maximum.")
                )
        return cleaned

    def apply(self, document: Any) -> dict:
        """The document with the fields a person changed written onto it (a copy)."""
        result = copy.deepcopy(document) if isinstance(document, dict) else {"version": 1}
        services = result.setdefault("services", {})
        if not isinstance(services, dict):
            services = result["services"] = {}
        changed = set(self.changed_data)
        for name in self.scope_section["fields"]:
            if name in changed:
                _set_scope(result, self.targets[name][1], self.cleaned_data[name])
        for section in self.sections:
            service = section["service"]
            self._apply_enabled(services, service, changed)
            if service not in services:
                continue
            for name in section["fields"]:
                if name in changed and self.targets[name] is not _ENABLED:
                    if services[service] is None:  # `null` enables a service: kept until written
                        services[service] = {}
                    self._apply_field(services[service], name)
        return result

    def _apply_enabled(self, services: dict, service: str, changed: set[str]) -> None:
        """A service ticked on is listed (`{}`, unless it is already); ticked off, it goes."""
        name = f"{service}__enabled"
        if name not in changed:
            return
        if not self.cleaned_data[name]:
            services.pop(service, None)
        elif not isinstance(services.get(service), dict):
            services[service] = {}

    def _apply_field(self, config: dict, name: str) -> None:
        """One changed field written onto its service's config: an empty one removes its key."""
        value = self.cleaned_data[name]
        target = self.targets[name]
        if target is _PROVIDERS:
            if value:
                config["providers"] = list(value)
            else:
                config.pop("providers", None)
            return
        if isinstance(value, list):
            value = list(value) or None
        elif value is not None:
            # (FloatField is a subclass of IntegerField)
            value = _number(value, whole=not isinstance(self.fields[name], forms.FloatField))
        _set_rule(config, *target, value)

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

    def _in_force(self, document: Any) -> Any:
        """The document as requests meet it: under a ceiling, the ceiling narrowed by it."""
        if self.ceiling is None:
            return document
        try:
            return effective_policy(self.ceiling, document)
        except PolicyDocumentError:
            return None

    def check_split(self, document: dict) -> None:
        """ValidationError when chat and responses would allow different models and did not
        before, unless the person ticked `confirm_split`: a model refused in one service would
        be open in the other (issue 37's report). A split saved before is only noted."""
        words = _split_words(self._in_force(document))
        if not words or words == self.split_notice or self.cleaned_data.get("confirm_split"):
            return
        self.split_warning = words
        raise ValidationError(
            _(
                "%(split)s A student could use through one service a model the other refuses. "
                "To allow the same models in both, tick them under “Models for chat and "
                "responses” and untick the lists under chat and under responses; or tick “Save "
                "anyway” at the top of the policy form."
            ),
            params={"split": words},
            code="split",
        )

    def document_for(self, document: Any) -> dict:
        """For a page that saves the result itself (a course's overlay): `apply`, then the
        document's own check, the ceiling's and the text services' agreement; ValidationError
        with the reasons."""
        result = self.apply(document)
        try:
            validate_policy_document(result)
        except PolicyDocumentError as exc:
            raise ValidationError(str(exc)) from exc
        self.check_ceiling(result)
        self.check_split(result)
        return result


def _str(value: Any) -> bool:
    return isinstance(value, str)


def _compiled(document: Any) -> Policy | None:
    if document is None:
        return None
    try:
        return compile_policy(document)
    except PolicyDocumentError:
        return None  # a broken ceiling offers everything; saving reports it (widenings)


def _scope_rule(document: Any, scope: str) -> dict:
    models = document.get(_SCOPE) if isinstance(document, dict) else None
    rule = models.get(scope) if isinstance(models, dict) else None
    return rule if isinstance(rule, dict) else {}


def _set_scope(document: dict, scope: str, values: list[str]) -> None:
    """`models.<scope>.allowed` set, or removed (and the rule and `models` it empties)."""
    models = document.get(_SCOPE)
    if not isinstance(models, dict):
        models = document[_SCOPE] = {}
    rule = models.get(scope)
    if not isinstance(rule, dict):
        rule = models[scope] = {}
    if values:
        rule[ALLOWED.name] = list(values)
    else:
        rule.pop(ALLOWED.name, None)
    if not rule:
        models.pop(scope)
    if not models:
        document.pop(_SCOPE)


def _models_in_words(rules: list[dict]) -> str:
    if not rules:
        return str(_("every model"))
    if rules[0] == NOTHING_PASSES:
        return str(_("no model"))
    allowed = rules[0].get(ALLOWED.name)
    words = ", ".join(map(str, allowed)) if allowed else str(_("every model"))
    if len(rules) > 1 or set(rules[0]) - {ALLOWED.name}:
        words += " " + str(_("(with rules of the JSON view)"))
    return words


def _split_words(document: Any) -> str:
    """What chat and responses allow when they differ, in a sentence; empty when they agree
    (or the document cannot be evaluated: saving it is refused with the reason)."""
    try:
        validate_policy_document(document)
        split = text_split(document)
    except (PolicyDocumentError, RecursionError, TypeError):
        return ""
    if split is None:
        return ""
    chat, responses = (
        f"{SERVICE_BY_NAME[name].purpose}: {_models_in_words(rules)}"
        for name, rules in zip(TEXT_SERVICES, split, strict=True)
    )
    return str(_("Chat and responses allow different models (%(chat)s; %(responses)s).")) % {
        "chat": chat,
        "responses": responses,
    }


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
