"""The live feed of ledger rows (stub: filled in by the live-feed work).

`publish` is called by the group commit once a batch of rows is committed. It must never block
the request path and never raise."""

from __future__ import annotations


def publish(entries) -> None:
    """Tell the live feed's viewers about committed ledger rows (stub: nothing yet)."""


def admin_urls(model_admin) -> list:
    """The live feed's admin pages, under the transactions admin (stub: none yet)."""
    return []
