"""Everything the gateway holds about a student, for their own download from the portal (issue
39, GDPR Art. 15: the right of access): who they are to the gateway, their keys, their courses,
their consents and every ledger row of their requests. Prompts and answers are not among them:
the gateway never stores them (README, "Data protection").

One JSON document with every part, or one CSV per part (a spreadsheet holds one table); the
ledger's part in the review CSV's columns (licensing.console.review), read a page at a time, so
a student with a year of requests downloads it in constant memory.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from core import jsonio
from core.crypto import reveal

from ..console.review import iso_utc, ledger_pages, safe_cell
from ..models import ApiKey, CourseMember, EndUser, SafeguardingAlert, Transaction

PARTS = ("transactions", "keys", "courses", "consents", "alerts")


def _instant(value: datetime | None) -> str | None:
    return iso_utc(value) if value is not None else None


def person(end_user: EndUser) -> dict[str, Any]:
    """Who they are to the gateway: their end user row and, signed in, their account's names."""
    license = end_user.license
    found: dict[str, Any] = {
        "subject": end_user.subject,
        "institution": license.institution.name,
        "license": license.name,
        "active": end_user.active,
        "language": end_user.language,
        "created_at": _instant(end_user.created_at),
    }
    user = end_user.user
    if user is not None:
        found["account"] = {
            "username": user.get_username(),
            "email": user.email,
            "first_name": user.first_name,
            "last_name": user.last_name,
        }
    return found


def keys(end_user: EndUser) -> list[dict[str, Any]]:
    """Their keys (the prefix only: the key itself is never stored)."""
    rows = ApiKey.objects.filter(end_user=end_user).select_related("course").order_by("id")
    return [
        {
            "prefix": row.prefix,
            "name": row.name,
            "kind": row.kind,
            "course": row.course.code if row.course is not None else None,
            "active": row.active,
            "created_at": _instant(row.created_at),
            "expires_at": _instant(row.expires_at),
            "last_used_at": _instant(row.last_used_at),
        }
        for row in rows
    ]


def courses(end_user: EndUser) -> list[dict[str, Any]]:
    """The courses they are a member of, and what the teachers set for them there."""
    rows = CourseMember.objects.filter(end_user=end_user).select_related("course")
    return [
        {
            "code": row.course.code,
            "name": row.course.name,
            "member_since": _instant(row.created_at),
            "paused": row.paused,
            "top_up": row.top_up,
            "top_up_window_start": _instant(row.top_up_window_start),
        }
        for row in rows.order_by("course__code")
    ]


def consents(end_user: EndUser) -> list[dict[str, Any]]:
    """What they agreed to, and when."""
    if end_user.terms_accepted_at is None:
        return []
    return [{"consent": "terms_of_use", "given_at": _instant(end_user.terms_accepted_at)}]


def alerts(end_user: EndUser) -> list[dict[str, Any]]:
    """The safeguarding alerts about them once closed (an open one is the safeguarding
    contacts' still): when, which course, the categories, and the flagged messages themselves.
    The staff's notes are not theirs to read here (docs/decisions/erasure.md)."""
    rows = SafeguardingAlert.objects.filter(
        end_user=end_user, status=SafeguardingAlert.Status.CLOSED
    ).select_related("course")
    return [
        {
            "raised_at": _instant(row.created_at),
            "course": row.course.code if row.course is not None else None,
            "direction": row.direction,
            "categories": row.categories,
            "messages": json.loads(reveal(row.content) or "[]"),
            "closed_at": _instant(row.handled_at),
        }
        for row in rows.order_by("created_at", "id")
    ]


def transactions(end_user: EndUser):
    return Transaction.objects.filter(end_user=end_user)


def json_chunks(end_user: EndUser, now: datetime) -> Iterator[str]:
    """The whole export as one JSON document, in pieces (the ledger's rows a page at a time)."""
    head = {
        "exported_at": iso_utc(now),
        "person": person(end_user),
        "keys": keys(end_user),
        "courses": courses(end_user),
        "consents": consents(end_user),
        "safeguarding_alerts": alerts(end_user),
    }
    opening = jsonio.dumps(head).decode()
    yield opening[:-1] + ',"transactions":['
    first = True
    for page in ledger_pages(transactions(end_user)):
        rows = ",".join(jsonio.dumps(row).decode() for row in page)
        yield rows if first else "," + rows
        first = False
    yield "]}"


class _Line:
    def write(self, value):
        return value


def csv_rows(part: str, end_user: EndUser) -> Iterator[str]:
    """A small part (keys, courses, consents) as CSV lines; every cell spreadsheet-safe."""
    rows = {"keys": keys, "courses": courses, "consents": consents, "alerts": alerts}[part](
        end_user
    )
    headers = {
        "keys": ("prefix", "name", "kind", "course", "active", "created_at", "expires_at",
                 "last_used_at"),
        "courses": ("code", "name", "member_since", "paused", "top_up", "top_up_window_start"),
        "consents": ("consent", "given_at"),
        "alerts": ("raised_at", "course", "direction", "categories", "messages", "closed_at"),
    }[part]  # fmt: skip
    writer = csv.writer(_Line())
    yield writer.writerow(headers)
    for row in rows:
        yield writer.writerow([_cell(row[h]) for h in headers])


def _cell(value) -> Any:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        value = jsonio.dumps(value).decode()
    return safe_cell(value)


def filename(part: str, extension: str, now: datetime) -> str:
    return f"my-data-{part}-{now:%Y%m%d-%H%M%S}.{extension}"
