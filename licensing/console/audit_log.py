"""Reading the audit log (licensing.models.AuditEvent), for its admin page and
/manage/v1/audit alike: the CSV's columns and a one-line summary of an event's detail."""

from __future__ import annotations

import json

# (header, queryset path), as the ledger's export (licensing.console.review.csv_chunks).
AUDIT_CSV_COLUMNS = (
    ("id", "id"),
    ("created_at", "created_at"),
    ("institution", "institution__name"),
    ("actor", "actor_name"),
    ("action", "action"),
    ("target", "target"),
    ("detail", "detail"),
    ("ip", "ip"),
    ("user_agent", "user_agent"),
)


def _shown(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def detail_summary(detail) -> str:
    """`role: reviewer → admin; active: True → False`, or the detail's keys and values."""
    if not isinstance(detail, dict):
        return _shown(detail)
    before, after = detail.get("before"), detail.get("after")
    if isinstance(after, dict):
        before = before if isinstance(before, dict) else {}
        parts = []
        for key, value in after.items():
            if key in before:
                parts.append(f"{key}: {_shown(before[key])} → {_shown(value)}")
            else:
                parts.append(f"{key}: {_shown(value)}")
        rest = {k: v for k, v in detail.items() if k not in ("before", "after")}
        parts.extend(f"{k}: {_shown(v)}" for k, v in rest.items())
        return "; ".join(parts)
    return "; ".join(f"{k}: {_shown(v)}" for k, v in detail.items())
