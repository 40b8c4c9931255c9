"""Guardrails per license type: regex block-lists on what goes to and comes from a provider.

    {"input": {"patterns": ["(?i)social security number"]},
     "output": {"patterns": ["(?i)secret"]}}

Patterns are searched (not full-matched) in every text of the request or answer.
`"moderation": true` in a stage also sends those texts to the `direct` provider's moderation
endpoint; the call itself lives in inference (this app does not import it) and the pipeline
makes it when `moderates(stage)` says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from core.errors import GUARDRAIL_BLOCKED, BadRequest

STAGES = ("input", "output")


class GuardrailConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Guardrails:
    input: tuple[re.Pattern, ...] = ()
    output: tuple[re.Pattern, ...] = ()
    moderation: frozenset[str] = frozenset()  # stages with a moderation call

    def moderates(self, stage: str) -> bool:
        return stage in self.moderation

    def check(self, stage: str, texts: Iterable[str]) -> None:
        patterns = self.input if stage == "input" else self.output
        if not patterns:
            return
        for text in texts:
            if text and any(p.search(text) for p in patterns):
                raise BadRequest(GUARDRAIL_BLOCKED)


NO_GUARDRAILS = Guardrails()


def compile_guardrails(config) -> Guardrails:
    if not config:
        return NO_GUARDRAILS
    if not isinstance(config, dict):
        raise GuardrailConfigError("Guardrails must be a JSON object")
    unknown = sorted(set(config) - set(STAGES))
    if unknown:
        raise GuardrailConfigError(f"Unknown guardrail stages {unknown}; use {list(STAGES)}")
    compiled = {}
    moderated: set[str] = set()
    for stage in STAGES:
        compiled[stage], moderation = _compile_stage(stage, config.get(stage) or {})
        if moderation:
            moderated.add(stage)
    return Guardrails(**compiled, moderation=frozenset(moderated))


def _compile_stage(stage: str, stage_config: Any) -> tuple[tuple[re.Pattern, ...], bool]:
    """One stage's patterns, compiled, and whether it asks for moderation."""
    if not isinstance(stage_config, dict):
        raise GuardrailConfigError(f"{stage}: must be an object")
    extra = sorted(set(stage_config) - {"patterns", "moderation"})
    if extra:
        raise GuardrailConfigError(f"{stage}: unknown keys {extra}")
    moderation = stage_config.get("moderation", False)
    if not isinstance(moderation, bool):
        raise GuardrailConfigError(f"{stage}.moderation: must be true or false")
    patterns = stage_config.get("patterns", [])
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise GuardrailConfigError(f"{stage}.patterns: must be a list of regexes")
    try:
        return tuple(re.compile(p) for p in patterns), moderation
    except re.error as exc:
        raise GuardrailConfigError(f"{stage}.patterns: {exc}") from exc
