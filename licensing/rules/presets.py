"""License-type presets by age group (docs/presets.md): a starting policy document and
guardrails a school adapts. Defaults chosen for a school's duty of care, not legal advice.
Pure data: each preset's document is checked like any policy (licensing.rules.policy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

# Small, inexpensive chat models of the default catalog (catalog/defaults.py).
SMALL_MODELS = ["gpt-4o-mini", "mistral-small-latest", "claude-haiku-4-5"]
MODERATED = {"moderation": True}


@dataclass(frozen=True)
class Preset:
    name: str
    label: Promise
    policy: dict[str, Any]
    guardrails: dict[str, Any]


def _chat(max_tokens: int) -> dict[str, Any]:
    return {"params": {"max_tokens": {"max": max_tokens}, "temperature": {"max": 1}}}


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            name="primary",
            label=_("Primary pupils (under 13)"),
            policy={
                "version": 1,
                "models": {"text": {"allowed": SMALL_MODELS}},
                "services": {"chat_completions": _chat(800)},
            },
            guardrails={"input": MODERATED, "output": MODERATED},
        ),
        Preset(
            name="secondary",
            label=_("Secondary pupils (13 to 18)"),
            policy={
                "version": 1,
                "models": {"text": {"allowed": [*SMALL_MODELS, "gpt-4.1"]}},
                "services": {
                    "chat_completions": _chat(4000),
                    "responses": {"params": {"max_output_tokens": {"max": 4000}}},
                    "embeddings": {},
                    "web_search": {"params": {"num_results": {"max": 10}}},
                },
            },
            guardrails={"input": MODERATED},
        ),
        Preset(
            name="adult",
            label=_("Adult learners"),
            policy={
                "version": 1,
                "services": {
                    "chat_completions": {"params": {"max_tokens": {"max": 16000}}},
                    "responses": {"params": {"max_output_tokens": {"max": 16000}}},
                    "embeddings": {},
                    "image_generation": {"params": {"n": {"max": 2}}},
                    "web_search": {"params": {"num_results": {"max": 20}}},
                    "fetch": {},
                },
            },
            guardrails={},
        ),
        Preset(
            name="staff",
            label=_("Staff"),
            policy={
                "version": 1,
                "services": {
                    name: {}
                    for name in (
                        "chat_completions",
                        "responses",
                        "embeddings",
                        "image_generation",
                        "web_search",
                        "fetch",
                    )
                },
            },
            guardrails={},
        ),
    )
}


def preset_choices() -> list[tuple[str, Promise]]:
    return [(preset.name, preset.label) for preset in PRESETS.values()]
