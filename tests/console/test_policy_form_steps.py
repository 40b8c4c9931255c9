"""The policy form's steps (licensing.console.policy_form) without the admin or a database: the
checklists' choices, a limit's range and the ceiling's narrowing of it (the rule key's own
intersection), the rule key each field writes, and `apply`'s two steps. The form through the
admin: tests/console/test_policy_form.py."""

from __future__ import annotations

from django import forms

from licensing.console.policy_form import (
    LIMITS,
    MAX,
    MIN,
    Limit,
    PolicyForm,
    _limit_range,
)
from licensing.rules.keys import RULES

MODELS = {"chat_completions": ["gpt-4o", "gpt-4o-mini"], "image_generation": ["img-1"]}
PROVIDERS = {"chat_completions": ["direct", "cloud"], "image_generation": ["direct"]}
DOCUMENT = {
    "version": 1,
    "services": {
        "chat_completions": {
            "providers": ["direct", "gone"],
            "params": {"model": {"allowed": ["gpt-4o", "old"]}, "temperature": {"min": 0.5}},
        },
        "image_generation": None,
    },
}


def _form(data=None, document=DOCUMENT, **kwargs) -> PolicyForm:
    return PolicyForm(data, document=document, models=MODELS, providers=PROVIDERS, **kwargs)


def test_the_limits_keys_come_from_the_rule_key_table():
    assert MIN is RULES["min"] and MAX is RULES["max"]
    for limits in LIMITS.values():
        for limit in limits:
            assert limit.key is RULES[limit.key.name]
            assert limit.name == f"{limit.param}__{limit.key.name}"


def test_each_field_knows_the_rule_key_it_writes():
    form = _form()
    assert form.targets["chat_completions__models"] == ("model", "allowed")
    assert form.targets["chat_completions__max_tokens__max"] == ("max_tokens", "max")
    assert form.targets["chat_completions__temperature__min"] == ("temperature", "min")
    assert form.targets["image_generation__size__allowed"] == ("size", "allowed")
    assert form.targets["models__text"] == ("models", "text")
    assert form.targets["models__all"] == ("models", "all")
    assert set(form.targets) == set(form.fields) - {"shown", "confirm_split"}


def test_checklists_keep_what_the_catalog_no_longer_offers():
    form = _form()
    choices, current = form._model_choices("chat_completions", MODELS)
    assert choices == [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("old", "old (not in the catalog)"),
    ]
    assert current == ["gpt-4o", "old"]
    choices, current = form._provider_choices("chat_completions", PROVIDERS)
    assert choices[-1] == ("gone", "gone (unknown)") and current == ["direct", "gone"]
    assert form._provider_choices("image_generation", PROVIDERS) == ([("direct", "direct")], [])


def test_a_limit_range_widens_to_a_value_written_in_json():
    limit = Limit("n", MAX, "n", low=1)
    assert _limit_range(limit, None) == (1, 2**53, True)
    assert _limit_range(limit, 0) == (0, 2**53, True)
    assert _limit_range(limit, 2.5) == (1, 2**53, False)  # a decimal: shown as it is
    assert _limit_range(limit, True) == (1, 2**53, True)  # not a number


def test_the_ceiling_narrows_a_limit_the_way_an_overlay_is_narrowed():
    ceiling = {
        "version": 1,
        "services": {
            "chat_completions": {
                "params": {"max_tokens": {"max": 500}, "temperature": {"min": 0.2, "max": 1}}
            }
        },
    }
    form = _form(document={"version": 1, "services": {"chat_completions": {}}}, ceiling=ceiling)
    field = form.fields["chat_completions__max_tokens__max"]
    assert isinstance(field, forms.IntegerField) and field.max_value == 500
    assert field.help_text == "License type: 500. Empty: the license type's."
    low = form.fields["chat_completions__temperature__min"]
    assert isinstance(low, forms.FloatField) and (low.min_value, low.max_value) == (0.2, 2)
    high = form.fields["chat_completions__temperature__max"]
    assert isinstance(high, forms.FloatField) and (high.min_value, high.max_value) == (0, 1)
    assert "image_generation__enabled" not in form.fields  # the ceiling does not enable it


def test_apply_switches_services_and_writes_only_changed_fields():
    form = _form()
    data = {"policyform-shown": "1", "policyform-chat_completions__enabled": "on"}
    data["policyform-chat_completions__models"] = ["gpt-4o-mini"]
    data["policyform-chat_completions__providers"] = ["direct", "gone"]
    data["policyform-chat_completions__temperature__min"] = "0.5"
    data["policyform-chat_completions__max_tokens__max"] = "100"
    data["policyform-responses__enabled"] = "on"
    form = _form(data)
    assert form.is_valid(), form.errors
    result = form.apply(DOCUMENT)
    assert result["services"]["chat_completions"] == {
        "providers": ["direct", "gone"],
        "params": {
            "model": {"allowed": ["gpt-4o-mini"]},
            "temperature": {"min": 0.5},
            "max_tokens": {"max": 100},
        },
    }
    assert result["services"]["responses"] == {}
    assert "image_generation" not in result["services"]  # unticked: switched off
    assert DOCUMENT["services"]["image_generation"] is None  # a copy was written


def test_apply_field_steps():
    form = _form()
    form.cleaned_data = {
        "chat_completions__providers": [],
        "chat_completions__temperature__min": None,
        "chat_completions__max_tokens__max": 7,
    }
    config = {"providers": ["direct"], "params": {"temperature": {"min": 0.5}}}
    form._apply_field(config, "chat_completions__providers")
    form._apply_field(config, "chat_completions__temperature__min")
    assert config == {}  # empty fields remove their keys, and the rule and params they empty
    form._apply_field(config, "chat_completions__max_tokens__max")
    assert config == {"params": {"max_tokens": {"max": 7}}}
    services = {"embeddings": None}
    form.cleaned_data = {"embeddings__enabled": True, "responses__enabled": False}
    form._apply_enabled(services, "embeddings", {"embeddings__enabled"})
    form._apply_enabled(services, "responses", {"responses__enabled"})
    assert services == {"embeddings": {}}


def test_a_minimum_above_the_maximum_is_a_form_error():
    data = {
        "policyform-shown": "1",
        "policyform-chat_completions__enabled": "on",
        "policyform-chat_completions__temperature__min": "1.5",
        "policyform-chat_completions__temperature__max": "1",
    }
    form = _form(data)
    assert not form.is_valid()
    assert form.errors["chat_completions__temperature__min"] == [
        "The minimum is above the maximum."
    ]
