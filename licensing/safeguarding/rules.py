"""Which categories of the flagged texts raise an alert (pure: no ORM). A category the
institution chose raises one when the provider flagged it, or when its score is at or above the
institution's threshold for it; a category not chosen raises none."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """What one text's moderation said (inference's ModerationResult, as the wing sees it)."""

    text: str
    categories: Mapping[str, bool]
    scores: Mapping[str, float]


def raised_by(
    verdict: Verdict, chosen: Iterable[str], thresholds: Mapping[str, float]
) -> list[str]:
    """The chosen categories this text raises an alert for, in the order chosen."""
    raised = []
    for category in chosen:
        threshold = thresholds.get(category)
        score = verdict.scores.get(category, 0.0)
        if verdict.categories.get(category) or (threshold is not None and score >= threshold):
            raised.append(category)
    return raised


def top_scores(verdicts: Iterable[Verdict]) -> dict[str, float]:
    """Each category's highest score among the texts (what the alert shows)."""
    scores: dict[str, float] = {}
    for verdict in verdicts:
        for category, score in verdict.scores.items():
            scores[category] = max(score, scores.get(category, 0.0))
    return scores
