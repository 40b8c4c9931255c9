"""The usage page: credits and requests per day and the top spenders (stub)."""

from __future__ import annotations


def admin_urls(model_admin) -> list:
    """The usage page's admin URLs, under the transactions admin (stub: none yet)."""
    return []
